//! invoice2data's field names mapped onto the `meta` names of the original service
//! (decisions.md: `amount`, `amount_untaxed`, `vat` -> `supplier_numtva`, `date`, ...). Fields
//! with no `meta` name stay visible under `template_fields`, as the template's author named them.

use super::coerce;
use super::{Extraction, Template};
use serde_json::{Map, Value, json};

/// invoice2data name -> meta name, and whether the value is an amount.
const NAMES: &[(&str, &str, bool)] = &[
    ("issuer", "supplier_name", false),
    ("vat", "supplier_numtva", false),
    ("siret", "supplier_siret", false),
    ("siren", "supplier_siret", false),
    ("invoice_number", "invoice_number", false),
    ("date", "date", false),
    ("date_due", "due_date", false),
    ("due_date", "due_date", false),
    ("currency", "currency", false),
    ("amount", "amount", true),
    ("amount_untaxed", "amount_untaxed", true),
    ("amount_tax", "amount_tax", true),
    ("iban", "iban", false),
];

/// Keys invoice2data adds that say nothing about the document.
const NOISE: &[&str] = &["desc"];

impl Template {
    /// The `meta` entries this extraction sets (each with confidence 1: the template's author
    /// vouched for the pattern), to lay over the generic extraction.
    pub fn meta(&self, ex: &Extraction) -> Map<String, Value> {
        to_meta(ex, self.options.decimal_separator)
    }
}

pub fn to_meta(ex: &Extraction, decimal_separator: char) -> Map<String, Value> {
    let mut meta = Map::new();
    let mut confidence = Map::new();
    let mut others = Map::new();
    for (key, value) in &ex.fields {
        let Some((_, name, amount)) = NAMES.iter().find(|(k, _, _)| k == key) else {
            if key == "lines"
                && let Some(products) = products(value)
            {
                meta.insert("products".into(), products);
                confidence.insert("products".into(), json!(1.0));
                continue;
            }
            if !NOISE.contains(&key.as_str()) {
                others.insert(key.clone(), value.clone());
            }
            continue;
        };
        let text = match (value, amount) {
            (Value::Number(n), true) => n.as_f64().map(|n| format!("{n:.2}")),
            (Value::String(s), true) => coerce::number(s, decimal_separator).map(|n| format!("{n:.2}")),
            (Value::String(s), false) => Some(s.trim().to_owned()),
            (Value::Array(list), _) => list.first().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
            (other, _) => Some(other.to_string()),
        };
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            let text = if matches!(*name, "supplier_numtva" | "iban" | "supplier_siret") {
                text.replace(' ', "")
            } else {
                text
            };
            meta.insert((*name).into(), text.into());
            confidence.insert((*name).into(), json!(1.0));
        }
    }
    if let Some(Value::String(issuer)) = ex.fields.get("issuer") {
        meta.insert("template".into(), issuer.clone().into());
    }
    if !others.is_empty() {
        meta.insert("template_fields".into(), Value::Object(others));
    }
    meta.insert("confidence".into(), Value::Object(confidence));
    meta
}

/// Template line rows as `products` when they carry at least a label or an amount.
fn products(lines: &Value) -> Option<Value> {
    let rows = lines.as_array()?;
    let pick = |row: &Map<String, Value>, keys: &[&str]| {
        keys.iter().find_map(|k| row.get(*k)).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
    };
    let products: Vec<Value> = rows
        .iter()
        .filter_map(Value::as_object)
        .filter_map(|row| {
            let label = pick(row, &["label", "name", "description", "designation"]);
            let total = pick(row, &["total_ht", "price_subtotal", "amount", "total"]);
            if label.is_none() && total.is_none() {
                return None;
            }
            Some(json!({
                "ref": pick(row, &["ref", "code", "product_code", "sku"]).unwrap_or_default(),
                "label": label.unwrap_or_default(),
                "qty": pick(row, &["qty", "quantity"]).unwrap_or_default(),
                "unit_price": pick(row, &["unit_price", "price_unit", "price"]).unwrap_or_default(),
                "total_ht": total.unwrap_or_default(),
                "tax_value": pick(row, &["tax_value", "line_tax_percent", "vat_rate"]).unwrap_or_default(),
            }))
        })
        .collect();
    (!products.is_empty()).then_some(Value::Array(products))
}
