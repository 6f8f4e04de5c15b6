//! Structured invoices: the Cross Industry Invoice XML of Factur-X / ZUGFeRD / XRechnung (embedded
//! in a PDF or uploaded) and UBL invoices and credit notes. Their fields are taken exactly, no
//! guessing. The parser refuses any DTD (so no entity can be expanded: no XXE, no billion laughs)
//! and the input and node count are bounded.

use super::dates::Date;
use super::meta::{Amount, CompanyDetails, Found, InvoiceMeta, Product, Source, TaxLine};
use roxmltree::{Document, Node, ParsingOptions};

/// Larger XML is refused: the richest Factur-X invoices are a few hundred KiB.
pub const MAX_XML_BYTES: usize = 8 * 1024 * 1024;
const MAX_NODES: u32 = 500_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlInvoiceError {
    #[error("the XML is larger than {} MiB", MAX_XML_BYTES >> 20)]
    TooLarge,
    #[error("the XML is not UTF-8")]
    NotUtf8,
    #[error("the XML cannot be read: {0}")]
    Malformed(String),
    #[error("the XML is neither a Cross Industry Invoice nor a UBL invoice")]
    NotAnInvoice,
}

/// Reads a CII or UBL invoice.
pub fn parse(xml: &[u8]) -> Result<InvoiceMeta, XmlInvoiceError> {
    let text = decode(xml)?;
    let doc = document(&text)?;
    let root = doc.root_element();
    let mut meta = match kind(root) {
        Some(Kind::Cii) => cii(root),
        Some(Kind::Ubl) => ubl(root),
        None => return Err(XmlInvoiceError::NotAnInvoice),
    };
    if is_credit_note(root) {
        sign_as_credit(&mut meta);
    }
    Ok(meta)
}

/// Whether `xml` is a CII or UBL invoice (or credit note), by its root: how an attachment without
/// a standard name is recognised.
pub fn is_invoice(xml: &[u8]) -> bool {
    decode(xml).ok().and_then(|t| document(&t).ok().and_then(|d| kind(d.root_element()))).is_some()
}

/// The XML as text: UTF-8 with or without a byte order mark, or UTF-16 with one. The encoding
/// declaration is not trusted (a real producer writes `encoding="UTF-8_W/O_BOM"`).
fn decode(xml: &[u8]) -> Result<std::borrow::Cow<'_, str>, XmlInvoiceError> {
    if xml.len() > MAX_XML_BYTES {
        return Err(XmlInvoiceError::TooLarge);
    }
    let utf16 = |bytes: &[u8], from: fn([u8; 2]) -> u16| -> Result<String, XmlInvoiceError> {
        let units = bytes.chunks(2).map(|p| match p {
            [a, b] => Ok(from([*a, *b])),
            _ => Err(XmlInvoiceError::NotUtf8),
        });
        let units: Vec<u16> = units.collect::<Result<_, _>>()?;
        String::from_utf16(&units).map_err(|_| XmlInvoiceError::NotUtf8)
    };
    if let Some(rest) = xml.strip_prefix(b"\xFF\xFE") {
        return utf16(rest, u16::from_le_bytes).map(Into::into);
    }
    if let Some(rest) = xml.strip_prefix(b"\xFE\xFF") {
        return utf16(rest, u16::from_be_bytes).map(Into::into);
    }
    std::str::from_utf8(xml.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(xml))
        .map(Into::into)
        .map_err(|_| XmlInvoiceError::NotUtf8)
}

fn document(text: &str) -> Result<Document<'_>, XmlInvoiceError> {
    let options = ParsingOptions { allow_dtd: false, nodes_limit: MAX_NODES, ..ParsingOptions::default() };
    Document::parse_with_options(text, options).map_err(|e| XmlInvoiceError::Malformed(e.to_string()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// UN/CEFACT Cross Industry Invoice: Factur-X, ZUGFeRD 2, XRechnung CII; ZUGFeRD 1's
    /// `CrossIndustryDocument`; and the pre-1.0 ZUGFeRD draft, whose root is an `Invoice` in the
    /// UN/CEFACT `CBFBUY` namespace with CII's structure.
    Cii,
    /// OASIS UBL 2 `Invoice` or `CreditNote` (XRechnung UBL, Peppol BIS).
    Ubl,
}

fn kind(root: Node) -> Option<Kind> {
    let ns = root.tag_name().namespace().unwrap_or_default();
    match root.tag_name().name() {
        "CrossIndustryInvoice" | "CrossIndustryDocument" => Some(Kind::Cii),
        "Invoice" | "CreditNote" if ns.starts_with("urn:oasis:names:specification:ubl:") => Some(Kind::Ubl),
        "Invoice" | "CreditNote"
            if ns.contains("uncefact")
                || child(root, "SpecifiedSupplyChainTradeTransaction|SupplyChainTradeTransaction").is_some() =>
        {
            Some(Kind::Cii)
        }
        // A UBL document written without its namespace.
        "Invoice" | "CreditNote" if ns.is_empty() && child(root, "ID").is_some() => Some(Kind::Ubl),
        _ => None,
    }
}

/// UNTDID 1001 codes of credit notes (EN 16931's BT-3 allows these).
const CREDIT_NOTE_CODES: &[&str] = &["81", "83", "261", "262", "296", "308", "381", "396", "420", "458", "532"];

fn is_credit_note(root: Node) -> bool {
    if root.tag_name().name() == "CreditNote" {
        return true;
    }
    let code = match kind(root) {
        Some(Kind::Cii) => {
            child(root, "ExchangedDocument|HeaderExchangedDocument").and_then(|d| text(child(d, "TypeCode")))
        }
        Some(Kind::Ubl) => text(child(root, "InvoiceTypeCode")),
        None => None,
    };
    code.is_some_and(|c| CREDIT_NOTE_CODES.contains(&c.as_str()))
}

/// A credit note's money goes back to the buyer: its amounts come out negative, as the page of a
/// credit note prints them and as the text and OCR paths read them, so that a client adding up a
/// supplier's documents gets the balance. EN 16931 writes a credit note's amounts positive (the
/// type code carries the sign); a producer that already signed them negative is left as it is.
/// Rates, quantities and the line count stay positive; unit prices and line totals turn.
fn sign_as_credit(meta: &mut InvoiceMeta) {
    let already_negative =
        meta.amount.as_ref().or(meta.amount_untaxed.as_ref()).is_some_and(|a| a.value < Amount::ZERO);
    if already_negative {
        return;
    }
    let neg = |a: Amount| Amount::ZERO.minus(a);
    for f in [
        &mut meta.amount,
        &mut meta.amount_untaxed,
        &mut meta.amount_tax,
        &mut meta.exo_tax_base,
        &mut meta.eco_part,
        &mut meta.delivery_untaxed,
    ]
    .into_iter()
    .flatten()
    {
        f.value = neg(f.value);
    }
    for t in &mut meta.taxes {
        t.amount = neg(t.amount);
        t.base = t.base.map(neg);
    }
    for p in &mut meta.products {
        p.unit_price = p.unit_price.map(neg);
        p.total_ht = p.total_ht.map(neg);
    }
}

/// Whether an element is named `names` (`A|B`: either; ZUGFeRD 1 names some elements otherwise
/// than CII D16B). Namespaces are ignored: CII and UBL each use one per name.
fn named(n: &Node, names: &str) -> bool {
    n.is_element() && names.split('|').any(|name| n.tag_name().name() == name)
}

/// The first child element named `names`.
fn child<'a, 'i>(n: Node<'a, 'i>, names: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| named(c, names))
}

fn children<'a, 'i>(n: Node<'a, 'i>, names: &'a str) -> impl Iterator<Item = Node<'a, 'i>> + 'a {
    n.children().filter(move |c| named(c, names))
}

/// The node at a path of child names.
fn at<'a, 'i>(n: Node<'a, 'i>, path: &[&str]) -> Option<Node<'a, 'i>> {
    path.iter().try_fold(n, |n, name| child(n, name))
}

fn text(n: Option<Node>) -> Option<String> {
    n.and_then(|n| n.text()).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned)
}

fn amount(n: Option<Node>) -> Option<Amount> {
    text(n).and_then(|t| Amount::parse_machine(&t))
}

fn exact<T>(v: Option<T>) -> Option<Found<T>> {
    v.map(Found::exact)
}

/// VAT categories without VAT: exempt (E), zero rated (Z), reverse charge (AE), intra-EU (K),
/// export (G), outside scope (O).
fn exempt_category(code: Option<&str>) -> bool {
    matches!(code, Some("E" | "Z" | "AE" | "K" | "G" | "O"))
}

fn cii(root: Node) -> InvoiceMeta {
    let doc = child(root, "ExchangedDocument|HeaderExchangedDocument");
    let tx = child(root, "SupplyChainTradeTransaction|SpecifiedSupplyChainTradeTransaction");
    let agreement = tx.and_then(|t| child(t, "ApplicableHeaderTradeAgreement|ApplicableSupplyChainTradeAgreement"));
    let settlement = tx.and_then(|t| child(t, "ApplicableHeaderTradeSettlement|ApplicableSupplyChainTradeSettlement"));
    let seller = agreement.and_then(|a| child(a, "SellerTradeParty"));
    let sums = settlement.and_then(|s| {
        child(s, "SpecifiedTradeSettlementHeaderMonetarySummation|SpecifiedTradeSettlementMonetarySummation")
    });
    // Without `InvoiceCurrencyCode` (some ZUGFeRD 1 producers), the currency the totals are in.
    let currency = settlement.and_then(|s| text(child(s, "InvoiceCurrencyCode"))).or_else(|| {
        sums.and_then(|s| {
            ["GrandTotalAmount", "DuePayableAmount", "TaxBasisTotalAmount"]
                .iter()
                .find_map(|n| {
                    child(s, n).and_then(|a| a.attribute("currencyID")).map(str::trim).filter(|c| !c.is_empty())
                })
                .map(str::to_owned)
        })
    });
    // A total in the invoice's currency (EXTENDED may add one in the accounting currency).
    let in_currency = |name: &'static str| {
        sums.and_then(|s| {
            children(s, name)
                .find(|t| t.attribute("currencyID").is_none() || t.attribute("currencyID") == currency.as_deref())
                .or_else(|| child(s, name))
        })
    };
    let vat = seller.and_then(|s| {
        children(s, "SpecifiedTaxRegistration")
            .filter_map(|r| child(r, "ID"))
            .filter(|id| id.attribute("schemeID").map(str::trim) == Some("VA"))
            .find_map(|id| text(Some(id)))
    });
    let address = seller.and_then(|s| child(s, "PostalTradeAddress"));
    let details = CompanyDetails {
        name: seller.and_then(|s| text(child(s, "Name"))),
        adresse: address.and_then(|a| text(child(a, "LineOne"))),
        cp: address.and_then(|a| text(child(a, "PostcodeCode"))),
        ville: address.and_then(|a| text(child(a, "CityName"))),
        pays: None,
        code_pays: address.and_then(|a| text(child(a, "CountryID"))),
        numero_tva_intra: vat.clone(),
    };
    // The tax total in the invoice's currency (a second one may be in the accounting currency).
    let tax_total = amount(in_currency("TaxTotalAmount"));
    let mut taxes = Vec::new();
    let mut exempt_base: Option<Amount> = None;
    for t in settlement.into_iter().flat_map(|s| children(s, "ApplicableTradeTax")) {
        let rate = amount(child(t, "RateApplicablePercent|ApplicablePercent")).unwrap_or(Amount::ZERO);
        let base = amount(child(t, "BasisAmount"));
        if exempt_category(text(child(t, "CategoryCode")).as_deref()) {
            exempt_base = Some(exempt_base.unwrap_or(Amount::ZERO).plus(base.unwrap_or(Amount::ZERO)));
        }
        taxes.push(TaxLine {
            rate,
            base,
            amount: amount(child(t, "CalculatedAmount")).unwrap_or(Amount::ZERO),
            confidence: 1.0,
        });
    }
    let shipping = settlement.into_iter().flat_map(|s| children(s, "SpecifiedTradeAllowanceCharge")).filter(|c| {
        let is_charge = text(at(*c, &["ChargeIndicator", "Indicator"])).as_deref() == Some("true");
        let reason = text(child(*c, "Reason")).unwrap_or_default().to_lowercase();
        let code = text(child(*c, "ReasonCode")).unwrap_or_default();
        is_charge
            && (matches!(code.as_str(), "DL" | "FC" | "FI" | "PC")
                || ["port", "transport", "livraison", "shipping", "delivery", "versand", "fracht", "spedizione"]
                    .iter()
                    .any(|w| reason.contains(w)))
    });
    let delivery = shipping.filter_map(|c| amount(child(c, "ActualAmount"))).reduce(Amount::plus);
    let products = tx
        .into_iter()
        .flat_map(|t| children(t, "IncludedSupplyChainTradeLineItem"))
        .map(|line| {
            let product = child(line, "SpecifiedTradeProduct");
            Product {
                reference: product.and_then(|p| text(child(p, "SellerAssignedID"))),
                label: product.and_then(|p| text(child(p, "Name"))).unwrap_or_default(),
                qty: amount(at(
                    line,
                    &["SpecifiedLineTradeDelivery|SpecifiedSupplyChainTradeDelivery", "BilledQuantity"],
                )),
                unit_price: amount(at(
                    line,
                    &[
                        "SpecifiedLineTradeAgreement|SpecifiedSupplyChainTradeAgreement",
                        "NetPriceProductTradePrice",
                        "ChargeAmount",
                    ],
                )),
                total_ht: amount(at(
                    line,
                    &[
                        "SpecifiedLineTradeSettlement|SpecifiedSupplyChainTradeSettlement",
                        "SpecifiedTradeSettlementLineMonetarySummation|SpecifiedTradeSettlementMonetarySummation",
                        "LineTotalAmount",
                    ],
                )),
                tax_value: amount(at(
                    line,
                    &[
                        "SpecifiedLineTradeSettlement|SpecifiedSupplyChainTradeSettlement",
                        "ApplicableTradeTax",
                        "RateApplicablePercent|ApplicablePercent",
                    ],
                )),
            }
        })
        .collect();
    // `<IssueDateTime><DateTimeString format="102">`, or the draft's `<IssueDateTime format="102">`.
    let date = |n: Option<Node>| {
        n.and_then(|n| text(child(n, "DateTimeString")).or_else(|| text(Some(n)))).and_then(|d| Date::parse_machine(&d))
    };
    InvoiceMeta {
        source: Source::Cii,
        supplier_name: exact(details.name.clone()),
        supplier_numtva: exact(vat),
        supplier_siret: exact(seller.and_then(|s| text(at(s, &["SpecifiedLegalOrganization", "ID"])))),
        invoice_number: exact(doc.and_then(|d| text(child(d, "ID")))),
        invoice_label: exact(doc.and_then(|d| text(child(d, "TypeCode"))).map(|c| type_label(&c))),
        date: exact(date(doc.and_then(|d| child(d, "IssueDateTime")))),
        due_date: exact(date(settlement.and_then(|s| at(s, &["SpecifiedTradePaymentTerms", "DueDateDateTime"])))),
        currency: exact(currency.clone()),
        amount: exact(amount(in_currency("GrandTotalAmount"))),
        amount_untaxed: exact(amount(in_currency("TaxBasisTotalAmount"))),
        amount_tax: exact(tax_total),
        taxes,
        exo_tax_base: exact(exempt_base),
        eco_part: None,
        delivery_untaxed: exact(delivery),
        iban: exact(settlement.and_then(|s| {
            children(s, "SpecifiedTradeSettlementPaymentMeans")
                .find_map(|m| text(at(m, &["PayeePartyCreditorFinancialAccount", "IBANID"])))
        })),
        company_details: details,
        products,
    }
}

/// UNTDID 1001 document types, as a label.
fn type_label(code: &str) -> String {
    match code {
        "380" => "invoice",
        c if CREDIT_NOTE_CODES.contains(&c) => "credit note",
        "384" => "corrected invoice",
        "389" => "self-billed invoice",
        "386" => "prepayment invoice",
        other => other,
    }
    .to_owned()
}

fn ubl(root: Node) -> InvoiceMeta {
    let credit = root.tag_name().name() == "CreditNote";
    let party = at(root, &["AccountingSupplierParty", "Party"]);
    // The VAT number is the `PartyTaxScheme` of scheme `VAT`; another may hold a tax number.
    let schemes = || party.into_iter().flat_map(|p| children(p, "PartyTaxScheme"));
    let vat = schemes()
        .filter(|t| text(at(*t, &["TaxScheme", "ID"])).is_some_and(|id| id.eq_ignore_ascii_case("VAT")))
        .find_map(|t| text(child(t, "CompanyID")))
        .or_else(|| schemes().find_map(|t| text(child(t, "CompanyID"))));
    let address = party.and_then(|p| child(p, "PostalAddress"));
    let name = party
        .and_then(|p| text(at(p, &["PartyName", "Name"])))
        .or_else(|| party.and_then(|p| text(at(p, &["PartyLegalEntity", "RegistrationName"]))));
    let street = address.and_then(|a| text(child(a, "StreetName")));
    let details = CompanyDetails {
        name: name.clone(),
        adresse: street,
        cp: address.and_then(|a| text(child(a, "PostalZone"))),
        ville: address.and_then(|a| text(child(a, "CityName"))),
        pays: None,
        code_pays: address.and_then(|a| text(at(a, &["Country", "IdentificationCode"]))),
        numero_tva_intra: vat.clone(),
    };
    let total = child(root, "LegalMonetaryTotal");
    let currency = text(child(root, "DocumentCurrencyCode")).or_else(|| {
        total
            .and_then(|t| child(t, "TaxInclusiveAmount|PayableAmount"))
            .and_then(|a| a.attribute("currencyID"))
            .map(str::to_owned)
    });
    // The tax total in the document's currency (a second one may be in the accounting currency).
    let tax_total = children(root, "TaxTotal")
        .find(|t| {
            child(*t, "TaxAmount")
                .and_then(|a| a.attribute("currencyID"))
                .is_none_or(|c| Some(c) == currency.as_deref())
        })
        .or_else(|| child(root, "TaxTotal"));
    let mut exempt_base: Option<Amount> = None;
    let taxes = tax_total
        .into_iter()
        .flat_map(|t| children(t, "TaxSubtotal"))
        .filter_map(|s| {
            let base = amount(child(s, "TaxableAmount"));
            if exempt_category(text(at(s, &["TaxCategory", "ID"])).as_deref()) {
                exempt_base = Some(exempt_base.unwrap_or(Amount::ZERO).plus(base.unwrap_or(Amount::ZERO)));
            }
            let rate = amount(at(s, &["TaxCategory", "Percent"])).unwrap_or(Amount::ZERO);
            let tax = amount(child(s, "TaxAmount")).unwrap_or(Amount::ZERO);
            (rate != Amount::ZERO || tax != Amount::ZERO).then_some(TaxLine {
                rate,
                base,
                amount: tax,
                confidence: 1.0,
            })
        })
        .collect();
    let line_name = if credit { "CreditNoteLine" } else { "InvoiceLine" };
    let qty_name = if credit { "CreditedQuantity" } else { "InvoicedQuantity" };
    let products = children(root, line_name)
        .map(|l| Product {
            reference: text(at(l, &["Item", "SellersItemIdentification", "ID"])),
            label: text(at(l, &["Item", "Name"])).unwrap_or_default(),
            qty: amount(child(l, qty_name)),
            unit_price: amount(at(l, &["Price", "PriceAmount"])),
            total_ht: amount(child(l, "LineExtensionAmount")),
            tax_value: amount(at(l, &["Item", "ClassifiedTaxCategory", "Percent"])),
        })
        .collect();
    let due = text(child(root, "DueDate")).or_else(|| text(at(root, &["PaymentMeans", "PaymentDueDate"])));
    InvoiceMeta {
        source: Source::Ubl,
        supplier_name: exact(name),
        supplier_numtva: exact(vat),
        supplier_siret: exact(party.and_then(|p| text(at(p, &["PartyLegalEntity", "CompanyID"])))),
        invoice_number: exact(text(child(root, "ID"))),
        invoice_label: exact(Some(match text(child(root, "InvoiceTypeCode")) {
            Some(code) if !credit => type_label(&code),
            _ => if credit { "credit note" } else { "invoice" }.to_owned(),
        })),
        date: exact(text(child(root, "IssueDate")).and_then(|d| Date::parse_machine(&d))),
        due_date: exact(due.and_then(|d| Date::parse_machine(&d))),
        currency: exact(currency),
        amount: exact(amount(total.and_then(|t| child(t, "TaxInclusiveAmount")))),
        amount_untaxed: exact(amount(total.and_then(|t| child(t, "TaxExclusiveAmount")))),
        amount_tax: exact(amount(tax_total.and_then(|t| child(t, "TaxAmount")))),
        taxes,
        exo_tax_base: exact(exempt_base),
        eco_part: None,
        delivery_untaxed: None,
        iban: exact(children(root, "PaymentMeans").find_map(|m| text(at(m, &["PayeeFinancialAccount", "ID"])))),
        company_details: details,
        products,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtds_and_entities_are_refused() {
        let bomb = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><Invoice>&lol2;</Invoice>"#;
        assert!(matches!(parse(bomb.as_bytes()), Err(XmlInvoiceError::Malformed(_))));
        let xxe =
            r#"<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><Invoice>&e;</Invoice>"#;
        assert!(matches!(parse(xxe.as_bytes()), Err(XmlInvoiceError::Malformed(_))));
        assert_eq!(parse(b"<html/>"), Err(XmlInvoiceError::NotAnInvoice));
        assert_eq!(parse(&vec![b' '; MAX_XML_BYTES + 1]), Err(XmlInvoiceError::TooLarge));
    }

    #[test]
    fn a_zugferd_1_invoice_is_read_exactly() {
        let xml = r#"<rsm:CrossIndustryDocument xmlns:rsm="urn:ferd:CrossIndustryDocument:invoice:1p0" xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:12" xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:15">
  <rsm:HeaderExchangedDocument><ram:ID>471102</ram:ID><ram:TypeCode>380</ram:TypeCode>
    <ram:IssueDateTime><udt:DateTimeString format="102">20130305</udt:DateTimeString></ram:IssueDateTime></rsm:HeaderExchangedDocument>
  <rsm:SpecifiedSupplyChainTradeTransaction>
    <ram:ApplicableSupplyChainTradeAgreement><ram:SellerTradeParty><ram:Name>Lieferant GmbH</ram:Name>
      <ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">DE123456789</ram:ID></ram:SpecifiedTaxRegistration></ram:SellerTradeParty></ram:ApplicableSupplyChainTradeAgreement>
    <ram:ApplicableSupplyChainTradeSettlement><ram:InvoiceCurrencyCode>EUR</ram:InvoiceCurrencyCode>
      <ram:ApplicableTradeTax><ram:CalculatedAmount currencyID="EUR">19.25</ram:CalculatedAmount><ram:TypeCode>VAT</ram:TypeCode>
        <ram:BasisAmount currencyID="EUR">275.00</ram:BasisAmount><ram:ApplicablePercent>7.00</ram:ApplicablePercent></ram:ApplicableTradeTax>
      <ram:SpecifiedTradeSettlementMonetarySummation><ram:TaxBasisTotalAmount currencyID="EUR">275.00</ram:TaxBasisTotalAmount>
        <ram:TaxTotalAmount currencyID="EUR">19.25</ram:TaxTotalAmount><ram:GrandTotalAmount currencyID="EUR">294.25</ram:GrandTotalAmount>
      </ram:SpecifiedTradeSettlementMonetarySummation></ram:ApplicableSupplyChainTradeSettlement>
  </rsm:SpecifiedSupplyChainTradeTransaction></rsm:CrossIndustryDocument>"#;
        let json = parse(xml.as_bytes()).unwrap().to_json();
        assert_eq!(json["invoice_number"], "471102");
        assert_eq!(json["date"], "2013-03-05");
        assert_eq!(json["supplier_numtva"], "DE123456789");
        assert_eq!(json["amount"], "294.25");
        assert_eq!(json["value_tax1"], "7.00");
        assert_eq!(json["amount_tax1"], "19.25");
    }

    #[test]
    fn a_ubl_invoice_is_read_exactly() {
        let xml = r#"<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2" xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">
  <cbc:ID>INV-7</cbc:ID><cbc:IssueDate>2026-11-14</cbc:IssueDate><cbc:DueDate>2026-12-14</cbc:DueDate>
  <cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode>
  <cac:AccountingSupplierParty><cac:Party><cac:PartyName><cbc:Name>ACME</cbc:Name></cac:PartyName>
    <cac:PartyTaxScheme><cbc:CompanyID>FR40303265045</cbc:CompanyID></cac:PartyTaxScheme></cac:Party></cac:AccountingSupplierParty>
  <cac:TaxTotal><cbc:TaxAmount currencyID="EUR">20.00</cbc:TaxAmount><cac:TaxSubtotal><cbc:TaxableAmount currencyID="EUR">100.00</cbc:TaxableAmount>
    <cbc:TaxAmount currencyID="EUR">20.00</cbc:TaxAmount><cac:TaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>20</cbc:Percent></cac:TaxCategory></cac:TaxSubtotal></cac:TaxTotal>
  <cac:LegalMonetaryTotal><cbc:TaxExclusiveAmount currencyID="EUR">100.00</cbc:TaxExclusiveAmount><cbc:TaxInclusiveAmount currencyID="EUR">120.00</cbc:TaxInclusiveAmount></cac:LegalMonetaryTotal>
</Invoice>"#;
        let meta = parse(xml.as_bytes()).unwrap();
        let json = meta.to_json();
        assert_eq!(json["invoice_number"], "INV-7");
        assert_eq!(json["date"], "2026-11-14");
        assert_eq!(json["amount"], "120.00");
        assert_eq!(json["value_tax1"], "20.00");
        assert_eq!(json["supplier_numtva"], "FR40303265045");
    }

    /// ZUGFeRD 1 (COMFORT) credit note whose currency is only on its totals' `currencyID`.
    const ZUGFERD1_CREDIT_NOTE: &str = r#"<rsm:CrossIndustryDocument xmlns:rsm="urn:ferd:CrossIndustryDocument:invoice:1p0" xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:12" xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:15">
  <rsm:HeaderExchangedDocument><ram:ID>GS-77</ram:ID><ram:TypeCode>381</ram:TypeCode>
    <ram:IssueDateTime><udt:DateTimeString format="102">20150613</udt:DateTimeString></ram:IssueDateTime></rsm:HeaderExchangedDocument>
  <rsm:SpecifiedSupplyChainTradeTransaction>
    <ram:ApplicableSupplyChainTradeAgreement><ram:SellerTradeParty><ram:Name>Bei Spiel GmbH</ram:Name>
      <ram:SpecifiedTaxRegistration><ram:ID schemeID="FC">22/815/0815/4</ram:ID></ram:SpecifiedTaxRegistration>
      <ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">DE136695976</ram:ID></ram:SpecifiedTaxRegistration></ram:SellerTradeParty></ram:ApplicableSupplyChainTradeAgreement>
    <ram:ApplicableSupplyChainTradeSettlement>
      <ram:ApplicableTradeTax><ram:CalculatedAmount currencyID="EUR">19.00</ram:CalculatedAmount><ram:TypeCode>VAT</ram:TypeCode>
        <ram:BasisAmount currencyID="EUR">100.00</ram:BasisAmount><ram:ApplicablePercent>19.00</ram:ApplicablePercent></ram:ApplicableTradeTax>
      <ram:SpecifiedTradeSettlementMonetarySummation><ram:TaxBasisTotalAmount currencyID="EUR">100.00</ram:TaxBasisTotalAmount>
        <ram:TaxTotalAmount currencyID="EUR">19.00</ram:TaxTotalAmount><ram:GrandTotalAmount currencyID="EUR">119.00</ram:GrandTotalAmount>
      </ram:SpecifiedTradeSettlementMonetarySummation></ram:ApplicableSupplyChainTradeSettlement>
    <ram:IncludedSupplyChainTradeLineItem>
      <ram:SpecifiedSupplyChainTradeAgreement><ram:NetPriceProductTradePrice><ram:ChargeAmount currencyID="EUR">50.00</ram:ChargeAmount></ram:NetPriceProductTradePrice></ram:SpecifiedSupplyChainTradeAgreement>
      <ram:SpecifiedSupplyChainTradeDelivery><ram:BilledQuantity unitCode="C62">2</ram:BilledQuantity></ram:SpecifiedSupplyChainTradeDelivery>
      <ram:SpecifiedSupplyChainTradeSettlement><ram:SpecifiedTradeSettlementMonetarySummation><ram:LineTotalAmount currencyID="EUR">100.00</ram:LineTotalAmount></ram:SpecifiedTradeSettlementMonetarySummation></ram:SpecifiedSupplyChainTradeSettlement>
      <ram:SpecifiedTradeProduct><ram:Name>Retoure</ram:Name></ram:SpecifiedTradeProduct>
    </ram:IncludedSupplyChainTradeLineItem>
  </rsm:SpecifiedSupplyChainTradeTransaction></rsm:CrossIndustryDocument>"#;

    #[test]
    fn a_zugferd_1_credit_note_comes_out_negative_in_the_currency_of_its_totals() {
        let json = parse(ZUGFERD1_CREDIT_NOTE.as_bytes()).unwrap().to_json();
        assert_eq!(json["invoice_label"], "credit note");
        assert_eq!(json["currency"], "EUR");
        assert_eq!(json["supplier_numtva"], "DE136695976", "the VA registration, not the tax number");
        assert_eq!((json["amount"].as_str(), json["amount_untaxed"].as_str()), (Some("-119.00"), Some("-100.00")));
        assert_eq!((json["amount_tax"].as_str(), json["amount_tax1"].as_str()), (Some("-19.00"), Some("-19.00")));
        assert_eq!(json["value_tax1"], "19.00");
        let line = &json["products"][0];
        assert_eq!((line["qty"].as_str(), line["unit_price"].as_str()), (Some("2.00"), Some("-50.00")));
        assert_eq!(line["total_ht"], "-100.00");
    }

    #[test]
    fn a_credit_note_its_producer_already_signed_negative_stays_negative() {
        let signed = ZUGFERD1_CREDIT_NOTE.replace(">119.00<", ">-119.00<").replace(">100.00<", ">-100.00<");
        let json = parse(signed.as_bytes()).unwrap().to_json();
        assert_eq!((json["amount"].as_str(), json["amount_untaxed"].as_str()), (Some("-119.00"), Some("-100.00")));
        // An invoice (380) keeps its amounts as written.
        let invoice = ZUGFERD1_CREDIT_NOTE.replace(">381<", ">380<");
        let json = parse(invoice.as_bytes()).unwrap().to_json();
        assert_eq!((json["amount"].as_str(), json["invoice_label"].as_str()), (Some("119.00"), Some("invoice")));
    }

    #[test]
    fn the_pre_1_0_zugferd_draft_is_read_as_cii_not_as_ubl() {
        // As Mustang/GnuAccounting wrote it in 2014: root `Invoice` in UN/CEFACT's CBFBUY
        // namespace, unprefixed children, dates without `DateTimeString`, an empty VAT number.
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<rsm:Invoice xmlns:rsm="urn:un:unece:uncefact:data:standard:CBFBUY:5">
  <rsm:HeaderExchangedDocument><ID>RE-20140519/499</ID><TypeCode>380</TypeCode><IssueDateTime format="102">20140519</IssueDateTime></rsm:HeaderExchangedDocument>
  <rsm:SpecifiedSupplyChainTradeTransaction>
    <ApplicableSupplyChainTradeAgreement><SellerTradeParty><Name>usegroup Inh. Jochen Stärk</Name>
      <SpecifiedTaxRegistration><ID schemeID="VA"></ID></SpecifiedTaxRegistration></SellerTradeParty></ApplicableSupplyChainTradeAgreement>
    <ApplicableSupplyChainTradeSettlement><InvoiceCurrencyCode>EUR</InvoiceCurrencyCode>
      <SpecifiedTradePaymentTerms><DueDateDateTime format="102">20140609</DueDateDateTime></SpecifiedTradePaymentTerms>
      <SpecifiedTradeSettlementMonetarySummation><TaxBasisTotalAmount currencyID="EUR">496.00</TaxBasisTotalAmount>
        <TaxTotalAmount currencyID="EUR">63.84</TaxTotalAmount><GrandTotalAmount currencyID="EUR">559.84</GrandTotalAmount></SpecifiedTradeSettlementMonetarySummation>
    </ApplicableSupplyChainTradeSettlement></rsm:SpecifiedSupplyChainTradeTransaction></rsm:Invoice>"#;
        let meta = parse(xml.as_bytes()).unwrap();
        assert_eq!(meta.source, Source::Cii);
        let json = meta.to_json();
        assert_eq!(json["invoice_number"], "RE-20140519/499");
        assert_eq!((json["date"].as_str(), json["due_date"].as_str()), (Some("2014-05-19"), Some("2014-06-09")));
        assert_eq!(json["supplier_name"], "usegroup Inh. Jochen Stärk");
        assert_eq!(json["supplier_numtva"], "");
        assert_eq!((json["amount"].as_str(), json["currency"].as_str()), (Some("559.84"), Some("EUR")));
        assert!(is_invoice(xml.as_bytes()));
    }

    #[test]
    fn a_ubl_credit_note_is_negative_and_its_vat_number_is_the_vat_scheme_s() {
        let xml = r#"<CreditNote xmlns="urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2" xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">
  <cbc:ID>CN-3</cbc:ID><cbc:IssueDate>2026-02-01</cbc:IssueDate><cbc:CreditNoteTypeCode>381</cbc:CreditNoteTypeCode>
  <cac:AccountingSupplierParty><cac:Party>
    <cac:PartyTaxScheme><cbc:CompanyID>12/345/67890</cbc:CompanyID><cac:TaxScheme><cbc:ID>FC</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>
    <cac:PartyTaxScheme><cbc:CompanyID>NL123456789B01</cbc:CompanyID><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>
    <cac:PartyLegalEntity><cbc:RegistrationName>Polder BV</cbc:RegistrationName></cac:PartyLegalEntity></cac:Party></cac:AccountingSupplierParty>
  <cac:TaxTotal><cbc:TaxAmount currencyID="USD">22.00</cbc:TaxAmount></cac:TaxTotal>
  <cac:TaxTotal><cbc:TaxAmount currencyID="EUR">21.00</cbc:TaxAmount><cac:TaxSubtotal><cbc:TaxableAmount currencyID="EUR">100.00</cbc:TaxableAmount>
    <cbc:TaxAmount currencyID="EUR">21.00</cbc:TaxAmount><cac:TaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>21</cbc:Percent></cac:TaxCategory></cac:TaxSubtotal></cac:TaxTotal>
  <cac:LegalMonetaryTotal><cbc:TaxExclusiveAmount currencyID="EUR">100.00</cbc:TaxExclusiveAmount><cbc:TaxInclusiveAmount currencyID="EUR">121.00</cbc:TaxInclusiveAmount></cac:LegalMonetaryTotal>
  <cac:CreditNoteLine><cbc:ID>1</cbc:ID><cbc:CreditedQuantity>1</cbc:CreditedQuantity><cbc:LineExtensionAmount currencyID="EUR">100.00</cbc:LineExtensionAmount>
    <cac:Item><cbc:Name>Terugbetaling</cbc:Name></cac:Item><cac:Price><cbc:PriceAmount currencyID="EUR">100.00</cbc:PriceAmount></cac:Price></cac:CreditNoteLine>
</CreditNote>"#;
        let meta = parse(xml.as_bytes()).unwrap();
        assert_eq!(meta.source, Source::Ubl);
        let json = meta.to_json();
        assert_eq!(json["invoice_label"], "credit note");
        assert_eq!(json["supplier_name"], "Polder BV");
        assert_eq!(json["supplier_numtva"], "NL123456789B01");
        // No DocumentCurrencyCode: the totals' currency; the tax total in it, not the USD one.
        assert_eq!(json["currency"], "EUR");
        assert_eq!((json["amount"].as_str(), json["amount_tax"].as_str()), (Some("-121.00"), Some("-21.00")));
        assert_eq!(json["products"][0]["total_ht"], "-100.00");
    }

    #[test]
    fn utf16_xml_and_a_false_encoding_declaration_are_read() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8_W/O_BOM"?><Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"><ID>U16</ID></Invoice>"#;
        assert_eq!(parse(xml.as_bytes()).unwrap().to_json()["invoice_number"], "U16");
        let utf16le: Vec<u8> =
            b"\xFF\xFE".iter().copied().chain(xml.encode_utf16().flat_map(u16::to_le_bytes)).collect();
        assert_eq!(parse(&utf16le).unwrap().to_json()["invoice_number"], "U16");
        // An odd byte count is not UTF-16: refused, no panic.
        assert_eq!(parse(b"\xFF\xFE<\x00a"), Err(XmlInvoiceError::NotUtf8));
        assert!(!is_invoice(b"<notes/>"));
        assert!(!is_invoice(b"\xFE\xFF\xD8"));
    }
}
