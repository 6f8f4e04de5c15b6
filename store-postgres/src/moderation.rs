//! The moderation queues' reads on PostgreSQL (the SQLite adapter's `moderation.rs`).

use super::mailing::{MEMBER_COLUMNS, address, count, ids, member_row};
use super::{PgTx, get, paged};
use courrier_core::kernel::{DomainName, EmailAddress, ListName, Page, Paged, Timestamp};
use courrier_core::mailing::model::{HeldId, ListId, Member};
use courrier_core::mailing::ports::ModerationRepo;
use courrier_core::storage::StoreError;

const PENDING_MODERATION: &str = "status = 'pending' AND pending_reason = 'moderation'";

impl ModerationRepo for PgTx {
    fn pending_moderation(&mut self, list: ListId, page: Page) -> Result<Paged<Member>, StoreError> {
        paged(
            self,
            &format!("SELECT COUNT(*) FROM members WHERE list_id = $1 AND {PENDING_MODERATION}"),
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = $1 AND {PENDING_MODERATION} ORDER BY id"),
            &[&list.get()],
            page,
            member_row,
        )
    }

    fn count_pending_moderation(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
        let lists = lists.map(ids);
        count(&self.query_one(
            &format!(
                "SELECT COUNT(*) FROM members WHERE {PENDING_MODERATION} AND ($1::BIGINT[] IS NULL OR list_id = ANY($1))"
            ),
            &[&lists],
        )?)
    }

    fn list_moderators(&mut self, domain: &DomainName, list: &ListName) -> Result<Vec<EmailAddress>, StoreError> {
        holders(self, &["owner", "moderator"], domain, list)
    }

    fn set_held_days(&mut self, list: ListId, days: u32) -> Result<(), StoreError> {
        self.execute("UPDATE lists SET held_days = $2 WHERE id = $1", &[&list.get(), &i64::from(days)])?;
        Ok(())
    }

    fn count_held(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
        let lists = lists.map(ids);
        count(
            &self.query_one(
                "SELECT COUNT(*) FROM held_posts WHERE $1::BIGINT[] IS NULL OR list_id = ANY($1)",
                &[&lists],
            )?,
        )
    }

    fn expire_held(&mut self, now: Timestamp) -> Result<Vec<(ListId, HeldId)>, StoreError> {
        let rows = self.query(
            "DELETE FROM held_posts h USING lists l
             WHERE l.id = h.list_id AND h.received_at < $1 - l.held_days * 86400000000
             RETURNING h.list_id, h.id",
            &[&now.unix_micros()],
        )?;
        rows.iter().map(|r| Ok((ListId::from_stored(get(r, 0)?), HeldId::from_stored(get(r, 1)?)))).collect()
    }

    fn list_owners(&mut self, domain: &DomainName, list: &ListName) -> Result<Vec<EmailAddress>, StoreError> {
        holders(self, &["owner"], domain, list)
    }
}

/// The active accounts holding one of `kinds` on the list, each once, ordered.
fn holders(
    tx: &mut PgTx,
    kinds: &[&str],
    domain: &DomainName,
    list: &ListName,
) -> Result<Vec<EmailAddress>, StoreError> {
    let rows = tx.query(
        "SELECT DISTINCT u.email FROM roles r JOIN users u ON u.id = r.user_id
         WHERE r.kind = ANY($1) AND r.domain = $2 AND r.list = $3 AND u.status = 'active'
         ORDER BY u.email",
        &[&kinds, &domain.as_str(), &list.as_str()],
    )?;
    rows.iter().map(|r| address(&get::<String>(r, 0)?)).collect()
}
