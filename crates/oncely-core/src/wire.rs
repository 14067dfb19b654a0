//! What the broker crates share: the header names oncely's metadata travels under and the
//! [`Meta`](crate::Meta) ↔ header list mapping ([`meta_headers`], [`read_header`]), the
//! parser of oncely's own URL parameters ([`UrlParams`]), and total conversions from
//! numbers and header text to `Meta` values, without arithmetic that can panic. A value that
//! does not convert is `None`; the mapping drops it from `Meta` and reports it with
//! [`dropped`], and the message is still processed (its id and payload are what count).
//!
//! Times are accepted from the Unix epoch up to `i64::MAX` milliseconds after it, so that
//! every accepted time can also be stored as Unix milliseconds in an `i64` column.

mod headers;
mod params;

pub use headers::{
    ENTITY_HEADER, MESSAGE_ID_FIELD, MESSAGE_ID_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER,
    meta_headers, read_header,
};
pub use params::UrlParams;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time `ms` milliseconds after the Unix epoch; `None` if negative.
///
/// ```
/// use oncely_core::wire::time_from_unix_ms;
/// assert!(time_from_unix_ms(1_700_000_000_000).is_some());
/// assert!(time_from_unix_ms(i64::MAX).is_some());
/// assert_eq!(time_from_unix_ms(-1), None);
/// ```
pub fn time_from_unix_ms(ms: i64) -> Option<SystemTime> {
    let ms = u64::try_from(ms).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// The time `secs` seconds after the Unix epoch (AMQP's `timestamp` property); `None`
/// when it is more than `i64::MAX` milliseconds away.
///
/// ```
/// use oncely_core::wire::time_from_unix_secs;
/// assert!(time_from_unix_secs(1_700_000_000).is_some());
/// assert_eq!(time_from_unix_secs(1 << 63), None);
/// assert_eq!(time_from_unix_secs(u64::MAX), None);
/// ```
pub fn time_from_unix_secs(secs: u64) -> Option<SystemTime> {
    let ms = secs.checked_mul(1000)?;
    time_from_unix_ms(i64::try_from(ms).ok()?)
}

/// A time from a broker's own clock (e.g. JetStream's published time) given as a
/// [`SystemTime`]; `None` unless it lies in the accepted range.
pub fn time_in_range(t: SystemTime) -> Option<SystemTime> {
    let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis();
    i64::try_from(ms)
        .ok()
        .and_then(time_from_unix_ms)
        .map(|_| t)
}

/// Parses decimal Unix milliseconds (surrounding whitespace allowed), as oncely's
/// producers write `oncely-source-time`.
///
/// ```
/// use oncely_core::wire::parse_unix_ms;
/// assert!(parse_unix_ms(" 1700000000123 ").is_some());
/// assert_eq!(parse_unix_ms("18446744073709551615"), None);
/// assert_eq!(parse_unix_ms("-5"), None);
/// assert_eq!(parse_unix_ms("soon"), None);
/// ```
pub fn parse_unix_ms(text: &str) -> Option<SystemTime> {
    time_from_unix_ms(text.trim().parse().ok()?)
}

/// Parses a decimal entity version (surrounding whitespace allowed).
///
/// ```
/// use oncely_core::wire::parse_version;
/// assert_eq!(parse_version(" -7 "), Some(-7));
/// assert_eq!(parse_version("9223372036854775808"), None);
/// ```
pub fn parse_version(text: &str) -> Option<i64> {
    text.trim().parse().ok()
}

/// Logs (WARN) that the value of `header` was dropped from `Meta`, with the reason and
/// the first bytes of the value; the message itself is still processed.
pub fn dropped(header: &str, value: &[u8], why: &str) {
    const SHOWN: usize = 64;
    let shown = String::from_utf8_lossy(&value[..value.len().min(SHOWN)]);
    let more = if value.len() > SHOWN { "…" } else { "" };
    tracing::warn!(
        header = %truncated(header, SHOWN),
        value = %format_args!("{shown:?}{more}"),
        len = value.len(),
        "broker envelope: {why}; value dropped from the message metadata"
    );
}

/// An envelope with every field the wire carries set: id `m-1`, a JSON payload, version 7,
/// entity key, source time (ms precision), a plain header and W3C trace context. A broker
/// mapping's round-trip test maps it to the broker's form and back and expects it unchanged.
///
/// ```
/// let raw = oncely_core::wire::sample_envelope();
/// assert_eq!(raw.meta.entity_key.as_deref(), Some("acct-17"));
/// assert!(raw.meta.headers.contains_key("traceparent"));
/// ```
pub fn sample_envelope() -> crate::RawEnvelope {
    let mut raw = crate::RawEnvelope::new("m-1", br#"{"account":"acct-17","amount":5}"#.to_vec());
    raw.meta.version = Some(7);
    raw.meta.entity_key = Some("acct-17".into());
    raw.meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
    raw.meta.headers.insert("trace".into(), "abc".into());
    // W3C trace context passes through as plain headers (docs/tracing.md).
    raw.meta.headers.insert(
        "traceparent".into(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
    );
    raw.meta
        .headers
        .insert("tracestate".into(), "vendor=1".into());
    raw
}

fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn conversions_are_total(n in any::<i64>(), u in any::<u64>(), s in ".*") {
            if let Some(t) = time_from_unix_ms(n) {
                prop_assert!(time_in_range(t).is_some());
            }
            let _ = time_from_unix_secs(u);
            let _ = parse_unix_ms(&s);
            let _ = parse_version(&s);
            dropped(&s, s.as_bytes(), "test");
        }
    }

    #[test]
    fn edges() {
        assert_eq!(
            time_from_unix_ms(0),
            Some(UNIX_EPOCH),
            "the epoch itself is a time"
        );
        assert!(time_from_unix_secs(i64::MAX as u64 / 1000).is_some());
        assert_eq!(time_from_unix_secs(i64::MAX as u64 / 1000 + 1), None);
        assert_eq!(time_in_range(UNIX_EPOCH - Duration::from_secs(1)), None);
        assert_eq!(truncated("ééé", 3), "é");
    }
}
