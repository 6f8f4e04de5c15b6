use super::access::{corrupt, ts};
use super::{SqliteTx, map_err};
use courrier_core::kernel::{EmailAddress, Timestamp};
use courrier_core::mailing::model::{
    BounceRecord, BounceSource, BouncedCopy, CopyId, CopyState, ListId, MailingList, MemberId, Permanence, SendId,
};
use courrier_core::mailing::ports::{BounceRepo, NewBounce};
use courrier_core::storage::StoreError;
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, params};

impl BounceRepo for SqliteTx {
    fn copy_for_bounce(&mut self, id: CopyId) -> Result<Option<BouncedCopy>, StoreError> {
        self.conn()
            .prepare_cached("SELECT id, send_id, list_id, member_id, state FROM copies WHERE id = ?1")
            .and_then(|mut st| {
                st.query_row([id.get()], |r| {
                    let state: String = r.get(4)?;
                    Ok(BouncedCopy {
                        id: CopyId::from_stored(r.get(0)?),
                        send_id: SendId::from_stored(r.get(1)?),
                        list_id: ListId::from_stored(r.get(2)?),
                        member_id: MemberId::from_stored(r.get(3)?),
                        state: CopyState::parse(&state).ok_or_else(|| corrupt("copy state", &state))?,
                    })
                })
                .optional()
            })
            .map_err(map_err)
    }

    fn mark_copy_bounced(&mut self, id: CopyId, error: &str, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE copies SET state = 'bounced', last_error = ?2, updated_at = ?3
                 WHERE id = ?1 AND state IN ('sent', 'failed')",
            )
            .and_then(|mut st| st.execute(params![id.get(), error, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n == 1)
    }

    fn insert_bounce(&mut self, b: &NewBounce<'_>, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO bounces (list_id, member_id, copy_id, permanence, source, status_code, diagnostic, scored, received_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    b.list_id.get(),
                    b.member_id.get(),
                    b.copy_id.map(CopyId::get),
                    b.permanence.as_str(),
                    b.source.as_str(),
                    b.status_code,
                    b.diagnostic,
                    b.scored,
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn member_bounces(&mut self, member: MemberId, limit: u32) -> Result<Vec<BounceRecord>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT member_id, copy_id, permanence, source, status_code, diagnostic, scored, received_at
                 FROM bounces WHERE member_id = ?1 ORDER BY received_at DESC, id DESC LIMIT ?2",
            )
            .and_then(|mut st| {
                st.query_map(params![member.get(), i64::from(limit)], |r| {
                    let permanence: String = r.get(2)?;
                    let source: String = r.get(3)?;
                    Ok(BounceRecord {
                        member_id: MemberId::from_stored(r.get(0)?),
                        copy_id: r.get::<_, Option<i64>>(1)?.map(CopyId::from_stored),
                        permanence: Permanence::parse(&permanence).ok_or_else(|| corrupt("permanence", &permanence))?,
                        source: BounceSource::parse(&source).ok_or_else(|| corrupt("bounce source", &source))?,
                        status_code: r.get(4)?,
                        diagnostic: r.get(5)?,
                        scored: r.get(6)?,
                        at: ts(r.get(7)?).unwrap_or(Timestamp::from_unix_micros(0)),
                    })
                })?
                .collect()
            })
            .map_err(map_err)
    }

    fn decay_bounce_scores(&mut self, quiet_since: Timestamp, now: Timestamp) -> Result<u64, StoreError> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE members SET bounce_score = 0, updated_at = ?2
                 WHERE bounce_score > 0 AND last_bounce_at <= ?1 AND status = 'active'",
            )
            .and_then(|mut st| st.execute(params![quiet_since.unix_micros(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n as u64)
    }

    fn list_owner_emails(&mut self, list: &MailingList) -> Result<Vec<EmailAddress>, StoreError> {
        let rows: Vec<String> = self
            .conn()
            .prepare_cached(
                "SELECT u.email FROM roles r JOIN users u ON u.id = r.user_id
                 WHERE r.kind = 'owner' AND r.domain = ?1 AND r.list = ?2 AND u.status = 'active' ORDER BY u.id",
            )
            .and_then(|mut st| st.query_map(params![list.domain.as_str(), list.name.as_str()], |r| r.get(0))?.collect())
            .map_err(map_err)?;
        Ok(rows.iter().filter_map(|e| EmailAddress::parse(e).ok()).collect())
    }

    fn bounce_counts(&mut self, lists: Option<&[ListId]>, since: Timestamp) -> Result<(u64, u64), StoreError> {
        let mut args: Vec<Value> = vec![Value::Integer(since.unix_micros())];
        let filter = match lists {
            None => String::new(),
            Some(ids) => {
                let marks: Vec<String> = (0..ids.len()).map(|i| format!("?{}", i + 2)).collect();
                args.extend(ids.iter().map(|i| Value::Integer(i.get())));
                format!(" AND list_id IN ({})", marks.join(", "))
            }
        };
        let rows: Vec<(String, i64)> = self
            .conn()
            .prepare(&format!(
                "SELECT permanence, COUNT(*) FROM bounces WHERE received_at >= ?1{filter} GROUP BY permanence"
            ))
            .and_then(|mut st| {
                st.query_map(rusqlite::params_from_iter(&args), |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
            })
            .map_err(map_err)?;
        let get = |k: &str| rows.iter().find(|(p, _)| p == k).map_or(0, |(_, n)| u64::try_from(*n).unwrap_or(0));
        Ok((get("permanent"), get("temporary")))
    }
}
