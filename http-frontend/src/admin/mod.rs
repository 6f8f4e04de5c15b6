//! The administration pages (`/admin/...`): server-rendered HTML in the one layout of the pages
//! (`mailing::layout`), for the administrators' session (`svc_session`, the API's session and
//! CSRF rules). Each page parses, makes the same core call as the API handler of the same
//! operation (never the API over HTTP), and renders; what a user sees and does is what core's
//! `authorize` lets it (the navigation only hides what would be refused anyway). GET shows, POST
//! acts and answers "see other" (Post/Redirect/Get). Every form carries the session's CSRF token
//! in a `csrf_token` field; a form without it is refused (403). Works without script: the served
//! script only refreshes a send's counts and asks before a destructive action.

mod access;
mod mailing;
mod queues;
mod service;

use crate::AppState;
use crate::auth::{Ctx, session_cookie};
use crate::blocking::run_blocking;
use crate::body::read_limited;
use crate::error::ApiError;
use crate::mailing::layout::{Frame, LANG_COOKIE, Lang, STYLE, alert, framed, page, see_other};
use crate::query::decode;
use crate::routes::{Access, Api, Param, ParamKind, Route, Success};
use crate::schema;
use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::on;
use courrier_core::access::principal::{self, RequestCtx};
use courrier_core::access::{AccessError, Credential, Principal, Role, sessions};
use courrier_core::kernel::secrets;
use courrier_core::mailing::dashboard;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use maud::{Markup, html};
use std::sync::Arc;

/// A form of the administration: small, except a send's text and HTML (the list's limit is at
/// most a few MiB; core checks it).
pub(crate) const FORM_LIMIT: usize = 4 * 1024 * 1024;
/// The CSV import's form: the contract's 25 MiB document and its few fields.
pub(crate) const IMPORT_FORM_LIMIT: usize = 26 * 1024 * 1024;
/// The cookie of the login form's token (a double submit: the form holds the same value), so
/// that another site cannot sign a browser in to an account of its choosing.
const LOGIN_COOKIE: &str = "svc_login";

pub(crate) const DOMAIN: &[Param] =
    &[Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" }];
pub(crate) const LIST: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part" },
];
pub(crate) const MEMBER: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part" },
    Param { name: "member", kind: ParamKind::Text, description: "the member's id" },
];
pub(crate) const SEND: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part" },
    Param { name: "send", kind: ParamKind::Text, description: "the send's id" },
];
/// Parsed by the handler, so that a bad id is the HTML 404 page, not the API's JSON 422.
pub(crate) const ID: &[Param] = &[Param { name: "id", kind: ParamKind::Text, description: "the numeric id" }];
const CODE: &[Param] = &[Param { name: "code", kind: ParamKind::Text, description: "en or fr" }];

/// A page route: HTML, in neither OpenAPI document; the handler authenticates (a page answers a
/// missing session with the login form, not a JSON 401).
macro_rules! admin_route {
    ($method:ident $path:literal, $op:literal, $summary:literal, $params:expr, $limit:expr, $handler:expr) => {
        $crate::routes::Route {
            method: http::Method::$method,
            path: $path,
            api: $crate::routes::Api::Page,
            operation_id: $op,
            summary: $summary,
            tag: "admin",
            access: $crate::routes::Access::Public,
            params: $params,
            query: &[],
            request: None,
            success: $crate::routes::Success::Raw("text/html", $crate::schema::STRING),
            body_limit: $limit,
            errors: &[403, 404, 409, 422],
            handler: |m| axum::routing::on(m, $handler),
        }
    };
}
pub(crate) use admin_route;

pub static ROUTES: &[Route] = &[
    Route {
        method: Method::GET,
        path: "/assets/courrier.css",
        api: Api::Page,
        operation_id: "stylesheet",
        summary: "The pages' stylesheet",
        tag: "pages",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Raw("text/css", schema::STRING),
        body_limit: 0,
        errors: &[],
        handler: |m| on(m, stylesheet),
    },
    Route {
        method: Method::GET,
        path: "/assets/admin.js",
        api: Api::Page,
        operation_id: "adminScript",
        summary: "The administration pages' script (live counts, confirmations): an enhancement only",
        tag: "pages",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Raw("text/javascript", schema::STRING),
        body_limit: 0,
        errors: &[],
        handler: |m| on(m, script),
    },
    admin_route!(GET "/admin", "adminRoot", "To the dashboard", &[], FORM_LIMIT, root),
    admin_route!(GET "/admin/", "adminDashboard", "The dashboard: counts, queue, sends in flight, held items", &[],
        FORM_LIMIT, dashboard_page),
    admin_route!(GET "/admin/login", "adminLoginPage", "The sign-in form", &[], FORM_LIMIT, login_page),
    admin_route!(POST "/admin/login", "adminLogin", "Sign in: the API's session (cookie svc_session)", &[],
        FORM_LIMIT, login_submit),
    admin_route!(POST "/admin/logout", "adminLogout", "Sign out", &[], FORM_LIMIT, logout_submit),
    admin_route!(GET "/admin/lang/{code}", "adminLanguage", "Choose the pages' language (kept in a cookie)", CODE,
        FORM_LIMIT, choose_language),
];

/// Every route of the administration pages.
pub fn routes() -> impl Iterator<Item = &'static Route> {
    ROUTES.iter().chain(mailing::ROUTES).chain(access::ROUTES).chain(service::ROUTES).chain(queues::ROUTES)
}

async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("admin.js"))
}

fn asset(media_type: &'static str, text: &'static str) -> Response {
    let mut resp = text.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    resp
}

// ---------------------------------------------------------------------------------------------
// The session of a page, and the answers a page gives when it cannot go on.

/// The signed-in administrator of a page: its principal (roles read fresh for this request),
/// the session's CSRF token for the page's forms, the language, the request's context.
pub(crate) struct Admin {
    pub p: Arc<Principal>,
    pub csrf: String,
    pub lang: Lang,
    pub ctx: RequestCtx,
}

impl Admin {
    pub fn t(&self, en: &'static str, fr: &'static str) -> &'static str {
        self.lang.t(en, fr)
    }

    /// The hidden field every form carries.
    pub fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf_token" value=(self.csrf); }
    }

    /// A page in the administration frame, navigation `at` marked current.
    pub fn page(&self, at: Section, title: &str, body: Markup) -> Response {
        self.page_status(StatusCode::OK, at, title, body)
    }

    pub fn page_status(&self, status: StatusCode, at: Section, title: &str, body: Markup) -> Response {
        framed(self.lang, status, title, Some(Frame { nav: nav(self, at) }), body)
    }

    /// A failed operation: its message on a page, with a link back to where the form was.
    pub fn failure(&self, e: ApiError, back: &str) -> Response {
        failure_page(self.lang, Some(self), e, back)
    }
}

/// The sections of the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Dashboard,
    Domains,
    Users,
    Keys,
    Webhooks,
    Audit,
    Ocr,
}

fn nav(a: &Admin, at: Section) -> Markup {
    let caps = a.p.capabilities();
    let mut items: Vec<(Section, &str, &str)> = vec![
        (Section::Dashboard, "/admin/", a.t("Dashboard", "Tableau de bord")),
        (Section::Domains, "/admin/domains", a.t("Domains and lists", "Domaines et listes")),
    ];
    if caps.manage_users {
        items.push((Section::Users, "/admin/users", a.t("Users", "Utilisateurs")));
    }
    items.push((Section::Keys, "/admin/apikeys", a.t("API keys", "Clés d'API")));
    // Webhooks are an administrator's or an owner's (a moderator's role manages nothing).
    if a.p.roles.iter().any(|r| !matches!(r, Role::Moderator(..))) {
        items.push((Section::Webhooks, "/admin/webhooks", a.t("Webhooks", "Webhooks")));
    }
    if a.p.is_site_admin() {
        items.push((Section::Audit, "/admin/audit", a.t("Audit log", "Journal d'audit")));
        items.push((Section::Ocr, "/admin/ocr", a.t("OCR service", "Service OCR")));
    }
    let who = a.p.user.as_ref().map(|u| u.email.to_string()).unwrap_or_default();
    let other = match a.lang {
        Lang::En => ("/admin/lang/fr", "Français", "fr"),
        Lang::Fr => ("/admin/lang/en", "English", "en"),
    };
    html! {
        nav aria-label=(a.t("Administration", "Administration")) {
            ul {
                @for (section, href, label) in &items {
                    li { a href=(href) aria-current=[(*section == at).then_some("page")] { (label) } }
                }
                li { a href=(other.0) lang=(other.2) { (other.1) } }
            }
        }
        form method="post" action="/admin/logout" {
            (a.csrf_field())
            span class="note" { (who) " " }
            button type="submit" class="secondary" { (a.t("Sign out", "Se déconnecter")) }
        }
    }
}

fn failure_page(lang: Lang, admin: Option<&Admin>, e: ApiError, back: &str) -> Response {
    let status = e.status();
    let title = match status.as_u16() {
        403 => lang.t("Not allowed", "Non autorisé"),
        404 => lang.t("Page not found", "Page introuvable"),
        409 => lang.t("Not possible now", "Impossible pour l'instant"),
        413 | 422 | 400 => lang.t("Not valid", "Non valable"),
        429 => lang.t("Too many requests", "Trop de demandes"),
        _ => lang.t("Something went wrong", "Une erreur s'est produite"),
    };
    let message = if status == StatusCode::NOT_FOUND {
        lang.t(
            "There is no such page here, or it is not yours to see.",
            "Il n'y a pas de telle page ici, ou elle ne vous est pas accessible.",
        )
        .to_owned()
    } else {
        e.message.clone()
    };
    let body = html! {
        (alert(&message))
        p { a href=(back) { (lang.t("Back", "Retour")) } }
    };
    let mut resp = match admin {
        Some(a) => a.page_status(status, Section::Dashboard, title, body),
        None => page(lang, status, title, body),
    };
    e.add_headers(resp.headers_mut());
    resp.headers_mut().remove(header::WWW_AUTHENTICATE);
    resp
}

/// Why a page could not open its session: to the sign-in form, or an answer already made.
fn to_login() -> Response {
    see_other("/admin/login")
}

/// Opens the page's session from the `svc_session` cookie: `csrf` is the form's token, checked
/// (by core) when `mutating`.
async fn open(state: &AppState, headers: &HeaderMap, csrf: Option<String>, mutating: bool) -> Result<Admin, Response> {
    let lang = Lang::of(headers);
    let Some(token) = session_cookie(headers) else { return Err(to_login()) };
    let app = state.access.clone();
    let credential = Credential::Session { token: token.clone(), csrf };
    match run_blocking(move || Ok(principal::authenticate(&app, &credential, mutating))).await {
        Ok(Ok(p)) if p.user.is_some() => {
            let ctx = RequestCtx {
                request_id: crate::envelope::request_id(),
                source: crate::server::PEER.try_with(|p| p.0.ip().to_string()).ok(),
            };
            Ok(Admin { p, csrf: principal::csrf_token_for(&token), lang, ctx })
        }
        Ok(Ok(_)) | Ok(Err(AccessError::Unauthenticated)) => Err(to_login()),
        Ok(Err(AccessError::CsrfFailed)) => Err(page(
            lang,
            StatusCode::FORBIDDEN,
            lang.t("Form expired", "Formulaire expiré"),
            html! {
                (alert(lang.t(
                    "This form is not valid (its security token is missing or belongs to another session): nothing was done.",
                    "Ce formulaire n'est pas valable (son jeton de sécurité manque ou appartient à une autre session) : rien n'a été fait.",
                )))
                p { a href="/admin/" { (lang.t("Start again", "Recommencer")) } }
            },
        )),
        Ok(Err(e)) => Err(failure_page(lang, None, e.into(), "/admin/")),
        Err(e) => Err(failure_page(lang, None, e, "/admin/")),
    }
}

/// A page shown by GET: the session, no CSRF token needed (a GET changes nothing).
impl FromRequestParts<AppState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        open(state, &parts.headers, None, false).await
    }
}

/// A posted form (`application/x-www-form-urlencoded`), read within [`FORM_LIMIT`].
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut pairs = Vec::new();
        for pair in text.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            pairs.push((decode(k)?, decode(v)?));
        }
        Ok(Self(pairs))
    }

    /// The field's value, trimmed; `None` when absent or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        self.raw(name).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
    }

    /// The field's value as typed (a message's text keeps its spaces).
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Every value of a repeated field (checkboxes).
    pub fn all(&self, name: &str) -> Vec<String> {
        self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect()
    }

    pub fn checked(&self, name: &str) -> bool {
        self.raw(name).is_some()
    }
}

/// A posted form and its session, the form's CSRF token checked by core (403 without it).
pub(crate) struct Posted(pub Admin, pub Form);

impl FromRequest<AppState> for Posted {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let lang = Lang::of(req.headers());
        let headers = req.headers().clone();
        let bytes = read_limited(req.into_body(), FORM_LIMIT, state.body_read_timeout)
            .await
            .map_err(|e| failure_page(lang, None, e, "/admin/"))?;
        let form = Form::parse(&String::from_utf8_lossy(&bytes)).map_err(|e| failure_page(lang, None, e, "/admin/"))?;
        let admin = open(state, &headers, form.get("csrf_token"), true).await?;
        Ok(Posted(admin, form))
    }
}

/// A path segment as the page's link wrote it (percent-encoded by [`seg`]).
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Previous and next links of a listing; `base` ends with `?` or `&`.
pub(crate) fn pager(lang: Lang, base: &str, offset: u64, limit: u64, total: u64) -> Markup {
    html! {
        nav aria-label=(lang.t("Pages", "Pages")) {
            p {
                (format!("{}–{} / {total}", (offset + 1).min(total), (offset + limit).min(total)))
                @if offset > 0 { " " a href=(format!("{base}offset={}", offset.saturating_sub(limit))) { (lang.t("Previous", "Précédents")) } }
                @if offset + limit < total { " " a href=(format!("{base}offset={}", offset + limit)) { (lang.t("Next", "Suivants")) } }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sign in, sign out, language.

async fn root() -> Response {
    see_other("/admin/")
}

fn login_cookie(state: &AppState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.access.settings.public_url.starts_with("https://") { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{LOGIN_COOKIE}={value}; Path=/admin/login; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .expect("the cookie is ASCII")
}

fn login_form(state: &AppState, lang: Lang, status: StatusCode, email: &str, message: Option<Markup>) -> Response {
    let token = secrets::random_token(24);
    let mut resp = page(
        lang,
        status,
        lang.t("Sign in to the administration", "Connexion à l'administration"),
        html! {
            @if let Some(m) = message { (m) }
            form method="post" action="/admin/login" {
                input type="hidden" name="csrf_token" value=(token);
                label for="email" { (lang.t("Address", "Adresse")) }
                input id="email" type="email" name="email" required maxlength="254" value=(email) autocomplete="username";
                label for="password" { (lang.t("Password", "Mot de passe")) }
                input id="password" type="password" name="password" required autocomplete="current-password";
                button type="submit" { (lang.t("Sign in", "Se connecter")) }
            }
            p { a href="/forgot-password" { (lang.t("Forgotten password?", "Mot de passe oublié ?")) } }
            p { @match lang {
                Lang::En => a href="/admin/lang/fr" lang="fr" { "Français" },
                Lang::Fr => a href="/admin/lang/en" lang="en" { "English" },
            } }
        },
    );
    resp.headers_mut().append(header::SET_COOKIE, login_cookie(state, &token, 3600));
    resp
}

async fn login_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let lang = Lang::of(&headers);
    // Signed in already: straight to the dashboard.
    if session_cookie(&headers).is_some() && open(&state, &headers, None, false).await.is_ok() {
        return see_other("/admin/");
    }
    login_form(&state, lang, StatusCode::OK, "", None)
}

fn cookie_value(headers: &HeaderMap, wanted: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The API's login (`sessions::login`: throttled, Argon2id, audited), its cookie set the same
/// way; the form's token must match its cookie.
async fn login_submit(State(state): State<AppState>, Ctx(ctx): Ctx, headers: HeaderMap, body: Body) -> Response {
    let lang = Lang::of(&headers);
    let form = match read_limited(body, FORM_LIMIT, state.body_read_timeout).await {
        Ok(bytes) => match Form::parse(&String::from_utf8_lossy(&bytes)) {
            Ok(f) => f,
            Err(e) => return failure_page(lang, None, e, "/admin/login"),
        },
        Err(e) => return failure_page(lang, None, e, "/admin/login"),
    };
    let email: String = form.get("email").unwrap_or_default().chars().take(254).collect();
    let expected = cookie_value(&headers, LOGIN_COOKIE).unwrap_or_default();
    let given = form.get("csrf_token").unwrap_or_default();
    if expected.is_empty() || !secrets::constant_time_eq(expected.as_bytes(), given.as_bytes()) {
        let message = alert(lang.t(
            "This form expired or did not come from this site: sign in again.",
            "Ce formulaire a expiré ou ne vient pas de ce site : connectez-vous à nouveau.",
        ));
        return login_form(&state, lang, StatusCode::FORBIDDEN, &email, Some(message));
    }
    let password = form.raw("password").unwrap_or_default().to_owned();
    let app = state.access.clone();
    let address = email.clone();
    match run_blocking(move || Ok(sessions::login(&app, &ctx, &address, &password))).await {
        Ok(Ok(done)) => {
            let max_age = done.expires_at.unix_secs() - state.access.clock.now().unix_secs();
            let mut resp = see_other("/admin/");
            let h = resp.headers_mut();
            h.append(header::SET_COOKIE, crate::access::session_cookie(&state, &done.token, max_age));
            h.append(header::SET_COOKIE, login_cookie(&state, "", 0));
            resp
        }
        Ok(Err(AccessError::BadLogin)) => {
            let message = alert(lang.t("Wrong address or password.", "Adresse ou mot de passe incorrect."));
            login_form(&state, lang, StatusCode::UNAUTHORIZED, &email, Some(message))
        }
        Ok(Err(e @ AccessError::RateLimited { .. })) => {
            let e = ApiError::from(e);
            let message = alert(lang.t(
                "Too many failed attempts lately: try again later.",
                "Trop d'essais manqués récemment : réessayez plus tard.",
            ));
            let mut resp = login_form(&state, lang, StatusCode::TOO_MANY_REQUESTS, &email, Some(message));
            e.add_headers(resp.headers_mut());
            resp
        }
        Ok(Err(e)) => failure_page(lang, None, e.into(), "/admin/login"),
        Err(e) => failure_page(lang, None, e, "/admin/login"),
    }
}

/// Ends the session (the form's token checked first: another site cannot sign one out).
async fn logout_submit(State(state): State<AppState>, headers: HeaderMap, Posted(a, _): Posted) -> Response {
    let token = session_cookie(&headers).unwrap_or_default();
    let app = state.access.clone();
    let ctx = a.ctx.clone();
    if let Err(e) = run_blocking(move || Ok(sessions::logout(&app, &ctx, &token)?)).await {
        return a.failure(e, "/admin/");
    }
    let mut resp = see_other("/admin/login");
    resp.headers_mut().insert(header::SET_COOKIE, crate::access::session_cookie(&state, "", 0));
    resp
}

/// Keeps the reader's language for a year; back to the dashboard (or the sign-in form).
async fn choose_language(Path(code): Path<String>, headers: HeaderMap) -> Response {
    let Some(lang) = Lang::parse(&code) else {
        return crate::mailing::layout::not_found(Lang::of(&headers));
    };
    let mut resp = see_other("/admin/");
    let cookie = format!("{LANG_COOKIE}={}; Path=/; SameSite=Lax; Max-Age=31536000", lang.code());
    resp.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("ASCII"));
    resp
}

// ---------------------------------------------------------------------------------------------
// The dashboard.

/// The roles of the signed-in user, in words.
pub(crate) fn role_text(lang: Lang, r: &Role) -> String {
    match r {
        Role::SiteAdmin => lang.t("site administrator", "administrateur du site").to_owned(),
        Role::DomainAdmin(d) => format!("{} {d}", lang.t("administrator of", "administrateur de")),
        Role::Owner(d, l) => format!("{} {l}@{d}", lang.t("owner of", "propriétaire de")),
        Role::Moderator(d, l) => format!("{} {l}@{d}", lang.t("moderator of", "modérateur de")),
    }
}

async fn dashboard_page(State(state): State<AppState>, a: Admin) -> Response {
    let (app, p) = (state.mailing.clone(), a.p.clone());
    let found = run_blocking(move || Ok((dashboard::dashboard(&app, &p)?, dashboard::queue(&app, &p)?))).await;
    let (d, q) = match found {
        Ok(v) => v,
        Err(e) => return a.failure(e, "/admin/"),
    };
    let m = &d.members;
    let counts: [(&str, u64); 6] = [
        (a.t("Domains", "Domaines"), d.domains),
        (a.t("Lists", "Listes"), d.lists),
        (a.t("Sends in flight", "Envois en cours"), d.sends_in_flight),
        (a.t("Held messages", "Messages retenus"), d.held_messages),
        (a.t("Subscriptions waiting", "Abonnements en attente"), d.pending_subscriptions),
        (a.t("Copies in the outgoing queue", "Copies dans la file d'envoi"), q.depth),
    ];
    let members: [(&str, u64); 5] = [
        (a.t("active", "actifs"), m.active),
        (a.t("pending", "en attente"), m.pending),
        (a.t("disabled (bounces)", "suspendus (rejets)"), m.disabled),
        (a.t("unsubscribed", "désabonnés"), m.unsubscribed),
        (a.t("removed", "retirés"), m.removed),
    ];
    let roles: Vec<String> = a.p.roles.iter().map(|r| role_text(a.lang, r)).collect();
    a.page(
        Section::Dashboard,
        a.t("Dashboard", "Tableau de bord"),
        html! {
            p { (a.t("Signed in as ", "Connecté en tant que ")) b { (a.p.user.as_ref().map(|u| u.email.to_string()).unwrap_or_default()) }
                @if !roles.is_empty() { " (" (roles.join(", ")) ")" } }
            table {
                caption class="note" { (a.t("What your roles let you see", "Ce que vos rôles vous laissent voir")) }
                tbody {
                    @for (label, n) in counts { tr { th scope="row" { (label) } td { (n) } } }
                }
            }
            h2 { (a.t("Members", "Membres")) }
            table {
                tbody { @for (label, n) in members { tr { th scope="row" { (label) } td { (n) } } } }
            }
            h2 { (a.t("Outgoing queue", "File d'envoi")) }
            table {
                tbody {
                    @for (state_name, n) in &q.by_state { tr { th scope="row" { (state_name) } td { (n) } } }
                    tr { th scope="row" { (a.t("oldest waiting since", "plus ancienne en attente depuis")) }
                         td { (q.oldest_queued_at.map(|t| t.to_rfc3339()).unwrap_or_else(|| "—".into())) } }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_read_as_browsers_send_it() {
        let f = Form::parse("csrf_token=abc&email=ann%40example.org&name=Ann+Lee&perm=read&perm=send&blank=+").unwrap();
        assert_eq!(f.get("email").as_deref(), Some("ann@example.org"));
        assert_eq!(f.get("name").as_deref(), Some("Ann Lee"));
        assert_eq!(f.all("perm"), ["read", "send"]);
        assert_eq!(f.get("blank"), None);
        assert!(f.checked("blank") && !f.checked("absent"));
        assert!(Form::parse("a=%zz").is_err());
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(seg("news"), "news");
        assert_eq!(seg("a b/c@d"), "a%20b%2Fc%40d");
    }
}
