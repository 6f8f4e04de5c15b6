//! A list's moderation queues (`.../moderation/subscriptions`, `.../moderation/messages`):
//! parse, call core, render.

use super::{LIST, PAGE, names};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use crate::routes::{Access, Param, ParamKind, Perm, Route, Success, route};
use crate::schema;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use courrier_core::kernel::Code;
use courrier_core::mailing::model::MemberId;
use courrier_core::mailing::moderation::{self, Decision, MessageDecision};
use courrier_core::mailing::posts::HeldId;
use courrier_core::mailing::views;
use http::{HeaderMap, header};
use serde::Deserialize;

const ITEM: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
    Param { name: "id", kind: ParamKind::Id, description: "the item's id (a subscription's is its member id)" },
];

pub static ROUTES: &[Route] = &[
    route!(GET "/api/v1/domains/{domain}/lists/{list}/moderation/subscriptions", "listPendingSubscriptions",
        "Subscriptions waiting for a moderator (members pending with reason moderation), by id", "moderation",
        Access::Perm(Perm::Moderate), params: LIST, query: PAGE, request: None,
        success: Success::Collection(schema::PENDING_SUBSCRIPTION), errors: &[], list_subscriptions),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/moderation/subscriptions/{id}/approve",
        "approveSubscription",
        "The member becomes active (subscription.confirmed, member.added); 404 once decided", "moderation",
        Access::Perm(Perm::Moderate), params: ITEM, query: &[], request: None,
        success: Success::Data(200, schema::MEMBER), errors: &[], approve_subscription),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/moderation/subscriptions/{id}/reject",
        "rejectSubscription",
        "The member becomes removed (member.removed) and the requester is told by mail; 404 once decided",
        "moderation", Access::Perm(Perm::Moderate), params: ITEM, query: &[], request: None,
        success: Success::Data(200, schema::MEMBER), errors: &[], reject_subscription),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/moderation/messages", "listHeldMessages",
        "Posts held for a moderator, oldest first", "moderation", Access::Perm(Perm::Moderate), params: LIST,
        query: PAGE, request: None, success: Success::Collection(schema::HELD_MESSAGE), errors: &[],
        list_messages),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/moderation/messages/{id}", "getHeldMessage",
        "A held post: its header fields and first text part (64 KiB at most); 404 once decided", "moderation",
        Access::Perm(Perm::Moderate), params: ITEM, query: &[], request: None,
        success: Success::Data(200, schema::HELD_MESSAGE_DETAIL), errors: &[], get_message),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/moderation/messages/{id}/approve", "approveHeldMessage",
        "Post it as if the policy had let it through (send.submitted); 404 once decided, 409 on an archived list",
        "moderation", Access::Perm(Perm::Moderate), params: ITEM, query: &[], request: None,
        success: Success::Data(200, schema::HELD_APPROVED), errors: &[409], approve_message),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/moderation/messages/{id}/reject", "rejectHeldMessage",
        "Delete it and mail the poster a rejection, with the reason when given (the body is optional); 404 once decided",
        "moderation", Access::Perm(Perm::Moderate), params: ITEM, query: &[], request: Some(schema::HELD_REJECT),
        success: Success::Data(200, schema::HELD_DECIDED), errors: &[], reject_message),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/moderation/messages/{id}/discard", "discardHeldMessage",
        "Delete it, nobody told; 404 once decided", "moderation", Access::Perm(Perm::Moderate), params: ITEM,
        query: &[], request: None, success: Success::Data(200, schema::HELD_DECIDED), errors: &[], discard_message),
];

async fn list_subscriptions(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let page = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?.page()?;
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(moderation::subscriptions(&app, &p, &ctx, &d, &l, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(views::pending_subscription).collect(), found.total, page))
}

async fn decide(
    state: AppState,
    p: std::sync::Arc<courrier_core::access::Principal>,
    ctx: courrier_core::access::principal::RequestCtx,
    (domain, list, id): (String, String, String),
    decision: Decision,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = MemberId::parse(&id)?;
    let app = state.mailing.clone();
    let m = run_blocking(move || Ok(moderation::decide_subscription(&app, &p, &ctx, &d, &l, id, decision)?)).await?;
    Ok(Reply::ok(views::member(&m)))
}

async fn approve_subscription(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(path): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    decide(state, p, ctx, path, Decision::Approve).await
}

async fn reject_subscription(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(path): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    decide(state, p, ctx, path, Decision::Reject).await
}

async fn list_messages(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let page = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?.page()?;
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(moderation::messages(&app, &p, &ctx, &d, &l, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(views::held_message).collect(), found.total, page))
}

async fn get_message(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, id)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = HeldId::parse(&id)?;
    let app = state.mailing.clone();
    let m = run_blocking(move || Ok(moderation::message(&app, &p, &ctx, &d, &l, id)?)).await?;
    Ok(Reply::ok(views::held_message_detail(&m)))
}

async fn decide_message(
    state: AppState,
    p: std::sync::Arc<courrier_core::access::Principal>,
    ctx: courrier_core::access::principal::RequestCtx,
    (domain, list, id): (String, String, String),
    decision: MessageDecision,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = HeldId::parse(&id)?;
    let app = state.mailing.clone();
    let label = match decision {
        MessageDecision::Approve => "approved",
        MessageDecision::Reject(_) => "rejected",
        MessageDecision::Discard => "discarded",
    };
    let sent = run_blocking(move || Ok(moderation::decide_message(&app, &p, &ctx, &d, &l, id, decision)?)).await?;
    Ok(Reply::ok(match sent {
        Some(s) => views::held_approved(id, &s),
        None => views::held_decided(id, label),
    }))
}

async fn approve_message(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(path): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    decide_message(state, p, ctx, path, MessageDecision::Approve).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RejectBody {
    reason: Option<String>,
}

async fn reject_message(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Reply, ApiError> {
    crate::body::check_declared_length(&headers, crate::routes::JSON_BODY_LIMIT)?;
    let bytes = crate::body::read_limited(body, crate::routes::JSON_BODY_LIMIT, state.body_read_timeout).await?;
    // The body is optional: none (or an empty one) rejects without a reason.
    let reason = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let is_json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::new(Code::MalformedBody, "the body must be JSON (Content-Type: application/json)"));
        }
        crate::body::parse_json::<RejectBody>(&bytes)?.reason.filter(|r| !r.trim().is_empty())
    };
    decide_message(state, p, ctx, path, MessageDecision::Reject(reason)).await
}

async fn discard_message(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(path): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    decide_message(state, p, ctx, path, MessageDecision::Discard).await
}
