use super::{SqliteTx, map_err, paged};
use courrier_core::access::model::{
    ApiKey, KeyId, KeyScope, PermSet, Profile, Role, RoleGrant, RoleId, Session, SessionId, User, UserId, UserStatus,
    UserWithSecret,
};
use courrier_core::access::ports::{AccessRepo, OneTimeToken, UserVisibility};
use courrier_core::kernel::{EmailAddress, Page, Paged, Timestamp};
use courrier_core::storage::StoreError;
use courrier_store_sql::access_columns::{self, Corrupt};
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, Row, params};

/// The identity of an account's address: the whole address lowercased, so `Anna@example.org` and
/// `anna@example.org` are one account (people do not expect otherwise, whatever RFC 5321 allows a
/// host). Kept in its own column so the uniqueness rule is the database's; `email` keeps the case
/// it was given, for display.
pub(super) fn email_key(e: &EmailAddress) -> String {
    e.to_string().to_lowercase()
}

pub(super) fn ts(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp::from_unix_micros)
}

/// A stored value that does not parse means the database was edited by hand or is corrupt.
pub(super) fn corrupt(what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, format!("{what} {value:?}").into())
}

const USER_COLUMNS: &str = "id, email, firstname, name, mobile, language_code_id, password_hash, status, email_verified_at, created_at, updated_at";

fn user_row(r: &Row<'_>) -> rusqlite::Result<UserWithSecret> {
    let email: String = r.get(1)?;
    let status: String = r.get(7)?;
    let password_hash: Option<String> = r.get(6)?;
    Ok(UserWithSecret {
        user: User {
            id: UserId::from_stored(r.get(0)?),
            email: EmailAddress::parse(&email).map_err(|_| corrupt("email", &email))?,
            profile: Profile { firstname: r.get(2)?, name: r.get(3)?, mobile: r.get(4)?, language_code_id: r.get(5)? },
            status: UserStatus::parse(&status).ok_or_else(|| corrupt("user status", &status))?,
            has_password: password_hash.is_some(),
            email_verified_at: ts(r.get(8)?),
            created_at: Timestamp::from_unix_micros(r.get(9)?),
            updated_at: Timestamp::from_unix_micros(r.get(10)?),
        },
        password_hash,
    })
}

/// A stored role or key scope no record can be made of.
fn from_corrupt(c: Corrupt) -> rusqlite::Error {
    corrupt(c.what, &c.value)
}

const KEY_COLUMNS: &str = "id, user_id, name, prefix, scope_kind, domain, list, perms, rate_limit_per_min, expires_at, created_at, revoked_at, secret_hash";

fn key_row(r: &Row<'_>) -> rusqlite::Result<(ApiKey, String)> {
    let kind: String = r.get(4)?;
    let (domain, list): (String, String) = (r.get(5)?, r.get(6)?);
    let scope = access_columns::key_scope(&kind, &domain, &list).map_err(from_corrupt)?;
    let rate: i64 = r.get(8)?;
    Ok((
        ApiKey {
            id: KeyId::from_stored(r.get(0)?),
            user_id: UserId::from_stored(r.get(1)?),
            name: r.get(2)?,
            prefix: r.get(3)?,
            scope,
            perms: PermSet::from_bits(r.get(7)?),
            rate_limit_per_min: u32::try_from(rate).unwrap_or(u32::MAX),
            expires_at: ts(r.get(9)?),
            created_at: Timestamp::from_unix_micros(r.get(10)?),
            revoked_at: ts(r.get(11)?),
        },
        r.get(12)?,
    ))
}

fn session_row(r: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: SessionId::from_stored(r.get(0)?),
        user_id: UserId::from_stored(r.get(1)?),
        created_at: Timestamp::from_unix_micros(r.get(2)?),
        last_seen_at: Timestamp::from_unix_micros(r.get(3)?),
        expires_at: Timestamp::from_unix_micros(r.get(4)?),
        revoked_at: ts(r.get(5)?),
    })
}

impl AccessRepo for SqliteTx {
    fn role_scope_exists(&mut self, role: &Role) -> Result<bool, StoreError> {
        let found = match role {
            Role::SiteAdmin => return Ok(true),
            Role::DomainAdmin(d) => self
                .conn()
                .prepare_cached("SELECT 1 FROM domains WHERE name = ?1")
                .and_then(|mut st| st.exists([d.as_str()])),
            Role::Owner(d, l) | Role::Moderator(d, l) => self
                .conn()
                .prepare_cached(
                    "SELECT 1 FROM lists l JOIN domains d ON d.id = l.domain_id WHERE d.name = ?1 AND l.name = ?2",
                )
                .and_then(|mut st| st.exists([d.as_str(), l.as_str()])),
        };
        found.map_err(map_err)
    }

    fn insert_user(
        &mut self,
        email: &EmailAddress,
        profile: &Profile,
        password_hash: Option<&str>,
        now: Timestamp,
    ) -> Result<UserId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO users (email, email_key, firstname, name, mobile, language_code_id, password_hash, status,
                                    created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'active', ?8, ?8)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    email.to_string(),
                    email_key(email),
                    profile.firstname,
                    profile.name,
                    profile.mobile,
                    profile.language_code_id,
                    password_hash,
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(UserId::from_stored(self.conn().last_insert_rowid()))
    }

    fn user_by_id(&mut self, id: UserId) -> Result<Option<UserWithSecret>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.get()], user_row).optional())
            .map_err(map_err)
    }

    fn user_by_email(&mut self, email: &EmailAddress) -> Result<Option<UserWithSecret>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {USER_COLUMNS} FROM users WHERE email_key = ?1"))
            .and_then(|mut st| st.query_row([email_key(email)], user_row).optional())
            .map_err(map_err)
    }

    fn list_users(&mut self, visible: &UserVisibility, page: Page) -> Result<Paged<User>, StoreError> {
        let (filter, args): (String, Vec<Value>) = match visible {
            UserVisibility::All => (String::new(), Vec::new()),
            UserVisibility::Own { user, domains } => {
                let mut args = vec![Value::Integer(user.get())];
                let marks: Vec<String> = domains
                    .iter()
                    .map(|d| {
                        args.push(Value::Text(d.as_str().to_owned()));
                        format!("?{}", args.len())
                    })
                    .collect();
                let in_domains = if marks.is_empty() {
                    String::new()
                } else {
                    format!(" OR id IN (SELECT user_id FROM roles WHERE domain IN ({}))", marks.join(", "))
                };
                (format!("WHERE id = ?1{in_domains}"), args)
            }
        };
        paged(
            self.conn(),
            &format!("SELECT COUNT(*) FROM users {filter}"),
            &format!("SELECT {USER_COLUMNS} FROM users {filter} ORDER BY id"),
            args,
            page,
            |r| user_row(r).map(|u| u.user),
        )
    }

    fn update_user(&mut self, user: &User, now: Timestamp) -> Result<(), StoreError> {
        let p = &user.profile;
        self.conn()
            .prepare_cached(
                "UPDATE users SET firstname = ?2, name = ?3, mobile = ?4, language_code_id = ?5, status = ?6,
                                  updated_at = ?7 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    user.id.get(),
                    p.firstname,
                    p.name,
                    p.mobile,
                    p.language_code_id,
                    user.status.as_str(),
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn delete_user(&mut self, id: UserId) -> Result<bool, StoreError> {
        for table in ["roles", "api_keys", "sessions", "one_time_tokens"] {
            self.conn().execute(&format!("DELETE FROM {table} WHERE user_id = ?1"), [id.get()]).map_err(map_err)?;
        }
        self.conn().execute("DELETE FROM users WHERE id = ?1", [id.get()]).map(|n| n > 0).map_err(map_err)
    }

    fn set_password_hash(&mut self, id: UserId, hash: &str, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE users SET password_hash = ?2, updated_at = ?3 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![id.get(), hash, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn roles_of(&mut self, user: UserId) -> Result<Vec<RoleGrant>, StoreError> {
        self.conn()
            .prepare_cached("SELECT id, kind, domain, list, granted_at FROM roles WHERE user_id = ?1 ORDER BY id")
            .and_then(|mut st| {
                st.query_map([user.get()], |r| {
                    let kind: String = r.get(1)?;
                    let (domain, list): (String, String) = (r.get(2)?, r.get(3)?);
                    let role = access_columns::role(&kind, &domain, &list).map_err(from_corrupt)?;
                    Ok(RoleGrant {
                        id: RoleId::from_stored(r.get(0)?),
                        user_id: user,
                        role,
                        granted_at: Timestamp::from_unix_micros(r.get(4)?),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(map_err)
    }

    fn grant_role(&mut self, user: UserId, role: &Role, now: Timestamp) -> Result<RoleGrant, StoreError> {
        let (kind, domain, list) = access_columns::role_columns(role);
        self.conn()
            .prepare_cached("INSERT INTO roles (user_id, kind, domain, list, granted_at) VALUES (?1, ?2, ?3, ?4, ?5)")
            .and_then(|mut st| st.execute(params![user.get(), kind, domain, list, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(RoleGrant {
            id: RoleId::from_stored(self.conn().last_insert_rowid()),
            user_id: user,
            role: role.clone(),
            granted_at: now,
        })
    }

    fn revoke_role(&mut self, user: UserId, role: &Role) -> Result<bool, StoreError> {
        let (kind, domain, list) = access_columns::role_columns(role);
        let n = self
            .conn()
            .prepare_cached("DELETE FROM roles WHERE user_id = ?1 AND kind = ?2 AND domain = ?3 AND list = ?4")
            .and_then(|mut st| st.execute(params![user.get(), kind, domain, list]))
            .map_err(map_err)?;
        Ok(n > 0)
    }

    fn count_active_site_admins(&mut self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn()
            .prepare_cached(
                "SELECT COUNT(*) FROM roles JOIN users ON users.id = roles.user_id
                 WHERE roles.kind = 'site_admin' AND users.status = 'active'",
            )
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(map_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn insert_key(&mut self, key: &ApiKey, secret_hash: &str) -> Result<KeyId, StoreError> {
        let (domain, list) = match &key.scope {
            KeyScope::User => (String::new(), String::new()),
            KeyScope::Domain(d) => (d.as_str().to_owned(), String::new()),
            KeyScope::List(d, l) => (d.as_str().to_owned(), l.as_str().to_owned()),
        };
        self.conn()
            .prepare_cached(
                "INSERT INTO api_keys (user_id, name, prefix, secret_hash, scope_kind, domain, list, perms,
                                       rate_limit_per_min, expires_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    key.user_id.get(),
                    key.name,
                    key.prefix,
                    secret_hash,
                    key.scope.kind_str(),
                    domain,
                    list,
                    key.perms.bits(),
                    i64::from(key.rate_limit_per_min),
                    key.expires_at.map(Timestamp::unix_micros),
                    key.created_at.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(KeyId::from_stored(self.conn().last_insert_rowid()))
    }

    fn key_by_prefix(&mut self, prefix: &str) -> Result<Option<(ApiKey, String)>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE prefix = ?1"))
            .and_then(|mut st| st.query_row([prefix], key_row).optional())
            .map_err(map_err)
    }

    fn key_by_id(&mut self, id: KeyId) -> Result<Option<ApiKey>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.get()], key_row).optional())
            .map(|k| k.map(|(key, _)| key))
            .map_err(map_err)
    }

    fn list_keys(&mut self, user: Option<UserId>, page: Page) -> Result<Paged<ApiKey>, StoreError> {
        let args = vec![user.map_or(Value::Null, |u| Value::Integer(u.get()))];
        let keys = paged(
            self.conn(),
            "SELECT COUNT(*) FROM api_keys WHERE ?1 IS NULL OR user_id = ?1",
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE ?1 IS NULL OR user_id = ?1 ORDER BY id DESC"),
            args,
            page,
            key_row,
        )?;
        Ok(Paged { items: keys.items.into_iter().map(|(k, _)| k).collect(), total: keys.total, page })
    }

    fn revoke_key(&mut self, id: KeyId, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL")
            .and_then(|mut st| st.execute(params![id.get(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn insert_session(
        &mut self,
        token_hash: &str,
        user: UserId,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<SessionId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO sessions (token_hash, user_id, created_at, last_seen_at, expires_at)
                 VALUES (?1, ?2, ?3, ?3, ?4)",
            )
            .and_then(|mut st| st.execute(params![token_hash, user.get(), now.unix_micros(), expires_at.unix_micros()]))
            .map_err(map_err)?;
        Ok(SessionId::from_stored(self.conn().last_insert_rowid()))
    }

    fn session_by_token_hash(&mut self, token_hash: &str) -> Result<Option<Session>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT id, user_id, created_at, last_seen_at, expires_at, revoked_at FROM sessions WHERE token_hash = ?1",
            )
            .and_then(|mut st| st.query_row([token_hash], session_row).optional())
            .map_err(map_err)
    }

    fn touch_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE sessions SET last_seen_at = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![id.get(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn revoke_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE sessions SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL")
            .and_then(|mut st| st.execute(params![id.get(), now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn insert_token(
        &mut self,
        purpose: &str,
        token_hash: &str,
        user: Option<UserId>,
        subject: Option<i64>,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO one_time_tokens (purpose, token_hash, user_id, subject_id, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    purpose,
                    token_hash,
                    user.map(UserId::get),
                    subject,
                    now.unix_micros(),
                    expires_at.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn token_by_hash(&mut self, purpose: &str, token_hash: &str) -> Result<Option<OneTimeToken>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT id, user_id, subject_id, expires_at, used_at FROM one_time_tokens
                 WHERE purpose = ?1 AND token_hash = ?2",
            )
            .and_then(|mut st| {
                st.query_row([purpose, token_hash], |r| {
                    Ok(OneTimeToken {
                        id: r.get(0)?,
                        user_id: r.get::<_, Option<i64>>(1)?.map(UserId::from_stored),
                        subject_id: r.get(2)?,
                        expires_at: Timestamp::from_unix_micros(r.get(3)?),
                        used_at: ts(r.get(4)?),
                    })
                })
                .optional()
            })
            .map_err(map_err)
    }

    fn use_token(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached("UPDATE one_time_tokens SET used_at = ?2 WHERE id = ?1 AND used_at IS NULL")
            .and_then(|mut st| st.execute(params![id, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n == 1)
    }
}
