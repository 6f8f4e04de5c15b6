//! Domains, lists and members against the real server: every outcome and refusal of the
//! contract, the confirmation over real SMTP, Idempotency-Key under concurrency, and CSV import
//! and export round trips.

use crate::access::{PASSWORD, bearer, call, login, make_key, make_list, make_user};
use courrier_cli::server::Services;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::{DomainName, EventName, ListName};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_core::storage::in_read;
use courrier_tests::harness::{Resp, SmtpSink, TestApp, run_cli, run_cli_in};
use serde_json::{Value, json};
use std::time::Duration;

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

/// A server with a site admin, example.org and its list `news` under `policy`, and an all-perms key.
fn setup(policy: SubscriptionPolicy, env: &[(&str, &str)]) -> (TestApp, String) {
    let app = TestApp::spawn_with(env);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", policy);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    (app, key)
}

fn post(app: &TestApp, key: &str, path: &str, body: Value) -> Resp {
    call(app, "POST", path, &[bearer(key)], Some(&body))
}

fn get(app: &TestApp, key: &str, path: &str) -> Resp {
    call(app, "GET", path, &[bearer(key)], None)
}

/// The `data` of every recorded event of one name, oldest first.
pub(crate) fn events(core: &Services, name: EventName) -> Vec<Value> {
    in_read(&*core.mailing.store, |tx| tx.events_after(None, 100_000))
        .unwrap()
        .into_iter()
        .filter(|e| e.name == name)
        .map(|e| e.data)
        .collect()
}

fn add(app: &TestApp, key: &str, email: &str) -> Resp {
    post(app, key, &format!("{NEWS}/members"), json!({ "email": email }))
}

#[test]
fn domains_are_created_pending_and_changed_by_who_administers_them() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    let resp = post(&app, &key, "/api/v1/domains", json!({ "name": "Lists.Example.NET", "dkim_selector": "s2026" }));
    assert_eq!(resp.status, 201, "{}", resp.body);
    let d = resp.json()["data"].clone();
    assert_eq!((d["name"].as_str(), d["status"].as_str()), (Some("lists.example.net"), Some("pending_mta")));
    assert_eq!(d["dns_ok"], Value::Null, "never checked is null, not false");
    post(&app, &key, "/api/v1/domains", json!({ "name": "lists.example.net" })).expect_error(409, "conflict");
    post(&app, &key, "/api/v1/domains", json!({ "name": "not a domain" })).expect_error(422, "validation_failed");
    post(&app, &key, "/api/v1/domains", json!({ "name": "x.org", "dkim_selector": "-bad" }))
        .expect_error(422, "validation_failed");
    post(&app, &key, "/api/v1/domains", json!({ "name": "y.org", "extra": 1 })).expect_error(422, "validation_failed");

    let resp = call(
        &app,
        "PATCH",
        "/api/v1/domains/lists.example.net",
        &[bearer(&key)],
        Some(&json!({ "status": "active", "dkim_selector": "" })),
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.json()["data"]["status"], "active");
    assert_eq!(resp.json()["data"]["dkim_selector"], Value::Null, "an empty selector clears it");
    call(&app, "PATCH", "/api/v1/domains/lists.example.net", &[bearer(&key)], Some(&json!({ "status": "gone" })))
        .expect_error(422, "validation_failed");

    let all = get(&app, &key, "/api/v1/domains").json();
    assert_eq!(all["meta"]["total"], 2);
    let pending = get(&app, &key, "/api/v1/domains?status=pending_mta").json();
    assert_eq!(pending["meta"]["total"], 1);
    assert_eq!(pending["data"][0]["name"], "example.org");
    get(&app, &key, "/api/v1/domains?status=nope").expect_error(422, "validation_failed");
    get(&app, &key, "/api/v1/domains/unknown.org").expect_error(404, "not_found");
    get(&app, &key, "/api/v1/domains/not..valid").expect_error(404, "not_found");

    // A domain admin of another domain: the domain does not exist for it; a list owner reads its
    // domain and may not change it.
    let other = make_user(
        &app.core,
        "other@example.org",
        &[Role::DomainAdmin(DomainName::parse("lists.example.net").unwrap())],
    );
    let other_key = make_key(&app.core, &other, KeyScope::User, &Perm::ALL, None);
    get(&app, &other_key, "/api/v1/domains/example.org").expect_error(404, "not_found");
    post(&app, &other_key, "/api/v1/domains", json!({ "name": "z.org" })).expect_error(403, "forbidden");
    let listed = get(&app, &other_key, "/api/v1/domains").json();
    assert_eq!(listed["meta"]["total"], 1, "{listed}");
    let owner = make_user(
        &app.core,
        "owner@example.org",
        &[Role::Owner(DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap())],
    );
    let owner_key = make_key(&app.core, &owner, KeyScope::User, &Perm::ALL, None);
    assert_eq!(get(&app, &owner_key, "/api/v1/domains/example.org").status, 200);
    call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&owner_key)], Some(&json!({ "status": "active" })))
        .expect_error(403, "forbidden");
}

#[test]
fn lists_are_created_with_their_owner_patched_field_by_field_and_suspended_once() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    let body = json!({ "name": "jobs", "display_name": "Jobs", "owner_email": "nobody@example.org" });
    post(&app, &key, "/api/v1/domains/example.org/lists", body).expect_error(422, "validation_failed");
    make_user(&app.core, "jane@example.org", &[]);
    let body = json!({ "name": "jobs", "display_name": "Jobs", "owner_email": "jane@example.org", "type": "announce" });
    let resp = post(&app, &key, "/api/v1/domains/example.org/lists", body.clone());
    assert_eq!(resp.status, 201, "{}", resp.body);
    let l = resp.json()["data"].clone();
    assert_eq!((l["address"].as_str(), l["type"].as_str()), (Some("jobs@example.org"), Some("announce")));
    assert_eq!(l["subscription_policy"], "confirm", "the domain's default");
    post(&app, &key, "/api/v1/domains/example.org/lists", body).expect_error(409, "conflict");
    post(
        &app,
        &key,
        "/api/v1/domains/example.org/lists",
        json!({ "name": "Bad Name!", "display_name": "x", "owner_email": "jane@example.org" }),
    )
    .expect_error(422, "validation_failed");
    post(
        &app,
        &key,
        "/api/v1/domains/nowhere.org/lists",
        json!({ "name": "a", "display_name": "x", "owner_email": "jane@example.org" }),
    )
    .expect_error(404, "not_found");

    // The owner got the role: with a user key it sees its list and only it.
    let jane = courrier_core::access::users::by_email(
        &app.core.access,
        &courrier_core::kernel::EmailAddress::parse("jane@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let jane_key = make_key(&app.core, &jane, KeyScope::User, &[Perm::Read], None);
    let seen = get(&app, &jane_key, "/api/v1/domains/example.org/lists").json();
    assert_eq!(seen["meta"]["total"], 1, "{seen}");
    assert_eq!(seen["data"][0]["name"], "jobs");
    let keys = seen["data"][0].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys, ["display_name", "id", "name", "send_suspended", "status", "type"], "the contract's summary");
    let admin_view = get(&app, &key, "/api/v1/domains/example.org/lists").json();
    assert_eq!(admin_view["meta"]["total"], 2);
    let admin = courrier_core::access::users::by_email(
        &app.core.access,
        &courrier_core::kernel::EmailAddress::parse("admin@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let list_key = make_key(
        &app.core,
        &admin,
        KeyScope::List(DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap()),
        &[Perm::Read],
        None,
    );
    let list_view = get(&app, &list_key, "/api/v1/domains/example.org/lists").json();
    assert_eq!((list_view["meta"]["total"].as_u64(), list_view["data"][0]["name"].as_str()), (Some(1), Some("news")));
    get(&app, &jane_key, "/api/v1/domains/example.org/lists/news").expect_error(404, "not_found");

    let patch =
        |body: Value| call(&app, "PATCH", "/api/v1/domains/example.org/lists/jobs", &[bearer(&key)], Some(&body));
    let resp = patch(json!({ "subject_tag": "[jobs]", "footer_text": "Bye\nnow", "max_message_kb": 200 }));
    assert_eq!(resp.status, 200, "{}", resp.body);
    let resp = patch(json!({ "display_name": "Jobs board" }));
    let l = resp.json()["data"].clone();
    assert_eq!(
        (l["subject_tag"].as_str(), l["display_name"].as_str()),
        (Some("[jobs]"), Some("Jobs board")),
        "absent fields untouched"
    );
    let l = patch(json!({ "subject_tag": "", "footer_html": "" })).json()["data"].clone();
    assert_eq!(
        (l["subject_tag"].clone(), l["footer_text"].as_str()),
        (Value::Null, Some("Bye\nnow")),
        "an empty string clears"
    );
    patch(json!({ "subscription_policy": "whatever" })).expect_error(422, "validation_failed");
    patch(json!({ "max_message_kb": 0 })).expect_error(422, "validation_failed");
    patch(json!({ "subject_tag": "a\u{7}b" })).expect_error(422, "validation_failed");
    patch(json!({ "unknown": 1 })).expect_error(422, "validation_failed");

    let suspend = || post(&app, &key, "/api/v1/domains/example.org/lists/jobs/suspend", json!({}));
    assert_eq!(suspend().json()["data"]["send_suspended"], true);
    assert_eq!(suspend().status, 200, "idempotent");
    assert_eq!(events(&app.core, EventName::ListSuspended).len(), 1, "one event for one suspension");
    let resumed = post(&app, &key, "/api/v1/domains/example.org/lists/jobs/resume", json!({}));
    assert_eq!(resumed.json()["data"]["send_suspended"], false);
    let read_only = make_key(&app.core, &admin, KeyScope::User, &[Perm::Read], None);
    post(&app, &read_only, "/api/v1/domains/example.org/lists/jobs/suspend", json!({})).expect_error(403, "forbidden");
}

#[test]
fn adding_members_follows_the_policy_and_refuses_what_the_contract_names() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    let resp = post(
        &app,
        &key,
        &format!("{NEWS}/members"),
        json!({ "email": "Ann@Example.net", "name": "Ann", "consent_source": "signup-form", "consent_evidence": "ticked box at 10:02 from 192.0.2.7" }),
    );
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(resp.json()["data"]["status"], "active");
    let id = resp.json()["data"]["member_id"].as_i64().unwrap();
    add(&app, &key, "ann@example.NET").expect_error(409, "already_subscribed");
    let added = events(&app.core, EventName::MemberAdded);
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["member_id"], id);

    let m = get(&app, &key, &format!("{NEWS}/members/{id}")).json()["data"].clone();
    assert_eq!(
        (m["email"].as_str(), m["display_name"].as_str(), m["consent_source"].as_str()),
        (Some("Ann@example.net"), Some("Ann"), Some("signup-form"))
    );
    assert!(m["consent_at"].is_string() && m["subscribed_at"].is_string());
    assert_eq!(m["last_bounce_at"], Value::Null);
    for path in [
        format!("{NEWS}/members/{id}"),
        format!("{NEWS}/members/ann%40example.net"),
        format!("{NEWS}/members?limit=10"),
    ] {
        assert!(!get(&app, &key, &path).body.contains("ticked box"), "consent evidence is never exposed ({path})");
    }
    let by_address = get(&app, &key, &format!("{NEWS}/members/ANN%40example.net"));
    assert_eq!(by_address.json()["data"]["id"], id, "{}", by_address.body);
    get(&app, &key, &format!("{NEWS}/members/999999")).expect_error(404, "not_found");
    get(&app, &key, &format!("{NEWS}/members/nobody%40example.net")).expect_error(404, "not_found");
    get(&app, &key, &format!("{NEWS}/members/not-an-address")).expect_error(404, "not_found");

    // A member of another list is not found through this one.
    make_list(&app.core, "example.org", "jobs", "admin@example.org", SubscriptionPolicy::Open);
    get(&app, &key, &format!("/api/v1/domains/example.org/lists/jobs/members/{id}")).expect_error(404, "not_found");

    post(&app, &key, &format!("{NEWS}/members"), json!({ "email": "b@example.net", "delivery_mode": "weekly" }))
        .expect_error(422, "validation_failed");
    post(&app, &key, &format!("{NEWS}/members"), json!({ "email": "not an address" }))
        .expect_error(422, "validation_failed");
    post(&app, &key, &format!("{NEWS}/members"), json!({ "email": "b@example.net", "force": true }))
        .expect_error(422, "consent_evidence_required");

    let patch = |policy: &str| {
        let r = call(&app, "PATCH", NEWS, &[bearer(&key)], Some(&json!({ "subscription_policy": policy })));
        assert_eq!(r.status, 200, "{}", r.body);
    };
    patch("confirm");
    let resp = add(&app, &key, "c@example.net");
    assert_eq!((resp.status, resp.json()["data"]["status"].as_str()), (202, Some("pending_confirmation")));
    patch("moderate");
    let resp = add(&app, &key, "d@example.net");
    assert_eq!((resp.status, resp.json()["data"]["status"].as_str()), (202, Some("pending_moderation")));
    assert_eq!(events(&app.core, EventName::SubscriptionPending).len(), 2);
    patch("closed");
    add(&app, &key, "e@example.net").expect_error(403, "subscription_closed");
    let forced = post(
        &app,
        &key,
        &format!("{NEWS}/members"),
        json!({ "email": "e@example.net", "force": true, "consent_evidence": "paper form #12", "delivery_mode": "digest" }),
    );
    assert_eq!((forced.status, forced.json()["data"]["status"].as_str()), (201, Some("active")), "{}", forced.body);

    // Permissions: members:write to add, read to see.
    let admin = courrier_core::access::users::by_email(
        &app.core.access,
        &courrier_core::kernel::EmailAddress::parse("admin@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let reader = make_key(&app.core, &admin, KeyScope::User, &[Perm::Read], None);
    add(&app, &reader, "f@example.net").expect_error(403, "forbidden");
    let stranger = make_user(&app.core, "stranger@example.org", &[]);
    let stranger_key = make_key(&app.core, &stranger, KeyScope::User, &[Perm::Read], None);
    get(&app, &stranger_key, &format!("{NEWS}/members")).expect_error(404, "not_found");
}

#[test]
fn the_member_listing_applies_every_filter_in_the_query() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    for (email, mode) in [
        ("a_b@example.net", "regular"),
        ("axb@example.net", "digest"),
        ("x%y@example.net", "nomail"),
        ("Zed@Other.ORG", "regular"),
    ] {
        let r = post(&app, &key, &format!("{NEWS}/members"), json!({ "email": email, "delivery_mode": mode }));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let total = |q: &str| {
        let r = get(&app, &key, &format!("{NEWS}/members?{q}"));
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        r.json()["meta"]["total"].as_u64().unwrap()
    };
    assert_eq!(total(""), 4);
    assert_eq!(total("delivery_mode=regular"), 2);
    assert_eq!(total("status=active&delivery_mode=digest"), 1);
    assert_eq!(total("status=pending"), 0);
    assert_eq!(total("email_contains=a_b"), 1, "_ is a plain character");
    assert_eq!(total("email_contains=x%25y"), 1, "% is a plain character");
    assert_eq!(total("email_contains=ZED%40other"), 1, "case-insensitive");
    assert_eq!(total("email_contains=@e"), 3, "two characters");
    assert_eq!(total("email_contains=example.net&delivery_mode=nomail"), 1);
    assert_eq!(total("min_bounce_score=0"), 4);
    assert_eq!(total("min_bounce_score=1"), 0);
    let page = get(&app, &key, &format!("{NEWS}/members?limit=2&offset=1")).json();
    assert_eq!(
        (page["meta"]["total"].as_u64(), page["data"].as_array().unwrap().len()),
        (Some(4), 2),
        "total ignores the window"
    );
    let ids: Vec<i64> = get(&app, &key, &format!("{NEWS}/members")).json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ordered by id: {ids:?}");
    for bad in [
        "status=gone",
        "delivery_mode=weekly",
        "min_bounce_score=x",
        "min_bounce_score=-1",
        "email_contains=a",
        "limit=501",
        "offset=-1",
        "colour=red",
        "status=active&status=pending",
    ] {
        let r = get(&app, &key, &format!("{NEWS}/members?{bad}"));
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
    }
}

#[test]
fn confirmation_links_arrive_by_smtp_and_activate_once() {
    let sink = SmtpSink::start();
    let (app, key) = setup(
        SubscriptionPolicy::Confirm,
        &[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "lists@example.org")],
    );
    let resp = add(&app, &key, "Sub@Example.net");
    assert_eq!(resp.status, 202, "{}", resp.body);
    let id = resp.json()["data"]["member_id"].as_i64().unwrap();
    let mail = sink.wait_for(1, Duration::from_secs(10)).remove(0);
    assert!(mail.contains("news@example.org"), "{mail}");
    let link = mail.lines().find(|l| l.contains("/p/confirm/")).expect("a confirmation link").trim().to_owned();
    let path = &link[link.find("/p/confirm/").unwrap()..];
    let page = app.get(path);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Sub@example.net") && page.body.contains("<form method=\"post\""), "{}", page.body);
    assert_eq!(
        get(&app, &key, &format!("{NEWS}/members/{id}")).json()["data"]["status"],
        "pending",
        "a GET confirms nothing"
    );
    let done = app.client.request("POST", path, &[], Some(b""));
    assert_eq!(done.status, 200, "{}", done.body);
    let m = get(&app, &key, &format!("{NEWS}/members/{id}")).json()["data"].clone();
    assert_eq!((m["status"].as_str(), m["consent_source"].as_str()), (Some("active"), Some("double_opt_in")));
    assert_eq!(events(&app.core, EventName::SubscriptionConfirmed).len(), 1);
    assert_eq!(events(&app.core, EventName::MemberAdded).len(), 1);
    assert_eq!(app.client.request("POST", path, &[], Some(b"")).status, 404, "single use");
    assert_eq!(app.get(path).status, 404);
    assert_eq!(app.get("/p/confirm/not-a-token").status, 404);
}

#[test]
fn one_idempotency_key_executes_once_among_twenty_concurrent_requests() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    let body = json!({ "email": "once@example.net" }).to_string();
    let statuses: Vec<(u16, String, Option<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|_| {
                s.spawn(|| {
                    let auth = format!("Bearer {key}");
                    let h = [
                        ("authorization", auth.as_str()),
                        ("content-type", "application/json"),
                        ("idempotency-key", "k-1"),
                    ];
                    let r = app.client.request("POST", &format!("{NEWS}/members"), &h, Some(body.as_bytes()));
                    let replay = r.header("idempotent-replay").map(str::to_owned);
                    (r.status, r.body, replay)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created: Vec<_> = statuses.iter().filter(|(s, _, replay)| *s == 201 && replay.is_none()).collect();
    assert_eq!(created.len(), 1, "exactly one execution: {statuses:?}");
    for (status, body, replay) in &statuses {
        match status {
            201 => assert!(replay.is_none() || replay.as_deref() == Some("true")),
            409 => assert!(body.contains("idempotency_in_progress"), "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(get(&app, &key, &format!("{NEWS}/members?email_contains=once")).json()["meta"]["total"], 1);
    let member_id = created[0].1.clone();
    let auth = format!("Bearer {key}");
    let send = |k: &str, b: &str| {
        app.client.request(
            "POST",
            &format!("{NEWS}/members"),
            &[("authorization", auth.as_str()), ("content-type", "application/json"), ("idempotency-key", k)],
            Some(b.as_bytes()),
        )
    };
    let again = send("k-1", &body);
    assert_eq!((again.status, again.header("idempotent-replay")), (201, Some("true")));
    let original: Value = serde_json::from_str(&member_id).unwrap();
    assert_eq!(again.json()["data"], original["data"], "the stored answer");
    assert_ne!(again.json()["meta"]["request_id"], original["meta"]["request_id"], "this request's own meta");
    send("k-1", &json!({ "email": "other@example.net" }).to_string()).expect_error(409, "idempotency_conflict");
    // A refusal is an outcome too: replayed, not re-executed.
    let refused = send("k-2", &json!({ "email": "once@example.net" }).to_string());
    refused.expect_error(409, "already_subscribed");
    let replayed = send("k-2", &json!({ "email": "once@example.net" }).to_string());
    assert_eq!((replayed.status, replayed.header("idempotent-replay")), (409, Some("true")));
    send("", &body).expect_error(422, "validation_failed");
    // So is a body that does not parse: refused before any write, stored as the key's answer.
    let bad = json!({ "email": "not an address" }).to_string();
    send("k-4", &bad).expect_error(422, "validation_failed");
    let replayed = send("k-4", &bad);
    assert_eq!((replayed.status, replayed.header("idempotent-replay")), (422, Some("true")));

    let session = login(&app, "admin@example.org");
    let r = app.client.request(
        "POST",
        &format!("{NEWS}/members"),
        &[
            ("cookie", session.cookie.as_str()),
            ("x-csrf-token", session.csrf.as_str()),
            ("content-type", "application/json"),
            ("idempotency-key", "k-3"),
        ],
        Some(json!({ "email": "s@example.net" }).to_string().as_bytes()),
    );
    r.expect_error(422, "idempotency_unsupported");
    let _ = PASSWORD;
}

fn import_csv(app: &TestApp, key: &str, list_path: &str, query: &str, csv: &str) -> Resp {
    let auth = format!("Bearer {key}");
    app.client.request(
        "POST",
        &format!("{list_path}/members/import{query}"),
        &[("authorization", auth.as_str()), ("content-type", "text/csv")],
        Some(csv.as_bytes()),
    )
}

#[test]
fn csv_import_reports_each_row_and_an_export_imports_back() {
    let (app, key) = setup(SubscriptionPolicy::Confirm, &[]);
    add(&app, &key, "existing@example.net");
    let csv = "email,display_name,delivery_mode\r\n\
               one@example.net,One,regular\r\n\
               two@example.net,\"Two, the second\",digest\r\n\
               not-an-address,Bad,regular\r\n\
               three@example.net,,\r\n\
               four@example.net,Four,weekly\r\n\
               ONE@example.net,Dup,regular\r\n\
               existing@example.net,Again,regular\r\n\
               =cmd@example.net,=HYPERLINK(\"http://x\"),nomail\r\n";
    import_csv(&app, &key, NEWS, "", csv).expect_error(422, "consent_evidence_required");
    let resp = import_csv(&app, &key, NEWS, "?consent_evidence=signed%20forms%202026", csv);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let r = resp.json()["data"].clone();
    assert_eq!(
        (
            r["total"].as_u64(),
            r["added"].as_u64(),
            r["skipped"].as_u64(),
            r["errors"].as_u64(),
            r["mode_coerced"].as_u64()
        ),
        (Some(8), Some(5), Some(2), Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(r["error_samples"][0]["row"], 4, "the header is row 1: {r}");
    assert_eq!(events(&app.core, EventName::MemberAdded).len(), 5, "each added row emits member.added");
    let imported = get(&app, &key, &format!("{NEWS}/members/four%40example.net")).json()["data"].clone();
    assert_eq!(
        (imported["status"].as_str(), imported["delivery_mode"].as_str()),
        (Some("active"), Some("regular")),
        "the policy does not hold imported rows; an unknown mode is regular"
    );

    let export = get(&app, &key, &format!("{NEWS}/members/export"));
    assert_eq!(export.status, 200);
    assert!(export.header("content-type").unwrap().starts_with("text/csv"));
    let lines: Vec<&str> = export.body.lines().collect();
    assert_eq!(lines[0], "email,display_name,delivery_mode,status,subscribed_at");
    assert_eq!(lines.len(), 1 + 6, "{}", export.body);
    assert!(
        export.body.contains("'=cmd@example.net,\"'=HYPERLINK(\"\"http://x\"\")\",nomail,active,"),
        "formulas neutralised: {}",
        export.body
    );
    assert!(export.body.contains("\"Two, the second\""));
    let only_digest = get(&app, &key, &format!("{NEWS}/members/export?delivery_mode=digest"));
    assert_eq!(only_digest.body.lines().count(), 2, "{}", only_digest.body);
    get(&app, &key, &format!("{NEWS}/members/export?email_contains=one")).expect_error(422, "validation_failed");

    // The export goes into another list as it came out.
    make_list(&app.core, "example.org", "copy", "admin@example.org", SubscriptionPolicy::Closed);
    let copy = "/api/v1/domains/example.org/lists/copy";
    let back = import_csv(&app, &key, copy, "?consent_evidence=copied", &export.body);
    assert_eq!(back.json()["data"]["added"], 6, "{}", back.body);
    let again = get(&app, &key, &format!("{copy}/members/export")).body;
    // The three columns import reads (status and date are the new list's own).
    let strip = |s: &str| s.lines().map(|l| l.rsplitn(3, ',').nth(2).unwrap().to_owned()).collect::<Vec<_>>();
    let (mut a, mut b) = (strip(&export.body), strip(&again));
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same members, names and modes");

    // Multipart: the evidence as a field before the file part; after it, it comes too late.
    let auth = format!("Bearer {key}");
    let form = |parts: &[(&str, &str)]| {
        let mut body = String::new();
        for (name, value) in parts {
            body.push_str(&format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{}\r\n\r\n{value}\r\n",
                if *name == "file" { "; filename=\"m.csv\"" } else { "" }
            ));
        }
        body.push_str("--XyZ--\r\n");
        app.client.request(
            "POST",
            &format!("{NEWS}/members/import"),
            &[("authorization", auth.as_str()), ("content-type", "multipart/form-data; boundary=XyZ")],
            Some(body.as_bytes()),
        )
    };
    let ok = form(&[("consent_evidence", "form at the fair"), ("file", "email\nmulti@example.net\n")]);
    assert_eq!(ok.json()["data"]["added"], 1, "{}", ok.body);
    form(&[("file", "email\nlate@example.net\n"), ("consent_evidence", "too late")])
        .expect_error(422, "consent_evidence_required");
    form(&[("consent_evidence", "x")]).expect_error(422, "validation_failed");
    import_csv(&app, &key, NEWS, "?consent_evidence=x", "name\nfoo\n").expect_error(422, "validation_failed");
    import_csv(&app, &key, NEWS, "?consent_evidence=x", "").expect_error(422, "validation_failed");
    let wrong_type = app.client.request(
        "POST",
        &format!("{NEWS}/members/import?consent_evidence=x"),
        &[("authorization", auth.as_str()), ("content-type", "application/json")],
        Some(b"{}"),
    );
    wrong_type.expect_error(400, "malformed_body");
}

/// An import of three batches (20,000 rows each) with refused rows in each: the report counts
/// every row and samples the first ten refusals in the document's order, whichever thread wrote
/// their batch; the members are there in the document's order.
#[test]
fn an_import_across_batches_reports_every_row_in_document_order() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    add(&app, &key, "m00000007@example.net");
    let mut csv = String::from("email,display_name,delivery_mode\n");
    let (mut refused, mut coerced, mut good) = (Vec::new(), 0u64, Vec::new());
    for n in 0..45_000u64 {
        let line = n + 2; // the header is row 1
        let row = match n {
            _ if n % 4_999 == 3 => {
                refused.push((line, "no @"));
                format!("bad{n}.example.net,Bad,regular")
            }
            _ if n % 9_001 == 17 => {
                refused.push((line, "email is empty"));
                format!(",Nobody {n},digest")
            }
            _ if n % 7_919 == 5 => {
                refused.push((line, "display_name"));
                format!("m{n:08}@example.net,{},regular", "x".repeat(300))
            }
            _ if n % 3_331 == 8 => {
                coerced += 1;
                good.push(format!("m{n:08}@example.net"));
                format!("m{n:08}@example.net,Weekly,weekly")
            }
            _ => {
                good.push(format!("m{n:08}@example.net"));
                format!("m{n:08}@example.net,M {n},{}", ["regular", "digest", "nomail"][n as usize % 3])
            }
        };
        csv.push_str(&row);
        csv.push('\n');
    }
    let resp = import_csv(&app, &key, NEWS, "?consent_evidence=three%20batches", &csv);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let r = resp.json()["data"].clone();
    let skipped = u64::from(good.iter().any(|e| e == "m00000007@example.net"));
    assert_eq!(
        (r["total"].as_u64(), r["added"].as_u64(), r["skipped"].as_u64(), r["errors"].as_u64()),
        (Some(45_000), Some(good.len() as u64 - skipped), Some(skipped), Some(refused.len() as u64)),
        "{r}"
    );
    assert_eq!(r["mode_coerced"].as_u64(), Some(coerced), "{r}");
    let samples = r["error_samples"].as_array().unwrap();
    assert_eq!(samples.len(), 10, "{r}");
    refused.sort();
    for (sample, (row, why)) in samples.iter().zip(&refused) {
        assert_eq!(sample["row"].as_u64(), Some(*row), "{r}");
        assert!(sample["reason"].as_str().unwrap().contains(why), "row {row}: {sample}");
    }
    // The members, in id order, are the document's accepted rows in its order.
    let (mut listed, mut offset) = (Vec::new(), 0);
    loop {
        let page = get(&app, &key, &format!("{NEWS}/members?limit=500&offset={offset}")).json();
        let items = page["data"].as_array().unwrap().clone();
        if items.is_empty() {
            break;
        }
        offset += items.len();
        listed.extend(items.iter().map(|m| m["email"].as_str().unwrap().to_owned()));
    }
    let mut expected = vec!["m00000007@example.net".to_owned()];
    expected.extend(good.into_iter().filter(|e| e != "m00000007@example.net"));
    assert_eq!(listed.len(), expected.len());
    assert!(listed == expected, "the members in the document's order");
}

#[test]
fn an_import_past_25_mib_keeps_the_rows_before_the_cut_and_answers_413() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    let mut csv = String::from("email,display_name,delivery_mode,notes\n");
    let mut n = 0;
    while csv.len() <= 26 * 1024 * 1024 {
        // Wide rows (an extra column the import ignores) keep the row count, and the test, short.
        csv.push_str(&format!("member{n:08}@example.net,Member {n:08},regular,{}\n", "x".repeat(2000)));
        n += 1;
    }
    let resp = import_csv(&app, &key, NEWS, "?consent_evidence=bulk", &csv);
    let body = resp.expect_error(413, "document_too_large");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    let imported: u64 =
        message.split_whitespace().filter_map(|w| w.parse().ok()).find(|n| *n != 25).expect("a count in the message");
    assert!(imported > 10_000 && imported < n, "{message}");
    assert!(message.contains("split"), "{message}");
    let total = get(&app, &key, &format!("{NEWS}/members?limit=1")).json()["meta"]["total"].as_u64().unwrap();
    assert_eq!(total, imported, "the rows before the cut are imported, and the message says how many");
}

#[test]
fn the_cli_creates_lists_and_imports_and_exports_members() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str]| run_cli_in(&data, args, &[], None);
    let (st, _, err) = run(&["user", "create", "--email", "owner@example.org", "--name", "Owner"]);
    assert!(st.success(), "{err}");
    let (st, out, err) = run(&["domain", "create", "example.org"]);
    assert!(st.success() && out.contains("pending_mta"), "{out}{err}");
    let (st, _, err) = run(&[
        "list",
        "create",
        "--domain",
        "example.org",
        "--list",
        "news",
        "--display-name",
        "News",
        "--owner",
        "owner@example.org",
    ]);
    assert!(st.success(), "{err}");
    let csv = dir.path().join("in.csv");
    std::fs::write(&csv, "email,display_name,delivery_mode\na@example.net,A,digest\nb@example.net,,\nbad,,\n").unwrap();
    let (st, out, err) = run(&[
        "--json",
        "members",
        "import",
        "--domain",
        "example.org",
        "--list",
        "news",
        "--consent-evidence",
        "cli test",
        csv.to_str().unwrap(),
    ]);
    assert!(st.success(), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((report["added"].as_u64(), report["errors"].as_u64()), (Some(2), Some(1)), "{report}");
    let (st, out, _) =
        run(&["members", "export", "--domain", "example.org", "--list", "news", "--delivery-mode", "digest"]);
    assert!(st.success());
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("a@example.net,A,digest,active,"), "{out}");
    let (st, _, err) = run(&[
        "members",
        "import",
        "--domain",
        "example.org",
        "--list",
        "nope",
        "--consent-evidence",
        "x",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(st.code(), Some(3), "not found: {err}");
    let (st, _, err) = run(&["members", "export", "--domain", "example.org", "--list", "news", "--status", "gone"]);
    assert_eq!(st.code(), Some(1), "invalid: {err}");
}

#[test]
fn a_search_of_a_big_list_follows_its_changes() {
    // 30 members make a list "big": its searches are answered by the in-memory snapshot.
    let sink = SmtpSink::start();
    let url = sink.url();
    let (app, key) = setup(
        SubscriptionPolicy::Open,
        &[
            ("COURRIER_SEARCH_MIN_MEMBERS", "30"),
            ("COURRIER_SMTP_URL", url.as_str()),
            ("COURRIER_PUBLIC_URL", "https://lists.example.org"),
        ],
    );
    let mut csv = String::from("email,display_name,delivery_mode\ntarget@example.net,,regular\n");
    for i in 0..40 {
        csv.push_str(&format!("user{i}@example.net,,nomail\n"));
    }
    assert_eq!(import_csv(&app, &key, NEWS, "?consent_evidence=forms", &csv).status, 200);
    let search = |query: &str| {
        let r = get(&app, &key, &format!("{NEWS}/members?{query}"));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let emails: Vec<String> =
            v["data"].as_array().unwrap().iter().map(|m| m["email"].as_str().unwrap().to_owned()).collect();
        (v["meta"]["total"].as_u64().unwrap(), emails)
    };
    assert_eq!(search("email_contains=example.net").0, 41);
    assert_eq!(
        search("email_contains=user1&limit=3&offset=2").1,
        ["user11@example.net", "user12@example.net", "user13@example.net"]
    );

    // A status change through the API: the one-click unsubscription of the one regular member.
    let sends = post(&app, &key, &format!("{NEWS}/sends"), json!({ "subject": "Hi", "text": "Hello" }));
    assert_eq!(sends.status, 202, "{}", sends.body);
    let mail = sink.wait_for(1, Duration::from_secs(20)).remove(0);
    let link = mail.split("<https://lists.example.org").nth(1).and_then(|s| s.split('>').next()).unwrap().to_owned();
    let h = [("content-type", "application/x-www-form-urlencoded")];
    assert_eq!(app.client.request("POST", &link, &h, Some(b"List-Unsubscribe=One-Click")).status, 200);
    assert_eq!(search("email_contains=target&status=active").0, 0);
    assert_eq!(search("email_contains=target&status=unsubscribed"), (1, vec!["target@example.net".to_owned()]));
    assert_eq!(search("email_contains=example.net&status=active").0, 40);

    // New members through the API, one of them the unsubscribed one coming back.
    assert_eq!(add(&app, &key, "late@example.net").status, 201);
    assert_eq!(add(&app, &key, "target@example.net").status, 201);
    assert_eq!(search("email_contains=late"), (1, vec!["late@example.net".to_owned()]));
    assert_eq!(search("email_contains=example.net&status=active").0, 42);
    assert_eq!(search("email_contains=example.net&delivery_mode=nomail&offset=39").1, ["user39@example.net"]);

    // Another process (the CLI) imports into the same database.
    let file = app.dir.path().join("more.csv");
    std::fs::write(&file, "email,display_name,delivery_mode\ncli1@example.net,,\ncli2@example.org,,\n").unwrap();
    let data = app.dir.path().to_str().unwrap();
    let (st, _, err) = run_cli(
        &[
            "--data-dir",
            data,
            "members",
            "import",
            "--domain",
            "example.org",
            "--list",
            "news",
            "--consent-evidence",
            "x",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(st.success(), "{err}");
    assert_eq!(search("email_contains=cli"), (2, vec!["cli1@example.net".to_owned(), "cli2@example.org".to_owned()]));
    assert_eq!(search("email_contains=example.net").0, 43);
}

#[test]
fn thirty_two_clients_adding_at_once_are_each_answered_and_a_refused_one_leaves_nothing() {
    let (app, key) = setup(SubscriptionPolicy::Open, &[]);
    const CLIENTS: usize = 32;
    // Client 31 sends client 0's address: whichever of the two the lane runs second is refused
    // (409), inside the same group as the others or not, and must leave no row, event or entry.
    let email = |c: usize| format!("g{}@example.net", if c == CLIENTS - 1 { 0 } else { c });
    let barrier = std::sync::Barrier::new(CLIENTS);
    let answers: Vec<(usize, u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (app, key, barrier, email) = (&app, &key, &barrier, &email);
                s.spawn(move || {
                    let body = json!({ "email": email(c), "delivery_mode": "digest" });
                    barrier.wait();
                    let r = add_with(app, key, &body);
                    (c, r.status, r.body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created: Vec<&(usize, u16, String)> = answers.iter().filter(|a| a.1 == 201).collect();
    let refused: Vec<&(usize, u16, String)> = answers.iter().filter(|a| a.1 == 409).collect();
    assert_eq!((created.len(), refused.len()), (CLIENTS - 1, 1), "{answers:?}");
    assert!(refused[0].0 == 0 || refused[0].0 == CLIENTS - 1, "{refused:?}");
    assert!(refused[0].2.contains("already_subscribed"), "{}", refused[0].2);
    // Every 201 is committed: its member is there, with its own id.
    let mut ids = std::collections::HashSet::new();
    for (c, _, body) in &created {
        let id = serde_json::from_str::<Value>(body).unwrap()["data"]["member_id"].as_i64().unwrap();
        assert!(ids.insert(id), "two answers with member {id}");
        let m = get(&app, &key, &format!("{NEWS}/members/{id}"));
        assert_eq!((m.status, m.json()["data"]["email"].as_str()), (200, Some(email(*c).as_str())), "{}", m.body);
    }
    let listed = get(&app, &key, &format!("{NEWS}/members?limit=500"));
    assert_eq!(listed.json()["meta"]["total"], CLIENTS - 1);
    let added = events(&app.core, EventName::MemberAdded);
    assert_eq!(added.len(), CLIENTS - 1, "one event per committed addition, none for the refusal");
    assert_eq!(added.iter().filter(|e| e["email"] == "g0@example.net").count(), 1);
    let audit = get(&app, &key, "/api/v1/audit?action=member.add&limit=500");
    assert_eq!(audit.json()["meta"]["total"], CLIENTS - 1, "{}", audit.body);
}

fn add_with(app: &TestApp, key: &str, body: &Value) -> Resp {
    post(app, key, &format!("{NEWS}/members"), body.clone())
}

/// One `POST` over a fresh connection, without panicking when the server is gone: the status
/// and body, or `None` if no whole answer came back.
fn raw_post(addr: std::net::SocketAddr, path: &str, key: &str, body: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let (_, body) = out.split_once("\r\n\r\n")?;
    // A body cut by the kill does not count as an answer.
    serde_json::from_str::<Value>(body).ok()?;
    Some((status, body.to_owned()))
}

#[test]
fn a_server_killed_in_the_middle_of_a_group_keeps_every_addition_it_answered() {
    let dir = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let (status, out, err) = run_cli_in(dir.path(), args, &[], None);
        assert!(status.success(), "courrier {args:?}: {out}{err}");
        out
    };
    cli(&["user", "create", "--email", "admin@example.org", "--site-admin"]);
    let key = cli(&[
        "create-api-key",
        "--email",
        "admin@example.org",
        "--scope",
        "user",
        "--perms",
        "read,members:write,manage",
        "--name",
        "crash",
        "--rate-limit-per-min",
        "100000",
    ])
    .trim()
    .to_owned();
    cli(&["domain", "create", "example.org"]);
    cli(&[
        "list",
        "create",
        "--domain",
        "example.org",
        "--list",
        "news",
        "--display-name",
        "News",
        "--owner",
        "admin@example.org",
        "--subscription-policy",
        "open",
    ]);
    let env = [("COURRIER_LOG", "warn")];
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &env);
    let addr = app.addr;
    let answered = std::sync::atomic::AtomicUsize::new(0);
    let path = format!("{NEWS}/members");
    // 16 clients add without pause until the server dies under them; each keeps what was answered.
    let (kept, dir) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..16)
            .map(|c| {
                let (answered, path, key) = (&answered, &path, &key);
                s.spawn(move || {
                    let mut kept = Vec::new();
                    for i in 0u64.. {
                        let email = format!("k{c}-{i}@example.net");
                        let body = json!({ "email": email }).to_string();
                        match raw_post(addr, path, key, &body) {
                            Some((201, body)) => {
                                let id = serde_json::from_str::<Value>(&body).unwrap()["data"]["member_id"]
                                    .as_i64()
                                    .unwrap();
                                kept.push((email, id));
                                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            Some((status, body)) => panic!("{status}: {body}"),
                            // The server is gone (this request was cut, or found no server).
                            None => return kept,
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        while answered.load(std::sync::atomic::Ordering::SeqCst) < 400 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let dir = app.crash();
        let kept: Vec<(String, i64)> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        (kept, dir)
    });
    assert!(kept.len() >= 400, "{}", kept.len());
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &env);
    let auth = format!("Bearer {key}");
    let listed = app.client.request("GET", &format!("{NEWS}/members?limit=1"), &[("authorization", &auth)], None);
    let total = listed.json()["meta"]["total"].as_u64().unwrap();
    assert!(total >= kept.len() as u64, "{total} members on disk, {} answered 201", kept.len());
    for (email, id) in &kept {
        let r = app.client.request("GET", &format!("{NEWS}/members/{id}"), &[("authorization", &auth)], None);
        assert_eq!((r.status, r.json()["data"]["email"].as_str()), (200, Some(email.as_str())), "{}", r.body);
    }
    println!("{} additions answered before the kill, {total} on disk after the restart", kept.len());
}
