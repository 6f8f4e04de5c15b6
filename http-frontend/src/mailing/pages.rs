//! Pages for people (`/p/...`), linked from mails: small HTML forms over the same core calls.

use super::layout::{Lang, alert, invalid_link, note, page};
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
use axum::response::Response;
use axum::routing::on;
use courrier_core::access::{AccessError, users};
use courrier_core::mailing::{bounces, delivery, subscriptions};
use http::{HeaderMap, Method, StatusCode};
use maud::{Markup, html};

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
        handler: |m| on(m, password_form_page),
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
        path: "/p/reenable/{token}",
        api: Api::Page,
        operation_id: "reenablePage",
        summary: "What a re-enable link (mailed when bounces disabled a member) would do, with a button",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, reenable_form),
    },
    Route {
        method: Method::POST,
        path: "/p/reenable/{token}",
        api: Api::Page,
        operation_id: "reenableSubmit",
        summary: "Re-enable a member disabled by bounces through its link (score back to 0)",
        tag: "pages",
        access: Access::Public,
        params: TOKEN,
        query: &[],
        request: None,
        success: Success::Raw("text/html", schema::STRING),
        body_limit: FORM_LIMIT,
        errors: &[404],
        handler: |m| on(m, reenable_submit),
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

fn password_form(lang: Lang, email: &str, error: Option<&str>) -> Markup {
    html! {
        p {
            (lang.t("Choose the password of ", "Choisissez le mot de passe de ")) b { (email) }
            (lang.t(" (at least 12 characters).", " (12 caractères au moins)."))
        }
        @if let Some(e) = error { (alert(e)) }
        form method="post" {
            label for="password" { (lang.t("Password", "Mot de passe")) }
            input id="password" type="password" name="password" required minlength="12" autocomplete="new-password";
            label for="password_confirmation" { (lang.t("Again", "Encore une fois")) }
            input id="password_confirmation" type="password" name="password_confirmation" required minlength="12" autocomplete="new-password";
            button type="submit" { (lang.t("Set the password", "Enregistrer le mot de passe")) }
        }
    }
}

async fn password_form_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let app = state.access.clone();
    let found = run_blocking(move || Ok(users::password_token_user(&app, &token))).await?;
    let title = lang.t("Set your password", "Choisissez votre mot de passe");
    Ok(match found {
        Ok(user) => page(lang, StatusCode::OK, title, password_form(lang, &user.email.to_string(), None)),
        Err(AccessError::NotFound(_)) => invalid_link(lang),
        Err(e) => return Err(e.into()),
    })
}

async fn password_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
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
        Err(AccessError::NotFound(_)) => return Ok(invalid_link(lang)),
        Err(e) => return Err(e.into()),
    };
    let email = user.email.to_string();
    let title = lang.t("Set your password", "Choisissez votre mot de passe");
    let (Some(password), Some(confirmation)) = (password, confirmation) else {
        let form = password_form(lang, &email, Some(lang.t("Fill in both fields.", "Remplissez les deux champs.")));
        return Ok(page(lang, StatusCode::BAD_REQUEST, title, form));
    };
    if password != confirmation {
        let form =
            password_form(lang, &email, Some(lang.t("The two passwords differ.", "Les deux mots de passe diffèrent.")));
        return Ok(page(lang, StatusCode::UNPROCESSABLE_ENTITY, title, form));
    }
    let app = state.access.clone();
    Ok(match run_blocking(move || Ok(users::set_password_with_token(&app, &ctx, &token, &password))).await? {
        Ok(_) => page(
            lang,
            StatusCode::OK,
            lang.t("Password set", "Mot de passe enregistré"),
            html! { p { (lang.t("Your password is set. You can sign in now.", "Votre mot de passe est enregistré. Vous pouvez vous connecter.")) } },
        ),
        Err(AccessError::NotFound(_)) => invalid_link(lang),
        Err(AccessError::Invalid(why)) => {
            page(lang, StatusCode::UNPROCESSABLE_ENTITY, title, password_form(lang, &email, Some(&why)))
        }
        Err(e) => return Err(e.into()),
    })
}

async fn confirm_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(subscriptions::peek(&app, &token)?)).await?;
    Ok(match found {
        Ok(p) => page(
            lang,
            StatusCode::OK,
            lang.t("Confirm your subscription", "Confirmez votre abonnement"),
            html! {
                p {
                    (lang.t("Subscribe ", "Abonner ")) b { (p.email.to_string()) }
                    (lang.t(" to ", " à ")) b { (p.list_display_name) } " (" (p.list_address) ")?"
                }
                form method="post" {
                    button type="submit" { (lang.t("Confirm my subscription", "Confirmer mon abonnement")) }
                }
                p class="note" { (lang.t(
                    "If you did not ask for this, close this page: nothing happens without the button.",
                    "Si vous n'avez rien demandé, fermez cette page : rien ne se passe sans le bouton.",
                )) }
            },
        ),
        Err(subscriptions::LinkUnusable) => invalid_link(lang),
    })
}

async fn confirm_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    // The form has no fields; its body is read (bounded) only so the connection stays usable.
    read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let app = state.mailing.clone();
    let done = run_blocking(move || Ok(subscriptions::confirm(&app, &token, ctx.source)?)).await?;
    Ok(match done {
        Ok(p) if p.now_active => page(
            lang,
            StatusCode::OK,
            lang.t("Subscription confirmed", "Abonnement confirmé"),
            html! { p {
                b { (p.email.to_string()) } (lang.t(" is now subscribed to ", " est maintenant abonné à "))
                b { (p.list_display_name) } " (" (p.list_address) ")."
            } },
        ),
        Ok(p) => page(
            lang,
            StatusCode::OK,
            lang.t("Address confirmed", "Adresse confirmée"),
            html! { p {
                b { (p.email.to_string()) } (lang.t(" is confirmed; a moderator of ", " est confirmée ; un modérateur de "))
                b { (p.list_display_name) } " (" (p.list_address) ")"
                (lang.t(" will now decide on the subscription.", " va maintenant décider de l'abonnement."))
            } },
        ),
        Err(subscriptions::LinkUnusable) => invalid_link(lang),
    })
}

async fn unsubscribe_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(delivery::unsubscribe_peek(&app, &token)?)).await?;
    Ok(match found {
        Some(s) => page(
            lang,
            StatusCode::OK,
            lang.t("Unsubscribe", "Se désabonner"),
            html! {
                p {
                    (lang.t("Stop sending ", "Ne plus envoyer ")) b { (s.list_address) }
                    (lang.t(" to ", " à ")) b { (s.email) } "?"
                }
                form method="post" { button type="submit" { (lang.t("Unsubscribe", "Me désabonner")) } }
            },
        ),
        None => invalid_link(lang),
    })
}

async fn unsubscribe_submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    // The body is the page's empty form or RFC 8058's `List-Unsubscribe=One-Click`: either
    // unsubscribes; it is read (bounded) so the connection stays usable.
    read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let app = state.mailing.clone();
    let done = run_blocking(move || Ok(delivery::unsubscribe(&app, &token)?)).await?;
    Ok(match done {
        Some(s) => page(
            lang,
            StatusCode::OK,
            lang.t("Unsubscribed", "Désabonné"),
            html! { p {
                b { (s.email) } (lang.t(" will receive nothing more from ", " ne recevra plus rien de ")) b { (s.list_address) } "."
            } },
        ),
        None => invalid_link(lang),
    })
}

async fn reenable_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(bounces::reenable_peek(&app, &token)?)).await?;
    Ok(match found {
        Some(r) => page(
            lang,
            StatusCode::OK,
            lang.t("Receive the list again", "Recevoir à nouveau la liste"),
            html! {
                p {
                    (lang.t("Mail from ", "Le courrier de ")) b { (r.list_address) }
                    (lang.t(" to ", " vers ")) b { (r.email) }
                    (lang.t(
                        " was returned as undeliverable, so the list stopped sending it. Does the address work again?",
                        " a été renvoyé comme impossible à distribuer : la liste a cessé de l'envoyer. L'adresse fonctionne-t-elle à nouveau ?",
                    ))
                }
                form method="post" { button type="submit" { (lang.t("Send me the list again", "Renvoyez-moi la liste")) } }
            },
        ),
        None => invalid_link(lang),
    })
}

async fn reenable_submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    // The form has no fields; its body is read (bounded) only so the connection stays usable.
    read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let app = state.mailing.clone();
    let done = run_blocking(move || Ok(bounces::reenable(&app, &token)?)).await?;
    Ok(match done {
        Some(r) => page(
            lang,
            StatusCode::OK,
            lang.t("Subscription resumed", "Abonnement repris"),
            html! { p {
                b { (r.email) } (lang.t(" receives ", " reçoit à nouveau ")) b { (r.list_address) }
                (lang.t(" again.", "."))
            } },
        ),
        None => invalid_link(lang),
    })
}

/// The value of `name` in an `a=1&b=2` text (a query or a form); a bad escape reads as absent.
pub(crate) fn form_value(text: &str, name: &str) -> Option<String> {
    text.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k).ok()? == name).then(|| decode(v).ok()).flatten()
    })
}

fn forgot_page(lang: Lang, status: StatusCode, email: &str, message: Option<&str>) -> Response {
    page(
        lang,
        status,
        lang.t("Forgotten password", "Mot de passe oublié"),
        html! {
            @if let Some(m) = message { (note(m)) }
            p { (lang.t(
                "Type the address of your account: a link to sign in and choose a new password is mailed to it.",
                "Tapez l'adresse de votre compte : un lien pour vous connecter et choisir un nouveau mot de passe y sera envoyé.",
            )) }
            form method="post" action="/forgot-password" {
                label for="email" { (lang.t("Address", "Adresse")) }
                input id="email" type="email" name="email" required maxlength="254" value=(email) autocomplete="email";
                button type="submit" { (lang.t("Mail me a sign-in link", "M'envoyer un lien de connexion")) }
            }
        },
    )
}

async fn forgot_form(headers: HeaderMap, uri: http::Uri) -> Response {
    let email = uri.query().and_then(|q| form_value(q, "email")).unwrap_or_default();
    forgot_page(Lang::of(&headers), StatusCode::OK, email.trim(), None)
}

/// Counts the request against the address and the source (429 past the limits), answers the same
/// page whatever the address, and looks the account up and mails the link after answering, so
/// that neither the page nor its timing tells whether the address has an account.
async fn forgot_submit(
    State(state): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let lang = Lang::of(&headers);
    let bytes = read_limited(body, FORM_LIMIT, state.body_read_timeout).await?;
    let email = form_value(&String::from_utf8_lossy(&bytes), "email").unwrap_or_default();
    let email: String = email.trim().chars().take(254).collect();
    if email.is_empty() {
        return Ok(forgot_page(
            lang,
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
            Some(lang.t("Type an address.", "Tapez une adresse.")),
        ));
    }
    let app = state.access.clone();
    let (address, request) = (email.clone(), ctx.clone());
    match run_blocking(move || Ok(users::take_password_reset(&app, &request, &address))).await? {
        Ok(()) => {}
        Err(AccessError::RateLimited { retry_after }) => {
            let mut resp = forgot_page(
                lang,
                StatusCode::TOO_MANY_REQUESTS,
                &email,
                Some(lang.t(
                    "Too many links were asked for lately: try again later.",
                    "Trop de liens ont été demandés récemment : réessayez plus tard.",
                )),
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
        lang,
        StatusCode::OK,
        lang.t("Check your mail", "Consultez votre messagerie"),
        html! { p {
            (lang.t("If ", "Si ")) b { (email) }
            (lang.t(
                " is the address of an account, a sign-in link is on its way to it. It works once, for one hour.",
                " est l'adresse d'un compte, un lien de connexion y est envoyé. Il sert une fois, pendant une heure.",
            ))
        } },
    ))
}
