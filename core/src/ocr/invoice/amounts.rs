//! Amounts as invoices print them: `1 234,56`, `1.234,56`, `1,234.56`, `1'234.56`, `120,00 €`,
//! `-12,50`, `€ 99.90`; rates as `20 %`, `5,5%`; currencies by code or symbol.

use super::meta::Amount;
use regex::Regex;
use std::sync::LazyLock;

static AMOUNT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\d.,])(-\s?)?(\d{1,3}(?:[ .,'\u{a0}\u{202f}]\d{3})+[.,]\d{2}|\d+[.,]\d{2})(?:[^\d]|$)")
        .expect("regex")
});
static WHOLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^\d.,])(\d{1,3}(?:[ .,'\u{a0}]\d{3})+|\d{1,7})(?:[^\d.,%]|$)").expect("regex"));
static PERCENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^\d.,]|\p{L}\.)(\d{1,2}(?:[.,]\d{1,3})?)\s?%").expect("regex"));

/// Reads `1.234,56` or `1,234.56`: the last `.` or `,` before two final digits is the decimal
/// point, every other separator groups thousands.
fn normalize(num: &str) -> Option<Amount> {
    let digits: String = num.chars().filter(|c| c.is_ascii_digit()).collect();
    if digits.len() < 3 {
        return None;
    }
    let (int, frac) = digits.split_at(digits.len() - 2);
    Amount::parse_machine(&format!("{int}.{frac}"))
}

/// Every amount written with two decimals in `s`: (byte position, amount).
pub fn find_all(s: &str) -> Vec<(usize, Amount)> {
    AMOUNT
        .captures_iter(s)
        .filter_map(|c| {
            let m = c.get(2)?;
            let a = normalize(m.as_str())?;
            let neg = c.get(1).is_some();
            Some((c.get(1).unwrap_or(m).start(), if neg { Amount::ZERO.minus(a) } else { a }))
        })
        .collect()
}

/// The first amount of `s`, two decimals; else (`whole`) a whole number such as `319` when the
/// caller knows the place holds an amount.
pub fn find(s: &str, whole: Whole) -> Option<Amount> {
    if let Some((_, a)) = find_all(s).into_iter().next() {
        return Some(a);
    }
    match whole {
        Whole::Refuse => None,
        Whole::Accept => {
            // Not part of a date, a rate or a long identifier.
            if s.contains('%') || super::dates::find(s, super::dates::DayOrder::DayFirst).is_some() {
                return None;
            }
            // Only a cell holding nothing but the number (and a currency) is a whole amount.
            let bare: String = s
                .replace(['€', '$', '£', '₹', ':', '`'], " ")
                .split_whitespace()
                .filter(|w| {
                    !matches!(
                        w.to_ascii_uppercase().trim_end_matches('.'),
                        "EUR" | "USD" | "GBP" | "CHF" | "INR" | "RS"
                    )
                })
                .collect::<Vec<_>>()
                .join("");
            if bare.is_empty() || !bare.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | '\'')) {
                return None;
            }
            let c = WHOLE.captures(s)?;
            let digits: String = c[1].chars().filter(|c| c.is_ascii_digit()).collect();
            Amount::parse_machine(&digits)
        }
    }
}

/// Whether a whole number may stand for an amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whole {
    Accept,
    Refuse,
}

/// Every rate `NN[,d] %` in `s` (0 < rate < 100).
pub fn percents(s: &str) -> Vec<(usize, Amount)> {
    PERCENT
        .captures_iter(s)
        .filter_map(|c| {
            let m = c.get(1)?;
            let a = Amount::parse_machine(&m.as_str().replace(',', "."))?;
            (a.ten_thousandths() < 100 * 10_000).then_some((m.start(), a))
        })
        .collect()
}

/// The currency a text shows most: ISO codes and symbols of the currencies invoices here use.
pub fn currency(s: &str) -> Option<(String, usize)> {
    const SIGNS: &[(&str, &str)] = &[
        ("€", "EUR"),
        ("EUR", "EUR"),
        ("Euro", "EUR"),
        ("$", "USD"),
        ("USD", "USD"),
        ("£", "GBP"),
        ("GBP", "GBP"),
        ("CHF", "CHF"),
        ("Fr.", "CHF"),
        ("₹", "INR"),
        ("INR", "INR"),
        ("Rs.", "INR"),
        ("Rs", "INR"),
        ("`", "INR"),
        ("SEK", "SEK"),
        ("DKK", "DKK"),
        ("PLN", "PLN"),
        ("zł", "PLN"),
        ("zl", "PLN"),
        ("CAD", "CAD"),
        ("JPY", "JPY"),
    ];
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for (sign, code) in SIGNS {
        let n = if sign.chars().all(|c| c.is_ascii_alphabetic() || c == '.') {
            // Codes and abbreviations count only as whole words.
            super::text::find_word(s, sign).len()
        } else if *sign == "`" {
            // A rupee sign some PDF fonts map to a backquote, before an amount.
            s.matches("` ").count()
                + s.match_indices('`').filter(|(i, _)| s[i + 1..].starts_with(|c: char| c.is_ascii_digit())).count()
        } else {
            s.matches(sign).count()
        };
        if n > 0 {
            match counts.iter_mut().find(|(c, _)| c == code) {
                Some((_, total)) => *total += n,
                None => counts.push((code, n)),
            }
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(c, n)| (c.to_owned(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &str, expect: Option<&str>) {
        assert_eq!(find(s, Whole::Refuse).map(|a| a.to_string()).as_deref(), expect, "{s}");
    }

    #[test]
    fn amounts_in_european_and_english_forms() {
        check("Total TTC 120,00 €", Some("120.00"));
        check("1 234,56 EUR", Some("1234.56"));
        check("1.234,56", Some("1234.56"));
        check("$1,234.56", Some("1234.56"));
        check("CHF 1'234.50", Some("1234.50"));
        check("-12,50", Some("-12.50"));
        check("2,076.76 €", Some("2076.76"));
        check("Date 14/11/2026", None);
        check("FR76 3000 6000", None);
        assert_eq!(find("Rs. 319", Whole::Accept).map(|a| a.to_string()).as_deref(), Some("319.00"));
        assert_eq!(find("TVA 20 %", Whole::Accept), None);
        assert_eq!(find("NL810433941B01", Whole::Accept), None);
        let rates: Vec<String> = percents("TVA 20,0% et 5,5 %").iter().map(|(_, a)| a.to_string()).collect();
        assert_eq!(rates, ["20.00", "5.50"]);
        let glued: Vec<String> = percents("USt.19%   621,37").iter().map(|(_, a)| a.to_string()).collect();
        assert_eq!(glued, ["19.00"], "a rate glued to its label's dot");
        assert_eq!(currency("Total 12,00 € ... 3,00 €").map(|c| c.0).as_deref(), Some("EUR"));
        assert_eq!(currency("Amount USD 4.11").map(|c| c.0).as_deref(), Some("USD"));
    }
}
