//! The mailing-list service: sending domains, lists and their policies, members and their
//! subscriptions, CSV import and export, the dashboard, and the Idempotency-Key registry.
//!
//! Every operation authorises through [`crate::access::Principal::authorize`] on the domain or
//! list it touches (404 out of reach, 403 without the permission, both audited) and commits its
//! change with its audit entry and its lifecycle event in one transaction.

pub mod accept;
pub mod accounts;
pub mod bounces;
pub mod compose;
pub mod credentials;
pub mod dashboard;
pub mod delivery;
pub mod digests;
pub mod dkim;
pub mod dmarc;
pub mod dns_check;
pub mod domains;
pub mod export;
pub mod idempotency;
pub mod import;
pub mod inbound;
pub mod ingest;
pub mod lists;
pub mod me;
pub mod members;
pub mod model;
pub mod moderation;
pub mod ports;
pub mod posts;
pub mod requests;
pub mod sends;
pub mod state;
#[cfg(any(test, feature = "testing"))]
pub mod store_suite;
pub mod subscriptions;
pub mod views;
pub mod webhooks;
pub mod within;

use crate::access::AccessError;
use crate::kernel::{Clock, Code, CoreError, MailTransport, NameError, PageError, SendError, Settings};
use crate::storage::StoreError;
use std::sync::Arc;

/// The mailing-list context, wired once by the composition root: only the ports its rules use.
pub struct Service {
    /// Authentication, quotas and the audit of refusals.
    pub access: Arc<crate::access::Service>,
    pub store: Arc<ports::Store>,
    pub clock: Arc<dyn Clock>,
    pub mail: Arc<dyn MailTransport>,
    pub settings: Settings,
    /// Outgoing calls to hosts users choose (webhooks), and the resolver of the DNS check.
    pub egress: crate::egress::Egress,
    /// Seals secrets kept for later use (webhook secrets, DKIM private keys).
    pub data_key: crate::kernel::sealed::DataKey,
    /// Makes the domains' DKIM key pairs.
    pub dkim: Arc<dyn dkim::DkimKeyMaker>,
    /// Signs the copies with the domains' keys.
    pub dkim_signing: Arc<dyn dkim::DkimSigning>,
    /// Verifies posters' DKIM signatures (whether a post's `From` may stand for its address).
    pub dkim_verifying: Arc<dyn dkim::DkimVerifying>,
    /// Mail-account credentials: the keyring, the sessions with accounts, open submission transports.
    pub credentials: credentials::Credentials,
    /// Reads received messages (bounces) into their parts.
    pub mime: Arc<dyn bounces::MimeReader>,
    /// Mail in's process-wide state: the processing loop's wake-up, the DMARC policy cache.
    pub mail_in: inbound::MailIn,
}

#[derive(Debug, thiserror::Error)]
pub enum MailingError {
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0} is already an active subscriber of this list")]
    AlreadySubscribed(String),
    #[error("this list is closed to subscription")]
    SubscriptionClosed,
    #[error("{0}")]
    ConsentEvidenceRequired(&'static str),
    #[error("the same Idempotency-Key was used with another request")]
    IdempotencyConflict,
    #[error("a request with this Idempotency-Key is still being executed; retry shortly")]
    IdempotencyInProgress,
    #[error("Idempotency-Key is only supported with API keys (the replay registry is kept per key)")]
    IdempotencyUnsupported,
    #[error(
        "the document exceeds {limit_mib} MiB: the {imported} rows read before the cut were imported; split the rest into smaller files and import them"
    )]
    DocumentTooLarge { limit_mib: u64, imported: u64 },
    #[error(transparent)]
    Dkim(#[from] dkim::DkimError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Page(#[from] PageError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the mail could not be sent: {0}")]
    Mail(#[from] SendError),
    #[error(transparent)]
    Egress(#[from] crate::egress::EgressError),
    /// The request could not be read as the operation's input (found by the frontend before the
    /// operation ran); under an Idempotency-Key it is the key's answer like any refusal.
    #[error("{message}")]
    Request { code: Code, message: String },
    #[error(
        "no credential keyring is configured on this installation (COURRIER_KEYRING): credentials cannot be written"
    )]
    KeyringMissing,
    #[error("the stored password cannot be opened with COURRIER_KEYRING: {0}")]
    KeyringCannotOpen(String),
    #[error("the provider refused: {0}")]
    AccountRefused(String),
    #[error("the account could not be reached: {0}")]
    AccountUnreachable(String),
}

impl CoreError for MailingError {
    fn code(&self) -> Code {
        match self {
            MailingError::Access(e) => e.code(),
            MailingError::NotFound(_) => Code::NotFound,
            MailingError::Invalid(_) => Code::ValidationFailed,
            MailingError::Conflict(_) => Code::Conflict,
            MailingError::AlreadySubscribed(_) => Code::AlreadySubscribed,
            MailingError::SubscriptionClosed => Code::SubscriptionClosed,
            MailingError::ConsentEvidenceRequired(_) => Code::ConsentEvidenceRequired,
            MailingError::IdempotencyConflict => Code::IdempotencyConflict,
            MailingError::IdempotencyInProgress => Code::IdempotencyInProgress,
            MailingError::IdempotencyUnsupported => Code::IdempotencyUnsupported,
            MailingError::DocumentTooLarge { .. } => Code::DocumentTooLarge,
            MailingError::Name(e) => e.code(),
            MailingError::Page(e) => e.code(),
            MailingError::Store(e) => e.code(),
            MailingError::Mail(e) => e.code(),
            MailingError::Egress(e) => e.code(),
            MailingError::Dkim(_) => Code::DkimUnavailable,
            MailingError::Request { code, .. } => *code,
            MailingError::KeyringMissing | MailingError::KeyringCannotOpen(_) => Code::CredentialKeyringMissing,
            MailingError::AccountRefused(_) => Code::AccountRefused,
            MailingError::AccountUnreachable(_) => Code::AccountUnreachable,
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            MailingError::Access(e) => e.retry_after(),
            MailingError::IdempotencyInProgress => Some(1),
            _ => None,
        }
    }
}

/// Free text given by a caller (display names, subject tags, footers): bounded, and without
/// control characters other than line breaks and tabs where `multiline`.
pub(crate) fn check_text(field: &str, value: &str, max_chars: usize, multiline: bool) -> Result<(), MailingError> {
    let bad = |c: char| c.is_control() && !(multiline && matches!(c, '\n' | '\r' | '\t'));
    if value.chars().count() > max_chars || value.chars().any(bad) {
        let what = if multiline { "" } else { " or line breaks" };
        return Err(MailingError::Invalid(format!(
            "{field} must be at most {max_chars} characters without control characters{what}"
        )));
    }
    Ok(())
}
