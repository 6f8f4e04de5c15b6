//! Labels found in cells, and the values beside them: the rest of the label's cell, the cells to
//! its right on the same row, then the cells below it. Each value found is a candidate with a
//! score (the label's sureness times the place's, times the reading confidence).

use super::labels::Key;
use super::layout::Layout;
use super::text::{find_word, fold, original_offset};

/// A label's occurrence: row, cell, the byte offset where its value may start in the cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelHit {
    pub key: Key,
    pub weight: f32,
    pub row: usize,
    pub cell: usize,
    pub value_at: usize,
    /// Whether the label opens its cell (nothing but spaces before it).
    pub opens_cell: bool,
}

/// A value found for a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<T> {
    pub value: T,
    pub score: f32,
    pub row: usize,
}

/// Every label in the layout; in each cell, overlapping matches keep the longest.
pub fn labels(layout: &Layout) -> Vec<LabelHit> {
    let mut hits = Vec::new();
    for (r, row) in layout.rows.iter().enumerate() {
        for (c, cell) in row.cells.iter().enumerate() {
            let folded = fold(&cell.text);
            let mut found: Vec<(usize, usize, Key, f32)> = Vec::new();
            for &(label, key, weight) in super::vocabulary::labels() {
                for at in find_word(&folded, label) {
                    found.push((at, at + label.len(), key, weight));
                }
            }
            // Longest first; a match inside a longer one is dropped.
            found.sort_by_key(|(s, e, _, _)| (std::cmp::Reverse(e - s), *s));
            let mut kept: Vec<(usize, usize, Key, f32)> = Vec::new();
            for f in found {
                if kept.iter().all(|k| f.1 <= k.0 || f.0 >= k.1) {
                    kept.push(f);
                }
            }
            kept.sort_by_key(|k| k.0);
            for (start, end, key, weight) in kept {
                let opens_cell = folded[..start].trim().is_empty();
                hits.push(LabelHit {
                    key,
                    weight,
                    row: r,
                    cell: c,
                    value_at: original_offset(&cell.text, end),
                    opens_cell,
                });
            }
        }
    }
    hits
}

/// Where a value was found relative to its label, and how much that place is trusted.
const SAME_CELL: f32 = 1.0;
const RIGHT: [f32; 4] = [0.95, 0.8, 0.7, 0.6];
const BELOW: [f32; 2] = [0.75, 0.5];

/// The candidates for `key`: `parse` reads a value out of a piece of text.
pub fn candidates<T>(
    layout: &Layout,
    hits: &[LabelHit],
    key: Key,
    parse: impl Fn(&str) -> Option<T>,
) -> Vec<Candidate<T>> {
    let mut out = Vec::new();
    for hit in hits.iter().filter(|h| h.key == key) {
        let row = &layout.rows[hit.row];
        let cell = &row.cells[hit.cell];
        // Another label between this one and the value takes the value for itself.
        let next_label_in_cell = hits
            .iter()
            .filter(|h| h.row == hit.row && h.cell == hit.cell && h.value_at > hit.value_at)
            .map(|h| h.value_at)
            .min();
        let rest = &cell.text[hit.value_at..];
        let rest = match next_label_in_cell {
            Some(end) => {
                // The other label's start: search back from its value offset over its word(s).
                let cut = cell.text[hit.value_at..end].len();
                let mut r = &rest[..cut];
                while let Some(i) = r.trim_end().rfind(' ') {
                    let word = &r[i..].trim();
                    if word.chars().any(|c| c.is_ascii_digit()) {
                        break;
                    }
                    r = &r[..i];
                }
                r
            }
            None => rest,
        };
        if let Some(v) = parse(rest) {
            out.push(Candidate { value: v, score: hit.weight * SAME_CELL * cell.confidence, row: hit.row });
            continue;
        }
        // A cell below that opens with another date label holds that label's date ("Fällig am:"
        // under an unreadable "Belegdatum:").
        let labelled_elsewhere = |r: usize, c: usize| {
            hits.iter().any(|h| {
                h.row == r
                    && h.cell == c
                    && (h.value_at == 0 || (is_date_key(key) && h.opens_cell && is_date_key(h.key)))
            })
        };
        // A date the engine cut in two cells ("Fällig am: 22." | "August 2026").
        if is_date_key(key)
            && !rest.trim().is_empty()
            && let Some(right) = row.cells.get(hit.cell + 1)
            && let Some(v) = parse(&format!("{rest} {}", right.text))
        {
            out.push(Candidate {
                value: v,
                score: hit.weight * RIGHT[0] * cell.confidence.min(right.confidence),
                row: hit.row,
            });
            continue;
        }
        let mut found = false;
        for (i, right) in row.cells.iter().enumerate().skip(hit.cell + 1).take(RIGHT.len()) {
            if hits.iter().any(|h| h.row == hit.row && h.cell == i && h.key != key && h.weight >= 0.9) {
                break;
            }
            if let Some(v) = parse(&right.text) {
                let place = RIGHT[i - hit.cell - 1];
                out.push(Candidate { value: v, score: hit.weight * place * right.confidence, row: hit.row });
                found = true;
                break;
            }
        }
        if found {
            continue;
        }
        if !below_allowed(key, hit.weight) {
            continue;
        }
        for (k, below) in layout.rows.iter().enumerate().skip(hit.row + 1).take(BELOW.len()) {
            let Some((i, c)) =
                below.cells.iter().enumerate().find(|(_, c)| c.left < cell.right + 10 && c.right > cell.left - 10)
            else {
                continue;
            };
            if labelled_elsewhere(k, i) {
                break;
            }
            if let Some(v) = parse(&c.text) {
                out.push(Candidate { value: v, score: hit.weight * BELOW[k - hit.row - 1] * c.confidence, row: k });
                break;
            }
        }
    }
    out
}

fn is_date_key(key: Key) -> bool {
    matches!(key, Key::Date | Key::DueDate)
}

/// Amount labels are also table column headers ("Montant", "MwSt."), whose values below are lines,
/// not totals: only a sure label takes the value below it.
fn below_allowed(key: Key, weight: f32) -> bool {
    match key {
        Key::Gross | Key::Net | Key::Tax | Key::Payable | Key::Shipping | Key::EcoTax | Key::Exempt => weight >= 0.9,
        Key::InvoiceNumber | Key::Date | Key::DueDate | Key::Customer | Key::CarryOver => true,
    }
}

/// Totals written as a table row under column headers (`Montant HT | Montant TVA | Montant TTC`
/// then `Total facture   24.99   5.00   29.99`): each amount of a row that a total label starts
/// goes to the amount label of the header above it, within `HEADER_ROWS` rows.
pub fn column_candidates(
    layout: &Layout,
    hits: &[LabelHit],
) -> Vec<(Key, Candidate<crate::ocr::invoice::meta::Amount>)> {
    const HEADER_ROWS: usize = 8;
    let amount_key = |k: Key| matches!(k, Key::Gross | Key::Net | Key::Tax | Key::Payable);
    let mut out = Vec::new();
    for total in hits.iter().filter(|h| amount_key(h.key) && h.cell == 0) {
        let row = &layout.rows[total.row];
        for cell in row.cells.iter().skip(1) {
            let Some(value) = super::amounts::find(&cell.text, super::amounts::Whole::Refuse) else { continue };
            let header = hits.iter().filter(|h| {
                amount_key(h.key) && h.row < total.row && h.row + HEADER_ROWS >= total.row && h.weight >= 0.9 && {
                    let hc = &layout.rows[h.row].cells[h.cell];
                    hc.left < cell.right && hc.right > cell.left
                }
            });
            if let Some(h) = header.max_by_key(|h| h.row) {
                out.push((h.key, Candidate { value, score: h.weight * 0.8 * cell.confidence, row: total.row }));
            }
        }
    }
    out
}

/// The best candidate (highest score, then earliest).
pub fn best<T: Clone>(cands: &[Candidate<T>]) -> Option<Candidate<T>> {
    cands.iter().enumerate().max_by(|(i, a), (j, b)| a.score.total_cmp(&b.score).then(j.cmp(i))).map(|(_, c)| c.clone())
}

/// An invoice number: the first token with a digit, 3 to 30 characters of letters, digits and
/// `-/_.#`, that is neither a date nor an amount. Before it, the rest of a label is passed over:
/// a document-type code in parentheses ("Rechnung (380) Nr."), "Nr.", "VAT" ("Faktura VAT nr").
pub fn invoice_number(s: &str) -> Option<String> {
    // `?` and `"`: how the engine reads a `º` or `°` without its font.
    let s = s.trim_start_matches([':', '.', ',', ' ', '-', '°', 'º', '?', '"']);
    let tokens: Vec<&str> = s.split_whitespace().collect();
    for (i, &token) in tokens.iter().enumerate() {
        if i > 4 {
            break;
        }
        let folded = fold(token);
        let word = folded.trim().trim_end_matches([':', '.']);
        if matches!(
            word,
            "n" | "no"
                | "nr"
                | "nummer"
                | "numero"
                | "number"
                | "#"
                | "du"
                | "vom"
                | "del"
                | "of"
                | "vat"
                | "de"
                | "nro"
        ) || (token.starts_with('(') && token.trim_end_matches([':', '.']).ends_with(')'))
        {
            continue;
        }
        // A letter the engine set apart from its digits ("F 202690202").
        let joined;
        let token = match tokens.get(i + 1) {
            Some(next)
                if token.len() <= 2
                    && token.chars().all(|c| c.is_ascii_uppercase())
                    && next.chars().all(|c| c.is_ascii_digit())
                    && next.len() >= 4 =>
            {
                joined = format!("{token}{next}");
                joined.as_str()
            }
            _ => token,
        };
        let t = token.trim_matches(|c: char| matches!(c, ':' | ',' | ';' | '(' | ')'));
        let t = t.trim_end_matches('.');
        if !(3..=30).contains(&t.len())
            || !t.chars().any(|c| c.is_ascii_digit())
            || !t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '/' | '_' | '.' | '#'))
        {
            return None;
        }
        // A date is no number; "FV/12/03/2026" (a Polish series, month and year) is one.
        let lettered = t.chars().any(|c| c.is_ascii_alphabetic());
        if (!lettered && super::dates::find(t, super::dates::DayOrder::DayFirst).is_some())
            || super::amounts::find(t, super::amounts::Whole::Refuse).is_some_and(|_| t.contains([',', '.']))
        {
            return None;
        }
        return Some(t.to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::invoice::amounts::{self, Whole};
    use crate::ocr::invoice::words::from_layout_text;

    #[test]
    fn values_beside_and_below_their_labels() {
        let layout = Layout::from_words(&from_layout_text(
            "FACTURE N° 2026-042          Date d'échéance : 14/12/2026\n\
             Total HT       100,00 €\n\
             Total TTC\n\
             120,00 €",
        ));
        let hits = labels(&layout);
        let number = candidates(&layout, &hits, Key::InvoiceNumber, invoice_number);
        assert_eq!(best(&number).unwrap().value, "2026-042");
        let net = candidates(&layout, &hits, Key::Net, |s| amounts::find(s, Whole::Refuse));
        assert_eq!(best(&net).unwrap().value.to_string(), "100.00");
        let gross = candidates(&layout, &hits, Key::Gross, |s| amounts::find(s, Whole::Refuse));
        assert_eq!(best(&gross).unwrap().value.to_string(), "120.00");
        assert!(hits.iter().any(|h| h.key == Key::DueDate));
        assert!(!hits.iter().any(|h| h.key == Key::Date));
    }

    #[test]
    fn invoice_numbers_are_tokens_with_digits() {
        assert_eq!(invoice_number(" : FA-2017-0010").as_deref(), Some("FA-2017-0010"));
        assert_eq!(invoice_number("N° 562044387").as_deref(), Some("562044387"));
        assert_eq!(invoice_number(", RE-2026-5657").as_deref(), Some("RE-2026-5657"));
        assert_eq!(invoice_number("#BLR_WFLD20151000982590").as_deref(), Some("#BLR_WFLD20151000982590"));
        assert_eq!(invoice_number("à régler par virement"), None);
        assert_eq!(invoice_number("13/11/2017"), None);
        assert_eq!(invoice_number("120,00"), None);
        assert_eq!(invoice_number(" (380) Nr. RE-2026-11920").as_deref(), Some("RE-2026-11920"));
        assert_eq!(invoice_number(" VAT nr FV/12/03/2026").as_deref(), Some("FV/12/03/2026"));
        assert_eq!(invoice_number(" (TD01) n. 86802/2026").as_deref(), Some("86802/2026"));
        assert_eq!(invoice_number(".: F 202690202").as_deref(), Some("F202690202"), "a letter set apart by the engine");
        assert_eq!(invoice_number("? A-2026/27266").as_deref(), Some("A-2026/27266"), "a º read as ?");
    }
}
