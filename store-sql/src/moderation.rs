//! The moderation queues' reads (subscriptions waiting for a moderator, held posts, who moderates
//! a list), written once for both databases. [`crate::moderation_repo!`] implements the port.

use crate::members::{MEMBER_COLUMNS, address, member_row};
use crate::sql::{Arg, SqlTx, paged, placeholders};
use courrier_core::kernel::{DomainName, EmailAddress, ListName, Page, Paged, Timestamp};
use courrier_core::mailing::model::{HeldId, ListId, Member};
use courrier_core::storage::StoreError;

const PENDING_MODERATION: &str = "status = 'pending' AND pending_reason = 'moderation'";

/// ` AND list_id IN (...)` from placeholder `?first` on, with its arguments; nothing for every list.
fn among(lists: Option<&[ListId]>, first: usize) -> (String, Vec<Arg<'static>>) {
    match lists {
        None => (String::new(), Vec::new()),
        Some(ids) => (
            format!(" AND list_id IN ({})", placeholders(first, ids.len())),
            ids.iter().map(|i| Arg::from(i.get())).collect(),
        ),
    }
}

fn count(tx: &mut impl SqlTx, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
    Ok(u64::try_from(tx.first(sql, args, |r| r.i64(0))?.unwrap_or(0)).unwrap_or(0))
}

pub fn pending_moderation(tx: &mut impl SqlTx, list: ListId, page: Page) -> Result<Paged<Member>, StoreError> {
    paged(
        tx,
        &format!("SELECT COUNT(*) FROM members WHERE list_id = ?1 AND {PENDING_MODERATION}"),
        &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = ?1 AND {PENDING_MODERATION} ORDER BY id"),
        &[list.get().into()],
        page,
        member_row,
    )
}

pub fn count_pending_moderation(tx: &mut impl SqlTx, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
    let (filter, args) = among(lists, 1);
    count(tx, &format!("SELECT COUNT(*) FROM members WHERE {PENDING_MODERATION}{filter}"), &args)
}

pub fn set_held_days(tx: &mut impl SqlTx, list: ListId, days: u32) -> Result<(), StoreError> {
    tx.run("UPDATE lists SET held_days = ?2 WHERE id = ?1", &[list.get().into(), days.into()])?;
    Ok(())
}

pub fn count_held(tx: &mut impl SqlTx, lists: Option<&[ListId]>) -> Result<u64, StoreError> {
    let (filter, args) = among(lists, 1);
    count(tx, &format!("SELECT COUNT(*) FROM held_posts WHERE 1 = 1{filter}"), &args)
}

pub fn expire_held(tx: &mut impl SqlTx, now: Timestamp) -> Result<Vec<(ListId, HeldId)>, StoreError> {
    tx.rows(
        "DELETE FROM held_posts WHERE id IN (
             SELECT h.id FROM held_posts h JOIN lists l ON l.id = h.list_id
             WHERE h.received_at < ?1 - l.held_days * 86400000000)
         RETURNING list_id, id",
        &[now.unix_micros().into()],
        |r| Ok((ListId::from_stored(r.i64(0)?), HeldId::from_stored(r.i64(1)?))),
    )
}

/// The active accounts holding one of `kinds` (SQL literals) on the list, each once, ordered.
pub fn holders(
    tx: &mut impl SqlTx,
    kinds: &str,
    domain: &DomainName,
    list: &ListName,
) -> Result<Vec<EmailAddress>, StoreError> {
    let rows = tx.rows(
        &format!(
            "SELECT DISTINCT u.email FROM roles r JOIN users u ON u.id = r.user_id
             WHERE r.kind IN ({kinds}) AND r.domain = ?1 AND r.list = ?2 AND u.status = 'active'
             ORDER BY u.email"
        ),
        &[domain.as_str().into(), list.as_str().into()],
        |r| r.text(0),
    )?;
    rows.iter().map(|raw| address(raw)).collect()
}

/// Implements `mailing::ports::ModerationRepo` for an adapter's transaction (an [`SqlTx`]) with
/// the shared statements of this module.
#[macro_export]
macro_rules! moderation_repo {
    ($tx:ty) => {
        impl ::courrier_core::mailing::ports::ModerationRepo for $tx {
            fn pending_moderation(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                page: ::courrier_core::kernel::Page,
            ) -> Result<
                ::courrier_core::kernel::Paged<::courrier_core::mailing::model::Member>,
                ::courrier_core::storage::StoreError,
            > {
                $crate::moderation::pending_moderation(self, list, page)
            }
            fn count_pending_moderation(
                &mut self,
                lists: Option<&[::courrier_core::mailing::model::ListId]>,
            ) -> Result<u64, ::courrier_core::storage::StoreError> {
                $crate::moderation::count_pending_moderation(self, lists)
            }
            fn list_moderators(
                &mut self,
                domain: &::courrier_core::kernel::DomainName,
                list: &::courrier_core::kernel::ListName,
            ) -> Result<Vec<::courrier_core::kernel::EmailAddress>, ::courrier_core::storage::StoreError> {
                $crate::moderation::holders(self, "'owner', 'moderator'", domain, list)
            }
            fn set_held_days(
                &mut self,
                list: ::courrier_core::mailing::model::ListId,
                days: u32,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::moderation::set_held_days(self, list, days)
            }
            fn count_held(
                &mut self,
                lists: Option<&[::courrier_core::mailing::model::ListId]>,
            ) -> Result<u64, ::courrier_core::storage::StoreError> {
                $crate::moderation::count_held(self, lists)
            }
            fn expire_held(
                &mut self,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<
                Vec<(::courrier_core::mailing::model::ListId, ::courrier_core::mailing::model::HeldId)>,
                ::courrier_core::storage::StoreError,
            > {
                $crate::moderation::expire_held(self, now)
            }
            fn list_owners(
                &mut self,
                domain: &::courrier_core::kernel::DomainName,
                list: &::courrier_core::kernel::ListName,
            ) -> Result<Vec<::courrier_core::kernel::EmailAddress>, ::courrier_core::storage::StoreError> {
                $crate::moderation::holders(self, "'owner'", domain, list)
            }
        }
    };
}
