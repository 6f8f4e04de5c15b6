//! The audit trail (`audit_log`), written once for both databases. [`crate::audit_repo!`]
//! implements the port with these.

use crate::sql::{Arg, SqlTx, corrupt, paged};
use courrier_core::kernel::{Actor, AuditEntry, AuditFilter, AuditId, NewAuditEntry, Outcome, Page, Paged, Timestamp};
use courrier_core::storage::StoreError;

pub fn append_audit(tx: &mut impl SqlTx, e: &NewAuditEntry) -> Result<AuditId, StoreError> {
    let id = tx.first(
        "INSERT INTO audit_log (at, request_id, actor_user_id, actor_key_id, actor_member_id, action, target, outcome)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
        &[
            e.at.unix_micros().into(),
            e.request_id.as_str().into(),
            e.actor.user_id.into(),
            e.actor.key_id.into(),
            e.actor.member_id.into(),
            e.action.as_str().into(),
            e.target.as_str().into(),
            e.outcome.as_str().into(),
        ],
        |r| r.i64(0),
    )?;
    id.map(AuditId::from_stored).ok_or_else(|| StoreError::Backend("an audit entry inserted without its id".into()))
}

pub fn list_audit(tx: &mut impl SqlTx, f: &AuditFilter, page: Page) -> Result<Paged<AuditEntry>, StoreError> {
    let wanted: [(&str, Option<Arg<'_>>); 4] = [
        ("action =", f.action.as_deref().map(Arg::from)),
        ("actor_user_id =", f.actor_user_id.map(Arg::from)),
        ("at >=", f.since.map(|t| t.unix_micros().into())),
        ("at <=", f.until.map(|t| t.unix_micros().into())),
    ];
    let (mut clauses, mut args) = (Vec::new(), Vec::new());
    for (clause, arg) in wanted {
        if let Some(arg) = arg {
            args.push(arg);
            clauses.push(format!("{clause} ?{}", args.len()));
        }
    }
    let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
    paged(
        tx,
        &format!("SELECT COUNT(*) FROM audit_log {filter}"),
        &format!(
            "SELECT id, at, request_id, actor_user_id, actor_key_id, action, target, outcome, actor_member_id
             FROM audit_log {filter} ORDER BY at DESC, id DESC"
        ),
        &args,
        page,
        |r| {
            let outcome = r.text(7)?;
            Ok(AuditEntry {
                id: AuditId::from_stored(r.i64(0)?),
                at: Timestamp::from_unix_micros(r.i64(1)?),
                request_id: r.text(2)?,
                actor: Actor { user_id: r.opt_i64(3)?, key_id: r.opt_i64(4)?, member_id: r.opt_i64(8)? },
                action: r.text(5)?,
                target: r.text(6)?,
                outcome: Outcome::parse(&outcome).ok_or_else(|| corrupt("audit outcome", &outcome))?,
            })
        },
    )
}

/// Implements `storage::AuditRepo` for an adapter's transaction (an [`SqlTx`]) with the shared
/// statements of this module.
#[macro_export]
macro_rules! audit_repo {
    ($tx:ty) => {
        impl ::courrier_core::storage::AuditRepo for $tx {
            fn append_audit(
                &mut self,
                entry: &::courrier_core::kernel::NewAuditEntry,
            ) -> Result<::courrier_core::kernel::AuditId, ::courrier_core::storage::StoreError> {
                $crate::audit::append_audit(self, entry)
            }
            fn list_audit(
                &mut self,
                filter: &::courrier_core::kernel::AuditFilter,
                page: ::courrier_core::kernel::Page,
            ) -> Result<
                ::courrier_core::kernel::Paged<::courrier_core::kernel::AuditEntry>,
                ::courrier_core::storage::StoreError,
            > {
                $crate::audit::list_audit(self, filter, page)
            }
        }
    };
}
