//! The ports of a list's mail accounts at a provider (`decisions.md`, "Mail-account
//! credentials"): an IMAP mailbox the list's mail is fetched from, an SMTP submission account its
//! copies go out through. The adapter (`adapters/mail_accounts.rs`) speaks TLS (or STARTTLS,
//! never falling back to plain text) with certificate verification, and connects only to the
//! address the endpoint's resolver gives, which is the egress guard's checked address.

use crate::egress::Host;
use crate::kernel::MailTransport;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use super::model::Security;

/// Gives the address to connect to, checked by the egress guard, each time a connection opens
/// (a long-lived submission transport re-resolves, so a rebinding cannot take it elsewhere).
pub type Resolver = Arc<dyn Fn() -> Result<SocketAddr, String> + Send + Sync>;

/// Where an account is: the host as the user wrote it (TLS server name), the port, the
/// protection, and the checked address.
#[derive(Clone)]
pub struct Endpoint {
    pub host: Host,
    pub port: u16,
    pub security: Security,
    pub connect_to: Resolver,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} ({})", self.host, self.port, self.security.as_str())
    }
}

/// A user name and its password. `Debug` never shows the password.
#[derive(Clone)]
pub struct Login {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({}, <password>)", self.username)
    }
}

/// Why a session with an account did not work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// The provider answered, and said no (authentication, a folder that does not exist, no
    /// STARTTLS): its own words.
    #[error("{0}")]
    Refused(String),
    /// No conversation: the connection, TLS (an untrusted certificate), a time-out, garbled replies.
    #[error("{0}")]
    Failed(String),
}

/// A message in a mailbox: its UID and size, as one command lists them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    pub uid: u32,
    pub size: u64,
}

/// A mailbox opened on its folder, for the ingest poller.
pub trait Mailbox: Send {
    /// Every message in the folder with its size, oldest first.
    fn list(&mut self) -> Result<Vec<Listed>, AccountError>;
    /// The raw bytes of these messages, in one exchange; a message gone meanwhile (another
    /// client expunged it) is left out.
    fn fetch(&mut self, uids: &[u32]) -> Result<Vec<(u32, Vec<u8>)>, AccountError>;
    /// Deletes these messages for good (`\Deleted`, then expunged), in one exchange.
    fn delete(&mut self, uids: &[u32]) -> Result<(), AccountError>;
    /// Whether the server offers IDLE.
    fn can_idle(&self) -> bool;
    /// IDLE until the folder changes or `max` passes (only when [`Self::can_idle`]).
    fn idle(&mut self, max: Duration) -> Result<(), AccountError>;
    /// Closes the connection from another thread (a stopping server ends an IDLE at once).
    fn closer(&self) -> Closer;
}

/// Closes a session's connection; whatever it was waiting for then fails at once.
pub type Closer = Box<dyn Fn() + Send + Sync>;

/// The sessions with mail accounts.
pub trait MailAccounts: Send + Sync {
    /// Connects, protects, authenticates and SELECTs `folder`; fetches nothing, logs out.
    fn check_imap(&self, at: &Endpoint, login: &Login, folder: &str) -> Result<(), AccountError>;
    /// Connects, protects and authenticates (AUTH PLAIN or LOGIN); sends nothing, quits.
    fn check_smtp(&self, at: &Endpoint, login: &Login) -> Result<(), AccountError>;
    /// A mail transport through the account, keeping its sessions open between messages.
    fn submission(&self, at: Endpoint, login: Login) -> Arc<dyn MailTransport>;
    /// Opens the mailbox on `folder` for the poller.
    fn open_mailbox(&self, at: &Endpoint, login: &Login, folder: &str) -> Result<Box<dyn Mailbox>, AccountError>;
}

/// Accounts that reach nothing: for wirings that make no outgoing call (unit tests of other rules).
pub struct NoAccounts;

impl MailAccounts for NoAccounts {
    fn check_imap(&self, _: &Endpoint, _: &Login, _: &str) -> Result<(), AccountError> {
        Err(AccountError::Failed("no mail accounts in this wiring".into()))
    }
    fn check_smtp(&self, _: &Endpoint, _: &Login) -> Result<(), AccountError> {
        Err(AccountError::Failed("no mail accounts in this wiring".into()))
    }
    fn submission(&self, _: Endpoint, _: Login) -> Arc<dyn MailTransport> {
        struct Nowhere;
        impl MailTransport for Nowhere {
            fn send(&self, _: &crate::kernel::OutgoingMessage) -> Result<(), crate::kernel::SendError> {
                Err(crate::kernel::SendError::Temporary("no mail accounts in this wiring".into()))
            }
        }
        Arc::new(Nowhere)
    }
    fn open_mailbox(&self, _: &Endpoint, _: &Login, _: &str) -> Result<Box<dyn Mailbox>, AccountError> {
        Err(AccountError::Failed("no mail accounts in this wiring".into()))
    }
}
