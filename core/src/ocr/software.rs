//! `softwareInfos`: records of the client software that uses the service (name, latest and
//! minimum versions, where to download it), so a client can tell its user to upgrade. Everyone
//! reads them; only a site admin with a `manage` key writes them.

use super::Service;
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Perm, Principal};
use crate::kernel::{Code, CoreError, Timestamp};
use crate::storage::{StoreError, in_read, in_write};

/// A record's identifier, chosen by whoever creates it (`scaninvoices`): 1 to 64 letters,
/// digits, `.`, `_` or `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftwareId(String);

impl SoftwareId {
    pub fn parse(s: &str) -> Result<Self, SoftwareError> {
        let ok = (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(SoftwareError::Invalid(format!(
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
    fn with_random_suffix(&self) -> Self {
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
    ) -> Result<Self, SoftwareError> {
        let text = |field: &str, v: &str, max: usize, lines: bool| -> Result<String, SoftwareError> {
            let v = v.trim();
            if v.chars().count() > max {
                return Err(SoftwareError::Invalid(format!("{field} is longer than {max} characters")));
            }
            if v.chars().any(|c| c.is_control() && !(lines && (c == '\n' || c == '\r' || c == '\t'))) {
                return Err(SoftwareError::Invalid(format!("{field} holds control characters")));
            }
            Ok(v.to_owned())
        };
        let name = text("name", name, 200, false)?;
        if name.is_empty() {
            return Err(SoftwareError::Invalid("name is required".into()));
        }
        let download_url = text("download_url", download_url, 2000, false)?;
        let scheme_ok = download_url.is_empty()
            || download_url
                .strip_prefix("https://")
                .or_else(|| download_url.strip_prefix("http://"))
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace));
        if !scheme_ok {
            return Err(SoftwareError::Invalid("download_url is not an http(s) URL".into()));
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

#[derive(Debug, thiserror::Error)]
pub enum SoftwareError {
    #[error("{0}")]
    Invalid(String),
    #[error("no software record {0:?}")]
    NotFound(String),
    #[error("a software record {0:?} exists already; PUT replaces it")]
    Exists(String),
    #[error("writing softwareInfos needs a manage key of a site admin")]
    Forbidden,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Access(#[from] AccessError),
}

impl CoreError for SoftwareError {
    fn code(&self) -> Code {
        match self {
            SoftwareError::Invalid(_) => Code::ValidationFailed,
            SoftwareError::NotFound(_) => Code::NotFound,
            SoftwareError::Exists(_) => Code::Conflict,
            SoftwareError::Forbidden => Code::Forbidden,
            SoftwareError::Store(e) => e.code(),
            SoftwareError::Access(e) => e.code(),
        }
    }
}

fn may_write(p: &Principal) -> Result<(), SoftwareError> {
    if p.is_site_admin() && p.credential_perms().contains(Perm::Manage) {
        Ok(())
    } else {
        Err(SoftwareError::Forbidden)
    }
}

pub fn list(app: &Service) -> Result<Vec<Software>, SoftwareError> {
    Ok(in_read(&*app.store, |tx| tx.software_list())?)
}

pub fn get(app: &Service, id: &str) -> Result<Software, SoftwareError> {
    let id = SoftwareId::parse(id).map_err(|_| SoftwareError::NotFound(id.chars().take(70).collect()))?;
    in_read(&*app.store, |tx| tx.software(&id))?.ok_or(SoftwareError::NotFound(id.0))
}

/// Creates a record. Without an id (`None`) it gets one made from its name, with a random suffix
/// when that one is taken; a given id that is taken is a conflict.
pub fn create(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    id: Option<SoftwareId>,
    fields: SoftwareFields,
) -> Result<Software, SoftwareError> {
    may_write(p)?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let id = match &id {
            Some(id) if tx.software(id)?.is_some() => return Err(SoftwareError::Exists(id.0.clone())),
            Some(id) => id.clone(),
            None => {
                let base = SoftwareId::from_name(&fields.name);
                let mut id = base.clone();
                // 32 random bits: a second collision is a one-in-billions event, but checked.
                while tx.software(&id)?.is_some() {
                    id = base.with_random_suffix();
                }
                id
            }
        };
        let record = Software { id, fields: fields.clone(), created_at: now, updated_at: now };
        tx.insert_software(&record)?;
        audit_done(tx, p, ctx, now, "ocr.software.create", &format!("software:{}", record.id.0))?;
        Ok(record)
    })
}

/// PUT: replaces the fields of an existing record.
pub fn replace(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    id: &str,
    fields: SoftwareFields,
) -> Result<Software, SoftwareError> {
    may_write(p)?;
    let id = SoftwareId::parse(id).map_err(|_| SoftwareError::NotFound(id.chars().take(70).collect()))?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let mut record = tx.software(&id)?.ok_or_else(|| SoftwareError::NotFound(id.0.clone()))?;
        record.fields = fields.clone();
        record.updated_at = now;
        tx.update_software(&record)?;
        audit_done(tx, p, ctx, now, "ocr.software.update", &format!("software:{}", id.0))?;
        Ok(record)
    })
}

pub fn delete(app: &Service, p: &Principal, ctx: &RequestCtx, id: &str) -> Result<(), SoftwareError> {
    may_write(p)?;
    let id = SoftwareId::parse(id).map_err(|_| SoftwareError::NotFound(id.chars().take(70).collect()))?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.delete_software(&id)? {
            return Err(SoftwareError::NotFound(id.0.clone()));
        }
        audit_done(tx, p, ctx, now, "ocr.software.delete", &format!("software:{}", id.0))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_checked_at_the_edge() {
        assert!(SoftwareId::parse("scaninvoices-1.2").is_ok());
        for bad in ["", "a b", "../x", &"x".repeat(65)] {
            assert!(SoftwareId::parse(bad).is_err(), "{bad}");
        }
        assert!(SoftwareFields::new("ScanInvoices", "2.1", "1.0", "https://example.org/dl", "line\nbreak").is_ok());
        for (name, id) in [
            ("ScanInvoices", "scaninvoices"),
            ("Scan Invoices (Dolibarr) v2.0!", "scan-invoices-dolibarr-v2-0"),
            ("  Été -- Reçus  ", "t-re-us"),
            ("***", "software"),
        ] {
            let made = SoftwareId::from_name(name);
            assert_eq!(made.as_str(), id, "{name:?}");
            assert!(SoftwareId::parse(made.as_str()).is_ok());
        }
        let long = SoftwareId::from_name(&"x".repeat(300));
        assert_eq!(long.as_str().len(), 50);
        assert!(SoftwareId::parse(long.with_random_suffix().as_str()).is_ok());
        for (name, url, notes) in
            [("", "", ""), ("x", "ftp://a", ""), ("x", "https://", ""), ("x\u{7}", "", ""), ("x", "", "\u{0}")]
        {
            assert!(SoftwareFields::new(name, "1", "1", url, notes).is_err(), "{name:?} {url:?} {notes:?}");
        }
    }
}
