//! Who sent the invoice: VAT number (check digits), SIRET/SIREN (Luhn), IBAN (mod 97), name and
//! postal address. Numbers found on rows that speak of the customer are the customer's.

use super::labels::{CUSTOMER_WORDS, Key, LEGAL_FORMS};
use super::layout::Layout;
use super::meta::{CompanyDetails, Found};
use super::text::{find_word, fold};
use super::vat::VatNumber;
use super::{fields::LabelHit, iban, siret, vat};
use regex::Regex;
use std::sync::LazyLock;

/// Whether row `r` (up to byte `at` of its text) speaks of the customer.
fn customer_row(layout: &Layout, hits: &[LabelHit], r: usize, at: usize) -> bool {
    if hits.iter().any(|h| h.row == r && h.key == Key::Customer) {
        return true;
    }
    let text = layout.rows[r].text();
    let before = fold(&text[..at.min(text.len())]);
    CUSTOMER_WORDS.iter().any(|w| !find_word(&before, w).is_empty())
}

/// The supplier's VAT number: the first valid one not on a customer's row.
pub fn vat_number(layout: &Layout, hits: &[LabelHit]) -> Option<Found<VatNumber>> {
    let mut fallback = None;
    for (r, row) in layout.rows.iter().enumerate() {
        let text = row.text();
        for (at, v) in vat::find_all(&text) {
            if customer_row(layout, hits, r, at) {
                continue;
            }
            let folded = fold(&text);
            let labelled = ["tva", "vat", "ust", "iva", "mwst", "btw", "tax"].iter().any(|w| folded.contains(w));
            let conf = if labelled { 0.95 } else { 0.8 } * row.confidence().max(0.5);
            if labelled {
                return Some(Found::new(v, conf));
            }
            fallback.get_or_insert(Found::new(v, conf));
        }
    }
    fallback
}

/// The supplier's SIRET (or SIREN): labelled first, else the SIREN inside a French VAT number.
pub fn siret(layout: &Layout, hits: &[LabelHit], vat: Option<&VatNumber>) -> Option<Found<String>> {
    for (r, row) in layout.rows.iter().enumerate() {
        let text = row.text();
        let folded = fold(&text);
        for (at, id, check) in siret::find_all(&text) {
            if customer_row(layout, hits, r, at) {
                continue;
            }
            let label_before = ["siret", "siren", "rcs", "sir"].iter().filter_map(|l| folded.find(l)).any(|i| i < at);
            match (label_before, check) {
                (true, siret::Check::Valid) => return Some(Found::new(id, 0.95 * row.confidence().max(0.5))),
                (true, siret::Check::Failed) => return Some(Found::new(id, 0.4 * row.confidence().max(0.5))),
                // Unlabelled digits are too often bank or phone numbers.
                (false, _) => continue,
            }
        }
    }
    vat.and_then(VatNumber::siren).map(|s| Found::new(s.to_owned(), 0.6))
}

/// The first valid IBAN, labelled ones first.
pub fn iban(layout: &Layout) -> Option<Found<String>> {
    let mut first = None;
    for row in &layout.rows {
        let text = row.text();
        for (_, i) in iban::find_all(&text) {
            if fold(&text).contains("iban") {
                return Some(Found::new(i, 0.95 * row.confidence().max(0.5)));
            }
            first.get_or_insert(Found::new(i, 0.7 * row.confidence().max(0.5)));
        }
    }
    first
}

static POSTCODE_CITY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:([A-Z]{1,2})-)?(\d{4,5}|[A-Z]{1,2}\d[A-Z\d]? ?\d[A-Z]{2}|\d{4} ?[A-Z]{2})\s+([\p{L}][\p{L}' .-]{1,40})$",
    )
    .expect("regex")
});

/// Separators between the parts of a letterhead line ("Name SARL - 1 rue ... - 75001 Paris").
static SEPARATOR: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s[-−–—|•·]\s").expect("regex"));
/// Where a letterhead's name ends and its legal mentions start.
static MENTIONS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\s(au capital|capital|mit sitz|con sede|rcs|siret|siren|registergericht|hrb)\b.*$").expect("regex")
});

/// The company name in a letterhead segment: legal mentions cut, a leading "Sold by :" dropped.
fn company_name(segment: &str) -> String {
    let s = MENTIONS.replace(segment.trim(), "");
    let s = match s.rsplit_once(':') {
        Some((before, after)) if before.split_whitespace().count() <= 3 && has_legal_form(after) => after,
        _ => &s,
    };
    s.trim().trim_end_matches([',', ':', ';']).trim().to_owned()
}

fn has_legal_form(s: &str) -> bool {
    let f = fold(s);
    LEGAL_FORMS.iter().any(|l| !find_word(&f, l).is_empty())
}

/// Title words that start a page but are no company's name.
fn is_title(s: &str) -> bool {
    let f = fold(s);
    [
        "facture",
        "invoice",
        "rechnung",
        "fattura",
        "avoir",
        "credit note",
        "gutschrift",
        "factuur",
        "page",
        "date",
        "tax invoice",
        "receipt",
        "quittung",
        "original",
    ]
    .iter()
    .any(|t| f.starts_with(t))
}

/// The country a name means (fr/de/it/en), as ISO code.
fn country_code(name: &str) -> Option<&'static str> {
    let f = fold(name.trim());
    Some(match f.as_str() {
        "france" | "frankreich" | "francia" => "FR",
        "germany" | "deutschland" | "allemagne" | "germania" => "DE",
        "italy" | "italia" | "italie" | "italien" => "IT",
        "belgium" | "belgique" | "belgien" | "belgio" | "belgie" => "BE",
        "spain" | "espagne" | "spanien" | "spagna" | "espana" => "ES",
        "switzerland" | "suisse" | "schweiz" | "svizzera" => "CH",
        "luxembourg" | "luxemburg" | "lussemburgo" => "LU",
        "netherlands" | "pays-bas" | "niederlande" | "paesi bassi" | "nederland" => "NL",
        "austria" | "autriche" | "osterreich" => "AT",
        "united kingdom" | "royaume-uni" | "uk" => "GB",
        "india" | "inde" => "IN",
        "usa" | "united states" | "etats-unis" => "US",
        _ => return None,
    })
}

/// Supplier name and address. The name is the first text with a company legal form that is not
/// the customer's, else the page's first line of words; the address follows it (same row after
/// ` - `, or the rows below it).
pub fn identity(
    layout: &Layout,
    hits: &[LabelHit],
    vat: Option<&VatNumber>,
) -> (Option<Found<String>>, CompanyDetails) {
    let mut details =
        CompanyDetails { numero_tva_intra: vat.map(|v| v.as_str().to_owned()), ..CompanyDetails::default() };
    details.code_pays = vat.map(|v| v.country().to_owned());
    // Customer blocks: a row with a customer word and the few rows under it, in the same column.
    let customer_rows: Vec<usize> =
        (0..layout.rows.len()).filter(|&r| customer_row(layout, hits, r, usize::MAX)).collect();
    let near_customer = |r: usize| customer_rows.iter().any(|&c| r >= c && r <= c + 4);
    let mut name: Option<(usize, usize, String, f32)> = None;
    'rows: for (r, row) in layout.rows.iter().enumerate().take(80) {
        for (c, cell) in row.cells.iter().enumerate() {
            for segment in SEPARATOR.split(&cell.text) {
                if !has_legal_form(segment) || near_customer(r) {
                    continue;
                }
                let s = company_name(segment);
                let letters = fold(&s)
                    .split(|ch: char| !ch.is_alphanumeric() && ch != '.')
                    .filter(|w| !w.is_empty() && !LEGAL_FORMS.contains(w))
                    .map(|w| w.chars().filter(|ch| ch.is_alphabetic()).count())
                    .sum::<usize>();
                if letters >= 3 {
                    name = Some((r, c, s, 0.8 * cell.confidence.max(0.5)));
                    break 'rows;
                }
                // "SARL au capital de ..." under the name: the name is the cell above.
                if let Some(above) = r.checked_sub(1).map(|a| &layout.rows[a])
                    && let Some((ac, a)) =
                        above.cells.iter().enumerate().find(|(_, a)| a.left < cell.right && a.right > cell.left)
                    && a.text.chars().filter(|ch| ch.is_alphabetic()).count() >= 3
                {
                    name = Some((r - 1, ac, a.text.trim().to_owned(), 0.7 * a.confidence.max(0.5)));
                    break 'rows;
                }
            }
        }
    }
    if name.is_none() {
        for (r, row) in layout.rows.iter().enumerate().take(8) {
            let Some((c, cell)) = row.cells.iter().enumerate().find(|(_, c)| {
                let letters = c.text.chars().filter(|ch| ch.is_alphabetic()).count();
                letters >= 3 && letters * 2 > c.text.chars().count() && !is_title(&c.text)
            }) else {
                continue;
            };
            if near_customer(r) {
                continue;
            }
            name = Some((r, c, cell.text.trim().to_owned(), 0.5 * cell.confidence.max(0.5)));
            break;
        }
    }
    let Some((r, c, text, conf)) = name else { return (None, details) };
    details.name = Some(text.clone());
    // The address: the rest of the name's cell split by " - ", else the next rows' cells under it.
    let cell = &layout.rows[r].cells[c];
    let mut parts: Vec<String> = cell.text.split(" - ").skip(1).map(|s| s.trim().to_owned()).collect();
    if parts.is_empty() {
        for below in layout.rows.iter().skip(r + 1).take(4) {
            if let Some(b) = below.cells.iter().find(|b| b.left < cell.right && b.right > cell.left) {
                parts.push(b.text.trim().to_owned());
            }
        }
    }
    // Five-digit postcodes (FR, DE, IT, ES) before four-digit ones, which a street number can mimic.
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| !parts[i].split_whitespace().next().is_some_and(|w| w.len() == 5 || w.contains('-')));
    for i in order {
        let p = &parts[i];
        if let Some(m) = POSTCODE_CITY.captures(p) {
            details.cp = Some(m[2].to_owned());
            details.ville = Some(m[3].trim().to_owned());
            if i > 0 {
                details.adresse = Some(parts[i - 1].clone());
            }
            if let Some(next) = parts.get(i + 1)
                && let Some(cc) = country_code(next)
            {
                details.pays = Some(next.clone());
                details.code_pays.get_or_insert_with(|| cc.to_owned());
            }
            break;
        }
    }
    (Some(Found::new(text, conf)), details)
}
