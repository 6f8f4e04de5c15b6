//! Administrator sessions: login with a password (throttled per address and per source),
//! logout, and what the session's holder may do.

use super::Service;
use super::model::{Role, User, UserStatus};
use super::principal::{Principal, RequestCtx, SESSION_MAX_SECS, audit_done, csrf_token_for};
use super::{AccessError, password};
use crate::kernel::{EmailAddress, Timestamp, secrets};
use crate::storage::{in_read, in_write};

#[derive(Debug, Clone)]
pub struct LoggedIn {
    pub user: User,
    pub roles: Vec<Role>,
    /// The cookie's value: shown once, stored as its SHA-256.
    pub token: String,
    pub csrf_token: String,
    pub expires_at: Timestamp,
}

/// Checks an address and password, throttled per address and per source: the account and its
/// role grants, or one uniform refusal whatever the reason (the reason is logged). Shared by the
/// administrator login and the OCR service's key login.
pub fn check_credentials(
    app: &Service,
    ctx: &RequestCtx,
    email: &str,
    password_given: &str,
) -> Result<(super::model::User, Vec<super::model::RoleGrant>), AccessError> {
    let now = app.clock.now();
    let address = email.trim().to_lowercase();
    app.limiter.check_login(&address, ctx.source.as_deref(), now)?;
    let found = match EmailAddress::parse(email.trim()) {
        Ok(e) => in_read(&*app.store, |tx| {
            let Some(u) = tx.user_by_email(&e)? else { return Ok(None) };
            let roles = tx.roles_of(u.user.id)?;
            Ok::<_, AccessError>(Some((u, roles)))
        })?,
        Err(_) => None,
    };
    // Verified even when the account is unknown, so timing does not tell which addresses exist.
    let ok = password::verify(password_given, found.as_ref().and_then(|(u, _)| u.password_hash.as_deref()));
    match found {
        Some((u, g)) if ok && u.user.status == UserStatus::Active => {
            app.limiter.clear_login_failures(&address)?;
            Ok((u.user, g))
        }
        _ => {
            app.limiter.record_login_failure(&address, ctx.source.as_deref(), now)?;
            tracing::info!(address = %address, "login refused");
            Err(AccessError::BadLogin)
        }
    }
}

pub fn login(app: &Service, ctx: &RequestCtx, email: &str, password_given: &str) -> Result<LoggedIn, AccessError> {
    let now = app.clock.now();
    let (user, grants) = check_credentials(app, ctx, email, password_given)?;
    let token = secrets::random_token(32);
    let expires_at = now.plus_secs(SESSION_MAX_SECS);
    let me = Principal { user: Some(user.clone()), via: super::Via::Operator, roles: Vec::new() };
    in_write(&*app.store, |tx| {
        let id = tx.insert_session(&secrets::sha256_hex(token.as_bytes()), user.id, now, expires_at)?;
        audit_done(tx, &me, ctx, now, "session.login", &format!("session:{id}"))
    })?;
    let csrf_token = csrf_token_for(&token);
    Ok(LoggedIn { user, roles: grants.into_iter().map(|g| g.role).collect(), token, csrf_token, expires_at })
}

/// Ends the session of `token` if there is one (logging out twice is not an error).
pub fn logout(app: &Service, ctx: &RequestCtx, token: &str) -> Result<(), AccessError> {
    let now = app.clock.now();
    let hash = secrets::sha256_hex(token.as_bytes());
    in_write(&*app.store, |tx| {
        let Some(session) = tx.session_by_token_hash(&hash)? else { return Ok(()) };
        if session.revoked_at.is_some() {
            return Ok(());
        }
        tx.revoke_session(session.id, now)?;
        let user = tx.user_by_id(session.user_id)?.map(|u| u.user);
        let me = Principal { user, via: super::Via::Session(session.id), roles: Vec::new() };
        audit_done(tx, &me, ctx, now, "session.logout", &format!("session:{}", session.id))
    })
}
