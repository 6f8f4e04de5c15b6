//! The moderation queues' reads: subscriptions waiting for a moderator, and the accounts that
//! moderate a list (to tell them when something waits).

use super::access::corrupt;
use super::mailing::{MEMBER_COLUMNS, member_row};
use super::{SqliteTx, map_err, paged};
use courrier_core::kernel::{DomainName, EmailAddress, ListName, Page, Paged, Timestamp};
use courrier_core::mailing::model::{ListId, Member};
use courrier_core::mailing::ports::ModerationRepo;
use courrier_core::mailing::posts::HeldId;
use courrier_core::storage::StoreError;
use rusqlite::params;
use rusqlite::types::Value;

const PENDING_MODERATION: &str = "status = 'pending' AND pending_reason = 'moderation'";

impl ModerationRepo for SqliteTx {
    fn pending_moderation(&mut self, list: ListId, page: Page) -> Result<Paged<Member>, StoreError> {
        paged(
            self.conn(),
            &format!("SELECT COUNT(*) FROM members WHERE list_id = ?1 AND {PENDING_MODERATION}"),
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = ?1 AND {PENDING_MODERATION} ORDER BY id"),
            vec![Value::Integer(list.get())],
            page,
            member_row,
        )
    }

    fn count_pending_moderation(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
        let (filter, args) = among(lists);
        let n: i64 = self
            .conn()
            .prepare(&format!("SELECT COUNT(*) FROM members WHERE {PENDING_MODERATION} {filter}"))
            .and_then(|mut st| st.query_row(rusqlite::params_from_iter(&args), |r| r.get(0)))
            .map_err(map_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn list_moderators(&mut self, domain: &DomainName, list: &ListName) -> Result<Vec<EmailAddress>, StoreError> {
        holders(self, "'owner', 'moderator'", domain, list)
    }

    fn set_held_days(&mut self, list: ListId, days: u32) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE lists SET held_days = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![list.get(), days]))
            .map_err(map_err)?;
        Ok(())
    }

    fn count_held(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
        let (filter, args) = among(lists);
        let n: i64 = self
            .conn()
            .prepare(&format!("SELECT COUNT(*) FROM held_posts WHERE 1 = 1 {filter}"))
            .and_then(|mut st| st.query_row(rusqlite::params_from_iter(&args), |r| r.get(0)))
            .map_err(map_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn expire_held(&mut self, now: Timestamp) -> Result<Vec<(ListId, HeldId)>, StoreError> {
        self.conn()
            .prepare_cached(
                "DELETE FROM held_posts WHERE id IN (
                     SELECT h.id FROM held_posts h JOIN lists l ON l.id = h.list_id
                     WHERE h.received_at < ?1 - l.held_days * 86400000000)
                 RETURNING list_id, id",
            )
            .and_then(|mut st| {
                st.query_map([now.unix_micros()], |r| {
                    Ok((ListId::from_stored(r.get(0)?), HeldId::from_stored(r.get(1)?)))
                })?
                .collect()
            })
            .map_err(map_err)
    }

    fn list_owners(&mut self, domain: &DomainName, list: &ListName) -> Result<Vec<EmailAddress>, StoreError> {
        holders(self, "'owner'", domain, list)
    }
}

/// `AND list_id IN (...)` with its arguments; nothing for every list.
fn among(lists: Option<&[ListId]>) -> (String, Vec<Value>) {
    match lists {
        None => (String::new(), Vec::new()),
        Some(ids) => {
            let args: Vec<Value> = ids.iter().map(|i| Value::Integer(i.get())).collect();
            let marks: Vec<String> = (1..=args.len()).map(|i| format!("?{i}")).collect();
            (format!("AND list_id IN ({})", marks.join(", ")), args)
        }
    }
}

/// The active accounts holding one of `kinds` (SQL literals) on the list, each once.
fn holders(tx: &SqliteTx, kinds: &str, domain: &DomainName, list: &ListName) -> Result<Vec<EmailAddress>, StoreError> {
    let rows: Vec<String> = tx
        .conn()
        .prepare_cached(&format!(
            "SELECT DISTINCT u.email FROM roles r JOIN users u ON u.id = r.user_id
             WHERE r.kind IN ({kinds}) AND r.domain = ?1 AND r.list = ?2 AND u.status = 'active'
             ORDER BY u.email"
        ))
        .and_then(|mut st| st.query_map([domain.as_str(), list.as_str()], |r| r.get(0))?.collect())
        .map_err(map_err)?;
    rows.into_iter().map(|raw| EmailAddress::parse(&raw).map_err(|_| map_err(corrupt("email", &raw)))).collect()
}
