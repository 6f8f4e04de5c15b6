//! Accounts: creation (an invitation when no password is given), listing and reading in scope,
//! status and profile changes, passwords.

use super::Service;
use super::model::{Perm, PermSet, Profile, Role, RoleGrant, User, UserId, UserStatus};
use super::principal::{Principal, RequestCtx, audit_done, audited_refusal};
use super::{AccessError, password};
use crate::access::ports::UserVisibility;
use crate::kernel::{DomainName, EmailAddress, Notice, Page, Paged};
use crate::storage::{StoreError, in_read, in_write};

/// Set-password links of invitations live this long.
pub const INVITATION_TTL_SECS: i64 = 72 * 3600;
pub const SET_PASSWORD: &str = "set_password";
/// A forgotten-password link (the same set-password token, one use) lives this long.
pub const RESET_TTL_SECS: i64 = 3600;
/// Forgotten-password requests allowed per address, and per source, within [`RESET_WINDOW_SECS`]:
/// the same shape as the login throttles (`limits.rs`), counted whether or not the address has an
/// account, so that the limit tells nothing either.
pub const RESETS_PER_ADDRESS: usize = 3;
pub const RESETS_PER_SOURCE: usize = 20;
pub const RESET_WINDOW_SECS: i64 = 3600;

#[derive(Debug, Clone)]
pub struct NewUser {
    pub email: EmailAddress,
    pub profile: Profile,
    pub password: Option<String>,
}

/// Whether the invitation mail went out. The account exists either way: a failed mail is
/// reported, not rolled back, so that retrying does not meet "already exists".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invitation {
    NotNeeded,
    Sent,
    Failed(String),
}

impl Invitation {
    pub fn as_str(&self) -> &'static str {
        match self {
            Invitation::NotNeeded => "not_needed",
            Invitation::Sent => "sent",
            Invitation::Failed(_) => "failed",
        }
    }
}

fn admin_domains(p: &Principal) -> Vec<&DomainName> {
    p.roles
        .iter()
        .filter_map(|r| match r {
            Role::DomainAdmin(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// What the principal may do to an account: everything to its own (its status aside) and, for a
/// site admin, to any; a domain admin reads the accounts holding roles in its domains, and
/// manages those whose roles all lie there.
fn reach_over(p: &Principal, target: &User, target_roles: &[Role]) -> PermSet {
    if p.is_site_admin() || p.user.as_ref().is_some_and(|u| u.id == target.id) {
        return PermSet::ALL;
    }
    let domains = admin_domains(p);
    let inside = |r: &Role| r.domain().is_some_and(|d| domains.contains(&d));
    if !target_roles.iter().any(inside) {
        PermSet::NONE
    } else if target_roles.iter().all(inside) {
        PermSet::ALL
    } else {
        PermSet::READ
    }
}

pub(super) fn authorize_over(p: &Principal, need: Perm, target: &User, roles: &[Role]) -> Result<(), AccessError> {
    // A key scoped to a domain or a list does not reach accounts at all; a user-scoped key without
    // the permission is in scope and gets 403 below.
    if let super::Via::Key(k) = &p.via
        && !k.scope.covers(&super::Target::Installation)
    {
        return Err(AccessError::NotFound("user"));
    }
    let reach = reach_over(p, target, roles);
    if reach.is_empty() {
        return Err(AccessError::NotFound("user"));
    }
    if reach.intersection(p.credential_perms()).contains(need) {
        Ok(())
    } else {
        Err(AccessError::Forbidden(format!("this needs the {} permission on this account", need.as_str())))
    }
}

/// Loads an account and its roles.
pub(super) fn load(app: &Service, id: UserId) -> Result<(User, Vec<RoleGrant>), AccessError> {
    in_read(&*app.store, |tx| {
        let user = tx.user_by_id(id)?.ok_or(AccessError::NotFound("user"))?;
        Ok((user.user, tx.roles_of(id)?))
    })
}

fn roles(grants: &[RoleGrant]) -> Vec<Role> {
    grants.iter().map(|g| g.role.clone()).collect()
}

pub fn create(app: &Service, p: &Principal, ctx: &RequestCtx, new: NewUser) -> Result<(User, Invitation), AccessError> {
    let target = format!("user:{}", new.email);
    let allowed = p.authorize_self(Perm::Manage).and_then(|()| {
        if p.administers_accounts() {
            Ok(())
        } else {
            Err(AccessError::Forbidden("only a site or domain administrator creates accounts".into()))
        }
    });
    allowed.map_err(|e| audited_refusal(app, p, ctx, "user.create", &target, e))?;
    check_profile(&new.profile)?;
    // Hashing takes ~40 ms: done before the write lock is taken.
    let hash = new.password.as_deref().map(password::hash).transpose()?;
    let now = app.clock.now();
    let token = crate::kernel::secrets::random_token(32);
    let user = in_write(&*app.store, |tx| {
        if tx.user_by_email(&new.email)?.is_some() {
            return Err(AccessError::Conflict(format!("an account with the address {} exists", new.email)));
        }
        let id = tx.insert_user(&new.email, &new.profile, hash.as_deref(), now).map_err(|e| match e {
            StoreError::Duplicate => AccessError::Conflict(format!("an account with the address {} exists", new.email)),
            other => other.into(),
        })?;
        if hash.is_none() {
            let token_hash = crate::kernel::secrets::sha256_hex(token.as_bytes());
            tx.insert_token(SET_PASSWORD, &token_hash, Some(id), None, now, now.plus_secs(INVITATION_TTL_SECS))?;
        }
        audit_done(tx, p, ctx, now, "user.create", &format!("user:{}", id))?;
        Ok(tx.user_by_id(id)?.ok_or(AccessError::NotFound("user"))?.user)
    })?;
    if hash.is_some() {
        return Ok((user, Invitation::NotNeeded));
    }
    let intro = format!("An account was opened for you on Courrier ({}).", app.settings.public_url);
    let validity = "the link works once, for 72 hours";
    match mail_password_link(app, &user, &token, "Your Courrier account", &intro, validity, "", now) {
        Ok(()) => Ok((user, Invitation::Sent)),
        Err(e) => {
            tracing::warn!(user = user.id.get(), error = %e, "invitation mail failed");
            Ok((user, Invitation::Failed(e.to_string())))
        }
    }
}

fn check_profile(profile: &Profile) -> Result<(), AccessError> {
    for (name, value) in [
        ("firstname", &profile.firstname),
        ("name", &profile.name),
        ("mobile", &profile.mobile),
        ("language_code_id", &profile.language_code_id),
    ] {
        if let Some(v) = value
            && (v.chars().count() > 200 || v.chars().any(char::is_control))
        {
            return Err(AccessError::Invalid(format!(
                "{name} must be at most 200 characters without control characters"
            )));
        }
    }
    Ok(())
}

pub fn list(app: &Service, p: &Principal, page: Page) -> Result<Paged<User>, AccessError> {
    p.authorize_self(Perm::Read)?;
    let visible = match &p.user {
        _ if p.is_site_admin() => UserVisibility::All,
        Some(u) => UserVisibility::Own { user: u.id, domains: admin_domains(p).into_iter().cloned().collect() },
        None => UserVisibility::All,
    };
    Ok(in_read(&*app.store, |tx| tx.list_users(&visible, page))?)
}

/// An account and the roles of it the caller may see.
pub fn get(app: &Service, p: &Principal, ctx: &RequestCtx, id: UserId) -> Result<(User, Vec<RoleGrant>), AccessError> {
    let target = format!("user:{id}");
    let found = load(app, id).and_then(|(user, grants)| {
        authorize_over(p, Perm::Read, &user, &roles(&grants))?;
        Ok((user, grants))
    });
    let (user, grants) = found.map_err(|e| audited_refusal(app, p, ctx, "user.read", &target, e))?;
    let own = p.user.as_ref().is_some_and(|u| u.id == id);
    let visible = grants
        .into_iter()
        .filter(|g| own || p.is_site_admin() || g.role.domain().is_some_and(|d| admin_domains(p).contains(&d)))
        .collect();
    Ok((user, visible))
}

/// Present fields are applied; `Some(None)` clears a profile field.
#[derive(Debug, Clone, Default)]
pub struct UserPatch {
    pub status: Option<UserStatus>,
    pub firstname: Option<Option<String>>,
    pub name: Option<Option<String>>,
    pub mobile: Option<Option<String>>,
    pub language_code_id: Option<Option<String>>,
}

pub fn update(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    id: UserId,
    patch: UserPatch,
) -> Result<User, AccessError> {
    let target = format!("user:{id}");
    let checked = load(app, id).and_then(|(user, grants)| {
        authorize_over(p, Perm::Manage, &user, &roles(&grants))?;
        let own = p.user.as_ref().is_some_and(|u| u.id == id);
        if own && patch.status.is_some_and(|s| s != user.status) {
            return Err(AccessError::Forbidden("an account's own status is changed by another administrator".into()));
        }
        Ok(user)
    });
    let mut user = checked.map_err(|e| audited_refusal(app, p, ctx, "user.update", &target, e))?;
    if let Some(s) = patch.status {
        user.status = s;
    }
    for (field, value) in [
        (&mut user.profile.firstname, patch.firstname),
        (&mut user.profile.name, patch.name),
        (&mut user.profile.mobile, patch.mobile),
        (&mut user.profile.language_code_id, patch.language_code_id),
    ] {
        if let Some(v) = value {
            *field = v;
        }
    }
    check_profile(&user.profile)?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        tx.update_user(&user, now)?;
        audit_done(tx, p, ctx, now, "user.update", &target)?;
        Ok::<_, AccessError>(tx.user_by_id(id)?.ok_or(AccessError::NotFound("user"))?.user)
    })
}

/// Deletes an account: first what other contexts keep of it (the OCR service's documents, through
/// the holders the composition root registered), then its roles, keys, sessions, tokens and the
/// account itself, audited. Not one's own account, nor the last active site administrator.
pub fn delete(app: &Service, p: &Principal, ctx: &RequestCtx, id: UserId) -> Result<(), AccessError> {
    let target = format!("user:{id}");
    let checked = load(app, id).and_then(|(user, grants)| {
        authorize_over(p, Perm::Manage, &user, &roles(&grants))?;
        if p.user.as_ref().is_some_and(|u| u.id == id) {
            return Err(AccessError::Forbidden("an account is deleted by another administrator".into()));
        }
        let admin = user.status == UserStatus::Active && grants.iter().any(|g| g.role == Role::SiteAdmin);
        if admin && in_read(&*app.store, |tx| tx.count_active_site_admins())? <= 1 {
            return Err(AccessError::Conflict("the last active site administrator cannot be deleted".into()));
        }
        Ok(admin)
    });
    let admin = checked.map_err(|e| audited_refusal(app, p, ctx, "user.delete", &target, e))?;
    for holder in app.user_data_holders() {
        holder.erase(id)?;
    }
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.delete_user(id)? {
            return Err(AccessError::NotFound("user"));
        }
        // Checked again in the deleting transaction: two concurrent deletions cannot both pass.
        if admin && tx.count_active_site_admins()? == 0 {
            return Err(AccessError::Conflict("the last active site administrator cannot be deleted".into()));
        }
        audit_done(tx, p, ctx, now, "user.delete", &target)
    })
}

pub fn set_password(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    id: UserId,
    new_password: &str,
) -> Result<(), AccessError> {
    let target = format!("user:{id}");
    load(app, id)
        .and_then(|(user, grants)| authorize_over(p, Perm::Manage, &user, &roles(&grants)))
        .map_err(|e| audited_refusal(app, p, ctx, "user.password", &target, e))?;
    let hash = password::hash(new_password)?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        tx.set_password_hash(id, &hash, now)?;
        audit_done(tx, p, ctx, now, "user.password", &target)
    })
}

/// The account a set-password link is for, while the link is unused and unexpired.
pub fn password_token_user(app: &Service, token: &str) -> Result<User, AccessError> {
    let now = app.clock.now();
    let hash = crate::kernel::secrets::sha256_hex(token.as_bytes());
    in_read(&*app.store, |tx| {
        let t = tx.token_by_hash(SET_PASSWORD, &hash)?.filter(|t| t.used_at.is_none() && t.expires_at > now);
        let user_id = t.and_then(|t| t.user_id).ok_or(AccessError::NotFound("link"))?;
        Ok(tx.user_by_id(user_id)?.ok_or(AccessError::NotFound("link"))?.user)
    })
}

/// Sets the password through a set-password link, which then stops working.
pub fn set_password_with_token(
    app: &Service,
    ctx: &RequestCtx,
    token: &str,
    new_password: &str,
) -> Result<User, AccessError> {
    let hash = password::hash(new_password)?;
    let now = app.clock.now();
    let token_hash = crate::kernel::secrets::sha256_hex(token.as_bytes());
    in_write(&*app.store, |tx| {
        let t = tx
            .token_by_hash(SET_PASSWORD, &token_hash)?
            .filter(|t| t.used_at.is_none() && t.expires_at > now)
            .ok_or(AccessError::NotFound("link"))?;
        let user_id = t.user_id.ok_or(AccessError::NotFound("link"))?;
        if !tx.use_token(t.id, now)? {
            return Err(AccessError::NotFound("link"));
        }
        tx.set_password_hash(user_id, &hash, now)?;
        let user = tx.user_by_id(user_id)?.ok_or(AccessError::NotFound("link"))?.user;
        let me = Principal { user: Some(user.clone()), via: super::Via::Operator, roles: Vec::new() };
        audit_done(tx, &me, ctx, now, "user.password", &format!("user:{user_id}"))?;
        Ok(user)
    })
}

/// Counts a forgotten-password request against its address and its source; refuses it (429 with
/// the wait) past [`RESETS_PER_ADDRESS`] or [`RESETS_PER_SOURCE`] in the window. The address is
/// counted as typed, lowercased, whether or not it is an account's or even an address.
pub fn take_password_reset(app: &Service, ctx: &RequestCtx, address: &str) -> Result<(), AccessError> {
    let now = app.clock.now();
    let key = address.trim().to_lowercase();
    if let Some(source) = ctx.source.as_deref() {
        app.limiter.take_window(&format!("reset-source:{source}"), RESETS_PER_SOURCE, RESET_WINDOW_SECS, now)?;
    }
    app.limiter.take_window(&format!("reset-address:{key}"), RESETS_PER_ADDRESS, RESET_WINDOW_SECS, now)
}

/// Mails a one-time link to set a new password (`/p/password/{token}`, the invitation's page) to
/// the active account of `address`. Says nothing of whether there is one: `Ok(false)` when no
/// mail went out (no such account, a disabled one, an address that is not one, a failed mail),
/// for the log only. Call [`take_password_reset`] first.
pub fn send_password_reset(app: &Service, ctx: &RequestCtx, address: &str) -> Result<bool, AccessError> {
    let Ok(email) = EmailAddress::parse(address.trim()) else { return Ok(false) };
    let now = app.clock.now();
    let token = crate::kernel::secrets::random_token(32);
    let token_hash = crate::kernel::secrets::sha256_hex(token.as_bytes());
    let user = in_write(&*app.store, |tx| {
        let Some(found) = tx.user_by_email(&email)? else { return Ok(None) };
        let user = found.user;
        if user.status != UserStatus::Active {
            return Ok(None);
        }
        tx.insert_token(SET_PASSWORD, &token_hash, Some(user.id), None, now, now.plus_secs(RESET_TTL_SECS))?;
        let me = Principal { user: Some(user.clone()), via: super::Via::Operator, roles: Vec::new() };
        audit_done(tx, &me, ctx, now, "user.password_reset", &format!("user:{}", user.id))?;
        Ok::<_, AccessError>(Some(user))
    })?;
    let Some(user) = user else { return Ok(false) };
    let intro = format!(
        "Someone (you, we hope) asked to sign in to Courrier ({}) without the password.",
        app.settings.public_url
    );
    let validity = "the link works once, for one hour";
    let outro = " Your password stays as it is.";
    match mail_password_link(app, &user, &token, "Your Courrier sign-in link", &intro, validity, outro, now) {
        Ok(()) => Ok(true),
        Err(e) => {
            tracing::warn!(user = user.id.get(), error = %e, "password reset mail failed");
            Ok(false)
        }
    }
}

/// The account of an address, for the command line.
pub fn by_email(app: &Service, email: &EmailAddress) -> Result<(User, Vec<RoleGrant>), AccessError> {
    in_read(&*app.store, |tx| {
        let user = tx.user_by_email(email)?.ok_or(AccessError::NotFound("user"))?;
        let grants = tx.roles_of(user.user.id)?;
        Ok((user.user, grants))
    })
}

/// Mails a set-password link (`/p/password/{token}`): an invitation or a forgotten password.
#[allow(clippy::too_many_arguments)]
fn mail_password_link(
    app: &Service,
    user: &User,
    token: &str,
    subject: &str,
    intro: &str,
    validity: &str,
    outro: &str,
    now: crate::kernel::Timestamp,
) -> Result<(), crate::kernel::SendError> {
    let link = format!("{}/p/password/{token}", app.settings.public_url);
    let body = format!(
        "Hello,\n\n{intro}\nChoose your password here ({validity}):\n\n{link}\n\nIf you did not expect this, ignore this message.{outro}\n"
    );
    let notice = Notice { from: &app.settings.mail_from, to: &user.email, subject, body: &body, date: now };
    app.mail.send(&notice.compose())
}
