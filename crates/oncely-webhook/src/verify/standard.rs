//! Standard Webhooks (the spec's `v1` HMAC-SHA256 scheme): the signed content is
//! `{webhook-id}.{webhook-timestamp}.{body}`, the key is the base64 after `whsec_`, and
//! `webhook-signature` holds space-separated `v1,<base64>` entries (several during a
//! rotation; other versions such as `v1a` are skipped). Svix's branded `svix-*` headers are
//! read when the `webhook-*` ones are absent.

use super::{Check, Verified};
use crate::rejection::Rejection;
use crate::secret::{Keys, SecretError};
use base64::Engine;
use base64::alphabet::STANDARD as ALPHABET;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD as B64};
use http::{HeaderMap, HeaderValue};

const ID: [&str; 2] = ["webhook-id", "svix-id"];
const TIMESTAMP: [&str; 2] = ["webhook-timestamp", "svix-timestamp"];
const SIGNATURE: [&str; 2] = ["webhook-signature", "svix-signature"];

/// Standard base64 with or without its padding (`whsec_` secrets are shown either way; the
/// spec's Python library pads them before decoding).
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &ALPHABET,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The keys of `whsec_<base64>` secrets.
pub(super) fn keys<I, S>(secrets: I) -> Result<Keys, SecretError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut keys = Vec::new();
    for (index, secret) in secrets.into_iter().enumerate() {
        let secret = secret.as_ref().trim();
        let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
        let key = LENIENT
            .decode(encoded)
            .map_err(|e| SecretError::NotBase64 {
                index,
                why: e.to_string(),
            })?;
        keys.push(key);
    }
    Keys::new(keys)
}

/// The first of the spec's header and Svix's that is present.
fn either<'a>(
    check: &'a Check<'_>,
    names: [&'static str; 2],
) -> Result<Option<&'a str>, Rejection> {
    match check.header(names[0])? {
        Some(value) => Ok(Some(value)),
        None => check.header(names[1]),
    }
}

pub(super) fn verify(check: &Check<'_>) -> Result<Verified, Rejection> {
    let signatures = either(check, SIGNATURE)?.ok_or(Rejection::MissingSignature(SIGNATURE[0]))?;
    let id = either(check, ID)?.ok_or(Rejection::MissingHeader(ID[0]))?;
    let timestamp = either(check, TIMESTAMP)?.ok_or(Rejection::MissingHeader(TIMESTAMP[0]))?;
    let secs: i64 = timestamp
        .parse()
        .map_err(|_| Rejection::MalformedHeader(TIMESTAMP[0]))?;
    check.timely(secs)?;
    let candidates: Vec<Vec<u8>> = signatures
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, sig)| LENIENT.decode(sig).ok())
        .collect();
    let secs = secs.to_string();
    let content: [&[u8]; 5] = [id.as_bytes(), b".", secs.as_bytes(), b".", check.body];
    if !check.keys.any_matches(&content, &candidates) {
        return Err(Rejection::BadSignature);
    }
    check.verified(id, None, &[])
}

pub(super) fn sign(keys: &Keys, id: &str, secs: i64, body: &[u8]) -> HeaderMap {
    let secs = secs.to_string();
    let tag = keys.sign(&[id.as_bytes(), b".", secs.as_bytes(), b".", body]);
    let mut headers = HeaderMap::new();
    headers.insert(ID[0], value(id));
    headers.insert(TIMESTAMP[0], value(&secs));
    headers.insert(SIGNATURE[0], value(&format!("v1,{}", B64.encode(tag))));
    headers
}

/// A header value of text the caller chose; one that is not a valid header value (a control
/// character) is sent empty, and the receiver refuses it.
pub(super) fn value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use crate::Verifier;
    use std::time::{Duration, UNIX_EPOCH};

    /// The example of the spec's reference libraries (standard-webhooks, `test_sign`).
    #[test]
    fn spec_vector() {
        let v = Verifier::standard_webhooks(["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]).unwrap();
        let at = UNIX_EPOCH + Duration::from_secs(1649367553);
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        let headers = v.sign("msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", body, at);
        assert_eq!(
            headers["webhook-signature"],
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
        let verified = v.verify_at(&headers, body, at).unwrap();
        assert_eq!(verified.id().as_str(), "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk");
    }

    /// Svix's branded headers, several signatures (an unknown version, a wrong `v1`, the
    /// right one) and an unpadded secret.
    #[test]
    fn svix_headers_and_several_signatures() {
        let v = Verifier::standard_webhooks(["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]).unwrap();
        let at = UNIX_EPOCH + Duration::from_secs(1649367553);
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "svix-id",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk".parse().unwrap(),
        );
        headers.insert("svix-timestamp", "1649367553".parse().unwrap());
        let several = "v1a,AAAA v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU= v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";
        headers.insert("svix-signature", several.parse().unwrap());
        assert!(v.verify_at(&headers, body, at).is_ok());
        let wrong_only = "v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU=";
        headers.insert("svix-signature", wrong_only.parse().unwrap());
        assert_eq!(
            v.verify_at(&headers, body, at).unwrap_err(),
            crate::Rejection::BadSignature
        );
    }
}
