//! Unix milliseconds to and from `YYYY-MM-DD HH:MM:SS` (UTC), without a date library.

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2026-12-01 16:02:06` for a unix-ms time (UTC).
pub(crate) fn format(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Parses unix ms, or `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]` / with a space (UTC).
pub(crate) fn parse(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Some(ms);
    }
    let (date, clock) = t.split_once(['T', ' ']).unwrap_or((t, "00:00"));
    let mut dp = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (dp.next()??, dp.next()??, dp.next()??);
    let mut cp = clock.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi) = (cp.next()??, cp.next()??);
    let s = cp.next().flatten().unwrap_or(0);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    Some(((days_from_civil(y, m, d) * 86_400) + h * 3600 + mi * 60 + s) * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(format(0), "1970-01-01 00:00:00");
        let ms = parse("2026-12-01T16:02:06").unwrap();
        assert_eq!(format(ms), "2026-12-01 16:02:06");
        assert_eq!(parse("2024-02-29"), Some(1_709_164_800_000));
        assert_eq!(parse("1234"), Some(1234));
        assert_eq!(parse("2024-13-01"), None);
        assert_eq!(parse("garbage"), None);
    }
}
