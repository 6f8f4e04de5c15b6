//! What every context shares: ids, validated names, pages, time, errors, audit and events.

mod audit;
mod build_info;
mod clock;
mod dns;
mod error;
mod events;
mod ids;
pub mod keyring;
pub(crate) mod mail;
mod names;
mod page;
pub mod sealed;
pub mod secrets;

pub use audit::{Actor, AuditEntry, AuditFilter, NewAuditEntry, Outcome};
pub use build_info::{BuildInfo, VersionInfo};
pub use clock::{Clock, Timestamp, json_time};
#[cfg(any(test, feature = "testing"))]
pub use dns::TableDns;
pub use dns::{Dns, DnsError};
pub use error::{Code, CoreError, ErrorKind};
pub use events::{Event, EventName, NewEvent, new_public_id};
pub use ids::{AuditId, EventId, InvalidId, RequestId, parse_positive_id};
pub use mail::{MailTransport, Notice, OutgoingMessage, SendError};
pub use names::{DomainName, EmailAddress, ListName, NameError};
pub use page::{Page, PageError, Paged};

/// Installation settings the rules of several contexts need.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Base of the links put in mails, without a trailing slash.
    pub public_url: String,
    /// Sender of the installation's own notices (invitations, confirmations).
    pub mail_from: EmailAddress,
}
