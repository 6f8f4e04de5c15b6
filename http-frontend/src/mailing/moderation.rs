//! A list's moderation queues (`.../moderation/subscriptions`): parse, call core, render.

use super::{LIST, PAGE, names};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use crate::routes::{Access, Param, ParamKind, Perm, Route, Success, route};
use crate::schema;
use axum::extract::{Path, RawQuery, State};
use courrier_core::mailing::model::MemberId;
use courrier_core::mailing::moderation::{self, Decision};
use courrier_core::mailing::views;

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
