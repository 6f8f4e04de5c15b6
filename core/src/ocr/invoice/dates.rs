//! Dates as invoices print them: numeric (`14/11/2026`, `14.11.26`, `2026-11-14`, US `11/17/2017`)
//! and with month names in French, German, Dutch, Italian, English, Spanish and Polish
//! (`14 novembre 2026`, `14. März 2026`, `14 mei 2026`, `Aug 3, 2014`, `3 de octubre de 2026`,
//! `14 stycznia 2026`: Polish names the month in the genitive).

use regex::Regex;
use std::sync::LazyLock;

/// A calendar date, valid by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    year: u16,
    month: u8,
    day: u8,
}

impl Date {
    pub fn new(year: i32, month: u32, day: u32) -> Option<Self> {
        if !(1900..=2200).contains(&year) || !(1..=12).contains(&month) || day == 0 {
            return None;
        }
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let days = match month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        (day <= days).then_some(Self { year: year as u16, month: month as u8, day: day as u8 })
    }

    /// `YYYYMMDD` (CII format 102) or `YYYY-MM-DD` (UBL).
    pub fn parse_machine(s: &str) -> Option<Self> {
        let s = s.trim();
        let digits: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
        if digits.len() != 8 || !(s.len() == 8 || (s.len() == 10 && s.as_bytes()[4] == b'-')) {
            return None;
        }
        Self::new(digits[..4].parse().ok()?, digits[4..6].parse().ok()?, digits[6..].parse().ok()?)
    }

    pub fn iso(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// How the document writes `a/b/yyyy`: day first (Europe) or month first (US). Decided once per
/// document from the dates that only one order can read (a first number above 12, or a second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayOrder {
    DayFirst,
    MonthFirst,
}

static NUMERIC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\d])(\d{1,2})\s?([./-])\s?(\d{1,2})\s?([./-])\s?(\d{4}|\d{2})(?:[^\d]|$)").expect("regex")
});
static ISO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^\d])(\d{4})-(\d{2})-(\d{2})(?:[^\d]|$)").expect("regex"));
static DAY_MONTH_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:^|[^\d])(\d{1,2})(?:er|st|nd|rd|th)?\.?\s*(?:de\s+)?(\p{L}{3,12})\.?,?\s+(?:de\s+)?(\d{4})")
        .expect("regex")
});
static MONTH_DAY_YEAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(\p{L}{3,12})\.?\s+(\d{1,2})(?:st|nd|rd|th)?\s?,?\s+(\d{4})").expect("regex"));

/// The month a name means, in fr/de/nl/it/en/es/pl (full or abbreviated, accents optional;
/// Polish in the nominative and the genitive).
fn month(name: &str) -> Option<u32> {
    let n = super::text::fold(name).trim_end_matches('.').to_owned();
    const MONTHS: [&[&str]; 12] = [
        &[
            "janvier", "janv", "jan", "januar", "jaenner", "janner", "gennaio", "genn", "gen", "january", "januari",
            "enero", "ene", "styczen", "stycznia", "sty",
        ],
        &[
            "fevrier", "fevr", "fev", "februar", "feb", "febbraio", "febr", "february", "februari", "febrero", "luty",
            "lutego", "lut",
        ],
        &["mars", "mar", "maerz", "marz", "marzo", "march", "maart", "mrt", "marzec", "marca"],
        &["avril", "avr", "april", "apr", "aprile", "abril", "abr", "kwiecien", "kwietnia", "kwi"],
        &["mai", "maggio", "mag", "may", "mei", "mayo", "maj", "maja"],
        &["juin", "juni", "jun", "giugno", "giu", "june", "junio", "czerwiec", "czerwca", "cze"],
        &["juillet", "juil", "juli", "jul", "luglio", "lug", "july", "julio", "lipiec", "lipca", "lip"],
        &["aout", "august", "aug", "agosto", "ago", "augustus", "sierpien", "sierpnia", "sie"],
        &[
            "septembre",
            "sept",
            "sep",
            "september",
            "settembre",
            "sett",
            "set",
            "septiembre",
            "setiembre",
            "wrzesien",
            "wrzesnia",
            "wrz",
        ],
        &[
            "octobre",
            "oct",
            "oktober",
            "okt",
            "ottobre",
            "ott",
            "october",
            "octubre",
            "pazdziernik",
            "pazdziernika",
            "paz",
        ],
        &["novembre", "nov", "november", "noviembre", "listopad", "listopada", "lis"],
        &[
            "decembre",
            "dec",
            "dezember",
            "dez",
            "dicembre",
            "dic",
            "december",
            "diciembre",
            "grudzien",
            "grudnia",
            "gru",
        ],
    ];
    MONTHS.iter().position(|names| names.contains(&n.as_str())).map(|i| i as u32 + 1)
}

fn year(s: &str) -> Option<i32> {
    let y: i32 = s.parse().ok()?;
    Some(if s.len() == 2 { 2000 + y } else { y })
}

/// The numeric `a/b/y` dates of a text, to decide the document's [`DayOrder`].
pub fn day_order(text: &str) -> Option<DayOrder> {
    let (mut day_first, mut month_first) = (0, 0);
    for c in NUMERIC.captures_iter(text) {
        let (a, b): (u32, u32) = (c[1].parse().unwrap_or(0), c[3].parse().unwrap_or(0));
        if a > 12 && b <= 12 {
            day_first += 1;
        } else if b > 12 && a <= 12 {
            month_first += 1;
        }
    }
    match (day_first, month_first) {
        (0, 0) => None,
        (d, m) if m > d => Some(DayOrder::MonthFirst),
        _ => Some(DayOrder::DayFirst),
    }
}

/// A month name the engine split after its capital ("J uli", "M ärz").
static SPLIT_CAPITAL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(\p{Lu}) (\p{Ll}{2,})").expect("regex"));

/// Every date in `s`, in order of position.
pub fn find_all(s: &str, order: DayOrder) -> Vec<(usize, Date)> {
    let joined;
    let s = if SPLIT_CAPITAL.is_match(s) {
        joined = SPLIT_CAPITAL.replace_all(s, "$1$2");
        joined.as_ref()
    } else {
        s
    };
    let mut out = Vec::new();
    for c in ISO.captures_iter(s) {
        let m = c.get(1).map_or(0, |m| m.start());
        if let Some(d) = Date::new(c[1].parse().unwrap_or(0), c[2].parse().unwrap_or(0), c[3].parse().unwrap_or(0)) {
            out.push((m, d));
        }
    }
    for c in NUMERIC.captures_iter(s) {
        // The two separators agree in a date ("14/11/2026"); "1.5-2026" is something else.
        if c[2] != c[4] {
            continue;
        }
        let (a, b): (u32, u32) = (c[1].parse().unwrap_or(0), c[3].parse().unwrap_or(0));
        let (day, mon) = match order {
            DayOrder::DayFirst => (a, b),
            DayOrder::MonthFirst => (b, a),
        };
        if let (Some(y), Some(pos)) = (year(&c[5]), c.get(1).map(|m| m.start()))
            && let Some(d) = Date::new(y, mon, day)
        {
            out.push((pos, d));
        }
    }
    for c in DAY_MONTH_YEAR.captures_iter(s) {
        if let (Some(mon), Some(pos)) = (month(&c[2]), c.get(1).map(|m| m.start()))
            && let Some(d) = Date::new(c[3].parse().unwrap_or(0), mon, c[1].parse().unwrap_or(0))
        {
            out.push((pos, d));
        }
    }
    for c in MONTH_DAY_YEAR.captures_iter(s) {
        if let (Some(mon), Some(pos)) = (month(&c[1]), c.get(1).map(|m| m.start()))
            && let Some(d) = Date::new(c[3].parse().unwrap_or(0), mon, c[2].parse().unwrap_or(0))
        {
            out.push((pos, d));
        }
    }
    out.sort_by_key(|(pos, _)| *pos);
    out.dedup_by_key(|(pos, _)| *pos);
    out
}

/// The first date in `s`.
pub fn find(s: &str, order: DayOrder) -> Option<Date> {
    find_all(s, order).into_iter().next().map(|(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &str, order: DayOrder, expect: Option<&str>) {
        assert_eq!(find(s, order).map(|d| d.iso()).as_deref(), expect, "{s}");
    }

    #[test]
    fn numeric_and_named_dates_in_four_languages() {
        use DayOrder::*;
        check("Date : 14/11/2026", DayFirst, Some("2026-11-14"));
        check("Datum: 14.11.26", DayFirst, Some("2026-11-14"));
        check("le 3 août 2014", DayFirst, Some("2014-08-03"));
        check("1er janvier 2025", DayFirst, Some("2025-01-01"));
        check("Rechnungsdatum 14. März 2026", DayFirst, Some("2026-03-14"));
        check("Data 5 giugno 2024", DayFirst, Some("2024-06-05"));
        check("Invoice Date: Aug 3, 2014", DayFirst, Some("2014-08-03"));
        check("20 October 2015", DayFirst, Some("2015-10-20"));
        check("August 3 , 2014", DayFirst, Some("2014-08-03"));
        check("Due 2026-12-14", DayFirst, Some("2026-12-14"));
        check("11/03/2017", MonthFirst, Some("2017-11-03"));
        check("31/02/2026", DayFirst, None);
        check("Total 100,00", DayFirst, None);
        assert_eq!(day_order("Invoice Date 11/03/2017 ... paid 11/17/2017"), Some(MonthFirst));
        assert_eq!(day_order("13/11/2017"), Some(DayFirst));
        assert_eq!(Date::parse_machine("20171113").map(|d| d.iso()).as_deref(), Some("2017-11-13"));
        assert_eq!(Date::parse_machine("2017-11-13").map(|d| d.iso()).as_deref(), Some("2017-11-13"));
        assert_eq!(Date::parse_machine("2017113"), None);
    }

    #[test]
    fn march_in_german_may_in_dutch_and_january_in_polish_are_dates() {
        use DayOrder::*;
        check("Rechnungsdatum: 3. März 2026", DayFirst, Some("2026-03-03"));
        check("Factuurdatum: 14 mei 2026", DayFirst, Some("2026-05-14"));
        check("Data wystawienia: 7 stycznia 2026", DayFirst, Some("2026-01-07"));
        check("Termin płatności: 30 października 2026", DayFirst, Some("2026-10-30"));
        check("Fecha: 3 de octubre de 2026", DayFirst, Some("2026-10-03"));
        check("Vervaldatum: 2 mrt. 2026", DayFirst, Some("2026-03-02"));
        check("Datum: 23-02-2026", DayFirst, Some("2026-02-23"));
        check("Belegdatum: 5. J uli 2026", DayFirst, Some("2026-07-05"));
    }
}
