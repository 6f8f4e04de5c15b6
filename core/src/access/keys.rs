//! API keys: `svc_<prefix>_<secret>`, the secret (256 random bits) shown once and stored as its
//! SHA-256, looked up by prefix, never wider than its user at creation and bounded again by the
//! user's roles on every request.

use super::AccessError;
use super::Service;
use super::model::{ApiKey, KeyId, KeyScope, Perm, PermSet, Role, RoleGrant, Target, User};
use super::principal::{Principal, RequestCtx, Via, audit_done, audited_refusal};
use crate::kernel::{DomainName, ListName, Page, Paged, Timestamp, secrets};
use crate::storage::{in_read, in_write};

pub const DEFAULT_RATE_LIMIT_PER_MIN: u32 = 600;
pub const MAX_RATE_LIMIT_PER_MIN: u32 = 100_000;

#[derive(Debug, Clone)]
pub struct NewKey {
    pub name: String,
    pub scope: KeyScope,
    pub perms: PermSet,
    pub expires_at: Option<Timestamp>,
    pub rate_limit_per_min: Option<u32>,
}

impl NewKey {
    /// A key request as the API and the CLI state it (scope kind with its domain and list, permission
    /// names, an RFC 3339 expiry), checked once here for both.
    pub fn parse(
        name: String,
        scope_kind: &str,
        domain: Option<&str>,
        list: Option<&str>,
        perms: &[String],
        expires_at: Option<&str>,
        rate_limit_per_min: Option<u32>,
    ) -> Result<Self, AccessError> {
        let invalid = AccessError::Invalid;
        let domain = domain.map(DomainName::parse).transpose()?;
        let list = list.map(ListName::parse).transpose()?;
        let scope = match (scope_kind, domain, list) {
            ("user", None, None) => KeyScope::User,
            ("domain", Some(d), None) => KeyScope::Domain(d),
            ("list", Some(d), Some(l)) => KeyScope::List(d, l),
            ("user" | "domain" | "list", ..) => {
                return Err(invalid(format!(
                    "scope_kind {scope_kind} takes {}",
                    match scope_kind {
                        "user" => "neither domain nor list",
                        "domain" => "a domain and no list",
                        _ => "a domain and a list",
                    }
                )));
            }
            (other, ..) => return Err(invalid(format!("scope_kind must be user, domain or list, not {other:?}"))),
        };
        let mut set = Vec::new();
        for p in perms {
            set.push(Perm::parse(p).ok_or_else(|| {
                invalid(format!("unknown permission {p:?}: read, members:write, send, moderate or manage"))
            })?);
        }
        let expires_at = expires_at
            .map(|s| {
                Timestamp::parse_rfc3339(s).ok_or_else(|| invalid("expires_at must be an RFC 3339 date or time".into()))
            })
            .transpose()?;
        Ok(Self { name, scope, perms: PermSet::of(&set), expires_at, rate_limit_per_min })
    }
}

/// A key just made: the only moment its secret exists outside the caller's hands.
#[derive(Debug, Clone)]
pub struct CreatedKey {
    pub key: ApiKey,
    pub secret: String,
}

fn own_target(role: &Role) -> Target<'_> {
    match role {
        Role::SiteAdmin => Target::Installation,
        Role::DomainAdmin(d) => Target::Domain(d),
        Role::Owner(d, l) | Role::Moderator(d, l) => Target::List(d, l),
    }
}

/// The widest permissions a user may give a key of `scope`: what its roles allow on the scope
/// itself and on whatever they hold inside it; `read` always at user level (every active user
/// reads what it may see).
pub fn allowed_for(roles: &[Role], scope: &KeyScope) -> PermSet {
    let mut allowed = if *scope == KeyScope::User { PermSet::READ } else { PermSet::NONE };
    for role in roles {
        if let Some(t) = scope.as_target() {
            allowed = allowed.union(role.perms_on(&t));
        }
        let inner = own_target(role);
        if scope.covers(&inner) {
            allowed = allowed.union(role.perms_on(&inner));
        }
    }
    allowed
}

fn validate(new: &NewKey, now: Timestamp) -> Result<u32, AccessError> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(AccessError::Invalid("name must be 1 to 100 characters without control characters".into()));
    }
    if new.perms.is_empty() {
        return Err(AccessError::Invalid("perms must name at least one permission".into()));
    }
    if new.expires_at.is_some_and(|at| at <= now) {
        return Err(AccessError::Invalid("expires_at must be in the future".into()));
    }
    let rate = new.rate_limit_per_min.unwrap_or(DEFAULT_RATE_LIMIT_PER_MIN);
    if !(1..=MAX_RATE_LIMIT_PER_MIN).contains(&rate) {
        return Err(AccessError::Invalid(format!("rate_limit_per_min must be from 1 to {MAX_RATE_LIMIT_PER_MIN}")));
    }
    Ok(rate)
}

fn too_wide(missing: PermSet, scope: &KeyScope) -> AccessError {
    let names: Vec<&str> = missing.iter().map(Perm::as_str).collect();
    let on = match scope {
        KeyScope::User => "its account".to_owned(),
        KeyScope::Domain(d) => format!("domain {d}"),
        KeyScope::List(d, l) => format!("list {l}@{d}"),
    };
    AccessError::Forbidden(format!("a key cannot be wider than its user, who lacks {} on {on}", names.join(", ")))
}

/// A key for the caller's own account (the API).
pub fn create_own(app: &Service, p: &Principal, ctx: &RequestCtx, new: NewKey) -> Result<CreatedKey, AccessError> {
    let target = format!("apikey:{}", new.name.trim());
    let checked = p.authorize_self(Perm::Manage).and_then(|()| {
        let user = p.user.clone().ok_or(AccessError::Forbidden("the operator has no account to hold a key".into()))?;
        if let Via::Key(caller) = &p.via
            && !new.perms.is_subset_of(caller.perms)
        {
            return Err(AccessError::Forbidden("a key cannot make a key wider than itself".into()));
        }
        Ok(user)
    });
    let user = checked.map_err(|e| audited_refusal(app, p, ctx, "apikey.create", &target, e))?;
    create_for(app, p, ctx, &user, &p.roles.clone(), new)
}

/// A key for an account named by the operator (the command line), bounded by that account.
pub fn create_for(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    owner: &User,
    owner_roles: &[Role],
    new: NewKey,
) -> Result<CreatedKey, AccessError> {
    let now = app.clock.now();
    let rate = validate(&new, now)?;
    let allowed = allowed_for(owner_roles, &new.scope);
    if allowed.is_empty() || !new.perms.is_subset_of(allowed) {
        let missing = PermSet::from_bits(new.perms.bits() & !allowed.bits());
        return Err(too_wide(if missing.is_empty() { new.perms } else { missing }, &new.scope));
    }
    let prefix = secrets::random_hex(8);
    let secret = format!("svc_{prefix}_{}", secrets::random_hex(32));
    let mut key = ApiKey {
        id: KeyId::from_stored(0),
        user_id: owner.id,
        name: new.name.trim().to_owned(),
        prefix,
        scope: new.scope,
        perms: new.perms,
        rate_limit_per_min: rate,
        expires_at: new.expires_at,
        created_at: now,
        revoked_at: None,
    };
    key.id = in_write(&*app.store, |tx| {
        let id = tx.insert_key(&key, &secrets::sha256_hex(secret.as_bytes()))?;
        audit_done(tx, p, ctx, now, "apikey.create", &format!("apikey:{id}"))?;
        Ok::<_, AccessError>(id)
    })?;
    Ok(CreatedKey { key, secret })
}

/// The keys the caller administers: its own, or everyone's for a site admin. Newest first.
pub fn list(app: &Service, p: &Principal, page: Page) -> Result<Paged<ApiKey>, AccessError> {
    p.authorize_self(Perm::Manage)?;
    let owner = if p.is_site_admin() { None } else { p.user.as_ref().map(|u| u.id) };
    Ok(in_read(&*app.store, |tx| tx.list_keys(owner, page))?)
}

/// Revokes a key. Idempotent: revoking a revoked key succeeds and changes nothing.
pub fn revoke(app: &Service, p: &Principal, ctx: &RequestCtx, id: KeyId) -> Result<(), AccessError> {
    let target = format!("apikey:{id}");
    let found = p.authorize_self(Perm::Manage).and_then(|()| {
        let key = in_read(&*app.store, |tx| tx.key_by_id(id))?.ok_or(AccessError::NotFound("API key"))?;
        let own = p.user.as_ref().is_some_and(|u| u.id == key.user_id);
        if own || p.is_site_admin() { Ok(key) } else { Err(AccessError::NotFound("API key")) }
    });
    let key = found.map_err(|e| audited_refusal(app, p, ctx, "apikey.revoke", &target, e))?;
    if key.revoked_at.is_some() {
        return Ok(());
    }
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        tx.revoke_key(id, now)?;
        audit_done(tx, p, ctx, now, "apikey.revoke", &target)
    })
}

/// Roles as held, for callers that have grants.
pub fn roles_of(grants: &[RoleGrant]) -> Vec<Role> {
    grants.iter().map(|g| g.role.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{DomainName, ListName};

    #[test]
    fn a_key_is_never_wider_than_its_roles() {
        let ex = DomainName::parse("example.org").unwrap();
        let news = ListName::parse("news").unwrap();
        let jobs = ListName::parse("jobs").unwrap();
        let owner = vec![Role::Owner(ex.clone(), news.clone())];
        assert_eq!(allowed_for(&[], &KeyScope::User), PermSet::READ);
        assert_eq!(allowed_for(&[], &KeyScope::Domain(ex.clone())), PermSet::NONE);
        assert_eq!(allowed_for(&owner, &KeyScope::User), PermSet::ALL);
        assert_eq!(allowed_for(&owner, &KeyScope::List(ex.clone(), news.clone())), PermSet::ALL);
        assert_eq!(allowed_for(&owner, &KeyScope::List(ex.clone(), jobs)), PermSet::READ.intersection(PermSet::NONE));
        assert_eq!(allowed_for(&owner, &KeyScope::Domain(ex.clone())), PermSet::ALL, "it holds a list inside");
        let moderator = vec![Role::Moderator(ex.clone(), news.clone())];
        assert_eq!(allowed_for(&moderator, &KeyScope::List(ex, news)), PermSet::of(&[Perm::Read, Perm::Moderate]));
        assert_eq!(allowed_for(&[Role::SiteAdmin], &KeyScope::User), PermSet::ALL);
    }
}
