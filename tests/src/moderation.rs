//! The moderation queues against the real server: subscriptions a moderated list holds (the
//! notice each owner and moderator gets over real SMTP, approve, reject with the requester told,
//! two moderators racing on one item), their refusals, events, audit and the dashboard.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use crate::subscribers::link_path;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::{DomainName, EventName, ListName};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::harness::{Resp, SmtpSink, TestApp};
use serde_json::{Value, json};
use std::time::Duration;

const NEWS: &str = "/api/v1/domains/example.org/lists/news";
const WAIT: Duration = Duration::from_secs(10);

struct World {
    app: TestApp,
    sink: SmtpSink,
    /// Every permission, the installation (site admin).
    admin: String,
    /// `moderate` and `read`, the moderator of `news`.
    moderator: String,
    /// A second moderator of `news`, for races.
    moderator2: String,
}

/// `news@example.org` under `policy`, owned by owner@example.org, moderated by mod@ and mod2@;
/// an admin key, and the moderators' keys (read, moderate).
fn world(policy: SubscriptionPolicy) -> World {
    let sink = SmtpSink::start();
    let app = TestApp::spawn_with(&[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "lists@example.org")]);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_user(&app.core, "owner@example.org", &[]);
    make_list(&app.core, "example.org", "news", "owner@example.org", policy);
    let news = Role::Moderator(DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let m1 = make_user(&app.core, "mod@example.org", std::slice::from_ref(&news));
    let m2 = make_user(&app.core, "mod2@example.org", &[news]);
    let admin = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    let moderator = make_key(&app.core, &m1, KeyScope::User, &[Perm::Read, Perm::Moderate], Some(100_000));
    let moderator2 = make_key(&app.core, &m2, KeyScope::User, &[Perm::Read, Perm::Moderate], Some(100_000));
    World { app, sink, admin, moderator, moderator2 }
}

fn post(w: &World, key: &str, path: &str, body: Option<Value>) -> Resp {
    call(&w.app, "POST", path, &[bearer(key)], body.as_ref())
}

fn get(w: &World, key: &str, path: &str) -> Resp {
    call(&w.app, "GET", path, &[bearer(key)], None)
}

/// Subscribes `email` through the API; the member's id (202 pending).
fn request(w: &World, email: &str) -> i64 {
    let resp = post(w, &w.admin, &format!("{NEWS}/members"), Some(json!({ "email": email, "name": "Ann" })));
    assert_eq!(resp.status, 202, "{}", resp.body);
    assert_eq!(resp.json()["data"]["status"], "pending_moderation");
    resp.json()["data"]["member_id"].as_i64().unwrap()
}

/// The mails the sink holds addressed to `to`.
fn mails_to(w: &World, to: &str) -> Vec<String> {
    w.sink.messages().into_iter().filter(|m| m.lines().any(|l| l.eq_ignore_ascii_case(&format!("To: {to}")))).collect()
}

fn audit_actions(w: &World, action: &str) -> Vec<Value> {
    let resp = get(w, &w.admin, &format!("/api/v1/audit?action={action}&limit=500"));
    assert_eq!(resp.status, 200, "{}", resp.body);
    resp.json()["data"].as_array().unwrap().clone()
}

#[test]
fn a_moderator_approves_a_held_subscription_and_the_member_becomes_active() {
    let w = world(SubscriptionPolicy::Moderate);
    let id = request(&w, "Ann@Example.net");

    // The owner and both moderators get one notice each, with the queue's link.
    let mails = w.sink.wait_for(3, WAIT);
    assert_eq!(mails.len(), 3, "{mails:#?}");
    for to in ["owner@example.org", "mod@example.org", "mod2@example.org"] {
        let mine = mails_to(&w, to);
        assert_eq!(mine.len(), 1, "{to}: {mails:#?}");
        let link = link_path(&mine[0], "/api/v1/");
        assert!(link.ends_with("/api/v1/domains/example.org/lists/news/moderation/subscriptions"), "{link}");
        assert!(mine[0].contains("Ann@example.net"), "{}", mine[0]);
    }
    assert!(mails_to(&w, "admin@example.org").is_empty(), "a site admin is not a list's moderator");

    let queue = get(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions"));
    assert_eq!(queue.status, 200, "{}", queue.body);
    let body = queue.json();
    assert_eq!(body["meta"]["total"], 1);
    let item = &body["data"][0];
    assert_eq!((item["id"].as_i64(), item["email"].as_str()), (Some(id), Some("Ann@example.net")));
    assert_eq!(item["display_name"], "Ann");
    assert!(item["requested_at"].as_str().unwrap().ends_with('Z'), "{item}");
    assert_eq!(get(&w, &w.admin, "/api/v1/dashboard").json()["data"]["pending_subscriptions"], 1);

    let approved = post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/approve"), None);
    assert_eq!(approved.status, 200, "{}", approved.body);
    let m = approved.json()["data"].clone();
    assert_eq!(m["status"], "active");
    assert!(m["subscribed_at"].is_string(), "{m}");
    assert_eq!(get(&w, &w.admin, &format!("{NEWS}/members/{id}")).json()["data"]["status"], "active");
    assert_eq!(events(&w.app.core, EventName::SubscriptionConfirmed).len(), 1);
    let added = events(&w.app.core, EventName::MemberAdded);
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["member_id"], id);

    // Decided: out of the queue, and deciding again is 404 (either way).
    assert_eq!(get(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions")).json()["meta"]["total"], 0);
    assert_eq!(get(&w, &w.admin, "/api/v1/dashboard").json()["data"]["pending_subscriptions"], 0);
    for decision in ["approve", "reject"] {
        post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/{decision}"), None)
            .expect_error(404, "not_found");
    }
    let done = audit_actions(&w, "moderation.subscription.approve");
    let outcomes: Vec<&str> = done.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["not_found", "done"], "newest first: {done:#?}");
    assert_eq!(done[1]["target"], format!("member:news@example.org:{id}"));
    assert_eq!(w.sink.messages().len(), 3, "an approval mails nobody");
}

#[test]
fn a_rejected_requester_is_told_by_mail_and_removed_from_the_queue() {
    let w = world(SubscriptionPolicy::Moderate);
    let id = request(&w, "bob@example.net");
    w.sink.wait_for(3, WAIT);
    let rejected = post(&w, &w.moderator2, &format!("{NEWS}/moderation/subscriptions/{id}/reject"), None);
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    let m = rejected.json()["data"].clone();
    assert_eq!((m["status"].as_str(), &m["disabled_reason"]), (Some("removed"), &Value::Null), "{m}");
    w.sink.wait_for(4, WAIT);
    let told = mails_to(&w, "bob@example.net");
    assert_eq!(told.len(), 1);
    assert!(told[0].contains("news@example.org") && told[0].contains("declined"), "{}", told[0]);
    let removed = events(&w.app.core, EventName::MemberRemoved);
    assert_eq!((removed.len(), removed[0]["reason"].as_str()), (1, Some("rejected")));
    assert!(events(&w.app.core, EventName::MemberAdded).is_empty());
    assert_eq!(get(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions")).json()["meta"]["total"], 0);
    post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/reject"), None)
        .expect_error(404, "not_found");
    assert_eq!(audit_actions(&w, "moderation.subscription.reject").len(), 2, "the decision and the refusal");
}

#[test]
fn two_moderators_deciding_one_subscription_at_once_one_wins_and_the_other_gets_404() {
    let w = world(SubscriptionPolicy::Moderate);
    let ids: Vec<i64> = (0..6).map(|n| request(&w, &format!("race{n}@example.net"))).collect();
    for (n, id) in ids.iter().enumerate() {
        // Two real connections released together: approve against approve, or against reject.
        let second = if n % 2 == 0 { "approve" } else { "reject" };
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let one = s.spawn(|| {
                barrier.wait();
                post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/approve"), None)
            });
            let two = s.spawn(|| {
                barrier.wait();
                post(&w, &w.moderator2, &format!("{NEWS}/moderation/subscriptions/{id}/{second}"), None)
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 404], "{} / {}", a.body, b.body);
        let loser = if a.status == 404 { &a } else { &b };
        assert_eq!(loser.json()["error"]["code"], "not_found");
    }
    // Each decided once: one event per member, whoever won.
    let decided =
        events(&w.app.core, EventName::MemberAdded).len() + events(&w.app.core, EventName::MemberRemoved).len();
    assert_eq!(decided, ids.len());
    assert_eq!(
        events(&w.app.core, EventName::SubscriptionConfirmed).len(),
        events(&w.app.core, EventName::MemberAdded).len()
    );
}

#[test]
fn a_double_opt_in_confirmed_on_a_moderated_list_waits_for_a_moderator() {
    let w = world(SubscriptionPolicy::Confirm);
    let resp = post(&w, &w.admin, &format!("{NEWS}/members"), Some(json!({ "email": "cat@example.net" })));
    assert_eq!(resp.status, 202, "{}", resp.body);
    assert_eq!(resp.json()["data"]["status"], "pending_confirmation");
    let id = resp.json()["data"]["member_id"].as_i64().unwrap();
    let confirm = link_path(&w.sink.wait_for(1, WAIT)[0], "/p/confirm/");
    assert!(mails_to(&w, "mod@example.org").is_empty(), "nothing to moderate yet");
    // Waiting for its confirmation, it is not in the moderators' queue.
    assert_eq!(get(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions")).json()["meta"]["total"], 0);
    post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/approve"), None)
        .expect_error(404, "not_found");

    // The list became moderated meanwhile: the confirmed request is held for a moderator.
    let patch = call(&w.app, "PATCH", NEWS, &[bearer(&w.admin)], Some(&json!({ "subscription_policy": "moderate" })));
    assert_eq!(patch.status, 200, "{}", patch.body);
    assert_eq!(w.app.client.request("POST", &confirm, &[], Some(b"")).status, 200);
    let m = get(&w, &w.admin, &format!("{NEWS}/members/{id}")).json()["data"].clone();
    assert_eq!((m["status"].as_str(), m["consent_source"].as_str()), (Some("pending"), Some("double_opt_in")));
    assert!(events(&w.app.core, EventName::MemberAdded).is_empty(), "not active before a moderator says so");
    w.sink.wait_for(4, WAIT);
    assert_eq!(mails_to(&w, "mod@example.org").len(), 1, "the moderators are told once it waits for them");
    let queue = get(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions")).json();
    assert_eq!((queue["meta"]["total"].as_u64(), queue["data"][0]["id"].as_i64()), (Some(1), Some(id)));
    let approved = post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/approve"), None);
    assert_eq!(approved.json()["data"]["status"], "active", "{}", approved.body);
}

#[test]
fn asking_again_while_held_does_not_notify_the_moderators_twice() {
    let w = world(SubscriptionPolicy::Moderate);
    let id = request(&w, "dan@example.net");
    assert_eq!(request(&w, "dan@example.net"), id);
    w.sink.wait_for(3, WAIT);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(mails_to(&w, "mod@example.org").len(), 1);
}

#[test]
fn moderation_routes_refuse_the_unauthenticated_the_unpermitted_and_the_out_of_reach() {
    let w = world(SubscriptionPolicy::Moderate);
    let id = request(&w, "eve@example.net");
    let approve = format!("{NEWS}/moderation/subscriptions/{id}/approve");
    let queue = format!("{NEWS}/moderation/subscriptions");

    call(&w.app, "GET", &queue, &[], None).expect_error(401, "unauthenticated");
    call(&w.app, "POST", &approve, &[], None).expect_error(401, "unauthenticated");
    // A key without `moderate`, of an account that could moderate: 403.
    let mod_user = courrier_core::access::users::by_email(
        &w.app.core.access,
        &courrier_core::kernel::EmailAddress::parse("mod@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let read_only = make_key(&w.app.core, &mod_user, KeyScope::User, &[Perm::Read], None);
    call(&w.app, "GET", &queue, &[bearer(&read_only)], None).expect_error(403, "forbidden");
    call(&w.app, "POST", &approve, &[bearer(&read_only)], None).expect_error(403, "forbidden");
    // The moderator of another list: `news` is out of its reach (404), and so is an unknown list.
    let other = make_user(
        &w.app.core,
        "other-mod@example.org",
        &[Role::Moderator(DomainName::parse("example.org").unwrap(), ListName::parse("jobs").unwrap())],
    );
    let other = make_key(&w.app.core, &other, KeyScope::User, &[Perm::Read, Perm::Moderate], None);
    call(&w.app, "GET", &queue, &[bearer(&other)], None).expect_error(404, "not_found");
    call(&w.app, "POST", &approve, &[bearer(&other)], None).expect_error(404, "not_found");
    get(&w, &w.moderator, "/api/v1/domains/example.org/lists/nope/moderation/subscriptions")
        .expect_error(404, "not_found");
    // A path id that is not a positive integer, a page out of bounds: 422.
    for bad in ["0", "x", "-1"] {
        post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{bad}/approve"), None)
            .expect_error(422, "invalid_path_id");
    }
    for bad in ["limit=0", "limit=501", "offset=-1", "colour=red"] {
        let r = get(&w, &w.moderator, &format!("{queue}?{bad}"));
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
    }
    // A member that is not waiting for a moderator (an active one), or none at all: 404.
    let active = post(
        &w,
        &w.admin,
        &format!("{NEWS}/members"),
        Some(json!({ "email": "act@example.net", "force": true, "consent_evidence": "signed form" })),
    );
    let active = active.json()["data"]["member_id"].as_i64().unwrap();
    post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{active}/approve"), None)
        .expect_error(404, "not_found");
    post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/999999/reject"), None)
        .expect_error(404, "not_found");
    // Nothing of that changed the waiting request; the refusals are audited.
    assert_eq!(get(&w, &w.moderator, &queue).json()["meta"]["total"], 1);
    let refused: Vec<Value> =
        audit_actions(&w, "moderation.subscription.approve").into_iter().filter(|e| e["outcome"] != "done").collect();
    let outcomes: Vec<&str> = refused.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["not_found", "not_found", "forbidden"], "newest first: {refused:#?}");
}
