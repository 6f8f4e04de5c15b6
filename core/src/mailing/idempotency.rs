//! The Idempotency-Key registry of `POST .../members` and `POST .../sends`.
//!
//! The key's check, its reservation, the operation and the stored answer are one write
//! transaction ([`run`]): one fsync, and two requests with one key never both execute, since the
//! second one's transaction starts after the first one's ends and finds its stored answer. A
//! reservation left `running` is only ever seen from a process that stopped mid-request (or an
//! older version of courrier, which reserved in a transaction of its own): it gets 409
//! `idempotency_in_progress` until it is 5 minutes old, then it may be taken over. The registry
//! is kept per API key; a session-authenticated request carrying the header is refused.

use super::MailingError;
use super::Service;
use crate::access::{Principal, Via};
use crate::kernel::{CoreError, ErrorKind, Timestamp, secrets};
use crate::mailing::ports::{IdempotencyRecord, Tx};
use crate::storage::{StoreError, WriteJob, WriteKey, in_write, run_here};
use serde_json::json;

/// A stored answer is replayed this long; then the key is free again.
pub const REPLAY_SECS: i64 = 24 * 3600;
/// A reservation whose request has run this long is presumed dead (its process stopped before
/// finishing) and may be taken over, so a crash does not lock a key for a day.
pub const ABANDONED_AFTER_SECS: i64 = 300;
pub const MAX_KEY_LEN: usize = 255;

/// A validated reservation request: the API key, the caller's key, and the fingerprint of what
/// the request asks (method, path, body), so that a reused key with another body is told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotentRequest {
    api_key: i64,
    key: String,
    fingerprint: String,
}

impl IdempotentRequest {
    /// `None` when the request carries no Idempotency-Key.
    pub fn new(
        p: &Principal,
        key: Option<&str>,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<Option<Self>, MailingError> {
        let Some(key) = key else { return Ok(None) };
        let api_key = match &p.via {
            Via::Key(k) => k.id.get(),
            Via::Session(_) | Via::Operator => return Err(MailingError::IdempotencyUnsupported),
        };
        if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(MailingError::Invalid(format!(
                "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"
            )));
        }
        let mut material = Vec::with_capacity(method.len() + path.len() + body.len() + 2);
        for part in [method.as_bytes(), b"\n", path.as_bytes(), b"\n", body] {
            material.extend_from_slice(part);
        }
        Ok(Some(Self { api_key, key: key.to_owned(), fingerprint: secrets::sha256_hex(&material) }))
    }
}

/// What [`run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keyed<T> {
    /// The key's first request (or a request without a key) ran, and this is what it did.
    Ran(T),
    /// The first request's answer, to send again with `Idempotent-Replay: true`.
    Replay { status: u16, body: String },
}

impl<T> Keyed<T> {
    /// What ran; `None` for a replay (never without a key).
    pub fn ran(self) -> Option<T> {
        match self {
            Keyed::Ran(t) => Some(t),
            Keyed::Replay { .. } => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Keyed<U> {
        match self {
            Keyed::Ran(t) => Keyed::Ran(f(t)),
            Keyed::Replay { status, body } => Keyed::Replay { status, body },
        }
    }
}

/// An operation's answer as the registry stores and replays it. A refusal is stored with status
/// 0: its status follows from its code when replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// What an operation that may run under an Idempotency-Key answers, as the registry stores and
/// replays it: the contract's success status and the `data` document (the same view the
/// frontends render for a live answer, so a replay cannot differ from the first answer).
pub trait Replayable {
    fn status(&self) -> u16;
    fn view(&self) -> serde_json::Value;
}

/// The one runner of the operations an Idempotency-Key may guard (`POST .../members`, `POST
/// .../sends`): one write transaction holding the key's check and reservation (under a key),
/// `exec`, and the stored answer. A refusal's audit entry is committed (`exec` undoes its own
/// writes in a nested unit); a server fault (an `Unavailable` or `Internal` error) rolls
/// everything back and leaves the key free, so that a retry runs again. `exec` must not open
/// transactions of its own. `on` is what the write serialises on ([`WriteKey`]: the list of an
/// addition or a send); `None` excludes every other writer. Two requests of one Idempotency-Key
/// under different write keys still run once: the reservation is unique, and the second finds it
/// in progress.
pub fn guarded<T: Replayable + Send>(
    app: &Service,
    on: Option<WriteKey>,
    key: Option<&IdempotentRequest>,
    exec: impl FnOnce(&mut (dyn Tx + 'static)) -> Result<T, MailingError> + Send,
) -> Result<Keyed<T>, MailingError> {
    let mut answer = None;
    run_here(&*app.store, guarded_job(app, on, key.cloned(), exec, |out| answer = Some(out)));
    answer.unwrap_or_else(|| Err(MailingError::Store(StoreError::Backend("a write left unanswered".into()))))
}

/// [`guarded`] as a [`WriteJob`], for the store's writer thread ([`crate::storage::Store::submit`]):
/// `answer` gets what [`guarded`] would have returned, once the unit's commit is decided.
pub fn guarded_job<T, F, A>(
    app: &Service,
    on: Option<WriteKey>,
    key: Option<IdempotentRequest>,
    exec: F,
    answer: A,
) -> impl WriteJob<dyn Tx> + use<T, F, A>
where
    T: Replayable + Send,
    F: FnOnce(&mut (dyn Tx + 'static)) -> Result<T, MailingError> + Send,
    A: FnOnce(Result<Keyed<T>, MailingError>) + Send,
{
    GuardedJob { now: app.clock.now(), on, key, exec: Some(exec), out: None, answer }
}

struct GuardedJob<T, F, A> {
    now: Timestamp,
    on: Option<WriteKey>,
    key: Option<IdempotentRequest>,
    exec: Option<F>,
    out: Option<Result<Keyed<T>, MailingError>>,
    answer: A,
}

impl<T, F, A> GuardedJob<T, F, A>
where
    T: Replayable + Send,
    F: FnOnce(&mut (dyn Tx + 'static)) -> Result<T, MailingError> + Send,
{
    /// The unit's work; `true` to commit it.
    fn decide(&mut self, tx: &mut (dyn Tx + 'static)) -> (bool, Result<Keyed<T>, MailingError>) {
        let Some(exec) = self.exec.take() else {
            return (false, Err(MailingError::Store(StoreError::Backend("a write run twice".into()))));
        };
        let Some(req) = &self.key else {
            // Without a key: the refusal's audit entry is committed with it.
            return (true, exec(tx).map(Keyed::Ran));
        };
        match check(tx, req, self.now) {
            Ok(None) => {}
            Ok(Some(replay)) => return (false, Ok(replay)),
            Err(e) => return (false, Err(e)),
        }
        let now = self.now;
        if let Err(e) = tx.idempotency_reserve(req.api_key, &req.key, &req.fingerprint, now, now.plus_secs(REPLAY_SECS))
        {
            return (
                false,
                Err(match e {
                    // Another process reserved it between our read and write (cannot happen under its
                    // write lock, kept for a backend with weaker locking).
                    StoreError::Duplicate => MailingError::IdempotencyInProgress,
                    other => other.into(),
                }),
            );
        }
        let out = exec(tx);
        let Some(stored) = stored_answer(&out) else {
            // Not an outcome: nothing is kept and the key stays free.
            return (false, out.map(Keyed::Ran));
        };
        if let Err(e) = tx.idempotency_finish(req.api_key, &req.key, stored.status, &stored.body) {
            return (false, Err(e.into()));
        }
        (true, out.map(Keyed::Ran))
    }
}

impl<T, F, A> WriteJob<dyn Tx> for GuardedJob<T, F, A>
where
    T: Replayable + Send,
    F: FnOnce(&mut (dyn Tx + 'static)) -> Result<T, MailingError> + Send,
    A: FnOnce(Result<Keyed<T>, MailingError>) + Send,
{
    fn run(&mut self, tx: &mut (dyn Tx + 'static)) -> bool {
        let (keep, out) = self.decide(tx);
        self.out = Some(out);
        keep
    }

    fn key(&self) -> Option<&WriteKey> {
        self.on.as_ref()
    }

    fn done(self: Box<Self>, outcome: Result<(), StoreError>) {
        let keyless = self.key.is_none();
        let answer = match (self.out, outcome) {
            (None, Err(e)) => Err(e.into()),
            (None, Ok(())) => Err(StoreError::Backend("a write that never ran".into()).into()),
            (Some(out), Ok(())) => out,
            // A refusal without a key is the answer even when its audit entry was lost.
            (Some(Err(refusal)), Err(e)) if keyless => {
                tracing::error!(error = %e, "cannot commit a refusal's audit entry");
                Err(refusal)
            }
            // Not durable, or decided on writes of its group that then failed to commit.
            (Some(_), Err(e)) => Err(e.into()),
        };
        (self.answer)(answer);
    }
}

/// A request refused before its operation could run (its body or path did not parse): under a
/// key, the refusal is the key's answer, stored and replayed like any other (or the key's earlier
/// answer is replayed); without one, it is just the error.
pub fn refuse_input(
    app: &Service,
    key: Option<&IdempotentRequest>,
    e: MailingError,
) -> Result<Keyed<std::convert::Infallible>, MailingError> {
    match key {
        None => Err(e),
        Some(_) => guarded(app, None, key, |_| Err(e)),
    }
}

impl Replayable for std::convert::Infallible {
    fn status(&self) -> u16 {
        match *self {}
    }

    fn view(&self) -> serde_json::Value {
        match *self {}
    }
}

/// What the registry keeps of an operation's result: `None` for a server fault. A refusal is
/// kept by its code (a replay derives its status from the code, as the first answer did).
fn stored_answer<T: Replayable>(out: &Result<T, MailingError>) -> Option<Answer> {
    match out {
        Ok(done) => Some(Answer { status: done.status(), body: json!({ "data": done.view() }).to_string() }),
        Err(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Internal) => None,
        Err(e) => Some(Answer {
            status: 0,
            body: json!({ "error": { "code": e.code().as_str(), "message": e.to_string() } }).to_string(),
        }),
    }
}

/// The registry's say on a request before it runs: `None` to run it.
fn check<T>(tx: &mut dyn Tx, req: &IdempotentRequest, now: Timestamp) -> Result<Option<Keyed<T>>, MailingError> {
    match tx.idempotency_get(req.api_key, &req.key)? {
        Some(IdempotencyRecord::Done { fingerprint, status, body, expires_at }) if expires_at > now => {
            if fingerprint == req.fingerprint {
                Ok(Some(Keyed::Replay { status, body }))
            } else {
                Err(MailingError::IdempotencyConflict)
            }
        }
        Some(IdempotencyRecord::Running { fingerprint, created_at, expires_at }) if expires_at > now => {
            if fingerprint != req.fingerprint {
                return Err(MailingError::IdempotencyConflict);
            }
            if created_at.plus_secs(ABANDONED_AFTER_SECS) > now {
                return Err(MailingError::IdempotencyInProgress);
            }
            tracing::warn!(key = %req.key, "taking over an abandoned idempotency reservation");
            tx.idempotency_release(req.api_key, &req.key)?;
            Ok(None)
        }
        Some(_) => {
            tx.idempotency_release(req.api_key, &req.key)?;
            Ok(None)
        }
        None => Ok(None),
    }
}

/// Deletes expired records (run periodically by the server).
pub fn purge(app: &Service, now: Timestamp) -> Result<u64, MailingError> {
    Ok(in_write(&*app.store, |tx| tx.idempotency_purge(now))?)
}
