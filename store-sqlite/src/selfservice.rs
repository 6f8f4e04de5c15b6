use super::access::{corrupt, email_key, ts};
use super::mailing::{MEMBER_COLUMNS, member_row};
use super::{SqliteTx, map_err, paged};
use courrier_core::kernel::{EmailAddress, Page, Paged, Timestamp};
use courrier_core::mailing::model::MemberStatus;
use courrier_core::mailing::ports::{
    LoginLinkRecord, MailingRepo, MeRepo, SubscriberSessionRecord, SubscriptionRecord,
};
use courrier_core::storage::StoreError;
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, params};
use std::collections::HashMap;

fn address(raw: &str) -> rusqlite::Result<EmailAddress> {
    EmailAddress::parse(raw).map_err(|_| corrupt("email", raw))
}

impl MeRepo for SqliteTx {
    fn insert_login_link(
        &mut self,
        token_hash: &str,
        email: &EmailAddress,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO subscriber_links (token_hash, email, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut st| {
                st.execute(params![token_hash, email.to_string(), now.unix_micros(), expires_at.unix_micros()])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn login_link_by_hash(&mut self, token_hash: &str) -> Result<Option<LoginLinkRecord>, StoreError> {
        self.conn()
            .prepare_cached("SELECT id, email, expires_at, used_at FROM subscriber_links WHERE token_hash = ?1")
            .and_then(|mut st| {
                st.query_row([token_hash], |r| {
                    Ok(LoginLinkRecord {
                        id: r.get(0)?,
                        email: address(&r.get::<_, String>(1)?)?,
                        expires_at: Timestamp::from_unix_micros(r.get(2)?),
                        used_at: ts(r.get(3)?),
                    })
                })
                .optional()
            })
            .map_err(map_err)
    }

    fn use_login_link(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached("UPDATE subscriber_links SET used_at = ?2 WHERE id = ?1 AND used_at IS NULL")
            .and_then(|mut st| st.execute(params![id, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n == 1)
    }

    fn insert_subscriber_session(
        &mut self,
        token_hash: &str,
        email: &EmailAddress,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<i64, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO subscriber_sessions (token_hash, email, created_at, last_seen_at, expires_at)
                 VALUES (?1, ?2, ?3, ?3, ?4)",
            )
            .and_then(|mut st| {
                st.execute(params![token_hash, email.to_string(), now.unix_micros(), expires_at.unix_micros()])
            })
            .map_err(map_err)?;
        Ok(self.conn().last_insert_rowid())
    }

    fn subscriber_session_by_hash(&mut self, token_hash: &str) -> Result<Option<SubscriberSessionRecord>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT id, email, created_at, last_seen_at, expires_at, revoked_at
                 FROM subscriber_sessions WHERE token_hash = ?1",
            )
            .and_then(|mut st| {
                st.query_row([token_hash], |r| {
                    Ok(SubscriberSessionRecord {
                        id: r.get(0)?,
                        email: address(&r.get::<_, String>(1)?)?,
                        created_at: Timestamp::from_unix_micros(r.get(2)?),
                        last_seen_at: Timestamp::from_unix_micros(r.get(3)?),
                        expires_at: Timestamp::from_unix_micros(r.get(4)?),
                        revoked_at: ts(r.get(5)?),
                    })
                })
                .optional()
            })
            .map_err(map_err)
    }

    fn touch_subscriber_session(&mut self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE subscriber_sessions SET last_seen_at = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![id, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn revoke_subscriber_session(&mut self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE subscriber_sessions SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL")
            .and_then(|mut st| st.execute(params![id, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn subscriptions_of(
        &mut self,
        email: &EmailAddress,
        statuses: &[MemberStatus],
        page: Page,
    ) -> Result<Paged<SubscriptionRecord>, StoreError> {
        let mut args = vec![Value::Text(email_key(email))];
        let mut marks = Vec::new();
        for s in statuses {
            args.push(Value::Text(s.as_str().to_owned()));
            marks.push(format!("?{}", args.len()));
        }
        let filter = format!("email_key = ?1 AND status IN ({})", marks.join(", "));
        let members = paged(
            self.conn(),
            &format!("SELECT COUNT(*) FROM members WHERE {filter}"),
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE {filter} ORDER BY list_id"),
            args,
            page,
            member_row,
        )?;
        // Each list once (an address is on a list once: the listing holds distinct lists).
        let mut lists = HashMap::new();
        let mut items = Vec::with_capacity(members.items.len());
        for member in members.items {
            let list = match lists.get(&member.list_id) {
                Some(l) => Clone::clone(l),
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
