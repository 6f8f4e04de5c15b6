//! Webhooks against the real server, a real HTTPS receiver on 127.0.0.1 with its own CA
//! (`COURRIER_EXTRA_CA`), a real DNS server (dnsmasq: `hooks.test` -> 127.0.0.1, so the delivery
//! goes by name, SNI and Host included) and the Standard Webhooks reference verifier (Python's
//! `standardwebhooks`). Loopback is allowed by `COURRIER_EGRESS_ALLOW`, as in production it
//! would not be.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::EventName;
use courrier_core::mailing::model::{DeliveryState, SubscriptionPolicy, WebhookId};
use courrier_core::storage::in_read;
use courrier_tests::harness::{Resp, SmtpSink, TestApp};
use courrier_tests::peers::{DnsServer, Receiver};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

struct World {
    app: TestApp,
    key: String,
    receiver: Receiver,
    _dns: DnsServer,
}

fn world(extra: &[(&str, &str)]) -> World {
    let receiver = Receiver::start();
    let dns = DnsServer::start(&["address=/hooks.test/127.0.0.1"]);
    let ca = receiver.ca.ca_pem.display().to_string();
    let dns_addr = dns.addr();
    let mut env = vec![
        ("COURRIER_EXTRA_CA", ca.as_str()),
        ("COURRIER_DNS_SERVER", dns_addr.as_str()),
        ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ("COURRIER_RETRY_BASE_SECS", "1"),
    ];
    env.extend_from_slice(extra);
    let app = TestApp::spawn_with(&env);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    World { app, key, receiver, _dns: dns }
}

fn post(w: &World, path: &str, body: Value) -> Resp {
    call(&w.app, "POST", path, &[bearer(&w.key)], Some(&body))
}

/// Creates a webhook on `path` of the receiver, by name; returns its id and secret.
fn hook(w: &World, path: &str, events: &[&str]) -> (i64, String) {
    let url = format!("https://hooks.test:{}{path}", w.receiver.port);
    let r = post(w, "/api/v1/webhooks", json!({ "url": url, "events": events }));
    assert_eq!(r.status, 201, "{}", r.body);
    let d = r.json()["data"].clone();
    (d["id"].as_i64().unwrap(), d["secret"].as_str().unwrap().to_owned())
}

fn add_member(w: &World, email: &str) {
    let r = post(w, &format!("{NEWS}/members"), json!({ "email": email }));
    assert_eq!(r.status, 201, "{}", r.body);
}

fn listed(w: &World, id: i64) -> Value {
    let r = call(&w.app, "GET", "/api/v1/webhooks", &[bearer(&w.key)], None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["data"].as_array().unwrap().iter().find(|h| h["id"] == id).cloned().unwrap_or(Value::Null)
}

fn path_is(p: &'static str) -> impl Fn(&Value) -> bool {
    move |r: &Value| r["path"] == p
}

#[test]
fn deliveries_carry_both_signatures_and_the_reference_verifier_accepts_only_the_genuine_one() {
    let w = world(&[]);
    let (id, secret) = hook(&w, "/ok", &["member.added"]);
    add_member(&w, "ann@example.net");
    let got = w.receiver.wait_for(1, path_is("/ok"));
    let req = &got[0];
    let h = &req["headers"];
    assert_eq!(h["x-svc-event"], "member.added");
    assert_eq!(h["host"], format!("hooks.test:{}", w.receiver.port), "Host is the name, not the address");
    let body: Value = serde_json::from_str(req["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["type"], "member.added");
    assert_eq!(body["data"]["email"], "ann@example.net");
    assert!(body["id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(h["x-svc-delivery"], body["id"]);
    assert_eq!(h["webhook-id"], body["id"]);
    let verdict = w.receiver.verify(&secret, req);
    assert_eq!(verdict["as_received"], "ok", "{verdict}");
    assert_eq!(verdict["svc_signature"], "ok", "{verdict}");
    assert_eq!(verdict["tampered_body"], "No matching signature found", "{verdict}");
    assert_eq!(verdict["wrong_secret"], "No matching signature found", "{verdict}");
    assert_eq!(verdict["six_minutes_later"], "Message timestamp too old", "{verdict}");
    let shown = listed(&w, id);
    assert!(shown["last_success_at"].is_string(), "{shown}");
    assert!(shown.get("secret").is_none(), "the secret is never listed: {shown}");
}

#[test]
fn a_receiver_written_from_the_contract_verifies_x_svc_signature_with_the_whole_secret_string() {
    // The receiver knows only mailing-service.md: "HMAC of the body keyed with the webhook
    // secret", the secret being the string creation returned, `whsec_` included. The Standard
    // Webhooks header stays keyed with the decoded part, checked by the reference package.
    let w = world(&[]);
    let (_, secret) = hook(&w, "/ok", &["member.added"]);
    assert!(secret.starts_with("whsec_"), "{secret}");
    add_member(&w, "contract@example.net");
    let got = w.receiver.wait_for(1, path_is("/ok"));
    let verdict = w.receiver.verify(&secret, &got[0]);
    assert_eq!(verdict["svc_signature"], "ok", "{verdict}");
    assert_eq!(verdict["svc_signature_with_decoded_key"], "mismatch", "{verdict}");
    assert_eq!(verdict["as_received"], "ok", "webhook-signature, by the reference verifier: {verdict}");
    // The test ping is signed the same way, with its own webhook's secret.
    let (ping_hook, ping_secret) = hook(&w, "/ping", &["list.suspended"]);
    let r = post(&w, &format!("/api/v1/webhooks/{ping_hook}/test"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let ping = &w.receiver.wait_for(1, path_is("/ping"))[0];
    let verdict = w.receiver.verify(&ping_secret, ping);
    assert_eq!((&verdict["svc_signature"], &verdict["as_received"]), (&json!("ok"), &json!("ok")), "{verdict}");
}

#[test]
fn a_500_is_retried_with_the_same_delivery_id_and_body() {
    let w = world(&[]);
    let (id, secret) = hook(&w, "/fail-once", &["member.added"]);
    add_member(&w, "bob@example.net");
    let got = w.receiver.wait_for(2, path_is("/fail-once"));
    assert_eq!((got[0]["status"].as_u64(), got[1]["status"].as_u64()), (Some(500), Some(200)));
    assert_eq!(got[0]["headers"]["x-svc-delivery"], got[1]["headers"]["x-svc-delivery"]);
    assert_eq!(got[0]["body"], got[1]["body"]);
    assert_eq!(w.receiver.verify(&secret, &got[1])["as_received"], "ok");
    // The failure is visible on the webhook, then the success.
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let shown = listed(&w, id);
        if shown["last_success_at"].is_string() {
            break shown;
        }
        assert!(Instant::now() < deadline, "{shown}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(shown["last_error"], "HTTP 500", "{shown}");
    assert!(shown["last_error_at"].is_string());
}

#[test]
fn a_redirect_is_not_followed_and_the_test_ping_is_signed() {
    let w = world(&[]);
    let (redirect, _) = hook(&w, "/redirect", &["list.suspended"]);
    let r = post(&w, &format!("/api/v1/webhooks/{redirect}/test"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.json()["data"].clone();
    assert_eq!((d["delivered"].as_bool(), d["status"].as_u64()), (Some(false), Some(302)), "{d}");
    assert!(d["error"].as_str().unwrap().contains("redirects are not followed"), "{d}");
    let all = w.receiver.requests();
    assert_eq!(all.len(), 1, "only the redirecting URL was called: {all:?}");
    assert_eq!(listed(&w, redirect)["last_error"], d["error"]);

    let (ok, secret) = hook(&w, "/ok", &["list.suspended"]);
    let r = post(&w, &format!("/api/v1/webhooks/{ok}/test"), json!({}));
    assert_eq!(r.json()["data"], json!({ "delivered": true, "status": 200, "error": null }), "{}", r.body);
    let ping = &w.receiver.wait_for(1, path_is("/ok"))[0];
    assert_eq!(ping["headers"]["x-svc-event"], "webhook.ping");
    assert_eq!(w.receiver.verify(&secret, ping)["as_received"], "ok");
}

#[test]
fn send_completed_is_delivered_once_for_a_send() {
    let sink = SmtpSink::start();
    let url = sink.url();
    let w = world(&[("COURRIER_SMTP_URL", url.as_str())]);
    let (id, secret) = hook(&w, "/ok", &["send.completed"]);
    add_member(&w, "a@example.net");
    add_member(&w, "b@example.net");
    let r = post(&w, &format!("{NEWS}/sends"), json!({ "subject": "Hello", "text": "Hi all" }));
    assert_eq!(r.status, 202, "{}", r.body);
    let send_id = r.json()["data"]["send_id"].as_i64().unwrap();
    let got = w.receiver.wait_for(1, path_is("/ok"));
    let body: Value = serde_json::from_str(got[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!((body["type"].as_str(), body["data"]["send_id"].as_i64()), (Some("send.completed"), Some(send_id)));
    assert_eq!(body["data"]["sent"], 2);
    assert_eq!(w.receiver.verify(&secret, &got[0])["as_received"], "ok");
    // Exactly once: one aggregate event, one delivery, delivered; nothing else queued for it.
    assert_eq!(events(&w.app.core, EventName::SendCompleted).len(), 1);
    let counts = in_read(&*w.app.core.mailing.store, |tx| tx.delivery_counts(WebhookId::from_stored(id))).unwrap();
    assert_eq!(counts, vec![(DeliveryState::Delivered, 1)]);
    assert_eq!(w.receiver.requests().len(), 1, "member.added was not asked for");
}

#[test]
fn every_webhook_route_refuses_what_the_contract_refuses() {
    let w = world(&[]);
    let url = format!("https://hooks.test:{}/ok", w.receiver.port);
    let create = |body: Value| post(&w, "/api/v1/webhooks", body);
    for (body, code) in [
        (json!({ "url": "http://hooks.test/ok", "events": ["member.added"] }), "url_refused"),
        (json!({ "url": "https://169.254.169.254/latest", "events": ["member.added"] }), "url_refused"),
        (json!({ "url": "https://10.0.0.1/", "events": ["member.added"] }), "url_refused"),
        (json!({ "url": "https://[::ffff:127.0.0.1]/", "events": ["member.added"] }), "url_refused"),
        (json!({ "url": "https://nowhere.test/", "events": ["member.added"] }), "url_refused"),
        (json!({ "url": "https://u:p@hooks.test/", "events": ["member.added"] }), "url_refused"),
        (json!({ "url": url, "events": ["member.deleted"] }), "validation_failed"),
        (json!({ "url": url, "events": [] }), "validation_failed"),
        (json!({ "url": url }), "validation_failed"),
        (json!({ "url": url, "events": ["member.added"], "secret": "mine" }), "validation_failed"),
        (json!({ "url": url, "events": ["member.added"], "domain_id": 0 }), "validation_failed"),
        (json!({ "url": url, "events": ["member.added"], "list_id": 1.5 }), "validation_failed"),
    ] {
        create(body.clone()).expect_error(422, code);
    }
    create(json!({ "url": url, "events": ["member.added"], "domain_id": 999 })).expect_error(404, "not_found");
    let r = call(&w.app, "POST", "/api/v1/webhooks", &[bearer(&w.key), ("content-type", "text/plain".into())], None);
    assert_eq!(r.status, 400, "{}", r.body);
    call(&w.app, "GET", "/api/v1/webhooks", &[], None).expect_error(401, "unauthenticated");
    let reader = make_user(&w.app.core, "reader@example.org", &[Role::SiteAdmin]);
    let read_key = make_key(&w.app.core, &reader, KeyScope::User, &[Perm::Read], None);
    call(&w.app, "GET", "/api/v1/webhooks", &[bearer(&read_key)], None).expect_error(403, "forbidden");
    call(&w.app, "GET", "/api/v1/webhooks?limit=0", &[bearer(&w.key)], None).expect_error(422, "invalid_pagination");
    call(&w.app, "DELETE", "/api/v1/webhooks/abc", &[bearer(&w.key)], None).expect_error(422, "invalid_path_id");
    call(&w.app, "DELETE", "/api/v1/webhooks/999", &[bearer(&w.key)], None).expect_error(404, "not_found");
    post(&w, "/api/v1/webhooks/999/test", json!({})).expect_error(404, "not_found");
    post(&w, "/api/v1/webhooks/0/test", json!({})).expect_error(422, "invalid_path_id");

    // A list owner manages webhooks of its list, not of the domain nor of the installation.
    let news_role = Role::Owner(
        courrier_core::kernel::DomainName::parse("example.org").unwrap(),
        courrier_core::kernel::ListName::parse("news").unwrap(),
    );
    let owner = make_user(&w.app.core, "owner@example.org", &[news_role]);
    let owner_key = make_key(&w.app.core, &owner, KeyScope::User, &Perm::ALL, None);
    let news = call(&w.app, "GET", NEWS, &[bearer(&w.key)], None).json()["data"]["id"].as_i64().unwrap();
    let domain_id = call(&w.app, "GET", "/api/v1/domains/example.org", &[bearer(&w.key)], None).json()["data"]["id"]
        .as_i64()
        .unwrap();
    let as_owner = |body: Value| call(&w.app, "POST", "/api/v1/webhooks", &[bearer(&owner_key)], Some(&body));
    let r = as_owner(json!({ "url": url, "events": ["member.added"], "list_id": news }));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["data"]["domain_id"], domain_id);
    as_owner(json!({ "url": url, "events": ["member.added"], "domain_id": domain_id })).expect_error(403, "forbidden");
    // Without a filter, someone who manages no domain nor list (a moderator) is refused.
    let moderator = make_user(
        &w.app.core,
        "moderator@example.org",
        &[Role::Moderator(
            courrier_core::kernel::DomainName::parse("example.org").unwrap(),
            courrier_core::kernel::ListName::parse("news").unwrap(),
        )],
    );
    let moderator_key = make_key(&w.app.core, &moderator, KeyScope::User, &[Perm::Read, Perm::Moderate], None);
    call(
        &w.app,
        "POST",
        "/api/v1/webhooks",
        &[bearer(&moderator_key)],
        Some(&json!({ "url": url, "events": ["member.added"] })),
    )
    .expect_error(403, "forbidden");
    let owned = r.json()["data"]["id"].as_i64().unwrap();
    let theirs = hook(&w, "/ok", &["member.added"]).0;
    let r = call(&w.app, "GET", "/api/v1/webhooks", &[bearer(&owner_key)], None);
    let ids: Vec<i64> = r.json()["data"].as_array().unwrap().iter().map(|h| h["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![owned], "the owner sees its list's webhook only");
    call(&w.app, "DELETE", &format!("/api/v1/webhooks/{theirs}"), &[bearer(&owner_key)], None)
        .expect_error(404, "not_found");
    let r = call(&w.app, "DELETE", &format!("/api/v1/webhooks/{owned}"), &[bearer(&owner_key)], None);
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(listed(&w, owned).is_null());
}

/// Deliveries queued for a webhook so far, whatever their state.
fn queued_for(w: &World, id: i64) -> u64 {
    let counts = in_read(&*w.app.core.mailing.store, |tx| tx.delivery_counts(WebhookId::from_stored(id))).unwrap();
    counts.iter().map(|(_, n)| n).sum()
}

fn emails_at(w: &World, path: &'static str, n: usize) -> Vec<String> {
    let mut got: Vec<String> = w
        .receiver
        .wait_for(n, path_is(path))
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(r["body"].as_str().unwrap()).unwrap()["data"]["email"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    got.sort();
    got
}

#[test]
fn a_webhook_without_filter_gets_the_events_of_its_creators_domains_and_lists_only() {
    use courrier_core::kernel::{DomainName, ListName};
    let w = world(&[]);
    make_list(&w.app.core, "example.org", "extra", "admin@example.org", SubscriptionPolicy::Open);
    make_list(&w.app.core, "other.org", "misc", "admin@example.org", SubscriptionPolicy::Open);
    make_list(&w.app.core, "other.org", "more", "admin@example.org", SubscriptionPolicy::Open);
    let d = |n: &str| DomainName::parse(n).unwrap();
    let l = |n: &str| ListName::parse(n).unwrap();
    let dadmin = make_user(&w.app.core, "dadmin@example.org", &[Role::DomainAdmin(d("example.org"))]);
    let owner = make_user(&w.app.core, "owner@other.org", &[Role::Owner(d("other.org"), l("misc"))]);
    let dadmin_key = make_key(&w.app.core, &dadmin, KeyScope::User, &Perm::ALL, None);
    let owner_key = make_key(&w.app.core, &owner, KeyScope::User, &Perm::ALL, None);
    let create = |key: &str, path: &str| {
        let body =
            json!({ "url": format!("https://hooks.test:{}{path}", w.receiver.port), "events": ["member.added"] });
        let r = call(&w.app, "POST", "/api/v1/webhooks", &[bearer(key)], Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!((&r.json()["data"]["domain_id"], &r.json()["data"]["list_id"]), (&Value::Null, &Value::Null));
        r.json()["data"]["id"].as_i64().unwrap()
    };
    let by_dadmin = create(&dadmin_key, "/dadmin");
    let by_owner = create(&owner_key, "/owner");
    let (all, _) = hook(&w, "/all", &["member.added"]);
    // Each creator sees and manages its own webhook, not the other's.
    let ids = |key: &str| -> Vec<i64> {
        let r = call(&w.app, "GET", "/api/v1/webhooks", &[bearer(key)], None);
        r.json()["data"].as_array().unwrap().iter().map(|h| h["id"].as_i64().unwrap()).collect()
    };
    assert_eq!(ids(&dadmin_key), vec![by_dadmin]);
    assert_eq!(ids(&owner_key), vec![by_owner]);
    call(&w.app, "DELETE", &format!("/api/v1/webhooks/{by_dadmin}"), &[bearer(&owner_key)], None)
        .expect_error(404, "not_found");

    for (list, email) in [
        ("/api/v1/domains/example.org/lists/news", "a@news.example"),
        ("/api/v1/domains/example.org/lists/extra", "b@extra.example"),
        ("/api/v1/domains/other.org/lists/misc", "c@misc.example"),
        ("/api/v1/domains/other.org/lists/more", "d@more.example"),
    ] {
        let r = post(&w, &format!("{list}/members"), json!({ "email": email }));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // The site admin's webhook has all four: every event is fanned out by then.
    assert_eq!(emails_at(&w, "/all", 4).len(), 4);
    assert_eq!((queued_for(&w, by_dadmin), queued_for(&w, by_owner), queued_for(&w, all)), (2, 1, 4));
    assert_eq!(emails_at(&w, "/dadmin", 2), vec!["a@news.example", "b@extra.example"], "the domain admin's domain");
    assert_eq!(emails_at(&w, "/owner", 1), vec!["c@misc.example"], "the owner's list, not its neighbour");

    // A revoked role stops the events it gave, from the next event on.
    let r = call(
        &w.app,
        "DELETE",
        &format!("/api/v1/users/{}/roles", dadmin.id),
        &[bearer(&w.key)],
        Some(&json!({ "role": "domain_admin", "domain": "example.org" })),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    add_member(&w, "e@news.example");
    assert_eq!(emails_at(&w, "/all", 5).len(), 5);
    assert_eq!(queued_for(&w, by_dadmin), 2, "nothing more once the role is revoked");
}
