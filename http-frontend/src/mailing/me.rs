//! `/api/v1/me/...`: subscriber self-service. Parse, call `courrier_core::mailing::me`, render.

use crate::AppState;
use crate::auth::{Ctx, Me, SUBSCRIBER_COOKIE};
use crate::blocking::run_blocking;
use crate::body::Json;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use crate::routes::{Access, Param, ParamKind, QueryParam, Route, Success, route};
use crate::schema;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use courrier_core::access::principal::RequestCtx;
use courrier_core::kernel::{Code, EmailAddress, parse_positive_id};
use courrier_core::mailing::me;
use courrier_core::mailing::model::{DeliveryMode, ListId};
use courrier_core::mailing::views;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::json;

const LIST_ID: &[Param] = &[Param { name: "list_id", kind: ParamKind::Id, description: "the list's numeric id" }];
const PAGE: &[QueryParam] = &[
    QueryParam { name: "limit", schema: schema::LIMIT, description: "1 to 500, default 50" },
    QueryParam { name: "offset", schema: schema::OFFSET, description: "default 0" },
];

pub static ROUTES: &[Route] = &[
    route!(POST "/api/v1/me/login-link", "requestLoginLink",
        "Mail a one-time sign-in link to the address (202 whether or not it is subscribed anywhere)", "me",
        Access::Public, params: &[], query: &[], request: Some(schema::LOGIN_LINK_REQUEST),
        success: Success::Data(202, schema::LOGIN_LINK_SENT), errors: &[429], login_link),
    route!(POST "/api/v1/me/session", "openSubscriberSession",
        "Use a login link's token (once, within the hour): opens the subscriber session (cookie svc_subscriber)", "me",
        Access::Public, params: &[], query: &[], request: Some(schema::ME_SESSION_REQUEST),
        success: Success::Data(200, schema::ME_SESSION), errors: &[401], open_session),
    route!(GET "/api/v1/me/session", "getSubscriberSession", "The session's address, expiry and CSRF token", "me",
        Access::Subscriber, params: &[], query: &[], request: None, success: Success::Data(200, schema::ME_SESSION),
        errors: &[], get_session),
    route!(POST "/api/v1/me/logout", "closeSubscriberSession", "Close the subscriber session", "me",
        Access::Public, params: &[], query: &[], request: None, success: Success::NoContent, errors: &[], logout),
    route!(GET "/api/v1/me/subscriptions", "listMySubscriptions", "The session address's subscriptions, by list id",
        "me", Access::Subscriber, params: &[], query: PAGE, request: None,
        success: Success::Collection(schema::SUBSCRIPTION), errors: &[], list_subscriptions),
    route!(PATCH "/api/v1/me/subscriptions/{list_id}", "updateMySubscription",
        "Change the delivery mode of a subscription (404 when the address is not subscribed to the list)", "me",
        Access::Subscriber, params: LIST_ID, query: &[], request: Some(schema::ME_SUBSCRIPTION_PATCH),
        success: Success::Data(200, schema::SUBSCRIPTION), errors: &[404], update_subscription),
    route!(DELETE "/api/v1/me/subscriptions/{list_id}", "deleteMySubscription",
        "Unsubscribe from the list (404 when the address is not subscribed to it)", "me",
        Access::Subscriber, params: LIST_ID, query: &[], request: None, success: Success::NoContent,
        errors: &[404], delete_subscription),
];

/// The `svc_subscriber` cookie: HttpOnly, SameSite=Lax, Secure unless the public URL is plain
/// http, for the session's absolute life (the sliding hour is the server's).
pub(crate) fn subscriber_cookie(state: &AppState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.mailing.settings.public_url.starts_with("http://") { "" } else { "; Secure" };
    HeaderValue::from_str(&format!(
        "{SUBSCRIBER_COOKIE}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    ))
    .expect("the cookie is ASCII")
}

/// Counts the request (429 past the limits), then answers: the address is looked up and the
/// link mailed after the answer, so that neither the answer nor its timing tells whether the
/// address is subscribed anywhere. Shared by `/p/me`.
pub(crate) async fn request_login_link(state: &AppState, ctx: RequestCtx, email: EmailAddress) -> Result<(), ApiError> {
    let app = state.mailing.clone();
    let (request, address) = (ctx.clone(), email.to_string());
    run_blocking(move || Ok(me::take_link_request(&app, &request, &address)?)).await?;
    let app = state.mailing.clone();
    tokio::spawn(async move {
        match run_blocking(move || Ok(me::send_login_link(&app, &ctx, &email)?)).await {
            Ok(sent) => tracing::info!(sent, "login link request"),
            Err(e) => tracing::warn!(error = %e.message, "login link request failed"),
        }
    });
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginLinkBody {
    email: String,
}

async fn login_link(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    Json(body): Json<LoginLinkBody>,
) -> Result<Reply, ApiError> {
    let email = EmailAddress::parse(body.email.trim())?;
    request_login_link(&state, ctx, email).await?;
    Ok(Reply::accepted(json!({ "message": schema::LOGIN_LINK_MESSAGE })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionBody {
    token: String,
}

/// The answer of a session just opened: the session document, and the cookie.
pub(crate) fn opened(state: &AppState, opened: &me::Opened, mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::SET_COOKIE, subscriber_cookie(state, &opened.token, me::SESSION_MAX_SECS));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn open_session(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    Json(body): Json<SessionBody>,
) -> Result<Response, ApiError> {
    let app = state.mailing.clone();
    let done = run_blocking(move || Ok(me::open_session(&app, &ctx, &body.token)?)).await?;
    let resp = Reply::ok(views::subscriber_session(&done.subscriber)).into_response();
    Ok(opened(&state, &done, resp))
}

async fn get_session(Me(s): Me) -> Response {
    let mut resp = Reply::ok(views::subscriber_session(&s)).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(token) = crate::auth::subscriber_cookie(&headers) {
        let app = state.mailing.clone();
        run_blocking(move || Ok(me::logout(&app, &token)?)).await?;
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(header::SET_COOKIE, subscriber_cookie(&state, "", 0));
    Ok(resp)
}

async fn list_subscriptions(
    State(state): State<AppState>,
    Me(s): Me,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let page = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?.page()?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(me::subscriptions(&app, &s, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(views::subscription).collect(), found.total, page))
}

fn list_id(raw: &str) -> Result<ListId, ApiError> {
    parse_positive_id(raw)
        .map(ListId::from_stored)
        .map_err(|e| ApiError::new(Code::InvalidPathId, format!("path parameter list_id: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchBody {
    delivery_mode: String,
}

pub(crate) fn delivery_mode(raw: &str) -> Result<DeliveryMode, ApiError> {
    DeliveryMode::parse(raw).ok_or_else(|| {
        ApiError::new(
            Code::ValidationFailed,
            format!("delivery_mode must be one of {}", DeliveryMode::names().join(", ")),
        )
    })
}

async fn update_subscription(
    State(state): State<AppState>,
    Me(s): Me,
    Ctx(ctx): Ctx,
    Path(raw): Path<String>,
    Json(body): Json<PatchBody>,
) -> Result<Reply, ApiError> {
    let list = list_id(&raw)?;
    let mode = delivery_mode(&body.delivery_mode)?;
    let app = state.mailing.clone();
    let sub = run_blocking(move || Ok(me::set_delivery_mode(&app, &s, &ctx, list, mode)?)).await?;
    Ok(Reply::ok(views::subscription(&sub)))
}

async fn delete_subscription(
    State(state): State<AppState>,
    Me(s): Me,
    Ctx(ctx): Ctx,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let list = list_id(&raw)?;
    let app = state.mailing.clone();
    run_blocking(move || Ok(me::unsubscribe(&app, &s, &ctx, list)?)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
