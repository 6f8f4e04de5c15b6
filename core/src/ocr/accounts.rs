//! The OCR service's own login and logout (`POST /api/login`, `/api/logout`): a password buys a
//! new user-scoped API key, and logging out revokes the key that calls. Same users and keys as
//! the mailing-list service, same throttles as its administrator login.

use super::Service;
use crate::access::keys::{self, CreatedKey, NewKey};
use crate::access::model::{KeyScope, PermSet};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Principal, Via, sessions};
use crate::storage::in_write;

/// Checks the password (throttled per address and source, verified even for unknown addresses so
/// timing tells nothing) and makes a `read` key named after the client. `read` is enough for
/// every OCR route; a key is never wider than what the login needs.
pub fn login(
    app: &Service,
    ctx: &RequestCtx,
    email: &str,
    password_given: &str,
    client: &str,
) -> Result<CreatedKey, AccessError> {
    let (user, grants) = sessions::check_credentials(&app.access, ctx, email, password_given)?;
    let roles = keys::roles_of(&grants);
    let me = Principal { user: Some(user.clone()), via: Via::Operator, roles: roles.clone() };
    let client: String = client.chars().filter(|c| !c.is_control()).take(80).collect();
    let name = if client.trim().is_empty() { "ocr login".to_owned() } else { format!("ocr login: {}", client.trim()) };
    let new = NewKey { name, scope: KeyScope::User, perms: PermSet::READ, expires_at: None, rate_limit_per_min: None };
    keys::create_for(&app.access, &me, ctx, &user, &roles, new)
}

/// Revokes the calling key. A session or the operator has no key to revoke: nothing happens.
pub fn logout(app: &Service, p: &Principal, ctx: &RequestCtx) -> Result<(), AccessError> {
    let Via::Key(key) = &p.via else { return Ok(()) };
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        tx.revoke_key(key.id, now)?;
        audit_done(tx, p, ctx, now, "apikey.revoke", &format!("apikey:{}", key.id))
    })
}
