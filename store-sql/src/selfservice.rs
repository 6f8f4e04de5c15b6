//! Subscriber self-service (login links, subscriber sessions, an address's subscriptions across
//! lists), written once for both databases. [`crate::me_repo!`] implements the port.

use crate::members::{MEMBER_COLUMNS, address, email_key, member_row};
use crate::sql::{Arg, SqlTx, paged, placeholders, ts};
use courrier_core::kernel::{EmailAddress, Page, Paged, Timestamp};
use courrier_core::mailing::model::{ListId, MailingList, MemberStatus};
use courrier_core::mailing::ports::{LoginLinkRecord, MailingRepo, SubscriberSessionRecord, SubscriptionRecord};
use courrier_core::storage::StoreError;
use std::collections::HashMap;

pub fn insert_login_link(
    tx: &mut impl SqlTx,
    token_hash: &str,
    email: &EmailAddress,
    now: Timestamp,
    expires_at: Timestamp,
) -> Result<(), StoreError> {
    tx.run(
        "INSERT INTO subscriber_links (token_hash, email, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
        &[token_hash.into(), (&email.to_string()).into(), now.unix_micros().into(), expires_at.unix_micros().into()],
    )?;
    Ok(())
}

pub fn login_link_by_hash(tx: &mut impl SqlTx, token_hash: &str) -> Result<Option<LoginLinkRecord>, StoreError> {
    tx.first(
        "SELECT id, email, expires_at, used_at FROM subscriber_links WHERE token_hash = ?1",
        &[token_hash.into()],
        |r| {
            Ok(LoginLinkRecord {
                id: r.i64(0)?,
                email: address(&r.text(1)?)?,
                expires_at: Timestamp::from_unix_micros(r.i64(2)?),
                used_at: ts(r.opt_i64(3)?),
            })
        },
    )
}

pub fn use_login_link(tx: &mut impl SqlTx, id: i64, now: Timestamp) -> Result<bool, StoreError> {
    let n = tx.run(
        "UPDATE subscriber_links SET used_at = ?2 WHERE id = ?1 AND used_at IS NULL",
        &[id.into(), now.unix_micros().into()],
    )?;
    Ok(n == 1)
}

pub fn insert_subscriber_session(
    tx: &mut impl SqlTx,
    token_hash: &str,
    email: &EmailAddress,
    now: Timestamp,
    expires_at: Timestamp,
) -> Result<i64, StoreError> {
    let id = tx.first(
        "INSERT INTO subscriber_sessions (token_hash, email, created_at, last_seen_at, expires_at)
         VALUES (?1, ?2, ?3, ?3, ?4) RETURNING id",
        &[token_hash.into(), (&email.to_string()).into(), now.unix_micros().into(), expires_at.unix_micros().into()],
        |r| r.i64(0),
    )?;
    id.ok_or_else(|| StoreError::Backend("a subscriber session inserted without its id".into()))
}

pub fn subscriber_session_by_hash(
    tx: &mut impl SqlTx,
    token_hash: &str,
) -> Result<Option<SubscriberSessionRecord>, StoreError> {
    tx.first(
        "SELECT id, email, created_at, last_seen_at, expires_at, revoked_at
         FROM subscriber_sessions WHERE token_hash = ?1",
        &[token_hash.into()],
        |r| {
            Ok(SubscriberSessionRecord {
                id: r.i64(0)?,
                email: address(&r.text(1)?)?,
                created_at: Timestamp::from_unix_micros(r.i64(2)?),
                last_seen_at: Timestamp::from_unix_micros(r.i64(3)?),
                expires_at: Timestamp::from_unix_micros(r.i64(4)?),
                revoked_at: ts(r.opt_i64(5)?),
            })
        },
    )
}

pub fn touch_subscriber_session(tx: &mut impl SqlTx, id: i64, now: Timestamp) -> Result<(), StoreError> {
    tx.run("UPDATE subscriber_sessions SET last_seen_at = ?2 WHERE id = ?1", &[id.into(), now.unix_micros().into()])?;
    Ok(())
}

pub fn revoke_subscriber_session(tx: &mut impl SqlTx, id: i64, now: Timestamp) -> Result<(), StoreError> {
    tx.run(
        "UPDATE subscriber_sessions SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
        &[id.into(), now.unix_micros().into()],
    )?;
    Ok(())
}

pub fn subscriptions_of<T: SqlTx + MailingRepo>(
    tx: &mut T,
    email: &EmailAddress,
    statuses: &[MemberStatus],
    page: Page,
) -> Result<Paged<SubscriptionRecord>, StoreError> {
    let key = email_key(email);
    let mut args: Vec<Arg<'_>> = vec![key.as_str().into()];
    args.extend(statuses.iter().map(|s| Arg::from(s.as_str())));
    let filter = format!("email_key = ?1 AND status IN ({})", placeholders(2, statuses.len()));
    let members = paged(
        tx,
        &format!("SELECT COUNT(*) FROM members WHERE {filter}"),
        &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE {filter} ORDER BY list_id"),
        &args,
        page,
        member_row,
    )?;
    // Each list once (an address is on a list once: the listing holds distinct lists).
    let mut lists: HashMap<ListId, MailingList> = HashMap::new();
    let mut items = Vec::with_capacity(members.items.len());
    for member in members.items {
        let list = match lists.get(&member.list_id) {
            Some(l) => l.clone(),
            None => {
                let Some(l) = tx.list_by_id(member.list_id)? else { continue };
                lists.insert(member.list_id, l.clone());
                l
            }
        };
        items.push(SubscriptionRecord { member, list });
    }
    Ok(Paged { items, total: members.total, page: members.page })
}

/// Implements `mailing::ports::MeRepo` for an adapter's transaction (an [`SqlTx`] that reads
/// lists) with the shared statements of this module.
#[macro_export]
macro_rules! me_repo {
    ($tx:ty) => {
        impl ::courrier_core::mailing::ports::MeRepo for $tx {
            fn insert_login_link(
                &mut self,
                token_hash: &str,
                email: &::courrier_core::kernel::EmailAddress,
                now: ::courrier_core::kernel::Timestamp,
                expires_at: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::selfservice::insert_login_link(self, token_hash, email, now, expires_at)
            }
            fn login_link_by_hash(
                &mut self,
                token_hash: &str,
            ) -> Result<Option<::courrier_core::mailing::ports::LoginLinkRecord>, ::courrier_core::storage::StoreError>
            {
                $crate::selfservice::login_link_by_hash(self, token_hash)
            }
            fn use_login_link(
                &mut self,
                id: i64,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<bool, ::courrier_core::storage::StoreError> {
                $crate::selfservice::use_login_link(self, id, now)
            }
            fn insert_subscriber_session(
                &mut self,
                token_hash: &str,
                email: &::courrier_core::kernel::EmailAddress,
                now: ::courrier_core::kernel::Timestamp,
                expires_at: ::courrier_core::kernel::Timestamp,
            ) -> Result<i64, ::courrier_core::storage::StoreError> {
                $crate::selfservice::insert_subscriber_session(self, token_hash, email, now, expires_at)
            }
            fn subscriber_session_by_hash(
                &mut self,
                token_hash: &str,
            ) -> Result<
                Option<::courrier_core::mailing::ports::SubscriberSessionRecord>,
                ::courrier_core::storage::StoreError,
            > {
                $crate::selfservice::subscriber_session_by_hash(self, token_hash)
            }
            fn touch_subscriber_session(
                &mut self,
                id: i64,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::selfservice::touch_subscriber_session(self, id, now)
            }
            fn revoke_subscriber_session(
                &mut self,
                id: i64,
                now: ::courrier_core::kernel::Timestamp,
            ) -> Result<(), ::courrier_core::storage::StoreError> {
                $crate::selfservice::revoke_subscriber_session(self, id, now)
            }
            fn subscriptions_of(
                &mut self,
                email: &::courrier_core::kernel::EmailAddress,
                statuses: &[::courrier_core::mailing::model::MemberStatus],
                page: ::courrier_core::kernel::Page,
            ) -> Result<
                ::courrier_core::kernel::Paged<::courrier_core::mailing::ports::SubscriptionRecord>,
                ::courrier_core::storage::StoreError,
            > {
                $crate::selfservice::subscriptions_of(self, email, statuses, page)
            }
        }
    };
}
