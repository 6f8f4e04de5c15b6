//! The Idempotency-Key registry (`idempotency_keys`), written once for both databases.
//! [`crate::idempotency_repo!`] implements the port with these.

use crate::mailing_columns::{IdempotencyColumns, idempotency_record};
use crate::sql::SqlTx;
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::ports::IdempotencyRecord;
use courrier_core::storage::StoreError;

pub fn idempotency_get(tx: &mut impl SqlTx, api_key: i64, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
    tx.first(
        "SELECT fingerprint, state, status, body, created_at, expires_at FROM idempotency_keys
         WHERE api_key_id = ?1 AND idem_key = ?2",
        &[api_key.into(), key.into()],
        |r| {
            Ok(idempotency_record(IdempotencyColumns {
                fingerprint: r.text(0)?,
                state: r.text(1)?,
                status: r.opt_i64(2)?,
                body: r.opt_text(3)?,
                created_at: r.i64(4)?,
                expires_at: r.i64(5)?,
            }))
        },
    )
}

/// A key taken is [`StoreError::Duplicate`], and the transaction goes on (the caller reads the
/// record): nothing inserted says so, with no error raised (and on PostgreSQL no savepoint).
pub fn idempotency_reserve(
    tx: &mut impl SqlTx,
    api_key: i64,
    key: &str,
    fingerprint: &str,
    now: Timestamp,
    expires_at: Timestamp,
) -> Result<(), StoreError> {
    let inserted = tx.run(
        "INSERT INTO idempotency_keys (api_key_id, idem_key, fingerprint, state, created_at, expires_at)
         VALUES (?1, ?2, ?3, 'running', ?4, ?5) ON CONFLICT DO NOTHING",
        &[api_key.into(), key.into(), fingerprint.into(), now.unix_micros().into(), expires_at.unix_micros().into()],
    )?;
    if inserted == 0 {
        return Err(StoreError::Duplicate);
    }
    Ok(())
}

pub fn idempotency_finish(
    tx: &mut impl SqlTx,
    api_key: i64,
    key: &str,
    status: u16,
    body: &str,
) -> Result<(), StoreError> {
    tx.run(
        "UPDATE idempotency_keys SET state = 'done', status = ?3, body = ?4 WHERE api_key_id = ?1 AND idem_key = ?2",
        &[api_key.into(), key.into(), status.into(), body.into()],
    )?;
    Ok(())
}

pub fn idempotency_release(tx: &mut impl SqlTx, api_key: i64, key: &str) -> Result<(), StoreError> {
    tx.run("DELETE FROM idempotency_keys WHERE api_key_id = ?1 AND idem_key = ?2", &[api_key.into(), key.into()])?;
    Ok(())
}

pub fn idempotency_purge(tx: &mut impl SqlTx, now: Timestamp) -> Result<u64, StoreError> {
    tx.run("DELETE FROM idempotency_keys WHERE expires_at <= ?1", &[now.unix_micros().into()])
}

/// Implements `mailing::ports::IdempotencyRepo` for an adapter's transaction (an [`SqlTx`]) with
/// the shared statements of this module.
#[macro_export]
macro_rules! idempotency_repo {
    ($tx:ty) => {
        impl ::courrier_core::mailing::ports::IdempotencyRepo for $tx {
            fn idempotency_get(
                &mut self,
                api_key: i64,
                key: &str,
            ) -> Result<Option<::courrier_core::mailing::ports::IdempotencyRecord>, ::courrier_core::storage::StoreError>
            {
                $crate::idempotency::idempotency_get(self, api_key, key)
            }
            fn idempotency_reserve(
                &mut self,
                api_key: i64,
                key: &str,
                fingerprint: &str,
                now: ::courrier_core::kernel::Timestamp,
                expires_at: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::idempotency::idempotency_reserve(self, api_key, key, fingerprint, now, expires_at)
            }
            fn idempotency_finish(
                &mut self,
                api_key: i64,
                key: &str,
                status: u16,
                body: &str,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::idempotency::idempotency_finish(self, api_key, key, status, body)
            }
            fn idempotency_release(&mut self, api_key: i64, key: &str) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::idempotency::idempotency_release(self, api_key, key)
            }
            fn idempotency_purge(
                &mut self,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<u64, ::courrier_core::storage::StoreError> {
                $crate::idempotency::idempotency_purge(self, now)
            }
        }
    };
}
