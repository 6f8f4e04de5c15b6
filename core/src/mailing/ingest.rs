//! The ingest poller of a list's IMAP mailbox (`decisions.md`, "Mail-account credentials"): each
//! message goes to the mail-in pipeline as if delivered to the list's address, and is deleted
//! from the mailbox only after the pipeline answered, its result committed. A crash between the
//! two leaves the message in the mailbox: it is handed over again, and the pipeline's
//! `Message-ID` rule posts nothing twice.
//!
//! One poller per `ingest` credential: IDLE where the server offers it, else a look every 60 s;
//! an error (connection, TLS, authentication, the pipeline) is recorded on the credential
//! (`last_error`, `last_error_at`) and the poller waits, 30 s doubling up to an hour, before it
//! tries again. A poller ends when its credential changes or goes (a new one takes over).

use super::accounts::{AccountError, Fetched, Mailbox};
use super::credentials::{self, CredentialKind, MailCredential};
use super::model::MailingList;
use super::{MailingError, Service};
use crate::storage::{in_read, in_write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The mail-in pipeline, as the poller sees it: "hand this raw message to the list at this
/// address". Returns once the message's result (a post, a held message, a bounce, a refusal) is
/// committed; an error leaves the message in the mailbox for a later pass.
pub trait MailIntake: Send + Sync {
    fn deliver(&self, list_address: &str, raw: &[u8]) -> Result<(), String>;
}

#[derive(Debug, Clone, Copy)]
pub struct IngestConfig {
    /// Without IDLE: the wait between two looks at the mailbox.
    pub poll_every: Duration,
    /// With IDLE: the longest wait in one IDLE (then the poller looks whether it should stop or
    /// its credential changed, and IDLEs again).
    pub idle_for: Duration,
    /// The first wait after an error, doubling per error in a row.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Messages bigger than this are left in the mailbox (and the error recorded).
    pub max_message_bytes: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            poll_every: Duration::from_secs(60),
            idle_for: Duration::from_secs(25),
            backoff_base: Duration::from_secs(30),
            backoff_max: Duration::from_secs(3600),
            max_message_bytes: 25 * 1024 * 1024,
        }
    }
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{0}")]
    Account(#[from] AccountError),
    #[error("the mail-in pipeline failed: {0}")]
    Intake(String),
    #[error(transparent)]
    Mailing(#[from] MailingError),
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    pub delivered: u64,
    pub too_big: u64,
}

/// One pass over the mailbox: every message handed to the pipeline, then deleted.
pub fn drain(
    mailbox: &mut dyn Mailbox,
    intake: &dyn MailIntake,
    list: &MailingList,
    max_bytes: usize,
) -> Result<Pass, IngestError> {
    let mut pass = Pass::default();
    let address = list.address();
    for uid in mailbox.uids()? {
        match mailbox.fetch(uid, max_bytes)? {
            Fetched::Gone => {}
            Fetched::TooBig(size) => {
                tracing::warn!(list = %address, uid, size, "a message over the size taken stays in the mailbox");
                pass.too_big += 1;
            }
            Fetched::Message(raw) => {
                intake.deliver(&address, &raw).map_err(IngestError::Intake)?;
                // Only now: the pipeline's result is committed.
                mailbox.delete(uid)?;
                pass.delivered += 1;
            }
        }
    }
    Ok(pass)
}

/// The ingest credentials to poll.
pub fn credentials(app: &Service) -> Result<Vec<MailCredential>, MailingError> {
    Ok(in_read(&*app.store, |tx| tx.credentials_of_kind(CredentialKind::Ingest))?)
}

fn still_current(app: &Service, cred: &MailCredential) -> bool {
    in_read(&*app.store, |tx| tx.credential(cred.list_id, CredentialKind::Ingest))
        .map(|now| now.is_some_and(|c| c.updated_at == cred.updated_at))
        .unwrap_or(true)
}

fn record(app: &Service, cred: &MailCredential, error: Option<&str>) {
    let now = app.clock.now();
    let cut = error.map(|e| e.chars().take(credentials::MAX_ERROR).collect::<String>());
    if let Err(e) = in_write(&*app.store, |tx| {
        tx.record_credential_outcome(cred.list_id, CredentialKind::Ingest, cut.as_deref(), now)
    }) {
        tracing::warn!(error = %e, "cannot record an ingest outcome");
    }
}

/// Sleeps `d` in short slices; `false` when asked to stop meanwhile.
fn rest(d: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(200)));
    }
    !stop.load(Ordering::Relaxed)
}

/// The poller of one credential: runs until `stop`, or until its credential changed or went.
pub fn poll(app: &Service, intake: &dyn MailIntake, cred: &MailCredential, cfg: &IngestConfig, stop: &AtomicBool) {
    let mut failures: u32 = 0;
    let mut failing = false;
    while !stop.load(Ordering::Relaxed) && still_current(app, cred) {
        let result = session(app, intake, cred, cfg, stop, &mut failing);
        match result {
            Ok(()) => return,
            Err(e) => {
                let message = e.to_string();
                tracing::warn!(list = cred.list_id.get(), error = %message, "ingest failed; retrying later");
                record(app, cred, Some(&message));
                failing = true;
                failures = failures.saturating_add(1);
                let wait =
                    cfg.backoff_base.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(cfg.backoff_max);
                if !rest(wait, stop) {
                    return;
                }
            }
        }
    }
}

/// One session: open, then drain and wait (IDLE or the poll interval) until asked to stop or the
/// credential changed (`Ok`), or an error (`Err`).
fn session(
    app: &Service,
    intake: &dyn MailIntake,
    cred: &MailCredential,
    cfg: &IngestConfig,
    stop: &AtomicBool,
    failing: &mut bool,
) -> Result<(), IngestError> {
    let list = in_read(&*app.store, |tx| tx.list_by_id(cred.list_id))
        .map_err(MailingError::from)?
        .ok_or(MailingError::NotFound("list"))?;
    let keyring = app.credentials.keyring.as_ref().ok_or(MailingError::KeyringMissing)?;
    let login =
        super::accounts::Login { username: cred.username.clone(), password: credentials::password_of(keyring, cred)? };
    let at = credentials::endpoint(&app.egress, cred)?;
    let folder = cred.folder.as_deref().unwrap_or(credentials::DEFAULT_FOLDER);
    let mut mailbox = app.credentials.accounts.open_mailbox(&at, &login, folder)?;
    if *failing {
        record(app, cred, None);
        *failing = false;
    }
    loop {
        let pass = drain(&mut *mailbox, intake, &list, cfg.max_message_bytes)?;
        if pass.delivered > 0 {
            tracing::info!(list = %list.address(), delivered = pass.delivered, "mail ingested");
        }
        if stop.load(Ordering::Relaxed) || !still_current(app, cred) {
            return Ok(());
        }
        if mailbox.can_idle() {
            mailbox.idle(cfg.idle_for)?;
        } else if !rest(cfg.poll_every, stop) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{DomainName, ListName, Timestamp};
    use crate::mailing::model::{ListId, ListKind, ListPolicies, ListStatus, SubscriptionPolicy};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// A mailbox in memory that logs what is done to it, in order.
    struct Memory {
        messages: BTreeMap<u32, Vec<u8>>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Mailbox for Memory {
        fn uids(&mut self) -> Result<Vec<u32>, AccountError> {
            Ok(self.messages.keys().copied().collect())
        }
        fn fetch(&mut self, uid: u32, max: usize) -> Result<Fetched, AccountError> {
            Ok(match self.messages.get(&uid) {
                None => Fetched::Gone,
                Some(m) if m.len() > max => Fetched::TooBig(m.len() as u64),
                Some(m) => Fetched::Message(m.clone()),
            })
        }
        fn delete(&mut self, uid: u32) -> Result<(), AccountError> {
            self.log.lock().unwrap().push(format!("delete {uid}"));
            self.messages.remove(&uid);
            Ok(())
        }
        fn can_idle(&self) -> bool {
            false
        }
        fn idle(&mut self, _: Duration) -> Result<(), AccountError> {
            Ok(())
        }
    }

    /// A pipeline that commits every message but the ones containing "fail".
    struct Pipeline(Arc<Mutex<Vec<String>>>);

    impl MailIntake for Pipeline {
        fn deliver(&self, list: &str, raw: &[u8]) -> Result<(), String> {
            let text = String::from_utf8_lossy(raw).into_owned();
            if text.contains("fail") {
                return Err("database busy".into());
            }
            self.0.lock().unwrap().push(format!("commit {text} to {list}"));
            Ok(())
        }
    }

    fn list() -> MailingList {
        let now = Timestamp::from_unix_secs(1_800_000_000);
        MailingList {
            id: ListId::from_stored(1),
            domain_id: crate::mailing::model::DomainId::from_stored(1),
            domain: DomainName::parse("example.org").unwrap(),
            name: ListName::parse("news").unwrap(),
            display_name: "News".into(),
            kind: ListKind::Discussion,
            status: ListStatus::Active,
            send_suspended: false,
            policies: ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Discussion),
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn a_message_leaves_the_mailbox_only_after_the_pipeline_committed_it() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let messages = BTreeMap::from([(3, b"one".to_vec()), (5, b"fail".to_vec()), (9, b"three".to_vec())]);
        let mut mailbox = Memory { messages, log: Arc::clone(&log) };
        let pipeline = Pipeline(Arc::clone(&log));
        let err = drain(&mut mailbox, &pipeline, &list(), 1024).unwrap_err();
        assert!(matches!(err, IngestError::Intake(_)), "{err}");
        // The failed message and the ones after it stay for the next pass.
        assert_eq!(*log.lock().unwrap(), ["commit one to news@example.org", "delete 3"]);
        assert_eq!(mailbox.messages.keys().copied().collect::<Vec<_>>(), [5, 9]);
        mailbox.messages.insert(5, b"two".to_vec());
        let pass = drain(&mut mailbox, &pipeline, &list(), 1024).unwrap();
        assert_eq!(pass, Pass { delivered: 2, too_big: 0 });
        assert!(mailbox.messages.is_empty());
        assert_eq!(
            log.lock().unwrap()[2..],
            ["commit two to news@example.org", "delete 5", "commit three to news@example.org", "delete 9"]
        );
    }

    #[test]
    fn a_message_over_the_size_taken_stays_and_the_others_go_on() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let messages = BTreeMap::from([(1, vec![b'x'; 2000]), (2, b"small".to_vec())]);
        let mut mailbox = Memory { messages, log: Arc::clone(&log) };
        let pass = drain(&mut mailbox, &Pipeline(Arc::clone(&log)), &list(), 1000).unwrap();
        assert_eq!(pass, Pass { delivered: 1, too_big: 1 });
        assert_eq!(mailbox.messages.keys().copied().collect::<Vec<_>>(), [1]);
    }
}
