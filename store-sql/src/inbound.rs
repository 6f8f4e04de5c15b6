//! The inbound store (messages received by mail, `inbound`) and the held posts (`held_posts`),
//! written once for both databases. [`crate::inbox_repo!`] implements the port with these.

use crate::members::parsed;
use crate::sql::{Dialect, SqlRow, SqlTx, corrupt, paged};
use courrier_core::kernel::{Page, Paged, Timestamp};
use courrier_core::mailing::model::{
    HeldId, HeldPost, HoldReason, InboundId, InboundMessage, InboundState, ListId, Role,
};
use courrier_core::mailing::ports::{NewHeldPost, NewInbound};
use courrier_core::storage::StoreError;

const INBOUND_COLUMNS: &str =
    "id, list_id, role, bounce_token, recipient, envelope_from, raw, received_at, state, outcome";

fn inbound_row(r: &dyn SqlRow) -> Result<InboundMessage, StoreError> {
    let role = r.text(2)?;
    Ok(InboundMessage {
        id: InboundId::from_stored(r.i64(0)?),
        list_id: ListId::from_stored(r.i64(1)?),
        role: Role::from_stored(&role, r.opt_text(3)?).ok_or_else(|| corrupt("inbound role", &role))?,
        recipient: r.text(4)?,
        envelope_from: r.opt_text(5)?,
        raw: r.bytes(6)?,
        received_at: Timestamp::from_unix_micros(r.i64(7)?),
        state: parsed("inbound state", &r.text(8)?, InboundState::parse)?,
        outcome: r.opt_text(9)?,
    })
}

const HELD_COLUMNS: &str =
    "id, list_id, inbound_id, raw, envelope_from, from_addr, subject, message_id, received_at, reason, size";

/// The listing's columns: the message left out, as an empty byte string (spelled per dialect).
fn held_listed(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "id, list_id, inbound_id, X'', envelope_from, from_addr, subject, message_id, received_at, reason, size"
        }
        Dialect::Postgres => {
            "id, list_id, inbound_id, ''::BYTEA, envelope_from, from_addr, subject, message_id, received_at, reason, size"
        }
    }
}

fn held_row(r: &dyn SqlRow) -> Result<HeldPost, StoreError> {
    Ok(HeldPost {
        id: HeldId::from_stored(r.i64(0)?),
        list_id: ListId::from_stored(r.i64(1)?),
        inbound_id: r.opt_i64(2)?.map(InboundId::from_stored),
        raw: r.bytes(3)?,
        envelope_from: r.opt_text(4)?,
        from: r.opt_text(5)?,
        subject: r.opt_text(6)?,
        message_id: r.opt_text(7)?,
        received_at: Timestamp::from_unix_micros(r.i64(8)?),
        reason: parsed("hold reason", &r.text(9)?, HoldReason::parse)?,
        size: u64::try_from(r.i64(10)?).unwrap_or(0),
    })
}

/// One inbound row, `received`; a row moved from the spool carries its key (a second move of the
/// same key inserts nothing). Its id, `None` when nothing was inserted.
fn insert_row(
    tx: &mut impl SqlTx,
    m: &NewInbound<'_>,
    received_at: Timestamp,
    spool_key: Option<&str>,
) -> Result<Option<InboundId>, StoreError> {
    let token = match m.role {
        Role::Bounces { token } => token.as_deref(),
        _ => None,
    };
    let id = tx.first(
        "INSERT INTO inbound (list_id, role, bounce_token, recipient, envelope_from, raw, size, received_at, state,
                              spool_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'received', ?9)
         ON CONFLICT (spool_key) WHERE spool_key IS NOT NULL DO NOTHING RETURNING id",
        &[
            m.list_id.get().into(),
            m.role.as_str().into(),
            token.into(),
            m.recipient.into(),
            m.envelope_from.into(),
            m.raw.into(),
            (m.raw.len() as i64).into(),
            received_at.unix_micros().into(),
            spool_key.into(),
        ],
        |r| r.i64(0),
    )?;
    Ok(id.map(InboundId::from_stored))
}

pub fn insert_inbound(tx: &mut impl SqlTx, m: &NewInbound<'_>, now: Timestamp) -> Result<InboundId, StoreError> {
    insert_row(tx, m, now, None)?
        .ok_or_else(|| StoreError::Backend("an inbound message inserted without its id".into()))
}

pub fn insert_spooled(
    tx: &mut impl SqlTx,
    m: &NewInbound<'_>,
    key: &str,
    received_at: Timestamp,
) -> Result<Option<InboundId>, StoreError> {
    insert_row(tx, m, received_at, Some(key))
}

pub fn inbound_by_spool_key(tx: &mut impl SqlTx, key: &str) -> Result<Option<InboundId>, StoreError> {
    tx.first("SELECT id FROM inbound WHERE spool_key = ?1", &[key.into()], |r| Ok(InboundId::from_stored(r.i64(0)?)))
}

pub fn inbound_by_id(tx: &mut impl SqlTx, id: InboundId) -> Result<Option<InboundMessage>, StoreError> {
    tx.first(&format!("SELECT {INBOUND_COLUMNS} FROM inbound WHERE id = ?1"), &[id.get().into()], inbound_row)
}

pub fn inbound_waiting(
    tx: &mut impl SqlTx,
    after: Option<InboundId>,
    limit: u32,
) -> Result<Vec<InboundId>, StoreError> {
    tx.rows(
        "SELECT id FROM inbound WHERE state = 'received' AND id > ?1 ORDER BY id LIMIT ?2",
        &[after.map_or(0, InboundId::get).into(), limit.into()],
        |r| Ok(InboundId::from_stored(r.i64(0)?)),
    )
}

pub fn finish_inbound(tx: &mut impl SqlTx, id: InboundId, outcome: &str, now: Timestamp) -> Result<bool, StoreError> {
    let n = tx.run(
        "UPDATE inbound SET state = 'done', outcome = ?2, processed_at = ?3 WHERE id = ?1 AND state = 'received'",
        &[id.get().into(), outcome.into(), now.unix_micros().into()],
    )?;
    Ok(n == 1)
}

pub fn message_id_seen(
    tx: &mut impl SqlTx,
    list: ListId,
    message_id: &str,
    since: Timestamp,
) -> Result<bool, StoreError> {
    let seen = tx.first(
        "SELECT EXISTS (SELECT 1 FROM sends WHERE list_id = ?1 AND message_id = ?2 AND created_at > ?3)
             OR EXISTS (SELECT 1 FROM held_posts WHERE list_id = ?1 AND message_id = ?2 AND received_at > ?3)",
        &[list.get().into(), message_id.into(), since.unix_micros().into()],
        |r| r.bool(0),
    )?;
    Ok(seen.unwrap_or(false))
}

pub fn insert_held(tx: &mut impl SqlTx, h: &NewHeldPost<'_>, now: Timestamp) -> Result<HeldId, StoreError> {
    let id = tx.first(
        "INSERT INTO held_posts (list_id, inbound_id, raw, envelope_from, from_addr, subject, message_id,
                                 received_at, reason, size)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id",
        &[
            h.list_id.get().into(),
            h.inbound_id.map(InboundId::get).into(),
            h.raw.into(),
            h.envelope_from.into(),
            h.from.into(),
            h.subject.into(),
            h.message_id.into(),
            now.unix_micros().into(),
            h.reason.as_str().into(),
            (h.raw.len() as i64).into(),
        ],
        |r| r.i64(0),
    )?;
    id.map(HeldId::from_stored).ok_or_else(|| StoreError::Backend("a held post inserted without its id".into()))
}

pub fn held_by_id(tx: &mut impl SqlTx, list: ListId, id: HeldId) -> Result<Option<HeldPost>, StoreError> {
    tx.first(
        &format!("SELECT {HELD_COLUMNS} FROM held_posts WHERE id = ?1 AND list_id = ?2"),
        &[id.get().into(), list.get().into()],
        held_row,
    )
}

pub fn held_posts(tx: &mut impl SqlTx, list: ListId, page: Page) -> Result<Paged<HeldPost>, StoreError> {
    let listed = held_listed(tx.dialect());
    paged(
        tx,
        "SELECT COUNT(*) FROM held_posts WHERE list_id = ?1",
        &format!("SELECT {listed} FROM held_posts WHERE list_id = ?1 ORDER BY id"),
        &[list.get().into()],
        page,
        held_row,
    )
}

pub fn delete_held(tx: &mut impl SqlTx, list: ListId, id: HeldId) -> Result<bool, StoreError> {
    let n = tx.run("DELETE FROM held_posts WHERE id = ?1 AND list_id = ?2", &[id.get().into(), list.get().into()])?;
    Ok(n == 1)
}

/// Implements `mailing::ports::InboxRepo` for an adapter's transaction (an [`SqlTx`]) with the
/// shared statements of this module.
#[macro_export]
macro_rules! inbox_repo {
    ($tx:ty) => {
        impl ::courrier_core::mailing::ports::InboxRepo for $tx {
            fn insert_inbound(
                &mut self,
                m: &::courrier_core::mailing::ports::NewInbound<'_>,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<::courrier_core::mailing::model::InboundId, ::courrier_core::storage::StoreError> {
                $crate::inbound::insert_inbound(self, m, now)
            }
            fn inbound_by_id(
                &mut self,
                id: ::courrier_core::mailing::model::InboundId,
            ) -> Result<Option<::courrier_core::mailing::model::InboundMessage>, ::courrier_core::storage::StoreError>
            {
                $crate::inbound::inbound_by_id(self, id)
            }
            fn inbound_waiting(
                &mut self,
                after: Option<::courrier_core::mailing::model::InboundId>,
                limit: u32,
            ) -> Result<Vec<::courrier_core::mailing::model::InboundId>, ::courrier_core::storage::StoreError> {
                $crate::inbound::inbound_waiting(self, after, limit)
            }
            fn finish_inbound(
                &mut self,
                id: ::courrier_core::mailing::model::InboundId,
                outcome: &str,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<bool, ::courrier_core::storage::StoreError> {
                $crate::inbound::finish_inbound(self, id, outcome, now)
            }
            fn insert_spooled(
                &mut self,
                m: &::courrier_core::mailing::ports::NewInbound<'_>,
                key: &str,
                received_at: ::courrier_core::kernel::Timestamp,
            ) -> Result<Option<::courrier_core::mailing::model::InboundId>, ::courrier_core::storage::StoreError> {
                $crate::inbound::insert_spooled(self, m, key, received_at)
            }
            fn inbound_by_spool_key(
                &mut self,
                key: &str,
            ) -> Result<Option<::courrier_core::mailing::model::InboundId>, ::courrier_core::storage::StoreError> {
                $crate::inbound::inbound_by_spool_key(self, key)
            }
            fn message_id_seen(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                message_id: &str,
                since: ::courrier_core::kernel::Timestamp,
            ) -> Result<bool, ::courrier_core::storage::StoreError> {
                $crate::inbound::message_id_seen(self, list, message_id, since)
            }
            fn insert_held(
                &mut self,
                h: &::courrier_core::mailing::ports::NewHeldPost<'_>,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<::courrier_core::mailing::model::HeldId, ::courrier_core::storage::StoreError> {
                $crate::inbound::insert_held(self, h, now)
            }
            fn held_by_id(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                id: ::courrier_core::mailing::model::HeldId,
            ) -> Result<Option<::courrier_core::mailing::model::HeldPost>, ::courrier_core::storage::StoreError> {
                $crate::inbound::held_by_id(self, list, id)
            }
            fn held_posts(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                page: ::courrier_core::kernel::Page,
            ) -> Result<
                ::courrier_core::kernel::Paged<::courrier_core::mailing::model::HeldPost>,
                ::courrier_core::storage::StoreError,
            > {
                $crate::inbound::held_posts(self, list, page)
            }
            fn delete_held(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                id: ::courrier_core::mailing::model::HeldId,
            ) -> Result<bool, ::courrier_core::storage::StoreError> {
                $crate::inbound::delete_held(self, list, id)
            }
        }
    };
}
