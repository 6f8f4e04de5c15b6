//! French company identifiers: SIREN (9 digits) and SIRET (SIREN + 5-digit establishment), both
//! Luhn-checked.

use regex::Regex;
use std::sync::LazyLock;

/// The Luhn check over a string of digits.
pub fn luhn(s: &str) -> bool {
    let mut sum = 0;
    for (i, c) in s.chars().rev().enumerate() {
        let Some(d) = c.to_digit(10) else { return false };
        sum += if i % 2 == 1 {
            let y = d * 2;
            if y > 9 { y - 9 } else { y }
        } else {
            d
        };
    }
    !s.is_empty() && sum % 10 == 0
}

static GROUPED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\d(?:[ .]?\d){8,13}").expect("regex"));

/// Whether a number passed its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Valid,
    /// Fails Luhn: kept only where a SIRET/SIREN label vouches for it (specimen numbers on
    /// test invoices, La Poste's establishments, which use another check).
    Failed,
}

/// The 14-digit (SIRET) and 9-digit (SIREN) numbers in `s`: (position, digits, check).
pub fn find_all(s: &str) -> Vec<(usize, String, Check)> {
    GROUPED
        .find_iter(s)
        .filter_map(|m| {
            let d: String = m.as_str().chars().filter(|c| c.is_ascii_digit()).collect();
            let check = if luhn(&d) { Check::Valid } else { Check::Failed };
            (d.len() == 14 || d.len() == 9).then(|| (m.start(), d, check))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siret_and_siren_pass_luhn() {
        assert!(luhn("30326504500011"));
        assert!(luhn("421938861"));
        assert!(!luhn("421938862"));
        assert_eq!(find_all("SIRET : 303 265 045 00011 - APE")[0].1, "30326504500011");
        assert_eq!(find_all("SIREN 421 938 861")[0].2, Check::Valid);
        assert_eq!(find_all("SIRET 99999999800010")[0].2, Check::Failed);
        assert!(find_all("Tel 0123456789").is_empty());
    }
}
