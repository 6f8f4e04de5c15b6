//! The inbound store (messages received by mail) and the held posts.

use super::access::corrupt;
use super::{SqliteTx, map_err, paged};
use courrier_core::kernel::{Page, Paged, Timestamp};
use courrier_core::mailing::inbound::{InboundId, InboundMessage, InboundState, Role};
use courrier_core::mailing::model::ListId;
use courrier_core::mailing::ports::{InboxRepo, NewHeldPost, NewInbound};
use courrier_core::mailing::posts::{HeldId, HeldPost, HoldReason};
use courrier_core::storage::StoreError;
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, params};

const INBOUND_COLUMNS: &str =
    "id, list_id, role, bounce_token, recipient, envelope_from, raw, received_at, state, outcome";

fn inbound_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InboundMessage> {
    let role: String = r.get(2)?;
    let state: String = r.get(8)?;
    Ok(InboundMessage {
        id: InboundId::from_stored(r.get(0)?),
        list_id: ListId::from_stored(r.get(1)?),
        role: Role::from_stored(&role, r.get(3)?).ok_or_else(|| corrupt("inbound role", &role))?,
        recipient: r.get(4)?,
        envelope_from: r.get(5)?,
        raw: r.get(6)?,
        received_at: Timestamp::from_unix_micros(r.get(7)?),
        state: InboundState::parse(&state).ok_or_else(|| corrupt("inbound state", &state))?,
        outcome: r.get(9)?,
    })
}

const HELD_COLUMNS: &str =
    "id, list_id, inbound_id, raw, envelope_from, from_addr, subject, message_id, received_at, reason, size";
/// The listing leaves the message out.
const HELD_LISTED: &str =
    "id, list_id, inbound_id, X'', envelope_from, from_addr, subject, message_id, received_at, reason, size";

fn held_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HeldPost> {
    let reason: String = r.get(9)?;
    Ok(HeldPost {
        id: HeldId::from_stored(r.get(0)?),
        list_id: ListId::from_stored(r.get(1)?),
        inbound_id: r.get::<_, Option<i64>>(2)?.map(InboundId::from_stored),
        raw: r.get(3)?,
        envelope_from: r.get(4)?,
        from: r.get(5)?,
        subject: r.get(6)?,
        message_id: r.get(7)?,
        received_at: Timestamp::from_unix_micros(r.get(8)?),
        reason: HoldReason::parse(&reason).ok_or_else(|| corrupt("hold reason", &reason))?,
        size: u64::try_from(r.get::<_, i64>(10)?).unwrap_or(0),
    })
}

/// One inbound row, `received`; a row moved from the spool carries its key (a second move of the
/// same key inserts nothing). The number of rows inserted.
fn insert_row(
    tx: &SqliteTx,
    m: &NewInbound<'_>,
    received_at: Timestamp,
    spool_key: Option<&str>,
) -> Result<usize, StoreError> {
    let token = match m.role {
        Role::Bounces { token } => token.as_deref(),
        _ => None,
    };
    tx.conn()
        .prepare_cached(
            "INSERT INTO inbound (list_id, role, bounce_token, recipient, envelope_from, raw, size, received_at, state, spool_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'received', ?9)
             ON CONFLICT (spool_key) WHERE spool_key IS NOT NULL DO NOTHING",
        )
        .and_then(|mut st| {
            st.execute(params![
                m.list_id.get(),
                m.role.as_str(),
                token,
                m.recipient,
                m.envelope_from,
                m.raw,
                m.raw.len() as i64,
                received_at.unix_micros(),
                spool_key
            ])
        })
        .map_err(map_err)
}

impl InboxRepo for SqliteTx {
    fn insert_inbound(&mut self, m: &NewInbound<'_>, now: Timestamp) -> Result<InboundId, StoreError> {
        insert_row(self, m, now, None)?;
        Ok(InboundId::from_stored(self.conn().last_insert_rowid()))
    }

    fn insert_spooled(
        &mut self,
        m: &NewInbound<'_>,
        key: &str,
        received_at: Timestamp,
    ) -> Result<Option<InboundId>, StoreError> {
        let n = insert_row(self, m, received_at, Some(key))?;
        Ok((n == 1).then(|| InboundId::from_stored(self.conn().last_insert_rowid())))
    }

    fn inbound_by_spool_key(&mut self, key: &str) -> Result<Option<InboundId>, StoreError> {
        self.conn()
            .prepare_cached("SELECT id FROM inbound WHERE spool_key = ?1")
            .and_then(|mut st| st.query_row([key], |r| Ok(InboundId::from_stored(r.get(0)?))).optional())
            .map_err(map_err)
    }

    fn inbound_by_id(&mut self, id: InboundId) -> Result<Option<InboundMessage>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {INBOUND_COLUMNS} FROM inbound WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.get()], inbound_row).optional())
            .map_err(map_err)
    }

    fn inbound_waiting(&mut self, after: Option<InboundId>, limit: u32) -> Result<Vec<InboundId>, StoreError> {
        self.conn()
            .prepare_cached("SELECT id FROM inbound WHERE state = 'received' AND id > ?1 ORDER BY id LIMIT ?2")
            .and_then(|mut st| {
                st.query_map(params![after.map_or(0, InboundId::get), limit], |r| {
                    Ok(InboundId::from_stored(r.get(0)?))
                })?
                .collect()
            })
            .map_err(map_err)
    }

    fn finish_inbound(&mut self, id: InboundId, outcome: &str, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE inbound SET state = 'done', outcome = ?2, processed_at = ?3 WHERE id = ?1 AND state = 'received'",
            )
            .and_then(|mut st| st.execute(params![id.get(), outcome, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n == 1)
    }

    fn message_id_seen(&mut self, list: ListId, message_id: &str, since: Timestamp) -> Result<bool, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM sends WHERE list_id = ?1 AND message_id = ?2 AND created_at > ?3)
                     OR EXISTS (SELECT 1 FROM held_posts WHERE list_id = ?1 AND message_id = ?2 AND received_at > ?3)",
            )
            .and_then(|mut st| st.query_row(params![list.get(), message_id, since.unix_micros()], |r| r.get(0)))
            .map_err(map_err)
    }

    fn insert_held(&mut self, h: &NewHeldPost<'_>, now: Timestamp) -> Result<HeldId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO held_posts (list_id, inbound_id, raw, envelope_from, from_addr, subject, message_id, received_at, reason, size)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    h.list_id.get(),
                    h.inbound_id.map(InboundId::get),
                    h.raw,
                    h.envelope_from,
                    h.from,
                    h.subject,
                    h.message_id,
                    now.unix_micros(),
                    h.reason.as_str(),
                    h.raw.len() as i64
                ])
            })
            .map_err(map_err)?;
        Ok(HeldId::from_stored(self.conn().last_insert_rowid()))
    }

    fn held_by_id(&mut self, list: ListId, id: HeldId) -> Result<Option<HeldPost>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {HELD_COLUMNS} FROM held_posts WHERE id = ?1 AND list_id = ?2"))
            .and_then(|mut st| st.query_row(params![id.get(), list.get()], held_row).optional())
            .map_err(map_err)
    }

    fn held_posts(&mut self, list: ListId, page: Page) -> Result<Paged<HeldPost>, StoreError> {
        paged(
            self.conn(),
            "SELECT COUNT(*) FROM held_posts WHERE list_id = ?1",
            &format!("SELECT {HELD_LISTED} FROM held_posts WHERE list_id = ?1 ORDER BY id"),
            vec![Value::Integer(list.get())],
            page,
            held_row,
        )
    }

    fn delete_held(&mut self, list: ListId, id: HeldId) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM held_posts WHERE id = ?1 AND list_id = ?2")
            .and_then(|mut st| st.execute(params![id.get(), list.get()]))
            .map_err(map_err)?;
        Ok(n == 1)
    }
}
