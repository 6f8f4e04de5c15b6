//! The OCR service's own login and logout (`POST /api/login`, `/api/logout`): a password buys a
//! new user-scoped API key, and logging out revokes the key that calls. Same users and keys as
//! the mailing-list service, same throttles as its administrator login.

use crate::Courrier;
use crate::access::keys::{self, CreatedKey, NewKey};
use crate::access::model::{KeyScope, PermSet, UserStatus};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Principal, Via, password};
use crate::kernel::EmailAddress;
use crate::storage::{in_read, in_write};

/// Checks the password (throttled per address and source, verified even for unknown addresses so
/// timing tells nothing) and makes a `read` key named after the client. `read` is enough for
/// every OCR route; a key is never wider than what the login needs.
pub fn login(
    app: &Courrier,
    ctx: &RequestCtx,
    email: &str,
    password_given: &str,
    client: &str,
) -> Result<CreatedKey, AccessError> {
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
    let ok = password::verify(password_given, found.as_ref().and_then(|(u, _)| u.password_hash.as_deref()));
    let (user, grants) = match found {
        Some((u, g)) if ok && u.user.status == UserStatus::Active => (u.user, g),
        _ => {
            app.limiter.record_login_failure(&address, ctx.source.as_deref(), now);
            tracing::info!(address = %address, "OCR login refused");
            return Err(AccessError::BadLogin);
        }
    };
    app.limiter.clear_login_failures(&address);
    let roles = keys::roles_of(&grants);
    let me = Principal { user: Some(user.clone()), via: Via::Operator, roles: roles.clone() };
    let client: String = client.chars().filter(|c| !c.is_control()).take(80).collect();
    let name = if client.trim().is_empty() { "ocr login".to_owned() } else { format!("ocr login: {}", client.trim()) };
    let new = NewKey { name, scope: KeyScope::User, perms: PermSet::READ, expires_at: None, rate_limit_per_min: None };
    keys::create_for(app, &me, ctx, &user, &roles, new)
}

/// Revokes the calling key. A session or the operator has no key to revoke: nothing happens.
pub fn logout(app: &Courrier, p: &Principal, ctx: &RequestCtx) -> Result<(), AccessError> {
    let Via::Key(key) = &p.via else { return Ok(()) };
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        tx.revoke_key(key.id, now)?;
        audit_done(tx, p, ctx, now, "apikey.revoke", &format!("apikey:{}", key.id))
    })
}
