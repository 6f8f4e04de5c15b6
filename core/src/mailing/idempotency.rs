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
use crate::kernel::{Timestamp, secrets};
use crate::mailing::ports::{IdempotencyRecord, Tx};
use crate::storage::{StoreError, in_write};

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
    /// The key's first request ran: its result (committed with the stored answer, unless that
    /// answer was a server error, which is not stored so that a retry runs again).
    Ran(T),
    /// The first request's answer, to send again with `Idempotent-Replay: true`.
    Replay { status: u16, body: String },
}

/// An operation's answer as the registry stores and replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Runs `exec` under the key: in one write transaction, the key is checked (a stored answer is
/// replayed, another body is `idempotency_conflict`, a live reservation of a stopped process is
/// `idempotency_in_progress`), reserved, `exec` runs, and `answer` renders its result into what
/// is stored. A 2xx or 4xx answer is committed with the operation's writes (for a refusal: its
/// audit entry only, `exec` undoing its own writes in a nested unit); a 5xx rolls everything back
/// and frees the key. `exec` must not open transactions of its own.
pub fn run<T, E: From<MailingError>>(
    app: &Service,
    req: &IdempotentRequest,
    exec: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    answer: impl FnOnce(&Result<T, E>) -> Answer,
) -> Result<Keyed<Result<T, E>>, E> {
    let now = app.clock.now();
    let mut tx = app.store.write().map_err(|e| E::from(e.into()))?;
    match check(&mut *tx, req, now) {
        Ok(None) => {}
        Ok(Some(replay)) => {
            tx.rollback().map_err(|e| E::from(e.into()))?;
            return Ok(replay);
        }
        Err(e) => {
            tx.rollback().map_err(|e| E::from(e.into()))?;
            return Err(e.into());
        }
    }
    let reserved = tx
        .idempotency_reserve(req.api_key, &req.key, &req.fingerprint, now, now.plus_secs(REPLAY_SECS))
        .map_err(|e| match e {
            // Another process reserved it between our read and write (cannot happen under its
            // write lock, kept for a backend with weaker locking).
            StoreError::Duplicate => MailingError::IdempotencyInProgress,
            other => other.into(),
        });
    if let Err(e) = reserved {
        return Err(e.into());
    }
    let out = exec(&mut *tx);
    let stored = answer(&out);
    if stored.status >= 500 {
        // Not an outcome: nothing is kept and the key stays free.
        drop(tx);
        return Ok(Keyed::Ran(out));
    }
    tx.idempotency_finish(req.api_key, &req.key, stored.status, &stored.body).map_err(|e| E::from(e.into()))?;
    tx.commit().map_err(|e| E::from(e.into()))?;
    Ok(Keyed::Ran(out))
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
