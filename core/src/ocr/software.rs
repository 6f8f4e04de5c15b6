//! `softwareInfos`: records of the client software that uses the service (name, latest and
//! minimum versions, where to download it), so a client can tell its user to upgrade. Everyone
//! reads them; only a site admin with a `manage` key writes them.

use super::Service;
use super::model::InvalidRecord;
pub use super::model::{Software, SoftwareFields, SoftwareId};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Perm, Principal};
use crate::kernel::{Code, CoreError};
use crate::storage::{StoreError, in_read, in_write};

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

impl From<InvalidRecord> for SoftwareError {
    fn from(e: InvalidRecord) -> Self {
        SoftwareError::Invalid(e.0)
    }
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
    in_read(&*app.store, |tx| tx.software(&id))?.ok_or(SoftwareError::NotFound(id.as_str().to_owned()))
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
            Some(id) if tx.software(id)?.is_some() => return Err(SoftwareError::Exists(id.as_str().to_owned())),
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
        audit_done(tx, p, ctx, now, "ocr.software.create", &format!("software:{}", record.id.as_str()))?;
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
        let mut record = tx.software(&id)?.ok_or_else(|| SoftwareError::NotFound(id.as_str().to_owned()))?;
        record.fields = fields.clone();
        record.updated_at = now;
        tx.update_software(&record)?;
        audit_done(tx, p, ctx, now, "ocr.software.update", &format!("software:{}", id.as_str()))?;
        Ok(record)
    })
}

pub fn delete(app: &Service, p: &Principal, ctx: &RequestCtx, id: &str) -> Result<(), SoftwareError> {
    may_write(p)?;
    let id = SoftwareId::parse(id).map_err(|_| SoftwareError::NotFound(id.chars().take(70).collect()))?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.delete_software(&id)? {
            return Err(SoftwareError::NotFound(id.as_str().to_owned()));
        }
        audit_done(tx, p, ctx, now, "ocr.software.delete", &format!("software:{}", id.as_str()))?;
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
