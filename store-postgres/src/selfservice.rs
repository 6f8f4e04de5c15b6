//! Subscriber self-service on PostgreSQL (the SQLite adapter's `selfservice.rs`).

use super::mailing::{MEMBER_COLUMNS, address, email_key, member_row, ts};
use super::{PgTx, get, paged};
use courrier_core::kernel::{EmailAddress, Page, Paged, Timestamp};
use courrier_core::mailing::model::{ListId, MailingList, MemberStatus};
use courrier_core::mailing::ports::{
    LoginLinkRecord, MailingRepo, MeRepo, SubscriberSessionRecord, SubscriptionRecord,
};
use courrier_core::storage::StoreError;
use std::collections::HashMap;

impl MeRepo for PgTx {
    fn insert_login_link(
        &mut self,
        token_hash: &str,
        email: &EmailAddress,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        self.guarded(|tx| {
            tx.execute(
                "INSERT INTO subscriber_links (token_hash, email, created_at, expires_at) VALUES ($1, $2, $3, $4)",
                &[&token_hash, &email.to_string(), &now.unix_micros(), &expires_at.unix_micros()],
            )
        })?;
        Ok(())
    }

    fn login_link_by_hash(&mut self, token_hash: &str) -> Result<Option<LoginLinkRecord>, StoreError> {
        let row = self.query_opt(
            "SELECT id, email, expires_at, used_at FROM subscriber_links WHERE token_hash = $1",
            &[&token_hash],
        )?;
        row.map(|r| {
            Ok(LoginLinkRecord {
                id: get(&r, 0)?,
                email: address(&get::<String>(&r, 1)?)?,
                expires_at: Timestamp::from_unix_micros(get(&r, 2)?),
                used_at: ts(get(&r, 3)?),
            })
        })
        .transpose()
    }

    fn use_login_link(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE subscriber_links SET used_at = $2 WHERE id = $1 AND used_at IS NULL",
            &[&id, &now.unix_micros()],
        )?;
        Ok(n == 1)
    }

    fn insert_subscriber_session(
        &mut self,
        token_hash: &str,
        email: &EmailAddress,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<i64, StoreError> {
        let row = self.guarded(|tx| {
            tx.query_one(
                "INSERT INTO subscriber_sessions (token_hash, email, created_at, last_seen_at, expires_at)
                 VALUES ($1, $2, $3, $3, $4) RETURNING id",
                &[&token_hash, &email.to_string(), &now.unix_micros(), &expires_at.unix_micros()],
            )
        })?;
        get(&row, 0)
    }

    fn subscriber_session_by_hash(&mut self, token_hash: &str) -> Result<Option<SubscriberSessionRecord>, StoreError> {
        let row = self.query_opt(
            "SELECT id, email, created_at, last_seen_at, expires_at, revoked_at
             FROM subscriber_sessions WHERE token_hash = $1",
            &[&token_hash],
        )?;
        row.map(|r| {
            Ok(SubscriberSessionRecord {
                id: get(&r, 0)?,
                email: address(&get::<String>(&r, 1)?)?,
                created_at: Timestamp::from_unix_micros(get(&r, 2)?),
                last_seen_at: Timestamp::from_unix_micros(get(&r, 3)?),
                expires_at: Timestamp::from_unix_micros(get(&r, 4)?),
                revoked_at: ts(get(&r, 5)?),
            })
        })
        .transpose()
    }

    fn touch_subscriber_session(&mut self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.execute("UPDATE subscriber_sessions SET last_seen_at = $2 WHERE id = $1", &[&id, &now.unix_micros()])?;
        Ok(())
    }

    fn revoke_subscriber_session(&mut self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "UPDATE subscriber_sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            &[&id, &now.unix_micros()],
        )?;
        Ok(())
    }

    fn subscriptions_of(
        &mut self,
        email: &EmailAddress,
        statuses: &[MemberStatus],
        page: Page,
    ) -> Result<Paged<SubscriptionRecord>, StoreError> {
        let key = email_key(email);
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let filter = "email_key = $1 AND status = ANY($2)";
        let members = paged(
            self,
            &format!("SELECT COUNT(*) FROM members WHERE {filter}"),
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE {filter} ORDER BY list_id"),
            &[&key, &statuses],
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
                    let Some(l) = self.list_by_id(member.list_id)? else { continue };
                    lists.insert(member.list_id, l.clone());
                    l
                }
            };
            items.push(SubscriptionRecord { member, list });
        }
        Ok(Paged { items, total: members.total, page: members.page })
    }
}
