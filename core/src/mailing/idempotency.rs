//! The Idempotency-Key registry of `POST .../members` and `POST .../sends`.
//!
//! The key is reserved in its own committed transaction before the operation runs, so two
//! concurrent requests never both execute: the second finds the reservation and gets 409
//! `idempotency_in_progress`, or, once the first has finished, its stored answer. The registry is
//! kept per API key; a session-authenticated request carrying the header is refused.

use super::MailingError;
use crate::Courrier;
use crate::access::{Principal, Via};
use crate::kernel::{Timestamp, secrets};
use crate::storage::{IdempotencyRecord, StoreError, in_write};

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

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key is reserved: run the operation, then [`finish`] or [`release`].
    Execute,
    /// The first request's answer, to send again with `Idempotent-Replay: true`.
    Replay { status: u16, body: String },
}

pub fn reserve(app: &Courrier, req: &IdempotentRequest) -> Result<Reservation, MailingError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        match tx.idempotency_get(req.api_key, &req.key)? {
            Some(IdempotencyRecord::Done { fingerprint, status, body, expires_at }) if expires_at > now => {
                return if fingerprint == req.fingerprint {
                    Ok(Reservation::Replay { status, body })
                } else {
                    Err(MailingError::IdempotencyConflict)
                };
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
            }
            Some(_) => tx.idempotency_release(req.api_key, &req.key)?,
            None => {}
        }
        tx.idempotency_reserve(req.api_key, &req.key, &req.fingerprint, now, now.plus_secs(REPLAY_SECS)).map_err(
            |e| match e {
                // Another request reserved it between our read and write (a second process).
                StoreError::Duplicate => MailingError::IdempotencyInProgress,
                other => other.into(),
            },
        )?;
        Ok(Reservation::Execute)
    })
}

/// Stores the answer to replay.
pub fn finish(app: &Courrier, req: &IdempotentRequest, status: u16, body: &str) -> Result<(), MailingError> {
    Ok(in_write(&*app.store, |tx| tx.idempotency_finish(req.api_key, &req.key, status, body))?)
}

/// Frees the key after a failure that should not be replayed (a server error, a busy database):
/// the client's retry runs the operation again.
pub fn release(app: &Courrier, req: &IdempotentRequest) -> Result<(), MailingError> {
    Ok(in_write(&*app.store, |tx| tx.idempotency_release(req.api_key, &req.key))?)
}

/// Deletes expired records (run periodically by the server).
pub fn purge(app: &Courrier, now: Timestamp) -> Result<u64, MailingError> {
    Ok(in_write(&*app.store, |tx| tx.idempotency_purge(now))?)
}
