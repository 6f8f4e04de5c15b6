//! Subscriber self-service against the real server: the login link mailed over real SMTP, the
//! `svc_subscriber` session, the address's own subscriptions and nothing else, the refusals
//! (401, 403 CSRF, 404 another list, 422, 429 per limit, a used link), the event and the audit.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use courrier_cli::server::Services;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::{DomainName, EmailAddress, EventName, ListName, secrets};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_core::storage::{in_read, in_write};
use courrier_tests::harness::{Resp, SmtpSink, TestApp};
use serde_json::{Value, json};
use std::time::Duration;

const SUB: &str = "Sub@Example.net";

/// A subscriber session's cookie header and CSRF token.
pub(crate) struct SubscriberSession {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

/// The value of the first line of a mail (quoted-printable soft breaks undone) holding `marker`,
/// from the marker on: the path of a link.
pub(crate) fn link_path(mail: &str, marker: &str) -> String {
    let text = mail.replace("=\r\n", "").replace("=\n", "");
    let line = text.lines().find(|l| l.contains(marker)).unwrap_or_else(|| panic!("no {marker} in {text}"));
    let from = line.find(marker).unwrap();
    line[from..].trim().to_owned()
}

/// Opens a subscriber session for `address` with a login link written through core (for tests
/// that need a session, not the mail that brings one).
pub(crate) fn subscriber_session(app: &TestApp, address: &str) -> SubscriberSession {
    let token = secrets::random_token(32);
    let email = EmailAddress::parse(address).unwrap();
    let now = app.core.mailing.clock.now();
    in_write(&*app.core.mailing.store, |tx| {
        tx.insert_login_link(&secrets::sha256_hex(token.as_bytes()), &email, now, now.plus_secs(3600))
    })
    .unwrap();
    open(app, &token)
}

fn open(app: &TestApp, token: &str) -> SubscriberSession {
    let resp = app.client.post_json("/api/v1/me/session", &json!({ "token": token }));
    assert_eq!(resp.status, 200, "{}", resp.body);
    let set_cookie = resp.header("set-cookie").unwrap().to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    SubscriberSession { cookie, csrf: resp.json()["data"]["csrf_token"].as_str().unwrap().to_owned() }
}

fn me(app: &TestApp, method: &str, path: &str, s: &SubscriberSession, csrf: bool, body: Option<&Value>) -> Resp {
    let mut headers = vec![("cookie", s.cookie.clone())];
    if csrf {
        headers.push(("x-csrf-token", s.csrf.clone()));
    }
    call(app, method, path, &headers, body)
}

pub(crate) fn list_id(core: &Services, d: &str, l: &str) -> i64 {
    let (d, l) = (DomainName::parse(d).unwrap(), ListName::parse(l).unwrap());
    in_read(&*core.mailing.store, |tx| tx.list_by_name(&d, &l)).unwrap().unwrap().id.get()
}

/// A server mailing to a sink, with lists `news`, `other` and `private` (open), an admin key,
/// and `SUB` subscribed to `news` and `other`, someone else to `private`.
fn setup(sink: &SmtpSink) -> (TestApp, String) {
    let app = TestApp::spawn_with(&[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "lists@example.org")]);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    for l in ["news", "other", "private"] {
        make_list(&app.core, "example.org", l, "admin@example.org", SubscriptionPolicy::Open);
    }
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    for (l, who) in [("news", SUB), ("other", SUB), ("private", "else@example.net")] {
        let path = format!("/api/v1/domains/example.org/lists/{l}/members");
        let resp = call(&app, "POST", &path, &[bearer(&key)], Some(&json!({ "email": who })));
        assert_eq!(resp.status, 201, "{}", resp.body);
    }
    (app, key)
}

#[test]
fn a_subscriber_signs_in_by_mailed_link_and_manages_only_its_own_subscriptions() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink);
    let (news, other, private) = (
        list_id(&app.core, "example.org", "news"),
        list_id(&app.core, "example.org", "other"),
        list_id(&app.core, "example.org", "private"),
    );

    // Known or not, the same answer.
    let known = app.client.post_json("/api/v1/me/login-link", &json!({ "email": "sub@example.net" }));
    let unknown = app.client.post_json("/api/v1/me/login-link", &json!({ "email": "nobody@example.net" }));
    assert_eq!((known.status, unknown.status), (202, 202), "{} {}", known.body, unknown.body);
    assert_eq!(known.json()["data"], unknown.json()["data"]);
    app.client
        .post_json("/api/v1/me/login-link", &json!({ "email": "not an address" }))
        .expect_error(422, "validation_failed");

    let mail = sink.wait_for(1, Duration::from_secs(10)).remove(0);
    assert!(mail.contains("To: sub@example.net") || mail.contains("To: Sub@example.net"), "{mail}");
    let path = link_path(&mail, "/p/me/login/");
    let token = path.trim_start_matches("/p/me/login/").to_owned();

    let resp = app.client.post_json("/api/v1/me/session", &json!({ "token": token }));
    assert_eq!(resp.status, 200, "{}", resp.body);
    let set_cookie = resp.header("set-cookie").unwrap().to_owned();
    assert!(set_cookie.starts_with("svc_subscriber="), "{set_cookie}");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.contains(attribute), "{attribute} in {set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "the public URL is http: {set_cookie}");
    let data = resp.json()["data"].clone();
    assert_eq!(data["email"].as_str().map(str::to_lowercase).as_deref(), Some("sub@example.net"));
    let s = SubscriberSession {
        cookie: set_cookie.split(';').next().unwrap().to_owned(),
        csrf: data["csrf_token"].as_str().unwrap().to_owned(),
    };
    app.client.post_json("/api/v1/me/session", &json!({ "token": token })).expect_error(401, "unauthenticated");
    app.client.post_json("/api/v1/me/session", &json!({ "token": "made-up" })).expect_error(401, "unauthenticated");
    assert!(sink.messages().len() == 1, "the unknown address got no mail");

    let session = me(&app, "GET", "/api/v1/me/session", &s, false, None);
    assert_eq!(session.status, 200, "{}", session.body);
    assert_eq!(session.json()["data"]["csrf_token"], s.csrf.as_str());

    let listed = me(&app, "GET", "/api/v1/me/subscriptions", &s, false, None).json();
    assert_eq!(listed["meta"]["total"], 2, "{listed}");
    let ids: Vec<i64> = listed["data"].as_array().unwrap().iter().map(|x| x["list_id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![news, other]);
    assert_eq!(listed["data"][0]["list_address"], "news@example.org");
    assert_eq!(listed["data"][0]["status"], "active");
    me(&app, "GET", "/api/v1/me/subscriptions?limit=0", &s, false, None).expect_error(422, "invalid_pagination");

    let digest = json!({ "delivery_mode": "digest" });
    let news_path = format!("/api/v1/me/subscriptions/{news}");
    me(&app, "PATCH", &news_path, &s, false, Some(&digest)).expect_error(403, "csrf_failed");
    let changed = me(&app, "PATCH", &news_path, &s, true, Some(&digest));
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(changed.json()["data"]["delivery_mode"], "digest");
    me(&app, "PATCH", &news_path, &s, true, Some(&json!({ "delivery_mode": "weekly" })))
        .expect_error(422, "validation_failed");
    me(&app, "PATCH", &news_path, &s, true, Some(&json!({ "delivery_mode": "digest", "email": "else@example.net" })))
        .expect_error(422, "validation_failed");
    me(&app, "PATCH", "/api/v1/me/subscriptions/abc", &s, true, Some(&digest)).expect_error(422, "invalid_path_id");
    me(&app, "PATCH", "/api/v1/me/subscriptions/0", &s, true, Some(&digest)).expect_error(422, "invalid_path_id");
    me(&app, "PATCH", &format!("/api/v1/me/subscriptions/{private}"), &s, true, Some(&digest))
        .expect_error(404, "not_found");
    me(&app, "PATCH", "/api/v1/me/subscriptions/999999", &s, true, Some(&digest)).expect_error(404, "not_found");
    me(&app, "DELETE", &format!("/api/v1/me/subscriptions/{private}"), &s, true, None).expect_error(404, "not_found");

    // The change is audited with the subscriber (its member record) as actor; the two 404s too.
    let audit = call(&app, "GET", "/api/v1/audit?action=member.delivery_mode", &[bearer(&key)], None).json();
    let entries = audit["data"].as_array().unwrap();
    let outcomes: Vec<&str> = entries.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["not_found", "not_found", "done"], "{audit}");
    let news_member =
        call(&app, "GET", "/api/v1/domains/example.org/lists/news/members/sub%40example.net", &[bearer(&key)], None)
            .json()["data"]["id"]
            .clone();
    assert_eq!(entries[2]["actor_member_id"], news_member);
    assert_eq!(entries[2]["actor_user_id"], Value::Null);

    let other_path = format!("/api/v1/me/subscriptions/{other}");
    me(&app, "DELETE", &other_path, &s, false, None).expect_error(403, "csrf_failed");
    assert_eq!(me(&app, "DELETE", &other_path, &s, true, None).status, 204);
    me(&app, "DELETE", &other_path, &s, true, None).expect_error(404, "not_found");
    let removed = events(&app.core, EventName::MemberRemoved);
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0]["list_address"], "other@example.org");
    let m =
        call(&app, "GET", "/api/v1/domains/example.org/lists/other/members/sub%40example.net", &[bearer(&key)], None);
    assert_eq!(m.json()["data"]["status"], "unsubscribed");
    assert_eq!(me(&app, "GET", "/api/v1/me/subscriptions", &s, false, None).json()["meta"]["total"], 1);

    let out = me(&app, "POST", "/api/v1/me/logout", &s, false, None);
    assert_eq!(out.status, 204);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    me(&app, "GET", "/api/v1/me/session", &s, false, None).expect_error(401, "unauthenticated");
}

/// Behind a load balancer every request comes from its address: per-source limits count each
/// forwarded client apart only when the balancer is trusted (`COURRIER_TRUSTED_PROXIES`), and
/// otherwise the header is anybody's to write and changes nothing.
#[test]
fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_login_link_limit_and_otherwise_the_header_is_ignored() {
    let ask = |app: &TestApp, n: usize, forwarded: &str| {
        let body = serde_json::to_vec(&json!({ "email": format!("p{n}@example.net") })).unwrap();
        app.client.request(
            "POST",
            "/api/v1/me/login-link",
            &[("content-type", "application/json"), ("x-forwarded-for", forwarded)],
            Some(&body),
        )
    };
    let app = TestApp::spawn_with(&[("COURRIER_TRUSTED_PROXIES", "127.0.0.0/8")]);
    for n in 0..5 {
        assert_eq!(ask(&app, n, "203.0.113.7").status, 202);
    }
    ask(&app, 5, "203.0.113.7").expect_error(429, "rate_limited");
    // A client cannot start afresh by writing another address before its own.
    ask(&app, 6, "198.51.100.1, 203.0.113.7").expect_error(429, "rate_limited");
    assert_eq!(ask(&app, 7, "203.0.113.8").status, 202, "another client behind the same balancer");
    drop(app);
    let app = TestApp::spawn();
    for n in 0..5 {
        assert_eq!(ask(&app, n, &format!("203.0.113.{n}")).status, 202);
    }
    ask(&app, 5, "203.0.113.99").expect_error(429, "rate_limited");
}

#[test]
fn login_links_are_limited_per_address_then_per_source() {
    let app = TestApp::spawn();
    let ask = |email: &str| app.client.post_json("/api/v1/me/login-link", &json!({ "email": email }));
    for _ in 0..3 {
        assert_eq!(ask("a@example.net").status, 202);
    }
    let refused = ask("A@example.net");
    refused.expect_error(429, "rate_limited");
    assert!(refused.header("retry-after").is_some_and(|s| s.parse::<u64>().unwrap() > 60), "an hour's window");
    // The refused request was not counted against the source: two more addresses pass, then the
    // source has had its five in the minute.
    assert_eq!(ask("b@example.net").status, 202);
    assert_eq!(ask("c@example.net").status, 202);
    let refused = ask("d@example.net");
    refused.expect_error(429, "rate_limited");
    assert!(refused.header("retry-after").is_some_and(|s| s.parse::<u64>().unwrap() <= 60), "a minute's window");
}

#[test]
fn the_public_url_over_https_makes_the_subscriber_cookie_secure() {
    let app = TestApp::spawn_with(&[("COURRIER_PUBLIC_URL", "https://lists.example.org")]);
    make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let token = secrets::random_token(32);
    let email = EmailAddress::parse("x@example.net").unwrap();
    let now = app.core.mailing.clock.now();
    in_write(&*app.core.mailing.store, |tx| {
        tx.insert_login_link(&secrets::sha256_hex(token.as_bytes()), &email, now, now.plus_secs(3600))
    })
    .unwrap();
    let resp = app.client.post_json("/api/v1/me/session", &json!({ "token": token }));
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(resp.header("set-cookie").unwrap().contains("; Secure"), "{:?}", resp.header("set-cookie"));
}

/// A form posted as a browser posts it, the answer read raw (a redirect is not followed): the
/// status, the head as sent, and the body.
fn post_form(app: &TestApp, path: &str, cookie: Option<&str>, form: &str, lang: &str) -> (u16, String, String) {
    let cookie = cookie.map(|c| format!("Cookie: {c}\r\n")).unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\n{cookie}Accept-Language: {lang}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
        app.addr,
        form.len()
    );
    let raw = courrier_tests::harness::raw_exchange(app.addr, request.as_bytes(), Duration::from_secs(10));
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn page_with(app: &TestApp, path: &str, cookie: Option<&str>, lang: &str) -> Resp {
    let mut headers = vec![("accept-language", lang.to_owned())];
    if let Some(c) = cookie {
        headers.push(("cookie", c.to_owned()));
    }
    call(app, "GET", path, &headers, None)
}

/// The value of the hidden `csrf_token` field of a page.
fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf_token\" value=\"").expect("a CSRF field") + "name=\"csrf_token\" value=\"".len();
    html[at..].chars().take_while(|c| *c != '"').collect()
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_subscriber_manages_subscriptions_on_p_me_with_plain_forms() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink);
    let (news, other) = (list_id(&app.core, "example.org", "news"), list_id(&app.core, "example.org", "other"));

    let first = page_with(&app, "/p/me", None, "fr-FR,fr;q=0.9");
    assert_eq!(first.status, 200);
    assert!(
        first.body.contains("<html lang=\"fr\">") && first.body.contains("<title>Vos abonnements"),
        "{}",
        first.body
    );
    assert!(first.body.contains("<label for=\"email\">"), "a labelled control: {}", first.body);
    let (status, _, body) = post_form(&app, "/p/me", None, "email=sub%40example.net", "en");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Check your mail"), "{body}");
    let (status, _, body) = post_form(&app, "/p/me", None, "email=nobody%40example.net", "en");
    assert_eq!(status, 200, "the same page for an unknown address: {body}");
    let (status, _, _) = post_form(&app, "/p/me", None, "email=not+an+address", "en");
    assert_eq!(status, 422);

    let path = link_path(&sink.wait_for(1, Duration::from_secs(10))[0], "/p/me/login/");
    let shown = page_with(&app, &path, None, "en");
    assert_eq!(shown.status, 200);
    assert!(shown.body.contains("<form method=\"post\">"), "{}", shown.body);
    // The GET opened nothing: the link still works once.
    let (status, head, _) = post_form(&app, &path, None, "", "en");
    assert_eq!(status, 303, "{head}");
    assert!(head.to_lowercase().contains("location: /p/me"), "{head}");
    let set_cookie =
        head.lines().find(|l| l.to_lowercase().starts_with("set-cookie: svc_subscriber=")).expect("the session cookie");
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"), "{set_cookie}");
    let cookie = set_cookie["set-cookie: ".len()..].split(';').next().unwrap().to_owned();
    assert_eq!(post_form(&app, &path, None, "", "en").0, 404, "the link works once");

    // The page lists the subscriptions with their forms, from the session's token.
    let listing = page_with(&app, "/p/me", Some(&cookie), "en");
    assert_eq!(listing.status, 200);
    assert!(
        listing.body.contains("news@example.org") && listing.body.contains("other@example.org"),
        "{}",
        listing.body
    );
    assert!(!listing.body.contains("private@example.org"));
    let csrf = csrf_of(&listing.body);

    let mode_path = format!("/p/me/subscriptions/{news}");
    let (status, _, _) = post_form(&app, &mode_path, Some(&cookie), "csrf_token=wrong&delivery_mode=digest", "en");
    assert_eq!(status, 403, "a form from elsewhere");
    let (status, head, _) =
        post_form(&app, &mode_path, Some(&cookie), &format!("csrf_token={csrf}&delivery_mode=digest"), "en");
    assert_eq!((status, head.to_lowercase().contains("location: /p/me")), (303, true), "{head}");
    let m =
        call(&app, "GET", "/api/v1/domains/example.org/lists/news/members/sub%40example.net", &[bearer(&key)], None);
    assert_eq!(m.json()["data"]["delivery_mode"], "digest");
    let (status, _, _) =
        post_form(&app, &mode_path, Some(&cookie), &format!("csrf_token={csrf}&delivery_mode=weekly"), "en");
    assert_eq!(status, 422);
    let (status, _, _) = post_form(
        &app,
        "/p/me/subscriptions/abc",
        Some(&cookie),
        &format!("csrf_token={csrf}&delivery_mode=digest"),
        "en",
    );
    assert_eq!(status, 404);
    let private = list_id(&app.core, "example.org", "private");
    let (status, _, _) = post_form(
        &app,
        &format!("/p/me/subscriptions/{private}/unsubscribe"),
        Some(&cookie),
        &format!("csrf_token={csrf}"),
        "en",
    );
    assert_eq!(status, 404, "another address's list");

    let (status, _, _) = post_form(
        &app,
        &format!("/p/me/subscriptions/{other}/unsubscribe"),
        Some(&cookie),
        &format!("csrf_token={csrf}"),
        "en",
    );
    assert_eq!(status, 303);
    assert_eq!(events(&app.core, EventName::MemberRemoved).len(), 1);
    let listing = page_with(&app, "/p/me", Some(&cookie), "en");
    assert!(!listing.body.contains("other@example.org") && listing.body.contains("selected"), "{}", listing.body);

    let (status, head, _) =
        post_form(&app, "/p/me/logout", Some(&cookie), &format!("csrf_token={}", form_encode(&csrf)), "en");
    assert_eq!(status, 303);
    assert!(head.contains("Max-Age=0"), "{head}");
    let after = page_with(&app, "/p/me", Some(&cookie), "en");
    assert!(after.body.contains("name=\"email\"") && !after.body.contains("news@example.org"), "signed out");
}

#[test]
fn the_public_form_mails_a_confirmation_first_then_follows_the_lists_policy() {
    let sink = SmtpSink::start();
    let app = TestApp::spawn_with(&[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "lists@example.org")]);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    make_list(&app.core, "example.org", "open", "admin@example.org", SubscriptionPolicy::Open);
    make_list(&app.core, "example.org", "held", "admin@example.org", SubscriptionPolicy::Moderate);
    make_list(&app.core, "example.org", "shut", "admin@example.org", SubscriptionPolicy::Closed);

    for missing in ["/p/subscribe/example.org/shut", "/p/subscribe/example.org/nope", "/p/subscribe/nope.org/open"] {
        let r = page_with(&app, missing, None, "en");
        assert_eq!(r.status, 404, "{missing}");
        assert!(r.body.starts_with("<!DOCTYPE html>"), "an HTML page, not JSON: {}", r.body);
        assert_eq!(post_form(&app, missing, None, "email=a%40example.net", "en").0, 404);
    }
    let form = page_with(&app, "/p/subscribe/example.org/open", None, "fr");
    assert_eq!(form.status, 200);
    assert!(form.body.contains("lang=\"fr\"") && form.body.contains("<label for=\"name\">"), "{}", form.body);

    let member = |l: &str| {
        call(
            &app,
            "GET",
            &format!("/api/v1/domains/example.org/lists/{l}/members/new%40example.net"),
            &[bearer(&key)],
            None,
        )
        .json()["data"]
            .clone()
    };
    for (n, (list, after)) in [("open", "active"), ("held", "pending")].into_iter().enumerate() {
        let (status, _, body) = post_form(
            &app,
            &format!("/p/subscribe/example.org/{list}"),
            None,
            "email=new%40example.net&name=Ann+%3Cb%3E",
            "en",
        );
        assert_eq!(status, 200, "{body}");
        let mail = sink.wait_for(n + 1, Duration::from_secs(10)).remove(n);
        assert!(mail.contains(&format!("{list}@example.org")), "{mail}");
        let m = member(list);
        assert_eq!((m["status"].as_str(), m["display_name"].as_str()), (Some("pending"), Some("Ann <b>")), "{m}");
        let confirm = link_path(&mail, "/p/confirm/");
        assert_eq!(app.client.request("POST", &confirm, &[], Some(b"")).status, 200);
        let m = member(list);
        assert_eq!(
            (m["status"].as_str(), m["consent_source"].as_str()),
            (Some(after), Some("double_opt_in")),
            "{list}: {m}"
        );
    }
    let pending =
        call(&app, "GET", "/api/v1/domains/example.org/lists/held/moderation/subscriptions", &[bearer(&key)], None);
    if pending.status == 200 {
        assert_eq!(pending.json()["meta"]["total"], 1, "held for a moderator: {}", pending.body);
    }
    // The form's limits are the login link's: three an hour for one address.
    let (status, _, _) = post_form(&app, "/p/subscribe/example.org/open", None, "email=new%40example.net", "en");
    assert_eq!(status, 200);
    let (status, head, _) = post_form(&app, "/p/subscribe/example.org/open", None, "email=new%40example.net", "en");
    assert_eq!(status, 429, "{head}");
    assert!(head.to_lowercase().contains("retry-after:"), "{head}");
}

#[test]
fn an_unknown_page_under_p_answers_the_html_404_page_not_json() {
    let app = TestApp::spawn();
    for path in ["/p/nope", "/p/me/nope", "/p/subscribe/example.org", "/p/"] {
        let r = page_with(&app, path, None, "fr");
        assert_eq!(r.status, 404, "{path}");
        assert!(r.header("content-type").is_some_and(|t| t.starts_with("text/html")), "{path}: {:?}", r.headers);
        assert!(
            r.body.starts_with("<!DOCTYPE html>") && r.body.contains("<html lang=\"fr\">"),
            "{path}: the page in the reader's language, not JSON: {}",
            r.body
        );
    }
    // The API keeps its JSON error, and so does a path that only starts like the pages.
    app.get("/api/v1/nope").expect_error(404, "not_found");
    app.get("/pages").expect_error(404, "not_found");
}
