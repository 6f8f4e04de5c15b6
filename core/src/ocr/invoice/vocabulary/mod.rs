//! The words invoices print, per field kind, in the seven languages of issue 17 (fr, de, nl, it,
//! en, es, pl), folded as [`super::text::fold`] folds them (lower case, no accents, `ł` as `l`).
//! [`super::labels::LABELS`] holds the first vocabulary (fr, de, it, en and some Dutch); the
//! modules here add to it by kind, so a language is added where its field's words live:
//! [`totals`] (gross, net, tax, what remains to pay, carried-forward lines), [`identifiers`]
//! (invoice number, other documents' and the customer's numbers), [`dates`] (issue and due
//! dates), [`parties`] (the blocks of seller, buyer and delivery address, titles, legal forms,
//! lines that are never a company's name).

pub mod dates;
pub mod identifiers;
pub mod parties;
pub mod totals;

use super::labels::{Key, LABELS};

/// Every label: (folded label, what it announces, how surely).
pub fn labels() -> impl Iterator<Item = &'static (&'static str, Key, f32)> {
    LABELS.iter().chain(totals::LABELS).chain(identifiers::LABELS).chain(dates::LABELS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::invoice::text::fold;

    /// A label that is not folded would never match.
    #[test]
    fn every_label_is_written_folded() {
        for &(label, _, weight) in labels() {
            assert_eq!(fold(label), label, "{label}");
            assert!((0.0..=1.0).contains(&weight), "{label}");
        }
        for list in [parties::BUYER, parties::SELLER, parties::DELIVERY, parties::TITLES, parties::LEGAL_FORMS] {
            for w in list {
                assert_eq!(fold(w), *w, "{w}");
            }
        }
    }
}
