//! Invoice extraction accuracy, through the real server with real Tesseract and the real PDF
//! sandbox, on `fixtures/invoices/` (ground truth beside each document). Prints per-field
//! accuracy per path and fails below the floors of issue 7, and of issue 17 for the European set
//! (`europe/dev`, developed on, and `europe/held-out`, never tuned on; per set and per language).
//! On the European set, what its truth says must never come back (the buyer's VAT number, the
//! buyer's or the delivery block's name as the supplier's) fails the test wherever it appears.
//!
//! Scoring: amounts compare as numbers (a credit note's by magnitude: the type-381 PDFs print
//! -233.47 where their XML says 233.47); identifiers and numbers compare on their letters and
//! digits (`#BLR_1` = `BLR_1`, `DE 232 446 240` = `DE232446240`); the supplier name matches when
//! one contains the other (the XML's "Au bon moulin" is printed "Au bon moulin SARL"); a SIREN
//! truth matches the SIRET that starts with it.

use crate::ocr::{upload, user_key};
use courrier_tests::harness::{TestApp, courrier_bin, workspace_root};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const AMOUNTS: &[&str] = &["amount", "amount_untaxed", "amount_tax", "exo_tax_base", "eco_part", "delivery_untaxed"];

fn is_amount(field: &str) -> bool {
    AMOUNTS.contains(&field) || field.starts_with("value_tax") || field.starts_with("amount_tax")
}

/// Letters and digits, lower case, accents dropped (OCR reads "Lumière" as "Lumiere" as often as
/// not; the name is still the right one).
fn alnum(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .map(|c| match c {
            'à' | 'á' | 'â' | 'ä' => 'a',
            'ç' => 'c',
            'è' | 'é' | 'ê' | 'ë' => 'e',
            'ì' | 'í' | 'î' | 'ï' => 'i',
            'ò' | 'ó' | 'ô' | 'ö' => 'o',
            'ù' | 'ú' | 'û' | 'ü' => 'u',
            c => c,
        })
        .collect()
}

fn field_matches(field: &str, expected: &str, got: Option<&str>, credit_note: bool) -> bool {
    let Some(got) = got else { return false };
    if is_amount(field) {
        let (Ok(e), Ok(g)) = (expected.parse::<f64>(), got.parse::<f64>()) else { return false };
        return if credit_note { (e.abs() - g.abs()).abs() < 0.005 } else { (e - g).abs() < 0.005 };
    }
    let (e, g) = (alnum(expected), alnum(got));
    match field {
        "supplier_name" => e.len() >= 3 && g.len() >= 3 && (e.contains(&g) || g.contains(&e)),
        "supplier_siret" => !e.is_empty() && g.starts_with(&e),
        _ => e == g,
    }
}

/// One document to score: the file to upload and its truth.
struct Case {
    file: PathBuf,
    truth: Value,
}

fn cases(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<Case> {
    let dir = workspace_root().join("fixtures/invoices").join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let file = dir.join(&n);
            let truth_path = file.with_extension("json");
            let truth = serde_json::from_slice(
                &std::fs::read(&truth_path).unwrap_or_else(|e| panic!("{}: {e}", truth_path.display())),
            )
            .unwrap();
            Case { file, truth }
        })
        .collect()
}

/// Per field: (right, total), per language, and the misses for the report.
#[derive(Default)]
struct Score {
    fields: BTreeMap<String, (usize, usize)>,
    langs: BTreeMap<String, (usize, usize)>,
    misses: Vec<String>,
    /// Values the truth's `never` forbids (another party's data as the supplier's).
    forbidden: Vec<String>,
}

impl Score {
    fn total(&self) -> (usize, usize) {
        self.fields.values().fold((0, 0), |(r, t), (a, b)| (r + a, t + b))
    }

    fn percent(&self) -> f64 {
        let (r, t) = self.total();
        if t == 0 { 0.0 } else { 100.0 * r as f64 / t as f64 }
    }

    fn report(&self, path: &str) -> String {
        let (r, t) = self.total();
        let mut out = format!("== {path}: {r}/{t} fields = {:.1}%\n", self.percent());
        for (field, (right, total)) in &self.fields {
            out += &format!("   {field:<18} {right:>3}/{total:<3} {:>5.1}%\n", 100.0 * *right as f64 / *total as f64);
        }
        if self.langs.len() > 1 {
            for (lang, (right, total)) in &self.langs {
                out += &format!(
                    "   language {lang:<9} {right:>3}/{total:<3} {:>5.1}%\n",
                    100.0 * *right as f64 / *total as f64
                );
            }
        }
        for f in &self.forbidden {
            out += &format!("   FORBIDDEN: {f}\n");
        }
        for m in &self.misses {
            out += &format!("   miss: {m}\n");
        }
        out
    }
}

fn score(app: &TestApp, key: &str, cases: &[Case]) -> Score {
    let mut s = Score::default();
    for case in cases {
        let name = case.file.file_name().unwrap().to_string_lossy().into_owned();
        // The service's `lang` takes fr, de, it, en: nl, es and pl documents go as `upload_lang`.
        let lang = case.truth["upload_lang"].as_str().or(case.truth["lang"].as_str()).unwrap_or("fr");
        let language = case.truth["lang"].as_str().unwrap_or("fr").to_owned();
        let bytes = std::fs::read(&case.file).unwrap();
        let resp = upload(app, key, &name, &bytes, &[("lang", lang), ("profile", "invoice")]);
        assert_eq!(resp.status, 200, "{name}: {}", resp.body);
        let meta = resp.json()["meta"].clone();
        let credit_note = case.truth["credit_note"].as_bool().unwrap_or(false);
        for (field, expected) in case.truth["meta"].as_object().unwrap() {
            let expected = expected.as_str().unwrap_or_default();
            let got = meta.get(field).and_then(Value::as_str);
            let ok = field_matches(field, expected, got, credit_note);
            let e = s.fields.entry(field.clone()).or_default();
            e.1 += 1;
            let l = s.langs.entry(language.clone()).or_default();
            l.1 += 1;
            if ok {
                e.0 += 1;
                l.0 += 1;
            } else {
                s.misses.push(format!("{name} {field}: expected {expected:?}, got {got:?}"));
            }
        }
        if let Some(never) = case.truth["never"].as_object() {
            for (field, values) in never {
                let got = meta.get(field).and_then(Value::as_str).unwrap_or_default();
                let values: Vec<&str> = match values {
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    v => v.as_str().into_iter().collect(),
                };
                if !got.is_empty() && values.iter().any(|v| field_matches(field, v, Some(got), false)) {
                    s.forbidden.push(format!("{name} {field}: {got:?} is another party's"));
                }
            }
        }
    }
    s
}

/// Floors of the European set (issue 17), a few points under what the last run measured (see
/// BENCHMARKS.md): per set, and for every language of every European set.
const EUROPE_DEV_TEXT: f64 = 98.0;
const EUROPE_DEV_SCANS: f64 = 93.0;
const EUROPE_HELD_OUT_TEXT: f64 = 97.0;
const EUROPE_HELD_OUT_SCANS: f64 = 92.0;
const EUROPE_LANGUAGE_FLOOR: f64 = 70.0;
/// The ZUGFeRD corpus's pages as text (74.3% on the last run; 70.3% before issue 17's text path).
const ZUGFERD_TEXT: f64 = 72.0;

fn ext(name: &str, e: &str) -> bool {
    Path::new(name).extension().is_some_and(|x| x == e)
}

#[test]
fn invoice_fields_are_extracted_above_the_floors() {
    courrier_bin();
    let app = TestApp::spawn();
    let key = user_key(&app, "accuracy@example.org");
    let sets: [(&str, Vec<Case>, f64); 10] = [
        ("Factur-X, embedded XML", cases("facturx", |n| ext(n, "pdf")), 100.0),
        ("Factur-X pages OCRed without their XML", cases("facturx", |n| ext(n, "jpg")), 95.0),
        ("invoice2data compare set, no templates", cases("invoice2data", |n| ext(n, "pdf")), 90.0),
        ("generated scans and photos", cases("generated", |n| ext(n, "jpg")), 90.0),
        ("generated text PDFs", cases("generated", |n| ext(n, "pdf")), 90.0),
        // The ZUGFeRD corpus's pages through the text path, XML removed: real German producers.
        ("ZUGFeRD corpus pages as text, XML removed", cases("zugferd-text", |n| ext(n, "pdf")), ZUGFERD_TEXT),
        // Issue 17: seven languages, five layouts (fixtures/invoices/europe.py).
        ("Europe dev, text PDFs", cases("europe/dev", |n| ext(n, "pdf")), EUROPE_DEV_TEXT),
        ("Europe dev, scans", cases("europe/dev", |n| ext(n, "jpg")), EUROPE_DEV_SCANS),
        ("Europe held-out, text PDFs", cases("europe/held-out", |n| ext(n, "pdf")), EUROPE_HELD_OUT_TEXT),
        ("Europe held-out, scans", cases("europe/held-out", |n| ext(n, "jpg")), EUROPE_HELD_OUT_SCANS),
    ];
    let mut failures = Vec::new();
    let mut report = String::new();
    for (path, cases, floor) in &sets {
        assert!(!cases.is_empty(), "{path}: no fixtures");
        let s = score(&app, &key, cases);
        report += &s.report(&format!("{path} ({} documents, floor {floor}%)", cases.len()));
        if s.percent() < *floor {
            failures.push(format!("{path}: {:.1}% < {floor}%", s.percent()));
        }
        if path.starts_with("Europe") {
            for (lang, (right, total)) in &s.langs {
                let p = 100.0 * *right as f64 / *total as f64;
                if p < EUROPE_LANGUAGE_FLOOR {
                    failures.push(format!("{path}, {lang}: {p:.1}% < {EUROPE_LANGUAGE_FLOOR}%"));
                }
            }
        }
        if !s.forbidden.is_empty() {
            failures.push(format!("{path}: another party's data returned: {:?}", s.forbidden));
        }
    }
    println!("{report}");
    assert!(failures.is_empty(), "below the floors: {failures:?}\n{report}");
}

#[test]
fn scoring_rules() {
    assert!(field_matches("amount", "233.47", Some("-233.47"), true));
    assert!(!field_matches("amount", "233.47", Some("-233.47"), false));
    assert!(field_matches("invoice_number", "#BLR_1", Some("BLR_1"), false));
    assert!(field_matches("supplier_numtva", "DE 232 446 240", Some("DE232446240"), false));
    assert!(field_matches("supplier_name", "Au bon moulin", Some("Au bon moulin SARL"), false));
    assert!(field_matches("supplier_name", "Müller GmbH", Some("Muller GmbH"), false));
    assert!(field_matches("supplier_siret", "421 938 861", Some("42193886100018"), false));
    assert!(!field_matches("date", "2017-11-13", None, false));
}

/// A CII XML upload is read exactly; a billion-laughs XML is taken as a document and yields no
/// meta (its DTD refused, nothing expanded); `profile=raw` never extracts.
#[test]
fn xml_uploads_and_the_raw_profile() {
    courrier_bin();
    let app = TestApp::spawn();
    let key = user_key(&app, "xml@example.org");
    let ubl = br#"<?xml version="1.0" encoding="UTF-8"?>
<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2" xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">
  <cbc:ID>UBL-42</cbc:ID><cbc:IssueDate>2026-11-14</cbc:IssueDate><cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode>
  <cac:LegalMonetaryTotal><cbc:TaxExclusiveAmount currencyID="EUR">100.00</cbc:TaxExclusiveAmount><cbc:TaxInclusiveAmount currencyID="EUR">120.00</cbc:TaxInclusiveAmount></cac:LegalMonetaryTotal>
</Invoice>"#;
    let resp = upload(&app, &key, "invoice.xml", ubl, &[("lang", "fr"), ("profile", "invoice")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let body = resp.json();
    assert_eq!(body["meta"]["invoice_number"], "UBL-42", "{body}");
    assert_eq!(body["meta"]["amount"], "120.00");
    assert_eq!(body["meta"]["confidence"]["amount"], 1.0);
    assert!(body["message"].as_str().unwrap().contains("xml"), "{body}");
    // The meta is kept with the document: GET answers it as POST did.
    let auth = format!("Bearer {key}");
    let path = format!("/api/ocrs?ocrID={}", body["ocrID"].as_str().unwrap());
    let stored = app.client.request("GET", &path, &[("authorization", &auth)], None);
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert_eq!(stored.json()["meta"], body["meta"]);

    let bomb = br#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;"><!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">]><Invoice>&lol2;</Invoice>"#;
    let resp = upload(&app, &key, "bomb.xml", bomb, &[("lang", "fr"), ("profile", "invoice")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.json()["meta"], "");

    let facturx = std::fs::read(workspace_root().join("fixtures/invoices/facturx/Facture_FR_BASIC.pdf")).unwrap();
    let raw = upload(&app, &key, "f.pdf", &facturx, &[("lang", "fr"), ("profile", "raw")]).json();
    assert_eq!(raw["meta"], "", "raw applies no extraction");
    assert!(raw["result"].as_str().unwrap().contains("FA-2017-0010"));
    let invoice = upload(&app, &key, "f.pdf", &facturx, &[("lang", "fr"), ("profile", "invoice")]).json();
    assert_eq!(invoice["meta"]["invoice_number"], "FA-2017-0010");
    assert_eq!(invoice["meta"]["confidence"]["invoice_number"], 1.0, "taken from the embedded XML");
}
