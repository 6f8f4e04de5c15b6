//! `/api/v1/auth`, `/users`, `/apikeys`, `/system/version` and `/audit`: parse, call core, render.

use crate::AppState;
use crate::auth::{Auth, Ctx, SESSION_COOKIE};
use crate::blocking::run_blocking;
use crate::body::Json;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use crate::routes::{Access, Param, ParamKind, Perm, QueryParam, Route, Success, route};
use crate::schema;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use courrier_core::access::model::{KeyId, Profile, Role, RoleKind, UserId, UserStatus};
use courrier_core::access::{keys, principal, roles, sessions, users};
use courrier_core::kernel::{AuditFilter, Code, DomainName, EmailAddress, ListName};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};

const ID: &[Param] = &[Param { name: "id", kind: ParamKind::Id, description: "numeric id" }];
const PAGE: &[QueryParam] = &[
    QueryParam { name: "limit", schema: schema::LIMIT, description: "1 to 500, default 50" },
    QueryParam { name: "offset", schema: schema::OFFSET, description: "default 0" },
];
const AUDIT_QUERY: &[QueryParam] = &[
    QueryParam { name: "limit", schema: schema::LIMIT, description: "1 to 500, default 50" },
    QueryParam { name: "offset", schema: schema::OFFSET, description: "default 0" },
    QueryParam { name: "action", schema: schema::STRING, description: "e.g. user.create" },
    QueryParam { name: "actor_user_id", schema: schema::POSITIVE_ID, description: "the acting user" },
    QueryParam { name: "since", schema: schema::DATE_TIME, description: "RFC 3339, inclusive" },
    QueryParam { name: "until", schema: schema::DATE_TIME, description: "RFC 3339, inclusive" },
];

pub static ROUTES: &[Route] = &[
    route!(POST "/api/v1/auth/login", "login", "Open an administrator session (cookie svc_session)", "auth", Access::Public,
        params: &[], query: &[], request: Some(schema::LOGIN_REQUEST), success: Success::Data(200, schema::LOGIN),
        errors: &[401, 429], login),
    route!(POST "/api/v1/auth/logout", "logout", "Close the administrator session", "auth", Access::Public,
        params: &[], query: &[], request: None, success: Success::NoContent, errors: &[], logout),
    route!(GET "/api/v1/auth/session", "getSession", "The caller: profile, roles, scope, capabilities", "auth",
        Access::Authenticated, params: &[], query: &[], request: None, success: Success::Data(200, schema::SESSION),
        errors: &[], session),
    route!(GET "/api/v1/system/version", "getVersion", "Build information and storage backend", "system",
        Access::Authenticated, params: &[], query: &[], request: None, success: Success::Data(200, schema::VERSION),
        errors: &[], version),
    route!(GET "/api/v1/audit", "listAudit", "The audit log, newest first", "system", Access::Perm(Perm::Read),
        params: &[], query: AUDIT_QUERY, request: None, success: Success::Collection(schema::AUDIT_ENTRY),
        errors: &[], audit),
    route!(GET "/api/v1/users", "listUsers", "Accounts in scope", "users", Access::Perm(Perm::Read),
        params: &[], query: PAGE, request: None, success: Success::Collection(schema::USER), errors: &[], list_users),
    route!(POST "/api/v1/users", "createUser", "Create an account; without a password, an invitation", "users",
        Access::Perm(Perm::Manage), params: &[], query: &[], request: Some(schema::USER_CREATE),
        success: Success::Data(201, schema::USER_CREATED), errors: &[409], create_user),
    route!(GET "/api/v1/users/{id}", "getUser", "An account and the roles the caller may see", "users",
        Access::Perm(Perm::Read), params: ID, query: &[], request: None, success: Success::Data(200, schema::USER_DETAIL),
        errors: &[], get_user),
    route!(PATCH "/api/v1/users/{id}", "updateUser", "Set an account active or disabled, or its profile", "users",
        Access::Perm(Perm::Manage), params: ID, query: &[], request: Some(schema::USER_PATCH),
        success: Success::Data(200, schema::USER), errors: &[], update_user),
    route!(POST "/api/v1/users/{id}/password", "setPassword", "Set an account's password", "users",
        Access::Perm(Perm::Manage), params: ID, query: &[], request: Some(schema::PASSWORD),
        success: Success::NoContent, errors: &[], set_password),
    route!(GET "/api/v1/users/{id}/roles", "listRoles", "Roles of an account visible to the caller", "users",
        Access::Perm(Perm::Read), params: ID, query: &[], request: None, success: Success::Data(200, schema::ROLE_LIST),
        errors: &[], list_roles),
    route!(POST "/api/v1/users/{id}/roles", "grantRole", "Grant a role", "users", Access::Perm(Perm::Manage),
        params: ID, query: &[], request: Some(schema::ROLE_REQUEST), success: Success::Data(201, schema::ROLE_GRANT),
        errors: &[409], grant_role),
    route!(DELETE "/api/v1/users/{id}/roles", "revokeRole", "Revoke a role (the role in the body)", "users",
        Access::Perm(Perm::Manage), params: ID, query: &[], request: Some(schema::ROLE_REQUEST),
        success: Success::NoContent, errors: &[409], revoke_role),
    route!(GET "/api/v1/apikeys", "listApiKeys", "API keys the caller administers, newest first", "apikeys",
        Access::Perm(Perm::Manage), params: &[], query: PAGE, request: None, success: Success::Collection(schema::API_KEY),
        errors: &[], list_keys),
    route!(POST "/api/v1/apikeys", "createApiKey", "Create an API key; its secret is shown once", "apikeys",
        Access::Perm(Perm::Manage), params: &[], query: &[], request: Some(schema::API_KEY_CREATE),
        success: Success::Data(201, schema::API_KEY_CREATED), errors: &[], create_key),
    route!(DELETE "/api/v1/apikeys/{id}", "revokeApiKey", "Revoke an API key (idempotent)", "apikeys",
        Access::Perm(Perm::Manage), params: ID, query: &[], request: None, success: Success::NoContent,
        errors: &[], revoke_key),
];

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn user_id(raw: &str) -> Result<UserId, ApiError> {
    Ok(UserId::parse(raw)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    email: String,
    password: String,
}

pub(crate) fn session_cookie(state: &AppState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.access.settings.public_url.starts_with("https://") { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    ))
    .expect("the cookie is ASCII")
}

async fn login(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    Json(body): Json<LoginBody>,
) -> Result<Response, ApiError> {
    let app = state.access.clone();
    let done = run_blocking(move || Ok(sessions::login(&app, &ctx, &body.email, &body.password)?)).await?;
    let max_age = done.expires_at.unix_secs() - state.access.clock.now().unix_secs();
    let mut resp = Reply::ok(json!({
        "user": courrier_core::access::views::user(&done.user),
        "roles": done.roles.iter().map(courrier_core::access::views::role).collect::<Vec<_>>(),
        "csrf_token": done.csrf_token,
        "expires_at": done.expires_at.to_rfc3339(),
    }))
    .into_response();
    resp.headers_mut().insert(header::SET_COOKIE, session_cookie(&state, &done.token, max_age));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

async fn logout(State(state): State<AppState>, Ctx(ctx): Ctx, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(token) = crate::auth::session_cookie(&headers) {
        let app = state.access.clone();
        run_blocking(move || Ok(sessions::logout(&app, &ctx, &token)?)).await?;
    }
    let mut resp = no_content();
    resp.headers_mut().insert(header::SET_COOKIE, session_cookie(&state, "", 0));
    Ok(resp)
}

async fn session(Auth(p): Auth, headers: HeaderMap) -> Reply {
    let domains: Vec<&str> = p.roles.iter().filter_map(|r| r.domain().map(DomainName::as_str)).collect();
    let lists: Vec<Value> = p
        .roles
        .iter()
        .filter_map(|r| Some(json!({ "domain": r.domain()?.as_str(), "list": r.list()?.as_str() })))
        .collect();
    let perms = p.credential_perms();
    let caps = p.capabilities();
    let (via, csrf) = match &p.via {
        principal::Via::Key(_) => ("api_key", None),
        principal::Via::Session(_) => {
            ("session", crate::auth::session_cookie(&headers).map(|t| principal::csrf_token_for(&t)))
        }
        principal::Via::Operator => ("operator", None),
    };
    Reply::ok(json!({
        "user": p.user.as_ref().map(courrier_core::access::views::user),
        "via": via,
        "csrf_token": csrf,
        "roles": p.roles.iter().map(courrier_core::access::views::role).collect::<Vec<_>>(),
        "domains": domains,
        "lists": lists,
        "perms": perms.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "capabilities": {
            "manage_installation": caps.manage_installation,
            "manage_users": caps.manage_users,
            "create_domains": caps.create_domains,
        },
    }))
}

async fn version(State(state): State<AppState>, Auth(_): Auth) -> Reply {
    Reply::ok_shared(state.version_json.clone())
}

async fn audit(State(state): State<AppState>, Auth(p): Auth, RawQuery(raw): RawQuery) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["limit", "offset", "action", "actor_user_id", "since", "until"])?;
    let page = q.page()?;
    let filter = AuditFilter {
        action: q.get("action").map(str::to_owned),
        actor_user_id: q.positive_id("actor_user_id")?,
        since: q.timestamp("since")?,
        until: q.timestamp("until")?,
    };
    let app = state.access.clone();
    let paged = run_blocking(move || Ok(courrier_core::system::audit(&app, &p, filter, page)?)).await?;
    let items = paged.items.iter().map(courrier_core::access::views::audit_entry).collect();
    Ok(Reply::collection(items, paged.total, paged.page))
}

async fn list_users(State(state): State<AppState>, Auth(p): Auth, RawQuery(raw): RawQuery) -> Result<Reply, ApiError> {
    let page = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?.page()?;
    let app = state.access.clone();
    let paged = run_blocking(move || Ok(users::list(&app, &p, page)?)).await?;
    Ok(Reply::collection(paged.items.iter().map(courrier_core::access::views::user).collect(), paged.total, paged.page))
}

/// `null` clears a profile field; an absent field is left as it is.
fn field(v: &Option<Option<String>>) -> Option<Option<String>> {
    v.clone().map(|inner| inner.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateUserBody {
    email: String,
    password: Option<String>,
    firstname: Option<String>,
    name: Option<String>,
    mobile: Option<String>,
    language_code_id: Option<String>,
}

async fn create_user(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Json(body): Json<CreateUserBody>,
) -> Result<Reply, ApiError> {
    let email = EmailAddress::parse(body.email.trim())?;
    let clean = |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    let new = users::NewUser {
        email,
        profile: Profile {
            firstname: clean(body.firstname),
            name: clean(body.name),
            mobile: clean(body.mobile),
            language_code_id: clean(body.language_code_id),
        },
        password: body.password,
    };
    let app = state.access.clone();
    let (user, invitation) = run_blocking(move || Ok(users::create(&app, &p, &ctx, new)?)).await?;
    let mut data = courrier_core::access::views::user(&user);
    data["invitation"] = json!(invitation.as_str());
    Ok(Reply::created(data))
}

async fn get_user(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Reply, ApiError> {
    let id = user_id(&id)?;
    let app = state.access.clone();
    let (user, grants) = run_blocking(move || Ok(users::get(&app, &p, &ctx, id)?)).await?;
    let mut data = courrier_core::access::views::user(&user);
    data["roles"] = grants.iter().map(courrier_core::access::views::role_grant).collect();
    Ok(Reply::ok(data))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchUserBody {
    status: Option<String>,
    #[serde(default, deserialize_with = "present")]
    firstname: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    name: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    mobile: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    language_code_id: Option<Option<String>>,
}

/// Tells a present `null` (`Some(None)`) from an absent field (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

async fn update_user(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    Json(body): Json<PatchUserBody>,
) -> Result<Reply, ApiError> {
    let id = user_id(&id)?;
    let status = body
        .status
        .as_deref()
        .map(|s| {
            UserStatus::parse(s).ok_or_else(|| {
                ApiError::new(Code::ValidationFailed, format!("status must be active or disabled, not {s:?}"))
            })
        })
        .transpose()?;
    let patch = users::UserPatch {
        status,
        firstname: field(&body.firstname),
        name: field(&body.name),
        mobile: field(&body.mobile),
        language_code_id: field(&body.language_code_id),
    };
    let app = state.access.clone();
    let user = run_blocking(move || Ok(users::update(&app, &p, &ctx, id, patch)?)).await?;
    Ok(Reply::ok(courrier_core::access::views::user(&user)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PasswordBody {
    password: String,
}

async fn set_password(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    Json(body): Json<PasswordBody>,
) -> Result<Response, ApiError> {
    let id = user_id(&id)?;
    let app = state.access.clone();
    run_blocking(move || Ok(users::set_password(&app, &p, &ctx, id, &body.password)?)).await?;
    Ok(no_content())
}

async fn list_roles(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Reply, ApiError> {
    let id = user_id(&id)?;
    let app = state.access.clone();
    let grants = run_blocking(move || Ok(roles::list(&app, &p, &ctx, id)?)).await?;
    Ok(Reply::ok(grants.iter().map(courrier_core::access::views::role_grant).collect()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleBody {
    role: String,
    domain: Option<String>,
    list: Option<String>,
}

impl RoleBody {
    fn parse(self) -> Result<Role, ApiError> {
        let kind = RoleKind::parse(&self.role).ok_or_else(|| {
            ApiError::new(
                Code::ValidationFailed,
                format!("unknown role {:?}: site_admin, domain_admin, owner or moderator", self.role),
            )
        })?;
        let domain = self.domain.as_deref().map(DomainName::parse).transpose()?;
        let list = self.list.as_deref().map(ListName::parse).transpose()?;
        Role::new(kind, domain, list).map_err(|e| ApiError::new(Code::ValidationFailed, e.to_string()))
    }
}

async fn grant_role(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    Json(body): Json<RoleBody>,
) -> Result<Reply, ApiError> {
    let id = user_id(&id)?;
    let role = body.parse()?;
    let app = state.access.clone();
    let grant = run_blocking(move || Ok(roles::grant(&app, &p, &ctx, id, role)?)).await?;
    Ok(Reply::created(courrier_core::access::views::role_grant(&grant)))
}

async fn revoke_role(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    Json(body): Json<RoleBody>,
) -> Result<Response, ApiError> {
    let id = user_id(&id)?;
    let role = body.parse()?;
    let app = state.access.clone();
    run_blocking(move || Ok(roles::revoke(&app, &p, &ctx, id, role)?)).await?;
    Ok(no_content())
}

async fn list_keys(State(state): State<AppState>, Auth(p): Auth, RawQuery(raw): RawQuery) -> Result<Reply, ApiError> {
    let page = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?.page()?;
    let app = state.access.clone();
    let paged = run_blocking(move || Ok(keys::list(&app, &p, page)?)).await?;
    Ok(Reply::collection(
        paged.items.iter().map(courrier_core::access::views::api_key).collect(),
        paged.total,
        paged.page,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKeyBody {
    name: String,
    scope_kind: String,
    domain: Option<String>,
    list: Option<String>,
    perms: Vec<String>,
    expires_at: Option<String>,
    #[serde(default, with = "crate::body::whole")]
    rate_limit_per_min: Option<u32>,
}

async fn create_key(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Json(body): Json<CreateKeyBody>,
) -> Result<Reply, ApiError> {
    let new = keys::NewKey::parse(
        body.name,
        &body.scope_kind,
        body.domain.as_deref(),
        body.list.as_deref(),
        &body.perms,
        body.expires_at.as_deref(),
        body.rate_limit_per_min,
    )?;
    let app = state.access.clone();
    let created = run_blocking(move || Ok(keys::create_own(&app, &p, &ctx, new)?)).await?;
    let mut data = courrier_core::access::views::api_key(&created.key);
    data["secret"] = json!(created.secret);
    Ok(Reply::created(data))
}

async fn revoke_key(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = KeyId::parse(&id)?;
    let app = state.access.clone();
    run_blocking(move || Ok(keys::revoke(&app, &p, &ctx, id)?)).await?;
    Ok(no_content())
}
