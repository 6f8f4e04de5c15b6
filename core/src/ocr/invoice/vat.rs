//! EU (and Swiss, British) VAT numbers, accepted only with a valid check: a number read from a
//! page is kept only if its check digits agree, which also rejects most OCR misreadings.

use regex::Regex;
use std::sync::LazyLock;

/// A VAT number, compact and upper case (`FR40303265045`), its check digits verified.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VatNumber(String);

impl VatNumber {
    /// Spaces, dots and dashes are ignored; `None` unless the country's check holds.
    pub fn parse(s: &str) -> Option<Self> {
        let compact: String = s.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_uppercase()).collect();
        let (cc, rest) = compact.split_at_checked(2)?;
        valid(cc, rest).then_some(Self(compact))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ISO country code, `GR` for Greece's `EL`.
    pub fn country(&self) -> &str {
        match &self.0[..2] {
            "EL" => "GR",
            cc => cc,
        }
    }

    /// The SIREN inside a French number (`FR` + key + SIREN).
    pub fn siren(&self) -> Option<&str> {
        (self.0.starts_with("FR") && self.0.len() == 13).then(|| &self.0[4..])
    }
}

fn digits(s: &str) -> Option<Vec<u32>> {
    s.chars().map(|c| c.to_digit(10)).collect()
}

fn valid(cc: &str, rest: &str) -> bool {
    match cc {
        "FR" => fr(rest),
        "BE" => be(rest),
        "IT" => rest.len() == 11 && super::siret::luhn(rest),
        "DE" => de(rest),
        "NL" => nl(rest),
        "ES" => es(rest),
        "LU" => lu(rest),
        "CH" => ch(rest),
        "AT" => at(rest),
        "GB" => gb(rest),
        "PT" => weighted_mod11(rest, 9),
        "DK" => rest.len() == 8 && digits(rest).is_some(),
        "FI" | "SI" | "HU" | "MT" => rest.len() == 8 && digits(rest).is_some(),
        "SE" => rest.len() == 12 && rest.ends_with("01") && super::siret::luhn(&rest[..10]),
        "PL" => pl(rest),
        "SK" => rest.len() == 10 && digits(rest).is_some(),
        "IE" => (8..=9).contains(&rest.len()) && rest.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "EL" | "GR" | "CZ" | "LT" | "LV" | "EE" | "RO" | "BG" | "CY" | "HR" => {
            (8..=12).contains(&rest.len()) && rest.chars().filter(|c| c.is_ascii_digit()).count() >= 8
        }
        _ => false,
    }
}

/// FR: 2-char key then the 9-digit SIREN; a numeric key is `(12 + 3 * (SIREN % 97)) % 97`.
fn fr(rest: &str) -> bool {
    if rest.len() != 11 || digits(&rest[2..]).is_none() {
        return false;
    }
    let siren: u64 = rest[2..].parse().unwrap_or(0);
    match rest[..2].parse::<u64>() {
        Ok(key) => key == (12 + 3 * (siren % 97)) % 97,
        // The alphanumeric keys of newer numbers have no published check.
        Err(_) => rest[..2].chars().all(|c| c.is_ascii_alphanumeric()),
    }
}

/// BE: 10 digits (a leading 0 or 1 added to old 9-digit numbers); `97 - first8 % 97 == last2`.
fn be(rest: &str) -> bool {
    let rest = if rest.len() == 9 { format!("0{rest}") } else { rest.to_owned() };
    if rest.len() != 10 || digits(&rest).is_none() || !rest.starts_with(['0', '1']) {
        return false;
    }
    let (body, check): (u64, u64) = (rest[..8].parse().unwrap_or(0), rest[8..].parse().unwrap_or(99));
    97 - body % 97 == check
}

/// DE: 9 digits, ISO 7064 MOD 11,10.
fn de(rest: &str) -> bool {
    let Some(d) = digits(rest).filter(|d| d.len() == 9 && d[0] != 0) else { return false };
    let mut product = 10;
    for &x in &d[..8] {
        let mut sum = (x + product) % 10;
        if sum == 0 {
            sum = 10;
        }
        product = (2 * sum) % 11;
    }
    let check = if 11 - product == 10 { 0 } else { 11 - product };
    check == d[8]
}

/// NL: 9 digits, `B`, 2 digits; mod 11 (weights 9..2, -1), or mod 97 over the whole number
/// (sole traders' numbers since 2020).
fn nl(rest: &str) -> bool {
    if rest.len() != 12 || rest.as_bytes()[9] != b'B' {
        return false;
    }
    let Some(d) = digits(&rest[..9]) else { return false };
    if digits(&rest[10..]).is_none() {
        return false;
    }
    let sum: i64 = d[..8].iter().enumerate().map(|(i, &x)| x as i64 * (9 - i as i64)).sum::<i64>() - d[8] as i64;
    sum % 11 == 0 || super::iban::mod97(&format!("NL{rest}")) == Some(1)
}

/// ES: a NIF (8 digits + letter), NIE (X/Y/Z + 7 digits + letter) or CIF (letter + 7 digits +
/// control digit or letter).
fn es(rest: &str) -> bool {
    const NIF_LETTERS: &[u8] = b"TRWAGMYFPDXBNJZSQVHLCKE";
    if rest.len() != 9 {
        return false;
    }
    let b = rest.as_bytes();
    let nif = |num: &str, letter: u8| num.parse::<usize>().is_ok_and(|n| NIF_LETTERS[n % 23] == letter);
    match b[0] {
        b'0'..=b'9' => nif(&rest[..8], b[8]),
        b'X' | b'Y' | b'Z' => {
            let lead = match b[0] {
                b'X' => "0",
                b'Y' => "1",
                _ => "2",
            };
            nif(&format!("{lead}{}", &rest[1..8]), b[8])
        }
        b'A'..=b'W' => {
            let Some(d) = digits(&rest[1..8]) else { return false };
            let sum: u32 = d
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    if i % 2 == 0 {
                        let y = x * 2;
                        y / 10 + y % 10
                    } else {
                        x
                    }
                })
                .sum();
            let control = (10 - sum % 10) % 10;
            b[8] == b'0' + control as u8 || b[8] == b"JABCDEFGHI"[control as usize]
        }
        _ => false,
    }
}

/// PL: the NIP, 10 digits; weights 6 5 7 2 3 4 5 6 7, the sum mod 11 is the last digit.
fn pl(rest: &str) -> bool {
    let Some(d) = digits(rest).filter(|d| d.len() == 10) else { return false };
    let sum: u32 = d[..9].iter().zip([6, 5, 7, 2, 3, 4, 5, 6, 7]).map(|(x, w)| x * w).sum();
    sum % 11 == d[9]
}

/// LU: 8 digits, the first six mod 89 are the last two.
fn lu(rest: &str) -> bool {
    rest.len() == 8
        && digits(rest).is_some()
        && rest[..6].parse::<u64>().unwrap_or(0) % 89 == rest[6..].parse::<u64>().unwrap_or(99)
}

/// CH: `CHE` + 9 digits (+ MWST/TVA/IVA), mod 11 with weights 5 4 3 2 7 6 5 4.
fn ch(rest: &str) -> bool {
    let rest = rest.strip_prefix('E').unwrap_or(rest);
    let rest = ["MWST", "TVA", "IVA"].iter().find_map(|s| rest.strip_suffix(s)).unwrap_or(rest);
    let Some(d) = digits(rest).filter(|d| d.len() == 9) else { return false };
    let sum: u32 = d[..8].iter().zip([5, 4, 3, 2, 7, 6, 5, 4]).map(|(x, w)| x * w).sum();
    let check = (11 - sum % 11) % 11;
    check != 10 && check == d[8]
}

/// AT: `U` + 8 digits, a Luhn variant.
fn at(rest: &str) -> bool {
    let Some(d) = rest.strip_prefix('U').and_then(digits).filter(|d| d.len() == 8) else { return false };
    let s: u32 = d[..7]
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            if i % 2 == 1 {
                let y = x * 2;
                y / 10 + y % 10
            } else {
                x
            }
        })
        .sum();
    (10 - (s + 4) % 10) % 10 == d[7]
}

/// GB: 9 digits, weights 8..2 plus the last two, mod 97 (or the 55-offset series).
fn gb(rest: &str) -> bool {
    let Some(d) = digits(rest).filter(|d| d.len() == 9 || d.len() == 12) else { return false };
    let sum: i64 = d[..7].iter().zip((2..=8).rev()).map(|(&x, w)| x as i64 * w).sum();
    let check = (d[7] * 10 + d[8]) as i64;
    (sum + check) % 97 == 0 || (sum + check + 55) % 97 == 0
}

/// `len` digits whose weighted sum (weights len..2) and last digit agree mod 11 (PT).
fn weighted_mod11(rest: &str, len: usize) -> bool {
    let Some(d) = digits(rest).filter(|d| d.len() == len) else { return false };
    let sum: u32 = d[..len - 1].iter().enumerate().map(|(i, &x)| x * (len - i) as u32).sum();
    let check = (11 - sum % 11) % 11;
    (if check == 10 { 0 } else { check }) == d[len - 1]
}

static CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(AT|BE|BG|CH|CY|CZ|DE|DK|EE|EL|ES|FI|FR|GB|HR|HU|IE|IT|LT|LU|LV|MT|NL|PL|PT|RO|SE|SI|SK)[ .:-]{0,2}((?:[0-9A-Z][ .-]?){7,13}[0-9A-Z])")
        .expect("regex")
});

/// Every valid VAT number in `s` with its byte position: each candidate is tried at every length
/// from the longest down, as a number may run into the next word.
pub fn find_all(s: &str) -> Vec<(usize, VatNumber)> {
    let mut out = Vec::new();
    for c in CANDIDATE.captures_iter(s) {
        let (Some(cc), Some(body)) = (c.get(1), c.get(2)) else { continue };
        let chars: Vec<char> = body.as_str().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        for len in (7..=chars.len()).rev() {
            let candidate: String = chars[..len].iter().collect();
            if let Some(v) = VatNumber::parse(&format!("{}{candidate}", cc.as_str())) {
                out.push((cc.start(), v));
                break;
            }
        }
    }
    out
}

/// National tax numbers printed without their country code, by the label before them: the
/// Polish NIP, the Spanish CIF/NIF, the Italian partita IVA. (folded label, country.)
const NATIONAL: &[(&str, &str)] = &[
    ("nip", "PL"),
    ("cif", "ES"),
    ("nif", "ES"),
    ("n.i.f", "ES"),
    ("nif-iva", "ES"),
    ("p.iva", "IT"),
    ("p. iva", "IT"),
    ("partita iva", "IT"),
];

static NATIONAL_NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([A-Z]?\d(?:[ .-]?\d){6,10}[A-Z0-9]?)\b").expect("regex"));

/// Every national number of `s` whose label (within the 24 characters before it) names its
/// country, as a VAT number with the country's code, its check digits verified.
pub fn find_national(s: &str) -> Vec<(usize, VatNumber)> {
    let mut out = Vec::new();
    for m in NATIONAL_NUMBER.find_iter(s) {
        let mut start = m.start().saturating_sub(24);
        while !s.is_char_boundary(start) {
            start += 1;
        }
        let before = super::text::fold(&s[start..m.start()]);
        let before = before.as_str();
        // The nearest label before the number decides its country.
        let Some(&(_, cc)) = NATIONAL
            .iter()
            .filter_map(|l| super::text::find_word(before, l.0).last().map(|&at| (at, l)))
            .max_by_key(|(at, _)| *at)
            .map(|(_, l)| l)
        else {
            continue;
        };
        if let Some(v) = VatNumber::parse(&format!("{cc}{}", m.as_str())) {
            out.push((m.start(), v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_digits_per_country() {
        for ok in [
            "FR11999999998",
            "FR40303265045",
            "FR 60 421938861",
            "BE0123456749",
            "DE 232 446 240",
            "NL810433941B01",
            "IT00743110157",
            "ESA12345674",
            "LU15027442",
            "CHE-116.281.710 MWST",
            "ATU13585627",
        ] {
            assert!(VatNumber::parse(ok).is_some(), "{ok} should be valid");
        }
        for bad in ["FR12999999998", "BE0123456748", "DE232446241", "IT00743110158", "XX123456789", "FR"] {
            assert!(VatNumber::parse(bad).is_none(), "{bad} should be refused");
        }
        assert_eq!(VatNumber::parse("FR40303265045").unwrap().siren(), Some("303265045"));
        assert!(VatNumber::parse("PL1234563218").is_some());
        assert!(VatNumber::parse("PL1234563217").is_none(), "the NIP's check digit");
        let found = find_all("TVA : FR11999999998 - SIRET : 99999999800010");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1.as_str(), "FR11999999998");
        assert_eq!(
            find_all("USt-IdNr.: DE 232 446 240 Seite").first().map(|v| v.1.as_str().to_owned()).as_deref(),
            Some("DE232446240")
        );
    }

    #[test]
    fn polish_nip_spanish_cif_and_italian_partita_iva_without_their_country_code() {
        let nip = find_national("NIP: 123-456-32-18");
        assert_eq!(nip.iter().map(|v| v.1.as_str()).collect::<Vec<_>>(), ["PL1234563218"]);
        assert!(find_national("NIP: 123-456-32-17").is_empty(), "a NIP whose check fails");
        assert_eq!(
            find_national("CIF: A12345674").first().map(|v| v.1.as_str().to_owned()).as_deref(),
            Some("ESA12345674")
        );
        assert_eq!(
            find_national("P.IVA: 00743110157").first().map(|v| v.1.as_str().to_owned()).as_deref(),
            Some("IT00743110157")
        );
        assert!(find_national("Tel. 123-456-32-18").is_empty(), "no label, no country");
    }
}
