//! Granting and revoking roles. A principal grants only what it manages itself: a site admin
//! anything, a domain admin roles within its domains, an owner roles on its list; nobody but a
//! site admin makes a site admin.

use super::Service;
use super::model::{Perm, Role, RoleGrant, Target, UserId};
use super::principal::{Principal, RequestCtx, audit_done, audited_refusal};
use super::{AccessError, users};
use crate::storage::{StoreError, in_write};

fn role_target(role: &Role) -> Target<'_> {
    match role {
        Role::SiteAdmin => Target::Installation,
        Role::DomainAdmin(d) => Target::Domain(d),
        Role::Owner(d, l) | Role::Moderator(d, l) => Target::List(d, l),
    }
}

fn describe(role: &Role) -> String {
    match role {
        Role::SiteAdmin => "site_admin".into(),
        Role::DomainAdmin(d) => format!("domain_admin@{d}"),
        Role::Owner(d, l) => format!("owner@{l}@{d}"),
        Role::Moderator(d, l) => format!("moderator@{l}@{d}"),
    }
}

fn authorize_grant(p: &Principal, role: &Role) -> Result<(), AccessError> {
    // Roles are account administration: a key scoped to a domain or a list does not reach it.
    if let super::Via::Key(k) = &p.via
        && !k.scope.covers(&Target::Installation)
    {
        return Err(AccessError::NotFound("user"));
    }
    if *role == Role::SiteAdmin && !p.is_site_admin() {
        return Err(AccessError::Forbidden("only a site administrator grants site_admin".into()));
    }
    p.authorize(Perm::Manage, &role_target(role), "domain or list")
}

/// The roles of an account that the caller may see.
pub fn list(app: &Service, p: &Principal, ctx: &RequestCtx, user: UserId) -> Result<Vec<RoleGrant>, AccessError> {
    users::get(app, p, ctx, user).map(|(_, grants)| grants)
}

pub fn grant(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    user: UserId,
    role: Role,
) -> Result<RoleGrant, AccessError> {
    let target = format!("user:{user}:{}", describe(&role));
    users::load(app, user)
        .and_then(|_| authorize_grant(p, &role))
        .map_err(|e| audited_refusal(app, p, ctx, "role.grant", &target, e))?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        // A role names a domain or a list that exists: a typo would otherwise grant nothing,
        // silently, and grant it again the day such a domain is created.
        if !tx.role_scope_exists(&role)? {
            return Err(AccessError::Invalid(format!("{} names no existing domain or list", describe(&role))));
        }
        let grant = tx.grant_role(user, &role, now).map_err(|e| match e {
            StoreError::Duplicate => AccessError::Conflict("the account holds this role already".into()),
            other => other.into(),
        })?;
        audit_done(tx, p, ctx, now, "role.grant", &target)?;
        Ok(grant)
    })
}

pub fn revoke(app: &Service, p: &Principal, ctx: &RequestCtx, user: UserId, role: Role) -> Result<(), AccessError> {
    let target = format!("user:{user}:{}", describe(&role));
    users::load(app, user)
        .and_then(|_| authorize_grant(p, &role))
        .map_err(|e| audited_refusal(app, p, ctx, "role.revoke", &target, e))?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.revoke_role(user, &role)? {
            return Err(AccessError::NotFound("role"));
        }
        // Checked after the change, in its transaction, so two concurrent revocations cannot both
        // pass: the installation keeps someone who can administer it.
        if role == Role::SiteAdmin && tx.count_active_site_admins()? == 0 {
            return Err(AccessError::Conflict("the last active site administrator cannot lose the role".into()));
        }
        audit_done(tx, p, ctx, now, "role.revoke", &target)
    })
}
