//! Documents: an upload taken in (kind by content, size limit), its text read (a PDF's text
//! layer as it is; scanned pages and images through the OCR engine), stored content-addressed with
//! its record, and found again only by its owner.

use super::Service;
use super::blobs::BlobError;
use super::engine::{EngineError, GrayImage, Language, OcrWord, RecognizedPage};
use super::images::ImageError;
use super::intake::{DocumentKind, SniffError, sniff};
use super::invoice::meta::InvoiceMeta;
pub use super::model::{Action, Document, DocumentState, OcrId, Profile};
use super::pdf::{PdfError, PdfPage};
use super::suppliers::{self, Facts, Source, VatNumber};
use super::templates::{Template, TemplateError};
use super::usage::{self, MonthUsage, UsageError};
use super::wrap;
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Principal};
use crate::kernel::{Code, CoreError, Page, Paged};
use crate::storage::{StoreError, in_read, in_write};

/// What a client sent.
#[derive(Debug, Clone)]
pub struct Upload {
    pub bytes: Vec<u8>,
    pub lang: Language,
    pub profile: Profile,
    pub action: Action,
    /// `yamlFilter`: an invoice2data template, read before the document is.
    pub yaml_filter: Option<String>,
}

/// A page as JPEG, for `storeOnly` and `jpegDownload`.
#[derive(Debug, Clone)]
pub struct PageJpeg {
    pub jpeg: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub page: u32,
    pub pages: u32,
}

/// Where an upload's time went, stage by stage (summed over pages), for the `Server-Timing` header
/// and the benchmark's breakdown. Wall time measured around each step: a diagnostic, never an
/// input to a rule.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Image bytes to pixels (an upload, or a PDF's embedded scan).
    pub decode: std::time::Duration,
    /// The PDF sandbox: text layers, embedded XML, page images handed back or rendered.
    pub render: std::time::Duration,
    /// Skew measured, and the page turned level when it is askew.
    pub deskew: std::time::Duration,
    /// The OCR engine, its queue included.
    pub engine: std::time::Duration,
    /// Invoice fields from the words or the text, and a template's.
    pub extract: std::time::Duration,
    /// The file stored, then the record, usage, supplier and audit committed.
    pub store: std::time::Duration,
    /// The whole of `submit`.
    pub total: std::time::Duration,
}

impl Timings {
    /// Runs `f`, adding its wall time to the stage `at` picks.
    fn time<T>(&mut self, at: fn(&mut Self) -> &mut std::time::Duration, f: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = f();
        *at(self) += started.elapsed();
        out
    }

    /// `name;dur=milliseconds` per stage, the `Server-Timing` header's syntax.
    pub fn server_timing(&self) -> String {
        [
            ("decode", self.decode),
            ("render", self.render),
            ("deskew", self.deskew),
            ("engine", self.engine),
            ("extract", self.extract),
            ("store", self.store),
            ("total", self.total),
        ]
        .iter()
        .map(|(name, d)| format!("{name};dur={:.1}", d.as_secs_f64() * 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// What `submit` made.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub document: Document,
    /// `storeOnly`: the first page as JPEG, and for an image upload the one-page PDF around it.
    pub page: Option<PageJpeg>,
    pub pdf: Option<Vec<u8>>,
    /// What the `yamlFilter` did, for the response's `message`. (The fields themselves, extracted
    /// and laid over by the template's, are the document's `meta`.)
    pub template_note: Option<String>,
    pub timings: Timings,
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("the operator has no account to own documents")]
    NoOwner,
    #[error(transparent)]
    Kind(#[from] SniffError),
    #[error("the document is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("the text document is not valid UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Pdf(#[from] PdfError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error("a text document has no page image")]
    NoImage,
    #[error("document not found")]
    NotFound,
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Access(#[from] AccessError),
}

impl CoreError for DocumentError {
    fn code(&self) -> Code {
        match self {
            DocumentError::NoOwner => Code::Forbidden,
            DocumentError::Kind(SniffError::Empty) => Code::DocumentEmpty,
            DocumentError::Kind(SniffError::Unknown) | DocumentError::NotUtf8 => Code::DocumentTypeUnsupported,
            DocumentError::TooLarge { .. } => Code::DocumentTooLarge,
            DocumentError::Pdf(e) => match e {
                PdfError::Encrypted => Code::DocumentEncrypted,
                PdfError::Unreadable(_) => Code::DocumentUnreadable,
                PdfError::LimitExceeded(_) | PdfError::TooManyPages { .. } => Code::DocumentTooComplex,
                PdfError::NoSuchPage(_) => Code::NotFound,
                PdfError::Unavailable(_) => Code::OcrUnavailable,
            },
            DocumentError::Image(e) => match e {
                ImageError::Unreadable(_) => Code::DocumentUnreadable,
                ImageError::TooLarge(_) => Code::DocumentTooComplex,
                ImageError::Encode(_) => Code::Internal,
            },
            DocumentError::Engine(e) => match e {
                EngineError::Unavailable(_) => Code::OcrUnavailable,
                EngineError::Failed(_) => Code::Internal,
            },
            DocumentError::Template(TemplateError::TooLarge { .. }) => Code::TemplateTooLarge,
            DocumentError::Template(_) => Code::TemplateInvalid,
            DocumentError::Usage(e) => e.code(),
            DocumentError::NoImage => Code::DocumentHasNoImage,
            DocumentError::NotFound => Code::NotFound,
            DocumentError::Blob(_) => Code::Internal,
            DocumentError::Store(e) => e.code(),
            DocumentError::Access(e) => e.code(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            DocumentError::Access(e) => e.retry_after(),
            DocumentError::Usage(e) => e.retry_after(),
            _ => None,
        }
    }
}

/// Takes a document in. Nothing is stored unless the whole action succeeded, so a hostile file
/// leaves no trace but a log line; `ocrFailed` documents are stored without being opened.
pub fn submit(app: &Service, p: &Principal, ctx: &RequestCtx, upload: Upload) -> Result<Submitted, DocumentError> {
    let started = std::time::Instant::now();
    let mut timings = Timings::default();
    let owner = p.user.as_ref().ok_or(DocumentError::NoOwner)?.id;
    let limit = app.limits.max_document_bytes;
    if upload.bytes.len() > limit {
        return Err(DocumentError::TooLarge { size: upload.bytes.len(), limit });
    }
    // A bad template is refused before the document is opened: the caller learns in
    // milliseconds, not after an OCR run.
    let template = match upload.yaml_filter.as_deref().map(str::trim) {
        Some(yaml) if !yaml.is_empty() => Some(Template::parse(yaml)?),
        _ => None,
    };
    let kind = sniff(&upload.bytes)?;
    if upload.action != Action::OcrFailed {
        usage::check_quota(app, owner)?;
    }
    let (pages, text, page, pdf, extracted) = match upload.action {
        Action::Recognize => {
            let read = read(app, kind, &upload.bytes, upload.lang, upload.profile, &mut timings)?;
            (read.pages, read.text, None, None, read.meta)
        }
        Action::StoreOnly => {
            let page = page_jpeg(app, kind, &upload.bytes, 1)?;
            // An image upload also comes back as a one-page PDF (decisions.md).
            let pdf = if kind.is_image() { wrap::pdf_around_jpeg(&page.jpeg) } else { None };
            (page.pages, String::new(), Some(page), pdf, InvoiceMeta::default())
        }
        Action::OcrFailed => (0, String::new(), None, None, InvoiceMeta::default()),
    };
    // Held until the record is committed: a retention sweep cannot remove a file with the same
    // content between its storing and the record naming it (retention.rs).
    let _storing = super::retention::BLOB_GATE.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    // And in every other process sharing the store (the same order everywhere: gate, then hold).
    let _storing_everywhere = app.blobs.hold(super::blobs::Hold::Store)?;
    let stored = std::time::Instant::now();
    let blob = app.blobs.put(&upload.bytes)?;
    timings.store += stored.elapsed();
    let now = app.clock.now();
    let (meta, template_note) = timings.time(
        |t| &mut t.extract,
        || {
            let (overlay, template_note) = match (&template, upload.action) {
                (Some(t), Action::Recognize) => apply_template(t, &text),
                _ => (serde_json::Map::new(), None),
            };
            (lay_over(extracted.to_json(), overlay), template_note)
        },
    );
    let document = Document {
        ocr_id: OcrId::generate(),
        owner,
        blob,
        kind,
        size_bytes: upload.bytes.len() as u64,
        pages,
        lang: upload.lang,
        profile: upload.profile,
        state: DocumentState::after(upload.action),
        text,
        created_at: now,
        meta,
    };
    // Pages the service worked on: every page read, the one page converted for storeOnly.
    let worked = match upload.action {
        Action::Recognize => u64::from(pages),
        Action::StoreOnly => 1,
        Action::OcrFailed => 0,
    };
    let stored = std::time::Instant::now();
    in_write(&*app.store, |tx| {
        tx.insert_ocr_document(&document)?;
        usage::count(tx, owner, now, &MonthUsage { documents: 1, pages: worked, ..MonthUsage::default() })?;
        suppliers::learn(tx, &supplier_facts(&document.meta), Source::Invoice, now)?;
        audit_done(tx, p, ctx, now, "ocr.document.create", &format!("ocr:{}", document.ocr_id.as_str()))?;
        Ok::<_, DocumentError>(())
    })?;
    timings.store += stored.elapsed();
    timings.total = started.elapsed();
    tracing::debug!(ocr_id = document.ocr_id.as_str(), timings = %timings.server_timing(), "document taken in");
    Ok(Submitted { document, page, pdf, template_note, timings })
}

/// The extracted `meta` (an object, or `""` when nothing was found) with a template's fields laid
/// over it: a matching template's author vouched for its patterns, so its fields win, and their
/// confidences join the others.
fn lay_over(extracted: serde_json::Value, overlay: serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    use serde_json::Value;
    if overlay.is_empty() {
        return extracted;
    }
    let mut meta = match extracted {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    for (key, value) in overlay {
        match (key.as_str(), meta.get_mut("confidence"), value) {
            ("confidence", Some(Value::Object(mine)), Value::Object(theirs)) => mine.extend(theirs),
            (_, _, value) => {
                meta.insert(key, value);
            }
        }
    }
    Value::Object(meta)
}

/// What an invoice's `meta` says of its supplier, for the directory and for confirmations that
/// name no supplier.
pub fn supplier_facts(meta: &serde_json::Value) -> Facts {
    let text =
        |k: &str| meta.get(k).and_then(serde_json::Value::as_str).map(str::to_owned).filter(|v| !v.trim().is_empty());
    let details = meta.get("company_details");
    let detail = |k: &str| {
        details
            .and_then(|d| d.get(k))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .filter(|v| !v.trim().is_empty())
    };
    Facts {
        vat_number: text("supplier_numtva").as_deref().and_then(VatNumber::parse),
        name: text("supplier_name").or_else(|| detail("name")),
        siret: text("supplier_siret"),
        adresse: detail("adresse"),
        cp: detail("cp"),
        ville: detail("ville"),
        pays: detail("pays"),
    }
}

/// The template's fields when it matches the text, and a note saying what it did.
fn apply_template(t: &Template, text: &str) -> (serde_json::Map<String, serde_json::Value>, Option<String>) {
    let name =
        if t.issuer.is_empty() { "the yamlFilter template".to_owned() } else { format!("template {:?}", t.issuer) };
    match t.extract(text) {
        None => (serde_json::Map::new(), Some(format!("{name} did not match the document"))),
        Some(ex) if ex.missing.is_empty() => (t.meta(&ex), Some(format!("{name} applied"))),
        Some(ex) => {
            let note = format!("{name} applied; required fields not found: {}", ex.missing.join(", "));
            (t.meta(&ex), Some(note))
        }
    }
}

/// OCR of one page or photo, turned level first when it is askew: the text alone (`raw`), or
/// the text and the words' boxes from the same recognition (`invoice`).
fn recognize(
    app: &Service,
    image: &GrayImage,
    lang: Language,
    profile: Profile,
    timings: &mut Timings,
) -> Result<RecognizedPage, DocumentError> {
    let (level, lines) = timings.time(|t| &mut t.deskew, || super::deskew::level(image));
    let image = level.as_ref().unwrap_or(image);
    timings.time(
        |t| &mut t.engine,
        || {
            Ok(match profile {
                Profile::Raw => RecognizedPage { text: app.engine.recognize(image, lang, lines)?, words: Vec::new() },
                Profile::Invoice => app.engine.recognize_words(image, lang, lines)?,
            })
        },
    )
}

/// What reading a document gave.
struct Read {
    pages: u32,
    text: String,
    meta: InvoiceMeta,
}

/// Pages' words stacked into one tall page, so that rows never join across pages.
fn stack(pages: Vec<Vec<OcrWord>>) -> Vec<OcrWord> {
    let mut out = Vec::new();
    let mut offset = 0;
    for words in pages {
        let bottom = words.iter().map(|w| w.top.saturating_add(w.height)).max().unwrap_or(0);
        out.extend(words.into_iter().map(|w| OcrWord { top: w.top.saturating_add(offset), ..w }));
        offset = offset.saturating_add(bottom).saturating_add(1000);
    }
    out
}

/// The text of a document, its page count, and for `profile=invoice` its fields: a structured
/// invoice (embedded CII XML, CII or UBL upload) is read exactly and first; otherwise the fields
/// come from the pages' words.
fn read(
    app: &Service,
    kind: DocumentKind,
    bytes: &[u8],
    lang: Language,
    profile: Profile,
    timings: &mut Timings,
) -> Result<Read, DocumentError> {
    let invoice = profile == Profile::Invoice;
    let xml_meta = |xml: &[u8]| match super::invoice::from_xml(xml) {
        Ok(meta) => Some(meta),
        Err(e) => {
            tracing::debug!(error = %e, "not a structured invoice");
            None
        }
    };
    match kind {
        DocumentKind::Text | DocumentKind::Xml => {
            let text = std::str::from_utf8(bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes))
                .map_err(|_| DocumentError::NotUtf8)?
                .to_owned();
            let meta = match (invoice, kind) {
                (false, _) => InvoiceMeta::default(),
                (true, DocumentKind::Xml) => xml_meta(bytes).unwrap_or_default(),
                (true, _) => timings.time(|t| &mut t.extract, || super::invoice::from_layout_text(&text, lang)),
            };
            Ok(Read { pages: 1, text, meta })
        }
        DocumentKind::Jpeg | DocumentKind::Png | DocumentKind::Tiff => {
            let image = timings.time(|t| &mut t.decode, || app.images.decode_gray(bytes))?;
            let page = recognize(app, &image, lang, profile, timings)?;
            let meta = if invoice {
                timings.time(|t| &mut t.extract, || super::invoice::from_words(page.words, lang))
            } else {
                InvoiceMeta::default()
            };
            Ok(Read { pages: 1, text: page.text, meta })
        }
        DocumentKind::Pdf => {
            // The embedded invoice and the pages in one read: one deadline, one CPU budget.
            let (xml, content) = timings.time(
                |t| &mut t.render,
                || {
                    if invoice {
                        app.pdf.document(bytes, app.limits.max_pages)
                    } else {
                        app.pdf.content(bytes, app.limits.max_pages).map(|c| (None, c))
                    }
                },
            )?;
            let structured = timings.time(|t| &mut t.extract, || xml.and_then(|x| xml_meta(&x)));
            // With the XML's exact fields, the pages are only read for their text.
            let profile = if structured.is_some() { Profile::Raw } else { profile };
            let mut texts = Vec::with_capacity(content.len());
            let mut words = Vec::with_capacity(content.len());
            for page in content {
                let read = match page {
                    PdfPage::Text(t) => {
                        let w = if profile == Profile::Invoice {
                            timings.time(|s| &mut s.extract, || super::invoice::words::from_layout_text(&t))
                        } else {
                            Vec::new()
                        };
                        RecognizedPage { text: t, words: w }
                    }
                    PdfPage::Jpeg(jpeg) => {
                        let image = timings.time(|t| &mut t.decode, || app.images.decode_gray(&jpeg))?;
                        recognize(app, &image, lang, profile, timings)?
                    }
                    PdfPage::Rendered(image) => recognize(app, &image, lang, profile, timings)?,
                };
                texts.push(read.text);
                words.push(read.words);
            }
            let pages = u32::try_from(texts.len()).unwrap_or(u32::MAX);
            let meta = match (structured, profile) {
                (Some(meta), _) => meta,
                (None, Profile::Invoice) => {
                    timings.time(|t| &mut t.extract, || super::invoice::from_words(stack(words), lang))
                }
                (None, Profile::Raw) => InvoiceMeta::default(),
            };
            Ok(Read { pages, text: texts.join("\x0c"), meta })
        }
    }
}

/// Page `page` (1-based) of a document as a JPEG: an embedded scan as it is, else encoded from the
/// page's pixels.
fn page_jpeg(app: &Service, kind: DocumentKind, bytes: &[u8], page: u32) -> Result<PageJpeg, DocumentError> {
    let encode = |image: &GrayImage, pages: u32| -> Result<PageJpeg, DocumentError> {
        let jpeg = app.images.encode_jpeg(image)?;
        Ok(PageJpeg { jpeg, width: image.width(), height: image.height(), page, pages })
    };
    match kind {
        DocumentKind::Text | DocumentKind::Xml => Err(DocumentError::NoImage),
        DocumentKind::Jpeg | DocumentKind::Png | DocumentKind::Tiff => {
            if page != 1 {
                return Err(PdfError::NoSuchPage(page).into());
            }
            encode(&app.images.decode_gray(bytes)?, 1)
        }
        DocumentKind::Pdf => {
            let (pages, image) = app.pdf.page_image(bytes, page)?;
            match image {
                PdfPage::Jpeg(jpeg) => match wrap::jpeg_dimensions(&jpeg) {
                    Some((width, height)) => Ok(PageJpeg { jpeg, width, height, page, pages }),
                    // An embedded "JPEG" whose frame cannot be read: decode it like any scan.
                    None => encode(&app.images.decode_gray(&jpeg)?, pages),
                },
                PdfPage::Rendered(image) => encode(&image, pages),
                PdfPage::Text(_) => Err(PdfError::Unreadable("the reader returned text for an image".into()).into()),
            }
        }
    }
}

/// Page `page` (1-based) of a document as gray pixels, the same pixels `storeOnly` and
/// `jpegDownload` show (so zones drawn on those land where they were drawn).
pub fn page_image(app: &Service, document: &Document, page: u32) -> Result<GrayImage, DocumentError> {
    let bytes = app.blobs.get(&document.blob)?;
    match document.kind {
        DocumentKind::Text | DocumentKind::Xml => Err(DocumentError::NoImage),
        DocumentKind::Jpeg | DocumentKind::Png | DocumentKind::Tiff => {
            if page != 1 {
                return Err(PdfError::NoSuchPage(page).into());
            }
            Ok(app.images.decode_gray(&bytes)?)
        }
        DocumentKind::Pdf => match app.pdf.page_image(&bytes, page)?.1 {
            PdfPage::Jpeg(jpeg) => Ok(app.images.decode_gray(&jpeg)?),
            PdfPage::Rendered(image) => Ok(image),
            PdfPage::Text(_) => Err(PdfError::Unreadable("the reader returned text for an image".into()).into()),
        },
    }
}

/// A document of the caller's. Another user's document is unknown, exactly like a missing one.
pub fn find(app: &Service, p: &Principal, ocr_id: &str) -> Result<Document, DocumentError> {
    let owner = p.user.as_ref().ok_or(DocumentError::NoOwner)?.id;
    let id = OcrId::parse(ocr_id).ok_or(DocumentError::NotFound)?;
    match in_read(&*app.store, |tx| tx.ocr_document(&id))? {
        Some(d) if d.owner == owner => Ok(d),
        _ => Err(DocumentError::NotFound),
    }
}

/// Page `page` of one of the caller's documents as a JPEG (`jpegDownload`).
pub fn download_jpeg(app: &Service, p: &Principal, ocr_id: &str, page: u32) -> Result<PageJpeg, DocumentError> {
    let document = find(app, p, ocr_id)?;
    let bytes = app.blobs.get(&document.blob)?;
    page_jpeg(app, document.kind, &bytes, page)
}

/// Documents kept with `ocrFailed`, newest first (the operator's `courrier ocr failed`).
pub fn failed(app: &Service, page: Page) -> Result<Paged<Document>, DocumentError> {
    Ok(in_read(&*app.store, |tx| tx.ocr_documents_in_state(DocumentState::Failed, page))?)
}

/// Every user's documents in `state`, newest first: the operator's listing, for the installation's
/// administrators on the administration pages.
pub fn in_state(
    app: &Service,
    p: &Principal,
    state: DocumentState,
    page: Page,
) -> Result<Paged<Document>, DocumentError> {
    p.authorize(crate::access::Perm::Read, &crate::access::model::Target::Installation, "documents")
        .map_err(UsageError::from)?;
    Ok(in_read(&*app.store, |tx| tx.ocr_documents_in_state(state, page))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_and_profiles_parse_as_clients_send_them() {
        for (s, a) in [
            ("", Action::Recognize),
            ("default", Action::Recognize),
            ("storeOnly", Action::StoreOnly),
            ("storeonly", Action::StoreOnly),
            ("ocrFailed", Action::OcrFailed),
        ] {
            assert_eq!(Action::parse(s), Some(a), "{s}");
        }
        assert_eq!(Action::parse("delete"), None);
        assert_eq!(Profile::parse("raw"), Profile::Raw);
        assert_eq!(Profile::parse("invoice"), Profile::Invoice);
        assert_eq!(Profile::parse("anything"), Profile::Invoice);
    }

    #[test]
    fn ocr_ids_are_128_random_bits_and_checked() {
        let a = OcrId::generate();
        assert_eq!(a.as_str().len(), 32);
        assert_ne!(a, OcrId::generate());
        assert_eq!(OcrId::parse(a.as_str()), Some(a));
        assert_eq!(OcrId::parse("1"), None);
        assert_eq!(OcrId::parse(&"g".repeat(32)), None);
    }

    #[test]
    fn states_round_trip() {
        for s in [DocumentState::Recognized, DocumentState::Stored, DocumentState::Failed] {
            assert_eq!(DocumentState::parse(s.as_str()), Some(s));
        }
    }
}
