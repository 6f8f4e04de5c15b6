//! The inbound store (messages received by mail) and the held posts on PostgreSQL (the SQLite
//! adapter's `inbound.rs`).

use super::mailing::parsed;
use super::{PgTx, corrupt, get, paged};
use courrier_core::kernel::{Page, Paged, Timestamp};
use courrier_core::mailing::model::{
    HeldId, HeldPost, HoldReason, InboundId, InboundMessage, InboundState, ListId, Role,
};
use courrier_core::mailing::ports::{InboxRepo, NewHeldPost, NewInbound};
use courrier_core::storage::StoreError;
use postgres::Row;

const INBOUND_COLUMNS: &str =
    "id, list_id, role, bounce_token, recipient, envelope_from, raw, received_at, state, outcome";

fn inbound_row(r: &Row) -> Result<InboundMessage, StoreError> {
    let role: String = get(r, 2)?;
    Ok(InboundMessage {
        id: InboundId::from_stored(get(r, 0)?),
        list_id: ListId::from_stored(get(r, 1)?),
        role: Role::from_stored(&role, get(r, 3)?).ok_or_else(|| corrupt("inbound role", &role))?,
        recipient: get(r, 4)?,
        envelope_from: get(r, 5)?,
        raw: get(r, 6)?,
        received_at: Timestamp::from_unix_micros(get(r, 7)?),
        state: parsed(r, 8, "inbound state", InboundState::parse)?,
        outcome: get(r, 9)?,
    })
}

const HELD_COLUMNS: &str =
    "id, list_id, inbound_id, raw, envelope_from, from_addr, subject, message_id, received_at, reason, size";
/// The listing leaves the message out.
const HELD_LISTED: &str = "id, list_id, inbound_id, ''::BYTEA, envelope_from, from_addr, subject, message_id, \
    received_at, reason, size";

fn held_row(r: &Row) -> Result<HeldPost, StoreError> {
    Ok(HeldPost {
        id: HeldId::from_stored(get(r, 0)?),
        list_id: ListId::from_stored(get(r, 1)?),
        inbound_id: get::<Option<i64>>(r, 2)?.map(InboundId::from_stored),
        raw: get(r, 3)?,
        envelope_from: get(r, 4)?,
        from: get(r, 5)?,
        subject: get(r, 6)?,
        message_id: get(r, 7)?,
        received_at: Timestamp::from_unix_micros(get(r, 8)?),
        reason: parsed(r, 9, "hold reason", HoldReason::parse)?,
        size: u64::try_from(get::<i64>(r, 10)?).unwrap_or(0),
    })
}

impl InboxRepo for PgTx {
    fn insert_inbound(&mut self, m: &NewInbound<'_>, now: Timestamp) -> Result<InboundId, StoreError> {
        let token = match m.role {
            Role::Bounces { token } => token.as_deref(),
            _ => None,
        };
        let row = self.query_one(
            "INSERT INTO inbound (list_id, role, bounce_token, recipient, envelope_from, raw, size, received_at, state)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'received') RETURNING id",
            &[
                &m.list_id.get(),
                &m.role.as_str(),
                &token,
                &m.recipient,
                &m.envelope_from,
                &m.raw,
                &(m.raw.len() as i64),
                &now.unix_micros(),
            ],
        )?;
        Ok(InboundId::from_stored(get(&row, 0)?))
    }

    fn inbound_by_id(&mut self, id: InboundId) -> Result<Option<InboundMessage>, StoreError> {
        let row = self.query_opt(&format!("SELECT {INBOUND_COLUMNS} FROM inbound WHERE id = $1"), &[&id.get()])?;
        row.as_ref().map(inbound_row).transpose()
    }

    fn inbound_waiting(&mut self, after: Option<InboundId>, limit: u32) -> Result<Vec<InboundId>, StoreError> {
        let rows = self.query(
            "SELECT id FROM inbound WHERE state = 'received' AND id > $1 ORDER BY id LIMIT $2",
            &[&after.map_or(0, InboundId::get), &i64::from(limit)],
        )?;
        rows.iter().map(|r| Ok(InboundId::from_stored(get(r, 0)?))).collect()
    }

    fn finish_inbound(&mut self, id: InboundId, outcome: &str, now: Timestamp) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE inbound SET state = 'done', outcome = $2, processed_at = $3 WHERE id = $1 AND state = 'received'",
            &[&id.get(), &outcome, &now.unix_micros()],
        )?;
        Ok(n == 1)
    }

    fn message_id_seen(&mut self, list: ListId, message_id: &str, since: Timestamp) -> Result<bool, StoreError> {
        let row = self.query_one(
            "SELECT EXISTS (SELECT 1 FROM sends WHERE list_id = $1 AND message_id = $2 AND created_at > $3)
                 OR EXISTS (SELECT 1 FROM held_posts WHERE list_id = $1 AND message_id = $2 AND received_at > $3)",
            &[&list.get(), &message_id, &since.unix_micros()],
        )?;
        get(&row, 0)
    }

    fn insert_held(&mut self, h: &NewHeldPost<'_>, now: Timestamp) -> Result<HeldId, StoreError> {
        let row = self.query_one(
            "INSERT INTO held_posts (list_id, inbound_id, raw, envelope_from, from_addr, subject, message_id,
                                     received_at, reason, size)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
            &[
                &h.list_id.get(),
                &h.inbound_id.map(InboundId::get),
                &h.raw,
                &h.envelope_from,
                &h.from,
                &h.subject,
                &h.message_id,
                &now.unix_micros(),
                &h.reason.as_str(),
                &(h.raw.len() as i64),
            ],
        )?;
        Ok(HeldId::from_stored(get(&row, 0)?))
    }

    fn held_by_id(&mut self, list: ListId, id: HeldId) -> Result<Option<HeldPost>, StoreError> {
        let row = self.query_opt(
            &format!("SELECT {HELD_COLUMNS} FROM held_posts WHERE id = $1 AND list_id = $2"),
            &[&id.get(), &list.get()],
        )?;
        row.as_ref().map(held_row).transpose()
    }

    fn held_posts(&mut self, list: ListId, page: Page) -> Result<Paged<HeldPost>, StoreError> {
        paged(
            self,
            "SELECT COUNT(*) FROM held_posts WHERE list_id = $1",
            &format!("SELECT {HELD_LISTED} FROM held_posts WHERE list_id = $1 ORDER BY id"),
            &[&list.get()],
            page,
            held_row,
        )
    }

    fn delete_held(&mut self, list: ListId, id: HeldId) -> Result<bool, StoreError> {
        let n = self.execute("DELETE FROM held_posts WHERE id = $1 AND list_id = $2", &[&id.get(), &list.get()])?;
        Ok(n == 1)
    }
}
