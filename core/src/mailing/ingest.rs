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

use super::accounts::{AccountError, Closer, Listed, Mailbox};
use super::credentials::{self, CredentialKind, MailCredential};
use super::model::MailingList;
use super::{MailingError, Service};
use crate::storage::{in_read, in_write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The mail-in pipeline, as the poller sees it: "hand this raw message to the list at this
/// address". Returns once the message's result (a post, a held message, a bounce, a refusal) is
/// committed; an error leaves the message in the mailbox for a later pass.
pub trait MailIntake: Send + Sync {
    fn deliver(&self, list_address: &str, raw: &[u8]) -> Result<(), String>;
}

/// The mail-in pipeline itself ([`super::inbound::receive`]): the message is stored durably for
/// the list's address before this returns (a post then goes through `posts`, a bounce is
/// recognised by its content); a post over the list's size limit is held for a moderator, since
/// its sender cannot be told "no" any more.
pub struct MailIn(pub std::sync::Arc<Service>);

impl MailIntake for MailIn {
    fn deliver(&self, list_address: &str, raw: &[u8]) -> Result<(), String> {
        super::inbound::receive(&self.0, None, list_address, raw, super::inbound::Oversize::Hold)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
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

/// Messages fetched in one exchange, at most (and at most [`BATCH_BYTES`] together).
pub const BATCH: usize = 100;
pub const BATCH_BYTES: u64 = 16 * 1024 * 1024;

/// One pass over the mailbox: every message handed to the pipeline, then deleted. Messages are
/// fetched in batches; each batch's delivered messages are deleted together once each of their
/// results is committed (a failure stops the pass after deleting the ones already delivered).
pub fn drain(
    mailbox: &mut dyn Mailbox,
    intake: &dyn MailIntake,
    list: &MailingList,
    max_bytes: usize,
) -> Result<Pass, IngestError> {
    let mut pass = Pass::default();
    let address = list.address();
    let mut batch: Vec<u32> = Vec::new();
    let mut bytes = 0u64;
    let listed = mailbox.list()?;
    let last = listed.len();
    for (i, Listed { uid, size }) in listed.into_iter().enumerate() {
        if size > max_bytes as u64 {
            tracing::warn!(list = %address, uid, size, "a message over the size taken stays in the mailbox");
            pass.too_big += 1;
        } else {
            batch.push(uid);
            bytes += size;
        }
        if !batch.is_empty() && (batch.len() >= BATCH || bytes >= BATCH_BYTES || i + 1 == last) {
            let (delivered, failure) = deliver_all(intake, &address, mailbox.fetch(&batch)?);
            // Only now: each of these results is committed.
            mailbox.delete(&delivered)?;
            pass.delivered += delivered.len() as u64;
            if let Some(e) = failure {
                return Err(IngestError::Intake(e));
            }
            batch.clear();
            bytes = 0;
        }
    }
    Ok(pass)
}

/// Threads handing one batch to the pipeline at once: the store's write lane commits their
/// transactions together (one `fsync` for several messages), which is most of a message's cost.
pub const DELIVERY_THREADS: usize = 4;

/// Hands every message to the pipeline, [`DELIVERY_THREADS`] at a time; the UIDs delivered, and
/// the first failure (the messages after it in its thread's share are not tried).
fn deliver_all(intake: &dyn MailIntake, address: &str, messages: Vec<(u32, Vec<u8>)>) -> (Vec<u32>, Option<String>) {
    if messages.len() <= 1 {
        let mut delivered = Vec::new();
        for (uid, raw) in messages {
            if let Err(e) = intake.deliver(address, &raw) {
                return (delivered, Some(e));
            }
            delivered.push(uid);
        }
        return (delivered, None);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<(Vec<u32>, Option<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..DELIVERY_THREADS.min(messages.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut delivered = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let Some((uid, raw)) = messages.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                        if let Err(e) = intake.deliver(address, raw) {
                            failed.store(true, Ordering::Relaxed);
                            return (delivered, Some(e));
                        }
                        delivered.push(*uid);
                    }
                    (delivered, None)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| (Vec::new(), Some("a delivery thread panicked".into()))))
            .collect()
    });
    let mut delivered = Vec::new();
    let mut failure = None;
    for (uids, e) in results {
        delivered.extend(uids);
        failure = failure.or(e);
    }
    delivered.sort_unstable();
    (delivered, failure)
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

/// Tells the pollers to stop, and closes their open sessions so that an IDLE ends at once.
#[derive(Default)]
pub struct Stop {
    flag: AtomicBool,
    next: AtomicU64,
    sessions: Mutex<Vec<(u64, Closer)>>,
}

impl Stop {
    pub fn stop(&self) {
        self.flag.store(true, Ordering::Relaxed);
        let sessions = std::mem::take(&mut *self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for (_, close) in sessions {
            close();
        }
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Keeps a session's closer while it is open; closes it at once when already stopping.
    fn register(&self, close: Closer) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((id, close));
        if self.is_set() {
            self.stop();
        }
        id
    }

    fn unregister(&self, id: u64) {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(i, _)| *i != id);
    }
}

/// Sleeps `d` in short slices; `false` when asked to stop meanwhile.
fn rest(d: Duration, stop: &Stop) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.is_set() {
            return false;
        }
        std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(200)));
    }
    !stop.is_set()
}

/// The poller of one credential: runs until `stop`, or until its credential changed or went.
pub fn poll(app: &Service, intake: &dyn MailIntake, cred: &MailCredential, cfg: &IngestConfig, stop: &Stop) {
    let mut failures: u32 = 0;
    let mut failing = false;
    while !stop.is_set() && still_current(app, cred) {
        let result = session(app, intake, cred, cfg, stop, &mut failing);
        match result {
            Ok(()) => return,
            Err(_) if stop.is_set() => return,
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
    stop: &Stop,
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
    let registered = stop.register(mailbox.closer());
    let result = watch(app, intake, cred, cfg, stop, &list, &mut *mailbox);
    stop.unregister(registered);
    result
}

fn watch(
    app: &Service,
    intake: &dyn MailIntake,
    cred: &MailCredential,
    cfg: &IngestConfig,
    stop: &Stop,
    list: &MailingList,
    mailbox: &mut dyn Mailbox,
) -> Result<(), IngestError> {
    loop {
        let pass = drain(mailbox, intake, list, cfg.max_message_bytes)?;
        if pass.delivered > 0 {
            tracing::info!(list = %list.address(), delivered = pass.delivered, "mail ingested");
        }
        if stop.is_set() || !still_current(app, cred) {
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
        fn list(&mut self) -> Result<Vec<Listed>, AccountError> {
            Ok(self.messages.iter().map(|(uid, m)| Listed { uid: *uid, size: m.len() as u64 }).collect())
        }
        fn fetch(&mut self, uids: &[u32]) -> Result<Vec<(u32, Vec<u8>)>, AccountError> {
            Ok(uids.iter().filter_map(|u| Some((*u, self.messages.get(u)?.clone()))).collect())
        }
        fn delete(&mut self, uids: &[u32]) -> Result<(), AccountError> {
            for uid in uids {
                self.log.lock().unwrap().push(format!("delete {uid}"));
                self.messages.remove(uid);
            }
            Ok(())
        }
        fn can_idle(&self) -> bool {
            false
        }
        fn idle(&mut self, _: Duration) -> Result<(), AccountError> {
            Ok(())
        }
        fn closer(&self) -> Closer {
            Box::new(|| {})
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
        let texts = [(3, "one"), (5, "fail"), (9, "three")];
        let messages = texts.iter().map(|(u, t)| (*u, t.as_bytes().to_vec())).collect();
        let mut mailbox = Memory { messages, log: Arc::clone(&log) };
        let pipeline = Pipeline(Arc::clone(&log));
        // Every deletion comes after its message's commit; nothing uncommitted is deleted.
        let check = |log: &[String], names: &[(u32, &str)]| {
            for (uid, text) in names {
                let commit = log.iter().position(|l| *l == format!("commit {text} to news@example.org"));
                let delete = log.iter().position(|l| *l == format!("delete {uid}"));
                match (commit, delete) {
                    (Some(c), Some(d)) => assert!(c < d, "{log:?}"),
                    (None, Some(_)) => panic!("{uid} deleted uncommitted: {log:?}"),
                    _ => {}
                }
            }
        };
        let err = drain(&mut mailbox, &pipeline, &list(), 1024).unwrap_err();
        assert!(matches!(err, IngestError::Intake(_)), "{err}");
        check(&log.lock().unwrap(), &texts);
        // The failed message stays for the next pass, and so does any not delivered before it.
        assert!(mailbox.messages.contains_key(&5));
        let committed_three = log.lock().unwrap().iter().any(|l| l.starts_with("commit three"));
        assert_eq!(mailbox.messages.contains_key(&9), !committed_three);
        assert!(!mailbox.messages.contains_key(&3));
        mailbox.messages.insert(5, b"two".to_vec());
        let pass = drain(&mut mailbox, &pipeline, &list(), 1024).unwrap();
        assert_eq!(pass.delivered, if committed_three { 1 } else { 2 });
        assert!(mailbox.messages.is_empty());
        check(&log.lock().unwrap(), &[(3, "one"), (5, "two"), (9, "three")]);
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
