//! The moderation queues against the real server: subscriptions a moderated list holds and posts
//! its posting policy holds (the notice each owner and moderator gets over real SMTP, approve,
//! reject with the requester or poster told, discard, two moderators racing on one item), their
//! refusals, events, audit and the dashboard.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use crate::subscribers::link_path;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::{DomainName, EventName, ListName};
use courrier_core::mailing::inbound;
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

/// The mails the sink holds for `to` (an envelope recipient, as the sink records it).
fn mails_to(w: &World, to: &str) -> Vec<String> {
    let rcpt = format!("X-RcptTo: {to}");
    w.sink.messages().into_iter().filter(|m| m.lines().any(|l| l.eq_ignore_ascii_case(&rcpt))).collect()
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
        let page = link_path(&mine[0], "/admin/");
        assert!(page.ends_with("/admin/domains/example.org/lists/news/moderation"), "{page}");
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

/// A post from `from` received for news@example.org, through the inbound pipeline the LMTP
/// server and the ingest mailbox feed (stored, then processed).
fn receive_post(w: &World, from: &str, subject: &str, message_id: &str) {
    let raw = format!(
        "From: Poster <{from}>\r\nTo: news@example.org\r\nSubject: {subject}\r\nMessage-ID: <{message_id}>\r\n\
         X-Extra: one\r\nX-Extra: two\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHello list,\r\nfirst post.\r\n"
    );
    inbound::receive(&w.app.core.mailing, Some(from), "news@example.org", raw.as_bytes(), inbound::Oversize::Refuse)
        .unwrap();
}

/// `news` holds every post (`moderated`), with one active member.
fn moderated_world() -> World {
    let w = world(SubscriptionPolicy::Open);
    let patch = call(&w.app, "PATCH", NEWS, &[bearer(&w.admin)], Some(&json!({ "posting_policy": "moderated" })));
    assert_eq!(patch.status, 200, "{}", patch.body);
    let added = post(&w, &w.admin, &format!("{NEWS}/members"), Some(json!({ "email": "reader@example.net" })));
    assert_eq!(added.status, 201, "{}", added.body);
    w
}

fn held_ids(w: &World) -> Vec<i64> {
    let resp = get(w, &w.moderator, &format!("{NEWS}/moderation/messages"));
    assert_eq!(resp.status, 200, "{}", resp.body);
    resp.json()["data"].as_array().unwrap().iter().map(|h| h["id"].as_i64().unwrap()).collect()
}

#[test]
fn a_held_post_is_listed_read_and_approved_into_a_send() {
    let w = moderated_world();
    receive_post(&w, "poster@example.net", "Hello =?utf-8?q?caf=C3=A9?=", "p1@example.net");
    let held = events(&w.app.core, EventName::MessageHeld);
    assert_eq!(held.len(), 1);

    // One notice per owner and moderator, linking the post.
    w.sink.wait_for(3, WAIT);
    for to in ["owner@example.org", "mod@example.org", "mod2@example.org"] {
        let mine = mails_to(&w, to);
        assert_eq!(mine.len(), 1, "{to}");
        let link = link_path(&mine[0], "/api/v1/");
        assert!(link.starts_with("/api/v1/domains/example.org/lists/news/moderation/messages/"), "{link}");
        let page = link_path(&mine[0], "/admin/");
        assert!(page.starts_with("/admin/domains/example.org/lists/news/moderation/messages/"), "{page}");
    }

    let list = get(&w, &w.moderator, &format!("{NEWS}/moderation/messages")).json();
    assert_eq!(list["meta"]["total"], 1);
    let item = &list["data"][0];
    let id = item["id"].as_i64().unwrap();
    assert_eq!(item["from"], "poster@example.net");
    assert_eq!(item["subject"], "Hello café");
    assert_eq!(item["reason"], "moderated");
    assert!(item["size"].as_u64().unwrap() > 100 && item["received_at"].as_str().unwrap().ends_with('Z'), "{item}");
    assert_eq!(get(&w, &w.admin, "/api/v1/dashboard").json()["data"]["held_messages"], 1);

    let one = get(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{id}"));
    assert_eq!(one.status, 200, "{}", one.body);
    let one = one.json()["data"].clone();
    assert_eq!(one["headers"]["Message-ID"], "<p1@example.net>");
    assert_eq!(one["headers"]["X-Extra"], "one\ntwo", "a repeated field keeps every value");
    assert!(one["text"].as_str().unwrap().starts_with("Hello list,"), "{one}");

    let approved = post(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{id}/approve"), None);
    assert_eq!(approved.status, 200, "{}", approved.body);
    let send_id = approved.json()["data"]["send_id"].as_i64().unwrap();
    let send = get(&w, &w.admin, &format!("{NEWS}/sends/{send_id}"));
    assert_eq!((send.status, send.json()["data"]["recipients"].as_i64()), (200, Some(1)), "{}", send.body);
    let submitted = events(&w.app.core, EventName::SendSubmitted);
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0]["send_id"], send_id);

    // Decided: gone from the queue; every decision on it is 404 now.
    assert!(held_ids(&w).is_empty());
    assert_eq!(get(&w, &w.admin, "/api/v1/dashboard").json()["data"]["held_messages"], 0);
    get(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{id}")).expect_error(404, "not_found");
    for decision in ["approve", "reject", "discard"] {
        post(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{id}/{decision}"), None)
            .expect_error(404, "not_found");
    }
    let audit = audit_actions(&w, "moderation.message.approve");
    assert_eq!(audit.iter().filter(|e| e["outcome"] == "done").count(), 1);
}

#[test]
fn a_rejected_post_tells_the_poster_why_and_a_discarded_one_tells_nobody() {
    let w = moderated_world();
    receive_post(&w, "first@example.net", "one", "r1@example.net");
    receive_post(&w, "second@example.net", "two", "r2@example.net");
    w.sink.wait_for(6, WAIT);
    let ids = held_ids(&w);
    assert_eq!(ids.len(), 2);

    let rejected = post(
        &w,
        &w.moderator,
        &format!("{NEWS}/moderation/messages/{}/reject", ids[0]),
        Some(json!({ "reason": "Off topic, sorry." })),
    );
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    assert_eq!(rejected.json()["data"]["decision"], "rejected");
    w.sink.wait_for(7, WAIT);
    let told = mails_to(&w, "first@example.net");
    assert_eq!(told.len(), 1);
    assert!(told[0].contains("Off topic, sorry.") && told[0].contains("news@example.org"), "{}", told[0]);

    let discarded = post(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{}/discard", ids[1]), None);
    assert_eq!(discarded.status, 200, "{}", discarded.body);
    assert_eq!(discarded.json()["data"]["decision"], "discarded");
    std::thread::sleep(Duration::from_millis(300));
    assert!(mails_to(&w, "second@example.net").is_empty(), "a discard tells nobody");
    assert!(held_ids(&w).is_empty());
    assert!(events(&w.app.core, EventName::SendSubmitted).is_empty(), "nothing was posted");
    assert_eq!(audit_actions(&w, "moderation.message.reject").len(), 1);
    assert_eq!(audit_actions(&w, "moderation.message.discard").len(), 1);
    // A rejection without a body, or with an empty one, has no reason.
    receive_post(&w, "third@example.net", "three", "r3@example.net");
    let id = held_ids(&w)[0];
    let resp = w.app.client.request(
        "POST",
        &format!("{NEWS}/moderation/messages/{id}/reject"),
        &[("authorization", &format!("Bearer {}", w.moderator))],
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
}

#[test]
fn two_moderators_deciding_one_held_post_at_once_one_wins_and_the_other_gets_404() {
    let w = moderated_world();
    for n in 0..6 {
        receive_post(&w, "racer@example.net", &format!("race {n}"), &format!("race{n}@example.net"));
    }
    let ids = held_ids(&w);
    assert_eq!(ids.len(), 6);
    let decisions = ["approve", "reject", "discard"];
    for (n, id) in ids.iter().enumerate() {
        let (first, second) = (decisions[n % 3], decisions[(n + 1) % 3]);
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let one = s.spawn(|| {
                barrier.wait();
                post(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{id}/{first}"), None)
            });
            let two = s.spawn(|| {
                barrier.wait();
                post(&w, &w.moderator2, &format!("{NEWS}/moderation/messages/{id}/{second}"), None)
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 404], "{} / {}", a.body, b.body);
    }
    assert!(held_ids(&w).is_empty());
    // Each approval that won made exactly one send.
    let approvals = audit_actions(&w, "moderation.message.approve").iter().filter(|e| e["outcome"] == "done").count();
    assert_eq!(events(&w.app.core, EventName::SendSubmitted).len(), approvals);
}

#[test]
fn held_post_routes_refuse_bad_input_and_callers_out_of_reach() {
    let w = moderated_world();
    receive_post(&w, "poster@example.net", "hi", "x1@example.net");
    let id = held_ids(&w)[0];
    let one = format!("{NEWS}/moderation/messages/{id}");
    call(&w.app, "GET", &one, &[], None).expect_error(401, "unauthenticated");
    call(&w.app, "POST", &format!("{one}/discard"), &[], None).expect_error(401, "unauthenticated");
    let mod_user = courrier_core::access::users::by_email(
        &w.app.core.access,
        &courrier_core::kernel::EmailAddress::parse("mod@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let read_only = make_key(&w.app.core, &mod_user, KeyScope::User, &[Perm::Read], None);
    call(&w.app, "GET", &one, &[bearer(&read_only)], None).expect_error(403, "forbidden");
    call(&w.app, "POST", &format!("{one}/approve"), &[bearer(&read_only)], None).expect_error(403, "forbidden");
    let elsewhere = make_user(
        &w.app.core,
        "jobs-mod@example.org",
        &[Role::Moderator(DomainName::parse("example.org").unwrap(), ListName::parse("jobs").unwrap())],
    );
    let elsewhere = make_key(&w.app.core, &elsewhere, KeyScope::User, &[Perm::Read, Perm::Moderate], None);
    call(&w.app, "GET", &one, &[bearer(&elsewhere)], None).expect_error(404, "not_found");
    call(&w.app, "POST", &format!("{one}/reject"), &[bearer(&elsewhere)], None).expect_error(404, "not_found");
    // The same id under another list of the moderator's is not there.
    get(&w, &w.admin, &format!("/api/v1/domains/example.org/lists/jobs/moderation/messages/{id}"))
        .expect_error(404, "not_found");
    for bad in ["0", "x", "-1"] {
        get(&w, &w.moderator, &format!("{NEWS}/moderation/messages/{bad}")).expect_error(422, "invalid_path_id");
    }
    for (body, status) in [
        (json!({ "reason": 5 }), 422),
        (json!({ "why": "x" }), 422),
        (json!({ "reason": "x".repeat(4097) }), 422),
        (json!({ "reason": "no\u{0}nul" }), 422),
    ] {
        let resp = post(&w, &w.moderator, &format!("{one}/reject"), Some(body.clone()));
        assert_eq!(resp.status, status, "{body}: {}", resp.body);
    }
    let not_json = w.app.client.request(
        "POST",
        &format!("{one}/reject"),
        &[("authorization", &format!("Bearer {}", w.moderator)), ("content-type", "text/plain")],
        Some(b"spam"),
    );
    not_json.expect_error(400, "malformed_body");
    // None of that decided anything.
    assert_eq!(held_ids(&w), [id]);
    // held_days is a list policy: 1 to 365.
    for bad in [0, 366] {
        let r = call(&w.app, "PATCH", NEWS, &[bearer(&w.admin)], Some(&json!({ "held_days": bad })));
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
    }
    let r = call(&w.app, "PATCH", NEWS, &[bearer(&w.admin)], Some(&json!({ "held_days": 30 })));
    assert_eq!(r.json()["data"]["held_days"], 30, "{}", r.body);
    assert_eq!(get(&w, &w.admin, NEWS).json()["data"]["held_days"], 30);
    // An archived list sends nothing: approving is refused (409) and the post stays held.
    let r = call(&w.app, "PATCH", NEWS, &[bearer(&w.admin)], Some(&json!({ "status": "archived" })));
    assert_eq!(r.status, 200, "{}", r.body);
    post(&w, &w.moderator, &format!("{one}/approve"), None).expect_error(409, "conflict");
    assert_eq!(held_ids(&w), [id]);
    assert!(events(&w.app.core, EventName::SendSubmitted).is_empty());
}

/// One LMTP transaction (RFC 2033) to `to` from `from`: the reply after the data.
fn lmtp(app: &TestApp, from: &str, to: &str, message: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::net::TcpStream::connect(app.lmtp.expect("the LMTP server listens")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut reply = |send: Option<&str>| -> String {
        if let Some(line) = send {
            writer.write_all(line.as_bytes()).unwrap();
        }
        let mut all = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "LMTP connection closed after {all}");
            all.push_str(&line);
            if line.as_bytes().get(3) != Some(&b'-') {
                return all;
            }
        }
    };
    assert!(reply(None).starts_with("220"));
    assert!(reply(Some("LHLO tests.example\r\n")).starts_with("250"));
    assert!(reply(Some(&format!("MAIL FROM:<{from}>\r\n"))).starts_with("250"));
    let rcpt = reply(Some(&format!("RCPT TO:<{to}>\r\n")));
    assert!(rcpt.starts_with("250"), "{rcpt}");
    assert!(reply(Some("DATA\r\n")).starts_with("354"));
    let body: String = message
        .split("\r\n")
        .map(|l| if l.starts_with('.') { format!(".{l}\r\n") } else { format!("{l}\r\n") })
        .collect();
    let done = reply(Some(&format!("{body}.\r\n")));
    let _ = reply(Some("QUIT\r\n"));
    done
}

fn request_mail(from: &str, to: &str, subject: &str, extra: &str) -> String {
    format!("From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{subject}.{from}>\r\n{extra}\r\nHi\r\n")
}

/// Waits for a mail to `to` holding `marker`; the path of its link from the marker on.
fn mailed_link(w: &World, to: &str, marker: &str) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(m) = mails_to(w, to).iter().find(|m| m.contains(marker)) {
            return link_path(m, marker);
        }
        assert!(std::time::Instant::now() < deadline, "no mail to {to} with {marker}: {:#?}", w.sink.messages());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn requests_mailed_over_lmtp_are_answered_with_links_and_owner_mail_reaches_the_owners() {
    let w = world(SubscriptionPolicy::Moderate);
    // Subscribe by mail on a moderated list: the confirmation link, then the moderators' queue.
    let reply = lmtp(
        &w.app,
        "ann@example.net",
        "news-request@example.org",
        &request_mail("Ann <ann@example.net>", "news-request@example.org", "subscribe", ""),
    );
    assert!(reply.starts_with("250"), "{reply}");
    let confirm = mailed_link(&w, "ann@example.net", "/p/confirm/");
    assert_eq!(w.app.client.request("POST", &confirm, &[], Some(b"")).status, 200);
    let queue = get(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions")).json();
    assert_eq!(queue["data"][0]["email"], "ann@example.net", "{queue}");
    let id = queue["data"][0]["id"].as_i64().unwrap();
    assert_eq!(post(&w, &w.moderator, &format!("{NEWS}/moderation/subscriptions/{id}/approve"), None).status, 200);

    // Leave by mail: a link; the member stays active until it is followed.
    let reply = lmtp(
        &w.app,
        "ann@example.net",
        "news-leave@example.org",
        &request_mail("ann@example.net", "news-leave@example.org", "bye", ""),
    );
    assert!(reply.starts_with("250"), "{reply}");
    let leave = mailed_link(&w, "ann@example.net", "/p/unsubscribe/");
    assert_eq!(get(&w, &w.admin, &format!("{NEWS}/members/{id}")).json()["data"]["status"], "active");
    assert_eq!(w.app.client.request("POST", &leave, &[], Some(b"")).status, 200);
    assert_eq!(get(&w, &w.admin, &format!("{NEWS}/members/{id}")).json()["data"]["status"], "unsubscribed");

    // Help is answered; a robot's request is taken (250) and never answered.
    lmtp(
        &w.app,
        "bob@example.net",
        "news-request@example.org",
        &request_mail("bob@example.net", "news-request@example.org", "help", ""),
    );
    mailed_link(&w, "bob@example.net", "news-join@example.org");
    let reply = lmtp(
        &w.app,
        "robot@example.net",
        "news-request@example.org",
        &request_mail("robot@example.net", "news-request@example.org", "subscribe", "Precedence: bulk\r\n"),
    );
    assert!(reply.starts_with("250"), "{reply}");

    // Mail to the owner address reaches the owner (not the moderators).
    lmtp(
        &w.app,
        "carl@example.net",
        "news-owner@example.org",
        &request_mail("carl@example.net", "news-owner@example.org", "question", ""),
    );
    let deadline = std::time::Instant::now() + WAIT;
    while mails_to(&w, "owner@example.org").iter().all(|m| !m.contains("Subject: question")) {
        assert!(std::time::Instant::now() < deadline, "{:#?}", w.sink.messages());
        std::thread::sleep(Duration::from_millis(50));
    }
    let forwarded = mails_to(&w, "owner@example.org").into_iter().find(|m| m.contains("Subject: question")).unwrap();
    assert!(forwarded.contains("X-BeenThere: news-owner@example.org"), "{forwarded}");
    assert!(mails_to(&w, "mod@example.org").iter().all(|m| !m.contains("Subject: question")));
    std::thread::sleep(Duration::from_millis(300));
    assert!(mails_to(&w, "robot@example.net").is_empty(), "a robot is never answered");
}

#[test]
fn the_command_line_lists_and_decides_both_queues_like_the_api() {
    let w = moderated_world();
    let patch = call(&w.app, "PATCH", NEWS, &[bearer(&w.admin)], Some(&json!({ "subscription_policy": "moderate" })));
    assert_eq!(patch.status, 200, "{}", patch.body);
    receive_post(&w, "poster@example.net", "by cli", "cli1@example.net");
    receive_post(&w, "other@example.net", "by cli 2", "cli2@example.net");
    let member = request(&w, "sub@example.net");
    let env = [("COURRIER_SMTP_URL", w.sink.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cli = |args: &[&str]| {
        let mut all = vec!["--json", "moderation"];
        all.extend_from_slice(args);
        let (status, out, err) = courrier_tests::harness::run_cli_in(w.app.dir.path(), &all, &env, None);
        (status.code(), out, err)
    };
    let on = ["--domain", "example.org", "--list", "news"];
    let (code, out, err) = cli(&[&["list"][..], &on].concat());
    assert_eq!(code, Some(0), "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["total"], 2, "{listed}");
    let api = get(&w, &w.moderator, &format!("{NEWS}/moderation/messages")).json();
    assert_eq!(listed["items"], api["data"], "the same view as the API");
    let (first, second) = (listed["items"][0]["id"].to_string(), listed["items"][1]["id"].to_string());

    let (code, out, err) = cli(&[&["approve"][..], &on, &[first.as_str()]].concat());
    assert_eq!(code, Some(0), "{err}");
    let approved: Value = serde_json::from_str(&out).unwrap();
    assert!(approved["send_id"].is_i64(), "{approved}");
    let (code, out, err) = cli(&[&["reject"][..], &on, &[second.as_str(), "--reason", "Not here."]].concat());
    assert_eq!(
        (code, serde_json::from_str::<Value>(&out).unwrap()["decision"].as_str()),
        (Some(0), Some("rejected")),
        "{err}"
    );
    // Decided already: the API's 404, exit code of a not-found.
    let (code, out, _) = cli(&[&["discard"][..], &on, &[first.as_str()]].concat());
    assert_ne!(code, Some(0));
    assert!(out.is_empty(), "nothing on stdout on an error");

    let (code, out, err) = cli(&[&["list", "--subscriptions"][..], &on].concat());
    assert_eq!(code, Some(0), "{err}");
    let waiting: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(waiting["items"][0]["id"], member, "{waiting}");
    let id = member.to_string();
    let (code, out, err) = cli(&[&["approve", "--subscription"][..], &on, &[id.as_str()]].concat());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["status"], "active");
    let (code, _, err) = cli(&[&["approve"][..], &on, &["zero"]].concat());
    assert_ne!(code, Some(0));
    assert!(err.contains("positive integer"), "{err}");
    let audit = audit_actions(&w, "moderation.message.approve");
    assert_eq!(audit[0]["outcome"], "done");
}
