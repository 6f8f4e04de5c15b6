//! How the access context's records look on the wire: the documents the HTTP API answers and the
//! CLI's `--json` prints alike (views, not serde derives on the domain types).

use super::model::{ApiKey, KeyScope, Role, RoleGrant, User};
use crate::kernel::json_time as time;
use serde_json::{Value, json};

pub fn user(u: &User) -> Value {
    json!({
        "id": u.id.get(),
        "email": u.email.to_string(),
        "firstname": u.profile.firstname,
        "name": u.profile.name,
        "mobile": u.profile.mobile,
        "language_code_id": u.profile.language_code_id,
        "status": u.status.as_str(),
        "has_password": u.has_password,
        "email_verified_at": time(u.email_verified_at),
        "created_at": u.created_at.to_rfc3339(),
        "updated_at": u.updated_at.to_rfc3339(),
    })
}

pub fn role(r: &Role) -> Value {
    json!({
        "role": r.kind().as_str(),
        "domain": r.domain().map(|d| d.as_str()),
        "list": r.list().map(|l| l.as_str()),
    })
}

pub fn role_grant(g: &RoleGrant) -> Value {
    let mut v = role(&g.role);
    v["id"] = json!(g.id.get());
    v["granted_at"] = json!(g.granted_at.to_rfc3339());
    v
}

pub fn api_key(k: &ApiKey) -> Value {
    let (domain, list) = match &k.scope {
        KeyScope::User => (None, None),
        KeyScope::Domain(d) => (Some(d.as_str()), None),
        KeyScope::List(d, l) => (Some(d.as_str()), Some(l.as_str())),
    };
    json!({
        "id": k.id.get(),
        "user_id": k.user_id.get(),
        "name": k.name,
        "prefix": k.prefix,
        "scope_kind": k.scope.kind_str(),
        "domain": domain,
        "list": list,
        "perms": k.perms.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "rate_limit_per_min": k.rate_limit_per_min,
        "expires_at": time(k.expires_at),
        "created_at": k.created_at.to_rfc3339(),
        "revoked_at": time(k.revoked_at),
    })
}

/// An entry of the audit log. The actor ids are all null for the operator at the command line,
/// whose entries' `request_id` is `cli`.
pub fn audit_entry(e: &crate::kernel::AuditEntry) -> Value {
    json!({
        "id": e.id.get(), "at": e.at.to_rfc3339(), "request_id": e.request_id,
        "actor_user_id": e.actor.user_id, "actor_key_id": e.actor.key_id,
        "actor_member_id": e.actor.member_id,
        "action": e.action, "target": e.target, "outcome": e.outcome.as_str(),
    })
}
