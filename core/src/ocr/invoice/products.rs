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
        let qty = row.cells.iter().skip(1).find_map(|c| {
            let t = c.text.trim();
            let num: String = t.chars().take_while(|ch| ch.is_ascii_digit() || *ch == ',' || *ch == '.').collect();
            let rest = t[num.len()..].trim();
            let plain =
                !num.is_empty() && (rest.is_empty() || rest.chars().all(|c| c.is_alphabetic() || "()./".contains(c)));
            (plain && !t.contains('%')).then(|| Amount::parse_machine(&num.replace(',', "."))).flatten()
        });
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
        out.push(Product {
            reference,
            label,
            qty,
            unit_price: (money.len() >= 2).then(|| money[money.len() - 2]),
            total_ht: Some(total),
            tax_value,
        });
    }
    out.truncate(200);
    out
}
