//! `/api/v1/domains/...` (domains, lists, members, CSV import and export), `/dashboard` and
//! `/system/queue`: parse, call core, render.

use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::body::{Json, parse_json, read_limited};
use crate::envelope::{self, Reply};
use crate::error::ApiError;
use crate::query::QueryParams;
use crate::routes::{Access, Api, JSON_BODY_LIMIT, Param, ParamKind, Perm, QueryParam, Route, Success, route};
use crate::schema::{self, Schema};
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::on;
use bytes::Bytes;
use courrier_core::access::Principal;
use courrier_core::kernel::{Code, DomainName, EmailAddress, ListName};
use courrier_core::mailing;
use courrier_core::mailing::MailingError;
use courrier_core::mailing::idempotency::{self, IdempotentRequest, Keyed, Replayable};
use courrier_core::mailing::import::{self, ImportConsent, MAX_IMPORT_BYTES, SizeLimitExceeded};
use courrier_core::mailing::members::{self, AddMember, MemberRef};
use courrier_core::mailing::model::SendId;
use courrier_core::mailing::model::{
    DeliveryMode, DigestFrequency, DomainStatus, ListKind, ListStatus, MemberFilter, PostingPolicy, ReplyTo,
    SubscriptionPolicy,
};
use courrier_core::mailing::{dashboard, domains, export, lists, sends};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

const DOMAIN: &[Param] =
    &[Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" }];
const LIST: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
];
const MEMBER: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
    Param { name: "member", kind: ParamKind::Text, description: "the member's numeric id or URL-encoded address" },
];
const LIMIT: QueryParam = QueryParam { name: "limit", schema: schema::LIMIT, description: "1 to 500, default 50" };
const OFFSET: QueryParam = QueryParam { name: "offset", schema: schema::OFFSET, description: "default 0" };
const PAGE: &[QueryParam] = &[LIMIT, OFFSET];
const DOMAIN_QUERY: &[QueryParam] =
    &[LIMIT, OFFSET, QueryParam { name: "status", schema: schema::DOMAIN_STATUS, description: "domain status" }];
const STATUS: QueryParam = QueryParam { name: "status", schema: schema::MEMBER_STATUS, description: "member status" };
const MODE: QueryParam =
    QueryParam { name: "delivery_mode", schema: schema::DELIVERY_MODE, description: "delivery mode" };
const MEMBER_QUERY: &[QueryParam] = &[
    LIMIT,
    OFFSET,
    STATUS,
    MODE,
    QueryParam { name: "min_bounce_score", schema: schema::BOUNCE_FLOOR, description: "bounce score floor" },
    QueryParam {
        name: "email_contains",
        schema: schema::EMAIL_CONTAINS,
        description: "case-insensitive substring of the address (2 characters at least; % and _ are literal)",
    },
];
const EXPORT_QUERY: &[QueryParam] = &[STATUS, MODE];
const SEND: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
    Param { name: "send", kind: ParamKind::Id, description: "the send's id" },
];
const IMPORT_QUERY: &[QueryParam] = &[QueryParam {
    name: "consent_evidence",
    schema: schema::CONSENT_EVIDENCE,
    description: "the consent covering every row (or a form field before the file part)",
}];
/// The CSV import's body: the document itself or a multipart form.
const IMPORT_REQUEST: Schema = Schema(|| {
    json!({ "x-content": {
        "text/csv": { "schema": { "type": "string" } },
        "multipart/form-data": { "schema": {
            "type": "object",
            "required": ["file"],
            "properties": {
                "consent_evidence": { "type": "string" },
                "file": { "type": "string", "contentMediaType": "text/csv" }
            }
        } }
    } })
});
/// Declared lengths past this are refused before reading (400). Within it, the importer reads
/// the document up to the contract's 25 MiB and answers 413 past that, keeping the rows before
/// the cut: a client sending a 30 MiB file learns where the cut fell.
pub const IMPORT_BODY_LIMIT: usize = 256 * 1024 * 1024;

pub static ROUTES: &[Route] = &[
    route!(GET "/api/v1/dashboard", "getDashboard", "Counts adapted to the caller's reach", "system",
        Access::Perm(Perm::Read), params: &[], query: &[], request: None, success: Success::Data(200, schema::DASHBOARD),
        errors: &[], get_dashboard),
    route!(GET "/api/v1/system/queue", "getQueue", "Depth of the outgoing queue", "system", Access::Perm(Perm::Read),
        params: &[], query: &[], request: None, success: Success::Data(200, schema::QUEUE), errors: &[], get_queue),
    route!(GET "/api/v1/domains", "listDomains", "Domains in scope", "domains", Access::Perm(Perm::Read),
        params: &[], query: DOMAIN_QUERY, request: None, success: Success::Collection(schema::DOMAIN), errors: &[],
        list_domains),
    route!(POST "/api/v1/domains", "createDomain", "Create a domain (state pending_mta)", "domains",
        Access::Perm(Perm::Manage), params: &[], query: &[], request: Some(schema::DOMAIN_CREATE),
        success: Success::Data(201, schema::DOMAIN), errors: &[409], create_domain),
    route!(GET "/api/v1/domains/{domain}", "getDomain", "A domain's detail and defaults", "domains",
        Access::Perm(Perm::Read), params: DOMAIN, query: &[], request: None, success: Success::Data(200, schema::DOMAIN),
        errors: &[], get_domain),
    route!(PATCH "/api/v1/domains/{domain}", "updateDomain", "Change a domain: settings and status", "domains",
        Access::Perm(Perm::Manage), params: DOMAIN, query: &[], request: Some(schema::DOMAIN_PATCH),
        success: Success::Data(200, schema::DOMAIN), errors: &[], update_domain),
    route!(GET "/api/v1/domains/{domain}/lists", "listLists", "The domain's lists visible to the caller", "lists",
        Access::Perm(Perm::Read), params: DOMAIN, query: PAGE, request: None,
        success: Success::Collection(schema::LIST_SUMMARY), errors: &[], list_lists),
    route!(POST "/api/v1/domains/{domain}/lists", "createList", "Create a list with its owner", "lists",
        Access::Perm(Perm::Manage), params: DOMAIN, query: &[], request: Some(schema::LIST_CREATE),
        success: Success::Data(201, schema::LIST_DETAIL), errors: &[409], create_list),
    route!(GET "/api/v1/domains/{domain}/lists/{list}", "getList", "A list's detail and policies", "lists",
        Access::Perm(Perm::Read), params: LIST, query: &[], request: None,
        success: Success::Data(200, schema::LIST_DETAIL), errors: &[], get_list),
    route!(PATCH "/api/v1/domains/{domain}/lists/{list}", "updateList",
        "Change a list: only present fields apply; an empty text clears it", "lists",
        Access::Perm(Perm::Manage), params: LIST, query: &[], request: Some(schema::LIST_PATCH),
        success: Success::Data(200, schema::LIST_DETAIL), errors: &[], update_list),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/suspend", "suspendList",
        "Suspend distribution (circuit breaker; queued copies stay queued)", "lists", Access::Perm(Perm::Manage),
        params: LIST, query: &[], request: None, success: Success::Data(200, schema::LIST_DETAIL), errors: &[],
        suspend_list),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/resume", "resumeList", "Resume distribution", "lists",
        Access::Perm(Perm::Manage), params: LIST, query: &[], request: None,
        success: Success::Data(200, schema::LIST_DETAIL), errors: &[], resume_list),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/members", "listMembers",
        "Members of the list, ordered by id, every filter applied in the query", "members", Access::Perm(Perm::Read),
        params: LIST, query: MEMBER_QUERY, request: None, success: Success::Collection(schema::MEMBER), errors: &[],
        list_members),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/members", "addMember",
        "Add or subscribe a member (201 active, 202 pending); Idempotency-Key honoured", "members",
        Access::Perm(Perm::MembersWrite), params: LIST, query: &[], request: Some(schema::MEMBER_ADD),
        success: Success::DataEither(201, 202, schema::MEMBER_ADDED), errors: &[409], add_member),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/members/export", "exportMembers",
        "The members as CSV (email,display_name,delivery_mode,status,subscribed_at), streamed", "members",
        Access::Perm(Perm::Read), params: LIST, query: EXPORT_QUERY, request: None,
        success: Success::Raw("text/csv", schema::CSV), errors: &[], export_members),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/members/{member}", "getMember",
        "One member, by numeric id or URL-encoded address", "members", Access::Perm(Perm::Read), params: MEMBER,
        query: &[], request: None, success: Success::Data(200, schema::MEMBER), errors: &[], get_member),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/sends", "submitSend",
        "Submit a message to the list: one copy per active regular member; Idempotency-Key honoured", "sends",
        Access::Perm(Perm::Send), params: LIST, query: &[], request: Some(schema::SEND_REQUEST),
        success: Success::Data(202, schema::SEND_SUBMITTED), errors: &[409], submit_send),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/sends/{send}", "getSend", "A send and its copies by state",
        "sends", Access::Perm(Perm::Read), params: SEND, query: &[], request: None,
        success: Success::Data(200, schema::SEND_STATUS), errors: &[], get_send),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/sends/{send}/cancel", "cancelSend",
        "Cancel the copies still queued (409 when none is)", "sends", Access::Perm(Perm::Send), params: SEND,
        query: &[], request: None, success: Success::Data(200, schema::SEND_STATUS), errors: &[409], cancel_send),
    Route {
        method: Method::POST,
        path: "/api/v1/domains/{domain}/lists/{list}/members/import",
        api: Api::Mailing,
        operation_id: "importMembers",
        summary: "CSV import (text/csv, or multipart with a file part); 25 MiB at most",
        tag: "members",
        access: Access::Perm(Perm::MembersWrite),
        params: LIST,
        query: IMPORT_QUERY,
        request: Some(IMPORT_REQUEST),
        success: Success::Data(200, schema::IMPORT_REPORT),
        body_limit: IMPORT_BODY_LIMIT,
        errors: &[413],
        handler: |m| on(m, import_members),
    },
];

/// A domain named in a path: a name that cannot exist is simply not found.
fn domain_name(raw: &str) -> Result<DomainName, ApiError> {
    DomainName::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "domain not found"))
}

fn list_name(raw: &str) -> Result<ListName, ApiError> {
    ListName::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "list not found"))
}

fn names(domain: &str, list: &str) -> Result<(DomainName, ListName), ApiError> {
    Ok((domain_name(domain)?, list_name(list)?))
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

/// A wire enum from a body field.
fn parse_enum<T>(
    field: &str,
    raw: Option<String>,
    parse: fn(&str) -> Option<T>,
    allowed: &[&str],
) -> Result<Option<T>, ApiError> {
    raw.map(|v| parse(&v).ok_or_else(|| invalid(format!("{field} {v:?} is not one of {}", allowed.join(", ")))))
        .transpose()
}

fn policy(field: &str, raw: Option<String>) -> Result<Option<SubscriptionPolicy>, ApiError> {
    parse_enum(field, raw, SubscriptionPolicy::parse, &SubscriptionPolicy::names())
}

/// A JSON PATCH text field: absent -> `None`, `null` or `""` -> `Some(None)` (clear), text -> set.
mod patch_text {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
        Ok(Some(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty())))
    }
}

async fn get_dashboard(State(state): State<AppState>, Auth(p): Auth) -> Result<Reply, ApiError> {
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(dashboard::dashboard(&app, &p)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::dashboard(&d)))
}

async fn get_queue(State(state): State<AppState>, Auth(p): Auth) -> Result<Reply, ApiError> {
    let app = state.mailing.clone();
    let q = run_blocking(move || Ok(dashboard::queue(&app, &p)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::queue(&q)))
}

async fn list_domains(
    State(state): State<AppState>,
    Auth(p): Auth,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["limit", "offset", "status"])?;
    let page = q.page()?;
    let status = parse_enum("status", q.get("status").map(str::to_owned), DomainStatus::parse, &DomainStatus::names())?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(domains::list(&app, &p, status, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(courrier_core::mailing::views::domain).collect(), found.total, page))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainBody {
    name: String,
    dkim_selector: Option<String>,
    default_subscription_policy: Option<String>,
}

async fn create_domain(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Json(body): Json<DomainBody>,
) -> Result<Reply, ApiError> {
    let req = domains::NewDomainRequest {
        name: DomainName::parse(&body.name).map_err(|e| invalid(format!("name: {e}")))?,
        dkim_selector: body.dkim_selector.filter(|s| !s.is_empty()),
        default_subscription_policy: policy("default_subscription_policy", body.default_subscription_policy)?,
    };
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(domains::create(&app, &p, &ctx, req)?)).await?;
    Ok(Reply::created(courrier_core::mailing::views::domain(&d)))
}

async fn get_domain(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
) -> Result<Reply, ApiError> {
    let name = domain_name(&domain)?;
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(domains::get(&app, &p, &ctx, &name)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::domain(&d)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainPatchBody {
    status: Option<String>,
    #[serde(default, with = "patch_text")]
    dkim_selector: Option<Option<String>>,
    default_subscription_policy: Option<String>,
}

async fn update_domain(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
    Json(body): Json<DomainPatchBody>,
) -> Result<Reply, ApiError> {
    let name = domain_name(&domain)?;
    let patch = domains::DomainPatch {
        status: parse_enum("status", body.status, DomainStatus::parse, &DomainStatus::names())?,
        dkim_selector: body.dkim_selector,
        default_subscription_policy: policy("default_subscription_policy", body.default_subscription_policy)?,
    };
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(domains::update(&app, &p, &ctx, &name, patch)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::domain(&d)))
}

async fn list_lists(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?;
    let page = q.page()?;
    let name = domain_name(&domain)?;
    let app = state.mailing.clone();
    let all = run_blocking(move || Ok(lists::list(&app, &p, &ctx, &name)?)).await?;
    let window: Vec<Value> = all
        .iter()
        .skip(usize::try_from(page.offset()).unwrap_or(usize::MAX))
        .take(page.limit() as usize)
        .map(courrier_core::mailing::views::list_summary)
        .collect();
    Ok(Reply::collection(window, all.len() as u64, page))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListBody {
    name: String,
    display_name: String,
    owner_email: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    subscription_policy: Option<String>,
}

async fn create_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
    Json(body): Json<ListBody>,
) -> Result<Reply, ApiError> {
    let domain = domain_name(&domain)?;
    let req = lists::NewList {
        name: ListName::parse(&body.name).map_err(|e| invalid(format!("name: {e}")))?,
        display_name: body.display_name,
        owner: EmailAddress::parse(&body.owner_email).map_err(|e| invalid(format!("owner_email: {e}")))?,
        kind: parse_enum("type", body.kind, ListKind::parse, &ListKind::names())?,
        subscription_policy: policy("subscription_policy", body.subscription_policy)?,
    };
    let app = state.mailing.clone();
    let l = run_blocking(move || Ok(lists::create(&app, &p, &ctx, &domain, req)?)).await?;
    Ok(Reply::created(courrier_core::mailing::views::list_detail(&l)))
}

async fn get_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(lists::get(&app, &p, &ctx, &d, &l)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::list_detail(&found)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListPatchBody {
    display_name: Option<String>,
    status: Option<String>,
    subscription_policy: Option<String>,
    posting_policy: Option<String>,
    #[serde(default, with = "patch_text")]
    subject_tag: Option<Option<String>>,
    #[serde(default, with = "patch_text")]
    footer_text: Option<Option<String>>,
    #[serde(default, with = "patch_text")]
    footer_html: Option<Option<String>>,
    reply_to: Option<String>,
    #[serde(default, with = "crate::body::whole")]
    bounce_disable_score: Option<u32>,
    digest_frequency: Option<String>,
    #[serde(default, with = "crate::body::whole")]
    max_message_kb: Option<u32>,
}

async fn update_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    Json(b): Json<ListPatchBody>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let patch = lists::ListPatch {
        display_name: b.display_name,
        status: parse_enum("status", b.status, ListStatus::parse, &ListStatus::names())?,
        subscription_policy: policy("subscription_policy", b.subscription_policy)?,
        posting_policy: parse_enum("posting_policy", b.posting_policy, PostingPolicy::parse, &PostingPolicy::names())?,
        subject_tag: b.subject_tag,
        footer_text: b.footer_text,
        footer_html: b.footer_html,
        reply_to: parse_enum("reply_to", b.reply_to, ReplyTo::parse, &ReplyTo::names())?,
        bounce_disable_score: b.bounce_disable_score,
        digest_frequency: parse_enum(
            "digest_frequency",
            b.digest_frequency,
            DigestFrequency::parse,
            &DigestFrequency::names(),
        )?,
        max_message_kb: b.max_message_kb,
    };
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(lists::update(&app, &p, &ctx, &d, &l, patch)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::list_detail(&found)))
}

async fn set_suspended(
    state: AppState,
    p: Arc<Principal>,
    ctx: courrier_core::access::principal::RequestCtx,
    domain: String,
    list: String,
    on: bool,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(lists::set_suspended(&app, &p, &ctx, &d, &l, on)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::list_detail(&found)))
}

async fn suspend_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    set_suspended(state, p, ctx, domain, list, true).await
}

async fn resume_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    set_suspended(state, p, ctx, domain, list, false).await
}

async fn list_members(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(
        raw.as_deref(),
        &["limit", "offset", "status", "delivery_mode", "min_bounce_score", "email_contains"],
    )?;
    let page = q.page()?;
    let filter = MemberFilter::parse(
        q.get("status"),
        q.get("delivery_mode"),
        q.get("min_bounce_score"),
        q.get("email_contains"),
    )?;
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(members::list(&app, &p, &ctx, &d, &l, &filter, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(courrier_core::mailing::views::member).collect(), found.total, page))
}

async fn get_member(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, member)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let who = MemberRef::parse(&member).map_err(|_| ApiError::new(Code::NotFound, "member not found"))?;
    let app = state.mailing.clone();
    let m = run_blocking(move || Ok(members::get(&app, &p, &ctx, &d, &l, &who)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::member(&m)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberBody {
    email: String,
    name: Option<String>,
    delivery_mode: Option<String>,
    force: Option<bool>,
    consent_source: Option<String>,
    consent_evidence: Option<String>,
}

fn member_request(body: &[u8], source_ip: Option<String>) -> Result<AddMember, ApiError> {
    let b: MemberBody = parse_json(body)?;
    Ok(AddMember {
        email: EmailAddress::parse(&b.email).map_err(|e| invalid(format!("email: {e}")))?,
        display_name: b.name.filter(|n| !n.trim().is_empty()),
        delivery_mode: match b.delivery_mode {
            None => DeliveryMode::Regular,
            Some(m) => members::parse_delivery_mode(&m)?,
        },
        force: b.force.unwrap_or(false),
        consent_source: b.consent_source.filter(|s| !s.is_empty()),
        consent_evidence: b.consent_evidence.filter(|s| !s.is_empty()),
        source_ip,
    })
}

async fn add_member(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_json_body(&headers, body, &state).await?;
    let path = format!("/api/v1/domains/{domain}/lists/{list}/members");
    let source = ctx.source.clone();
    let input = bytes.clone();
    let parse = move || Ok((names(&domain, &list)?, member_request(&input, source)?));
    keyed(&state, &p, &headers, "POST", &path, &bytes, parse, move |app, p, key, ((d, l), req)| {
        Ok(members::add(app, p, &ctx, key, &d, &l, req)?.map(|o| (o.status(), o.view())))
    })
    .await
}

/// The body of a JSON route read by hand (the Idempotency-Key fingerprint needs its bytes).
async fn read_json_body(headers: &HeaderMap, body: Body, state: &AppState) -> Result<Bytes, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(Code::MalformedBody, "the body must be JSON (Content-Type: application/json)"));
    }
    crate::body::check_declared_length(headers, JSON_BODY_LIMIT)?;
    read_limited(body, JSON_BODY_LIMIT, state.body_read_timeout).await
}

/// Runs an operation an Idempotency-Key may guard, on the blocking pool: `parse` reads its input
/// from the request, `run` calls core's operation, whose runner owns the transaction, the key's
/// check and the stored answer. A request that does not parse is refused through the same
/// registry (under a key, the refusal is the key's answer). A stored answer is replayed with
/// `Idempotent-Replay: true`.
#[allow(clippy::too_many_arguments)]
async fn keyed<I, P, R>(
    state: &AppState,
    p: &Arc<Principal>,
    headers: &HeaderMap,
    method: &str,
    path: &str,
    body: &[u8],
    parse: P,
    run: R,
) -> Result<Response, ApiError>
where
    I: Send + 'static,
    P: FnOnce() -> Result<I, ApiError> + Send + 'static,
    R: FnOnce(&mailing::Service, &Principal, Option<&IdempotentRequest>, I) -> Result<Keyed<(u16, Value)>, ApiError>
        + Send
        + 'static,
{
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| invalid("Idempotency-Key must be visible ASCII"))?.to_owned()),
    };
    let key = IdempotentRequest::new(p, key.as_deref(), method, path, body)?;
    let app = state.mailing.clone();
    let p = p.clone();
    let ran = run_blocking(move || match parse() {
        Ok(input) => run(&app, &p, key.as_ref(), input),
        Err(e) => {
            let refused = MailingError::Request { code: e.code, message: e.message };
            Ok(idempotency::refuse_input(&app, key.as_ref(), refused)?.map(|never| match never {}))
        }
    })
    .await?;
    match ran {
        Keyed::Replay { status, body } => {
            let mut resp = replay(status, &body);
            resp.headers_mut().insert("idempotent-replay", HeaderValue::from_static("true"));
            Ok(resp)
        }
        Keyed::Ran((status, data)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Ok(Reply::with_status(status, data).into_response())
        }
    }
}

/// A stored answer, with this request's `meta`.
fn replay(status: u16, stored: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let doc: Value = serde_json::from_str(stored).unwrap_or_else(|_| json!({}));
    if let Some(err) = doc.get("error") {
        let code = err.get("code").and_then(Value::as_str).unwrap_or("internal_error");
        let message = err.get("message").and_then(Value::as_str).unwrap_or("");
        let code = Code::ALL.iter().copied().find(|c| c.as_str() == code).unwrap_or(Code::Internal);
        return ApiError::new(code, message).into_response();
    }
    Reply::with_status(status, doc.get("data").cloned().unwrap_or(Value::Null)).into_response()
}

async fn export_members(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["status", "delivery_mode"])?;
    let filter = MemberFilter::parse(q.get("status"), q.get("delivery_mode"), None, None)?;
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let exp = run_blocking(move || Ok(export::open(&app, &p, &ctx, &d, &l, filter)?)).await?;
    let filename = format!("{}-members.csv", exp.list().address());
    let first = futures_util::stream::once(async {
        Ok::<Bytes, std::io::Error>(Bytes::from_static(export::HEADER.as_bytes()))
    });
    let app = state.mailing.clone();
    let request_id = envelope::request_id();
    let rows = futures_util::stream::unfold(Some(exp), move |cursor| {
        let app = app.clone();
        let request_id = request_id.clone();
        async move {
            let mut exp = cursor?;
            let next = tokio::task::spawn_blocking(move || {
                let chunk = exp.next_chunk(&app);
                (exp, chunk)
            })
            .await;
            match next {
                Ok((_, Ok(None))) => None,
                Ok((exp, Ok(Some(text)))) => Some((Ok(Bytes::from(text)), Some(exp))),
                Ok((_, Err(e))) => {
                    // The status line is gone already: end the body short and say why in the log.
                    tracing::error!(request_id = %request_id, error = %e, "export stopped part-way");
                    Some((Err(std::io::Error::other(e.to_string())), None))
                }
                Err(join) => {
                    tracing::error!(request_id = %request_id, error = %join, "export task failed");
                    Some((Err(std::io::Error::other("export failed")), None))
                }
            }
        }
    });
    let mut resp = Body::from_stream(first.chain(rows)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// The document's bytes handed to the importer's blocking thread: a bounded channel, so a fast
/// client cannot queue more than a few chunks ahead of the database.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    current: Bytes,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Where the CSV document is in the body.
enum Upload {
    Csv(Body),
    Multipart(multer::Multipart<'static>),
}

fn upload_of(headers: &HeaderMap, body: Body) -> Result<Upload, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match mime.as_str() {
        "text/csv" | "application/csv" | "text/plain" => Ok(Upload::Csv(body)),
        "multipart/form-data" => {
            let boundary = multer::parse_boundary(ct)
                .map_err(|e| ApiError::new(Code::MalformedBody, format!("multipart boundary: {e}")))?;
            Ok(Upload::Multipart(multer::Multipart::new(body.into_data_stream(), boundary)))
        }
        _ => Err(ApiError::new(
            Code::MalformedBody,
            "the body must be the CSV document (Content-Type: text/csv) or multipart/form-data with a file part",
        )),
    }
}

const FORM_FIELD_LIMIT: usize = 8 * 1024;

use futures_util::StreamExt;

async fn import_members(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["consent_evidence"])?;
    let mut evidence = q.get("consent_evidence").map(str::to_owned);
    let (d, l) = names(&domain, &list)?;
    let upload = upload_of(&headers, body)?;
    // Authorised before any byte of the document is read.
    let (app, pp, c) = (state.mailing.clone(), p.clone(), ctx.clone());
    let target = run_blocking(move || Ok(import::authorize(&app, &pp, &c, &d, &l)?)).await?;
    let timeout = state.body_read_timeout;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let feed: futures_util::stream::BoxStream<'static, Result<Bytes, String>> = match upload {
        Upload::Csv(body) => body.into_data_stream().map(|r| r.map_err(|e| e.to_string())).boxed(),
        Upload::Multipart(mut form) => {
            let file = loop {
                let field = tokio::time::timeout(timeout, form.next_field())
                    .await
                    .map_err(|_| ApiError::new(Code::MalformedBody, "the form did not arrive in time"))?
                    .map_err(|e| ApiError::new(Code::MalformedBody, format!("the form could not be read: {e}")))?;
                let Some(mut field) = field else {
                    return Err(invalid("the form has no part named file"));
                };
                match field.name() {
                    Some("file") => break field,
                    Some("consent_evidence") => {
                        let mut value = Vec::new();
                        while let Some(chunk) =
                            field.chunk().await.map_err(|e| ApiError::new(Code::MalformedBody, e.to_string()))?
                        {
                            value.extend_from_slice(&chunk);
                            if value.len() > FORM_FIELD_LIMIT {
                                return Err(invalid("consent_evidence is longer than 8 KiB"));
                            }
                        }
                        evidence =
                            Some(String::from_utf8(value).map_err(|_| invalid("consent_evidence is not UTF-8"))?);
                    }
                    // Other fields are ignored, read past in order.
                    _ => {
                        while field
                            .chunk()
                            .await
                            .map_err(|e| ApiError::new(Code::MalformedBody, e.to_string()))?
                            .is_some()
                        {}
                    }
                }
            };
            futures_util::stream::unfold(file, |mut f| async move {
                match f.chunk().await {
                    Ok(Some(b)) => Some((Ok(b), f)),
                    Ok(None) => None,
                    Err(e) => Some((Err(e.to_string()), f)),
                }
            })
            .boxed()
        }
    };
    let consent = ImportConsent::new(evidence.as_deref(), ctx.source.clone())?;
    let app = state.mailing.clone();
    let importer = run_blocking(move || {
        let reader = ChannelReader { rx, current: Bytes::new() };
        Ok(import::import(&app, &p, &ctx, &target, &consent, std::io::BufReader::with_capacity(64 * 1024, reader))?)
    });
    let forward = forward_document(feed, tx, timeout);
    let (report, ()) = tokio::join!(importer, forward);
    Ok(Reply::ok(courrier_core::mailing::views::import_report(&report?)))
}

/// Feeds the document to the importer, cutting it at the contract's 25 MiB: the importer then
/// sees [`SizeLimitExceeded`] after the last byte within the limit.
async fn forward_document(
    mut feed: futures_util::stream::BoxStream<'static, Result<Bytes, String>>,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    timeout: std::time::Duration,
) {
    let mut seen: u64 = 0;
    loop {
        let next = match tokio::time::timeout(timeout, feed.next()).await {
            Err(_) => Some(Err(format!("no data for {} seconds", timeout.as_secs()))),
            Ok(n) => n,
        };
        let item = match next {
            None => return,
            Some(Err(e)) => Err(std::io::Error::other(format!("the upload was interrupted: {e}"))),
            Some(Ok(mut chunk)) => {
                let room = MAX_IMPORT_BYTES - seen;
                if chunk.len() as u64 > room {
                    let kept = chunk.split_to(room as usize);
                    if !kept.is_empty() && tx.send(Ok(kept)).await.is_err() {
                        return;
                    }
                    let _ = tx.send(Err(std::io::Error::other(SizeLimitExceeded))).await;
                    return;
                }
                seen += chunk.len() as u64;
                Ok(chunk)
            }
        };
        let stop = item.is_err();
        // The importer stopped (a bad header row): nothing more to hand it.
        if tx.send(item).await.is_err() || stop {
            return;
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendBody {
    subject: String,
    text: Option<String>,
    html: Option<String>,
}

async fn submit_send(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_json_body(&headers, body, &state).await?;
    let path = format!("/api/v1/domains/{domain}/lists/{list}/sends");
    let input = bytes.clone();
    let parse = move || {
        let b: SendBody = parse_json(&input)?;
        Ok((names(&domain, &list)?, sends::NewMessage { subject: b.subject, text: b.text, html: b.html }))
    };
    keyed(&state, &p, &headers, "POST", &path, &bytes, parse, move |app, p, key, ((d, l), message)| {
        Ok(sends::submit(app, p, &ctx, key, &d, &l, message)?.map(|s| (s.status(), s.view())))
    })
    .await
}

fn send_status(
    send: &courrier_core::mailing::model::SendRecord,
    counts: &courrier_core::mailing::model::CopyCounts,
) -> Value {
    use courrier_core::mailing::model::CopyState;
    let by_state: serde_json::Map<String, Value> =
        CopyState::ALL.iter().map(|s| (s.as_str().to_owned(), json!(counts.get(*s)))).collect();
    json!({
        "id": send.id.get(),
        "state": send.state.as_str(),
        "subject": send.subject,
        "recipients": send.recipients,
        "counts": by_state,
        "created_at": send.created_at.to_rfc3339(),
        "completed_at": send.completed_at.map(|t| t.to_rfc3339()),
    })
}

async fn get_send(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, send)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = SendId::parse(&send)?;
    let app = state.mailing.clone();
    let (s, counts) = run_blocking(move || Ok(sends::get(&app, &p, &ctx, &d, &l, id)?)).await?;
    Ok(Reply::ok(send_status(&s, &counts)))
}

async fn cancel_send(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, send)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = SendId::parse(&send)?;
    let app = state.mailing.clone();
    let (s, counts) = run_blocking(move || Ok(sends::cancel(&app, &p, &ctx, &d, &l, id)?)).await?;
    Ok(Reply::ok(send_status(&s, &counts)))
}
