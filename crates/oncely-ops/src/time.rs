//! Unix milliseconds as UTC dates, for people and for partition names: the one place oncely's
//! admin code turns a timestamp into a calendar date (with `jiff`), used by the CLI, the
//! console and [`crate::partition`].

use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// `YYYY-MM-DD HH:MM:SSZ` for a unix-ms time (UTC); a time outside the years -9999..=9999
/// is shown as its number (`… ms`).
///
/// ```
/// assert_eq!(oncely_ops::time::format_utc_ms(86_400_000 + 3_723_000), "1970-01-02 01:02:03Z");
/// ```
pub fn format_utc_ms(ms: i64) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
        Err(_) => format!("{ms} ms"),
    }
}

/// Parses unix ms, or a UTC date and time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fff]]` or
/// the same with a space instead of the `T`, optionally ending in `Z` (so what
/// [`format_utc_ms`] prints parses back). `None` for anything else, including dates that do
/// not exist (`2024-02-30`).
///
/// ```
/// use oncely_ops::time::parse_utc_ms;
/// assert_eq!(parse_utc_ms("2024-02-29"), Some(1_709_164_800_000));
/// assert_eq!(parse_utc_ms("1970-01-02 01:02:03Z"), Some(86_400_000 + 3_723_000));
/// assert_eq!(parse_utc_ms("1234"), Some(1234));
/// assert_eq!(parse_utc_ms("2024-13-01"), None);
/// ```
pub fn parse_utc_ms(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Some(ms);
    }
    let t = t.strip_suffix(['Z', 'z']).unwrap_or(t);
    let at: DateTime = t.parse().ok()?;
    Some(TimeZone::UTC.to_timestamp(at).ok()?.as_millisecond())
}

/// The UTC date of a day number (days since 1970-01-01) as `YYYYMMDD`, as partition names
/// carry it; `None` outside the years -9999..=9999.
pub fn day_digits(day: i64) -> Option<String> {
    let t = Timestamp::from_millisecond(day.checked_mul(DAY_MS)?).ok()?;
    Some(t.strftime("%Y%m%d").to_string())
}

/// The day number (days since 1970-01-01) of eight digits `YYYYMMDD`; `None` when they are
/// not exactly eight digits or not a date.
pub fn day_of_digits(digits: &str) -> Option<i64> {
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| digits[r].parse::<i8>().ok();
    let year = digits[0..4].parse::<i16>().ok()?;
    let date = Date::new(year, n(4..6)?, n(6..8)?).ok()?;
    let midnight = TimeZone::UTC.to_timestamp(date.at(0, 0, 0, 0)).ok()?;
    Some(midnight.as_millisecond().div_euclid(DAY_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_back() {
        assert_eq!(format_utc_ms(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_utc_ms(-1), "1969-12-31 23:59:59Z");
        assert_eq!(format_utc_ms(i64::MAX), format!("{} ms", i64::MAX));
        let ms = parse_utc_ms("2026-12-01T16:02:06").unwrap();
        assert_eq!(format_utc_ms(ms), "2026-12-01 16:02:06Z");
        for shown in [0, 1_709_164_800_000, 1_764_604_926_000, -86_400_000] {
            assert_eq!(parse_utc_ms(&format_utc_ms(shown)), Some(shown));
        }
        assert_eq!(
            parse_utc_ms("2026-12-01 10:00"),
            parse_utc_ms("2026-12-01T10:00:00")
        );
        assert_eq!(parse_utc_ms(" 2024-02-29 "), Some(1_709_164_800_000));
        assert_eq!(parse_utc_ms("1234"), Some(1234));
        assert_eq!(parse_utc_ms("-5"), Some(-5));
        for bad in [
            "2024-13-01",
            "2024-02-30",
            "2024-01-01 24:00",
            "garbage",
            "",
        ] {
            assert_eq!(parse_utc_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn day_digits_round_trip() {
        assert_eq!(day_digits(0).as_deref(), Some("19700101"));
        assert_eq!(day_digits(20_422).as_deref(), Some("20251130"));
        for day in [-1000, -1, 0, 59, 60, 365, 11_016, 20_422, 30_000] {
            let digits = day_digits(day).unwrap();
            assert_eq!(day_of_digits(&digits), Some(day), "{digits}");
        }
        for bad in [
            "2025113",
            "202511300",
            "2025-11-",
            "20251330",
            "20250230",
            "default_",
        ] {
            assert_eq!(day_of_digits(bad), None, "{bad}");
        }
    }
}
