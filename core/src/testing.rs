//! Fakes of the ports for unit tests of rules (feature `testing`). Integration tests use the real
//! adapters instead.

use crate::kernel::{Clock, Timestamp};
use crate::storage::Store;
use crate::{access, mailing};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A clock that stands still until told to move.
pub struct FixedClock(AtomicI64);

impl FixedClock {
    pub fn at(t: Timestamp) -> Self {
        Self(AtomicI64::new(t.unix_micros()))
    }

    pub fn advance_secs(&self, secs: i64) {
        self.0.fetch_add(secs * 1_000_000, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(self.0.load(Ordering::SeqCst))
    }
}

/// A mail transport that records what it is given, or fails as told.
#[derive(Default)]
pub struct RecordingTransport {
    pub sent: std::sync::Mutex<Vec<crate::kernel::OutgoingMessage>>,
    pub fail_with: std::sync::Mutex<Option<crate::kernel::SendError>>,
}

impl crate::kernel::MailTransport for RecordingTransport {
    fn send(&self, message: &crate::kernel::OutgoingMessage) -> Result<(), crate::kernel::SendError> {
        if let Some(e) = self.fail_with.lock().expect("poisoned").clone() {
            return Err(e);
        }
        self.sent.lock().expect("poisoned").push(message.clone());
        Ok(())
    }
}

/// The settings unit tests run with.
pub fn settings() -> crate::kernel::Settings {
    crate::kernel::Settings {
        public_url: "https://lists.example.org".into(),
        mail_from: crate::kernel::EmailAddress::parse("lists@example.org").expect("a valid address"),
    }
}

/// A DKIM key maker for unit tests that set no selector: it makes no key (the real one runs
/// `openssl`, which a unit test of a mailing rule has no business starting).
pub struct NoDkimKeys;

impl crate::mailing::dkim::DkimKeyMaker for NoDkimKeys {
    fn make(&self) -> Result<crate::mailing::dkim::KeyPair, crate::mailing::dkim::DkimError> {
        Err(crate::mailing::dkim::DkimError::BadKey("unit tests make no DKIM keys".into()))
    }
}

/// The access context for unit tests, over the given store (any that serves its transaction).
pub fn access<S>(
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    mail: Arc<dyn crate::kernel::MailTransport>,
) -> Arc<access::Service>
where
    S: Store<dyn access::ports::Tx> + 'static,
{
    Arc::new(access::Service::new(store, clock, mail, settings()))
}

/// The mailing context for unit tests: the given store, clock, mail transport and egress, a fresh
/// data key, no DKIM key maker. Nothing of the OCR context is built.
pub fn mailing<S>(
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    mail: Arc<dyn crate::kernel::MailTransport>,
    egress: crate::egress::Egress,
) -> mailing::Service
where
    S: Store<dyn access::ports::Tx> + Store<dyn mailing::ports::Tx> + 'static,
{
    mailing::Service {
        access: access(store.clone(), clock.clone(), mail.clone()),
        store,
        clock,
        mail,
        settings: settings(),
        egress,
        data_key: crate::kernel::sealed::DataKey::generate().1,
        dkim: Arc::new(NoDkimKeys),
        dkim_signing: Arc::new(crate::adapters::mail_auth_dkim::MailAuthDkim),
        dkim_verifying: Arc::new(crate::adapters::mail_auth_dkim::MailAuthDkim),
        credentials: mailing::credentials::Credentials::new(None, Arc::new(mailing::accounts::NoAccounts)),
        mime: Arc::new(crate::adapters::mime::MailParserReader),
        mail_in: Default::default(),
    }
}

/// An OCR engine that reads the same text on every image (a unit test of an OCR rule needs the
/// rule's behaviour, not Tesseract's).
pub struct ScriptedEngine(pub String);

impl crate::ocr::engine::OcrEngine for ScriptedEngine {
    fn recognize(
        &self,
        _image: &crate::ocr::engine::GrayImage,
        _lang: crate::ocr::engine::Language,
        _lines: crate::ocr::engine::Lines,
    ) -> Result<String, crate::ocr::engine::EngineError> {
        Ok(self.0.clone())
    }

    fn recognize_zone(
        &self,
        image: &crate::ocr::engine::GrayImage,
        lang: crate::ocr::engine::Language,
        _layout: crate::ocr::engine::Segmentation,
    ) -> Result<String, crate::ocr::engine::EngineError> {
        self.recognize(image, lang, crate::ocr::engine::Lines::Across)
    }

    fn ready(&self) -> Result<(), crate::ocr::engine::EngineError> {
        Ok(())
    }
}

/// A PDF reader whose every document has the given pages of text.
pub struct TextPdf(pub Vec<String>);

impl crate::ocr::pdf::PdfReader for TextPdf {
    fn content(&self, _pdf: &[u8], max_pages: u32) -> Result<Vec<crate::ocr::pdf::PdfPage>, crate::ocr::pdf::PdfError> {
        let pages = u32::try_from(self.0.len()).unwrap_or(u32::MAX);
        if pages > max_pages {
            return Err(crate::ocr::pdf::PdfError::TooManyPages { pages, max: max_pages });
        }
        Ok(self.0.iter().cloned().map(crate::ocr::pdf::PdfPage::Text).collect())
    }

    fn page_image(
        &self,
        _pdf: &[u8],
        _page: u32,
    ) -> Result<(u32, crate::ocr::pdf::PdfPage), crate::ocr::pdf::PdfError> {
        Err(crate::ocr::pdf::PdfError::Unreadable("the test reader renders no page".into()))
    }
}

/// An image codec that decodes nothing (unit tests feed rules text or pixels directly).
pub struct NoImages;

impl crate::ocr::images::ImageCodec for NoImages {
    fn decode_gray(&self, _bytes: &[u8]) -> Result<crate::ocr::engine::GrayImage, crate::ocr::images::ImageError> {
        Err(crate::ocr::images::ImageError::Unreadable("the test codec decodes nothing".into()))
    }

    fn encode_jpeg(&self, _image: &crate::ocr::engine::GrayImage) -> Result<Vec<u8>, crate::ocr::images::ImageError> {
        Err(crate::ocr::images::ImageError::Encode("the test codec encodes nothing".into()))
    }
}

/// A document store in memory.
#[derive(Default)]
pub struct MemoryBlobs(std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>);

impl crate::ocr::blobs::BlobStore for MemoryBlobs {
    /// One process only: the in-process gate of `ocr::retention` orders it.
    fn hold(&self, _: crate::ocr::blobs::Hold) -> Result<crate::ocr::blobs::BlobHold, crate::ocr::blobs::BlobError> {
        Ok(crate::ocr::blobs::BlobHold::new(()))
    }

    fn put(&self, bytes: &[u8]) -> Result<crate::ocr::blobs::BlobId, crate::ocr::blobs::BlobError> {
        let id = crate::ocr::blobs::BlobId::of(bytes);
        self.0.lock().expect("poisoned").insert(id.as_str().to_owned(), bytes.to_vec());
        Ok(id)
    }

    fn get(&self, id: &crate::ocr::blobs::BlobId) -> Result<Vec<u8>, crate::ocr::blobs::BlobError> {
        let blobs = self.0.lock().expect("poisoned");
        blobs.get(id.as_str()).cloned().ok_or_else(|| crate::ocr::blobs::BlobError::Missing(id.as_str().to_owned()))
    }

    fn delete(&self, id: &crate::ocr::blobs::BlobId) -> Result<(), crate::ocr::blobs::BlobError> {
        self.0.lock().expect("poisoned").remove(id.as_str());
        Ok(())
    }

    fn ready(&self) -> Result<(), crate::ocr::blobs::BlobError> {
        Ok(())
    }
}

/// The OCR context for unit tests: the given store and clock, the fakes above (a text PDF
/// reader with `pages`, an engine that reads `ocr_text`), default limits. Nothing of the mailing
/// context is built.
pub fn ocr<S>(store: Arc<S>, clock: Arc<dyn Clock>, pages: Vec<String>, ocr_text: &str) -> crate::ocr::Service
where
    S: Store<dyn access::ports::Tx> + Store<dyn crate::ocr::ports::Tx> + 'static,
{
    let access = access(store.clone(), clock.clone(), Arc::new(RecordingTransport::default()));
    let adapters = crate::ocr::Adapters {
        engine: Arc::new(ScriptedEngine(ocr_text.to_owned())),
        pdf: Arc::new(TextPdf(pages)),
        images: Arc::new(NoImages),
        blobs: Arc::new(MemoryBlobs::default()),
        limits: crate::ocr::OcrLimits::default(),
    };
    crate::ocr::Service::new(access, store, clock, adapters)
}
