//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the body keyed by the
//! webhook's secret. The id is `X-GitHub-Delivery` (a GUID, kept on redelivery); it is
//! scoped to the source by the inbox key (the source's consumer name), since delivery ids
//! are not unique across GitHub Apps. GitHub signs no timestamp: a captured request stays
//! valid, and only the inbox turns its replay into a duplicate (see docs/webhooks.md).

use super::standard::value;
use super::{Check, Verified};
use crate::rejection::Rejection;
use crate::secret::Keys;
use http::HeaderMap;

const SIGNATURE: &str = "x-hub-signature-256";
const DELIVERY: &str = "x-github-delivery";

/// Headers handed to the handler: what the event is and which hook sent it.
const PASSED: [&str; 4] = [
    "x-github-event",
    "x-github-hook-id",
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
];

pub(super) fn verify(check: &Check<'_>) -> Result<Verified, Rejection> {
    let header = check
        .header(SIGNATURE)?
        .ok_or(Rejection::MissingSignature(SIGNATURE))?;
    let hex_tag = header
        .strip_prefix("sha256=")
        .ok_or(Rejection::MalformedHeader(SIGNATURE))?;
    let candidates: Vec<Vec<u8>> = hex::decode(hex_tag).ok().into_iter().collect();
    if !check.keys.any_matches(&[check.body], &candidates) {
        return Err(Rejection::BadSignature);
    }
    let id = check.required(DELIVERY)?;
    check.verified(id, None, &PASSED)
}

pub(super) fn sign(keys: &Keys, id: &str, body: &[u8]) -> HeaderMap {
    let tag = keys.sign(&[body]);
    let mut headers = HeaderMap::new();
    headers.insert(SIGNATURE, value(&format!("sha256={}", hex::encode(tag))));
    headers.insert(DELIVERY, value(id));
    headers
}

#[cfg(test)]
mod tests {
    use crate::{Rejection, Verifier};

    /// GitHub's documented test vector ("Validating webhook deliveries").
    #[test]
    fn documented_vector() {
        let v = Verifier::github(["It's a Secret to Everybody"]).unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-hub-signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
                .parse()
                .unwrap(),
        );
        headers.insert(
            "x-github-delivery",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".parse().unwrap(),
        );
        headers.insert("x-github-event", "ping".parse().unwrap());
        let verified = v.verify(&headers, b"Hello, World!").unwrap();
        assert_eq!(
            verified.id().as_str(),
            "72d3162e-cc78-11e3-81ab-4c9367dc0958"
        );
        assert_eq!(verified.headers()["x-github-event"], "ping");
        assert_eq!(
            v.verify(&headers, b"Hello, World?").unwrap_err(),
            Rejection::BadSignature
        );
        headers.remove("x-github-delivery");
        assert_eq!(
            v.verify(&headers, b"Hello, World!").unwrap_err(),
            Rejection::MissingHeader("x-github-delivery")
        );
    }
}
