//! The document's title (`invoice_label`): the word the page prints as its heading ("Rechnung",
//! "Facture", "Faktura VAT", "Credit note"), never a caption such as "Rechnungsnummer:".

use super::layout::Layout;
use super::meta::Found;
use super::text::{boundary_after, fold};
use super::vocabulary::parties::TITLES;

/// Rows from the top where a title is looked for (a multi-page invoice repeats it lower down).
const TOP_ROWS: usize = 30;

/// The title: a cell that is a title word alone ("RECHNUNG") is surest; else a cell that starts
/// with one followed by a space and something that is not a word's continuation ("FACTURE N°
/// FA-1"). Upper-case titles are given in sentence case, as the word is written ("Rechnung").
pub fn find(layout: &Layout) -> Option<Found<String>> {
    let mut best: Option<(f32, String)> = None;
    for row in layout.rows.iter().take(TOP_ROWS) {
        for cell in &row.cells {
            let text = cell.text.trim();
            let folded = fold(text);
            let folded = folded.trim_end_matches([':', '.']).trim_end();
            // The longest title the cell starts with.
            let Some(title) = TITLES
                .iter()
                .filter(|t| folded.starts_with(**t) && boundary_after(folded, t.len()))
                .max_by_key(|t| t.len())
            else {
                continue;
            };
            let alone = folded.len() == title.len();
            let rest = folded[title.len()..].trim_start();
            // "Rechnung (380) Nr. 1" and "Facture N° 1" title the page; "Factura rectificada:" does not.
            if !alone && (rest.starts_with(':') || rest.is_empty()) {
                continue;
            }
            // A title alone is surest; one that starts a caption ("Invoice number: 42") least.
            let score = if alone {
                0.9
            } else if rest.contains(':') {
                0.4
            } else {
                0.6
            } * cell.confidence.max(0.5);
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, sentence_case(&text[..original_len(text, title.len())])));
            }
        }
    }
    best.map(|(s, t)| Found::new(t, s))
}

/// The byte length in `original` of its first `folded_len` folded bytes (folding keeps chars).
fn original_len(original: &str, folded_len: usize) -> usize {
    super::text::original_offset(original, folded_len)
}

/// "RECHNUNG" -> "Rechnung", "FAKTURA VAT" -> "Faktura VAT"; mixed case stays as printed.
fn sentence_case(s: &str) -> String {
    if s.chars().any(char::is_lowercase) {
        return s.to_owned();
    }
    s.split(' ')
        .enumerate()
        .map(|(i, w)| {
            if i > 0 && ["VAT", "IVA", "TVA", "BTW"].contains(&w) {
                w.to_owned()
            } else if i == 0 {
                let mut c = w.chars();
                c.next().map(|f| f.to_uppercase().chain(c.flat_map(char::to_lowercase)).collect()).unwrap_or_default()
            } else {
                w.to_lowercase()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::invoice::words::from_layout_text;

    fn title(text: &str) -> Option<String> {
        find(&Layout::from_words(&from_layout_text(text))).map(|f| f.value)
    }

    #[test]
    fn the_title_is_the_heading_not_the_number_caption() {
        assert_eq!(title("Rechnungsnummer: RE-1      RECHNUNG\nDatum: 1.2.2026").as_deref(), Some("Rechnung"));
        assert_eq!(title("FACTURE N° FA-2026-1").as_deref(), Some("Facture"));
        assert_eq!(title("FAKTURA VAT\nFaktura VAT nr FV/1/2026").as_deref(), Some("Faktura VAT"));
        assert_eq!(title("NOTA DI CREDITO").as_deref(), Some("Nota di credito"));
        assert_eq!(title("Tax Invoice").as_deref(), Some("Tax Invoice"));
        assert_eq!(title("Rechnungsnummer: RE-1"), None);
        assert_eq!(title("Invoice number: 42").as_deref(), Some("Invoice"), "the title's word, never the caption");
    }
}
