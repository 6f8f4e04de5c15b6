//! Who sent the invoice: VAT number (check digits), SIRET/SIREN (Luhn), IBAN (mod 97), name and
//! postal address. What lies in the buyer's or a delivery address's block ([`blocks`]), or after
//! a label of the customer's data, is the customer's; page headers, opening hours and taglines are
//! never a name.

use super::blocks::{self, Block, Party};
use super::labels::Key;
use super::layout::Layout;
use super::meta::{CompanyDetails, Found};
use super::text::{find_word, fold};
use super::vat::VatNumber;
use super::vocabulary::parties::{BUYER, DELIVERY, LEGAL_FORMS, NOT_A_NAME, TAGLINE, TITLES};
use super::{fields::LabelHit, iban, siret, vat};
use regex::Regex;
use std::sync::LazyLock;

/// Whether row `r` (up to byte `at` of its text) speaks of the customer: a customer's label on
/// the row, or a buyer's or delivery word before `at`. The row-wide rule for what [`Block`]s do
/// not cover (SIRET, the name's fallback).
fn customer_row(layout: &Layout, hits: &[LabelHit], r: usize, at: usize) -> bool {
    if hits.iter().any(|h| h.row == r && h.key == Key::Customer) {
        return true;
    }
    let text = layout.rows[r].text();
    let before = fold(&text[..floor_boundary(&text, at)]);
    BUYER.iter().chain(DELIVERY).any(|w| !find_word(&before, w).is_empty())
}

fn floor_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Whether the text at byte `at` of cell `c` of row `r` is the customer's: in the buyer's or a
/// delivery block, or after a customer's label in the same cell or the cell before it, or after a
/// buyer's word earlier in the cell.
fn customers(layout: &Layout, hits: &[LabelHit], found: &[Block], r: usize, c: usize, at: usize) -> bool {
    let cell = &layout.rows[r].cells[c];
    if matches!(blocks::party_at(found, r, cell.left), Some(Party::Buyer | Party::Delivery)) {
        return true;
    }
    let labelled = |cc: usize, upto: usize| {
        hits.iter().any(|h| h.row == r && h.cell == cc && h.key == Key::Customer && h.value_at <= upto)
    };
    if labelled(c, at) || (c > 0 && labelled(c - 1, usize::MAX)) {
        return true;
    }
    let before = fold(&cell.text[..floor_boundary(&cell.text, at)]);
    BUYER.iter().chain(DELIVERY).any(|w| !find_word(&before, w).is_empty())
}

/// The supplier's VAT number: one in the seller's block first, else the first labelled valid one
/// that is not the customer's, else the first valid one. National numbers (NIP, CIF, partita IVA)
/// count when their label names their country.
pub fn vat_number(layout: &Layout, hits: &[LabelHit], found: &[Block]) -> Option<Found<VatNumber>> {
    let mut labelled = None;
    let mut fallback = None;
    for (r, row) in layout.rows.iter().enumerate() {
        for (c, cell) in row.cells.iter().enumerate() {
            // A label in the cell before ("USt-IdNr.:   DE ...") counts as this cell's.
            let context = match c.checked_sub(1).map(|p| &row.cells[p]) {
                Some(prev) if prev.text.chars().filter(|ch| ch.is_ascii_digit()).count() == 0 => {
                    format!("{} {}", prev.text, cell.text)
                }
                _ => cell.text.clone(),
            };
            let shift = context.len() - cell.text.len();
            let mut numbers = vat::find_all(&context);
            numbers.extend(vat::find_national(&context));
            numbers.sort_by_key(|(at, _)| *at);
            for (at, v) in numbers {
                let at = at.saturating_sub(shift);
                if customers(layout, hits, found, r, c, at) {
                    continue;
                }
                let folded = fold(&context);
                let is_labelled =
                    ["tva", "vat", "ust", "iva", "mwst", "btw", "tax", "nip", "cif", "nif", "umsatzsteuer"]
                        .iter()
                        .any(|w| folded.contains(w));
                let conf = row.confidence().max(0.5);
                if blocks::party_at(found, r, cell.left) == Some(Party::Seller) {
                    return Some(Found::new(v, 0.95 * conf));
                }
                if is_labelled {
                    labelled.get_or_insert(Found::new(v, 0.9 * conf));
                } else {
                    fallback.get_or_insert(Found::new(v, 0.75 * conf));
                }
            }
        }
    }
    labelled.or(fallback)
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
        r"^(?:([A-Z]{1,2})-)?(\d{4} ?[A-Z]{2}|\d{4,5}|\d{2}-\d{3}|[A-Z]{1,2}\d[A-Z\d]? ?\d[A-Z]{2})\s+([\p{L}][\p{L}' .-]{1,40})$",
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
    TITLES.iter().chain(&["page", "date", "receipt", "quittung", "original"]).any(|t| f.starts_with(t))
}

/// A page header, opening hours, a contact line or a tagline: never a company's name. (A tagline's
/// words, "seit 1987", "Quality ...", only count without a legal form: "Quality Foods Ltd" is a name.)
fn never_a_name(s: &str) -> bool {
    let f = fold(s);
    if NOT_A_NAME.iter().any(|w| !find_word(&f, w).is_empty()) || HOURS.is_match(&f) {
        return true;
    }
    !has_legal_form(s) && (TAGLINE.iter().any(|w| !find_word(&f, w).is_empty()) || f.contains(", "))
}

static HOURS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b\d{1,2}(?:[:.h]\d{2})?\s?(?:-|–|bis|a|to)\s?\d{1,2}(?:[:.h]\d{2})\b").expect("regex")
});

/// The country a name means (fr/de/it/en), as ISO code.
fn country_code(name: &str) -> Option<&'static str> {
    let f = fold(name.trim());
    Some(match f.as_str() {
        "france" | "frankreich" | "francia" => "FR",
        "germany" | "deutschland" | "allemagne" | "germania" => "DE",
        "italy" | "italia" | "italie" | "italien" => "IT",
        "belgium" | "belgique" | "belgien" | "belgio" | "belgie" => "BE",
        "spain" | "espagne" | "spanien" | "spagna" | "espana" | "espanya" => "ES",
        "switzerland" | "suisse" | "schweiz" | "svizzera" => "CH",
        "luxembourg" | "luxemburg" | "lussemburgo" => "LU",
        "netherlands" | "pays-bas" | "niederlande" | "paesi bassi" | "nederland" => "NL",
        "poland" | "polska" | "pologne" | "polen" | "polonia" => "PL",
        "austria" | "autriche" | "osterreich" => "AT",
        "united kingdom" | "royaume-uni" | "uk" => "GB",
        "india" | "inde" => "IN",
        "usa" | "united states" | "etats-unis" => "US",
        _ => return None,
    })
}

/// Supplier name and address. The name is the first line of the seller's block, else the first
/// text with a company legal form that is neither in the buyer's nor a delivery block nor after a
/// customer's word, else the page's first line of words that is no title, header, tagline or
/// opening hours; the address follows it (same row after ` - `, or the rows below it).
pub fn identity(
    layout: &Layout,
    hits: &[LabelHit],
    found: &[Block],
    vat: Option<&VatNumber>,
) -> (Option<Found<String>>, CompanyDetails) {
    let mut details =
        CompanyDetails { numero_tva_intra: vat.map(|v| v.as_str().to_owned()), ..CompanyDetails::default() };
    details.code_pays = vat.map(|v| v.country().to_owned());
    let others = |r: usize, left: i32| matches!(blocks::party_at(found, r, left), Some(Party::Buyer | Party::Delivery));
    // Rows of a customer's word without a block (a row "Client : Dupont SARL"): the rows under it
    // in the same column are the customer's too.
    let customer_cells: Vec<(usize, i32, i32)> = layout
        .rows
        .iter()
        .enumerate()
        .filter(|&(r, _)| customer_row(layout, hits, r, usize::MAX))
        .flat_map(|(r, row)| {
            let bounds: Vec<(usize, i32, i32)> = row
                .cells
                .iter()
                .enumerate()
                .filter(|(c, _)| customers(layout, hits, found, r, *c, usize::MAX))
                .map(|(c, cell)| (r, cell.left, row.cells.get(c + 1).map_or(i32::MAX, |n| n.left)))
                .collect();
            bounds
        })
        .collect();
    let near_customer = |r: usize, left: i32| {
        others(r, left)
            || customer_cells.iter().any(|&(cr, l, right)| r >= cr && r <= cr + 4 && left >= l - 20 && left < right)
    };
    let mut name: Option<(usize, usize, String, f32)> = None;
    // The seller's own block, when labelled: its line with a legal form, else its first line of
    // words (not "Nummer : 12345676" nor "GLN 4333741000005 Lief-Nr: 549910").
    if let Some(b) = found.iter().find(|b| b.party == Party::Seller) {
        let mut first: Option<(usize, usize, String, f32)> = None;
        'seller: for r in b.first..=b.last {
            for (c, cell) in layout.rows[r].cells.iter().enumerate() {
                if !b.contains(r, cell.left) {
                    continue;
                }
                let text = if r == b.row && c == b.cell {
                    cell.text.split_once(':').map_or("", |(_, v)| v).trim().to_owned()
                } else {
                    cell.text.trim().to_owned()
                };
                let letters = text.chars().filter(|ch| ch.is_alphabetic()).count();
                let digits = text.chars().filter(|ch| ch.is_ascii_digit()).count();
                if letters < 3 || digits * 2 >= letters || text.contains(':') || never_a_name(&text) {
                    continue;
                }
                if has_legal_form(&text) {
                    name = Some((r, c, company_name(&text), 0.9 * cell.confidence.max(0.5)));
                    break 'seller;
                }
                first.get_or_insert((r, c, company_name(&text), 0.7 * cell.confidence.max(0.5)));
            }
        }
        if name.is_none() {
            name = first;
        }
    }
    'rows: for (r, row) in layout.rows.iter().enumerate().take(120) {
        if name.is_some() {
            break;
        }
        for (c, cell) in row.cells.iter().enumerate() {
            for segment in SEPARATOR.split(&cell.text) {
                if !has_legal_form(segment) || near_customer(r, cell.left) || blocks::party_label(segment).is_some() {
                    continue;
                }
                if never_a_name(segment) {
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
                letters >= 3
                    && letters * 2 > c.text.chars().count()
                    && !is_title(&c.text)
                    && !never_a_name(&c.text)
                    && blocks::party_label(&c.text).is_none()
                    && !near_customer(r, c.left)
            }) else {
                continue;
            };
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
        // The block's next lines in the name's column: other columns' rows may come between
        // them (a details block beside the letterhead), another block's label ends them.
        for below in layout.rows.iter().skip(r + 1).take(8) {
            if let Some(b) = below.cells.iter().find(|b| b.left < cell.right && b.right > cell.left) {
                if blocks::party_label(&b.text).is_some() || parts.len() == 4 {
                    break;
                }
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
