//! The OCR context's records: what its storage port reads and writes and its rules pass around.
//! A leaf: it names the kernel, the access context's user id and the engine's and blob store's
//! value types, never a rule file, so the port (`ports.rs`) and the rules both depend on it and not
//! on each other.

use super::blobs::BlobId;
use super::engine::Language;
use super::intake::DocumentKind;
use crate::access::model::UserId;
use crate::id_type;
use crate::kernel::{Code, CoreError, Timestamp, secrets};

/// A record's field refused by its own check: a 422 `validation_failed`, whoever asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRecord(pub String);

impl CoreError for InvalidRecord {
    fn code(&self) -> Code {
        Code::ValidationFailed
    }
}

/// The identifier a client reuses: 128 random bits as 32 lowercase hex digits. Opaque: it says
/// nothing about the document, its owner or its order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OcrId(String);

impl OcrId {
    pub fn generate() -> Self {
        Self(secrets::random_hex(16))
    }

    /// `None` for anything that cannot be an id this service made.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        (s.len() == 32 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `raw` returns the engine's text as it is and no `meta`; `invoice` (and any other value, as
/// the contract says) allows local enhancements: the invoice's fields, checked against each
/// other (`crate::ocr::invoice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Raw,
    Invoice,
}

impl Profile {
    pub fn parse(s: &str) -> Self {
        if s.trim().eq_ignore_ascii_case("raw") { Profile::Raw } else { Profile::Invoice }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Raw => "raw",
            Profile::Invoice => "invoice",
        }
    }
}

/// What `POST /api/ocrs` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the text (empty or `default`).
    Recognize,
    /// Convert the first page to JPEG and return it; no OCR.
    StoreOnly,
    /// Keep the document for the operator's staff to analyse.
    OcrFailed,
}

impl Action {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "" => Some(Action::Recognize),
            s if s.eq_ignore_ascii_case("default") => Some(Action::Recognize),
            s if s.eq_ignore_ascii_case("storeOnly") => Some(Action::StoreOnly),
            s if s.eq_ignore_ascii_case("ocrFailed") => Some(Action::OcrFailed),
            _ => None,
        }
    }
}

/// Where a document stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentState {
    /// Its text was read.
    Recognized,
    /// Stored and converted to JPEG (`storeOnly`), not read.
    Stored,
    /// Kept for staff analysis (`ocrFailed`).
    Failed,
}

impl DocumentState {
    pub fn as_str(self) -> &'static str {
        match self {
            DocumentState::Recognized => "recognized",
            DocumentState::Stored => "stored",
            DocumentState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Recognized, Self::Stored, Self::Failed].into_iter().find(|k| k.as_str() == s)
    }

    pub(crate) fn after(action: Action) -> Self {
        match action {
            Action::Recognize => DocumentState::Recognized,
            Action::StoreOnly => DocumentState::Stored,
            Action::OcrFailed => DocumentState::Failed,
        }
    }
}

/// A stored document's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub ocr_id: OcrId,
    pub owner: UserId,
    pub blob: BlobId,
    pub kind: DocumentKind,
    pub size_bytes: u64,
    /// 0 when unknown (a document kept with `ocrFailed` is not opened).
    pub pages: u32,
    pub lang: Language,
    pub profile: Profile,
    pub state: DocumentState,
    /// The text read, pages separated by form feeds as `pdftotext` separates them.
    pub text: String,
    pub created_at: Timestamp,
    /// The `meta` of the processing response as it was sent (`InvoiceMeta::to_json`), kept for
    /// `GET /api/ocrs`: an object, or `""`.
    pub meta: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maintenance {
    Off,
    On { since: Timestamp },
}

/// A record's identifier, chosen by whoever creates it (`scaninvoices`): 1 to 64 letters,
/// digits, `.`, `_` or `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftwareId(String);

impl SoftwareId {
    pub fn parse(s: &str) -> Result<Self, InvalidRecord> {
        let ok = (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidRecord(format!(
                "id {:?} is not 1 to 64 letters, digits, '.', '_' or '-'",
                s.chars().take(70).collect::<String>()
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id a record created without one gets (decisions.md): its name lowercased, every run
    /// of spaces and punctuation one `-`, at most 50 characters so that a suffix still fits;
    /// `software` for a name with no letter or digit. Non-ASCII letters count as punctuation, so
    /// the id stays within what `parse` accepts.
    pub fn from_name(name: &str) -> Self {
        let mut slug = String::new();
        for c in name.chars() {
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
            if slug.len() >= 50 {
                break;
            }
        }
        let slug = slug.trim_end_matches('-');
        Self(if slug.is_empty() { "software".to_owned() } else { slug.to_owned() })
    }

    /// The same id with a random suffix, for a name whose id is taken.
    pub(crate) fn with_random_suffix(&self) -> Self {
        Self(format!("{}-{}", self.0, crate::kernel::secrets::random_hex(4)))
    }
}

/// What a client sends to create or replace a record, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftwareFields {
    pub name: String,
    pub latest_version: String,
    pub min_version: String,
    pub download_url: String,
    pub notes: String,
}

impl SoftwareFields {
    /// `name` is required; versions are short texts, `download_url` an https (or http) URL or
    /// empty, `notes` up to 10,000 characters. No control characters but line breaks in notes.
    pub fn new(
        name: &str,
        latest_version: &str,
        min_version: &str,
        download_url: &str,
        notes: &str,
    ) -> Result<Self, InvalidRecord> {
        let text = |field: &str, v: &str, max: usize, lines: bool| -> Result<String, InvalidRecord> {
            let v = v.trim();
            if v.chars().count() > max {
                return Err(InvalidRecord(format!("{field} is longer than {max} characters")));
            }
            if v.chars().any(|c| c.is_control() && !(lines && (c == '\n' || c == '\r' || c == '\t'))) {
                return Err(InvalidRecord(format!("{field} holds control characters")));
            }
            Ok(v.to_owned())
        };
        let name = text("name", name, 200, false)?;
        if name.is_empty() {
            return Err(InvalidRecord("name is required".into()));
        }
        let download_url = text("download_url", download_url, 2000, false)?;
        let scheme_ok = download_url.is_empty()
            || download_url
                .strip_prefix("https://")
                .or_else(|| download_url.strip_prefix("http://"))
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace));
        if !scheme_ok {
            return Err(InvalidRecord("download_url is not an http(s) URL".into()));
        }
        Ok(Self {
            name,
            latest_version: text("latest_version", latest_version, 50, false)?,
            min_version: text("min_version", min_version, 50, false)?,
            download_url,
            notes: text("notes", notes, 10_000, true)?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Software {
    pub id: SoftwareId,
    pub fields: SoftwareFields,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

id_type!(
    /// A supplier of the directory.
    SupplierId
);

/// A VAT number as stored and compared: upper case, without spaces, dots or dashes, two letters
/// of country then 2 to 13 letters and digits. (Check digits are the extraction's business; the
/// directory only needs one spelling per number.)
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VatNumber(String);

impl VatNumber {
    pub fn parse(s: &str) -> Option<Self> {
        let v: String =
            s.chars().filter(|c| !matches!(c, ' ' | '.' | '-' | '\u{a0}')).collect::<String>().to_uppercase();
        let (country, rest) = v.split_at_checked(2)?;
        let ok = country.bytes().all(|b| b.is_ascii_uppercase())
            && (2..=13).contains(&rest.len())
            && rest.bytes().all(|b| b.is_ascii_alphanumeric());
        ok.then_some(Self(v))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ISO 3166 country of the number (`EL` is Greece's VAT prefix, `GR` its country code).
    pub fn country(&self) -> &str {
        match &self.0[..2] {
            "EL" => "GR",
            other => other,
        }
    }

    /// A French number's SIREN: the nine digits after the two-character key.
    pub fn siren(&self) -> Option<&str> {
        let rest = self.0.strip_prefix("FR")?;
        (rest.len() == 11 && rest[2..].bytes().all(|b| b.is_ascii_digit())).then(|| &rest[2..])
    }
}

/// Where a supplier's facts came from most recently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Extracted from a processed invoice.
    Invoice,
    /// Confirmed by a user (`confirmvalues`).
    Confirmation,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Invoice => "invoice",
            Source::Confirmation => "confirmation",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Source::Invoice, Source::Confirmation].into_iter().find(|k| k.as_str() == s)
    }
}

/// A supplier of the directory; empty strings where nothing is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supplier {
    pub id: SupplierId,
    pub vat_number: Option<VatNumber>,
    pub name: String,
    pub siret: String,
    pub siren: String,
    pub adresse: String,
    pub cp: String,
    pub ville: String,
    pub pays: String,
    pub code_pays: String,
    pub source: Source,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What one user did in one month.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonthUsage {
    /// `YYYY-MM`.
    pub month: String,
    pub documents: u64,
    pub pages: u64,
    pub cuts: u64,
}

/// A zone remembered for a supplier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedZone {
    pub name: String,
    pub page: u32,
    /// At image scale (ratio 1).
    pub rect: PixelRect,
    pub confirmations: u32,
    pub last_value: String,
    pub updated_at: Timestamp,
}

/// A zone in image pixels, inside the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelRect {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
}

impl PixelRect {
    /// The wire form, `x:y:w:h`.
    pub fn as_text(&self) -> String {
        format!("{}:{}:{}:{}", self.x, self.y, self.w, self.h)
    }
}
