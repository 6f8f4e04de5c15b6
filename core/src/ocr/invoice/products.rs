//! Invoice lines, where the layout allows: the rows between a table header (description,
//! quantity, price ...) and the first totals row, each with a label and at least one amount.

use super::amounts;
use super::fields::LabelHit;
use super::labels::Key;
use super::layout::Layout;
use super::meta::{Amount, Product};
use super::text::{find_word, fold};

const HEADER_WORDS: &[&str] = &[
    "description",
    "designation",
    "libelle",
    "article",
    "produit",
    "bezeichnung",
    "beschreibung",
    "artikel",
    "descrizione",
    "articolo",
    "qty",
    "quantity",
    "quantite",
    "qte",
    "menge",
    "anzahl",
    "quantita",
    "qta",
    "prix",
    "price",
    "preis",
    "prezzo",
    "montant",
    "amount",
    "betrag",
    "importo",
    "unit",
    "unitaire",
    "einzelpreis",
    "item",
];

/// A quantity as lines print it: a whole number or up to three decimals, alone in its token.
fn plain_number(token: &str) -> Option<Amount> {
    let t = token.trim_end_matches(['x', 'X']);
    let ok = !t.is_empty()
        && t.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '.')
        && t.chars().filter(|c| !c.is_ascii_digit()).count() <= 1
        && t.chars().next().is_some_and(|c| c.is_ascii_digit());
    ok.then(|| Amount::parse_machine(&t.replace(',', "."))).flatten()
}

/// The line's quantity and unit price. Surest: a number and an amount of the row whose product is
/// the line's total. Else the first whole number (or one of up to three decimals that is not an
/// amount of the row), and the amount before the total; a quantity equal to the unit price is a
/// misreading (the engine merged or lost the quantity's cell) and is dropped.
fn quantity_and_price(row: &super::layout::Row, money: &[Amount]) -> (Option<Amount>, Option<Amount>) {
    let Some(&total) = money.last() else { return (None, None) };
    let numbers: Vec<Amount> =
        row.cells.iter().skip(1).flat_map(|c| c.text.split_whitespace()).filter_map(plain_number).collect();
    let times = |q: Amount, u: Amount| (q.ten_thousandths() as i128) * (u.ten_thousandths() as i128) / 10_000;
    for &q in &numbers {
        for &u in &money[..money.len() - 1] {
            // Within a cent of rounding, and not the unit price times one read twice.
            if q > Amount::ZERO && q != u && (times(q, u) - total.ten_thousandths() as i128).abs() <= 100 {
                return (Some(q), Some(u));
            }
        }
    }
    let unit = (money.len() >= 2).then(|| money[money.len() - 2]);
    let qty = numbers.iter().copied().find(|n| !money.contains(n)).filter(|q| Some(*q) != unit);
    (qty, unit)
}

pub fn lines(layout: &Layout, hits: &[LabelHit]) -> Vec<Product> {
    let Some(header) = layout.rows.iter().position(|row| {
        let f = fold(&row.text());
        HEADER_WORDS.iter().filter(|w| !find_word(&f, w).is_empty()).count() >= 2
    }) else {
        return Vec::new();
    };
    let header_text = fold(&layout.rows[header].text());
    let vat_column = ["tva", "vat", "mwst", "iva", "ust"].iter().any(|w| !find_word(&header_text, w).is_empty());
    let end = hits
        .iter()
        .filter(|h| {
            h.row > header && matches!(h.key, Key::Net | Key::Gross | Key::Tax | Key::Payable) && h.weight >= 0.5
        })
        .map(|h| h.row)
        .min()
        .unwrap_or(layout.rows.len());
    let mut out = Vec::new();
    for row in &layout.rows[header + 1..end] {
        let Some(first) = row.cells.first() else { continue };
        if first.text.chars().filter(|c| c.is_alphabetic()).count() < 3 || row.cells.len() < 2 {
            continue;
        }
        let money: Vec<Amount> =
            row.cells.iter().skip(1).filter_map(|c| amounts::find(&c.text, amounts::Whole::Refuse)).collect();
        let Some(&total) = money.last() else { continue };
        let (qty, unit_price) = quantity_and_price(row, &money);
        let tax_value = if vat_column {
            row.cells.iter().find_map(|c| amounts::percents(&c.text).first().map(|p| p.1))
        } else {
            None
        };
        let (reference, label) = match row.cells.get(1) {
            Some(second)
                if !first.text.contains(' ')
                    && first.text.chars().any(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
                    && second.text.chars().filter(|c| c.is_alphabetic()).count() >= 3
                    && amounts::find(&second.text, amounts::Whole::Refuse).is_none() =>
            {
                (Some(first.text.clone()), second.text.clone())
            }
            _ => (None, first.text.clone()),
        };
        out.push(Product { reference, label, qty, unit_price, total_ht: Some(total), tax_value });
    }
    out.truncate(200);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::invoice::words::from_layout_text;

    fn products(text: &str) -> Vec<Product> {
        let layout = Layout::from_words(&from_layout_text(text));
        let hits = crate::ocr::invoice::fields::labels(&layout);
        lines(&layout, &hits)
    }

    #[test]
    fn a_quantity_is_never_the_unit_price() {
        // The engine merged the quantity into the description's cell: no number of the row is a
        // quantity, and the unit price must not pass for one.
        let lines = products(
            "Bezeichnung                  Menge   Einzelpreis      Gesamt
             Kopierpapier A4 23                   74,41            1.711,43
             Nettobetrag                                           1.711,43",
        );
        assert_eq!(lines[0].unit_price.map(|a| a.to_string()).as_deref(), Some("74.41"));
        assert_ne!(lines[0].qty, lines[0].unit_price);
        // A quantity printed with two decimals is read by the line's product.
        let lines = products(
            "Description        Qty      Unit price     Amount
             Paper A4           2,00     74,41          148,82
             Subtotal                                   148,82",
        );
        assert_eq!(lines[0].qty.map(|a| a.to_string()).as_deref(), Some("2.00"));
        assert_eq!(lines[0].unit_price.map(|a| a.to_string()).as_deref(), Some("74.41"));
    }
}
