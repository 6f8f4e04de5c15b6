//! Access: users, roles, API keys, administrator sessions, and the one `authorize()` every
//! operation of every route goes through.
//!
//! Authentication ([`principal::authenticate`]) turns a credential into a [`Principal`] with the
//! user's roles read fresh from the store on every request, so a revoked role or a disabled user
//! takes effect on the very next request. Authorisation ([`Principal::authorize`]) answers 404 for
//! what lies outside the principal's reach (never telling it exists) and 403 for what lies inside
//! without the permission.

pub mod cache;
pub mod keys;
pub mod limits;
pub mod model;
pub mod password;
pub mod ports;
pub mod principal;
pub mod roles;
pub mod sessions;
#[cfg(any(test, feature = "testing"))]
pub mod store_suite;
pub mod users;
pub mod views;

pub use model::{Perm, PermSet, Role, RoleKind, Target};
pub use principal::{Credential, Principal, Via};

use crate::kernel::{Clock, Code, CoreError, MailTransport, NameError, SendError, Settings};
use crate::storage::StoreError;
use std::sync::Arc;

/// The access context, wired once by the composition root: the ports its rules use and the state
/// that lives as long as the process (quotas, the key cache). The mailing and OCR services hold
/// one to authenticate, throttle and audit through.
pub struct Service {
    pub store: Arc<ports::Store>,
    pub clock: Arc<dyn Clock>,
    pub mail: Arc<dyn MailTransport>,
    pub settings: Settings,
    /// Quotas and limits: in this process's memory, or shared by every server of a PostgreSQL
    /// installation ([`Service::share_limits`]).
    pub limiter: Arc<dyn limits::Limits>,
    /// Windows counted through a port (the login-link limits), shared likewise.
    pub counters: Arc<dyn limits::Counters>,
    pub key_cache: cache::KeyCache,
    /// What other contexts keep of a user, deleted with the account (`users::delete`).
    user_data: std::sync::RwLock<Vec<Arc<dyn ports::UserData>>>,
}

impl Service {
    pub fn new(
        store: Arc<ports::Store>,
        clock: Arc<dyn Clock>,
        mail: Arc<dyn MailTransport>,
        settings: Settings,
    ) -> Self {
        Self {
            store,
            clock,
            mail,
            settings,
            limiter: Arc::new(limits::Limiter::default()),
            counters: Arc::new(limits::MemoryCounters::default()),
            key_cache: Default::default(),
            user_data: Default::default(),
        }
    }

    /// Counts quotas and limits where every server of the installation counts them (the
    /// composition root, when the store is shared).
    pub fn share_limits(mut self, limiter: Arc<dyn limits::Limits>, counters: Arc<dyn limits::Counters>) -> Self {
        self.limiter = limiter;
        self.counters = counters;
        self
    }

    /// Registers a holder of user data (the composition root, once per context that keeps some).
    pub fn hold_user_data(&self, holder: Arc<dyn ports::UserData>) {
        self.user_data.write().unwrap_or_else(std::sync::PoisonError::into_inner).push(holder);
    }

    fn user_data_holders(&self) -> Vec<Arc<dyn ports::UserData>> {
        self.user_data.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// One message whatever the reason (absent, malformed, unknown, revoked, expired credential,
    /// inactive user): the reason is logged where it is found, never returned.
    #[error("a valid credential is required")]
    Unauthenticated,
    #[error("invalid email or password")]
    BadLogin,
    #[error("the X-CSRF-Token header is missing or does not match the session")]
    CsrfFailed,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("too many requests: retry in {retry_after} s")]
    RateLimited { retry_after: u64 },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the mail could not be sent: {0}")]
    Mail(#[from] SendError),
}

impl CoreError for AccessError {
    fn code(&self) -> Code {
        match self {
            AccessError::Unauthenticated | AccessError::BadLogin => Code::Unauthenticated,
            AccessError::CsrfFailed => Code::CsrfFailed,
            AccessError::Forbidden(_) => Code::Forbidden,
            AccessError::NotFound(_) => Code::NotFound,
            AccessError::RateLimited { .. } => Code::RateLimited,
            AccessError::Invalid(_) => Code::ValidationFailed,
            AccessError::Conflict(_) => Code::Conflict,
            AccessError::Name(e) => e.code(),
            AccessError::Store(e) => e.code(),
            AccessError::Mail(e) => e.code(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            AccessError::RateLimited { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}
