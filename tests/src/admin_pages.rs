//! The administration pages over plain HTTP, as a browser's requests reach them (redirects not
//! followed, cookies sent by hand): the sign-in form opens the API's own session, every form is
//! refused without its CSRF token, a revoked role or a disabled account is effective on the very
//! next page, unknown pages are the HTML 404 page, and every page carries a strict policy. The
//! walk in a real browser is `admin_browser.rs`.

use crate::access::{PASSWORD, call, make_user};
use courrier_core::access::model::{Role, UserStatus};
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Principal, roles, users};
use courrier_core::kernel::{DomainName, ListName};
use courrier_tests::harness::TestApp;
use std::time::Duration;

/// An answer: status, headers, body.
pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) headers: ureq::http::HeaderMap,
    pub(crate) body: String,
}

impl Page {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `name=value` of a `Set-Cookie` for `name`.
    fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").to_owned())
            .find(|c| c.starts_with(&format!("{name}=")))
    }

    /// The value of the first hidden `csrf_token` field.
    pub(crate) fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf_token\" value=\"").expect("a form with a CSRF token") + 25;
        self.body[at..at + self.body[at..].find('"').unwrap()].to_owned()
    }
}

/// A browser's requests without the browser: no redirect followed, the cookie sent by hand.
pub(crate) struct Pages {
    base: String,
    agent: ureq::Agent,
    pub(crate) cookie: String,
}

impl Pages {
    pub(crate) fn new(app: &TestApp) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(60)))
            .max_idle_age(courrier_tests::harness::CLIENT_IDLE_AGE)
            .build()
            .into();
        Self { base: format!("http://{}", app.addr), agent, cookie: String::new() }
    }

    pub(crate) fn request(&self, method: &str, path: &str, form: Option<&str>) -> Page {
        let mut req = ureq::http::Request::builder().method(method).uri(format!("{}{path}", self.base));
        if !self.cookie.is_empty() {
            req = req.header("cookie", &self.cookie);
        }
        let resp = match form {
            Some(f) => self.agent.run(
                req.header("content-type", "application/x-www-form-urlencoded").body(f.as_bytes().to_vec()).unwrap(),
            ),
            None => self.agent.run(req.body(()).unwrap()),
        };
        let mut resp = resp.expect("request failed");
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        Page { status: resp.status().as_u16(), headers: resp.headers().clone(), body }
    }

    pub(crate) fn get(&self, path: &str) -> Page {
        self.request("GET", path, None)
    }

    pub(crate) fn post(&self, path: &str, form: &str) -> Page {
        self.request("POST", path, Some(form))
    }

    /// Signs in through the form; the session cookie is kept for the next requests.
    pub(crate) fn sign_in(&mut self, address: &str) {
        self.cookie.clear();
        let form = self.get("/admin/login");
        assert_eq!(form.status, 200, "{}", form.body);
        self.cookie = form.cookie("svc_login").expect("the sign-in form's cookie");
        let body = format!("csrf_token={}&email={}&password={}", form.csrf(), enc(address), enc(PASSWORD));
        let done = self.post("/admin/login", &body);
        assert_eq!((done.status, done.header("location")), (303, Some("/admin/")), "{}", done.body);
        self.cookie = done.cookie("svc_session").expect("the session cookie");
    }
}

pub(crate) fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn domain(s: &str) -> DomainName {
    DomainName::parse(s).unwrap()
}

fn list(s: &str) -> ListName {
    ListName::parse(s).unwrap()
}

#[test]
fn an_admin_page_without_a_session_leads_to_the_sign_in_form() {
    let app = TestApp::spawn();
    let pages = Pages::new(&app);
    for path in ["/admin/", "/admin/domains", "/admin/users", "/admin/domains/example.org/lists/news/members"] {
        let p = pages.get(path);
        assert_eq!((p.status, p.header("location")), (303, Some("/admin/login")), "{path}");
    }
    let form = pages.get("/admin/login");
    assert_eq!(form.status, 200);
    assert!(form.body.contains("type=\"password\"") && form.body.contains("name=\"csrf_token\""), "{}", form.body);
}

#[test]
fn the_sign_in_form_opens_the_same_session_as_the_api() {
    let app = TestApp::spawn();
    make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let mut pages = Pages::new(&app);
    pages.sign_in("admin@example.org");
    // The page's session is the API's: the same cookie authenticates GET /api/v1/auth/session.
    let api = call(&app, "GET", "/api/v1/auth/session", &[("cookie", pages.cookie.clone())], None);
    assert_eq!((api.status, api.json()["data"]["via"].as_str()), (200, Some("session")), "{}", api.body);
    assert!(pages.get("/admin/").body.contains("admin@example.org"));
    // And the API's login cookie opens the pages.
    let login = crate::access::login(&app, "admin@example.org");
    let mut other = Pages::new(&app);
    other.cookie = login.cookie;
    assert_eq!(other.get("/admin/domains").status, 200);
    // Signing out ends the session for the API too.
    let out = pages.post("/admin/logout", &format!("csrf_token={}", pages.get("/admin/").csrf()));
    assert_eq!((out.status, out.header("location")), (303, Some("/admin/login")));
    assert_eq!(call(&app, "GET", "/api/v1/auth/session", &[("cookie", pages.cookie.clone())], None).status, 401);
}

#[test]
fn a_wrong_password_or_a_sign_in_form_from_elsewhere_opens_nothing() {
    let app = TestApp::spawn();
    make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let mut pages = Pages::new(&app);
    let form = pages.get("/admin/login");
    pages.cookie = form.cookie("svc_login").unwrap();
    let wrong =
        pages.post("/admin/login", &format!("csrf_token={}&email=admin%40example.org&password=nope", form.csrf()));
    assert_eq!(wrong.status, 401);
    assert!(wrong.cookie("svc_session").is_none() && wrong.body.contains("role=\"alert\""), "{}", wrong.body);
    // A form posted from another site has no token of this browser's: refused, right password or not.
    pages.cookie.clear();
    let body = format!("csrf_token={}&email=admin%40example.org&password={}", form.csrf(), enc(PASSWORD));
    let forged = pages.post("/admin/login", &body);
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.cookie("svc_session").is_none());
}

#[test]
fn an_admin_form_posted_without_its_csrf_token_is_refused() {
    let app = TestApp::spawn();
    make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_user(&app.core, "other@example.org", &[Role::SiteAdmin]);
    let mut pages = Pages::new(&app);
    pages.sign_in("admin@example.org");
    let mut other = Pages::new(&app);
    other.sign_in("other@example.org");
    let foreign = other.get("/admin/").csrf();
    for token in [String::new(), "0".repeat(64), foreign] {
        let p = pages.post("/admin/domains", &format!("csrf_token={token}&name=example.org"));
        assert_eq!(p.status, 403, "{}", p.body);
        assert!(p.body.contains("role=\"alert\"") && p.header("content-type").unwrap().starts_with("text/html"));
    }
    let p = pages.post("/admin/domains", "name=example.org");
    assert_eq!(p.status, 403);
    assert!(!pages.get("/admin/domains").body.contains("href=\"/admin/domains/example.org\""), "nothing was created");
    // With its token, the same form creates the domain.
    let token = pages.get("/admin/domains").csrf();
    let p = pages.post("/admin/domains", &format!("csrf_token={token}&name=example.org"));
    assert_eq!((p.status, p.header("location")), (303, Some("/admin/domains/example.org")), "{}", p.body);
    // Sign-out is a form too: without the token it signs no one out.
    assert_eq!(pages.post("/admin/logout", "").status, 403);
    assert_eq!(pages.get("/admin/").status, 200);
}

#[test]
fn a_revoked_role_or_a_disabled_account_is_effective_on_the_next_page() {
    let app = TestApp::spawn();
    let (d, l) = (domain("example.org"), list("news"));
    let owner = make_user(&app.core, "owner@example.org", &[Role::Owner(d.clone(), l.clone())]);
    let mut pages = Pages::new(&app);
    pages.sign_in("owner@example.org");
    let path = "/admin/domains/example.org/lists/news";
    let page = pages.get(path);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("name=\"posting_policy\""), "an owner sees the list's policies");
    let (op, ctx) = (Principal::operator(), RequestCtx::cli());
    roles::revoke(&app.core.access, &op, &ctx, owner.id, Role::Owner(d.clone(), l.clone())).unwrap();
    let gone = pages.get(path);
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert!(gone.header("content-type").unwrap().starts_with("text/html"));
    roles::grant(&app.core.access, &op, &ctx, owner.id, Role::Owner(d, l)).unwrap();
    assert_eq!(pages.get(path).status, 200);
    let patch = users::UserPatch {
        status: Some(UserStatus::Disabled),
        firstname: None,
        name: None,
        mobile: None,
        language_code_id: None,
    };
    users::update(&app.core.access, &op, &ctx, owner.id, patch).unwrap();
    let out = pages.get(path);
    assert_eq!((out.status, out.header("location")), (303, Some("/admin/login")));
}

#[test]
fn unknown_admin_pages_answer_the_html_404_page() {
    let app = TestApp::spawn();
    make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let mut pages = Pages::new(&app);
    for path in ["/admin/nothing", "/admin/domains/x/y/z/w/v/u"] {
        let p = pages.get(path);
        assert_eq!(p.status, 404, "{path}");
        assert!(p.header("content-type").unwrap().starts_with("text/html") && p.body.contains("<h1>"), "{path}");
    }
    // A method a page does not take: refused in HTML too.
    let put = pages.request("PUT", "/admin/domains", Some(""));
    assert_eq!(put.status, 405);
    assert!(put.header("content-type").unwrap().starts_with("text/html"), "{}", put.body);
    pages.sign_in("admin@example.org");
    for path in [
        "/admin/domains/nowhere.org",
        "/admin/domains/not%20a%20name",
        "/admin/domains/example.org/lists/news",
        "/admin/users/abc",
        "/admin/users/999",
        "/admin/lang/de",
    ] {
        let p = pages.get(path);
        assert_eq!(p.status, 404, "{path}: {}", p.body);
        assert!(p.header("content-type").unwrap().starts_with("text/html"), "{path}");
    }
}

#[test]
fn admin_pages_carry_a_strict_policy_refuse_framing_and_inline_no_script() {
    let app = TestApp::spawn();
    make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let mut pages = Pages::new(&app);
    let login = pages.get("/admin/login");
    pages.sign_in("admin@example.org");
    for path in ["/admin/login", "/admin/", "/admin/domains", "/admin/users", "/admin/apikeys", "/admin/audit"] {
        // (Signed in, the sign-in form is a redirection: the form is checked as a stranger saw it.)
        let p = if path == "/admin/login" {
            Page { status: login.status, headers: login.headers.clone(), body: login.body.clone() }
        } else {
            pages.get(path)
        };
        let csp = p.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval") && !csp.contains("http"),
            "{path}: {csp}"
        );
        assert_eq!(p.header("x-frame-options"), Some("DENY"), "{path}");
        // Scripts only by their source, from the installation itself; no handler attribute.
        for (at, _) in p.body.match_indices("<script") {
            let tag = &p.body[at..at + p.body[at..].find('>').unwrap()];
            assert!(
                tag.contains("src=\"/assets/") && p.body[at..].starts_with(&format!("{tag}></script>")),
                "{path}: {tag}"
            );
        }
        assert!(
            !p.body.contains(" onclick=") && !p.body.contains(" onsubmit=") && !p.body.contains("<style"),
            "{path}"
        );
    }
    for asset in ["/assets/courrier.css", "/assets/admin.js"] {
        assert_eq!(pages.get(asset).status, 200, "{asset}");
    }
}

#[test]
fn the_pages_language_follows_accept_language_or_the_choice_kept_in_a_cookie() {
    let app = TestApp::spawn();
    let pages = Pages::new(&app);
    let fr = call(&app, "GET", "/admin/login", &[("accept-language", "fr-FR,fr;q=0.9".into())], None);
    assert!(fr.body.contains("<html lang=\"fr\">") && fr.body.contains("Mot de passe"), "{}", fr.body);
    let chosen = pages.get("/admin/lang/fr");
    assert_eq!(chosen.status, 303);
    let cookie = chosen.cookie("courrier_lang").unwrap();
    assert_eq!(cookie, "courrier_lang=fr");
    let page = call(&app, "GET", "/admin/login", &[("accept-language", "en".into()), ("cookie", cookie)], None);
    assert!(page.body.contains("<html lang=\"fr\">"), "{}", page.body);
}
