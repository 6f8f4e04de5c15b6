//! Time as rules see it: a [`Timestamp`] handed in by a [`Clock`], never read from the system
//! inside a rule (quinn-proto's discipline), so tests can put a rule at any instant.

use std::fmt;

/// An instant, in microseconds since the Unix epoch (UTC). Microseconds because the OCR service's
/// contract prints them; integers because both SQLite and PostgreSQL store them exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_unix_micros(micros: i64) -> Self {
        Self(micros)
    }

    pub const fn from_unix_secs(secs: i64) -> Self {
        Self(secs.saturating_mul(1_000_000))
    }

    pub const fn unix_micros(self) -> i64 {
        self.0
    }

    pub const fn unix_secs(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    pub fn plus_secs(self, secs: i64) -> Self {
        Self(self.0.saturating_add(secs.saturating_mul(1_000_000)))
    }

    /// RFC 3339 / ISO 8601 in UTC with microseconds: `2026-11-23T09:20:49.123456Z`.
    pub fn to_rfc3339(self) -> String {
        let mut out = String::with_capacity(27);
        self.write_rfc3339(&mut out);
        out
    }

    /// [`Self::to_rfc3339`] appended to `out` (pages of members write hundreds of them).
    pub fn write_rfc3339(self, out: &mut String) {
        use fmt::Write as _;
        let secs = self.unix_secs();
        let micros = self.0.rem_euclid(1_000_000);
        let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        if !(0..=9999).contains(&y) {
            let _ = write!(
                out,
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
                sod / 3600,
                (sod % 3600) / 60,
                sod % 60
            );
            return;
        }
        // Digits by hand: a `write!` of these fields cost a page of 500 members a twentieth of its CPU.
        let mut b = *b"0000-00-00T00:00:00.000000Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                b[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, 4, y);
        put(5, 2, m);
        put(8, 2, d);
        put(11, 2, sod / 3600);
        put(14, 2, (sod % 3600) / 60);
        put(17, 2, sod % 60);
        put(20, 6, micros);
        out.push_str(std::str::from_utf8(&b).unwrap_or_default());
    }

    /// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`. Anything else is `None`.
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = s.get(r)?;
            part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
        };
        if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
            return None;
        }
        let mut secs = days_from_civil(y, mo, d) * 86_400;
        let mut micros = 0;
        if b.len() > 10 {
            if !(b[10] == b'T' || b[10] == b't' || b[10] == b' ') || b.len() < 20 || b[13] != b':' || b[16] != b':' {
                return None;
            }
            let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
            if h > 23 || mi > 59 || se > 60 {
                return None;
            }
            secs += h * 3600 + mi * 60 + se.min(59);
            let mut i = 19;
            if b[i] == b'.' {
                let start = i + 1;
                i = start;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let frac = s.get(start..i)?;
                if frac.is_empty() {
                    return None;
                }
                let six: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
                micros = six.parse().ok()?;
            }
            match s.get(i..)? {
                "Z" | "z" => {}
                tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) && &tz[3..4] == ":" => {
                    let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
                    if oh > 23 || om > 59 {
                        return None;
                    }
                    let offset = oh * 3600 + om * 60;
                    secs += if tz.starts_with('+') { -offset } else { offset };
                }
                _ => return None,
            }
        }
        Some(Self(secs * 1_000_000 + micros))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil calendar algorithms (public domain), proleptic Gregorian.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
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

/// The time port. Rules take `now` from here; the system adapter reads the OS clock.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// A moment as the wire shows it: RFC 3339 with microseconds and `Z`, or `null` when absent.
pub fn json_time(t: Option<Timestamp>) -> serde_json::Value {
    t.map_or(serde_json::Value::Null, |t| serde_json::Value::String(t.to_rfc3339()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_with_micros() {
        assert_eq!(Timestamp::from_unix_micros(0).to_rfc3339(), "1970-01-01T00:00:00.000000Z");
        assert_eq!(Timestamp::from_unix_micros(1_795_425_649_123_456).to_rfc3339(), "2026-11-23T09:20:49.123456Z");
        assert_eq!(Timestamp::from_unix_secs(951_782_400).to_rfc3339(), "2000-02-29T00:00:00.000000Z");
        assert_eq!(Timestamp::from_unix_micros(-1).to_rfc3339(), "1969-12-31T23:59:59.999999Z");
        assert_eq!(Timestamp::from_unix_micros(253_402_300_799_999_999).to_rfc3339(), "9999-12-31T23:59:59.999999Z");
        assert_eq!(Timestamp::from_unix_micros(253_402_300_800_000_000).to_rfc3339(), "10000-01-01T00:00:00.000000Z");
        assert_eq!(Timestamp::from_unix_micros(-62_167_219_200_000_000).to_rfc3339(), "0000-01-01T00:00:00.000000Z");
    }

    #[test]
    fn parses_what_it_formats_and_common_forms() {
        for micros in [0, 1_795_425_649_123_456, 951_782_400_000_000, -1, 4_102_444_799_999_999] {
            let t = Timestamp::from_unix_micros(micros);
            assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t));
        }
        assert_eq!(Timestamp::parse_rfc3339("2026-11-23"), Some(Timestamp::from_unix_secs(1_795_392_000)));
        assert_eq!(
            Timestamp::parse_rfc3339("2026-11-23T10:20:49+01:00"),
            Timestamp::parse_rfc3339("2026-11-23T09:20:49Z")
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2026-11-23T09:20:49.5Z").map(|t| t.unix_micros() % 1_000_000),
            Some(500_000)
        );
        for bad in [
            "",
            "2026",
            "2026-13-01",
            "2026-02-30",
            "2025-02-29",
            "2026-11-23T24:00:00Z",
            "2026-11-23T09:20:49",
            "2026-11-23T09:20:49.Z",
            "2026-11-23T09:20:49+0100",
            "x026-11-23",
            "2026-11-23T09:20:49Zjunk",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad:?}");
        }
    }
}
