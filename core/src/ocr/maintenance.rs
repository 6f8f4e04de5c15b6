//! Maintenance mode: while on, the OCR routes answer 503 (the contract's upgrade page for GETs).
//! Kept in the database, so the server sees at once what `courrier maintenance on` set.

use super::Service;
pub use super::model::Maintenance;
use crate::access::Principal;
use crate::access::principal::{RequestCtx, audit_done};
use crate::storage::{StoreError, in_read, in_write};

pub fn status(app: &Service) -> Result<Maintenance, StoreError> {
    in_read(&*app.store, |tx| tx.ocr_maintenance())
}

/// Turns maintenance on or off (the operator at the command line). Idempotent.
pub fn set(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    on: bool,
) -> Result<Maintenance, crate::access::AccessError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let next = match (tx.ocr_maintenance()?, on) {
            (current @ Maintenance::On { .. }, true) | (current @ Maintenance::Off, false) => return Ok(current),
            (_, true) => Maintenance::On { since: now },
            (_, false) => Maintenance::Off,
        };
        tx.set_ocr_maintenance(next)?;
        audit_done(tx, p, ctx, now, if on { "ocr.maintenance.on" } else { "ocr.maintenance.off" }, "ocr")?;
        Ok(next)
    })
}

/// The same switch from the administration pages: the installation's administrators' only.
pub fn switch(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    on: bool,
) -> Result<Maintenance, crate::access::AccessError> {
    p.authorize(crate::access::Perm::Manage, &crate::access::model::Target::Installation, "maintenance")?;
    set(app, p, ctx, on)
}
