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

fn list_id(core: &Services, d: &str, l: &str) -> i64 {
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
