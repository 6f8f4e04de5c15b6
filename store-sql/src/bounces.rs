//! Bounces (`bounces`, and the copies and members they name), written once for both databases.
//! [`crate::bounce_repo!`] implements the port with these.

use crate::sql::{Arg, SqlTx, corrupt, placeholders, ts};
use courrier_core::kernel::{EmailAddress, Timestamp};
use courrier_core::mailing::model::{
    BounceRecord, BounceSource, BouncedCopy, CopyId, CopyState, ListId, MailingList, MemberId, Permanence, SendId,
};
use courrier_core::mailing::ports::NewBounce;
use courrier_core::storage::StoreError;

pub fn copy_for_bounce(tx: &mut impl SqlTx, id: CopyId) -> Result<Option<BouncedCopy>, StoreError> {
    tx.first("SELECT id, send_id, list_id, member_id, state FROM copies WHERE id = ?1", &[id.get().into()], |r| {
        let state = r.text(4)?;
        Ok(BouncedCopy {
            id: CopyId::from_stored(r.i64(0)?),
            send_id: SendId::from_stored(r.i64(1)?),
            list_id: ListId::from_stored(r.i64(2)?),
            member_id: MemberId::from_stored(r.i64(3)?),
            state: CopyState::parse(&state).ok_or_else(|| corrupt("copy state", &state))?,
        })
    })
}

pub fn mark_copy_bounced(tx: &mut impl SqlTx, id: CopyId, error: &str, now: Timestamp) -> Result<bool, StoreError> {
    let n = tx.run(
        "UPDATE copies SET state = 'bounced', last_error = ?2, updated_at = ?3
         WHERE id = ?1 AND state IN ('sent', 'failed')",
        &[id.get().into(), error.into(), now.unix_micros().into()],
    )?;
    Ok(n == 1)
}

pub fn insert_bounce(tx: &mut impl SqlTx, b: &NewBounce<'_>, now: Timestamp) -> Result<(), StoreError> {
    tx.run(
        "INSERT INTO bounces (list_id, member_id, copy_id, permanence, source, status_code, diagnostic, scored,
                              received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        &[
            b.list_id.get().into(),
            b.member_id.get().into(),
            b.copy_id.map(CopyId::get).into(),
            b.permanence.as_str().into(),
            b.source.as_str().into(),
            b.status_code.into(),
            b.diagnostic.into(),
            b.scored.into(),
            now.unix_micros().into(),
        ],
    )?;
    Ok(())
}

pub fn member_bounces(tx: &mut impl SqlTx, member: MemberId, limit: u32) -> Result<Vec<BounceRecord>, StoreError> {
    tx.rows(
        "SELECT member_id, copy_id, permanence, source, status_code, diagnostic, scored, received_at
         FROM bounces WHERE member_id = ?1 ORDER BY received_at DESC, id DESC LIMIT ?2",
        &[member.get().into(), limit.into()],
        |r| {
            let (permanence, source) = (r.text(2)?, r.text(3)?);
            Ok(BounceRecord {
                member_id: MemberId::from_stored(r.i64(0)?),
                copy_id: r.opt_i64(1)?.map(CopyId::from_stored),
                permanence: Permanence::parse(&permanence).ok_or_else(|| corrupt("permanence", &permanence))?,
                source: BounceSource::parse(&source).ok_or_else(|| corrupt("bounce source", &source))?,
                status_code: r.opt_text(4)?,
                diagnostic: r.opt_text(5)?,
                scored: r.bool(6)?,
                at: ts(r.opt_i64(7)?).unwrap_or(Timestamp::from_unix_micros(0)),
            })
        },
    )
}

pub fn decay_bounce_scores(tx: &mut impl SqlTx, quiet_since: Timestamp, now: Timestamp) -> Result<u64, StoreError> {
    tx.run(
        "UPDATE members SET bounce_score = 0, updated_at = ?2
         WHERE bounce_score > 0 AND last_bounce_at <= ?1 AND status = 'active'",
        &[quiet_since.unix_micros().into(), now.unix_micros().into()],
    )
}

pub fn list_owner_emails(tx: &mut impl SqlTx, list: &MailingList) -> Result<Vec<EmailAddress>, StoreError> {
    let emails = tx.rows(
        "SELECT u.email FROM roles r JOIN users u ON u.id = r.user_id
         WHERE r.kind = 'owner' AND r.domain = ?1 AND r.list = ?2 AND u.status = 'active' ORDER BY u.id",
        &[list.domain.as_str().into(), list.name.as_str().into()],
        |r| r.text(0),
    )?;
    Ok(emails.iter().filter_map(|e| EmailAddress::parse(e).ok()).collect())
}

pub fn bounce_counts(
    tx: &mut impl SqlTx,
    lists: Option<&[ListId]>,
    since: Timestamp,
) -> Result<(u64, u64), StoreError> {
    let mut args: Vec<Arg<'_>> = vec![since.unix_micros().into()];
    let filter = match lists {
        None => String::new(),
        Some(ids) => {
            args.extend(ids.iter().map(|i| Arg::from(i.get())));
            format!(" AND list_id IN ({})", placeholders(2, ids.len()))
        }
    };
    let sql = format!("SELECT permanence, COUNT(*) FROM bounces WHERE received_at >= ?1{filter} GROUP BY permanence");
    let rows = tx.rows(&sql, &args, |r| Ok((r.text(0)?, r.i64(1)?)))?;
    let count = |k: &str| rows.iter().find(|(p, _)| p == k).map_or(0, |(_, n)| u64::try_from(*n).unwrap_or(0));
    Ok((count("permanent"), count("temporary")))
}

/// Implements `mailing::ports::BounceRepo` for an adapter's transaction (an [`SqlTx`]) with the
/// shared statements of this module.
#[macro_export]
macro_rules! bounce_repo {
    ($tx:ty) => {
        impl ::courrier_core::mailing::ports::BounceRepo for $tx {
            fn copy_for_bounce(
                &mut self,
                id: ::courrier_core::mailing::model::CopyId,
            ) -> Result<Option<::courrier_core::mailing::model::BouncedCopy>, ::courrier_core::storage::StoreError>
            {
                $crate::bounces::copy_for_bounce(self, id)
            }
            fn mark_copy_bounced(
                &mut self,
                id: ::courrier_core::mailing::model::CopyId,
                error: &str,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<bool, ::courrier_core::storage::StoreError> {
                $crate::bounces::mark_copy_bounced(self, id, error, now)
            }
            fn insert_bounce(
                &mut self,
                b: &::courrier_core::mailing::ports::NewBounce<'_>,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::bounces::insert_bounce(self, b, now)
            }
            fn member_bounces(
                &mut self,
                member: ::courrier_core::mailing::model::MemberId,
                limit: u32,
            ) -> Result<Vec<::courrier_core::mailing::model::BounceRecord>, ::courrier_core::storage::StoreError> {
                $crate::bounces::member_bounces(self, member, limit)
            }
            fn decay_bounce_scores(
                &mut self,
                quiet_since: ::courrier_core::kernel::Timestamp,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<u64, ::courrier_core::storage::StoreError> {
                $crate::bounces::decay_bounce_scores(self, quiet_since, now)
            }
            fn list_owner_emails(
                &mut self,
                list: &::courrier_core::mailing::model::MailingList,
            ) -> Result<Vec<::courrier_core::kernel::EmailAddress>, ::courrier_core::storage::StoreError> {
                $crate::bounces::list_owner_emails(self, list)
            }
            fn bounce_counts(
                &mut self,
                lists: Option<&[::courrier_core::mailing::model::ListId]>,
                since: ::courrier_core::kernel::Timestamp,
            ) -> Result<(u64, u64), ::courrier_core::storage::StoreError> {
                $crate::bounces::bounce_counts(self, lists, since)
            }
        }
    };
}
