//! E-invoices as producers write them (issue 17): the XML of every PDF of the ZUGFeRD corpus
//! (`fixtures/invoices/zugferd/`: 34 PDFs of 7 producers, ZUGFeRD 1 and its pre-1.0 draft,
//! ZUGFeRD 2.0/2.1, Factur-X; attachments named in UTF-16BE or PDFDocEncoding, by `/UF` and
//! `/F`, declared in the name tree and/or `/AF`) is found by the real sandbox binary and read
//! with the values `index.csv` records; and a standalone UBL credit note uploaded as `.xml` is
//! read like one embedded.

use crate::ocr::{upload, user_key};
use courrier_core::adapters::pdf_sandbox::{SandboxLimits, SandboxedPdfReader};
use courrier_core::ocr::pdf::PdfReader;
use courrier_tests::harness::{TestApp, courrier_bin, workspace_root};
use serde_json::Value;

/// One row of `index.csv`: the file and what its XML says.
struct Truth {
    path: String,
    currency: String,
    grand_total: String,
    seller_name: String,
    seller_vat: String,
}

fn corpus() -> Vec<Truth> {
    let index = workspace_root().join("fixtures/invoices/zugferd/index.csv");
    let mut reader = csv::Reader::from_path(&index).unwrap_or_else(|e| panic!("{}: {e}", index.display()));
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    let (path, currency, total, name, vat) =
        (column("path"), column("currency"), column("grand_total"), column("seller_name"), column("seller_vat"));
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            Truth {
                path: r[path].to_owned(),
                currency: r[currency].to_owned(),
                grand_total: r[total].to_owned(),
                seller_name: r[name].to_owned(),
                seller_vat: r[vat].to_owned(),
            }
        })
        .collect()
}

/// The differences between what was read (`meta`, the response's shape) and the truth.
fn differences(t: &Truth, meta: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let total_ok = meta["amount"]
        .as_str()
        .and_then(|a| a.parse::<f64>().ok())
        .is_some_and(|a| t.grand_total.parse::<f64>().is_ok_and(|e| (a - e).abs() < 0.005));
    if !total_ok {
        out.push(format!("amount {} instead of {}", meta["amount"], t.grand_total));
    }
    for (field, expected) in
        [("currency", &t.currency), ("supplier_name", &t.seller_name), ("supplier_numtva", &t.seller_vat)]
    {
        if meta[field].as_str() != Some(expected.as_str()) {
            out.push(format!("{field} {} instead of {expected:?}", meta[field]));
        }
    }
    out
}

#[test]
fn the_embedded_xml_of_every_zugferd_and_factur_x_pdf_is_found_and_read() {
    let corpus = corpus();
    assert_eq!(corpus.len(), 34, "index.csv lists the corpus");
    let dir = workspace_root().join("fixtures/invoices/zugferd");
    let reader = SandboxedPdfReader::new(courrier_bin().to_path_buf(), SandboxLimits::default());
    let app = TestApp::spawn();
    let key = user_key(&app, "einvoices@example.com");
    let (mut found, mut read_right, mut served_right) = (0, 0, 0);
    let mut misses = Vec::new();
    for t in &corpus {
        let pdf = std::fs::read(dir.join(&t.path)).unwrap();
        // The sandbox child on its own: the attachment is found and its values read.
        match reader.invoice_xml(&pdf) {
            Ok(Some(xml)) => {
                found += 1;
                match courrier_core::ocr::invoice::from_xml(&xml) {
                    Ok(meta) => {
                        let diff = differences(t, &meta.to_json());
                        if diff.is_empty() {
                            read_right += 1;
                        } else {
                            misses.push(format!("{}: read {}", t.path, diff.join(", ")));
                        }
                    }
                    Err(e) => misses.push(format!("{}: the XML was found but not read: {e}", t.path)),
                }
            }
            Ok(None) => misses.push(format!("{}: no invoice XML found", t.path)),
            Err(e) => misses.push(format!("{}: the sandbox refused it: {e}", t.path)),
        }
        // Through the API: the client gets those values, exact (confidence 1: from the XML).
        let name = t.path.rsplit('/').next().unwrap();
        let resp = upload(&app, &key, name, &pdf, &[("lang", "de"), ("profile", "invoice")]);
        assert_eq!(resp.status, 200, "{}: {}", t.path, resp.body);
        let meta = &resp.json()["meta"];
        let mut diff = differences(t, meta);
        if meta["confidence"]["amount"].as_f64() != Some(1.0) {
            diff.push(format!("amount's confidence {} (not from the XML)", meta["confidence"]["amount"]));
        }
        if diff.is_empty() {
            served_right += 1;
        } else {
            misses.push(format!("{}: served {}", t.path, diff.join(", ")));
        }
    }
    let n = corpus.len();
    println!("ZUGFeRD corpus: XML found {found}/{n}, read right {read_right}/{n}, served right {served_right}/{n}");
    for m in &misses {
        println!("   miss: {m}");
    }
    assert!(misses.is_empty(), "{} misses:\n{}", misses.len(), misses.join("\n"));
}

/// A UBL credit note as XRechnung/Peppol write it, uploaded on its own.
const UBL_CREDIT_NOTE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<CreditNote xmlns="urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2" xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">
  <cbc:CustomizationID>urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_3.0</cbc:CustomizationID>
  <cbc:ID>GS-2026-0042</cbc:ID>
  <cbc:IssueDate>2026-03-12</cbc:IssueDate>
  <cbc:CreditNoteTypeCode>381</cbc:CreditNoteTypeCode>
  <cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode>
  <cac:AccountingSupplierParty><cac:Party>
    <cac:PostalAddress><cbc:StreetName>Hafenstraße 5</cbc:StreetName><cbc:CityName>Bremen</cbc:CityName><cbc:PostalZone>28195</cbc:PostalZone><cac:Country><cbc:IdentificationCode>DE</cbc:IdentificationCode></cac:Country></cac:PostalAddress>
    <cac:PartyTaxScheme><cbc:CompanyID>12/345/67890</cbc:CompanyID><cac:TaxScheme><cbc:ID>FC</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>
    <cac:PartyTaxScheme><cbc:CompanyID>DE136695976</cbc:CompanyID><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>
    <cac:PartyLegalEntity><cbc:RegistrationName>Nordsee Handel GmbH</cbc:RegistrationName></cac:PartyLegalEntity>
  </cac:Party></cac:AccountingSupplierParty>
  <cac:TaxTotal><cbc:TaxAmount currencyID="EUR">19.00</cbc:TaxAmount>
    <cac:TaxSubtotal><cbc:TaxableAmount currencyID="EUR">100.00</cbc:TaxableAmount><cbc:TaxAmount currencyID="EUR">19.00</cbc:TaxAmount>
      <cac:TaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>19</cbc:Percent><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:TaxCategory></cac:TaxSubtotal></cac:TaxTotal>
  <cac:LegalMonetaryTotal><cbc:LineExtensionAmount currencyID="EUR">100.00</cbc:LineExtensionAmount><cbc:TaxExclusiveAmount currencyID="EUR">100.00</cbc:TaxExclusiveAmount>
    <cbc:TaxInclusiveAmount currencyID="EUR">119.00</cbc:TaxInclusiveAmount><cbc:PayableAmount currencyID="EUR">119.00</cbc:PayableAmount></cac:LegalMonetaryTotal>
  <cac:CreditNoteLine><cbc:ID>1</cbc:ID><cbc:CreditedQuantity unitCode="C62">2</cbc:CreditedQuantity><cbc:LineExtensionAmount currencyID="EUR">100.00</cbc:LineExtensionAmount>
    <cac:Item><cbc:Name>Rücksendung Palette</cbc:Name><cac:ClassifiedTaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>19</cbc:Percent><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:ClassifiedTaxCategory></cac:Item>
    <cac:Price><cbc:PriceAmount currencyID="EUR">50.00</cbc:PriceAmount></cac:Price></cac:CreditNoteLine>
</CreditNote>"#;

#[test]
fn a_standalone_xrechnung_ubl_credit_note_upload_is_read_with_negative_amounts() {
    courrier_bin();
    let app = TestApp::spawn();
    let key = user_key(&app, "xrechnung@example.com");
    let resp =
        upload(&app, &key, "gutschrift.xml", UBL_CREDIT_NOTE.as_bytes(), &[("lang", "de"), ("profile", "invoice")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let meta = &resp.json()["meta"];
    assert_eq!(meta["invoice_number"], "GS-2026-0042");
    assert_eq!(meta["invoice_label"], "credit note");
    assert_eq!(meta["date"], "2026-03-12");
    assert_eq!(meta["currency"], "EUR");
    assert_eq!(meta["supplier_name"], "Nordsee Handel GmbH");
    // The VAT number, not the tax number of the other scheme listed first.
    assert_eq!(meta["supplier_numtva"], "DE136695976");
    assert_eq!((meta["amount"].as_str(), meta["amount_untaxed"].as_str()), (Some("-119.00"), Some("-100.00")));
    assert_eq!((meta["amount_tax"].as_str(), meta["amount_tax1"].as_str()), (Some("-19.00"), Some("-19.00")));
    assert_eq!(meta["value_tax1"], "19.00");
    assert_eq!(meta["products"][0]["qty"], "2.00");
    assert_eq!(meta["products"][0]["total_ht"], "-100.00");
    assert_eq!(meta["confidence"]["amount"], 1.0);

    // Not an invoice: the upload is still processed, without invoice fields.
    let resp = upload(&app, &key, "notes.xml", b"<notes><n>1</n></notes>", &[("lang", "de"), ("profile", "invoice")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.json()["meta"], "");
}
