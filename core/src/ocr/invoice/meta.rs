//! The extracted invoice as a typed value, and its `meta` JSON object (decisions.md, OCR section).
//! Every field is optional and carries its own confidence, so a later layer (templates, the
//! supplier directory) can read or override one field without re-parsing JSON.

use super::dates::Date;
use serde_json::{Map, Value, json};

/// A money amount or rate, exact to 1/10,000 (unit prices and rates in Factur-X carry up to four
/// decimals). Shown as a decimal string with at least two decimals: `"1234.56"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(i64);

impl Amount {
    pub const ZERO: Amount = Amount(0);
    const SCALE: i64 = 10_000;

    pub fn from_cents(cents: i64) -> Self {
        Self(cents.saturating_mul(100))
    }

    pub fn ten_thousandths(self) -> i64 {
        self.0
    }

    /// A machine decimal (`"1234.56"`, `"-3.5"`, `"20"`), as XML invoices write them. `None` for
    /// anything else, or more than four decimals that are not zeros.
    pub fn parse_machine(s: &str) -> Option<Self> {
        let s = s.trim();
        let (neg, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() && frac.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        if int.len() > 14 {
            return None;
        }
        let frac = frac.trim_end_matches('0');
        if frac.len() > 4 {
            return None;
        }
        let int: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let frac_v: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<4}").parse().ok()? };
        let v = int.checked_mul(Self::SCALE)?.checked_add(frac_v)?;
        Some(Self(if neg { -v } else { v }))
    }

    pub fn abs(self) -> Self {
        Self(self.0.saturating_abs())
    }

    pub fn plus(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }

    pub fn minus(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0))
    }

    /// `self * percent / 100`, rounded to the cent.
    pub fn percent(self, rate: Amount) -> Amount {
        let v = (self.0 as i128) * (rate.0 as i128) / (100 * Self::SCALE as i128);
        Amount(((v + if v >= 0 { 50 } else { -50 }) / 100 * 100) as i64)
    }

    /// Equal within `cents` cents (invoices round per line or per rate).
    pub fn close_to(self, other: Amount, cents: i64) -> bool {
        (self.0 - other.0).abs() <= cents * 100
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let v = self.0.unsigned_abs();
        let (int, frac) = (v / Self::SCALE as u64, v % Self::SCALE as u64);
        let frac = format!("{frac:04}");
        let frac = if frac.ends_with("00") { &frac[..2] } else { frac.trim_end_matches('0') };
        write!(f, "{sign}{int}.{frac}")
    }
}

/// Below this confidence a field is answered `""` (not found) rather than a value the rules are
/// unsure of: on the accuracy sets, values scored under it were wrong more often than right.
pub const MIN_CONFIDENCE: f32 = 0.2;

/// A value with the extractor's confidence in it, 0..1.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<T> {
    pub value: T,
    pub confidence: f32,
}

impl<T> Found<T> {
    pub fn new(value: T, confidence: f32) -> Self {
        Self { value, confidence: confidence.clamp(0.0, 1.0) }
    }

    /// Taken from a structured source (Factur-X, UBL): exact.
    pub fn exact(value: T) -> Self {
        Self { value, confidence: 1.0 }
    }
}

/// The supplier's postal identity (`company_details`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompanyDetails {
    pub name: Option<String>,
    pub adresse: Option<String>,
    pub cp: Option<String>,
    pub ville: Option<String>,
    pub pays: Option<String>,
    /// ISO 3166-1 alpha-2.
    pub code_pays: Option<String>,
    pub numero_tva_intra: Option<String>,
}

/// One VAT rate of the breakdown (`value_taxN` / `amount_taxN`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaxLine {
    pub rate: Amount,
    pub base: Option<Amount>,
    pub amount: Amount,
    pub confidence: f32,
}

/// One invoice line (`products`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Product {
    pub reference: Option<String>,
    pub label: String,
    pub qty: Option<Amount>,
    pub unit_price: Option<Amount>,
    pub total_ht: Option<Amount>,
    pub tax_value: Option<Amount>,
}

/// Where the fields came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
    /// Nothing was extracted.
    #[default]
    Nothing,
    /// The embedded or uploaded Cross Industry Invoice XML (Factur-X, ZUGFeRD, XRechnung).
    Cii,
    /// An uploaded UBL invoice or credit note.
    Ubl,
    /// Labels and values found on the page (text layer or OCR).
    Layout,
}

/// Everything extracted from one invoice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InvoiceMeta {
    pub source: Source,
    pub supplier_name: Option<Found<String>>,
    pub supplier_numtva: Option<Found<String>>,
    pub supplier_siret: Option<Found<String>>,
    pub company_details: CompanyDetails,
    pub invoice_number: Option<Found<String>>,
    pub invoice_label: Option<Found<String>>,
    pub date: Option<Found<Date>>,
    pub due_date: Option<Found<Date>>,
    pub currency: Option<Found<String>>,
    /// Gross (tax included).
    pub amount: Option<Found<Amount>>,
    /// Net (tax excluded).
    pub amount_untaxed: Option<Found<Amount>>,
    pub amount_tax: Option<Found<Amount>>,
    /// At most four rates, in the order found.
    pub taxes: Vec<TaxLine>,
    pub exo_tax_base: Option<Found<Amount>>,
    pub eco_part: Option<Found<Amount>>,
    pub delivery_untaxed: Option<Found<Amount>>,
    pub iban: Option<Found<String>>,
    pub products: Vec<Product>,
}

impl InvoiceMeta {
    pub fn is_empty(&self) -> bool {
        InvoiceMeta { source: self.source, ..InvoiceMeta::default() } == *self
    }

    /// The `meta` of the processing response: an object of the fields found, each with its
    /// confidence under `confidence`, or `""` when nothing was found (the contract's two shapes).
    pub fn to_json(&self) -> Value {
        if self.is_empty() {
            return Value::String(String::new());
        }
        let mut m = Map::new();
        let mut conf = Map::new();
        // Every key the client reads is there (decisions.md): `""` when not found, with no
        // confidence.
        let mut put = |name: &str, found: Option<(Value, f32)>| match found {
            Some((value, confidence)) if confidence >= MIN_CONFIDENCE => {
                m.insert(name.to_owned(), value);
                conf.insert(name.to_owned(), json!((f64::from(confidence) * 100.0).round() / 100.0));
            }
            _ => {
                m.insert(name.to_owned(), Value::String(String::new()));
            }
        };
        let text = |f: &Option<Found<String>>| f.as_ref().map(|f| (Value::String(f.value.clone()), f.confidence));
        let money = |f: &Option<Found<Amount>>| f.as_ref().map(|f| (Value::String(f.value.to_string()), f.confidence));
        let date = |f: &Option<Found<Date>>| f.as_ref().map(|f| (Value::String(f.value.iso()), f.confidence));
        for (name, v) in [
            ("supplier_name", text(&self.supplier_name)),
            ("supplier_numtva", text(&self.supplier_numtva)),
            ("supplier_siret", text(&self.supplier_siret)),
            ("invoice_number", text(&self.invoice_number)),
            ("invoice_label", text(&self.invoice_label)),
            ("date", date(&self.date)),
            ("due_date", date(&self.due_date)),
            ("currency", text(&self.currency)),
            ("amount", money(&self.amount)),
            ("amount_untaxed", money(&self.amount_untaxed)),
            ("amount_tax", money(&self.amount_tax)),
            ("exo_tax_base", money(&self.exo_tax_base)),
            ("eco_part", money(&self.eco_part)),
            ("delivery_untaxed", money(&self.delivery_untaxed)),
            ("iban", text(&self.iban)),
        ] {
            put(name, v);
        }
        for i in 0..4 {
            let t = self.taxes.get(i);
            put(&format!("value_tax{}", i + 1), t.map(|t| (Value::String(t.rate.to_string()), t.confidence)));
            put(&format!("amount_tax{}", i + 1), t.map(|t| (Value::String(t.amount.to_string()), t.confidence)));
        }
        {
            let c = &self.company_details;
            let s = |v: &Option<String>| Value::String(v.clone().unwrap_or_default());
            m.insert(
                "company_details".into(),
                json!({
                    "name": s(&c.name), "adresse": s(&c.adresse), "cp": s(&c.cp), "ville": s(&c.ville),
                    "pays": s(&c.pays), "codePays": s(&c.code_pays), "numeroTvaIntra": s(&c.numero_tva_intra),
                }),
            );
        }
        {
            let money = |a: &Option<Amount>| Value::String(a.map(|a| a.to_string()).unwrap_or_default());
            let lines: Vec<Value> = self
                .products
                .iter()
                .map(|p| {
                    json!({
                        "ref": p.reference.clone().unwrap_or_default(), "label": p.label,
                        "qty": money(&p.qty), "unit_price": money(&p.unit_price),
                        "total_ht": money(&p.total_ht), "tax_value": money(&p.tax_value),
                        // Read by the client on every line; not extracted yet.
                        "desc": "", "remise_percent": "", "ecounit": "", "ecopart": "", "rpcp": "",
                    })
                })
                .collect();
            m.insert("products".into(), Value::Array(lines));
        }
        m.insert("confidence".into(), Value::Object(conf));
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys ScanInvoices reads from `meta` and from each product line.
    const CLIENT_KEYS: &[&str] = &[
        "supplier_name",
        "supplier_numtva",
        "supplier_siret",
        "company_details",
        "invoice_number",
        "invoice_label",
        "date",
        "due_date",
        "currency",
        "amount",
        "amount_untaxed",
        "amount_tax",
        "value_tax1",
        "value_tax2",
        "value_tax3",
        "value_tax4",
        "amount_tax1",
        "amount_tax2",
        "amount_tax3",
        "amount_tax4",
        "exo_tax_base",
        "eco_part",
        "delivery_untaxed",
        "iban",
        "products",
        "confidence",
    ];

    #[test]
    fn every_key_the_client_reads_is_there_empty_when_not_found() {
        let meta = InvoiceMeta {
            amount: Some(Found { value: Amount::parse_machine("120").unwrap(), confidence: 0.9 }),
            taxes: vec![TaxLine {
                rate: Amount::parse_machine("20").unwrap(),
                base: None,
                amount: Amount::parse_machine("20").unwrap(),
                confidence: 0.8,
            }],
            products: vec![Product { label: "Papier".into(), ..Product::default() }],
            ..InvoiceMeta::default()
        };
        let json = meta.to_json();
        for key in CLIENT_KEYS {
            assert!(json.get(key).is_some(), "{key} missing: {json}");
        }
        assert_eq!(json["amount"], "120.00");
        assert_eq!(json["exo_tax_base"], "");
        assert_eq!(json["value_tax1"], "20.00");
        assert_eq!((json["value_tax2"].as_str(), json["amount_tax4"].as_str()), (Some(""), Some("")));
        assert_eq!(json["company_details"]["numeroTvaIntra"], "");
        assert!(json["confidence"].get("exo_tax_base").is_none(), "no confidence for what was not found");
        let line = &json["products"][0];
        for key in [
            "ref",
            "label",
            "qty",
            "unit_price",
            "total_ht",
            "tax_value",
            "desc",
            "remise_percent",
            "ecounit",
            "ecopart",
            "rpcp",
        ] {
            assert!(line[key].is_string(), "line key {key}: {line}");
        }
        assert_eq!(line["label"], "Papier");
    }

    #[test]
    fn amounts_parse_and_print_as_decimal_strings() {
        for (s, shown) in
            [("1234.56", "1234.56"), ("20", "20.00"), ("4.5500", "4.55"), ("-3.5", "-3.50"), ("0.1234", "0.1234")]
        {
            assert_eq!(Amount::parse_machine(s).unwrap().to_string(), shown, "{s}");
        }
        for bad in ["", "1,5", "1.23456", "abc", "1e5", "."] {
            assert_eq!(Amount::parse_machine(bad), None, "{bad}");
        }
        let net = Amount::parse_machine("81.90").unwrap();
        assert_eq!(net.percent(Amount::parse_machine("20").unwrap()).to_string(), "16.38");
    }

    #[test]
    fn nothing_found_is_the_empty_string() {
        assert_eq!(InvoiceMeta::default().to_json(), Value::String(String::new()));
        let meta = InvoiceMeta {
            amount: Some(Found::new(Amount::parse_machine("120").unwrap(), 0.9)),
            ..InvoiceMeta::default()
        };
        let json = meta.to_json();
        assert_eq!(json["amount"], "120.00");
        assert_eq!(json["confidence"]["amount"], 0.9);
    }

    #[test]
    fn a_field_below_the_confidence_threshold_is_empty_rather_than_wrong() {
        let meta = InvoiceMeta {
            amount: Some(Found::new(Amount::parse_machine("1511.87").unwrap(), 0.17)),
            date: Some(Found::new(Date::new(2026, 11, 14).unwrap(), 0.9)),
            ..InvoiceMeta::default()
        };
        let json = meta.to_json();
        assert_eq!(json["amount"], "");
        assert!(json["confidence"].get("amount").is_none(), "no confidence for what is not answered");
        assert_eq!(json["date"], "2026-11-14");
    }
}
