//! Writers together (issue 38; decisions.md, "Several servers: PostgreSQL"): many clients writing
//! at once, to one list and to several, on whichever store the suite runs on. On SQLite writers
//! take turns on the one file; on PostgreSQL (the CI's second pass, `COURRIER_TEST_POSTGRES`) the
//! writes of different lists commit together, each under its list's key, while what must be
//! serialised (one list's addresses, an Idempotency-Key) still is.

use crate::access::{bearer, call, make_key, make_list, make_user};
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::access::{Principal, principal::RequestCtx};
use courrier_core::kernel::{DomainName, EmailAddress, EventName, ListName};
use courrier_core::mailing::MailingError;
use courrier_core::mailing::members::{self, MemberRef};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::harness::{Resp, TestApp};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Barrier;

const LISTS: [&str; 3] = ["news", "jobs", "talk"];

fn setup() -> (TestApp, String) {
    let app = TestApp::spawn();
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    for list in LISTS {
        make_list(&app.core, "example.org", list, "admin@example.org", SubscriptionPolicy::Open);
    }
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    (app, key)
}

fn members_path(list: &str) -> String {
    format!("/api/v1/domains/example.org/lists/{list}/members")
}

fn add(app: &TestApp, key: &str, list: &str, email: &str, idempotency: Option<&str>) -> Resp {
    let mut headers = vec![bearer(key)];
    if let Some(k) = idempotency {
        headers.push(("idempotency-key", k.to_owned()));
    }
    call(app, "POST", &members_path(list), &headers, Some(&json!({ "email": email })))
}

/// `meta.total` of a listing of `list` with `query`.
fn total(app: &TestApp, key: &str, list: &str, query: &str) -> u64 {
    let r = call(app, "GET", &format!("{}?{query}", members_path(list)), &[bearer(key)], None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["meta"]["total"].as_u64().unwrap()
}

/// The counts a listing gives for `list`: from the tallies (no filter, `status=active`) and from
/// the rows themselves (a substring every address has).
fn counts(app: &TestApp, key: &str, list: &str) -> [u64; 3] {
    [
        total(app, key, list, "limit=1"),
        total(app, key, list, "limit=1&status=active"),
        total(app, key, list, "limit=1&email_contains=example.net"),
    ]
}

fn events_of(app: &TestApp, name: EventName) -> Vec<Value> {
    crate::members::events(&app.core, name)
}

#[test]
fn clients_adding_the_same_and_different_addresses_to_several_lists_add_each_once_with_exact_tallies() {
    const CLIENTS: usize = 12;
    const ADDS: usize = 24;
    let (app, key) = setup();
    // Client c's i-th addition: a list in turn, and every fourth address one that all clients add
    // (to the same list whenever their turns meet), every fourth after that one that all clients
    // add back after its removal (a row changed, not inserted: no uniqueness rule to catch a
    // second addition), the others its own.
    let plan = |c: usize, i: usize| {
        let list = LISTS[(c + i) % LISTS.len()];
        let email = match i % 4 {
            0 => format!("shared{i}@example.net"),
            1 => format!("back{i}@example.net"),
            _ => format!("c{c}-{i}@example.net"),
        };
        (list, email)
    };
    let (d, p, ctx) = (DomainName::parse("example.org").unwrap(), Principal::operator(), RequestCtx::cli());
    for list in LISTS {
        for i in (1..ADDS).step_by(4) {
            let email = format!("back{i}@example.net");
            assert_eq!(add(&app, &key, list, &email, None).status, 201);
            let member = MemberRef::Email(EmailAddress::parse(&email).unwrap());
            members::remove(&app.core.mailing, &p, &ctx, &d, &ListName::parse(list).unwrap(), &member).unwrap();
        }
    }
    let before = events_of(&app, EventName::MemberAdded).len();
    let barrier = Barrier::new(CLIENTS);
    let answers: Vec<(&str, String, u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (app, key, barrier) = (&app, &key, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..ADDS)
                        .map(|i| {
                            let (list, email) = plan(c, i);
                            let r = add(app, key, list, &email, None);
                            (list, email, r.status, r.body)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });

    let mut created: HashMap<(&str, String), usize> = HashMap::new();
    for (list, email, status, body) in &answers {
        match status {
            201 => *created.entry((list, email.clone())).or_default() += 1,
            409 => assert!(body.contains("already_subscribed"), "{body}"),
            other => panic!("{list} {email}: {other} {body}"),
        }
    }
    let wanted: HashSet<(&str, String)> = (0..CLIENTS).flat_map(|c| (0..ADDS).map(move |i| plan(c, i))).collect();
    assert_eq!(created.len(), wanted.len(), "every address of every list was added");
    let twice: Vec<_> = created.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "addresses added more than once: {twice:?}");
    for list in LISTS {
        let n = wanted.iter().filter(|(l, _)| *l == list).count() as u64;
        // Every address removed before was added back: no row more, none left removed.
        assert_eq!(counts(&app, &key, list), [n, n, n], "{list}: tallies, active tally, rows");
    }
    let added = events_of(&app, EventName::MemberAdded).split_off(before);
    assert_eq!(added.len(), wanted.len(), "one member.added per addition");
    let distinct: HashSet<i64> = added.iter().map(|e| e["member_id"].as_i64().unwrap()).collect();
    assert_eq!(distinct.len(), wanted.len(), "no addition's event twice");
}

#[test]
fn one_idempotency_key_sent_to_several_lists_at_once_runs_once() {
    const CLIENTS: usize = 9;
    let (app, key) = setup();
    let barrier = Barrier::new(CLIENTS);
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (app, key, barrier) = (&app, &key, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    // One key, one body, three lists: only the first request to be reserved runs.
                    let r = add(app, key, LISTS[c % LISTS.len()], "once@example.net", Some("same-key"));
                    (r.status, r.body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ran: Vec<&(u16, String)> = answers.iter().filter(|(s, _)| *s == 201).collect();
    // The others are replays of the one that ran (the same path), or refused: the key in use for
    // another path (409 idempotency_conflict) or still running (409 idempotency_in_progress).
    for (status, body) in &answers {
        let ok = *status == 201
            || (*status == 409 && (body.contains("idempotency_conflict") || body.contains("idempotency_in_progress")));
        assert!(ok, "{status} {body}");
    }
    assert!(!ran.is_empty(), "{answers:?}");
    let lists_with_it: Vec<&str> =
        LISTS.into_iter().filter(|l| total(&app, &key, l, "limit=1&email_contains=once@") == 1).collect();
    assert_eq!(lists_with_it.len(), 1, "the key ran on one list only: {lists_with_it:?}");
    let member_ids: HashSet<i64> = ran
        .iter()
        .map(|(_, b)| serde_json::from_str::<Value>(b).unwrap()["data"]["member_id"].as_i64().unwrap())
        .collect();
    assert_eq!(member_ids.len(), 1, "every 201 is the one run, replayed: {ran:?}");
    assert_eq!(events_of(&app, EventName::MemberAdded).len(), 1);
}

#[test]
fn a_member_removed_and_added_again_at_once_ends_in_one_state_with_its_tallies() {
    const ROUNDS: usize = 25;
    let (app, key) = setup();
    let email = "flip@example.net";
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let member = MemberRef::Email(EmailAddress::parse(email).unwrap());
    let barrier = Barrier::new(2);
    let (added, removed) = std::thread::scope(|s| {
        let adder = s.spawn(|| {
            barrier.wait();
            (0..ROUNDS)
                .filter(|_| {
                    let r = add(&app, &key, "news", email, None);
                    assert!(r.status == 201 || r.body.contains("already_subscribed"), "{} {}", r.status, r.body);
                    r.status == 201
                })
                .count()
        });
        let remover = s.spawn(|| {
            barrier.wait();
            (0..ROUNDS)
                .filter(|_| {
                    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
                    match members::remove(&app.core.mailing, &p, &ctx, &d, &l, &member) {
                        Ok(_) => true,
                        Err(MailingError::NotFound(_) | MailingError::Conflict(_)) => false,
                        Err(e) => panic!("remove: {e:?}"),
                    }
                })
                .count()
        });
        (adder.join().unwrap(), remover.join().unwrap())
    });
    // Each removal took back one addition: the member is there exactly when more were added.
    assert!(added >= 1 && added >= removed && added - removed <= 1, "added {added}, removed {removed}");
    let active = u64::from(added > removed);
    let [all, active_tally, rows] = counts(&app, &key, "news");
    assert_eq!((active_tally, all, rows), (active, 1, 1), "one row for the address, its state in the tallies");
    let status = call(&app, "GET", &format!("{}/{email}", members_path("news")), &[bearer(&key)], None);
    let want = if active == 1 { "active" } else { "removed" };
    assert_eq!(status.json()["data"]["status"], want, "{}", status.body);
    assert_eq!(events_of(&app, EventName::MemberAdded).len(), added);
    assert_eq!(events_of(&app, EventName::MemberRemoved).len(), removed);
}
