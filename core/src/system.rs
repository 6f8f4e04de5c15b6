//! The installation as a whole: liveness and the version object.

use crate::Courrier;
use crate::kernel::VersionInfo;

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

pub fn version(app: &Courrier) -> VersionInfo {
    VersionInfo { build: app.build.clone(), backend: app.store.backend() }
}
