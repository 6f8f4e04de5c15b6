//! Mail-account credentials (`mail_credentials`), written once for both databases: the sealed
//! password is stored as given. [`crate::credential_repo!`] implements the port with these.

use crate::sql::{Arg, SqlRow, SqlTx, corrupt, ts};
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::model::{CredentialKind, ListId, MailCredential, Security};
use courrier_core::storage::StoreError;

const COLUMNS: &str = "list_id, kind, host, port, security, username, password_sealed, folder, last_ok_at, \
                       last_error, last_error_at, created_at, updated_at";

fn row(r: &dyn SqlRow) -> Result<MailCredential, StoreError> {
    let (kind, security, port) = (r.text(1)?, r.text(4)?, r.i64(3)?);
    Ok(MailCredential {
        list_id: ListId::from_stored(r.i64(0)?),
        kind: CredentialKind::parse(&kind).ok_or_else(|| corrupt("credential kind", &kind))?,
        host: r.text(2)?,
        port: u16::try_from(port).map_err(|_| corrupt("credential port", &port.to_string()))?,
        security: Security::parse(&security).ok_or_else(|| corrupt("credential security", &security))?,
        username: r.text(5)?,
        password_sealed: r.text(6)?,
        folder: r.opt_text(7)?,
        last_ok_at: ts(r.opt_i64(8)?),
        last_error: r.opt_text(9)?,
        last_error_at: ts(r.opt_i64(10)?),
        created_at: Timestamp::from_unix_micros(r.i64(11)?),
        updated_at: Timestamp::from_unix_micros(r.i64(12)?),
    })
}

fn credentials_where(tx: &mut impl SqlTx, clause: &str, args: &[Arg<'_>]) -> Result<Vec<MailCredential>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM mail_credentials WHERE {clause} ORDER BY list_id, kind");
    tx.rows(&sql, args, row)
}

pub fn credentials_of(tx: &mut impl SqlTx, list: ListId) -> Result<Vec<MailCredential>, StoreError> {
    credentials_where(tx, "list_id = ?1", &[list.get().into()])
}

pub fn credential(
    tx: &mut impl SqlTx,
    list: ListId,
    kind: CredentialKind,
) -> Result<Option<MailCredential>, StoreError> {
    Ok(credentials_where(tx, "list_id = ?1 AND kind = ?2", &[list.get().into(), kind.as_str().into()])?
        .into_iter()
        .next())
}

pub fn credentials_of_kind(tx: &mut impl SqlTx, kind: CredentialKind) -> Result<Vec<MailCredential>, StoreError> {
    credentials_where(tx, "kind = ?1", &[kind.as_str().into()])
}

pub fn upsert_credential(tx: &mut impl SqlTx, c: &MailCredential) -> Result<(), StoreError> {
    tx.run(
        "INSERT INTO mail_credentials (list_id, kind, host, port, security, username, password_sealed, folder,
             last_ok_at, last_error, last_error_at, throttled_until, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL, ?12, ?13)
         ON CONFLICT (list_id, kind) DO UPDATE SET host = excluded.host, port = excluded.port,
             security = excluded.security, username = excluded.username,
             password_sealed = excluded.password_sealed, folder = excluded.folder,
             last_ok_at = excluded.last_ok_at, last_error = excluded.last_error,
             last_error_at = excluded.last_error_at, throttled_until = NULL,
             updated_at = excluded.updated_at",
        &[
            c.list_id.get().into(),
            c.kind.as_str().into(),
            (&c.host).into(),
            c.port.into(),
            c.security.as_str().into(),
            (&c.username).into(),
            (&c.password_sealed).into(),
            c.folder.as_deref().into(),
            c.last_ok_at.map(Timestamp::unix_micros).into(),
            c.last_error.as_deref().into(),
            c.last_error_at.map(Timestamp::unix_micros).into(),
            c.created_at.unix_micros().into(),
            c.updated_at.unix_micros().into(),
        ],
    )?;
    Ok(())
}

pub fn delete_credential(tx: &mut impl SqlTx, list: ListId, kind: CredentialKind) -> Result<bool, StoreError> {
    let n = tx.run(
        "DELETE FROM mail_credentials WHERE list_id = ?1 AND kind = ?2",
        &[list.get().into(), kind.as_str().into()],
    )?;
    Ok(n > 0)
}

pub fn record_credential_outcome(
    tx: &mut impl SqlTx,
    list: ListId,
    kind: CredentialKind,
    error: Option<&str>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let (list, kind, now) = (list.get().into(), kind.as_str().into(), now.unix_micros().into());
    match error {
        None => {
            tx.run("UPDATE mail_credentials SET last_ok_at = ?3 WHERE list_id = ?1 AND kind = ?2", &[list, kind, now])?
        }
        Some(e) => tx.run(
            "UPDATE mail_credentials SET last_error = ?4, last_error_at = ?3 WHERE list_id = ?1 AND kind = ?2",
            &[list, kind, now, e.into()],
        )?,
    };
    Ok(())
}

/// The later of the two times (SQLite's two-argument `MAX` is PostgreSQL's `GREATEST`: a `CASE`
/// says it in both).
pub fn throttle_submission(tx: &mut impl SqlTx, list: ListId, until: Timestamp) -> Result<(), StoreError> {
    tx.run(
        "UPDATE mail_credentials
         SET throttled_until = CASE WHEN COALESCE(throttled_until, 0) > ?2 THEN throttled_until ELSE ?2 END
         WHERE list_id = ?1 AND kind = 'submission'",
        &[list.get().into(), until.unix_micros().into()],
    )?;
    Ok(())
}

/// Implements `mailing::ports::CredentialRepo` for an adapter's transaction (an [`SqlTx`]) with
/// the shared statements of this module.
#[macro_export]
macro_rules! credential_repo {
    ($tx:ty) => {
        impl ::courrier_core::mailing::ports::CredentialRepo for $tx {
            fn credentials_of(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
            ) -> Result<Vec<::courrier_core::mailing::model::MailCredential>, ::courrier_core::storage::StoreError>
            {
                $crate::credentials::credentials_of(self, list)
            }
            fn credential(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                kind: ::courrier_core::mailing::model::CredentialKind,
            ) -> Result<Option<::courrier_core::mailing::model::MailCredential>, ::courrier_core::storage::StoreError>
            {
                $crate::credentials::credential(self, list, kind)
            }
            fn credentials_of_kind(
                &mut self,
                kind: ::courrier_core::mailing::model::CredentialKind,
            ) -> Result<Vec<::courrier_core::mailing::model::MailCredential>, ::courrier_core::storage::StoreError>
            {
                $crate::credentials::credentials_of_kind(self, kind)
            }
            fn upsert_credential(
                &mut self,
                c: &::courrier_core::mailing::model::MailCredential,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::credentials::upsert_credential(self, c)
            }
            fn delete_credential(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                kind: ::courrier_core::mailing::model::CredentialKind,
            ) -> Result<bool, ::courrier_core::storage::StoreError> {
                $crate::credentials::delete_credential(self, list, kind)
            }
            fn record_credential_outcome(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                kind: ::courrier_core::mailing::model::CredentialKind,
                error: Option<&str>,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::credentials::record_credential_outcome(self, list, kind, error, now)
            }
            fn throttle_submission(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                until: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::credentials::throttle_submission(self, list, until)
            }
        }
    };
}
