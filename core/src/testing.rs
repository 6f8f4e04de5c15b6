//! Fakes of the ports for unit tests of rules (feature `testing`). Integration tests use the real
//! adapters instead.

use crate::kernel::{Clock, Timestamp};
use std::sync::atomic::{AtomicI64, Ordering};

/// A clock that stands still until told to move.
pub struct FixedClock(AtomicI64);

impl FixedClock {
    pub fn at(t: Timestamp) -> Self {
        Self(AtomicI64::new(t.unix_micros()))
    }

    pub fn advance_secs(&self, secs: i64) {
        self.0.fetch_add(secs * 1_000_000, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(self.0.load(Ordering::SeqCst))
    }
}

/// A mail transport that records what it is given, or fails as told.
#[derive(Default)]
pub struct RecordingTransport {
    pub sent: std::sync::Mutex<Vec<crate::kernel::OutgoingMessage>>,
    pub fail_with: std::sync::Mutex<Option<crate::kernel::SendError>>,
}

impl crate::kernel::MailTransport for RecordingTransport {
    fn send(&self, message: &crate::kernel::OutgoingMessage) -> Result<(), crate::kernel::SendError> {
        if let Some(e) = self.fail_with.lock().expect("poisoned").clone() {
            return Err(e);
        }
        self.sent.lock().expect("poisoned").push(message.clone());
        Ok(())
    }
}

/// The application wired for unit tests of rules: the given store, clock, mail transport and
/// egress; OCR services that are never started (one Tesseract thread, no sandbox), a fresh data key.
pub fn wired(
    dir: &std::path::Path,
    store: std::sync::Arc<dyn crate::storage::Store>,
    clock: std::sync::Arc<dyn Clock>,
    mail: std::sync::Arc<dyn crate::kernel::MailTransport>,
    egress: crate::egress::Egress,
) -> crate::Courrier {
    crate::Courrier {
        store,
        clock,
        mail,
        settings: crate::Settings {
            public_url: "https://lists.example.org".into(),
            mail_from: crate::kernel::EmailAddress::parse("lists@example.org").expect("a valid address"),
        },
        build: crate::kernel::BuildInfo::unknown(),
        limiter: Default::default(),
        key_cache: Default::default(),
        ocr: crate::adapters::ocr_services(dir, "/nonexistent/courrier".into(), 1),
        egress,
        data_key: crate::kernel::sealed::DataKey::generate().1,
        dkim: std::sync::Arc::new(crate::adapters::openssl_dkim::OpensslKeyMaker::default()),
    }
}
