//! JSON Schemas of the DTOs, written beside the route table so that OpenAPI documents them and
//! schemathesis checks every answer against them in CI.

use serde_json::{Value, json};

/// A schema: a function, so the route table stays `static`.
#[derive(Clone, Copy)]
pub struct Schema(pub fn() -> Value);

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema(..)")
    }
}

impl Schema {
    pub fn render(self) -> Value {
        (self.0)()
    }
}

pub const ANY_OBJECT: Schema = Schema(|| json!({ "type": "object" }));

pub const HEALTH: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["status"],
        "properties": { "status": { "type": "string", "enum": ["ok"] } },
        "additionalProperties": false
    })
});

pub fn meta() -> Value {
    json!({
        "type": "object",
        "required": ["request_id", "api_version"],
        "properties": {
            "request_id": { "type": "string" },
            "api_version": { "type": "string", "const": "v1" }
        }
    })
}

pub fn collection_meta() -> Value {
    json!({
        "allOf": [
            { "$ref": "#/components/schemas/Meta" },
            {
                "type": "object",
                "required": ["total", "limit", "offset"],
                "properties": {
                    "total": { "type": "integer", "minimum": 0 },
                    "limit": { "type": "integer", "minimum": 1, "maximum": 500 },
                    "offset": { "type": "integer", "minimum": 0, "maximum": i64::MAX }
                }
            }
        ]
    })
}

pub fn error_envelope() -> Value {
    json!({
        "type": "object",
        "required": ["error", "meta"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": { "type": "string" },
                    "message": { "type": "string" }
                }
            },
            "meta": { "$ref": "#/components/schemas/Meta" }
        }
    })
}

pub const LIMIT: Schema = Schema(|| json!({ "type": "integer", "minimum": 1, "maximum": 500, "default": 50 }));
/// `Page` refuses offsets beyond what SQL takes (a signed 64-bit integer): the schema says so.
pub const OFFSET: Schema = Schema(|| json!({ "type": "integer", "minimum": 0, "maximum": i64::MAX, "default": 0 }));
pub const STRING: Schema = Schema(|| json!({ "type": "string" }));
pub const POSITIVE_ID: Schema = Schema(|| json!({ "type": "integer", "minimum": 1 }));
pub const DATE_TIME: Schema = Schema(|| json!({ "type": "string", "format": "date-time" }));

/// What the validating newtypes accept, as closely as a pattern can say it (the fuzzer then
/// generates mostly acceptable values; the newtypes stay the authority).
fn email() -> Value {
    json!({ "type": "string", "format": "email", "maxLength": 254 })
}
fn domain() -> Value {
    // Both newtypes lowercase what they are given, so the patterns take either case.
    json!({ "type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\\.[A-Za-z]{2,24}$" })
}
fn list_name() -> Value {
    json!({ "type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9_-]{0,30}[A-Za-z0-9])?$" })
}

/// An optional request field: `null` means the same as absent.
fn opt(schema: Value) -> Value {
    json!({ "anyOf": [schema, { "type": "null" }] })
}

fn nullable(t: &str) -> Value {
    json!({ "type": [t, "null"] })
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({ "type": "object", "required": required, "properties": properties })
}

/// A request body: unknown fields are refused (422), so the schema says so.
fn closed(required: &[&str], properties: Value) -> Value {
    let mut v = object(required, properties);
    v["additionalProperties"] = json!(false);
    v
}

fn user() -> Value {
    object(
        &["id", "email", "status", "created_at", "updated_at"],
        json!({
            "id": { "type": "integer" },
            "email": { "type": "string" },
            "firstname": nullable("string"),
            "name": nullable("string"),
            "mobile": nullable("string"),
            "language_code_id": nullable("string"),
            "status": { "type": "string", "enum": ["active", "disabled"] },
            "has_password": { "type": "boolean" },
            "email_verified_at": nullable("string"),
            "created_at": { "type": "string", "format": "date-time" },
            "updated_at": { "type": "string", "format": "date-time" }
        }),
    )
}

fn role() -> Value {
    object(
        &["role"],
        json!({
            "id": { "type": "integer" },
            "role": { "type": "string", "enum": ["site_admin", "domain_admin", "owner", "moderator"] },
            "domain": nullable("string"),
            "list": nullable("string"),
            "granted_at": { "type": "string", "format": "date-time" }
        }),
    )
}

fn api_key() -> Value {
    object(
        &["id", "name", "prefix", "scope_kind", "perms", "rate_limit_per_min", "created_at"],
        json!({
            "id": { "type": "integer" },
            "user_id": { "type": "integer" },
            "name": { "type": "string" },
            "prefix": { "type": "string" },
            "scope_kind": { "type": "string", "enum": ["user", "domain", "list"] },
            "domain": nullable("string"),
            "list": nullable("string"),
            "perms": { "type": "array", "items": { "type": "string" } },
            "rate_limit_per_min": { "type": "integer" },
            "expires_at": nullable("string"),
            "created_at": { "type": "string" },
            "revoked_at": nullable("string")
        }),
    )
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().expect("an object").clone() {
        base["properties"][k] = v;
    }
    base
}

pub const USER: Schema = Schema(user);
pub const USER_DETAIL: Schema = Schema(|| with(user(), json!({ "roles": { "type": "array", "items": role() } })));
pub const USER_CREATED: Schema =
    Schema(|| with(user(), json!({ "invitation": { "type": "string", "enum": ["not_needed", "sent", "failed"] } })));
pub const ROLE_GRANT: Schema = Schema(role);
pub const ROLE_LIST: Schema = Schema(|| json!({ "type": "array", "items": role() }));
pub const API_KEY: Schema = Schema(api_key);
pub const API_KEY_CREATED: Schema =
    Schema(|| with(api_key(), json!({ "secret": { "type": "string", "pattern": "^svc_[0-9a-f]{16}_[0-9a-f]{64}$" } })));

pub const LOGIN_REQUEST: Schema =
    Schema(|| closed(&["email", "password"], json!({ "email": email(), "password": { "type": "string" } })));
pub const LOGIN: Schema = Schema(|| {
    object(
        &["user", "csrf_token", "expires_at"],
        json!({
            "user": user(),
            "roles": { "type": "array", "items": role() },
            "csrf_token": { "type": "string" },
            "expires_at": { "type": "string", "format": "date-time" }
        }),
    )
});
pub const SESSION: Schema = Schema(|| {
    object(
        &["via", "roles", "perms", "capabilities"],
        json!({
            "user": { "oneOf": [user(), { "type": "null" }] },
            "via": { "type": "string", "enum": ["api_key", "session", "operator"] },
            "csrf_token": nullable("string"),
            "roles": { "type": "array", "items": role() },
            "domains": { "type": "array", "items": { "type": "string" } },
            "lists": { "type": "array", "items": { "type": "object" } },
            "perms": { "type": "array", "items": { "type": "string" } },
            "capabilities": { "type": "object" }
        }),
    )
});
pub const VERSION: Schema = Schema(|| {
    object(
        &["version", "commit", "dirty", "go_version", "platform", "backend"],
        json!({
            "version": { "type": "string" },
            "commit": { "type": "string" },
            "dirty": { "type": "boolean" },
            "built_at": { "type": "string" },
            "commit_at": { "type": "string" },
            "go_version": { "type": "string" },
            "rust_version": { "type": "string" },
            "platform": { "type": "string" },
            "backend": { "type": "string" }
        }),
    )
});
pub const AUDIT_ENTRY: Schema = Schema(|| {
    object(
        &["id", "at", "request_id", "action", "target", "outcome"],
        json!({
            "id": { "type": "integer" },
            "at": { "type": "string", "format": "date-time" },
            "request_id": { "type": "string" },
            "actor_user_id": nullable("integer"),
            "actor_key_id": nullable("integer"),
            "actor_member_id": nullable("integer"),
            "action": { "type": "string" },
            "target": { "type": "string" },
            "outcome": { "type": "string", "enum": ["done", "forbidden", "not_found"] }
        }),
    )
});
/// Unicode's White_Space, what Rust's `str::trim` removes (not ECMAScript's `\s`: U+0085 is in,
/// U+FEFF is out).
const WHITE_SPACE: &str =
    "\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
/// Control characters (`char::is_control`: C0, DEL, C1).
const CONTROL: &str = "\\u0000-\\u001f\\u007f-\\u009f";

/// A profile field as `users::check_profile` takes it after the frontend trims it: at most 200
/// characters and no control character once leading and trailing white space is gone (so a
/// trailing tab or newline is trimmed away, one inside is refused).
fn profile_field() -> Value {
    let pattern = format!(
        "^[{WHITE_SPACE}]*(?:[^{CONTROL}{WHITE_SPACE}](?:[^{CONTROL}]{{0,198}}[^{CONTROL}{WHITE_SPACE}])?)?[{WHITE_SPACE}]*$"
    );
    json!({ "type": "string", "pattern": pattern })
}

pub const USER_CREATE: Schema = Schema(|| {
    closed(
        &["email"],
        json!({
            "email": email(),
            "password": opt(json!({ "type": "string", "minLength": 12, "maxLength": 256 })),
            "firstname": opt(profile_field()),
            "name": opt(profile_field()),
            "mobile": opt(profile_field()),
            "language_code_id": opt(profile_field())
        }),
    )
});
pub const USER_PATCH: Schema = Schema(|| {
    closed(
        &[],
        json!({
            "status": opt(json!({ "type": "string", "enum": ["active", "disabled"] })),
            "firstname": opt(profile_field()),
            "name": opt(profile_field()),
            "mobile": opt(profile_field()),
            "language_code_id": opt(profile_field())
        }),
    )
});
pub const PASSWORD: Schema =
    Schema(|| closed(&["password"], json!({ "password": { "type": "string", "minLength": 12, "maxLength": 256 } })));
pub const ROLE_REQUEST: Schema = Schema(|| {
    closed(
        &["role"],
        json!({
            "role": { "type": "string", "enum": ["site_admin", "domain_admin", "owner", "moderator"] },
            "domain": opt(domain()),
            "list": opt(list_name())
        }),
    )
});
pub const API_KEY_CREATE: Schema = Schema(|| {
    closed(
        &["name", "scope_kind", "perms"],
        json!({
            "name": { "type": "string", "minLength": 1, "maxLength": 100 },
            "scope_kind": { "type": "string", "enum": ["user", "domain", "list"] },
            "domain": opt(domain()),
            "list": opt(list_name()),
            "perms": {
                "type": "array", "minItems": 1,
                "items": { "type": "string", "enum": ["read", "members:write", "send", "moderate", "manage"] }
            },
            "expires_at": opt(json!({ "type": "string", "format": "date-time" })),
            "rate_limit_per_min": opt(json!({ "type": "integer", "minimum": 1, "maximum": 100000 }))
        }),
    )
});

fn enum_of(names: &[&str]) -> Value {
    json!({ "type": "string", "enum": names })
}

const DOMAIN_STATUSES: &[&str] = &["pending_mta", "active", "disabled"];
const SUBSCRIPTION_POLICIES: &[&str] = &["open", "confirm", "moderate", "closed"];
const MEMBER_STATUSES: &[&str] = &["pending", "active", "disabled", "unsubscribed", "removed"];
const DELIVERY_MODES: &[&str] = &["regular", "digest", "nomail"];

pub const DOMAIN_STATUS: Schema = Schema(|| enum_of(DOMAIN_STATUSES));
pub const MEMBER_STATUS: Schema = Schema(|| enum_of(MEMBER_STATUSES));
pub const DELIVERY_MODE: Schema = Schema(|| enum_of(DELIVERY_MODES));
pub const BOUNCE_FLOOR: Schema = Schema(|| json!({ "type": "integer", "minimum": 0, "maximum": u32::MAX }));
pub const EMAIL_CONTAINS: Schema = Schema(
    || json!({ "type": "string", "minLength": 2, "maxLength": 254, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$" }),
);
pub const CONSENT_EVIDENCE: Schema =
    Schema(|| json!({ "type": "string", "minLength": 1, "maxLength": 4096, "pattern": MULTI_LINE }));
/// Free text on one line: no control characters (C0, DEL, C1), as the server's check.
const SINGLE_LINE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// Free text that may break lines (tab, LF, CR) but holds no other control character.
const MULTI_LINE: &str = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$";

fn domain_obj() -> Value {
    object(
        &["id", "name", "status", "created_at"],
        json!({
            "id": { "type": "integer" },
            "name": { "type": "string" },
            "status": enum_of(DOMAIN_STATUSES),
            "dkim_selector": nullable("string"),
            "default_subscription_policy": enum_of(SUBSCRIPTION_POLICIES),
            "dns_ok": nullable("boolean"),
            "dns_checked_at": nullable("string"),
            "dkim_record": {
                "description": "the TXT record to publish for the selector's key; null without a selector",
                "anyOf": [
                    { "type": "null" },
                    object(&["name", "type", "value"], json!({
                        "name": { "type": "string" }, "type": { "type": "string", "const": "TXT" }, "value": { "type": "string" }
                    }))
                ]
            },
            "created_at": { "type": "string", "format": "date-time" },
            "updated_at": { "type": "string", "format": "date-time" }
        }),
    )
}

fn list_summary() -> Value {
    object(
        &["id", "name", "display_name", "type", "status", "send_suspended"],
        json!({
            "id": { "type": "integer" },
            "name": { "type": "string" },
            "display_name": { "type": "string" },
            "type": enum_of(&["announce", "discussion"]),
            "status": enum_of(&["active", "archived"]),
            "send_suspended": { "type": "boolean" }
        }),
    )
}

fn selector() -> Value {
    json!({ "type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$" })
}

pub const DOMAIN: Schema = Schema(domain_obj);
pub const DOMAIN_CREATE: Schema = Schema(|| {
    closed(
        &["name"],
        json!({
            "name": domain(),
            "dkim_selector": opt(selector()),
            "default_subscription_policy": opt(enum_of(SUBSCRIPTION_POLICIES))
        }),
    )
});
pub const DOMAIN_PATCH: Schema = Schema(|| {
    closed(
        &[],
        json!({
            "status": opt(enum_of(DOMAIN_STATUSES)),
            "dkim_selector": { "anyOf": [selector(), { "type": "string", "maxLength": 0 }, { "type": "null" }] },
            "default_subscription_policy": opt(enum_of(SUBSCRIPTION_POLICIES))
        }),
    )
});
pub const LIST_SUMMARY: Schema = Schema(list_summary);
pub const LIST_DETAIL: Schema = Schema(|| {
    with(
        list_summary(),
        json!({
            "address": { "type": "string" },
            "domain": { "type": "string" },
            "subscription_policy": enum_of(SUBSCRIPTION_POLICIES),
            "posting_policy": enum_of(&["members", "moderated", "owners", "open"]),
            "subject_tag": nullable("string"),
            "footer_text": nullable("string"),
            "footer_html": nullable("string"),
            "reply_to": enum_of(&["list", "poster"]),
            "bounce_disable_score": { "type": "integer" },
            "held_days": { "type": "integer", "minimum": 1, "maximum": 365 },
            "digest_frequency": enum_of(&["daily", "weekly"]),
            "max_message_kb": { "type": "integer" },
            "dmarc_mitigation": enum_of(&["munge_from", "none"]),
            "created_at": { "type": "string", "format": "date-time" },
            "updated_at": { "type": "string", "format": "date-time" }
        }),
    )
});
fn display_name() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$" })
}
pub const LIST_CREATE: Schema = Schema(|| {
    closed(
        &["name", "display_name", "owner_email"],
        json!({
            "name": list_name(),
            "display_name": display_name(),
            "owner_email": email(),
            "type": opt(enum_of(&["announce", "discussion"])),
            "subscription_policy": opt(enum_of(SUBSCRIPTION_POLICIES))
        }),
    )
});
pub const LIST_PATCH: Schema = Schema(|| {
    // What `check_text` accepts: no control characters; footers may break lines.
    let text = |max: u32, pattern: &str| json!({ "anyOf": [{ "type": "string", "maxLength": max, "pattern": pattern }, { "type": "null" }] });
    closed(
        &[],
        json!({
            "display_name": opt(display_name()),
            "status": opt(enum_of(&["active", "archived"])),
            "subscription_policy": opt(enum_of(SUBSCRIPTION_POLICIES)),
            "posting_policy": opt(enum_of(&["members", "moderated", "owners", "open"])),
            "subject_tag": text(64, SINGLE_LINE),
            "footer_text": text(8192, MULTI_LINE),
            "footer_html": text(8192, MULTI_LINE),
            "reply_to": opt(enum_of(&["list", "poster"])),
            "bounce_disable_score": opt(json!({ "type": "integer", "minimum": 1, "maximum": 1000 })),
            "held_days": opt(json!({ "type": "integer", "minimum": 1, "maximum": 365 })),
            "digest_frequency": opt(enum_of(&["daily", "weekly"])),
            "max_message_kb": opt(json!({ "type": "integer", "minimum": 1, "maximum": 102400 })),
            "dmarc_mitigation": opt(enum_of(&["munge_from", "none"]))
        }),
    )
});
pub const MEMBER: Schema = Schema(|| {
    object(
        &["id", "email", "status", "delivery_mode", "bounce_score"],
        json!({
            "id": { "type": "integer" },
            "email": { "type": "string" },
            "display_name": nullable("string"),
            "status": enum_of(MEMBER_STATUSES),
            "delivery_mode": enum_of(DELIVERY_MODES),
            "bounce_score": { "type": "integer", "minimum": 0 },
            "subscribed_at": nullable("string"),
            "last_bounce_at": nullable("string"),
            "disabled_reason": nullable("string"),
            "disabled_at": nullable("string"),
            "consent_source": nullable("string"),
            "consent_at": nullable("string")
        }),
    )
});
pub const MEMBER_ADD: Schema = Schema(|| {
    closed(
        &["email"],
        json!({
            "email": email(),
            "name": opt(json!({ "type": "string", "maxLength": 200, "pattern": SINGLE_LINE })),
            "delivery_mode": opt(enum_of(DELIVERY_MODES)),
            "force": opt(json!({ "type": "boolean" })),
            "consent_source": opt(json!({ "type": "string", "maxLength": 200, "pattern": SINGLE_LINE })),
            "consent_evidence": opt(json!({ "type": "string", "maxLength": 4096, "pattern": MULTI_LINE }))
        }),
    )
});
/// `PATCH .../members/{member}`: an administrator re-enables a member disabled by bounces.
pub const MEMBER_PATCH: Schema = Schema(|| closed(&["status"], json!({ "status": enum_of(&["active"]) })));
pub const MEMBER_ADDED: Schema = Schema(|| {
    object(
        &["status", "member_id"],
        json!({
            "status": enum_of(&["active", "pending_confirmation", "pending_moderation"]),
            "member_id": { "type": "integer" }
        }),
    )
});
pub const CSV: Schema = Schema(|| json!({ "type": "string", "contentMediaType": "text/csv" }));
pub const IMPORT_REPORT: Schema = Schema(|| {
    object(
        &["total", "added", "skipped", "errors", "mode_coerced", "error_samples"],
        json!({
            "total": { "type": "integer" },
            "added": { "type": "integer" },
            "skipped": { "type": "integer" },
            "errors": { "type": "integer" },
            "mode_coerced": { "type": "integer" },
            "error_samples": { "type": "array", "items": {
                "type": "object", "properties": { "row": { "type": "integer" }, "reason": { "type": "string" } }
            } }
        }),
    )
});
pub const DASHBOARD: Schema = Schema(|| {
    object(
        &["domains", "lists", "members", "sends_in_flight", "held_messages", "pending_subscriptions"],
        json!({
            "domains": { "type": "integer" },
            "lists": { "type": "integer" },
            "members": { "type": "object" },
            "sends_in_flight": { "type": "integer" },
            "held_messages": { "type": "integer" },
            "pending_subscriptions": { "type": "integer" },
            "bounces_last_7_days": {
                "type": "object",
                "required": ["permanent", "temporary"],
                "properties": { "permanent": { "type": "integer" }, "temporary": { "type": "integer" } }
            }
        }),
    )
});
pub const QUEUE: Schema = Schema(|| {
    object(
        &["depth", "by_state", "oldest_queued_at"],
        json!({
            "depth": { "type": "integer" },
            "by_state": { "type": "object" },
            "oldest_queued_at": nullable("string")
        }),
    )
});

pub const SEND_REQUEST: Schema = Schema(|| {
    let mut v = closed(
        &["subject"],
        json!({
            "subject": { "type": "string", "minLength": 1, "maxLength": 998, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$" },
            "text": opt(json!({ "type": "string" })),
            "html": opt(json!({ "type": "string" }))
        }),
    );
    // `sends::check`: a message needs a text or an html part that is not only white space.
    let not_blank = json!({ "type": "string", "pattern": format!("[^{WHITE_SPACE}]") });
    v["anyOf"] = json!([
        { "required": ["text"], "properties": { "text": not_blank } },
        { "required": ["html"], "properties": { "html": not_blank } }
    ]);
    v
});
pub const SEND_SUBMITTED: Schema = Schema(|| {
    object(&["send_id", "recipients"], json!({ "send_id": { "type": "integer" }, "recipients": { "type": "integer" } }))
});
pub const SEND_STATUS: Schema = Schema(|| {
    object(
        &["id", "state", "recipients", "counts", "created_at"],
        json!({
            "id": { "type": "integer" },
            "state": enum_of(&["queued", "sending", "completed", "failed", "cancelled"]),
            "subject": { "type": "string" },
            "recipients": { "type": "integer" },
            "counts": {
                "type": "object",
                "required": ["queued", "sending", "sent", "deferred", "failed", "bounced", "cancelled"],
                "additionalProperties": { "type": "integer" }
            },
            "created_at": { "type": "string", "format": "date-time" },
            "completed_at": nullable("string")
        }),
    )
});

const EVENT_NAMES: &[&str] = &[
    "member.added",
    "member.removed",
    "member.bounced",
    "subscription.pending",
    "subscription.confirmed",
    "send.submitted",
    "send.completed",
    "send.failed",
    "message.held",
    "list.suspended",
];

fn webhook() -> Value {
    object(
        &[
            "id",
            "url",
            "events",
            "domain_id",
            "list_id",
            "created_at",
            "last_success_at",
            "last_error",
            "last_error_at",
        ],
        json!({
            "id": { "type": "integer" },
            "url": { "type": "string" },
            "events": { "type": "array", "items": enum_of(EVENT_NAMES) },
            "domain_id": nullable("integer"),
            "list_id": nullable("integer"),
            "created_at": { "type": "string", "format": "date-time" },
            "disabled_at": nullable("string"),
            "last_success_at": nullable("string"),
            "last_error": nullable("string"),
            "last_error_at": nullable("string")
        }),
    )
}

pub const WEBHOOK: Schema = Schema(webhook);
pub const WEBHOOK_CREATED: Schema = Schema(|| {
    let mut v = with(
        webhook(),
        json!({ "secret": { "type": "string", "pattern": "^whsec_[A-Za-z0-9+/]+=*$", "description": "Standard Webhooks form. X-Svc-Signature is keyed with this whole string (UTF-8 bytes, whsec_ included); webhook-signature with its base64-decoded part" } }),
    );
    v["required"].as_array_mut().expect("required").push(json!("secret"));
    v
});
/// What the server accepts: an https URL of at most 2048 characters without whitespace or
/// control characters; the guard then refuses internal, unresolvable and malformed hosts (422).
pub const WEBHOOK_CREATE: Schema = Schema(|| {
    closed(
        &["url", "events"],
        json!({
            "url": { "type": "string", "maxLength": 2048, "pattern": "^[Hh][Tt][Tt][Pp][Ss]://[^\\s\\u0000-\\u001f\\u007f-\\u009f]+$" },
            "events": { "type": "array", "minItems": 1, "items": enum_of(EVENT_NAMES) },
            "domain_id": opt(json!({ "type": "integer", "minimum": 1, "maximum": i64::MAX })),
            "list_id": opt(json!({ "type": "integer", "minimum": 1, "maximum": i64::MAX }))
        }),
    )
});
fn credential() -> Value {
    object(
        &[
            "kind",
            "host",
            "port",
            "security",
            "username",
            "folder",
            "last_ok_at",
            "last_error",
            "last_error_at",
            "updated_at",
        ],
        json!({
            "kind": enum_of(&["ingest", "submission"]),
            "host": { "type": "string" },
            "port": { "type": "integer", "minimum": 1, "maximum": 65535 },
            "security": enum_of(&["tls", "starttls"]),
            "username": { "type": "string" },
            "folder": nullable("string"),
            "last_ok_at": nullable("string"),
            "last_error": nullable("string"),
            "last_error_at": nullable("string"),
            "updated_at": { "type": "string", "format": "date-time" }
        }),
    )
}
/// A mail account as answered: never its password.
pub const CREDENTIAL: Schema = Schema(credential);
pub const CREDENTIALS: Schema = Schema(|| json!({ "type": "array", "maxItems": 2, "items": credential() }));
/// What the server accepts. `password` may be left out on an update (the stored one is kept);
/// `folder` is for ingest accounts only (default INBOX).
pub const CREDENTIAL_PUT: Schema = Schema(|| {
    closed(
        &["host", "port", "security", "username"],
        json!({
            "host": { "type": "string", "minLength": 1, "maxLength": 255 },
            "port": { "type": "integer", "minimum": 1, "maximum": 65535 },
            "security": enum_of(&["tls", "starttls"]),
            "username": { "type": "string", "minLength": 1, "maxLength": 320 },
            "password": { "type": "string", "minLength": 1, "maxLength": 1024, "writeOnly": true },
            "folder": { "type": "string", "minLength": 1, "maxLength": 200 }
        }),
    )
});
pub const CREDENTIAL_TEST: Schema = Schema(|| object(&["ok"], json!({ "ok": { "type": "boolean", "const": true } })));
pub const WEBHOOK_PING: Schema = Schema(|| {
    object(
        &["delivered", "status", "error"],
        json!({
            "delivered": { "type": "boolean" },
            "status": nullable("integer"),
            "error": nullable("string")
        }),
    )
});
pub const DNS_CHECK: Schema = Schema(|| {
    object(
        &["domain", "dns_ok", "dns_checked_at", "records"],
        json!({
            "domain": { "type": "string" },
            "dns_ok": { "type": "boolean" },
            "dns_checked_at": { "type": "string", "format": "date-time" },
            "records": { "type": "array", "items": object(
                &["type", "name", "checked", "found", "expected", "error"],
                json!({
                    "type": enum_of(&["spf", "dkim", "dmarc"]),
                    "name": { "type": "string" },
                    "checked": { "type": "boolean" },
                    "found": { "type": "boolean" },
                    "expected": { "type": "string" },
                    "values": { "type": "array", "items": { "type": "string" } },
                    "error": nullable("string")
                }),
            ) }
        }),
    )
});

/// The OpenAPI 3.1 `webhooks` object: what courrier POSTs to a webhook's URL.
pub fn webhook_delivery() -> Value {
    let header = |name: &str, description: &str| json!({ "name": name, "in": "header", "required": true, "description": description, "schema": { "type": "string" } });
    json!({
        "event": {
            "post": {
                "summary": "A lifecycle event (or the test ping), delivered at least once",
                "description": "Both signatures are HMAC-SHA256: X-Svc-Signature keyed with the webhook's secret exactly as creation returned it (the whole whsec_ string, UTF-8 bytes), webhook-signature with its base64-decoded part (Standard Webhooks). Retries (30 s doubling to 6 h, for 24 h) send the same body under the same X-Svc-Delivery and webhook-id, signed with a new webhook-timestamp. 2xx delivers; 410 disables the webhook; a 429 or 503 Retry-After is honoured; redirects are not followed.",
                "parameters": [
                    header("X-Svc-Event", "the event's type, e.g. member.added; webhook.ping for the test ping"),
                    header("X-Svc-Delivery", "the event's id (evt_...), stable across retries"),
                    header("X-Svc-Signature", "sha256=<hex HMAC-SHA256 of the raw body keyed with the whole secret string>"),
                    header("webhook-id", "Standard Webhooks: the event's id"),
                    header("webhook-timestamp", "Standard Webhooks: Unix seconds of this attempt"),
                    header("webhook-signature", "Standard Webhooks: v1,<base64 HMAC-SHA256 of \"{webhook-id}.{webhook-timestamp}.{body}\">")
                ],
                "requestBody": {
                    "required": true,
                    "content": { "application/json": { "schema": object(
                        &["id", "type", "created_at", "data"],
                        json!({
                            "id": { "type": "string", "pattern": "^evt_[0-9a-f]{32}$" },
                            "type": { "type": "string", "enum": EVENT_NAMES.iter().copied().chain(["webhook.ping"]).collect::<Vec<_>>() },
                            "created_at": { "type": "string", "format": "date-time" },
                            "data": { "type": "object" }
                        }),
                    ) } }
                },
                "responses": {
                    "200": { "description": "received (any 2xx)" },
                    "410": { "description": "gone: the webhook is disabled" }
                }
            }
        }
    })
}

/// `POST /me/login-link`'s one answer, whatever the address: the same body, always.
pub const LOGIN_LINK_MESSAGE: &str =
    "if this address is subscribed to a list, a sign-in link valid for one hour is on its way to it";
pub const LOGIN_LINK_REQUEST: Schema = Schema(|| closed(&["email"], json!({ "email": email() })));
pub const LOGIN_LINK_SENT: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["message"],
        "properties": { "message": { "type": "string", "const": LOGIN_LINK_MESSAGE } },
        "additionalProperties": false
    })
});
pub const ME_SESSION_REQUEST: Schema =
    Schema(|| closed(&["token"], json!({ "token": { "type": "string", "minLength": 1, "maxLength": 256 } })));
pub const ME_SESSION: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["email", "expires_at", "csrf_token"],
        "properties": {
            "email": { "type": "string" },
            "expires_at": { "type": "string", "format": "date-time" },
            "csrf_token": { "type": "string" }
        },
        "additionalProperties": false
    })
});
pub const SUBSCRIPTION: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["list_id", "list_address", "display_name", "delivery_mode", "status", "subscribed_at"],
        "properties": {
            "list_id": { "type": "integer", "minimum": 1 },
            "list_address": { "type": "string" },
            "display_name": { "type": "string" },
            "delivery_mode": enum_of(DELIVERY_MODES),
            "status": enum_of(&["pending", "active", "disabled"]),
            "subscribed_at": { "type": ["string", "null"], "format": "date-time" }
        },
        "additionalProperties": false
    })
});
pub const ME_SUBSCRIPTION_PATCH: Schema =
    Schema(|| closed(&["delivery_mode"], json!({ "delivery_mode": enum_of(DELIVERY_MODES) })));

/// A subscription waiting for a moderator.
pub const PENDING_SUBSCRIPTION: Schema = Schema(|| {
    object(
        &["id", "email", "display_name", "requested_at"],
        json!({
            "id": { "type": "integer" },
            "email": { "type": "string" },
            "display_name": nullable("string"),
            "requested_at": { "type": "string", "format": "date-time" }
        }),
    )
});

fn held_message() -> Value {
    object(
        &["id", "from", "subject", "received_at", "reason", "size"],
        json!({
            "id": { "type": "integer" },
            "from": nullable("string"),
            "subject": { "type": "string" },
            "received_at": { "type": "string", "format": "date-time" },
            "reason": enum_of(&["not_member", "moderated", "owners_only", "suspended", "archived", "too_large"]),
            "size": { "type": "integer", "minimum": 0 }
        }),
    )
}
/// A post held for a moderator, as listed.
pub const HELD_MESSAGE: Schema = Schema(held_message);
/// A held post as read: the listing's fields, its header fields and its first text part.
pub const HELD_MESSAGE_DETAIL: Schema = Schema(|| {
    with(
        held_message(),
        json!({
            "headers": { "type": "object", "additionalProperties": { "type": "string" } },
            "text": nullable("string")
        }),
    )
});
pub const HELD_APPROVED: Schema = Schema(|| {
    object(
        &["id", "decision", "send_id"],
        json!({
            "id": { "type": "integer" },
            "decision": enum_of(&["approved"]),
            "send_id": { "type": "integer" },
            "recipients": { "type": "integer" }
        }),
    )
});
pub const HELD_DECIDED: Schema = Schema(|| {
    object(&["id", "decision"], json!({ "id": { "type": "integer" }, "decision": enum_of(&["rejected", "discarded"]) }))
});
/// The optional body of a rejection.
/// What `check_text` accepts: no control characters but line breaks and tabs.
pub const HELD_REJECT: Schema = Schema(|| {
    closed(&[], json!({ "reason": opt(json!({ "type": "string", "maxLength": 4096, "pattern": MULTI_LINE })) }))
});
