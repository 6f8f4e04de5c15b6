//! The page's party blocks: a label that opens the seller's, the buyer's or a delivery address's
//! block ("Sprzedawca:", "Rechnungsempfänger:", "Lieferanschrift:", "Bill to", ...), at the start
//! of a cell, and the cells under it in the same column until the column goes blank or another
//! block starts. What lies in a buyer's or a delivery block is never the supplier's.

use super::layout::Layout;
use super::text::{boundary_after, fold};
use super::vocabulary::parties::{BUYER, DELIVERY, SELLER};

/// Whose block it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    Seller,
    Buyer,
    Delivery,
}

/// A block: rows `first..=last`, cells starting in `[left - slack, right)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Block {
    pub party: Party,
    /// The label's row and cell.
    pub row: usize,
    pub cell: usize,
    pub first: usize,
    pub last: usize,
    pub left: i32,
    pub right: i32,
    slack: i32,
}

impl Block {
    pub fn contains(&self, row: usize, left: i32) -> bool {
        (self.first..=self.last).contains(&row) && left >= self.left - self.slack && left < self.right
    }
}

/// Rows a block spans at most under its label, and blank rows it may cross.
const MAX_ROWS: usize = 7;
const MAX_BLANK: usize = 2;

/// The party a cell's label announces, if the cell starts with one: the label then `:`, or the
/// label alone, or a label of several words ("bill to") then anything.
pub fn party_label(text: &str) -> Option<Party> {
    let folded = fold(text.trim());
    let mut best: Option<(usize, Party)> = None;
    for (list, party) in [(DELIVERY, Party::Delivery), (BUYER, Party::Buyer), (SELLER, Party::Seller)] {
        for label in list {
            if !folded.starts_with(label) || !boundary_after(&folded, label.len()) {
                continue;
            }
            let rest = folded[label.len()..].trim_start();
            let opens = rest.is_empty() || rest.starts_with(':') || label.contains(' ') || label.ends_with('.');
            if opens && best.is_none_or(|(len, _)| label.len() > len) {
                best = Some((label.len(), party));
            }
        }
    }
    best.map(|(_, p)| p)
}

/// Every party block of the page.
pub fn blocks(layout: &Layout) -> Vec<Block> {
    let heights: Vec<i32> = layout.rows.iter().map(|r| (r.bottom - r.top).max(1)).collect();
    let line = {
        let mut h = heights.clone();
        h.sort_unstable();
        h.get(h.len() / 2).copied().unwrap_or(1)
    };
    let mut out = Vec::new();
    for (r, row) in layout.rows.iter().enumerate() {
        for (c, cell) in row.cells.iter().enumerate() {
            let Some(party) = party_label(&cell.text) else { continue };
            let right = row.cells.get(c + 1).map_or(i32::MAX, |n| n.left);
            let slack = line;
            let mut block = Block { party, row: r, cell: c, first: r, last: r, left: cell.left, right, slack };
            let mut blank = 0;
            let mut bottom = row.bottom;
            for (k, below) in layout.rows.iter().enumerate().skip(r + 1).take(MAX_ROWS + MAX_BLANK) {
                // A wide vertical gap ends the block (three lines of nothing).
                if below.top - bottom > 3 * line {
                    break;
                }
                let here: Vec<&super::layout::Cell> =
                    below.cells.iter().filter(|x| block.contains(k, x.left)).collect();
                if here.iter().any(|x| party_label(&x.text).is_some()) {
                    break;
                }
                // Only the cells in the block's column count; the column may stay blank on rows of
                // the other columns.
                let in_column = below.cells.iter().any(|x| x.left >= block.left - slack && x.left < block.right);
                if in_column {
                    block.last = k;
                    bottom = below.bottom;
                    blank = 0;
                    if k - r >= MAX_ROWS {
                        break;
                    }
                } else {
                    blank += 1;
                    if blank > MAX_BLANK {
                        break;
                    }
                }
                block.first = r;
            }
            out.push(block);
        }
    }
    out
}

/// The block that holds the cell starting at `left` on row `row`, if any (the latest label's).
pub fn party_at(blocks: &[Block], row: usize, left: i32) -> Option<Party> {
    blocks.iter().filter(|b| b.contains(row, left)).max_by_key(|b| b.row).map(|b| b.party)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::invoice::words::from_layout_text;

    #[test]
    fn seller_buyer_and_delivery_blocks_side_by_side() {
        let layout = Layout::from_words(&from_layout_text(
            "Sprzedawca:                         Faktura VAT nr FV/1/2026\n\
             Biuro Plus Sp. z o.o.               Data: 12.11.2026\n\
             ul. Długa 5\n\
             00-590 Warszawa\n\
             \n\
             Nabywca:                            Odbiorca:\n\
             Piekarnia Sp. z o.o.                Magazyn Sp. z o.o.\n\
             NIP: 123-456-32-18\n\
             \n\
             \n\
             \n\
             Nazwa towaru    Ilość   Cena",
        ));
        let b = blocks(&layout);
        let party = |r: usize, c: usize| party_at(&b, r, layout.rows[r].cells[c].left);
        assert_eq!(party(1, 0), Some(Party::Seller));
        assert_eq!(party(1, 1), None, "the invoice's details beside the seller");
        // Blank lines make no rows: row 4 is "Nabywca: ... Odbiorca:".
        assert_eq!(party(5, 0), Some(Party::Buyer));
        assert_eq!(party(5, 1), Some(Party::Delivery));
        assert_eq!(party(6, 0), Some(Party::Buyer));
        let last = layout.rows.len() - 1;
        assert_eq!(party(last, 0), None, "the table is no one's block");
        assert_eq!(party_label("Customer No.: 4711"), None);
        assert_eq!(party_label("Kunden-Nr.: 4711"), None);
        assert_eq!(party_label("Bill to Greenfield Books"), Some(Party::Buyer));
        assert_eq!(party_label("Lieferanschrift:"), Some(Party::Delivery));
    }
}
