//! Courrier's core: every domain rule, synchronous, behind ports.
//!
//! Frontends (`courrier-http`, the `courrier` binary) parse input into the validated types of
//! [`kernel`], call a function here with the adapters wired into [`Courrier`], and render what it
//! returns. Nothing here is async or knows HTTP.

pub mod access;
pub mod adapters;
pub mod egress;
pub mod kernel;
pub mod mailing;
pub mod ocr;
pub mod storage;
pub mod system;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::sync::Arc;

/// The wired application: the adapters every rule reaches the world through, and the state that
/// lives as long as the process (quotas).
pub struct Courrier {
    pub store: Arc<dyn storage::Store>,
    pub clock: Arc<dyn kernel::Clock>,
    pub mail: Arc<dyn kernel::MailTransport>,
    pub settings: Settings,
    pub build: kernel::BuildInfo,
    pub limiter: access::limits::Limiter,
    pub key_cache: access::cache::KeyCache,
    pub ocr: ocr::OcrServices,
    /// Outgoing calls to hosts users choose (webhooks), and the resolver of the DNS check.
    pub egress: egress::Egress,
    /// Seals secrets kept for later use (webhook secrets, DKIM private keys).
    pub data_key: kernel::sealed::DataKey,
    /// Makes the domains' DKIM key pairs.
    pub dkim: Arc<dyn mailing::dkim::DkimKeyMaker>,
}

/// Installation settings the rules need.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Base of the links put in mails, without a trailing slash.
    pub public_url: String,
    /// Sender of the installation's own notices (invitations, confirmations).
    pub mail_from: kernel::EmailAddress,
}
