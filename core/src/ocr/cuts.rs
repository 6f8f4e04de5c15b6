//! `POST /api/ocrcuts` and `POST /api/ocrcutszones`: zones of a document's page read on their own
//! (`rect`, `multicut`), zones confirmed by a user remembered for the document's supplier
//! (`confirmvalues`), and the zones learned for a supplier, most confirmed first.

use super::Service;
use super::documents::{self, Document, DocumentError};
use super::engine::{EngineError, Language};
pub use super::model::LearnedZone;
use super::suppliers::{self, Facts, Source, Supplier, VatNumber};
use super::usage::{self, MonthUsage, UsageError};
use super::zones::{self, MAX_ZONES, Ratio, Zone, ZoneError};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Principal};
use crate::kernel::{Code, CoreError};
use crate::storage::{StoreError, in_read, in_write};

/// What to do with the zones.
#[derive(Debug, Clone)]
pub enum Cut {
    Read(Reading),
    /// `confirmvalues`: named zones, each at its own zoom, and the values the user confirmed.
    Confirm {
        zones: Vec<(String, Zone, Ratio)>,
        values: Vec<(String, String)>,
    },
}

/// Zones to read.
#[derive(Debug, Clone)]
pub enum Reading {
    /// `rect` (or no action): one zone.
    One(Zone),
    /// `multicut` with `rect` holding zones joined by `;`.
    Many(Vec<Zone>),
    /// `multicut` with `jsonRect`: named zones (names without their `Rect` suffix).
    Named(Vec<(String, Zone)>),
}

#[derive(Debug, Clone)]
pub struct CutRequest {
    pub ocr_id: String,
    pub ratio: Ratio,
    /// 1-based.
    pub page: u32,
    /// `None` when the client did not say (ScanInvoices omits it for `rect` and `confirmvalues`):
    /// the language the document was uploaded with.
    pub lang: Option<Language>,
    pub cut: Cut,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CutResult {
    Text(String),
    Texts(Vec<String>),
    Named(Vec<(String, String)>),
    Confirmed { supplier: Box<Supplier>, zones: usize },
}

#[derive(Debug, thiserror::Error)]
pub enum CutError {
    #[error(transparent)]
    Zone(#[from] ZoneError),
    #[error(transparent)]
    Document(#[from] DocumentError),
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(
        "confirmvalues needs the supplier: the values name none (fournisseur or fournisseurTva, or supplier_name or supplier_numtva) and none was extracted from the document"
    )]
    NoSupplier,
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Access(#[from] AccessError),
}

impl CoreError for CutError {
    fn code(&self) -> Code {
        match self {
            CutError::Zone(_) | CutError::NoSupplier => Code::ValidationFailed,
            CutError::Document(e) => e.code(),
            CutError::Usage(e) => e.code(),
            CutError::Engine(EngineError::Unavailable(_)) => Code::OcrUnavailable,
            CutError::Engine(EngineError::Failed(_)) => Code::Internal,
            CutError::Store(e) => e.code(),
            CutError::Access(e) => e.code(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            CutError::Usage(e) => e.retry_after(),
            CutError::Document(e) => e.retry_after(),
            _ => None,
        }
    }
}

/// Names under which clients send the supplier's name and VAT number with their confirmations.
const NAME_KEYS: &[&str] = &["fournisseur", "supplier_name", "supplier"];
const VAT_KEYS: &[&str] = &["fournisseurtva", "supplier_numtva", "numtva", "vat", "tva"];

fn value_of<'a>(values: &'a [(String, String)], keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| {
        values.iter().find(|(n, v)| n.eq_ignore_ascii_case(k) && !v.trim().is_empty()).map(|(_, v)| v.as_str())
    })
}

pub fn cut(app: &Service, p: &Principal, ctx: &RequestCtx, req: CutRequest) -> Result<CutResult, CutError> {
    let count = match &req.cut {
        Cut::Read(Reading::One(_)) => 1,
        Cut::Read(Reading::Many(z)) => z.len(),
        Cut::Read(Reading::Named(z)) => z.len(),
        Cut::Confirm { zones, .. } => zones.len(),
    };
    if count == 0 {
        return Err(ZoneError::Shape("no zone to cut: rect or jsonRect is empty".into()).into());
    }
    if count > MAX_ZONES {
        return Err(ZoneError::TooMany(count).into());
    }
    let document = documents::find(app, p, &req.ocr_id)?;
    let reading = match req.cut {
        Cut::Confirm { zones, values } => return confirm(app, p, ctx, &document, req.page, &zones, &values),
        Cut::Read(reading) => reading,
    };
    usage::check_quota(app, document.owner)?;
    let lang = req.lang.unwrap_or(document.lang);
    let page = documents::page_image(app, &document, req.page)?;
    let read = |zone: &Zone| -> Result<String, CutError> {
        let rect = zone.on_page(req.ratio, page.width(), page.height())?;
        let Some(image) = zones::cut_out(&page, rect) else { return Ok(String::new()) };
        let text = app.engine.recognize_zone(&image, lang, zones::segmentation(&image))?;
        Ok(text.trim().to_owned())
    };
    let result = match &reading {
        Reading::One(zone) => CutResult::Text(read(zone)?),
        Reading::Many(list) => CutResult::Texts(list.iter().map(read).collect::<Result<_, _>>()?),
        Reading::Named(list) => {
            CutResult::Named(list.iter().map(|(n, z)| Ok((n.clone(), read(z)?))).collect::<Result<_, CutError>>()?)
        }
    };
    let now = app.clock.now();
    let delta = MonthUsage { cuts: count as u64, ..MonthUsage::default() };
    in_write(&*app.store, |tx| usage::count(tx, document.owner, now, &delta))?;
    Ok(result)
}

/// Remembers the confirmed zones for the supplier the values name, or when they name none (as
/// ScanInvoices' manual import sends them) the supplier extracted from the document; files the
/// supplier.
fn confirm(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    document: &Document,
    page: u32,
    zones: &[(String, Zone, Ratio)],
    values: &[(String, String)],
) -> Result<CutResult, CutError> {
    let named = Facts {
        vat_number: value_of(values, VAT_KEYS).and_then(VatNumber::parse),
        name: value_of(values, NAME_KEYS).map(str::to_owned),
        ..Facts::default()
    };
    let facts = if named.identifies() { named } else { documents::supplier_facts(&document.meta) };
    if !facts.identifies() {
        return Err(CutError::NoSupplier);
    }
    let learned: Vec<LearnedZone> = zones
        .iter()
        .map(|(name, zone, ratio)| {
            let value = values.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim());
            Ok(LearnedZone {
                name: name.clone(),
                page,
                rect: zone.at_scale(*ratio)?,
                confirmations: 1,
                last_value: value.unwrap_or("").chars().take(500).collect(),
                updated_at: app.clock.now(),
            })
        })
        .collect::<Result<_, ZoneError>>()?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let supplier = suppliers::learn(tx, &facts, Source::Confirmation, now)?.ok_or(CutError::NoSupplier)?;
        for zone in &learned {
            tx.confirm_supplier_zone(supplier.id, zone)?;
        }
        audit_done(tx, p, ctx, now, "ocr.zones.confirm", &format!("supplier:{}", supplier.id.get()))?;
        Ok(CutResult::Confirmed { supplier: Box::new(supplier), zones: learned.len() })
    })
}

/// The supplier named by VAT number or name, with its learned zones, most confirmed first.
/// `None` for a supplier the service does not know.
pub fn learned_zones(
    app: &Service,
    name: Option<&str>,
    vat: Option<&str>,
) -> Result<Option<(Supplier, Vec<LearnedZone>)>, StoreError> {
    let facts = Facts { vat_number: vat.and_then(VatNumber::parse), name: name.map(str::to_owned), ..Facts::default() };
    in_read(&*app.store, |tx| {
        let Some(supplier) = suppliers::matching(tx, &facts)? else { return Ok(None) };
        let zones = tx.supplier_zones(supplier.id)?;
        Ok(Some((supplier, zones)))
    })
}
