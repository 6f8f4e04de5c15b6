use super::access::{corrupt, ts};
use super::lease::LeasedQueue;
use super::{SqliteTx, map_err};
use courrier_core::kernel::{EmailAddress, Timestamp};
use courrier_core::mailing::model::{
    Copy, CopyCounts, CopyId, CopyState, DeliveryMode, ListId, MemberId, SendId, SendRecord, SendState,
};
use courrier_core::mailing::ports::{NewSend, SendRepo};
use courrier_core::storage::StoreError;
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, params};
use std::sync::LazyLock;

fn counts(rows: Vec<(String, i64)>) -> Result<CopyCounts, StoreError> {
    rows.into_iter()
        .map(|(s, n)| {
            let state = CopyState::parse(&s).ok_or_else(|| map_err(corrupt("copy state", &s)))?;
            Ok((state, u64::try_from(n).unwrap_or(0)))
        })
        .collect::<Result<Vec<_>, StoreError>>()
        .map(CopyCounts)
}

/// Copies waiting for delivery, leased to the delivery workers. A claim takes the due copies of
/// lists whose sending is not suspended, oldest due first. A batch in flight is told by its
/// lease's end, which one claim sets for all its copies: a destination domain with `per_domain`
/// (`?4`) of them leased waits for one to finish.
pub(super) static COPIES: LazyLock<LeasedQueue> = LazyLock::new(|| {
    LeasedQueue::new(
        "copies",
        "state IN ('queued', 'deferred')",
        "SELECT c.id FROM copies c JOIN lists l ON l.id = c.list_id
         WHERE c.state IN ('queued', 'deferred') AND c.next_attempt_at <= ?1 AND l.send_suspended = 0
           AND NOT EXISTS (
               SELECT 1 FROM mail_credentials mc
               WHERE mc.list_id = c.list_id AND mc.kind = 'submission' AND mc.throttled_until > ?1)
           AND c.dest_domain NOT IN (
               SELECT dest_domain FROM copies WHERE state = 'sending' AND lease_until >= ?1
               GROUP BY dest_domain HAVING COUNT(DISTINCT lease_until) >= ?4)
         ORDER BY c.next_attempt_at, c.id LIMIT ?3",
        "id, send_id, list_id, member_id, recipient, attempts, created_at",
    )
});

const SEND_COLUMNS: &str =
    "id, list_id, subject, text_body, html_body, message_id, state, recipients, created_at, completed_at";

fn send_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SendRecord> {
    let state: String = r.get(6)?;
    Ok(SendRecord {
        id: SendId::from_stored(r.get(0)?),
        list_id: ListId::from_stored(r.get(1)?),
        subject: r.get(2)?,
        text: r.get(3)?,
        html: r.get(4)?,
        message_id: r.get(5)?,
        state: SendState::parse(&state).ok_or_else(|| corrupt("send state", &state))?,
        recipients: u64::try_from(r.get::<_, i64>(7)?).unwrap_or(0),
        created_at: Timestamp::from_unix_micros(r.get(8)?),
        completed_at: ts(r.get(9)?),
    })
}

impl SendRepo for SqliteTx {
    fn insert_send(&mut self, s: &NewSend<'_>, now: Timestamp) -> Result<SendId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO sends (list_id, subject, text_body, html_body, message_id, state, recipients, created_by, created_at, kind, raw_message)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 0, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    s.list_id.get(),
                    s.subject,
                    s.text,
                    s.html,
                    s.message_id,
                    s.created_by,
                    now.unix_micros(),
                    s.kind.as_str(),
                    s.raw
                ])
            })
            .map_err(map_err)?;
        Ok(SendId::from_stored(self.conn().last_insert_rowid()))
    }

    fn fan_out(&mut self, send: SendId, list: ListId, mode: DeliveryMode, now: Timestamp) -> Result<u64, StoreError> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO copies (send_id, list_id, member_id, recipient, dest_domain, state, next_attempt_at, created_at, updated_at)
                 SELECT ?1, list_id, id, email, lower(substr(email, instr(email, '@') + 1)), 'queued', ?3, ?3, ?3
                 FROM members WHERE list_id = ?2 AND status = 'active' AND delivery_mode = ?4 ORDER BY id",
            )
            .and_then(|mut st| st.execute(params![send.get(), list.get(), now.unix_micros(), mode.as_str()]))
            .map_err(map_err)?;
        self.conn()
            .prepare_cached("UPDATE sends SET recipients = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![send.get(), n as i64]))
            .map_err(map_err)?;
        Ok(n as u64)
    }

    fn send_by_id(&mut self, list: ListId, id: SendId) -> Result<Option<SendRecord>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {SEND_COLUMNS} FROM sends WHERE id = ?1 AND list_id = ?2"))
            .and_then(|mut st| st.query_row(params![id.get(), list.get()], send_row).optional())
            .map_err(map_err)
    }

    fn send_raw(&mut self, id: SendId) -> Result<Option<Vec<u8>>, StoreError> {
        self.conn()
            .prepare_cached("SELECT raw_message FROM sends WHERE id = ?1")
            .and_then(|mut st| st.query_row([id.get()], |r| r.get::<_, Option<Vec<u8>>>(0)).optional())
            .map(Option::flatten)
            .map_err(map_err)
    }

    fn posts_between(
        &mut self,
        list: ListId,
        after: Option<Timestamp>,
        until: Timestamp,
    ) -> Result<Vec<SendRecord>, StoreError> {
        self.conn()
            .prepare_cached(&format!(
                "SELECT {SEND_COLUMNS} FROM sends
                 WHERE list_id = ?1 AND kind = 'post' AND state != 'cancelled' AND created_at > ?2 AND created_at <= ?3
                 ORDER BY created_at, id"
            ))
            .and_then(|mut st| {
                st.query_map(
                    params![list.get(), after.map_or(i64::MIN, Timestamp::unix_micros), until.unix_micros()],
                    send_row,
                )?
                .collect()
            })
            .map_err(map_err)
    }

    fn digest_state(&mut self, list: ListId) -> Result<Option<(Timestamp, Timestamp)>, StoreError> {
        self.conn()
            .prepare_cached("SELECT covered_until, last_run_at FROM digest_state WHERE list_id = ?1")
            .and_then(|mut st| {
                st.query_row([list.get()], |r| {
                    Ok((Timestamp::from_unix_micros(r.get(0)?), Timestamp::from_unix_micros(r.get(1)?)))
                })
                .optional()
            })
            .map_err(map_err)
    }

    fn set_digest_state(&mut self, list: ListId, covered_until: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO digest_state (list_id, covered_until, last_run_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (list_id) DO UPDATE SET covered_until = ?2, last_run_at = ?3",
            )
            .and_then(|mut st| st.execute(params![list.get(), covered_until.unix_micros(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn lists_with_digest_members(&mut self) -> Result<Vec<ListId>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT list_id FROM member_tallies WHERE status = 'active' AND delivery_mode = 'digest' AND n > 0 ORDER BY list_id",
            )
            .and_then(|mut st| st.query_map([], |r| Ok(ListId::from_stored(r.get(0)?)))?.collect())
            .map_err(map_err)
    }

    fn copy_counts(&mut self, send: SendId) -> Result<CopyCounts, StoreError> {
        let rows = self
            .conn()
            .prepare_cached("SELECT state, COUNT(*) FROM copies WHERE send_id = ?1 GROUP BY state")
            .and_then(|mut st| st.query_map([send.get()], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(map_err)?;
        counts(rows)
    }

    fn cancel_waiting(&mut self, send: SendId, now: Timestamp) -> Result<u64, StoreError> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE copies SET state = 'cancelled', updated_at = ?2 WHERE send_id = ?1 AND state IN ('queued', 'deferred')",
            )
            .and_then(|mut st| st.execute(params![send.get(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n as u64)
    }

    fn claim_copies(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
        per_domain: u32,
    ) -> Result<Vec<Copy>, StoreError> {
        let args = params![now.unix_micros(), lease_until.unix_micros(), i64::from(limit), i64::from(per_domain)];
        let rows: Vec<(i64, i64, i64, i64, String, i64, i64)> = COPIES.claim(self.conn(), args, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
        })?;
        rows.into_iter()
            .map(|(id, send, list, member, recipient, attempts, created_at)| {
                Ok(Copy {
                    id: CopyId::from_stored(id),
                    send_id: SendId::from_stored(send),
                    list_id: ListId::from_stored(list),
                    member_id: MemberId::from_stored(member),
                    recipient: EmailAddress::parse(&recipient)
                        .map_err(|_| map_err(corrupt("recipient", &recipient)))?,
                    attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                    created_at: Timestamp::from_unix_micros(created_at),
                })
            })
            .collect()
    }

    fn copies_due(&mut self, now: Timestamp) -> Result<bool, StoreError> {
        COPIES.due(self.conn(), now)
    }

    fn requeue_expired(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        COPIES.requeue_expired(self.conn(), now)
    }

    fn finish_copy(
        &mut self,
        id: CopyId,
        state: CopyState,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        COPIES.finish(self.conn(), id.get(), state.as_str(), next_attempt_at, error, now)
    }

    fn release_copy(&mut self, id: CopyId, at: Timestamp) -> Result<(), StoreError> {
        COPIES.release(self.conn(), id.get(), at)
    }

    fn settled_sends(&mut self, limit: u32) -> Result<Vec<SendId>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT s.id FROM sends s WHERE s.state IN ('queued', 'sending') AND NOT EXISTS (
                     SELECT 1 FROM copies c WHERE c.send_id = s.id AND c.state IN ('queued', 'deferred', 'sending'))
                 ORDER BY s.id LIMIT ?1",
            )
            .and_then(|mut st| st.query_map([i64::from(limit)], |r| Ok(SendId::from_stored(r.get(0)?)))?.collect())
            .map_err(map_err)
    }

    fn close_send(&mut self, id: SendId, state: SendState, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE sends SET state = ?2, completed_at = ?3 WHERE id = ?1 AND state IN ('queued', 'sending')",
            )
            .and_then(|mut st| st.execute(params![id.get(), state.as_str(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n == 1)
    }

    fn mark_sending(&mut self, id: SendId) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE sends SET state = 'sending' WHERE id = ?1 AND state = 'queued'")
            .and_then(|mut st| st.execute([id.get()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn send_list(&mut self, id: SendId) -> Result<Option<ListId>, StoreError> {
        self.conn()
            .prepare_cached("SELECT list_id FROM sends WHERE id = ?1")
            .and_then(|mut st| st.query_row([id.get()], |r| Ok(ListId::from_stored(r.get(0)?))).optional())
            .map_err(map_err)
    }

    fn queue_stats(&mut self) -> Result<(CopyCounts, Option<Timestamp>), StoreError> {
        let rows = self
            .conn()
            .prepare_cached(
                "SELECT state, COUNT(*) FROM copies WHERE state IN ('queued', 'deferred', 'sending') GROUP BY state",
            )
            .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(map_err)?;
        let oldest: Option<i64> = self
            .conn()
            .prepare_cached("SELECT MIN(created_at) FROM copies WHERE state IN ('queued', 'deferred')")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(map_err)?;
        Ok((counts(rows)?, ts(oldest)))
    }

    fn open_sends(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
        let (filter, args): (String, Vec<Value>) = match lists {
            None => (String::new(), Vec::new()),
            Some(ids) => {
                let args: Vec<Value> = ids.iter().map(|i| Value::Integer(i.get())).collect();
                let marks: Vec<String> = (1..=args.len()).map(|i| format!("?{i}")).collect();
                (format!(" AND list_id IN ({})", marks.join(", ")), args)
            }
        };
        let n: i64 = self
            .conn()
            .prepare(&format!("SELECT COUNT(*) FROM sends WHERE state IN ('queued', 'sending'){filter}"))
            .and_then(|mut st| st.query_row(rusqlite::params_from_iter(&args), |r| r.get(0)))
            .map_err(map_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
