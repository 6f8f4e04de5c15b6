//! The installation as a whole: liveness and the version object.

use crate::kernel::{BuildInfo, VersionInfo};
use crate::storage::Database;
use serde_json::{Value, json};

/// Liveness: the process answers. Deliberately touches no dependency, so that a load balancer
/// does not take every server out at once when the database is slow; component readiness is
/// `GET /api/ruok/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Ok,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ok => "ok",
        }
    }
}

pub fn health() -> Health {
    Health::Ok
}

pub fn version(build: &BuildInfo, db: &dyn Database) -> VersionInfo {
    VersionInfo { build: build.clone(), backend: db.backend() }
}

/// The audit log as the caller may read it: everything for a site admin; for anyone else, only
/// the entries of its own actions. Newest first.
pub fn audit(
    app: &crate::access::Service,
    p: &crate::access::Principal,
    mut filter: crate::kernel::AuditFilter,
    page: crate::kernel::Page,
) -> Result<crate::kernel::Paged<crate::kernel::AuditEntry>, crate::access::AccessError> {
    p.authorize_self(crate::access::Perm::Read)?;
    if !p.is_site_admin() {
        let own = p.user.as_ref().map(|u| u.id.get());
        if filter.actor_user_id.is_some_and(|asked| Some(asked) != own) {
            return Ok(crate::kernel::Paged { items: Vec::new(), total: 0, page });
        }
        filter.actor_user_id = own;
    }
    Ok(crate::storage::in_read(&*app.store, |tx| tx.list_audit(&filter, page))?)
}

/// The contract's Version object. `go_version` is the contract's key; it and `rust_version` hold
/// the Rust compiler's version (`decisions.md`). `built_at` only when injected at build.
pub fn version_view(v: &VersionInfo) -> Value {
    let mut doc = json!({
        "version": v.build.version,
        "commit": v.build.commit,
        "dirty": v.build.dirty,
        "go_version": v.build.rustc,
        "rust_version": v.build.rustc,
        "platform": v.build.platform,
        "backend": v.backend,
    });
    if let Some(at) = v.build.commit_at {
        doc["commit_at"] = at.into();
    }
    if let Some(at) = v.build.built_at {
        doc["built_at"] = at.into();
    }
    doc
}
