use super::{PgTx, corrupt, get, paged};
use courrier_core::access::model::{
    ApiKey, KeyId, KeyScope, PermSet, Profile, Role, RoleGrant, RoleId, Session, SessionId, User, UserId, UserStatus,
    UserWithSecret,
};
use courrier_core::access::ports::{AccessRepo, OneTimeToken, UserVisibility};
use courrier_core::kernel::{EmailAddress, Page, Paged, Timestamp};
use courrier_core::storage::StoreError;
use courrier_store_sql::access_columns::{self, Corrupt};
use postgres::Row;
use postgres::types::ToSql;

/// The identity of an account's address: the whole address lowercased, as the SQLite adapter
/// keeps it (`email` keeps the case it was given, for display).
fn email_key(e: &EmailAddress) -> String {
    e.to_string().to_lowercase()
}

fn ts(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp::from_unix_micros)
}

const USER_COLUMNS: &str = "id, email, firstname, name, mobile, language_code_id, password_hash, status, email_verified_at, created_at, updated_at";

fn user_row(r: &Row) -> Result<UserWithSecret, StoreError> {
    let email: String = get(r, 1)?;
    let status: String = get(r, 7)?;
    let password_hash: Option<String> = get(r, 6)?;
    Ok(UserWithSecret {
        user: User {
            id: UserId::from_stored(get(r, 0)?),
            email: EmailAddress::parse(&email).map_err(|_| corrupt("email", &email))?,
            profile: Profile {
                firstname: get(r, 2)?,
                name: get(r, 3)?,
                mobile: get(r, 4)?,
                language_code_id: get(r, 5)?,
            },
            status: UserStatus::parse(&status).ok_or_else(|| corrupt("user status", &status))?,
            has_password: password_hash.is_some(),
            email_verified_at: ts(get(r, 8)?),
            created_at: Timestamp::from_unix_micros(get(r, 9)?),
            updated_at: Timestamp::from_unix_micros(get(r, 10)?),
        },
        password_hash,
    })
}

/// A stored role or key scope no record can be made of.
fn from_corrupt(c: Corrupt) -> StoreError {
    corrupt(c.what, &c.value)
}

const KEY_COLUMNS: &str = "id, user_id, name, prefix, scope_kind, domain, list, perms, rate_limit_per_min, expires_at, created_at, revoked_at, secret_hash";

fn key_row(r: &Row) -> Result<(ApiKey, String), StoreError> {
    let kind: String = get(r, 4)?;
    let (domain, list): (String, String) = (get(r, 5)?, get(r, 6)?);
    let scope = access_columns::key_scope(&kind, &domain, &list).map_err(from_corrupt)?;
    let rate: i64 = get(r, 8)?;
    Ok((
        ApiKey {
            id: KeyId::from_stored(get(r, 0)?),
            user_id: UserId::from_stored(get(r, 1)?),
            name: get(r, 2)?,
            prefix: get(r, 3)?,
            scope,
            perms: PermSet::from_bits(get(r, 7)?),
            rate_limit_per_min: u32::try_from(rate).unwrap_or(u32::MAX),
            expires_at: ts(get(r, 9)?),
            created_at: Timestamp::from_unix_micros(get(r, 10)?),
            revoked_at: ts(get(r, 11)?),
        },
        get(r, 12)?,
    ))
}

fn session_row(r: &Row) -> Result<Session, StoreError> {
    Ok(Session {
        id: SessionId::from_stored(get(r, 0)?),
        user_id: UserId::from_stored(get(r, 1)?),
        created_at: Timestamp::from_unix_micros(get(r, 2)?),
        last_seen_at: Timestamp::from_unix_micros(get(r, 3)?),
        expires_at: Timestamp::from_unix_micros(get(r, 4)?),
        revoked_at: ts(get(r, 5)?),
    })
}

impl AccessRepo for PgTx {
    fn role_scope_exists(&mut self, role: &Role) -> Result<bool, StoreError> {
        let found = match role {
            Role::SiteAdmin => return Ok(true),
            Role::DomainAdmin(d) => self.query_opt("SELECT 1 FROM domains WHERE name = $1", &[&d.as_str()])?,
            Role::Owner(d, l) | Role::Moderator(d, l) => self.query_opt(
                "SELECT 1 FROM lists l JOIN domains d ON d.id = l.domain_id WHERE d.name = $1 AND l.name = $2",
                &[&d.as_str(), &l.as_str()],
            )?,
        };
        Ok(found.is_some())
    }

    fn insert_user(
        &mut self,
        email: &EmailAddress,
        profile: &Profile,
        password_hash: Option<&str>,
        now: Timestamp,
    ) -> Result<UserId, StoreError> {
        let id = super::mailing::insert_id(
            self,
            "INSERT INTO users (email, email_key, firstname, name, mobile, language_code_id, password_hash, status,
                                created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8) ON CONFLICT DO NOTHING RETURNING id",
            &[
                &email.to_string(),
                &email_key(email),
                &profile.firstname,
                &profile.name,
                &profile.mobile,
                &profile.language_code_id,
                &password_hash,
                &now.unix_micros(),
            ],
        )?;
        Ok(UserId::from_stored(id))
    }

    fn user_by_id(&mut self, id: UserId) -> Result<Option<UserWithSecret>, StoreError> {
        let row = self.query_opt(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"), &[&id.get()])?;
        row.as_ref().map(user_row).transpose()
    }

    fn user_by_email(&mut self, email: &EmailAddress) -> Result<Option<UserWithSecret>, StoreError> {
        let row =
            self.query_opt(&format!("SELECT {USER_COLUMNS} FROM users WHERE email_key = $1"), &[&email_key(email)])?;
        row.as_ref().map(user_row).transpose()
    }

    fn list_users(&mut self, visible: &UserVisibility, page: Page) -> Result<Paged<User>, StoreError> {
        let (user, domains): (i64, Vec<String>);
        let (filter, args): (&str, Vec<&(dyn ToSql + Sync)>) = match visible {
            UserVisibility::All => ("", Vec::new()),
            UserVisibility::Own { user: u, domains: ds } => {
                user = u.get();
                domains = ds.iter().map(|d| d.as_str().to_owned()).collect();
                (
                    "WHERE id = $1 OR id IN (SELECT user_id FROM roles WHERE domain = ANY($2))",
                    vec![&user as &(dyn ToSql + Sync), &domains],
                )
            }
        };
        paged(
            self,
            &format!("SELECT COUNT(*) FROM users {filter}"),
            &format!("SELECT {USER_COLUMNS} FROM users {filter} ORDER BY id"),
            &args,
            page,
            |r| user_row(r).map(|u| u.user),
        )
    }

    fn update_user(&mut self, user: &User, now: Timestamp) -> Result<(), StoreError> {
        let p = &user.profile;
        self.execute(
            "UPDATE users SET firstname = $2, name = $3, mobile = $4, language_code_id = $5, status = $6,
                              updated_at = $7 WHERE id = $1",
            &[
                &user.id.get(),
                &p.firstname,
                &p.name,
                &p.mobile,
                &p.language_code_id,
                &user.status.as_str(),
                &now.unix_micros(),
            ],
        )?;
        Ok(())
    }

    fn delete_user(&mut self, id: UserId) -> Result<bool, StoreError> {
        for table in ["roles", "api_keys", "sessions", "one_time_tokens"] {
            self.execute(&format!("DELETE FROM {table} WHERE user_id = $1"), &[&id.get()])?;
        }
        Ok(self.execute("DELETE FROM users WHERE id = $1", &[&id.get()])? > 0)
    }

    fn set_password_hash(&mut self, id: UserId, hash: &str, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "UPDATE users SET password_hash = $2, updated_at = $3 WHERE id = $1",
            &[&id.get(), &hash, &now.unix_micros()],
        )?;
        Ok(())
    }

    fn roles_of(&mut self, user: UserId) -> Result<Vec<RoleGrant>, StoreError> {
        let rows = self.query(
            "SELECT id, kind, domain, list, granted_at FROM roles WHERE user_id = $1 ORDER BY id",
            &[&user.get()],
        )?;
        rows.iter()
            .map(|r| {
                let kind: String = get(r, 1)?;
                let (domain, list): (String, String) = (get(r, 2)?, get(r, 3)?);
                let role = access_columns::role(&kind, &domain, &list).map_err(from_corrupt)?;
                Ok(RoleGrant {
                    id: RoleId::from_stored(get(r, 0)?),
                    user_id: user,
                    role,
                    granted_at: Timestamp::from_unix_micros(get(r, 4)?),
                })
            })
            .collect()
    }

    fn grant_role(&mut self, user: UserId, role: &Role, now: Timestamp) -> Result<RoleGrant, StoreError> {
        let (kind, domain, list) = access_columns::role_columns(role);
        let id = super::mailing::insert_id(
            self,
            "INSERT INTO roles (user_id, kind, domain, list, granted_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING id",
            &[&user.get(), &kind, &domain, &list, &now.unix_micros()],
        )?;
        Ok(RoleGrant { id: RoleId::from_stored(id), user_id: user, role: role.clone(), granted_at: now })
    }

    fn revoke_role(&mut self, user: UserId, role: &Role) -> Result<bool, StoreError> {
        let (kind, domain, list) = access_columns::role_columns(role);
        let n = self.execute(
            "DELETE FROM roles WHERE user_id = $1 AND kind = $2 AND domain = $3 AND list = $4",
            &[&user.get(), &kind, &domain, &list],
        )?;
        Ok(n > 0)
    }

    fn count_active_site_admins(&mut self) -> Result<u64, StoreError> {
        let row = self.query_one(
            "SELECT COUNT(*) FROM roles JOIN users ON users.id = roles.user_id
             WHERE roles.kind = 'site_admin' AND users.status = 'active'",
            &[],
        )?;
        Ok(u64::try_from(get::<i64>(&row, 0)?).unwrap_or(0))
    }

    fn insert_key(&mut self, key: &ApiKey, secret_hash: &str) -> Result<KeyId, StoreError> {
        let (domain, list) = match &key.scope {
            KeyScope::User => (String::new(), String::new()),
            KeyScope::Domain(d) => (d.as_str().to_owned(), String::new()),
            KeyScope::List(d, l) => (d.as_str().to_owned(), l.as_str().to_owned()),
        };
        let id = super::mailing::insert_id(
            self,
            "INSERT INTO api_keys (user_id, name, prefix, secret_hash, scope_kind, domain, list, perms,
                                   rate_limit_per_min, expires_at, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING id",
            &[
                &key.user_id.get(),
                &key.name,
                &key.prefix,
                &secret_hash,
                &key.scope.kind_str(),
                &domain,
                &list,
                &key.perms.bits(),
                &i64::from(key.rate_limit_per_min),
                &key.expires_at.map(Timestamp::unix_micros),
                &key.created_at.unix_micros(),
            ],
        )?;
        Ok(KeyId::from_stored(id))
    }

    fn key_by_prefix(&mut self, prefix: &str) -> Result<Option<(ApiKey, String)>, StoreError> {
        let row = self.query_opt(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE prefix = $1"), &[&prefix])?;
        row.as_ref().map(key_row).transpose()
    }

    fn key_by_id(&mut self, id: KeyId) -> Result<Option<ApiKey>, StoreError> {
        let row = self.query_opt(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1"), &[&id.get()])?;
        Ok(row.as_ref().map(key_row).transpose()?.map(|(key, _)| key))
    }

    fn list_keys(&mut self, user: Option<UserId>, page: Page) -> Result<Paged<ApiKey>, StoreError> {
        let user = user.map(UserId::get);
        let keys = paged(
            self,
            "SELECT COUNT(*) FROM api_keys WHERE $1::BIGINT IS NULL OR user_id = $1",
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE $1::BIGINT IS NULL OR user_id = $1 ORDER BY id DESC"),
            &[&user],
            page,
            key_row,
        )?;
        Ok(Paged { items: keys.items.into_iter().map(|(k, _)| k).collect(), total: keys.total, page })
    }

    fn revoke_key(&mut self, id: KeyId, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            &[&id.get(), &now.unix_micros()],
        )?;
        Ok(())
    }

    fn insert_session(
        &mut self,
        token_hash: &str,
        user: UserId,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<SessionId, StoreError> {
        let id = super::mailing::insert_id(
            self,
            "INSERT INTO sessions (token_hash, user_id, created_at, last_seen_at, expires_at)
             VALUES ($1, $2, $3, $3, $4) ON CONFLICT DO NOTHING RETURNING id",
            &[&token_hash, &user.get(), &now.unix_micros(), &expires_at.unix_micros()],
        )?;
        Ok(SessionId::from_stored(id))
    }

    fn session_by_token_hash(&mut self, token_hash: &str) -> Result<Option<Session>, StoreError> {
        let row = self.query_opt(
            "SELECT id, user_id, created_at, last_seen_at, expires_at, revoked_at FROM sessions WHERE token_hash = $1",
            &[&token_hash],
        )?;
        row.as_ref().map(session_row).transpose()
    }

    fn touch_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError> {
        self.execute("UPDATE sessions SET last_seen_at = $2 WHERE id = $1", &[&id.get(), &now.unix_micros()])?;
        Ok(())
    }

    fn revoke_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            &[&id.get(), &now.unix_micros()],
        )?;
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
        let user = user.map(UserId::get);
        self.guarded(|tx| {
            tx.execute(
                "INSERT INTO one_time_tokens (purpose, token_hash, user_id, subject_id, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&purpose, &token_hash, &user, &subject, &now.unix_micros(), &expires_at.unix_micros()],
            )
        })?;
        Ok(())
    }

    fn token_by_hash(&mut self, purpose: &str, token_hash: &str) -> Result<Option<OneTimeToken>, StoreError> {
        let row = self.query_opt(
            "SELECT id, user_id, subject_id, expires_at, used_at FROM one_time_tokens
             WHERE purpose = $1 AND token_hash = $2",
            &[&purpose, &token_hash],
        )?;
        row.map(|r| {
            Ok(OneTimeToken {
                id: get(&r, 0)?,
                user_id: get::<Option<i64>>(&r, 1)?.map(UserId::from_stored),
                subject_id: get(&r, 2)?,
                expires_at: Timestamp::from_unix_micros(get(&r, 3)?),
                used_at: ts(get(&r, 4)?),
            })
        })
        .transpose()
    }

    fn use_token(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE one_time_tokens SET used_at = $2 WHERE id = $1 AND used_at IS NULL",
            &[&id, &now.unix_micros()],
        )?;
        Ok(n == 1)
    }
}
