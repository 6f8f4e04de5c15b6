//! The subscriber's pages in a real headless Chromium (`courrier_tests::browser`), against the
//! real server and a real SMTP sink: subscribe through the public form, follow the mailed
//! confirmation link, sign in by the mailed login link, change a delivery mode and unsubscribe
//! on `/p/me`, unsubscribe from a copy's link, sign out. Each page is checked as it shows:
//! its `lang` and `<title>`, no horizontal scrolling, and (JavaScript on) axe-core finds no
//! serious or critical violation. The walk runs twice: on a phone's screen in English with
//! JavaScript on, and on a desktop window in French with JavaScript off.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::subscribers::{link_path, list_id};
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::browser::{Browser, BrowserOptions};
use courrier_tests::harness::{SmtpSink, TestApp};
use serde_json::{Value, json};
use std::time::Duration;

/// Long enough that a phone's screen must wrap it.
const ADDRESS: &str = "ann.marie-longname-of-the-subscriber@example.net";

struct Walk {
    app: TestApp,
    sink: SmtpSink,
    key: String,
    browser: Browser,
    options: BrowserOptions,
    /// Pages checked, for the closing count.
    checked: Vec<String>,
}

impl Walk {
    fn start(options: BrowserOptions) -> Self {
        let sink = SmtpSink::start();
        let app =
            TestApp::spawn_with(&[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "lists@example.org")]);
        let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
        let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
        for l in ["news", "other", "third"] {
            make_list(&app.core, "example.org", l, "admin@example.org", SubscriptionPolicy::Open);
        }
        // Subscribed by an administrator to two lists; the third through the public form below.
        for l in ["other", "third"] {
            let path = format!("/api/v1/domains/example.org/lists/{l}/members");
            let resp = call(&app, "POST", &path, &[bearer(&key)], Some(&json!({ "email": ADDRESS })));
            assert_eq!(resp.status, 201, "{}", resp.body);
        }
        let browser = Browser::start(options);
        Self { app, sink, key, browser, options, checked: Vec::new() }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.app.addr)
    }

    fn fr(&self) -> bool {
        self.options.languages.starts_with("fr")
    }

    /// The page as the reader gets it: in the reader's language with a title, as wide as the
    /// screen at most, and (JavaScript on) without a serious or critical axe-core violation.
    fn check_page(&mut self) {
        let b = &self.browser;
        let url = b.url();
        let facts = b.execute(
            "const d = document.documentElement;\
             return { lang: d.lang, title: document.title, scroll: d.scrollWidth, client: d.clientWidth,\
                      inner: window.innerWidth, scripts: document.scripts.length };",
            &[],
        );
        let lang = if self.fr() { "fr" } else { "en" };
        assert_eq!(facts["lang"], lang, "{url}: {facts}");
        assert!(facts["title"].as_str().is_some_and(|t| t.ends_with(" · Courrier") && t.len() > 12), "{url}: {facts}");
        assert_eq!(facts["scripts"], 0, "{url}: the pages need no script");
        assert!(
            facts["scroll"].as_i64().unwrap() <= facts["client"].as_i64().unwrap(),
            "{url}: wider than the screen (horizontal scrolling): {facts}"
        );
        if self.options.phone {
            assert_eq!(facts["inner"], 375, "{url}: wider than the phone (zoomed out to fit): {facts}");
        }
        if self.options.javascript {
            let violations = b.axe_violations();
            let grave: Vec<&Value> =
                violations.iter().filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical"))).collect();
            assert!(grave.is_empty(), "{url}: axe-core finds serious or critical violations: {grave:#?}");
            for v in &violations {
                eprintln!("{url}: axe-core, {} ({}): {}", v["id"], v["impact"], v["help"]);
            }
        }
        self.checked.push(url);
    }

    /// Submits the form of `button` (a CSS selector) and checks the page it leads to.
    fn submit(&mut self, button: &str) {
        let e = self.browser.find(button);
        self.browser.click_and_wait(&e);
        self.check_page();
    }

    fn open(&mut self, path: &str) {
        self.browser.goto(&self.url(path));
        self.check_page();
    }

    /// The newest of at least `n` mails, holding `marker`.
    fn mail(&self, n: usize, marker: &str) -> String {
        let all = self.sink.wait_for(n, Duration::from_secs(20));
        all.into_iter().rev().find(|m| m.contains(marker)).unwrap_or_else(|| panic!("no mail with {marker}"))
    }

    fn member(&self, list: &str) -> Value {
        let path = format!("/api/v1/domains/example.org/lists/{list}/members/{}", ADDRESS.replace('@', "%40"));
        let r = call(&self.app, "GET", &path, &[bearer(&self.key)], None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["data"].clone()
    }

    fn source_has(&self, text: &str) -> bool {
        self.browser.source().contains(text)
    }
}

/// A copy's `List-Unsubscribe` link, as a path.
fn unsubscribe_path(mail: &str) -> String {
    let text = mail.replace("=\r\n", "").replace("=\n", "");
    let at = text.find("/p/unsubscribe/").expect("an unsubscribe link");
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_')).collect()
}

fn walk(options: BrowserOptions) {
    let mut w = Walk::start(options);
    // The browser runs a page's scripts, or not, as set.
    w.browser.goto("data:text/html,<p id=x>off</p><script>document.getElementById('x').textContent='on'</script>");
    let ran = w.browser.text(&w.browser.find("#x"));
    assert_eq!(ran, if options.javascript { "on" } else { "off" }, "JavaScript as set");
    let other = list_id(&w.app.core, "example.org", "other");
    let third = list_id(&w.app.core, "example.org", "third");

    // The public form: a confirmation mail first, then the list's policy (open: active).
    w.open("/p/subscribe/example.org/news");
    let email = w.browser.find("#email");
    w.browser.type_into(&email, ADDRESS);
    let name = w.browser.find("#name");
    w.browser.type_into(&name, "Ann <b>Marie</b>");
    w.submit("form button[type=submit]");
    assert!(w.source_has(ADDRESS), "the page names the address");
    let confirm = link_path(&w.mail(1, "/p/confirm/"), "/p/confirm/");
    assert_eq!(w.member("news")["status"], "pending");
    w.open(&confirm);
    w.submit("form button[type=submit]");
    assert!(w.source_has("news@example.org"), "{}", w.browser.source());
    let m = w.member("news");
    assert_eq!((m["status"].as_str(), m["consent_source"].as_str()), (Some("active"), Some("double_opt_in")), "{m}");
    assert_eq!(m["display_name"], "Ann <b>Marie</b>", "typed text stays text");

    // /p/me: the address, the mailed link, a button (the GET opens nothing), the subscriptions.
    w.open("/p/me");
    let email = w.browser.find("#email");
    w.browser.type_into(&email, ADDRESS);
    w.submit("form button[type=submit]");
    let login = link_path(&w.mail(2, "/p/me/login/"), "/p/me/login/");
    w.open(&login);
    w.submit("form button[type=submit]");
    assert!(w.browser.url().ends_with("/p/me"), "{}", w.browser.url());
    for address in ["news@example.org", "other@example.org", "third@example.org"] {
        assert!(w.source_has(address), "{address} listed: {}", w.browser.source());
    }

    // A delivery mode changed with the select and its button.
    let digest = w.browser.find(&format!("#mode-{other} option[value=digest]"));
    w.browser.click(&digest);
    w.submit(&format!("form[action=\"/p/me/subscriptions/{other}\"] button"));
    assert!(w.browser.is_selected(&w.browser.find(&format!("#mode-{other} option[value=digest]"))), "shown as saved");
    assert_eq!(w.member("other")["delivery_mode"], "digest");

    // Unsubscribed from one list with its button.
    w.submit(&format!("form[action=\"/p/me/subscriptions/{third}/unsubscribe\"] button"));
    assert!(!w.source_has("third@example.org") && w.source_has("other@example.org"));
    assert_eq!(w.member("third")["status"], "unsubscribed");

    // A copy of a post to news, and its unsubscribe link: a page with a button.
    let send = call(
        &w.app,
        "POST",
        "/api/v1/domains/example.org/lists/news/sends",
        &[bearer(&w.key)],
        Some(&json!({ "subject": "Hello", "text": "Hello all", "html": "<p>Hello all</p>" })),
    );
    assert_eq!(send.status, 202, "{}", send.body);
    let copy = w.mail(3, "/p/unsubscribe/");
    assert!(copy.contains("Subject: Hello") || copy.contains("Hello all"), "the copy: {copy}");
    w.open(&unsubscribe_path(&copy));
    assert_eq!(w.member("news")["status"], "active", "opening the link changes nothing");
    w.submit("form button[type=submit]");
    assert_eq!(w.member("news")["status"], "unsubscribed");

    // Back on /p/me, the one list left; then signed out, back to the address form.
    w.open("/p/me");
    assert!(w.source_has("other@example.org") && !w.source_has("news@example.org"), "{}", w.browser.source());
    w.submit("form[action=\"/p/me/logout\"] button");
    assert!(w.browser.find_all("#email").len() == 1, "signed out: {}", w.browser.source());

    // The pages of a bad link and of an unknown page, in the same layout.
    w.open("/p/confirm/not-a-token");
    w.open("/p/me/login/not-a-token");
    w.open("/p/nowhere");
    assert!(w.browser.title().contains(if w.fr() { "introuvable" } else { "not found" }), "{}", w.browser.title());
    assert!(w.checked.len() >= 15, "{:?}", w.checked);
}

#[test]
fn a_subscriber_walks_the_pages_in_chromium_on_a_phone_with_no_serious_axe_violation() {
    walk(BrowserOptions { javascript: true, phone: true, languages: "en-GB,en" });
}

#[test]
fn a_subscriber_walks_the_pages_in_chromium_with_javascript_off_in_french() {
    walk(BrowserOptions { javascript: false, phone: false, languages: "fr-FR,fr" });
}
