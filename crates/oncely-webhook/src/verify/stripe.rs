//! Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]` (several `v1` while a
//! secret is rolled; `v0` and unknown schemes are skipped), the HMAC-SHA256 of `{t}.{body}`
//! keyed by the whole `whsec_…` text. The event id is the body's `id`, its `created` the
//! source time.

use super::standard::value;
use super::{Check, Verified};
use crate::rejection::Rejection;
use crate::secret::Keys;
use http::HeaderMap;
use std::time::{Duration, UNIX_EPOCH};

const SIGNATURE: &str = "stripe-signature";

/// The two fields of a Stripe event the receiver needs.
#[derive(serde::Deserialize)]
struct Event {
    id: String,
    #[serde(default)]
    created: Option<u64>,
}

pub(super) fn verify(check: &Check<'_>) -> Result<Verified, Rejection> {
    let header = check
        .header(SIGNATURE)?
        .ok_or(Rejection::MissingSignature(SIGNATURE))?;
    let mut t = None;
    let mut candidates = Vec::new();
    for item in header.split(',') {
        match item.trim().split_once('=') {
            Some(("t", secs)) if t.is_none() => t = Some(secs),
            Some(("v1", sig)) => candidates.extend(hex::decode(sig).ok()),
            _ => {}
        }
    }
    let t = t.ok_or(Rejection::MalformedHeader(SIGNATURE))?;
    let secs: i64 = t
        .parse()
        .map_err(|_| Rejection::MalformedHeader(SIGNATURE))?;
    check.timely(secs)?;
    if !check
        .keys
        .any_matches(&[t.as_bytes(), b".", check.body], &candidates)
    {
        return Err(Rejection::BadSignature);
    }
    let event: Event = serde_json::from_slice(check.body)
        .map_err(|e| Rejection::BadId(format!("body is not a Stripe event with an `id`: {e}")))?;
    let created = event
        .created
        .and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s)));
    check.verified(&event.id, created, &[])
}

pub(super) fn sign(keys: &Keys, secs: i64, body: &[u8]) -> HeaderMap {
    let t = secs.to_string();
    let tag = keys.sign(&[t.as_bytes(), b".", body]);
    let mut headers = HeaderMap::new();
    headers.insert(SIGNATURE, value(&format!("t={t},v1={}", hex::encode(tag))));
    headers
}

#[cfg(test)]
mod tests {
    use crate::{Rejection, Verifier};
    use std::time::{Duration, SystemTime};

    #[test]
    fn several_v1_and_a_rolled_secret() {
        let old = Verifier::stripe(["whsec_old"]).unwrap();
        let both = Verifier::stripe(["whsec_new", "whsec_old"]).unwrap();
        let body = br#"{"id":"evt_1","created":1700000000,"type":"x"}"#;
        let now = SystemTime::now();
        let signed = old.sign("ignored", body, now);
        let header = signed["stripe-signature"].to_str().unwrap();
        let (t, v1) = header.split_once(',').unwrap();
        let mut headers = http::HeaderMap::new();
        let several = format!("{t},v1={},{v1},v0=abc", "00".repeat(32));
        headers.insert("stripe-signature", several.parse().unwrap());
        let verified = both.verify_at(&headers, body, now).unwrap();
        assert_eq!(verified.id().as_str(), "evt_1");
        assert!(verified.source_time().is_some());
        let late = now + Duration::from_secs(301);
        assert_eq!(
            both.verify_at(&headers, body, late).unwrap_err(),
            Rejection::Stale
        );
        let new_only = Verifier::stripe(["whsec_new"]).unwrap();
        assert_eq!(
            new_only.verify_at(&headers, body, now).unwrap_err(),
            Rejection::BadSignature
        );
    }
}
