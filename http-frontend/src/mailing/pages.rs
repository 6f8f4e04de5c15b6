//! Pages for people (`/p/...`), linked from mails: small HTML forms over the same core calls.

use crate::AppState;
use crate::auth::Ctx;
use crate::blocking::run_blocking;
use crate::body::read_limited;
use crate::error::ApiError;
use crate::query::decode;
use crate::routes::{Access, Api, Param, ParamKind, Route, Success};
use crate::schema;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::on;
use courrier_core::access::{AccessError, users};
use courrier_core::mailing::{delivery, subscriptions};
use http::{Method, StatusCode};

const TOKEN: &[Param] = &[Param { name: "token", kind: ParamKind::Text, description: "the link's token" }];
/// A form post holds a password or two: 16 KiB is plenty.
const FORM_LIMIT: usize = 16 * 1024;

pub static ROUTES: &[Route] = &[
    Route {
        method: Method::GET,
        path: "/p/password/{token}",
        api: Api::Page,
        operation_id: "passwordPage",
        summary: "The set-password form of an invitation link",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, password_form),
    },
    Route {
        method: Method::POST,
        path: "/p/password/{token}",
        api: Api::Page,
        operation_id: "passwordSubmit",
        summary: "Set the password through an invitation link",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[400, 404, 422],
        handler: |m| on(m, password_submit),
    },
    Route {
        method: Method::GET,
        path: "/p/confirm/{token}",
        api: Api::Page,
        operation_id: "confirmPage",
        summary: "What a subscription confirmation link confirms, with a button (a mail scanner's GET confirms nothing)",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, confirm_form),
    },
    Route {
        method: Method::POST,
        path: "/p/confirm/{token}",
        api: Api::Page,
        operation_id: "confirmSubmit",
        summary: "Confirm a subscription through its link",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, confirm_submit),
    },
    Route {
        method: Method::GET,
        path: "/p/unsubscribe/{token}",
        api: Api::Page,
        operation_id: "unsubscribePage",
        summary: "What an unsubscription link would do, with a button (a GET changes nothing)",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, unsubscribe_form),
    },
    Route {
        method: Method::POST,
        path: "/p/unsubscribe/{token}",
        api: Api::Page,
        operation_id: "unsubscribeSubmit",
        summary: "Unsubscribe: the page's button, or RFC 8058 one-click (List-Unsubscribe=One-Click), no login",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, unsubscribe_submit),
    },
    Route {
        method: Method::GET,
        path: "/forgot-password",
        api: Api::Page,
        operation_id: "forgotPasswordPage",
        summary: "The form that mails a one-time sign-in link (?email= prefills it; ScanInvoices links here)",
        tag: "pages",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[],
        handler: |m| on(m, forgot_form),
    },
    Route {
        method: Method::POST,
        path: "/forgot-password",
        api: Api::Page,
        operation_id: "forgotPasswordSubmit",
        summary: "Mail a one-time sign-in link to an account's address (the same answer whatever the address)",
        tag: "pages",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[429],
        handler: |m| on(m, forgot_submit),
    },
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"referrer\" content=\"no-referrer\"><title>{t}</title></head>\
         <body style=\"font-family:sans-serif;max-width:32em;margin:3em auto\"><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    );
    let mut resp = (status, Html(html)).into_response();
    // The token is in the URL: no caching, no referrer, no framing.
    let h = resp.headers_mut();
    h.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    h.insert("x-frame-options", http::HeaderValue::from_static("DENY"));
    resp
}

fn form(email: &str, error: Option<&str>) -> String {
    let error = error.map(|e| format!("<p role=\"alert\" style=\"color:#a00\">{}</p>", escape(e))).unwrap_or_default();
    format!(
        "<p>Choose the password of <b>{}</b> (at least 12 characters).</p>{error}\
         <form method=\"post\"><p><label>Password<br><input type=\"password\" name=\"password\" required minlength=\"12\" autocomplete=\"new-password\"></label></p>\
         <p><label>Again<br><input type=\"password\" name=\"password_confirmation\" required minlength=\"12\" autocomplete=\"new-password\"></label></p>\
         <p><button type=\"submit\">Set the password</button></p></form>",
        escape(email)
    )
}

fn invalid_link() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This link is not valid: it was used already, it expired, or it was mistyped.</p>",
    )
}

async fn password_form(State(state): State<AppState>, Path(token): Path<String>) -> Result<Response, ApiError> {
    let app = state.access.clone();
    let found = run_blocking(move || Ok(users::password_token_user(&app, &token))).await?;
    Ok(match found {
        Ok(user) => page(StatusCode::OK, "Set your password", &form(&user.email.to_string(), None)),
        Err(AccessError::NotFound(_)) => invalid_link(),
        Err(e) => return Err(e.into()),
    })
}

async fn password_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let text = String::from_utf8_lossy(&bytes);
    let mut password = None;
    let mut confirmation = None;
    for pair in text.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match decode(k)?.as_str() {
            "password" => password = Some(decode(v)?),
            "password_confirmation" => confirmation = Some(decode(v)?),
            _ => {}
        }
    }
    let app = state.access.clone();
    let t = token.clone();
    let user = match run_blocking(move || Ok(users::password_token_user(&app, &t))).await? {
        Ok(u) => u,
        Err(AccessError::NotFound(_)) => return Ok(invalid_link()),
        Err(e) => return Err(e.into()),
    };
    let email = user.email.to_string();
    let (Some(password), Some(confirmation)) = (password, confirmation) else {
        return Ok(page(StatusCode::BAD_REQUEST, "Set your password", &form(&email, Some("Fill in both fields."))));
    };
    if password != confirmation {
        return Ok(page(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Set your password",
            &form(&email, Some("The two passwords differ.")),
        ));
    }
    let app = state.access.clone();
    Ok(match run_blocking(move || Ok(users::set_password_with_token(&app, &ctx, &token, &password))).await? {
        Ok(_) => page(StatusCode::OK, "Password set", "<p>Your password is set. You can sign in now.</p>"),
        Err(AccessError::NotFound(_)) => invalid_link(),
        Err(AccessError::Invalid(why)) => {
            page(StatusCode::UNPROCESSABLE_ENTITY, "Set your password", &form(&email, Some(&why)))
        }
        Err(e) => return Err(e.into()),
    })
}

async fn confirm_form(State(state): State<AppState>, Path(token): Path<String>) -> Result<Response, ApiError> {
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(subscriptions::peek(&app, &token)?)).await?;
    Ok(match found {
        Ok(p) => page(
            StatusCode::OK,
            "Confirm your subscription",
            &format!(
                "<p>Subscribe <b>{}</b> to <b>{}</b> ({})?</p>\
                 <form method=\"post\"><p><button type=\"submit\">Confirm my subscription</button></p></form>\
                 <p>If you did not ask for this, close this page: nothing happens without the button.</p>",
                escape(&p.email.to_string()),
                escape(&p.list_display_name),
                escape(&p.list_address)
            ),
        ),
        Err(subscriptions::LinkUnusable) => invalid_link(),
    })
}

async fn confirm_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    // The form has no fields; its body is read (bounded) only so the connection stays usable.
    read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let app = state.mailing.clone();
    let done = run_blocking(move || Ok(subscriptions::confirm(&app, &token, ctx.source)?)).await?;
    Ok(match done {
        Ok(p) => page(
            StatusCode::OK,
            "Subscription confirmed",
            &format!(
                "<p><b>{}</b> is now subscribed to <b>{}</b> ({}).</p>",
                escape(&p.email.to_string()),
                escape(&p.list_display_name),
                escape(&p.list_address)
            ),
        ),
        Err(subscriptions::LinkUnusable) => invalid_link(),
    })
}

async fn unsubscribe_form(State(state): State<AppState>, Path(token): Path<String>) -> Result<Response, ApiError> {
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(delivery::unsubscribe_peek(&app, &token)?)).await?;
    Ok(match found {
        Some(s) => page(
            StatusCode::OK,
            "Unsubscribe",
            &format!(
                "<p>Stop sending <b>{}</b> to <b>{}</b>?</p>\
                 <form method=\"post\"><p><button type=\"submit\">Unsubscribe</button></p></form>",
                escape(&s.list_address),
                escape(&s.email)
            ),
        ),
        None => invalid_link(),
    })
}

async fn unsubscribe_submit(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    // The body is the page's empty form or RFC 8058's `List-Unsubscribe=One-Click`: either
    // unsubscribes; it is read (bounded) so the connection stays usable.
    read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let app = state.mailing.clone();
    let done = run_blocking(move || Ok(delivery::unsubscribe(&app, &token)?)).await?;
    Ok(match done {
        Some(s) => page(
            StatusCode::OK,
            "Unsubscribed",
            &format!(
                "<p><b>{}</b> will receive nothing more from <b>{}</b>.</p>",
                escape(&s.email),
                escape(&s.list_address)
            ),
        ),
        None => invalid_link(),
    })
}

/// The value of `name` in an `a=1&b=2` text (a query or a form); a bad escape reads as absent.
fn form_value(text: &str, name: &str) -> Option<String> {
    text.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k).ok()? == name).then(|| decode(v).ok()).flatten()
    })
}

fn forgot_page(status: StatusCode, email: &str, note: Option<&str>) -> Response {
    let note = note.map(|n| format!("<p role=\"status\">{}</p>", escape(n))).unwrap_or_default();
    page(
        status,
        "Forgotten password",
        &format!(
            "{note}<p>Type the address of your account: a link to sign in and choose a new password is mailed to it.</p>\
             <form method=\"post\" action=\"/forgot-password\"><p><label>Address<br><input type=\"email\" name=\"email\" required maxlength=\"254\" value=\"{}\" autocomplete=\"email\"></label></p>\
             <p><button type=\"submit\">Mail me a sign-in link</button></p></form>",
            escape(email)
        ),
    )
}

async fn forgot_form(uri: http::Uri) -> Response {
    let email = uri.query().and_then(|q| form_value(q, "email")).unwrap_or_default();
    forgot_page(StatusCode::OK, email.trim(), None)
}

/// Counts the request against the address and the source (429 past the limits), answers the same
/// page whatever the address, and looks the account up and mails the link after answering, so
/// that neither the page nor its timing tells whether the address has an account.
async fn forgot_submit(State(state): State<AppState>, Ctx(ctx): Ctx, body: Body) -> Result<Response, ApiError> {
    let bytes = read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let email = form_value(&String::from_utf8_lossy(&bytes), "email").unwrap_or_default();
    let email: String = email.trim().chars().take(254).collect();
    if email.is_empty() {
        return Ok(forgot_page(StatusCode::UNPROCESSABLE_ENTITY, "", Some("Type an address.")));
    }
    let app = state.access.clone();
    let (address, request) = (email.clone(), ctx.clone());
    match run_blocking(move || Ok(users::take_password_reset(&app, &request, &address))).await? {
        Ok(()) => {}
        Err(AccessError::RateLimited { retry_after }) => {
            let mut resp = forgot_page(
                StatusCode::TOO_MANY_REQUESTS,
                &email,
                Some("Too many links were asked for lately: try again later."),
            );
            resp.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(retry_after));
            return Ok(resp);
        }
        Err(e) => return Err(e.into()),
    }
    let app = state.access.clone();
    let address = email.clone();
    tokio::spawn(async move {
        let sent = run_blocking(move || Ok(users::send_password_reset(&app, &ctx, &address))).await;
        match sent {
            Ok(Ok(sent)) => tracing::info!(sent, "forgotten-password request"),
            Ok(Err(e)) => tracing::warn!(error = %e, "forgotten-password request failed"),
            Err(e) => tracing::warn!(error = %e.message, "forgotten-password request failed"),
        }
    });
    Ok(page(
        StatusCode::OK,
        "Check your mail",
        &format!(
            "<p>If <b>{}</b> is the address of an account, a sign-in link is on its way to it. It works once, for one hour.</p>",
            escape(&email)
        ),
    ))
}
