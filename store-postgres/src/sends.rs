//! Sends and the leased queue of their copies on PostgreSQL (the SQLite adapter's `sends.rs`).

use super::lease::LeasedQueue;
use super::mailing::{address, count, ids, parsed, ts};
use super::{PgTx, get};
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::model::{
    Copy, CopyCounts, CopyId, CopyState, DeliveryMode, ListId, MemberId, SendId, SendRecord, SendState,
};
use courrier_core::mailing::ports::{NewSend, SendRepo};
use courrier_core::storage::StoreError;
use postgres::Row;
use std::sync::LazyLock;

fn counts(rows: &[Row]) -> Result<CopyCounts, StoreError> {
    rows.iter()
        .map(|r| Ok((parsed(r, 0, "copy state", CopyState::parse)?, u64::try_from(get::<i64>(r, 1)?).unwrap_or(0))))
        .collect::<Result<Vec<_>, StoreError>>()
        .map(CopyCounts)
}

/// Copies waiting for delivery. A claim takes the due copies of lists whose sending is not
/// suspended, oldest due first, skipping the rows another claim holds. A batch in flight is told
/// by its lease's end, which one claim sets for all its copies: a destination domain with
/// `per_domain` (`$4`) of them leased waits for one to finish.
pub(super) static COPIES: LazyLock<LeasedQueue> = LazyLock::new(|| {
    LeasedQueue::new(
        "copies",
        "state IN ('queued', 'deferred')",
        "SELECT c.id FROM copies c JOIN lists l ON l.id = c.list_id
         WHERE c.state IN ('queued', 'deferred') AND c.next_attempt_at <= $1 AND NOT l.send_suspended
           AND NOT EXISTS (
               SELECT 1 FROM mail_credentials mc
               WHERE mc.list_id = c.list_id AND mc.kind = 'submission' AND mc.throttled_until > $1)
           AND c.dest_domain NOT IN (
               SELECT dest_domain FROM copies WHERE state = 'sending' AND lease_until >= $1
               GROUP BY dest_domain HAVING COUNT(DISTINCT lease_until) >= $4)
         ORDER BY c.next_attempt_at, c.id LIMIT $3
         FOR UPDATE OF c SKIP LOCKED",
        "id, send_id, list_id, member_id, recipient, attempts, created_at",
    )
});

const SEND_COLUMNS: &str =
    "id, list_id, subject, text_body, html_body, message_id, state, recipients, created_at, completed_at";

fn send_row(r: &Row) -> Result<SendRecord, StoreError> {
    Ok(SendRecord {
        id: SendId::from_stored(get(r, 0)?),
        list_id: ListId::from_stored(get(r, 1)?),
        subject: get(r, 2)?,
        text: get(r, 3)?,
        html: get(r, 4)?,
        message_id: get(r, 5)?,
        state: parsed(r, 6, "send state", SendState::parse)?,
        recipients: u64::try_from(get::<i64>(r, 7)?).unwrap_or(0),
        created_at: Timestamp::from_unix_micros(get(r, 8)?),
        completed_at: ts(get(r, 9)?),
    })
}

impl SendRepo for PgTx {
    fn insert_send(&mut self, s: &NewSend<'_>, now: Timestamp) -> Result<SendId, StoreError> {
        let row = self.query_one(
            "INSERT INTO sends (list_id, subject, text_body, html_body, message_id, state, recipients, created_by,
                                created_at, kind, raw_message)
             VALUES ($1, $2, $3, $4, $5, 'queued', 0, $6, $7, $8, $9) RETURNING id",
            &[
                &s.list_id.get(),
                &s.subject,
                &s.text,
                &s.html,
                &s.message_id,
                &s.created_by,
                &now.unix_micros(),
                &s.kind.as_str(),
                &s.raw,
            ],
        )?;
        Ok(SendId::from_stored(get(&row, 0)?))
    }

    fn fan_out(&mut self, send: SendId, list: ListId, mode: DeliveryMode, now: Timestamp) -> Result<u64, StoreError> {
        let n = self.execute(
            "INSERT INTO copies (send_id, list_id, member_id, recipient, dest_domain, state, next_attempt_at,
                                 created_at, updated_at)
             SELECT $1, list_id, id, email, lower(substr(email, strpos(email, '@') + 1)), 'queued', $3, $3, $3
             FROM members WHERE list_id = $2 AND status = 'active' AND delivery_mode = $4 ORDER BY id",
            &[&send.get(), &list.get(), &now.unix_micros(), &mode.as_str()],
        )?;
        self.execute("UPDATE sends SET recipients = $2 WHERE id = $1", &[&send.get(), &(n as i64)])?;
        Ok(n)
    }

    fn send_by_id(&mut self, list: ListId, id: SendId) -> Result<Option<SendRecord>, StoreError> {
        let row = self.query_opt(
            &format!("SELECT {SEND_COLUMNS} FROM sends WHERE id = $1 AND list_id = $2"),
            &[&id.get(), &list.get()],
        )?;
        row.as_ref().map(send_row).transpose()
    }

    fn send_raw(&mut self, id: SendId) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self.query_opt("SELECT raw_message FROM sends WHERE id = $1", &[&id.get()])?;
        Ok(row.as_ref().map(|r| get::<Option<Vec<u8>>>(r, 0)).transpose()?.flatten())
    }

    fn posts_between(
        &mut self,
        list: ListId,
        after: Option<Timestamp>,
        until: Timestamp,
    ) -> Result<Vec<SendRecord>, StoreError> {
        let rows = self.query(
            &format!(
                "SELECT {SEND_COLUMNS} FROM sends
                 WHERE list_id = $1 AND kind = 'post' AND state != 'cancelled' AND created_at > $2 AND created_at <= $3
                 ORDER BY created_at, id"
            ),
            &[&list.get(), &after.map_or(i64::MIN, Timestamp::unix_micros), &until.unix_micros()],
        )?;
        rows.iter().map(send_row).collect()
    }

    fn digest_state(&mut self, list: ListId) -> Result<Option<(Timestamp, Timestamp)>, StoreError> {
        let row =
            self.query_opt("SELECT covered_until, last_run_at FROM digest_state WHERE list_id = $1", &[&list.get()])?;
        row.map(|r| Ok((Timestamp::from_unix_micros(get(&r, 0)?), Timestamp::from_unix_micros(get(&r, 1)?))))
            .transpose()
    }

    fn set_digest_state(&mut self, list: ListId, covered_until: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO digest_state (list_id, covered_until, last_run_at) VALUES ($1, $2, $3)
             ON CONFLICT (list_id) DO UPDATE SET covered_until = $2, last_run_at = $3",
            &[&list.get(), &covered_until.unix_micros(), &now.unix_micros()],
        )?;
        Ok(())
    }

    fn lists_with_digest_members(&mut self) -> Result<Vec<ListId>, StoreError> {
        let rows = self.query(
            "SELECT list_id FROM member_tallies WHERE status = 'active' AND delivery_mode = 'digest' AND n > 0
             ORDER BY list_id",
            &[],
        )?;
        rows.iter().map(|r| Ok(ListId::from_stored(get(r, 0)?))).collect()
    }

    fn copy_counts(&mut self, send: SendId) -> Result<CopyCounts, StoreError> {
        let rows = self.query(
            "SELECT state, COUNT(*) FROM copies WHERE send_id = $1 GROUP BY state ORDER BY state",
            &[&send.get()],
        )?;
        counts(&rows)
    }

    fn cancel_waiting(&mut self, send: SendId, now: Timestamp) -> Result<u64, StoreError> {
        self.execute(
            "UPDATE copies SET state = 'cancelled', updated_at = $2 WHERE send_id = $1 AND state IN ('queued', 'deferred')",
            &[&send.get(), &now.unix_micros()],
        )
    }

    fn claim_copies(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
        per_domain: u32,
    ) -> Result<Vec<Copy>, StoreError> {
        let rows = COPIES.claim(
            self,
            &[&now.unix_micros(), &lease_until.unix_micros(), &i64::from(limit), &i64::from(per_domain)],
        )?;
        rows.iter()
            .map(|r| {
                Ok(Copy {
                    id: CopyId::from_stored(get(r, 0)?),
                    send_id: SendId::from_stored(get(r, 1)?),
                    list_id: ListId::from_stored(get(r, 2)?),
                    member_id: MemberId::from_stored(get(r, 3)?),
                    recipient: address(&get::<String>(r, 4)?)?,
                    attempts: u32::try_from(get::<i64>(r, 5)?).unwrap_or(u32::MAX),
                    created_at: Timestamp::from_unix_micros(get(r, 6)?),
                })
            })
            .collect()
    }

    fn copies_due(&mut self, now: Timestamp) -> Result<bool, StoreError> {
        COPIES.due(self, now)
    }

    fn requeue_expired(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        COPIES.requeue_expired(self, now)
    }

    fn finish_copy(
        &mut self,
        id: CopyId,
        state: CopyState,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        COPIES.finish(self, id.get(), state.as_str(), next_attempt_at, error, now)
    }

    fn release_copy(&mut self, id: CopyId, at: Timestamp) -> Result<(), StoreError> {
        COPIES.release(self, id.get(), at)
    }

    fn settled_sends(&mut self, limit: u32) -> Result<Vec<SendId>, StoreError> {
        let rows = self.query(
            "SELECT s.id FROM sends s WHERE s.state IN ('queued', 'sending') AND NOT EXISTS (
                 SELECT 1 FROM copies c WHERE c.send_id = s.id AND c.state IN ('queued', 'deferred', 'sending'))
             ORDER BY s.id LIMIT $1",
            &[&i64::from(limit)],
        )?;
        rows.iter().map(|r| Ok(SendId::from_stored(get(r, 0)?))).collect()
    }

    fn close_send(&mut self, id: SendId, state: SendState, now: Timestamp) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE sends SET state = $2, completed_at = $3 WHERE id = $1 AND state IN ('queued', 'sending')",
            &[&id.get(), &state.as_str(), &now.unix_micros()],
        )?;
        Ok(n == 1)
    }

    fn mark_sending(&mut self, id: SendId) -> Result<(), StoreError> {
        self.execute("UPDATE sends SET state = 'sending' WHERE id = $1 AND state = 'queued'", &[&id.get()])?;
        Ok(())
    }

    fn send_list(&mut self, id: SendId) -> Result<Option<ListId>, StoreError> {
        let row = self.query_opt("SELECT list_id FROM sends WHERE id = $1", &[&id.get()])?;
        row.map(|r| Ok(ListId::from_stored(get(&r, 0)?))).transpose()
    }

    fn queue_stats(&mut self) -> Result<(CopyCounts, Option<Timestamp>), StoreError> {
        let rows = self.query(
            "SELECT state, COUNT(*) FROM copies WHERE state IN ('queued', 'deferred', 'sending')
             GROUP BY state ORDER BY state",
            &[],
        )?;
        let oldest: Option<i64> =
            get(&self.query_one("SELECT MIN(created_at) FROM copies WHERE state IN ('queued', 'deferred')", &[])?, 0)?;
        Ok((counts(&rows)?, ts(oldest)))
    }

    fn open_sends(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
        let lists = lists.map(ids);
        count(&self.query_one(
            "SELECT COUNT(*) FROM sends WHERE state IN ('queued', 'sending') AND ($1::BIGINT[] IS NULL OR list_id = ANY($1))",
            &[&lists],
        )?)
    }
}
