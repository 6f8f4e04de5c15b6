//! Finding a hybrid e-invoice's XML among a PDF's attachments (issue 17), in the sandbox child.
//!
//! Producers put the file specification in different places and name it in different encodings:
//! the catalog's `/AF` (PDF/A-3's associated files), the `/EmbeddedFiles` name tree (flat, or
//! split into `/Kids`), a page's `/AF`; named by `/UF` and/or `/F`, written as PDF text strings
//! (UTF-16BE with a byte order mark, UTF-8 with one, or PDFDocEncoding). All of them are looked
//! at, in that order, then every other file specification of the file (an attachment annotation,
//! a name tree no catalog reaches). An attachment with one of the standards' names wins (first
//! name of [`INVOICE_XML_NAMES`] first); failing that, the first attachment whose XML root is a
//! CII or UBL invoice.
//!
//! Everything is bounded: the name tree's depth and node count, the attachments inflated to look
//! at their root, the bytes inflated from each (the parser's own maximum + 1). Nothing here
//! panics on a hostile file: every lookup is an `Option`/`Result`.

use crate::ocr::invoice::facturx;
use crate::ocr::pdf::PdfError;
use lopdf::{Dictionary, Document, Object, ObjectId};
use std::collections::HashSet;

/// The names hybrid invoice standards give their XML attachment (Factur-X, ZUGFeRD 2, ZUGFeRD 1,
/// XRechnung, Order-X), compared in lower case with the file's base name. Earlier is preferred
/// when a PDF carries two (ZUGFeRD 1 and 2 side by side).
pub const INVOICE_XML_NAMES: &[&str] =
    &["factur-x.xml", "zugferd-invoice.xml", "zugferd_invoice.xml", "xrechnung.xml", "order-x.xml"];
/// An attachment larger than this is not an invoice (the parser refuses more anyway).
const MAX_INVOICE_XML: usize = facturx::MAX_XML_BYTES;
/// Name tree nodes visited at most, and how deep.
const MAX_NAME_TREE_NODES: usize = 10_000;
const MAX_NAME_TREE_DEPTH: usize = 32;
/// Attachments without a standard name inflated to look at their root, at most.
const MAX_SNIFFED: usize = 32;

/// The embedded invoice XML's bytes, or `None` when the PDF carries none. An attachment with a
/// standard name that is too large or cannot be inflated is an error (it is the invoice, and it
/// is not readable); one that is only sniffed is skipped.
pub fn invoice_xml(doc: &Document) -> Result<Option<Vec<u8>>, PdfError> {
    let specs = file_specs(doc);
    let named = specs
        .iter()
        .filter_map(|spec| {
            let rank = names(doc, spec).iter().filter_map(|n| standard_rank(n)).min()?;
            Some((rank, spec))
        })
        // `min_by_key` keeps the first of equal ranks: the catalog's own declaration first.
        .min_by_key(|(rank, _)| *rank);
    if let Some((_, spec)) = named
        && let Some(stream) = embedded_stream(doc, spec)
    {
        let bytes = inflate(stream)
            .map_err(|e| PdfError::Unreadable(format!("the embedded invoice: {e}")))?
            .ok_or_else(|| PdfError::LimitExceeded("the embedded invoice XML is too large".into()))?;
        return Ok(Some(bytes));
    }
    let sniffed = specs
        .iter()
        .filter_map(|spec| embedded_stream(doc, spec))
        .take(MAX_SNIFFED)
        .filter_map(|stream| inflate(stream).ok().flatten())
        .find(|bytes| facturx::is_invoice(bytes));
    Ok(sniffed)
}

/// Every file specification dictionary with an embedded file (`/EF`), in the order of the module
/// comment, each once.
fn file_specs(doc: &Document) -> Vec<&Dictionary> {
    fn push<'a>(doc: &'a Document, object: &'a Object, seen: &mut HashSet<ObjectId>, out: &mut Vec<&'a Dictionary>) {
        let Ok((id, object)) = doc.dereference(object) else { return };
        if id.is_some_and(|id| !seen.insert(id)) {
            return;
        }
        if let Ok(dict) = object.as_dict()
            && dict.has(b"EF")
        {
            out.push(dict);
        }
    }
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut out: Vec<&Dictionary> = Vec::new();
    let catalog = doc.catalog().ok();
    for f in catalog.map(|c| array(doc, c, b"AF")).unwrap_or_default() {
        push(doc, f, &mut seen, &mut out);
    }
    if let Some(tree) = catalog
        .and_then(|c| c.get(b"Names").ok())
        .and_then(|n| doc.dereference(n).ok())
        .and_then(|(_, n)| n.as_dict().ok())
        .and_then(|n| n.get(b"EmbeddedFiles").ok())
    {
        let mut values = Vec::new();
        let mut visited = HashSet::new();
        let mut budget = MAX_NAME_TREE_NODES;
        name_tree_values(doc, tree, 0, &mut visited, &mut budget, &mut values);
        for v in values {
            push(doc, v, &mut seen, &mut out);
        }
    }
    for page in doc.get_pages().into_values() {
        let Ok(page) = doc.get_dictionary(page) else { continue };
        for f in array(doc, page, b"AF") {
            push(doc, f, &mut seen, &mut out);
        }
    }
    for (id, object) in &doc.objects {
        if seen.insert(*id)
            && let Ok(dict) = object.as_dict()
            && dict.has(b"EF")
        {
            out.push(dict);
        }
    }
    out
}

/// The elements of an array entry `key` of `dict` (the array itself may be a reference).
fn array<'a>(doc: &'a Document, dict: &'a Dictionary, key: &[u8]) -> Vec<&'a Object> {
    dict.get(key)
        .ok()
        .and_then(|a| doc.dereference(a).ok())
        .and_then(|(_, a)| a.as_array().ok())
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The values of a name tree (`/Names [key value ...]`, `/Kids [node ...]`), depth first, at most
/// `budget` nodes and `MAX_NAME_TREE_DEPTH` levels, each node once (a `/Kids` cycle ends).
fn name_tree_values<'a>(
    doc: &'a Document,
    node: &'a Object,
    depth: usize,
    visited: &mut HashSet<ObjectId>,
    budget: &mut usize,
    out: &mut Vec<&'a Object>,
) {
    if depth > MAX_NAME_TREE_DEPTH || *budget == 0 {
        return;
    }
    *budget -= 1;
    let Ok((id, node)) = doc.dereference(node) else { return };
    if id.is_some_and(|id| !visited.insert(id)) {
        return;
    }
    let Ok(node) = node.as_dict() else { return };
    for pair in array(doc, node, b"Names").chunks(2) {
        if let [_, value] = pair {
            out.push(value);
        }
    }
    for kid in array(doc, node, b"Kids") {
        name_tree_values(doc, kid, depth + 1, visited, budget, out);
    }
}

/// The names a file specification gives its file: `/UF` then `/F`, decoded as text strings.
fn names(doc: &Document, spec: &Dictionary) -> Vec<String> {
    [b"UF".as_slice(), b"F"]
        .iter()
        .filter_map(|k| {
            let (_, o) = doc.dereference(spec.get(k).ok()?).ok()?;
            Some(text_string(o.as_str().ok()?))
        })
        .collect()
}

/// Where `name` (a path or a bare name, any case) stands in [`INVOICE_XML_NAMES`].
fn standard_rank(name: &str) -> Option<usize> {
    let base = name.rsplit(['/', '\\', ':']).next().unwrap_or(name).trim().to_lowercase();
    INVOICE_XML_NAMES.iter().position(|n| *n == base)
}

/// The embedded file stream of a file specification (`/EF /F`, else `/EF /UF`).
fn embedded_stream<'a>(doc: &'a Document, spec: &'a Dictionary) -> Option<&'a lopdf::Stream> {
    let (_, ef) = doc.dereference(spec.get(b"EF").ok()?).ok()?;
    let ef = ef.as_dict().ok()?;
    [b"F".as_slice(), b"UF"].iter().find_map(|k| {
        let (_, s) = doc.dereference(ef.get(k).ok()?).ok()?;
        s.as_stream().ok()
    })
}

/// A stream's decoded bytes, `Ok(None)` when they exceed the invoice maximum.
fn inflate(stream: &lopdf::Stream) -> Result<Option<Vec<u8>>, lopdf::Error> {
    let bytes = if stream.dict.get(b"Filter").is_ok() {
        stream.get_plain_content_with_limit(MAX_INVOICE_XML + 1)?
    } else {
        stream.content.clone()
    };
    Ok((bytes.len() <= MAX_INVOICE_XML).then_some(bytes))
}

/// A PDF text string (ISO 32000-2, 7.9.2.2): UTF-16BE after `FE FF`, UTF-8 after `EF BB BF`,
/// else PDFDocEncoding. A UTF-16 string's language escapes (`ESC ... ESC`) are dropped; bytes
/// that mean nothing become U+FFFD.
pub fn text_string(bytes: &[u8]) -> String {
    if let Some(utf16) = bytes.strip_prefix(b"\xFE\xFF") {
        let units = utf16.chunks_exact(2).map(|p| u16::from_be_bytes([p[0], p[1]]));
        let decoded: String = char::decode_utf16(units).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER)).collect();
        // Language escapes: ESC, a language code, ESC.
        return decoded.split('\u{1b}').step_by(2).collect();
    }
    if let Some(utf8) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        return String::from_utf8_lossy(utf8).into_owned();
    }
    bytes.iter().map(|&b| pdf_doc_char(b)).collect()
}

/// PDFDocEncoding (ISO 32000-2, Annex D.2): Latin-1 except 0x18-0x1F and 0x80-0xA0.
fn pdf_doc_char(b: u8) -> char {
    const LOW: [char; 8] =
        ['\u{02D8}', '\u{02C7}', '\u{02C6}', '\u{02D9}', '\u{02DD}', '\u{02DB}', '\u{02DA}', '\u{02DC}'];
    const HIGH: [char; 33] = [
        '\u{2022}', '\u{2020}', '\u{2021}', '\u{2026}', '\u{2014}', '\u{2013}', '\u{0192}', '\u{2044}', '\u{2039}',
        '\u{203A}', '\u{2212}', '\u{2030}', '\u{201E}', '\u{201C}', '\u{201D}', '\u{2018}', '\u{2019}', '\u{201A}',
        '\u{2122}', '\u{FB01}', '\u{FB02}', '\u{0141}', '\u{0152}', '\u{0160}', '\u{0178}', '\u{017D}', '\u{0131}',
        '\u{0142}', '\u{0153}', '\u{0161}', '\u{017E}', '\u{FFFD}', '\u{20AC}',
    ];
    match b {
        0x18..=0x1F => LOW[usize::from(b - 0x18)],
        0x80..=0xA0 => HIGH[usize::from(b - 0x80)],
        0xAD => char::REPLACEMENT_CHARACTER,
        _ => char::from(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lopdf::dictionary;

    #[test]
    fn a_utf16be_name_with_its_byte_order_mark_is_read() {
        // ZUGFeRD-invoice.xml as intarsys writes its /UF.
        let uf: Vec<u8> =
            b"\xFE\xFF".iter().copied().chain("ZUGFeRD-invoice.xml".bytes().flat_map(|b| [0, b])).collect();
        assert_eq!(text_string(&uf), "ZUGFeRD-invoice.xml");
        assert_eq!(standard_rank(&text_string(&uf)), Some(1));
        // A character outside the BMP (a surrogate pair) and a language escape.
        let rich = b"\xFE\xFF\x00\x1B\x00d\x00e\x00\x1B\xD8\x3D\xDE\x00\x00.\x00x";
        assert_eq!(text_string(rich), "\u{1F600}.x");
        // An odd trailing byte and a lone surrogate never panic.
        assert_eq!(text_string(b"\xFE\xFF\xD8\x00\x00a\x00"), "\u{FFFD}a");
    }

    #[test]
    fn a_pdfdoc_name_is_read_with_its_own_upper_half() {
        assert_eq!(text_string(b"factur-x.xml"), "factur-x.xml");
        // 0x80 bullet, 0xA0 euro, 0xE4 a-umlaut (Latin-1), 0x93 fi ligature.
        assert_eq!(text_string(b"\x80 \xA0 Gr\xE4\x93"), "\u{2022} \u{20AC} Gr\u{E4}\u{FB01}");
        assert_eq!(text_string(b"\xEF\xBB\xBFfactur-x.xml"), "factur-x.xml");
    }

    #[test]
    fn standard_names_match_in_any_case_and_after_a_path() {
        assert_eq!(standard_rank("FACTUR-X.XML"), Some(0));
        assert_eq!(standard_rank("C:\\export\\ZUGFeRD-invoice.xml"), Some(1));
        assert_eq!(standard_rank("/tmp/xrechnung.xml "), Some(3));
        assert_eq!(standard_rank("Order-X.xml"), Some(4));
        assert_eq!(standard_rank("not-factur-x.xml"), None);
        assert_eq!(standard_rank("factur-x.xml.bak"), None);
    }

    fn utf16(s: &str) -> Vec<u8> {
        b"\xFE\xFF".iter().copied().chain(s.encode_utf16().flat_map(u16::to_be_bytes)).collect()
    }

    /// A document whose catalog's `/Names` dictionary is what `build` returns.
    fn doc_with(build: impl FnOnce(&mut Document) -> Dictionary) -> Document {
        let mut doc = Document::with_version("1.7");
        let names = build(&mut doc);
        let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Names" => names });
        doc.trailer.set("Root", catalog);
        doc
    }

    fn attach(doc: &mut Document, name_key: &str, name: Vec<u8>, content: &str) -> Object {
        let stream = doc.add_object(lopdf::Stream::new(dictionary! {}, content.as_bytes().to_vec()));
        let mut spec = dictionary! { "Type" => "Filespec", "EF" => dictionary! { "F" => stream } };
        spec.set(name_key, Object::String(name, lopdf::StringFormat::Hexadecimal));
        Object::Reference(doc.add_object(spec))
    }

    #[test]
    fn an_xml_named_only_by_a_utf16_f_deep_in_a_name_tree_is_found() {
        let doc = doc_with(|doc| {
            let other = attach(doc, "F", b"logo.png".to_vec(), "PNG");
            let invoice = attach(doc, "F", utf16("ZUGFeRD-invoice.xml"), "<rsm:CrossIndustryDocument/>");
            let leaf = doc.add_object(dictionary! { "Names" => vec![Object::string_literal("a"), other] });
            let deep = doc.add_object(dictionary! { "Names" => vec![Object::string_literal("z"), invoice] });
            let middle = doc.add_object(dictionary! { "Kids" => vec![deep.into()] });
            // A kid pointing back at its parent: the walk ends instead of looping.
            let root = doc.add_object(dictionary! { "Kids" => vec![leaf.into(), middle.into()] });
            doc.get_object_mut(middle).unwrap().as_dict_mut().unwrap().set("Kids", vec![deep.into(), root.into()]);
            dictionary! { "EmbeddedFiles" => root }
        });
        // The last resort scan of every object would find it too: check the tree walk itself.
        let catalog = doc.catalog().unwrap();
        let tree = doc.dereference(catalog.get(b"Names").unwrap()).unwrap().1.as_dict().unwrap();
        let mut values = Vec::new();
        name_tree_values(&doc, tree.get(b"EmbeddedFiles").unwrap(), 0, &mut HashSet::new(), &mut 100, &mut values);
        assert_eq!(values.len(), 2);
        assert_eq!(invoice_xml(&doc).unwrap().as_deref(), Some(b"<rsm:CrossIndustryDocument/>".as_slice()));
    }

    #[test]
    fn failing_a_standard_name_an_attached_invoice_is_recognised_by_its_root() {
        let ubl = r#"<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"><ID>1</ID></Invoice>"#;
        let doc = doc_with(|doc| {
            let notes = attach(doc, "UF", utf16("notes.xml"), "<notes/>");
            let invoice = attach(doc, "UF", utf16("Rechnung 2026-17.xml"), ubl);
            dictionary! { "EmbeddedFiles" => dictionary! {
                "Names" => vec![Object::string_literal("1"), notes, Object::string_literal("2"), invoice],
            } }
        });
        assert_eq!(invoice_xml(&doc).unwrap().as_deref(), Some(ubl.as_bytes()));
        let none = doc_with(|doc| {
            let notes = attach(doc, "UF", utf16("notes.xml"), "<notes/>");
            dictionary! { "EmbeddedFiles" => dictionary! { "Names" => vec![Object::string_literal("1"), notes] } }
        });
        assert_eq!(invoice_xml(&none).unwrap(), None);
    }

    #[test]
    fn the_factur_x_attachment_is_preferred_to_a_zugferd_1_one() {
        let doc = doc_with(|doc| {
            let v1 = attach(doc, "F", b"ZUGFeRD-invoice.xml".to_vec(), "<v1/>");
            let v2 = attach(doc, "UF", utf16("factur-x.xml"), "<v2/>");
            dictionary! { "EmbeddedFiles" => dictionary! {
                "Names" => vec![Object::string_literal("a"), v1, Object::string_literal("b"), v2],
            } }
        });
        assert_eq!(invoice_xml(&doc).unwrap().as_deref(), Some(b"<v2/>".as_slice()));
    }
}
