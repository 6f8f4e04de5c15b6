//! The subscriber's pages: `/p/me` (the address form, then the subscriptions with a delivery-mode
//! form and an unsubscribe button each, and logout), `/p/me/login/{token}` (GET shows a button,
//! POST opens the session), and the public form `/p/subscribe/{domain}/{list}`. The same core
//! operations as `/api/v1/me` (never the API over HTTP), the same session cookie, CSRF tokens in
//! the forms, the same limits. No script.

use super::layout::{Lang, alert, invalid_link, page, see_other};
use super::me::{opened, request_login_link};
use super::pages::form_value;
use crate::AppState;
use crate::auth::Ctx;
use crate::blocking::run_blocking;
use crate::body::read_limited;
use crate::error::ApiError;
use crate::routes::{Access, Api, Param, ParamKind, Route, Success};
use crate::schema;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::on;
use courrier_core::access::AccessError;
use courrier_core::kernel::{Code, EmailAddress, Page, parse_positive_id};
use courrier_core::mailing::me::{self, Subscriber};
use courrier_core::mailing::model::{DeliveryMode, ListId, MemberStatus};
use courrier_core::mailing::{MailingError, ports::SubscriptionRecord};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use maud::{Markup, html};

/// A form post holds an address, a name and a token: 16 KiB is plenty.
const FORM_LIMIT: usize = 16 * 1024;
const TOKEN: &[Param] = &[Param { name: "token", kind: ParamKind::Text, description: "the login link's token" }];
/// Parsed by the handler, so that a bad id is the HTML 404 page, not the API's JSON 422.
const LIST_ID: &[Param] = &[Param { name: "list_id", kind: ParamKind::Text, description: "the list's numeric id" }];
const LIST: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part" },
];

macro_rules! page_route {
    ($method:ident $path:literal, $op:literal, $summary:literal, $params:expr, $errors:expr, $handler:expr) => {
        Route {
            method: Method::$method,
            path: $path,
            api: Api::Page,
            operation_id: $op,
            summary: $summary,
            tag: "pages",
            access: Access::Public,
            params: $params,
            query: &[],
            request: None,
            success: Success::Raw("text/html", schema::STRING),
            body_limit: FORM_LIMIT,
            errors: $errors,
            handler: |m| on(m, $handler),
        }
    };
}

pub static ROUTES: &[Route] = &[
    page_route!(GET "/p/me", "mePage", "The address form, or the session's subscriptions", &[], &[], me_page),
    page_route!(POST "/p/me", "meLoginLink", "Mail a sign-in link (the same page whatever the address)", &[],
        &[422, 429], me_login_link),
    page_route!(GET "/p/me/login/{token}", "meLoginPage", "A login link: a button (a GET opens nothing)", TOKEN,
        &[404], login_page),
    page_route!(POST "/p/me/login/{token}", "meLoginSubmit", "Use a login link: opens the session, back to /p/me",
        TOKEN, &[404], login_submit),
    page_route!(POST "/p/me/subscriptions/{list_id}", "meDeliveryMode", "Change a subscription's delivery mode",
        LIST_ID, &[403, 404, 422], delivery_mode_submit),
    page_route!(POST "/p/me/subscriptions/{list_id}/unsubscribe", "meUnsubscribe", "Leave a list", LIST_ID,
        &[403, 404], unsubscribe_submit),
    page_route!(POST "/p/me/logout", "meLogout", "Close the subscriber session", &[], &[403], logout_submit),
    page_route!(GET "/p/subscribe/{domain}/{list}", "subscribePage", "The public subscription form of a list", LIST,
        &[404], subscribe_page),
    page_route!(POST "/p/subscribe/{domain}/{list}", "subscribeSubmit",
        "Ask to subscribe: a confirmation mail first (the same page whatever the address)", LIST, &[404, 422, 429],
        subscribe_submit),
];

fn check_mail(lang: Lang, email: &str, what: &'static str) -> Response {
    page(
        lang,
        StatusCode::OK,
        lang.t("Check your mail", "Consultez votre messagerie"),
        html! { p { (what) " " b { (email) } "." } p class="note" { (lang.t(
            "The link works once. Nothing arrived? Check the spam folder, or ask again later.",
            "Le lien sert une fois. Rien reçu ? Regardez dans les indésirables, ou redemandez plus tard.",
        )) } },
    )
}

fn too_many(lang: Lang, retry_after: Option<u64>, body: Markup) -> Response {
    let mut resp = page(lang, StatusCode::TOO_MANY_REQUESTS, lang.t("Too many requests", "Trop de demandes"), body);
    if let Some(secs) = retry_after {
        resp.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

fn address_form(lang: Lang, email: &str, message: Option<Markup>) -> Markup {
    html! {
        @if let Some(m) = message { (m) }
        p { (lang.t(
            "Type your address: a link to manage your subscriptions is mailed to it.",
            "Tapez votre adresse : un lien pour gérer vos abonnements y sera envoyé.",
        )) }
        form method="post" action="/p/me" {
            label for="email" { (lang.t("Your address", "Votre adresse")) }
            input id="email" type="email" name="email" required maxlength="254" value=(email) autocomplete="email";
            button type="submit" { (lang.t("Mail me a link", "M'envoyer un lien")) }
        }
    }
}

fn mode_name(lang: Lang, mode: DeliveryMode) -> &'static str {
    match mode {
        DeliveryMode::Regular => lang.t("Every message", "Chaque message"),
        DeliveryMode::Digest => lang.t("A digest", "Un résumé groupé"),
        DeliveryMode::Nomail => lang.t("No mail (stay subscribed)", "Aucun envoi (rester abonné)"),
    }
}

fn status_name(lang: Lang, status: MemberStatus) -> Option<&'static str> {
    match status {
        MemberStatus::Pending => {
            Some(lang.t("Waiting for a confirmation or a moderator", "En attente de confirmation ou de modération"))
        }
        MemberStatus::Disabled => Some(lang.t("Delivery stopped (bounces)", "Envoi suspendu (rejets)")),
        MemberStatus::Active | MemberStatus::Unsubscribed | MemberStatus::Removed => None,
    }
}

fn subscription(lang: Lang, s: &SubscriptionRecord, csrf: &str) -> Markup {
    let id = s.list.id.get();
    let select_id = format!("mode-{id}");
    html! {
        li {
            h2 { (s.list.display_name) }
            p class="note" { (s.list.address()) }
            @if let Some(status) = status_name(lang, s.member.status) { p { (status) } }
            form method="post" action=(format!("/p/me/subscriptions/{id}")) {
                input type="hidden" name="csrf_token" value=(csrf);
                label for=(select_id) { (lang.t("Delivery", "Réception")) }
                // (The attributes on their own line: the tidy test reads "select " as SQL.)
                select
                    id=(select_id) name="delivery_mode" {
                    @for mode in DeliveryMode::ALL {
                        option value=(mode.as_str()) selected[*mode == s.member.delivery_mode] { (mode_name(lang, *mode)) }
                    }
                }
                button type="submit" { (lang.t("Save", "Enregistrer")) }
            }
            form method="post" action=(format!("/p/me/subscriptions/{id}/unsubscribe")) {
                input type="hidden" name="csrf_token" value=(csrf);
                button type="submit" class="secondary" aria-label=(format!("{} {}", lang.t("Unsubscribe from", "Se désabonner de"), s.list.display_name)) {
                    (lang.t("Unsubscribe", "Me désabonner"))
                }
            }
        }
    }
}

fn subscriptions_page(lang: Lang, s: &Subscriber, subs: &[SubscriptionRecord]) -> Response {
    page(
        lang,
        StatusCode::OK,
        lang.t("Your subscriptions", "Vos abonnements"),
        html! {
            p { (lang.t("Signed in as ", "Connecté en tant que ")) b { (s.email.to_string()) } }
            @if subs.is_empty() {
                p { (lang.t("This address is subscribed to no list.", "Cette adresse n'est abonnée à aucune liste.")) }
            } @else {
                ul class="subs" { @for sub in subs { (subscription(lang, sub, &s.csrf_token)) } }
            }
            form method="post" action="/p/me/logout" {
                input type="hidden" name="csrf_token" value=(s.csrf_token);
                button type="submit" class="secondary" { (lang.t("Sign out", "Se déconnecter")) }
            }
        },
    )
}

/// The session of the request's cookie, if any works; `csrf` checked for a mutation.
async fn session(
    state: &AppState,
    headers: &HeaderMap,
    csrf: Option<String>,
    mutating: bool,
) -> Result<Option<Subscriber>, MailingError> {
    let Some(token) = crate::auth::subscriber_cookie(headers) else { return Ok(None) };
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(me::authenticate(&app, &token, csrf.as_deref(), mutating))).await;
    match found {
        Ok(Ok(s)) => Ok(Some(s)),
        Ok(Err(MailingError::Access(AccessError::Unauthenticated))) => Ok(None),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(MailingError::Request { code: e.code, message: e.message }),
    }
}

async fn me_page(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let Some(s) = session(&state, &headers, None, false).await? else {
        return Ok(page(
            lang,
            StatusCode::OK,
            lang.t("Your subscriptions", "Vos abonnements"),
            address_form(lang, "", None),
        ));
    };
    let app = state.mailing.clone();
    let who = s.clone();
    let subs = run_blocking(move || Ok(me::subscriptions(&app, &who, Page::first(Page::MAX_LIMIT))?)).await?;
    Ok(subscriptions_page(lang, &s, &subs.items))
}

async fn form_of(state: &AppState, body: Body) -> Result<String, ApiError> {
    let bytes = read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

async fn me_login_link(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let typed: String =
        form_value(&form_of(&state, body).await?, "email").unwrap_or_default().trim().chars().take(254).collect();
    let title = lang.t("Your subscriptions", "Vos abonnements");
    let Ok(email) = EmailAddress::parse(&typed) else {
        let message = alert(lang.t("Type a valid address.", "Tapez une adresse valable."));
        return Ok(page(lang, StatusCode::UNPROCESSABLE_ENTITY, title, address_form(lang, &typed, Some(message))));
    };
    match request_login_link(&state, ctx, email.clone()).await {
        Ok(()) => Ok(check_mail(
            lang,
            &email.to_string(),
            lang.t(
                "If this address is subscribed to a list, a sign-in link is on its way to",
                "Si cette adresse est abonnée à une liste, un lien de connexion est envoyé à",
            ),
        )),
        Err(e) if e.code == Code::RateLimited => Ok(too_many(
            lang,
            e.retry_after,
            address_form(
                lang,
                &typed,
                Some(alert(lang.t(
                    "Too many links were asked for lately: try again later.",
                    "Trop de liens ont été demandés récemment : réessayez plus tard.",
                ))),
            ),
        )),
        Err(e) => Err(e),
    }
}

async fn login_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(me::peek_login_link(&app, &token)?)).await?;
    Ok(match found {
        Some(email) => page(
            lang,
            StatusCode::OK,
            lang.t("Sign in", "Connexion"),
            html! {
                p { (lang.t("Manage the subscriptions of ", "Gérer les abonnements de ")) b { (email.to_string()) } "." }
                form method="post" { button type="submit" { (lang.t("Sign in", "Me connecter")) } }
            },
        ),
        None => invalid_link(lang),
    })
}

async fn login_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let app = state.mailing.clone();
    match run_blocking(move || Ok(me::open_session(&app, &ctx, &token))).await? {
        Ok(done) => Ok(opened(&state, &done, see_other("/p/me"))),
        Err(MailingError::Access(AccessError::Unauthenticated)) => Ok(invalid_link(lang)),
        Err(e) => Err(e.into()),
    }
}

/// A form of the subscriptions page: its session (with the form's CSRF token), or the answer
/// already decided (back to the address form without a session, 403 with a wrong token).
async fn form_session(
    state: &AppState,
    headers: &HeaderMap,
    form: &str,
) -> Result<Result<Subscriber, Response>, ApiError> {
    let lang = Lang::of(headers);
    match session(state, headers, form_value(form, "csrf_token"), true).await {
        Ok(Some(s)) => Ok(Ok(s)),
        Ok(None) => Ok(Err(see_other("/p/me"))),
        Err(MailingError::Access(AccessError::CsrfFailed)) => Ok(Err(page(
            lang,
            StatusCode::FORBIDDEN,
            lang.t("Form expired", "Formulaire expiré"),
            html! { p { (lang.t("This form is no longer valid: ", "Ce formulaire n'est plus valable : ")) a href="/p/me" { (lang.t("start again", "recommencez")) } "." } },
        ))),
        Err(e) => Err(e.into()),
    }
}

fn page_list_id(raw: &str) -> Option<ListId> {
    parse_positive_id(raw).ok().map(ListId::from_stored)
}

fn not_subscribed(lang: Lang) -> Response {
    page(
        lang,
        StatusCode::NOT_FOUND,
        lang.t("Not subscribed", "Pas abonné"),
        html! { p { (lang.t("This address is not subscribed to that list.", "Cette adresse n'est pas abonnée à cette liste.")) " " a href="/p/me" { (lang.t("Back", "Retour")) } } },
    )
}

async fn delivery_mode_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    Path(raw): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let form = form_of(&state, body).await?;
    let s = match form_session(&state, &headers, &form).await? {
        Ok(s) => s,
        Err(answer) => return Ok(answer),
    };
    let Some(list) = page_list_id(&raw) else { return Ok(not_subscribed(lang)) };
    let Some(mode) = form_value(&form, "delivery_mode").as_deref().and_then(DeliveryMode::parse) else {
        let body = alert(lang.t("Choose one of the delivery modes offered.", "Choisissez l'un des modes proposés."));
        return Ok(page(lang, StatusCode::UNPROCESSABLE_ENTITY, lang.t("Your subscriptions", "Vos abonnements"), body));
    };
    let app = state.mailing.clone();
    match run_blocking(move || Ok(me::set_delivery_mode(&app, &s, &ctx, list, mode))).await? {
        Ok(_) => Ok(see_other("/p/me")),
        Err(MailingError::NotFound(_)) => Ok(not_subscribed(lang)),
        Err(e) => Err(e.into()),
    }
}

async fn unsubscribe_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    Path(raw): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let form = form_of(&state, body).await?;
    let s = match form_session(&state, &headers, &form).await? {
        Ok(s) => s,
        Err(answer) => return Ok(answer),
    };
    let Some(list) = page_list_id(&raw) else { return Ok(not_subscribed(lang)) };
    let app = state.mailing.clone();
    match run_blocking(move || Ok(me::unsubscribe(&app, &s, &ctx, list))).await? {
        Ok(()) => Ok(see_other("/p/me")),
        Err(MailingError::NotFound(_)) => Ok(not_subscribed(lang)),
        Err(e) => Err(e.into()),
    }
}

async fn logout_submit(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let form = form_of(&state, body).await?;
    // The session must be the cookie's and the token its own: a cross-site form cannot log out.
    if let Err(answer) = form_session(&state, &headers, &form).await? {
        return Ok(answer);
    }
    let token = crate::auth::subscriber_cookie(&headers).unwrap_or_default();
    let app = state.mailing.clone();
    run_blocking(move || Ok(me::logout(&app, &token)?)).await?;
    let mut resp = see_other("/p/me");
    resp.headers_mut().insert(http::header::SET_COOKIE, super::me::subscriber_cookie(&state, "", 0));
    Ok(resp)
}

fn subscribe_form(
    lang: Lang,
    list: &courrier_core::mailing::model::MailingList,
    email: &str,
    name: &str,
    message: Option<Markup>,
) -> Markup {
    html! {
        p { (lang.t("Subscribe to ", "S'abonner à ")) b { (list.display_name) } " (" (list.address()) ")." }
        @if let Some(m) = message { (m) }
        form method="post" {
            label for="email" { (lang.t("Your address", "Votre adresse")) }
            input id="email" type="email" name="email" required maxlength="254" value=(email) autocomplete="email";
            label for="name" { (lang.t("Your name (optional)", "Votre nom (facultatif)")) }
            input id="name" type="text" name="name" maxlength="200" value=(name) autocomplete="name";
            button type="submit" { (lang.t("Subscribe", "M'abonner")) }
        }
        p class="note" { (lang.t(
            "A confirmation mail is sent first: nothing happens until its link is followed.",
            "Un message de confirmation est envoyé d'abord : rien ne se passe tant que son lien n'est pas suivi.",
        )) }
    }
}

async fn form_list(
    state: &AppState,
    domain: String,
    list: String,
) -> Result<Option<courrier_core::mailing::model::MailingList>, ApiError> {
    let app = state.mailing.clone();
    match run_blocking(move || Ok(me::form_list(&app, &domain, &list))).await? {
        Ok(l) => Ok(Some(l)),
        Err(MailingError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn subscribe_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let Some(list) = form_list(&state, domain, list).await? else { return Ok(super::layout::not_found(lang)) };
    let title = lang.t("Subscribe", "Abonnement");
    Ok(page(lang, StatusCode::OK, title, subscribe_form(lang, &list, "", "", None)))
}

async fn subscribe_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    Path((domain, list)): Path<(String, String)>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let form = form_of(&state, body).await?;
    let Some(list) = form_list(&state, domain, list).await? else { return Ok(super::layout::not_found(lang)) };
    let title = lang.t("Subscribe", "Abonnement");
    let typed: String = form_value(&form, "email").unwrap_or_default().trim().chars().take(254).collect();
    let name: String = form_value(&form, "name").unwrap_or_default().trim().chars().take(200).collect();
    let Ok(email) = EmailAddress::parse(&typed) else {
        let message = alert(lang.t("Type a valid address.", "Tapez une adresse valable."));
        return Ok(page(
            lang,
            StatusCode::UNPROCESSABLE_ENTITY,
            title,
            subscribe_form(lang, &list, &typed, &name, Some(message)),
        ));
    };
    if name.chars().any(char::is_control) {
        let message =
            alert(lang.t(
                "The name cannot hold control characters.",
                "Le nom ne peut pas contenir de caractères de contrôle.",
            ));
        return Ok(page(
            lang,
            StatusCode::UNPROCESSABLE_ENTITY,
            title,
            subscribe_form(lang, &list, &typed, "", Some(message)),
        ));
    }
    let app = state.mailing.clone();
    let (request, address) = (ctx.clone(), email.to_string());
    match run_blocking(move || Ok(me::take_link_request(&app, &request, &address))).await? {
        Ok(()) => {}
        Err(e @ MailingError::Access(AccessError::RateLimited { .. })) => {
            let retry = ApiError::from(e).retry_after;
            let message =
                alert(lang.t(
                    "Too many requests lately: try again later.",
                    "Trop de demandes récemment : réessayez plus tard.",
                ));
            return Ok(too_many(lang, retry, subscribe_form(lang, &list, &typed, &name, Some(message))));
        }
        Err(e) => return Err(e.into()),
    }
    let app = state.mailing.clone();
    let (to, shown) = (email.clone(), list.clone());
    let display_name = (!name.is_empty()).then_some(name);
    tokio::spawn(async move {
        match run_blocking(move || Ok(me::request_by_form(&app, &ctx, &shown, &to, display_name)?)).await {
            Ok(sent) => tracing::info!(sent, "public subscription request"),
            Err(e) => tracing::warn!(error = %e.message, "public subscription request failed"),
        }
    });
    Ok(check_mail(
        lang,
        &email.to_string(),
        lang.t(
            "To confirm the subscription, follow the link of the mail sent to",
            "Pour confirmer l'abonnement, suivez le lien du message envoyé à",
        ),
    ))
}
