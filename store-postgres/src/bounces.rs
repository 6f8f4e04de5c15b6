//! Bounces on PostgreSQL (the SQLite adapter's `bounces.rs`).

use super::mailing::{ids, parsed, ts};
use super::{PgTx, get};
use courrier_core::kernel::{EmailAddress, Timestamp};
use courrier_core::mailing::model::{
    BounceRecord, BounceSource, BouncedCopy, CopyId, CopyState, ListId, MailingList, MemberId, Permanence, SendId,
};
use courrier_core::mailing::ports::{BounceRepo, NewBounce};
use courrier_core::storage::StoreError;

impl BounceRepo for PgTx {
    fn copy_for_bounce(&mut self, id: CopyId) -> Result<Option<BouncedCopy>, StoreError> {
        let row =
            self.query_opt("SELECT id, send_id, list_id, member_id, state FROM copies WHERE id = $1", &[&id.get()])?;
        row.map(|r| {
            Ok(BouncedCopy {
                id: CopyId::from_stored(get(&r, 0)?),
                send_id: SendId::from_stored(get(&r, 1)?),
                list_id: ListId::from_stored(get(&r, 2)?),
                member_id: MemberId::from_stored(get(&r, 3)?),
                state: parsed(&r, 4, "copy state", CopyState::parse)?,
            })
        })
        .transpose()
    }

    fn mark_copy_bounced(&mut self, id: CopyId, error: &str, now: Timestamp) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE copies SET state = 'bounced', last_error = $2, updated_at = $3
             WHERE id = $1 AND state IN ('sent', 'failed')",
            &[&id.get(), &error, &now.unix_micros()],
        )?;
        Ok(n == 1)
    }

    fn insert_bounce(&mut self, b: &NewBounce<'_>, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO bounces (list_id, member_id, copy_id, permanence, source, status_code, diagnostic, scored,
                                  received_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &b.list_id.get(),
                &b.member_id.get(),
                &b.copy_id.map(CopyId::get),
                &b.permanence.as_str(),
                &b.source.as_str(),
                &b.status_code,
                &b.diagnostic,
                &b.scored,
                &now.unix_micros(),
            ],
        )?;
        Ok(())
    }

    fn member_bounces(&mut self, member: MemberId, limit: u32) -> Result<Vec<BounceRecord>, StoreError> {
        let rows = self.query(
            "SELECT member_id, copy_id, permanence, source, status_code, diagnostic, scored, received_at
             FROM bounces WHERE member_id = $1 ORDER BY received_at DESC, id DESC LIMIT $2",
            &[&member.get(), &i64::from(limit)],
        )?;
        rows.iter()
            .map(|r| {
                Ok(BounceRecord {
                    member_id: MemberId::from_stored(get(r, 0)?),
                    copy_id: get::<Option<i64>>(r, 1)?.map(CopyId::from_stored),
                    permanence: parsed(r, 2, "permanence", Permanence::parse)?,
                    source: parsed(r, 3, "bounce source", BounceSource::parse)?,
                    status_code: get(r, 4)?,
                    diagnostic: get(r, 5)?,
                    scored: get(r, 6)?,
                    at: ts(get(r, 7)?).unwrap_or(Timestamp::from_unix_micros(0)),
                })
            })
            .collect()
    }

    fn decay_bounce_scores(&mut self, quiet_since: Timestamp, now: Timestamp) -> Result<u64, StoreError> {
        self.execute(
            "UPDATE members SET bounce_score = 0, updated_at = $2
             WHERE bounce_score > 0 AND last_bounce_at <= $1 AND status = 'active'",
            &[&quiet_since.unix_micros(), &now.unix_micros()],
        )
    }

    fn list_owner_emails(&mut self, list: &MailingList) -> Result<Vec<EmailAddress>, StoreError> {
        let rows = self.query(
            "SELECT u.email FROM roles r JOIN users u ON u.id = r.user_id
             WHERE r.kind = 'owner' AND r.domain = $1 AND r.list = $2 AND u.status = 'active' ORDER BY u.id",
            &[&list.domain.as_str(), &list.name.as_str()],
        )?;
        let emails: Vec<String> = rows.iter().map(|r| get(r, 0)).collect::<Result<_, _>>()?;
        Ok(emails.iter().filter_map(|e| EmailAddress::parse(e).ok()).collect())
    }

    fn bounce_counts(&mut self, lists: Option<&[ListId]>, since: Timestamp) -> Result<(u64, u64), StoreError> {
        let lists = lists.map(ids);
        let rows = self.query(
            "SELECT permanence, COUNT(*) FROM bounces
             WHERE received_at >= $1 AND ($2::BIGINT[] IS NULL OR list_id = ANY($2)) GROUP BY permanence",
            &[&since.unix_micros(), &lists],
        )?;
        let (mut permanent, mut temporary) = (0, 0);
        for r in &rows {
            let n = u64::try_from(get::<i64>(r, 1)?).unwrap_or(0);
            match get::<String>(r, 0)?.as_str() {
                "permanent" => permanent = n,
                "temporary" => temporary = n,
                _ => {}
            }
        }
        Ok((permanent, temporary))
    }
}
