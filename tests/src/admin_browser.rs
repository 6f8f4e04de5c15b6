//! The administration pages in a real headless Chromium (`courrier_tests::browser`), against the
//! real server, real SQLite and a real SMTP sink. A site administrator signs in and does its work
//! with the forms: a domain and its DKIM record, the DNS check, a list and its policies, members
//! (add, find, import a CSV), a send whose counts move on the page, an account and its roles, an
//! API key used at once, the audit log; then each other role (domain admin, owner, moderator) sees
//! what it may and nothing more. Every page is checked as it shows: its `lang` and `<title>`, no
//! horizontal scrolling and (JavaScript on) no serious or critical axe-core violation; a
//! screenshot of each is kept under the target directory (`admin-screenshots/`). The walks run on
//! a desktop in English with JavaScript on, on a phone in French, and with JavaScript off.

use crate::access::{PASSWORD, bearer, call, make_key, make_list, make_user};
use crate::admin_pages::Pages;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::{DomainName, ListName};
use courrier_core::mailing::inbound;
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::browser::{Browser, BrowserOptions};
use courrier_tests::harness::{SmtpSink, TestApp, workspace_root};
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Walk {
    app: TestApp,
    /// A key of the site administrator's, for the OCR routes.
    key: String,
    sink: SmtpSink,
    browser: Browser,
    options: BrowserOptions,
    /// The screenshots' names start with it.
    run: &'static str,
    checked: Vec<String>,
}

fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    target.join("admin-screenshots")
}

impl Walk {
    fn start(run: &'static str, options: BrowserOptions) -> Self {
        let sink = SmtpSink::start();
        let app = TestApp::spawn_with(&[
            ("COURRIER_SMTP_URL", &sink.url()),
            ("COURRIER_MAIL_FROM", "lists@example.org"),
            // No DNS server answers there: the check's verdicts say what to fix, at once.
            ("COURRIER_DNS_SERVER", "127.0.0.1:9"),
            // The webhook's receiver is on this machine (and refuses: the ping's error shows).
            ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ]);
        let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
        let key = make_key(&app.core, &admin, KeyScope::User, &[Perm::Read], None);
        let browser = Browser::start(options);
        Self { app, key, sink, browser, options, run, checked: Vec::new() }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.app.addr)
    }

    fn fr(&self) -> bool {
        self.options.languages.starts_with("fr")
    }

    /// The page as the reader gets it, and its screenshot.
    fn check_page(&mut self, shot: &str) {
        let b = &self.browser;
        let url = b.url();
        let facts = b.execute(
            "const d = document.documentElement;\
             return { lang: d.lang, title: document.title, scroll: d.scrollWidth, client: d.clientWidth,\
                      inner: window.innerWidth,\
                      inline: [...document.scripts].filter(s => !s.src).length };",
            &[],
        );
        assert_eq!(facts["lang"], if self.fr() { "fr" } else { "en" }, "{url}: {facts}");
        assert!(facts["title"].as_str().is_some_and(|t| t.ends_with(" · Courrier") && t.len() > 12), "{url}: {facts}");
        assert_eq!(facts["inline"], 0, "{url}: no inline script");
        assert!(
            facts["scroll"].as_i64().unwrap() <= facts["client"].as_i64().unwrap(),
            "{url}: wider than the screen (horizontal scrolling): {facts}"
        );
        if self.options.phone {
            assert_eq!(facts["inner"], 375, "{url}: wider than the phone: {facts}");
        }
        if self.options.javascript {
            let violations = b.axe_violations();
            let grave: Vec<&Value> =
                violations.iter().filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical"))).collect();
            assert!(grave.is_empty(), "{url}: axe-core finds serious or critical violations: {grave:#?}");
        }
        b.screenshot(&screenshots().join(format!("{}-{shot}.png", self.run)));
        self.checked.push(url);
    }

    fn open(&mut self, path: &str, shot: &str) {
        self.browser.goto(&self.url(path));
        self.check_page(shot);
    }

    fn fill(&self, css: &str, text: &str) {
        let e = self.browser.find(css);
        self.browser.type_into(&e, text);
    }

    fn choose(&self, select: &str, value: &str) {
        let e = self.browser.find(&format!("{select} option[value=\"{value}\"]"));
        self.browser.click(&e);
    }

    /// Submits the form of `button` (a CSS selector) and checks the page it leads to.
    fn submit(&mut self, button: &str, shot: &str) {
        let e = self.browser.find(button);
        self.browser.click_and_wait(&e);
        self.check_page(shot);
    }

    fn has(&self, css: &str) -> bool {
        !self.browser.find_all(css).is_empty()
    }

    fn sign_in(&mut self, address: &str) {
        self.open("/admin/", &format!("login-{}", address.split('@').next().unwrap()));
        assert!(self.browser.url().ends_with("/admin/login"), "{}", self.browser.url());
        self.fill("#email", address);
        self.fill("#password", PASSWORD);
        self.submit(
            "form[action=\"/admin/login\"] button",
            &format!("dashboard-{}", address.split('@').next().unwrap()),
        );
        assert!(self.browser.url().ends_with("/admin/"), "signed in: {}", self.browser.url());
    }

    fn sign_out(&mut self) {
        let shot = format!("signed-out-{}", self.checked.len());
        self.submit("form[action=\"/admin/logout\"] button", &shot);
        assert!(self.browser.url().ends_with("/admin/login"), "{}", self.browser.url());
    }

    /// The OCR service's `GET /api/ruok` status: 503 in maintenance.
    fn ruok(&self) -> u16 {
        call(&self.app, "GET", "/api/ruok", &[bearer(&self.key)], None).status
    }

    fn text(&self, css: &str) -> String {
        self.browser.text(&self.browser.find(css))
    }
}

/// The site administrator's work, through the forms only.
fn administrator_walk(w: &mut Walk) {
    w.sign_in("admin@example.org");
    w.open("/admin/domains", "domains");
    w.fill("#name", "example.org");
    w.fill("#dkim_selector", "mail");
    w.submit("form[action=\"/admin/domains\"] button", "domain");
    assert!(w.browser.url().ends_with("/admin/domains/example.org"), "{}", w.browser.url());
    assert!(w.browser.source().contains("mail._domainkey.example.org"), "the DKIM record to publish");
    w.submit("form[action$=\"/dns-check\"] button", "dns-check");
    assert!(w.has("dd .bad"), "verdicts say what to fix: {}", w.browser.source());
    w.open("/admin/domains/example.org", "domain-again");
    w.fill("#name", "news");
    w.fill("#display_name", "News of the example");
    w.fill("#owner_email", "admin@example.org");
    w.choose("#subscription_policy", "open");
    w.submit("form[action=\"/admin/domains/example.org/lists\"] button", "list");
    assert!(w.browser.url().ends_with("/admin/domains/example.org/lists/news"), "{}", w.browser.url());

    // Every policy is a control; a change shows as saved.
    for control in [
        "#status",
        "#subscription_policy",
        "#posting_policy",
        "#reply_to",
        "#digest_frequency",
        "#subject_tag",
        "#footer_text",
        "#footer_html",
        "#bounce_disable_score",
        "#max_message_kb",
        "#display_name",
    ] {
        assert!(w.has(control), "{control}");
    }
    w.choose("#posting_policy", "owners");
    w.fill("#subject_tag", "[News]");
    w.submit("form[action=\"/admin/domains/example.org/lists/news\"] button[type=submit]", "list-saved");
    assert!(w.browser.is_selected(&w.browser.find("#posting_policy option[value=owners]")));
    w.submit("form[action$=\"/news/suspend\"] button", "list-suspended");
    assert!(w.has("form[action$=\"/news/resume\"]"), "suspended");
    w.submit("form[action$=\"/news/resume\"] button", "list-resumed");

    // The list's moderation queue and mail accounts (no keyring here: shown, not set).
    w.open("/admin/domains/example.org/lists/news/moderation", "moderation");
    w.open("/admin/domains/example.org/lists/news/credentials", "credentials");
    assert!(w.has("#ingest-host") && w.has("#submission-host"), "{}", w.browser.source());

    // Members: add one, find it, import a CSV, see the report.
    w.open("/admin/domains/example.org/lists/news/members", "members-empty");
    w.fill("#add-member #email", "ann.lee@example.net");
    w.fill("#add-member #name", "Ann Lee");
    w.fill("#consent_source", "signup form");
    w.fill("#consent_evidence", "ticket 42");
    w.browser.click(&w.browser.find("input[name=force]"));
    w.submit("#add-member button", "member");
    let status = w.text("dl");
    assert!(status.contains("active") && status.contains("signup form"), "{status}");
    let csv = w.app.dir.path().join("members.csv");
    std::fs::write(&csv, "email,display_name\nbob@example.net,Bob\ncarol@example.net,Carol\nnot-an-address,X\n")
        .unwrap();
    w.open("/admin/domains/example.org/lists/news/members", "members");
    w.fill("#consent_evidence_import", "paper forms of 2026");
    w.fill("#file", &csv.display().to_string());
    w.submit("#import button", "import-report");
    let report = w.browser.source();
    assert!(report.contains("<td>2</td>") && report.contains("not-an-address"), "{report}");
    w.open("/admin/domains/example.org/lists/news/members?email_contains=lee", "members-search");
    let rows = w.browser.find_all("tbody tr");
    assert_eq!(rows.len(), 1, "one match: {}", w.browser.source());
    assert!(w.browser.source().contains("ann.lee@example.net"));

    // A send: composed, then its counts on its page (moving by themselves with script on).
    w.open("/admin/domains/example.org/lists/news/sends", "compose");
    w.fill("#subject", "Hello from the pages");
    w.fill("#text", "Hello all");
    w.fill("#html", "<p>Hello all</p>");
    w.submit("form[action$=\"/news/sends\"] button", "send");
    assert!(w.browser.url().contains("/news/sends/"), "{}", w.browser.url());
    w.sink.wait_for(3, Duration::from_secs(60));
    if w.options.javascript {
        let deadline = Instant::now() + Duration::from_secs(60);
        while w.text("td[data-count=sent]") != "3" {
            assert!(Instant::now() < deadline, "the counts did not move on the page: {}", w.browser.source());
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            w.browser.goto(&w.browser.url());
            if w.text("td[data-count=sent]") == "3" {
                break;
            }
            assert!(Instant::now() < deadline, "the counts did not move: {}", w.browser.source());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    w.check_page("send-done");

    // An account invited, given a role, the role taken back.
    w.open("/admin/users", "users");
    w.fill("#email", "new.owner@example.org");
    w.submit("form[action=\"/admin/users\"] button", "user");
    w.choose("#role", "owner");
    w.fill("#domain", "example.org");
    w.fill("#list", "news");
    w.submit("form[action$=\"/roles\"] button", "user-role");
    assert!(w.has("form[action$=\"/roles/revoke\"]"), "the role is listed");
    w.submit("form[action$=\"/roles/revoke\"] button", "user-revoked");
    assert!(!w.has("form[action$=\"/roles/revoke\"]"), "the role is gone");

    // An API key: its secret shown once, and it works at once; revoked, it works no more.
    w.open("/admin/apikeys", "apikeys");
    w.fill("#name", "reports");
    w.submit("form[action=\"/admin/apikeys\"] button", "apikey-created");
    let secret = w.browser.execute("return document.getElementById('secret').value", &[]);
    let secret = secret.as_str().unwrap().to_owned();
    assert!(secret.starts_with("svc_"), "{secret}");
    let members = call(&w.app, "GET", "/api/v1/domains/example.org/lists/news/members", &[bearer(&secret)], None);
    assert_eq!((members.status, members.json()["meta"]["total"].as_u64()), (200, Some(3)), "{}", members.body);
    w.open("/admin/apikeys", "apikeys-listed");
    assert!(!w.browser.source().contains(&secret[20..]), "the secret is never shown again");
    w.submit("button[aria-label=\"Revoke reports\"]", "apikey-revoked");
    assert_eq!(call(&w.app, "GET", "/api/v1/dashboard", &[bearer(&secret)], None).status, 401);

    // A webhook: its secret shown once, its test ping's answer, its last error.
    w.open("/admin/webhooks", "webhooks-empty");
    w.fill("#url", "https://127.0.0.1:9/hook");
    w.browser.click(&w.browser.find("input[name=events][value=\"member.added\"]"));
    w.submit("form[action=\"/admin/webhooks\"] button", "webhook-created");
    let whsec = w.browser.execute("return document.getElementById('secret').value", &[]);
    assert!(whsec.as_str().is_some_and(|s| s.starts_with("whsec_")), "{whsec}");
    w.open("/admin/webhooks", "webhooks");
    w.submit("form[action$=\"/test\"] button", "webhook-ping");
    assert!(w.has("p.bad"), "the ping failed, and says so: {}", w.browser.source());
    w.open("/admin/webhooks", "webhooks-last-error");
    assert!(w.has("dd .bad"), "the last error shows: {}", w.browser.source());

    // The OCR service: maintenance on (the OCR routes answer 503), then off; usage and plans.
    w.open("/admin/ocr", "ocr");
    w.submit("form[action=\"/admin/ocr/maintenance\"] button", "ocr-maintenance-on");
    assert_eq!(w.ruok(), 503);
    w.submit("form[action=\"/admin/ocr/maintenance\"] button", "ocr-maintenance-off");
    assert_ne!(w.ruok(), 503);
    w.open("/admin/ocr?email=admin%40example.org", "ocr-usage");
    w.fill("#pages", "250");
    w.submit("form[action=\"/admin/ocr/plan\"] button", "ocr-plan");
    assert!(w.browser.source().contains("250"), "{}", w.browser.source());

    // The audit log and its filters.
    w.open("/admin/audit?action=member.add", "audit");
    assert!(w.browser.source().contains("member.add") && !w.browser.source().contains("<td>list.create</td>"));
    w.open("/admin/nowhere", "not-found");
    w.open("/admin/", "dashboard-after");
    w.sign_out();
    assert!(w.checked.len() >= 30, "{:?}", w.checked);
}

#[test]
fn an_administrator_works_in_the_pages_in_chromium_with_no_serious_axe_violation() {
    let mut w = Walk::start("desktop", BrowserOptions { javascript: true, phone: false, languages: "en-GB,en" });
    administrator_walk(&mut w);
}

#[test]
fn an_administrator_works_in_the_pages_in_chromium_with_javascript_off() {
    let mut w = Walk::start("nojs", BrowserOptions { javascript: false, phone: false, languages: "en-GB,en" });
    // The browser runs no script of the pages.
    w.browser.goto("data:text/html,<p id=x>off</p><script>document.getElementById('x').textContent='on'</script>");
    assert_eq!(w.text("#x"), "off");
    administrator_walk(&mut w);
}

/// Each role on a phone, in French: the pages it may see, the controls it may use, and nothing of
/// what it may not (another domain, the domain's settings, the list's policies, accounts).
#[test]
fn each_role_sees_what_it_may_and_nothing_more_on_a_phone_in_french() {
    let mut w = Walk::start("roles", BrowserOptions { javascript: true, phone: true, languages: "fr-FR,fr" });
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    make_list(&w.app.core, "other.org", "jobs", "admin@example.org", SubscriptionPolicy::Open);
    make_user(&w.app.core, "dadmin@example.org", &[Role::DomainAdmin(d.clone())]);
    make_user(&w.app.core, "owner@example.org", &[Role::Owner(d.clone(), l.clone())]);
    make_user(&w.app.core, "moderator@example.org", &[Role::Moderator(d, l)]);
    let admin = courrier_core::access::users::by_email(
        &w.app.core.access,
        &courrier_core::kernel::EmailAddress::parse("admin@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let key = make_key(&w.app.core, &admin, KeyScope::User, &Perm::ALL, None);
    let added = call(
        &w.app,
        "POST",
        "/api/v1/domains/example.org/lists/news/members",
        &[bearer(&key)],
        Some(&serde_json::json!({ "email": "reader@example.net" })),
    );
    assert_eq!(added.status, 201, "{}", added.body);
    // The list turns moderated, and a subscription waits for a moderator.
    let news = "/api/v1/domains/example.org/lists/news";
    let patch =
        call(&w.app, "PATCH", news, &[bearer(&key)], Some(&serde_json::json!({ "subscription_policy": "moderate" })));
    assert_eq!(patch.status, 200, "{}", patch.body);
    let held = call(
        &w.app,
        "POST",
        &format!("{news}/members"),
        &[bearer(&key)],
        Some(&serde_json::json!({ "email": "waiting@example.net" })),
    );
    assert_eq!(
        (held.status, held.json()["data"]["status"].as_str()),
        (202, Some("pending_moderation")),
        "{}",
        held.body
    );
    // Every post is held for a moderator; one arrives by mail.
    let patch =
        call(&w.app, "PATCH", news, &[bearer(&key)], Some(&serde_json::json!({ "posting_policy": "moderated" })));
    assert_eq!(patch.status, 200, "{}", patch.body);
    let raw = "From: Poster <poster@example.net>\r\nTo: news@example.org\r\nSubject: A held post\r\n\
               Message-ID: <held1@example.net>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHello list,\r\nfirst post.\r\n";
    inbound::receive(
        &w.app.core.mailing,
        Some("poster@example.net"),
        "news@example.org",
        raw.as_bytes(),
        inbound::Oversize::Refuse,
    )
    .unwrap();
    let list = "/admin/domains/example.org/lists/news";
    // The site administrator first, in French: every section.
    w.sign_in("admin@example.org");
    for (path, shot) in [
        ("/admin/users", "fr-users"),
        ("/admin/apikeys", "fr-apikeys"),
        ("/admin/audit", "fr-audit"),
        ("/admin/webhooks", "fr-webhooks"),
        ("/admin/ocr", "fr-ocr"),
        ("/admin/domains", "fr-domains"),
        ("/admin/domains/other.org", "fr-domain"),
        (list, "fr-list"),
        (&format!("{list}/members"), "fr-members"),
        (&format!("{list}/sends"), "fr-compose"),
    ] {
        w.open(path, shot);
    }
    w.sign_out();
    struct Sees {
        who: &'static str,
        domain_settings: bool,
        policies: bool,
        compose: bool,
        add_members: bool,
        users: bool,
    }
    for s in [
        Sees { who: "dadmin", domain_settings: true, policies: true, compose: true, add_members: true, users: true },
        Sees { who: "owner", domain_settings: false, policies: true, compose: true, add_members: true, users: false },
        Sees {
            who: "moderator",
            domain_settings: false,
            policies: false,
            compose: false,
            add_members: false,
            users: false,
        },
    ] {
        let address = format!("{}@example.org", s.who);
        w.sign_in(&address);
        assert_eq!(w.has("nav a[href=\"/admin/users\"]"), s.users, "{}", s.who);
        assert!(!w.has("nav a[href=\"/admin/audit\"]"), "{}: the audit log is the installation's", s.who);
        assert!(!w.has("nav a[href=\"/admin/ocr\"]"), "{}: so is the OCR service", s.who);
        assert_eq!(w.has("nav a[href=\"/admin/webhooks\"]"), s.who != "moderator", "{}", s.who);
        w.open("/admin/domains", &format!("{}-domains", s.who));
        let src = w.browser.source();
        assert!(src.contains("example.org") && !src.contains("other.org"), "{}: {src}", s.who);
        assert!(!w.has("form[action=\"/admin/domains\"]"), "{}: creates no domain", s.who);
        w.open("/admin/domains/example.org", &format!("{}-domain", s.who));
        assert_eq!(w.has("form[action=\"/admin/domains/example.org\"] #status"), s.domain_settings, "{}", s.who);
        assert_eq!(
            w.browser.source().contains("_domainkey") || w.has("form[action$=\"/dns-check\"]"),
            s.domain_settings,
            "{}",
            s.who
        );
        w.open(list, &format!("{}-list", s.who));
        assert_eq!(w.has("#posting_policy"), s.policies, "{}", s.who);
        assert_eq!(w.has(&format!("a[href=\"{list}/sends\"]")), s.compose, "{}", s.who);
        assert!(w.has(&format!("a[href=\"{list}/moderation\"]")), "{}: moderates the list", s.who);
        assert_eq!(w.has(&format!("a[href=\"{list}/credentials\"]")), s.policies, "{}", s.who);
        if s.who == "moderator" {
            // The moderator approves the waiting subscription with the queue's button.
            w.open(&format!("{list}/moderation"), "moderator-queue");
            assert!(w.browser.source().contains("waiting@example.net"), "{}", w.browser.source());
            w.submit("button[aria-label=\"Accepter waiting@example.net\"]", "moderator-approved");
            assert!(!w.browser.source().contains("waiting@example.net"), "decided: {}", w.browser.source());
            let member = call(&w.app, "GET", &format!("{news}/members/waiting%40example.net"), &[bearer(&key)], None);
            assert_eq!(member.json()["data"]["status"], "active", "{}", member.body);
            // The held post, its text read, approved: it becomes a send.
            w.open(&format!("{list}/moderation"), "moderator-queue-post");
            let link = w.browser.find("a[href*=\"/moderation/messages/\"]");
            w.browser.click_and_wait(&link);
            w.check_page("moderator-held-post");
            assert!(w.browser.source().contains("first post."), "{}", w.browser.source());
            w.submit("form[action$=\"/approve\"] button", "moderator-held-approved");
            assert!(!w.has("a[href*=\"/moderation/messages/\"]"), "decided: {}", w.browser.source());
            let held = call(&w.app, "GET", &format!("{news}/moderation/messages"), &[bearer(&key)], None);
            assert_eq!(held.json()["meta"]["total"], 0, "{}", held.body);
        }
        w.open(&format!("{list}/members"), &format!("{}-members", s.who));
        assert!(w.has("table"), "{}: reads the members", s.who);
        assert_eq!(w.has("#add-member"), s.add_members, "{}", s.who);
        assert_eq!(w.has("#import"), s.add_members, "{}", s.who);
        w.open("/admin/domains/other.org", &format!("{}-other-domain", s.who));
        assert!(
            w.browser.title().contains("introuvable"),
            "{}: another domain is not found: {}",
            s.who,
            w.browser.title()
        );
        if !s.compose {
            w.open(&format!("{list}/sends"), &format!("{}-compose-refused", s.who));
            assert!(!w.has("#subject"), "{}: no compose form", s.who);
        }
        if s.users {
            w.open("/admin/users", &format!("{}-users", s.who));
        }
        w.open("/admin/apikeys", &format!("{}-apikeys", s.who));
        if s.who != "moderator" {
            w.open("/admin/webhooks", &format!("{}-webhooks", s.who));
        }
        w.sign_out();

        // What the pages do not offer, the server refuses too (forged forms, with a valid token).
        let mut pages = Pages::new(&w.app);
        pages.sign_in(&address);
        let token = pages.get("/admin/").csrf();
        let change = pages.post(list, &format!("csrf_token={token}&posting_policy=open"));
        assert_eq!(change.status == 303, s.policies, "{}: {}", s.who, change.body);
        let domain = pages.post("/admin/domains/example.org", &format!("csrf_token={token}&status=disabled"));
        assert_eq!(domain.status == 303, s.domain_settings, "{}: {}", s.who, domain.body);
        let send = pages.post(&format!("{list}/sends"), &format!("csrf_token={token}&subject=x&text=y"));
        assert_eq!(send.status == 303, s.compose, "{}: {}", s.who, send.body);
        let maintenance = pages.post("/admin/ocr/maintenance", &format!("csrf_token={token}&state=on"));
        assert_eq!(maintenance.status, 404, "{}: the OCR service's maintenance is not in reach", s.who);
        assert_ne!(w.ruok(), 503);
        if s.domain_settings {
            // Put back for the next role.
            pages.post("/admin/domains/example.org", &format!("csrf_token={token}&status=active"));
        }
    }
}
