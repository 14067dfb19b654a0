//! The `Idempotency-Key` header and the request fingerprint.

use http::{HeaderMap, HeaderName, Method, Uri};
use oncely_core::{IdError, MessageId};
use sha2::{Digest, Sha256};

/// The request header carrying the key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The response header marking a replayed response (`Idempotent-Replayed: true`).
pub const REPLAYED: &str = "idempotent-replayed";

/// The response header of a replay whose body was not stored (`Idempotent-Body: omitted`):
/// [`OmitBody`](crate::OmitBody), [`IdempotencyLayer::store_body`](crate::IdempotencyLayer::store_body).
pub const BODY_OMITTED: &str = "idempotent-body";

/// Why a request's key is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// More than one `Idempotency-Key` header.
    Repeated,
    /// The value is not a valid id (empty, too long, control characters, not UTF-8).
    Invalid(IdError),
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Repeated => f.write_str("more than one Idempotency-Key header"),
            Self::Invalid(e) => write!(f, "invalid Idempotency-Key: {e}"),
        }
    }
}

/// The request's key: `Ok(None)` without the header, an error when it is repeated or not a
/// valid oncely id ([`MessageId`]: 1..=255 bytes of UTF-8 without control characters). The
/// draft makes the value a structured-field string (`"abc"`); a bare token (`abc`) is accepted
/// too.
///
/// ```
/// use http::HeaderMap;
/// let mut h = HeaderMap::new();
/// assert_eq!(oncely_http::parse_key(&h).unwrap(), None);
/// h.insert("idempotency-key", "\"8e03978e-40d5\"".parse().unwrap());
/// assert_eq!(oncely_http::parse_key(&h).unwrap().unwrap().as_str(), "8e03978e-40d5");
/// h.insert("idempotency-key", "\"\"".parse().unwrap());
/// assert!(oncely_http::parse_key(&h).is_err());
/// ```
pub fn parse_key(headers: &HeaderMap) -> Result<Option<MessageId>, KeyError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    let raw = value.as_bytes();
    let unquoted = match raw {
        [b'"', inner @ .., b'"'] => unescape(inner),
        _ => raw.to_vec(),
    };
    MessageId::parse(&unquoted)
        .map(Some)
        .map_err(KeyError::Invalid)
}

/// A structured-field string's content: `\"` and `\\` unescaped.
fn unescape(inner: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match (b, bytes.as_slice().first()) {
            (b'\\', Some(&next @ (b'"' | b'\\'))) => {
                out.push(next);
                bytes.next();
            }
            _ => out.push(b),
        }
    }
    out
}

/// The request fingerprint: hex SHA-256 of the method, the path with its query, the body's
/// SHA-256 and the values of `headers` (in the given order). A key reused with a different
/// fingerprint is answered 422.
///
/// ```
/// use http::{HeaderMap, Method, Uri};
/// let uri: Uri = "/orders".parse().unwrap();
/// let h = HeaderMap::new();
/// let a = oncely_http::fingerprint(&Method::POST, &uri, &h, &[], b"{}");
/// assert_eq!(a, oncely_http::fingerprint(&Method::POST, &uri, &h, &[], b"{}"));
/// assert_ne!(a, oncely_http::fingerprint(&Method::POST, &uri, &h, &[], b"{ }"));
/// assert_ne!(a, oncely_http::fingerprint(&Method::PUT, &uri, &h, &[], b"{}"));
/// ```
pub fn fingerprint(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    fingerprinted: &[HeaderName],
    body: &[u8],
) -> String {
    let mut h = Sha256::new();
    h.update(method.as_str());
    h.update([0]);
    h.update(uri.path_and_query().map_or(uri.path(), |p| p.as_str()));
    h.update([0]);
    h.update(Sha256::digest(body));
    for name in fingerprinted {
        h.update(name.as_str());
        h.update([0]);
        for value in headers.get_all(name) {
            h.update(value.as_bytes());
            h.update([1]);
        }
        h.update([0]);
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(IDEMPOTENCY_KEY, http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn keys_are_validated_like_message_ids() {
        assert_eq!(
            parse_key(&with(&[b"abc"])).unwrap().unwrap().as_str(),
            "abc"
        );
        assert_eq!(
            parse_key(&with(&[br#""a\"b\\c""#]))
                .unwrap()
                .unwrap()
                .as_str(),
            r#"a"b\c"#
        );
        assert_eq!(
            parse_key(&with(&[b"a", b"b"])).unwrap_err(),
            KeyError::Repeated
        );
        let long = vec![b'k'; 256];
        assert!(matches!(
            parse_key(&with(&[&long])).unwrap_err(),
            KeyError::Invalid(IdError::TooLong { .. })
        ));
        assert!(matches!(
            parse_key(&with(&[b"\xff\xfe"])).unwrap_err(),
            KeyError::Invalid(IdError::NotUtf8 { .. })
        ));
        assert!(matches!(
            parse_key(&with(&[b"\"\""])).unwrap_err(),
            KeyError::Invalid(IdError::Empty)
        ));
    }

    #[test]
    fn fingerprinted_headers_count() {
        let uri: Uri = "/orders?x=1".parse().unwrap();
        let names = [HeaderName::from_static("content-type")];
        let mut json = HeaderMap::new();
        json.insert("content-type", "application/json".parse().unwrap());
        let mut text = HeaderMap::new();
        text.insert("content-type", "text/plain".parse().unwrap());
        let a = fingerprint(&Method::POST, &uri, &json, &names, b"1");
        assert_ne!(a, fingerprint(&Method::POST, &uri, &text, &names, b"1"));
        assert_eq!(a.len(), 64);
        let other: Uri = "/orders?x=2".parse().unwrap();
        assert_ne!(a, fingerprint(&Method::POST, &other, &json, &names, b"1"));
        // Headers not configured do not count.
        assert_eq!(
            fingerprint(&Method::POST, &uri, &json, &[], b"1"),
            fingerprint(&Method::POST, &uri, &text, &[], b"1")
        );
    }
}
