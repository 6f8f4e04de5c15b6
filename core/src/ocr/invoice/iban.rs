//! IBANs (ISO 13616): the country's length and the mod-97 check, so a misread digit is refused.

use regex::Regex;
use std::sync::LazyLock;

/// `value mod 97` of an alphanumeric string with letters as 10..35 (`None` for other chars).
pub fn mod97(s: &str) -> Option<u32> {
    let mut r: u32 = 0;
    for c in s.chars() {
        let v = c.to_digit(36)?;
        r = if v >= 10 { (r * 100 + v) % 97 } else { (r * 10 + v) % 97 };
    }
    Some(r)
}

fn length(cc: &str) -> Option<usize> {
    Some(match cc {
        "NO" => 15,
        "BE" => 16,
        "DK" | "FI" | "NL" => 18,
        "SI" => 19,
        "AT" | "EE" | "LU" | "LT" => 20,
        "CH" | "LV" | "HR" => 21,
        "DE" | "GB" | "IE" | "BG" => 22,
        "RO" | "SE" | "CZ" | "SK" | "ES" => 24,
        "PT" => 25,
        "IS" => 26,
        "FR" | "IT" | "GR" | "MC" | "SM" => 27,
        "HU" | "PL" | "CY" => 28,
        "MT" => 31,
        _ => return None,
    })
}

/// Whether a compact, upper-case IBAN is valid.
pub fn valid(iban: &str) -> bool {
    let Some(cc) = iban.get(..2) else { return false };
    if length(cc) != Some(iban.len()) || !iban[2..4].chars().all(|c| c.is_ascii_digit()) {
        return false;
    }
    mod97(&format!("{}{}", &iban[4..], &iban[..4])) == Some(1)
}

static CANDIDATE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([A-Z]{2})\s?([0-9OIL]{2})((?:\s?[0-9A-Z]){10,30})").expect("regex"));

/// Every valid IBAN in `s`, compact: a printed IBAN is grouped by four and may run into the next
/// word, so the country's exact length is taken. OCR reads a check digit 0 as the letter O (or 1
/// as I, L): those two places only hold digits, so they are read as digits, and mod 97 decides.
pub fn find_all(s: &str) -> Vec<(usize, String)> {
    let upper = s.to_ascii_uppercase();
    CANDIDATE
        .captures_iter(&upper)
        .filter_map(|c| {
            let cc = c.get(1)?;
            let len = length(cc.as_str())?;
            let check: String = c[2]
                .chars()
                .map(|d| match d {
                    'O' => '0',
                    'I' | 'L' => '1',
                    d => d,
                })
                .collect();
            let rest: String = c[3].chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            let compact = format!("{}{check}{rest}", cc.as_str());
            let iban = compact.get(..len)?;
            valid(iban).then(|| (cc.start(), iban.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iban_length_and_check() {
        assert!(valid("FR7630006000011234567890189"));
        assert!(valid("NL50INGB0683251309"));
        assert!(!valid("FR7630006000011234567890188"));
        let found = find_all("IBAN : FR20 1242 1242 1242 1242 1242 124 - BIC : FIDCFR21XXX");
        assert_eq!(found[0].1, "FR2012421242124212421242124");
        assert_eq!(find_all("IBAN NL50 INGB 0683 2513 09 BIC INGBNL2A")[0].1, "NL50INGB0683251309");
        assert_eq!(find_all("IBAN : FRO5 1641 0457 5004 0793 3791 566")[0].1, "FR0516410457500407933791566");
    }
}
