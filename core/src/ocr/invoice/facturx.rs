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
    if xml.len() > MAX_XML_BYTES {
        return Err(XmlInvoiceError::TooLarge);
    }
    let text =
        std::str::from_utf8(xml.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(xml)).map_err(|_| XmlInvoiceError::NotUtf8)?;
    let options = ParsingOptions { allow_dtd: false, nodes_limit: MAX_NODES, ..ParsingOptions::default() };
    let doc = Document::parse_with_options(text, options).map_err(|e| XmlInvoiceError::Malformed(e.to_string()))?;
    let root = doc.root_element();
    match root.tag_name().name() {
        // Factur-X / ZUGFeRD 2 / XRechnung CII, and ZUGFeRD 1's older form of it.
        "CrossIndustryInvoice" | "CrossIndustryDocument" => Ok(cii(root)),
        "Invoice" | "CreditNote" => Ok(ubl(root)),
        _ => Err(XmlInvoiceError::NotAnInvoice),
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
    let currency = settlement.and_then(|s| text(child(s, "InvoiceCurrencyCode")));
    let vat = seller.and_then(|s| {
        children(s, "SpecifiedTaxRegistration")
            .filter_map(|r| child(r, "ID"))
            .find(|id| id.attribute("schemeID") == Some("VA"))
            .and_then(|id| text(Some(id)))
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
    let tax_total = sums.and_then(|s| {
        children(s, "TaxTotalAmount")
            .find(|t| t.attribute("currencyID").is_none() || t.attribute("currencyID") == currency.as_deref())
            .and_then(|t| amount(Some(t)))
    });
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
    let date = |n: Option<Node>| {
        n.and_then(|n| child(n, "DateTimeString")).and_then(|d| text(Some(d))).and_then(|d| Date::parse_machine(&d))
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
        currency: exact(currency),
        amount: exact(amount(sums.and_then(|s| child(s, "GrandTotalAmount")))),
        amount_untaxed: exact(amount(sums.and_then(|s| child(s, "TaxBasisTotalAmount")))),
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
        "381" => "credit note",
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
    let vat = party.and_then(|p| children(p, "PartyTaxScheme").find_map(|t| text(child(t, "CompanyID"))));
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
    let tax_total = child(root, "TaxTotal");
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
        invoice_label: exact(Some(if credit { "credit note" } else { "invoice" }.to_owned())),
        date: exact(text(child(root, "IssueDate")).and_then(|d| Date::parse_machine(&d))),
        due_date: exact(due.and_then(|d| Date::parse_machine(&d))),
        currency: exact(text(child(root, "DocumentCurrencyCode"))),
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
}
