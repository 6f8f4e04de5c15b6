//! The access context's storage port: its transaction is the kernel's [`Transaction`] plus the
//! repository of users, roles, API keys, sessions and one-time tokens. The contexts above access
//! (mailing, OCR) extend this transaction with their own repositories.

use super::model::{ApiKey, KeyId, Profile, Role, RoleGrant, Session, SessionId, User, UserId, UserWithSecret};
use crate::kernel::{DomainName, EmailAddress, Page, Paged, Timestamp};
use crate::storage::{StoreError, Transaction};

/// One transaction of the access context. Dropped without `commit`, it rolls back.
pub trait Tx: Transaction + AccessRepo {}

/// The database as the access context sees it.
pub type Store = dyn crate::storage::Store<dyn Tx>;

/// Which accounts a listing shows: every one, or the caller's own and those holding a role in
/// the given domains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserVisibility {
    All,
    Own { user: UserId, domains: Vec<DomainName> },
}

/// A one-time token's record (set-password, confirmation, login links).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneTimeToken {
    pub id: i64,
    pub user_id: Option<UserId>,
    pub subject_id: Option<i64>,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
}

/// Users, roles, API keys, sessions and one-time tokens.
pub trait AccessRepo {
    /// [`StoreError::Duplicate`] when an account with this address exists.
    fn insert_user(
        &mut self,
        email: &EmailAddress,
        profile: &Profile,
        password_hash: Option<&str>,
        now: Timestamp,
    ) -> Result<UserId, StoreError>;
    fn user_by_id(&mut self, id: UserId) -> Result<Option<UserWithSecret>, StoreError>;
    fn user_by_email(&mut self, email: &EmailAddress) -> Result<Option<UserWithSecret>, StoreError>;
    fn list_users(&mut self, visible: &UserVisibility, page: Page) -> Result<Paged<User>, StoreError>;
    fn update_user(&mut self, user: &User, now: Timestamp) -> Result<(), StoreError>;
    /// Deletes the account with its roles, keys, sessions and one-time tokens. What other contexts
    /// keep of the user is theirs to delete first ([`UserData`]). Whether there was one.
    fn delete_user(&mut self, id: UserId) -> Result<bool, StoreError>;
    fn set_password_hash(&mut self, id: UserId, hash: &str, now: Timestamp) -> Result<(), StoreError>;

    fn roles_of(&mut self, user: UserId) -> Result<Vec<RoleGrant>, StoreError>;
    /// [`StoreError::Duplicate`] when the user holds the role already.
    fn grant_role(&mut self, user: UserId, role: &Role, now: Timestamp) -> Result<RoleGrant, StoreError>;
    /// Whether the user held it.
    fn revoke_role(&mut self, user: UserId, role: &Role) -> Result<bool, StoreError>;
    /// Whether the domain or list a role is held on exists (always, for `site_admin`).
    fn role_scope_exists(&mut self, role: &Role) -> Result<bool, StoreError>;
    /// Active accounts holding `site_admin`.
    fn count_active_site_admins(&mut self) -> Result<u64, StoreError>;

    fn insert_key(&mut self, key: &ApiKey, secret_hash: &str) -> Result<KeyId, StoreError>;
    /// The key and the SHA-256 of its secret.
    fn key_by_prefix(&mut self, prefix: &str) -> Result<Option<(ApiKey, String)>, StoreError>;
    fn key_by_id(&mut self, id: KeyId) -> Result<Option<ApiKey>, StoreError>;
    /// Keys of one user, or of everyone; newest first.
    fn list_keys(&mut self, user: Option<UserId>, page: Page) -> Result<Paged<ApiKey>, StoreError>;
    fn revoke_key(&mut self, id: KeyId, now: Timestamp) -> Result<(), StoreError>;

    fn insert_session(
        &mut self,
        token_hash: &str,
        user: UserId,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<SessionId, StoreError>;
    fn session_by_token_hash(&mut self, token_hash: &str) -> Result<Option<Session>, StoreError>;
    fn touch_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError>;
    fn revoke_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError>;

    fn insert_token(
        &mut self,
        purpose: &str,
        token_hash: &str,
        user: Option<UserId>,
        subject: Option<i64>,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError>;
    fn token_by_hash(&mut self, purpose: &str, token_hash: &str) -> Result<Option<OneTimeToken>, StoreError>;
    /// Marks the token used; `false` when it already was (so two concurrent uses cannot both win).
    fn use_token(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError>;
}

/// What another context keeps of a user (the OCR service's documents), deleted with the account.
/// Access names no other context: the composition root registers each holder
/// (`Service::hold_user_data`), and `users::delete` calls them before the account goes.
pub trait UserData: Send + Sync {
    /// Deletes everything kept of `user`, durably, in the holder's own transaction; deleting what
    /// is already gone succeeds (a deletion retried after a failure completes).
    fn erase(&self, user: UserId) -> Result<(), StoreError>;
}
