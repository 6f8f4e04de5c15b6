//! Who is calling, and what they may do: `authenticate` once per request, then `authorize` for
//! each target the operation touches.

use super::AccessError;
use super::Service;
use super::cache::CachedKey;
use super::model::{ApiKey, Perm, PermSet, Role, SessionId, Target, User, UserStatus};
use crate::access::ports::Tx;
use crate::kernel::{Actor, NewAuditEntry, Outcome, RequestId, Timestamp, secrets};
use crate::storage::{in_read, in_write};
use std::sync::Arc;

/// A session slides with one hour of inactivity and ends twelve hours after login at the latest.
pub const SESSION_IDLE_SECS: i64 = 3600;
pub const SESSION_MAX_SECS: i64 = 12 * 3600;
/// `last_seen_at` is written at most this often: a write per request would cost an fsync each.
const SESSION_TOUCH_EVERY_SECS: i64 = 60;

/// A credential as the frontend found it, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    ApiKey(String),
    Session { token: String, csrf: Option<String> },
}

/// How the principal authenticated.
#[derive(Debug, Clone)]
pub enum Via {
    Key(ApiKey),
    Session(SessionId),
    /// The operator at the command line: the installation's own authority.
    Operator,
}

/// Capability flags of `GET /auth/session`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub manage_installation: bool,
    pub manage_users: bool,
    pub create_domains: bool,
}

/// The context of one request, for audit entries.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub request_id: RequestId,
    /// The client's address, for login throttling.
    pub source: Option<String>,
}

impl RequestCtx {
    pub fn cli() -> Self {
        Self { request_id: RequestId::internal("cli"), source: None }
    }
}

#[derive(Debug, Clone)]
pub struct Principal {
    /// `None` for the operator.
    pub user: Option<User>,
    pub via: Via,
    /// Read from the store for this request.
    pub roles: Vec<Role>,
}

impl Principal {
    pub fn operator() -> Self {
        Self { user: None, via: Via::Operator, roles: vec![Role::SiteAdmin] }
    }

    pub fn actor(&self) -> Actor {
        Actor {
            user_id: self.user.as_ref().map(|u| u.id.get()),
            key_id: match &self.via {
                Via::Key(k) => Some(k.id.get()),
                _ => None,
            },
            member_id: None,
        }
    }

    pub fn is_site_admin(&self) -> bool {
        self.roles.contains(&Role::SiteAdmin)
    }

    /// Whether the roles let this principal create and administer accounts: a site admin, or a
    /// domain admin (for the owners of its lists).
    pub fn administers_accounts(&self) -> bool {
        self.is_site_admin() || self.roles.iter().any(|r| matches!(r, Role::DomainAdmin(_)))
    }

    /// What the caller may do, for an interface to show or hide its controls. Advisory: every
    /// operation checks again.
    pub fn capabilities(&self) -> Capabilities {
        let manage = self.credential_perms().contains(Perm::Manage);
        Capabilities {
            manage_installation: self.is_site_admin() && manage,
            manage_users: self.administers_accounts() && manage,
            create_domains: self.is_site_admin() && manage,
        }
    }

    /// The permissions a key grants; everything for a session or the operator (their roles are
    /// the only bound).
    pub fn credential_perms(&self) -> PermSet {
        match &self.via {
            Via::Key(k) => k.perms,
            Via::Session(_) | Via::Operator => PermSet::ALL,
        }
    }

    /// What the roles allow on `target`.
    pub fn reach(&self, target: &Target) -> PermSet {
        self.roles.iter().fold(PermSet::NONE, |set, r| set.union(r.perms_on(target)))
    }

    /// The permissions on `target`: the roles' reach, within the key's scope and permissions.
    /// Out of reach or out of the key's scope -> 404, never telling the target exists.
    pub fn effective(&self, target: &Target, what: &'static str) -> Result<PermSet, AccessError> {
        if let Via::Key(k) = &self.via
            && !k.scope.covers(target)
        {
            return Err(AccessError::NotFound(what));
        }
        let reach = self.reach(target);
        if reach.is_empty() {
            return Err(AccessError::NotFound(what));
        }
        let mut perms = reach.intersection(self.credential_perms());
        // A list-scoped key sees its domain (to find its list there) and changes nothing of it.
        if let Via::Key(k) = &self.via
            && matches!((&k.scope, target), (super::model::KeyScope::List(..), Target::Domain(_)))
        {
            perms = perms.intersection(PermSet::READ);
        }
        Ok(perms)
    }

    /// The one authorisation check: 404 out of scope, 403 in scope without `need`.
    pub fn authorize(&self, need: Perm, target: &Target, what: &'static str) -> Result<(), AccessError> {
        if self.effective(target, what)?.contains(need) {
            Ok(())
        } else {
            Err(AccessError::Forbidden(format!("this needs the {} permission", need.as_str())))
        }
    }

    /// For operations on the caller's own account and keys: the credential's permissions, as long
    /// as the key may act at user level at all.
    pub fn authorize_self(&self, need: Perm) -> Result<(), AccessError> {
        if let Via::Key(k) = &self.via
            && !k.scope.covers(&Target::Installation)
        {
            return Err(AccessError::NotFound("resource"));
        }
        if self.credential_perms().contains(need) {
            Ok(())
        } else {
            Err(AccessError::Forbidden(format!("this needs the {} permission", need.as_str())))
        }
    }
}

/// Where a refusal's audit entry is written. A check made outside any write (a read, or before a
/// write starts) audits through the service, in a write of its own; a check made inside a write
/// transaction audits there, and that transaction's runner keeps the entry when it refuses
/// ([`crate::storage::in_write_keeping_refusals`]). One rule, whichever the caller holds.
pub trait AuditSink {
    fn now(&self) -> Timestamp;
    fn append_refusal(&mut self, entry: &NewAuditEntry) -> Result<(), crate::storage::StoreError>;
}

impl AuditSink for &Service {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }
    fn append_refusal(&mut self, entry: &NewAuditEntry) -> Result<(), crate::storage::StoreError> {
        in_write(&*self.store, |tx| tx.append_audit(entry)).map(|_| ())
    }
}

/// A write transaction already open, at the time its rule read from the clock.
pub struct InTx<'a, X: ?Sized>(pub &'a mut X, pub Timestamp);

impl<X: ?Sized + Tx> AuditSink for InTx<'_, X> {
    fn now(&self) -> Timestamp {
        self.1
    }
    fn append_refusal(&mut self, entry: &NewAuditEntry) -> Result<(), crate::storage::StoreError> {
        self.0.append_audit(entry).map(|_| ())
    }
}

/// Writes the audit entry of a 403 or 404 refusal (401s and 429s are only logged, so a flood of
/// bad credentials writes nothing), then hands the error back. A refusal whose entry cannot be
/// written is still the answer (logged).
pub fn audited_refusal(
    mut sink: impl AuditSink,
    p: &Principal,
    ctx: &RequestCtx,
    action: &str,
    target: &str,
    e: AccessError,
) -> AccessError {
    if let Some(entry) = refusal_entry(sink.now(), p, ctx, action, target, &e)
        && let Err(store) = sink.append_refusal(&entry)
    {
        tracing::error!(error = %store, "cannot audit a refusal");
    }
    e
}

/// The audit entry of a 403 or 404 refusal; none for the others.
fn refusal_entry(
    at: Timestamp,
    p: &Principal,
    ctx: &RequestCtx,
    action: &str,
    target: &str,
    e: &AccessError,
) -> Option<NewAuditEntry> {
    let outcome = match e {
        AccessError::Forbidden(_) | AccessError::CsrfFailed => Outcome::Forbidden,
        AccessError::NotFound(_) => Outcome::NotFound,
        _ => return None,
    };
    Some(NewAuditEntry {
        at,
        request_id: ctx.request_id.clone(),
        actor: p.actor(),
        action: action.to_owned(),
        target: target.to_owned(),
        outcome,
    })
}

/// Appends the audit entry of a done mutation inside its transaction.
pub fn audit_done(
    tx: &mut dyn Tx,
    p: &Principal,
    ctx: &RequestCtx,
    at: Timestamp,
    action: &str,
    target: &str,
) -> Result<(), AccessError> {
    tx.append_audit(&NewAuditEntry {
        at,
        request_id: ctx.request_id.clone(),
        actor: p.actor(),
        action: action.to_owned(),
        target: target.to_owned(),
        outcome: Outcome::Done,
    })?;
    Ok(())
}

fn refuse(reason: &'static str) -> AccessError {
    tracing::info!(reason, "authentication refused");
    AccessError::Unauthenticated
}

/// The CSRF synchronizer token of a session: derived from its token, so it needs no storage and
/// cannot be computed without the cookie.
pub fn csrf_token_for(session_token: &str) -> String {
    secrets::sha256_hex(format!("csrf:{session_token}").as_bytes())
}

/// Checks a credential. `mutating` requests (POST, PATCH, PUT, DELETE) of a session must carry its
/// CSRF token.
pub fn authenticate(app: &Service, credential: &Credential, mutating: bool) -> Result<Arc<Principal>, AccessError> {
    let now = app.clock.now();
    match credential {
        Credential::None => Err(refuse("no credential")),
        Credential::ApiKey(secret) => {
            // A key the cache knows, unchanged since: no store read.
            let counted = match cached_key(app, secret) {
                Cached::Answer(known) => return known,
                Cached::Unknown => Quota::Take,
                Cached::Stale => Quota::Taken,
            };
            let (prefix, _) = parse_key(secret).ok_or_else(|| refuse("malformed API key"))?;
            // Read the marker before the store, so a commit racing this read invalidates the entry.
            let marker = app.store.access_marker().ok();
            let found = in_read(&*app.store, |tx| {
                let Some((key, secret_hash)) = tx.key_by_prefix(prefix)? else { return Ok(None) };
                let user = tx.user_by_id(key.user_id)?.map(|u| u.user);
                let roles = tx.roles_of(key.user_id)?.into_iter().map(|g| g.role).collect();
                Ok::<_, AccessError>(Some(CachedKey::new(key, secret_hash, user, roles)))
            })?;
            let entry = found.ok_or_else(|| refuse("unknown API key"))?;
            let principal = check_key(app, &entry, secret, now, counted);
            if let Some(m) = marker {
                app.key_cache.put(m, prefix, entry);
            }
            principal
        }
        Credential::Session { token, csrf } => {
            let hash = secrets::sha256_hex(token.as_bytes());
            let found = in_read(&*app.store, |tx| {
                let Some(session) = tx.session_by_token_hash(&hash)? else { return Ok(None) };
                let user = tx.user_by_id(session.user_id)?;
                let roles = tx.roles_of(session.user_id)?;
                Ok::<_, AccessError>(Some((session, user, roles)))
            })?;
            let (session, user, roles) = found.ok_or_else(|| refuse("unknown session"))?;
            if session.revoked_at.is_some() {
                return Err(refuse("session logged out"));
            }
            if session.expires_at <= now || session.last_seen_at.plus_secs(SESSION_IDLE_SECS) <= now {
                return Err(refuse("session expired"));
            }
            let user = user.filter(|u| u.user.status == UserStatus::Active).ok_or_else(|| refuse("inactive user"))?;
            if mutating {
                let expected = csrf_token_for(token);
                let given = csrf.as_deref().unwrap_or("");
                if !secrets::constant_time_eq(expected.as_bytes(), given.as_bytes()) {
                    tracing::info!("CSRF token missing or wrong");
                    return Err(AccessError::CsrfFailed);
                }
            }
            if session.last_seen_at.plus_secs(SESSION_TOUCH_EVERY_SECS) <= now {
                in_write(&*app.store, |tx| tx.touch_session(session.id, now))?;
            }
            Ok(Arc::new(Principal {
                user: Some(user.user),
                via: Via::Session(session.id),
                roles: roles.into_iter().map(|g| g.role).collect(),
            }))
        }
    }
}

/// Authenticates a key the cache knows, without reading the store's tables: for the frontend to
/// call on its own thread when [`checks_cached_keys_in_memory`], in the blocking pool otherwise
/// (the marker and the quota are then a shared database's). `None` when the cache cannot answer
/// (unknown key, store changed, marker unreadable): then `authenticate` does.
/// Whether checking a cached key touches only this process (an embedded store's marker, quotas
/// in memory): then it may run on an async runtime's thread.
pub fn checks_cached_keys_in_memory(app: &Service) -> bool {
    !app.store.is_shared()
}

pub fn authenticate_cached_key(app: &Service, secret: &str) -> Option<Result<Arc<Principal>, AccessError>> {
    match cached_key(app, secret) {
        Cached::Answer(answer) => Some(answer),
        Cached::Unknown | Cached::Stale => None,
    }
}

/// What the key cache could say of a key.
enum Cached {
    Answer(Result<Arc<Principal>, AccessError>),
    /// Not known, or known to a cache the store has moved on from: read the store.
    Unknown,
    /// As `Unknown`, the request's quota already counted.
    Stale,
}

/// Whether a key's request still has its quota to count.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quota {
    Take,
    Taken,
}

/// A cached key checked against the store's marker. On an embedded store the marker is read
/// first (a file header, no query). On a shared one the marker comes back with the quota's count
/// (one round trip, `Limits::take_key_request_marked`): the key is checked against the entries as
/// of the marker last seen, and the answer stands only when the store's marker, read by the same
/// statement that counted the request, is still that one; otherwise the cache is emptied and the
/// store is read. A refusal is never taken from an entry that might be stale: the store decides.
fn cached_key(app: &Service, secret: &str) -> Cached {
    let Some((prefix, _)) = parse_key(secret) else { return Cached::Answer(Err(refuse("malformed API key"))) };
    let now = app.clock.now();
    if !app.store.is_shared() {
        let Some(entry) = app.store.access_marker().ok().and_then(|marker| app.key_cache.get(marker, prefix)) else {
            return Cached::Unknown;
        };
        return Cached::Answer(check_key(app, &entry, secret, now, Quota::Take));
    }
    let Some(marker) = app.key_cache.marker() else { return Cached::Unknown };
    let Some(entry) = app.key_cache.get(marker, prefix) else { return Cached::Unknown };
    let Ok(principal) = check_key(app, &entry, secret, now, Quota::Taken) else { return Cached::Unknown };
    let seen = match app.limiter.take_key_request_marked(entry.key.id.get(), entry.key.rate_limit_per_min, now) {
        Err(refused) => return Cached::Answer(Err(refused)),
        Ok(Some(seen)) => Some(seen),
        // Quotas counted elsewhere than the store: its marker read apart.
        Ok(None) => app.store.access_marker().ok(),
    };
    match seen {
        Some(seen) if seen == marker => Cached::Answer(Ok(principal)),
        Some(seen) => {
            // Empties the cache: users, roles or keys changed since it was filled.
            let _ = app.key_cache.get(seen, prefix);
            Cached::Stale
        }
        None => Cached::Stale,
    }
}

fn check_key(
    app: &Service,
    entry: &CachedKey,
    secret: &str,
    now: Timestamp,
    quota: Quota,
) -> Result<Arc<Principal>, AccessError> {
    // The bytes already checked against this entry's hash need no SHA-256 again (the entry, and
    // what it remembers, go with any change of users, roles or keys).
    if !entry.verified.is(secret.as_bytes()) {
        if !secrets::constant_time_eq(secrets::sha256_hex(secret.as_bytes()).as_bytes(), entry.secret_hash.as_bytes()) {
            return Err(refuse("wrong API key secret"));
        }
        entry.verified.remember(secret.as_bytes());
    }
    if entry.key.revoked_at.is_some() {
        return Err(refuse("revoked API key"));
    }
    if entry.key.expires_at.is_some_and(|at| at <= now) {
        return Err(refuse("expired API key"));
    }
    let principal = entry.principal.as_ref().ok_or_else(|| refuse("inactive user"))?;
    if quota == Quota::Take {
        app.limiter.take_key_request(entry.key.id.get(), entry.key.rate_limit_per_min, now)?;
    }
    Ok(Arc::clone(principal))
}

/// Splits `svc_<prefix>_<secret>`: a 16-hex-digit prefix and a 64-hex-digit secret (256 bits).
pub fn parse_key(s: &str) -> Option<(&str, &str)> {
    let rest = s.strip_prefix("svc_")?;
    let (prefix, secret) = rest.split_once('_')?;
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex(prefix, 16) && hex(secret, 64)).then_some((prefix, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_follow_roles_and_the_keys_permissions() {
        use crate::access::model::{ApiKey, KeyId, KeyScope, PermSet, UserId};
        use crate::kernel::DomainName;
        let key = |perms: PermSet| {
            Via::Key(ApiKey {
                id: KeyId::from_stored(1),
                user_id: UserId::from_stored(1),
                name: "k".into(),
                prefix: "p".into(),
                scope: KeyScope::User,
                perms,
                rate_limit_per_min: 1,
                expires_at: None,
                created_at: Timestamp::from_unix_secs(0),
                revoked_at: None,
            })
        };
        let p = |roles: Vec<Role>, via: Via| Principal { user: None, via, roles };
        let domain_admin = vec![Role::DomainAdmin(DomainName::parse("example.org").unwrap())];
        let caps = p(domain_admin.clone(), Via::Operator).capabilities();
        assert!(caps.manage_users && !caps.manage_installation && !caps.create_domains);
        assert!(!p(domain_admin, key(PermSet::READ)).capabilities().manage_users, "a read key manages nothing");
        let caps = p(vec![Role::SiteAdmin], key(PermSet::ALL)).capabilities();
        assert!(caps.manage_installation && caps.manage_users && caps.create_domains);
        assert_eq!(
            p(Vec::new(), Via::Operator).capabilities(),
            Capabilities { manage_installation: false, manage_users: false, create_domains: false }
        );
    }

    #[test]
    fn key_format_is_strict() {
        let good = format!("svc_{}_{}", "0123456789abcdef", "a".repeat(64));
        assert_eq!(parse_key(&good), Some(("0123456789abcdef", &*"a".repeat(64))));
        for bad in [
            "".to_owned(),
            "svc_".to_owned(),
            format!("svc_{}_{}", "0123456789ABCDEF", "a".repeat(64)),
            format!("svc_{}_{}", "0123456789abcde", "a".repeat(64)),
            format!("svc_{}_{}", "0123456789abcdef", "a".repeat(63)),
            format!("key_{}_{}", "0123456789abcdef", "a".repeat(64)),
            format!("svc_{}_{}_x", "0123456789abcdef", "a".repeat(64)),
        ] {
            assert_eq!(parse_key(&bad), None, "{bad}");
        }
    }
}
