//! Invoice field extraction (issue 7): the `meta` of `profile=invoice`.
//!
//! Two sources, the structured one first: a Factur-X / ZUGFeRD / XRechnung PDF's embedded CII
//! XML, or an uploaded CII or UBL XML, is read exactly ([`facturx`]); otherwise the page's
//! positioned words (text layer on a character grid, or the OCR engine's boxes: [`words`]) are
//! grouped into rows and cells ([`layout`]), labels are found in the cells ([`labels`],
//! [`fields`]) and the values beside or below them are read by the field's own parser, which
//! checks what can be checked: VAT numbers ([`vat`]), SIRET/SIREN ([`siret`]), IBAN ([`iban`]),
//! dates ([`dates`]), amounts ([`amounts`]). The totals are chosen together so that they agree
//! ([`totals`]).

pub mod amounts;
pub mod blocks;
pub mod dates;
pub mod facturx;
pub mod fields;
pub mod iban;
pub mod labels;
pub mod layout;
pub mod meta;
pub mod products;
pub mod siret;
pub mod supplier;
pub mod text;
pub mod title;
pub mod totals;
pub mod vat;
pub mod vocabulary;
pub mod words;

use crate::ocr::engine::{Language, OcrWord};
use amounts::Whole;
use dates::DayOrder;
use fields::{Candidate, best, candidates};
use labels::Key;
use layout::Layout;
use meta::{Amount, Found, InvoiceMeta, Source};

pub use facturx::XmlInvoiceError;
pub use meta::InvoiceMeta as Meta;

/// A value is an amount when the cell holds little else: a whole number (`319`) counts then.
fn amount_in(s: &str) -> Option<Amount> {
    let whole = if s.trim().chars().count() <= 14 { Whole::Accept } else { Whole::Refuse };
    amounts::find(s, whole)
}

/// Extracts the fields from positioned words (all pages, in order).
pub fn from_words(words: Vec<OcrWord>, lang: Language) -> InvoiceMeta {
    let layout = Layout::from_words(&words::level(words::upright(words)));
    from_layout(&layout, lang)
}

/// Extracts the fields from a text laid out as `pdftotext -layout` lays it out.
pub fn from_layout_text(text: &str, lang: Language) -> InvoiceMeta {
    from_layout(&Layout::from_words(&words::from_layout_text(text)), lang)
}

/// Reads an uploaded or embedded CII / UBL invoice.
pub fn from_xml(xml: &[u8]) -> Result<InvoiceMeta, XmlInvoiceError> {
    facturx::parse(xml)
}

fn from_layout(layout: &Layout, lang: Language) -> InvoiceMeta {
    let full = layout.text();
    let hits = fields::labels(layout);
    let order = dates::day_order(&full).unwrap_or(match lang {
        // Without evidence, English invoices here are as often US as British: day first is the
        // rule for every language the service reads, a US date with a day above 12 says otherwise.
        Language::French | Language::German | Language::Italian | Language::English => DayOrder::DayFirst,
    });
    let found = |c: Option<Candidate<String>>| c.map(|c| Found::new(c.value, c.score));

    // Dates: labelled ones; an unlabelled invoice date falls back to the first date of the page.
    let date_c = candidates(layout, &hits, Key::Date, |s| dates::find(s, order));
    let due_c = candidates(layout, &hits, Key::DueDate, |s| dates::find(s, order));
    let due = best(&due_c);
    let date = best(&date_c).or_else(|| {
        layout.rows.iter().enumerate().find_map(|(r, row)| {
            dates::find(&row.text(), order)
                .filter(|d| due.as_ref().is_none_or(|due| due.value != *d))
                .map(|d| Candidate { value: d, score: 0.4 * row.confidence(), row: r })
        })
    });

    let number = best(&candidates(layout, &hits, Key::InvoiceNumber, fields::invoice_number));
    let invoice_label = title::find(layout);

    // Amounts, chosen together.
    let rates = totals::breakdown(layout);
    let mut gross = candidates(layout, &hits, Key::Gross, amount_in);
    let mut payable = candidates(layout, &hits, Key::Payable, amount_in);
    let mut net = candidates(layout, &hits, Key::Net, amount_in);
    let mut column_tax = Vec::new();
    for (key, c) in fields::column_candidates(layout, &hits) {
        match key {
            Key::Gross => gross.push(c),
            Key::Payable => payable.push(c),
            Key::Net => net.push(c),
            _ => column_tax.push(c),
        }
    }
    // A "TVA 20 %" label's value is a rate's amount, counted in the breakdown, not the total.
    let tax: Vec<Candidate<Amount>> =
        candidates(layout, &hits, Key::Tax, |s| if amounts::percents(s).is_empty() { amount_in(s) } else { None })
            .into_iter()
            .filter(|c| amounts::percents(&layout.rows[c.row].text()).is_empty() || rates.is_empty())
            .chain(column_tax)
            .collect();
    let chosen = totals::choose(gross, payable, net, tax, &rates);
    let single = |key: Key| best(&candidates(layout, &hits, key, amount_in)).map(|c| Found::new(c.value, c.score));
    let mut exo = single(Key::Exempt);
    if exo.is_none()
        && let Some(zero) = rates.iter().find(|t| t.rate == Amount::ZERO)
        && let Some(base) = zero.base
    {
        exo = Some(Found::new(base, zero.confidence));
    }
    let rates: Vec<_> = rates.into_iter().filter(|t| t.rate != Amount::ZERO || t.amount != Amount::ZERO).collect();

    let parties = blocks::blocks(layout);
    let vat = supplier::vat_number(layout, &hits, &parties);
    let siret = supplier::siret(layout, &hits, vat.as_ref().map(|v| &v.value));
    let (name, details) = supplier::identity(layout, &hits, &parties, vat.as_ref().map(|v| &v.value));
    let currency = amounts::currency(&full).map(|(c, n)| Found::new(c, if n >= 2 { 0.9 } else { 0.6 }));

    let meta = InvoiceMeta {
        source: Source::Layout,
        supplier_name: name,
        supplier_numtva: vat.map(|v| Found::new(v.value.as_str().to_owned(), v.confidence)),
        supplier_siret: siret,
        company_details: details,
        invoice_number: found(number),
        invoice_label,
        date: date.map(|c| Found::new(c.value, c.score)),
        due_date: due.map(|c| Found::new(c.value, c.score)),
        currency,
        amount: chosen.gross,
        amount_untaxed: chosen.net,
        amount_tax: chosen.tax,
        taxes: rates,
        exo_tax_base: exo,
        eco_part: single(Key::EcoTax),
        delivery_untaxed: single(Key::Shipping),
        iban: supplier::iban(layout),
        products: products::lines(layout, &hits),
    };
    // A name guessed from the first line is no invoice on its own.
    let name_only = InvoiceMeta {
        source: Source::Layout,
        supplier_name: meta.supplier_name.clone(),
        company_details: meta.company_details.clone(),
        ..InvoiceMeta::default()
    };
    if meta == name_only { InvoiceMeta::default() } else { meta }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_french_invoice_laid_out_as_pdftotext_does() {
        let text = "ACME Fournitures SARL                        FACTURE 2026-042\n\
                    12 rue des Lilas                              Date : 14/11/2026\n\
                    75011 Paris\n\
                    TVA : FR40303265045    SIRET : 303 265 045 00011\n\
                    \n\
                    Designation                        Qté       Montant\n\
                    Papier A4 ramette                   2        100,00 EUR\n\
                    Total HT                                     100,00 EUR\n\
                    TVA 20%                                       20,00 EUR\n\
                    Total TTC                                    120,00 EUR\n\
                    IBAN FR76 3000 6000 0112 3456 7890 189\n";
        let meta = from_layout_text(text, Language::French);
        let json = meta.to_json();
        assert_eq!(json["supplier_name"], "ACME Fournitures SARL");
        assert_eq!(json["invoice_number"], "2026-042");
        assert_eq!(json["date"], "2026-11-14");
        assert_eq!(json["amount"], "120.00");
        assert_eq!(json["amount_untaxed"], "100.00");
        assert_eq!(json["amount_tax"], "20.00");
        assert_eq!(json["value_tax1"], "20.00");
        assert_eq!(json["supplier_numtva"], "FR40303265045");
        assert_eq!(json["iban"], "FR7630006000011234567890189");
        assert_eq!(json["currency"], "EUR");
        assert_eq!(json["company_details"]["cp"], "75011");
        assert_eq!(json["products"][0]["label"], "Papier A4 ramette");
    }

    /// Nothing panics on input: pseudo-random pages of labels, numbers, accents, symbols and
    /// multi-byte characters, laid out and as OCR boxes in any position.
    #[test]
    fn arbitrary_pages_never_panic() {
        const PIECES: &[&str] = &[
            "Total TTC",
            "TVA",
            "20 %",
            "5,5%",
            "1 234,56",
            "-12,00 €",
            "N°",
            "Facture",
            "Date",
            ":",
            "13/11/2017",
            "FR40303265045",
            "IBAN FR76",
            "SIRET",
            "é",
            "€",
            "°",
            "ü",
            "—",
            "  ",
            "\n",
            "0",
            "99999999999999999999",
            "Client",
            "SARL",
            " - ",
            "août",
            "%",
            ".",
            ",",
            "x",
            "👍",
        ];
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let n = (next() % 80) as usize;
            let text: String =
                (0..n).map(|_| PIECES[(next() % PIECES.len() as u64) as usize]).collect::<Vec<_>>().join(" ");
            let _ = from_layout_text(&text, Language::French).to_json();
            let words: Vec<OcrWord> = text
                .split_whitespace()
                .map(|t| OcrWord {
                    text: t.to_owned(),
                    left: (next() % 3000) as i32 - 100,
                    top: (next() % 4000) as i32 - 100,
                    width: (next() % 400) as i32,
                    height: (next() % 80) as i32,
                    confidence: (next() % 100) as f32 / 100.0,
                })
                .collect();
            let _ = from_words(words, Language::German).to_json();
        }
    }

    #[test]
    fn nothing_on_the_page_is_an_empty_meta() {
        assert_eq!(from_layout_text("hello world", Language::English).to_json(), serde_json::json!(""));
    }
}
