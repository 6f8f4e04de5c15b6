//! The store test suite: every storage adapter must pass it (Stalwart's pattern). An adapter's
//! tests call [`run_all`] with a function that makes a fresh, empty, migrated store.

use super::{Store, StoreError, in_read, in_write};
use crate::kernel::{Actor, AuditFilter, EventName, NewAuditEntry, NewEvent, Outcome, Page, RequestId, Timestamp};
use std::sync::Arc;

pub type Factory<'a> = &'a dyn Fn() -> Arc<dyn Store>;

pub fn run_all(fresh: Factory<'_>) {
    commit_keeps_change_audit_and_event_together(&*fresh());
    error_rolls_everything_back(&*fresh());
    dropping_an_uncommitted_transaction_rolls_back(&*fresh());
    concurrent_writers_all_commit(fresh());
    audit_filters_and_pages_in_the_query(&*fresh());
    events_come_back_in_order_after_a_cursor(&*fresh());
}

fn audit(action: &str, at: i64, user: Option<i64>) -> NewAuditEntry {
    NewAuditEntry {
        at: Timestamp::from_unix_secs(at),
        request_id: RequestId::internal("suite"),
        actor: Actor { user_id: user, key_id: None },
        action: action.to_owned(),
        target: "domain:example.org".to_owned(),
        outcome: Outcome::Done,
    }
}

fn event(name: EventName, n: i64) -> NewEvent {
    NewEvent {
        name,
        at: Timestamp::from_unix_secs(1_700_000_000 + n),
        domain_id: Some(1),
        list_id: None,
        data: serde_json::json!({ "n": n, "note": "é \"quoted\"" }),
    }
}

fn count(store: &dyn Store) -> (u64, usize) {
    in_read(store, |tx| {
        let audits = tx.list_audit(&AuditFilter::default(), Page::default())?.total;
        let events = tx.events_after(None, 500)?.len();
        Ok::<_, StoreError>((audits, events))
    })
    .unwrap()
}

pub fn commit_keeps_change_audit_and_event_together(store: &dyn Store) {
    in_write(store, |tx| {
        tx.append_audit(&audit("domain.create", 1, Some(7)))?;
        tx.append_event(&event(EventName::ListSuspended, 1))?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    assert_eq!(count(store), (1, 1));
}

pub fn error_rolls_everything_back(store: &dyn Store) {
    #[derive(Debug, PartialEq)]
    enum E {
        Rule,
        Store,
    }
    impl From<StoreError> for E {
        fn from(_: StoreError) -> Self {
            E::Store
        }
    }
    let out: Result<(), E> = in_write(store, |tx| {
        tx.append_audit(&audit("domain.create", 1, None))?;
        tx.append_event(&event(EventName::MemberAdded, 1))?;
        Err(E::Rule)
    });
    assert_eq!(out, Err(E::Rule));
    assert_eq!(count(store), (0, 0));
}

pub fn dropping_an_uncommitted_transaction_rolls_back(store: &dyn Store) {
    {
        let mut tx = store.write().unwrap();
        tx.append_audit(&audit("x", 1, None)).unwrap();
    }
    assert_eq!(count(store), (0, 0));
    // The connection went back to its pool usable: a later transaction works.
    commit_keeps_change_audit_and_event_together(store);
}

pub fn concurrent_writers_all_commit(store: Arc<dyn Store>) {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..25 {
                    in_write(&*store, |tx| {
                        tx.append_audit(&audit("member.add", t * 100 + i, Some(t)))?;
                        tx.append_event(&event(EventName::MemberAdded, t * 100 + i))
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (audits, events) = count(&*store);
    assert_eq!(audits, 200);
    let ids: std::collections::HashSet<_> =
        in_read(&*store, |tx| tx.events_after(None, 500)).unwrap().into_iter().map(|e| e.public_id).collect();
    assert_eq!((events, ids.len()), (200, 200), "every event has its own public id");
}

pub fn audit_filters_and_pages_in_the_query(store: &dyn Store) {
    in_write(store, |tx| {
        for i in 0..30 {
            let action = if i % 3 == 0 { "list.suspend" } else { "member.add" };
            tx.append_audit(&audit(action, 1_000 + i, Some(i % 2)))?;
        }
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let list = |filter: AuditFilter, limit: &str, offset: &str| {
        let page = Page::parse(Some(limit), Some(offset)).unwrap();
        in_read(store, |tx| tx.list_audit(&filter, page)).unwrap()
    };
    let all = list(AuditFilter::default(), "500", "0");
    assert_eq!(all.total, 30);
    assert!(all.items.windows(2).all(|w| w[0].at >= w[1].at), "newest first");

    let suspends = list(AuditFilter { action: Some("list.suspend".into()), ..Default::default() }, "4", "0");
    assert_eq!((suspends.total, suspends.items.len()), (10, 4));
    assert!(suspends.items.iter().all(|e| e.action == "list.suspend"));

    let window = list(
        AuditFilter {
            actor_user_id: Some(1),
            since: Some(Timestamp::from_unix_secs(1_010)),
            until: Some(Timestamp::from_unix_secs(1_019)),
            ..Default::default()
        },
        "2",
        "1",
    );
    // Odd seconds in 1010..=1019 carry user 1: 1011, 1013, 1015, 1017, 1019.
    assert_eq!(window.total, 5);
    let secs: Vec<i64> = window.items.iter().map(|e| e.at.unix_secs()).collect();
    assert_eq!(secs, vec![1_017, 1_015]);
    let entry = &window.items[0];
    assert_eq!((entry.actor.user_id, entry.outcome, entry.request_id.as_str()), (Some(1), Outcome::Done, "suite"));
}

pub fn events_come_back_in_order_after_a_cursor(store: &dyn Store) {
    in_write(store, |tx| {
        for n in 0..5 {
            tx.append_event(&event(EventName::SendSubmitted, n))?;
        }
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let first = in_read(store, |tx| tx.events_after(None, 2)).unwrap();
    assert_eq!(first.len(), 2);
    let rest = in_read(store, |tx| tx.events_after(Some(first[1].id), 100)).unwrap();
    let ns: Vec<i64> = first.iter().chain(&rest).map(|e| e.data["n"].as_i64().unwrap()).collect();
    assert_eq!(ns, vec![0, 1, 2, 3, 4]);
    assert!(rest.iter().all(|e| e.name == EventName::SendSubmitted && e.public_id.starts_with("evt_")));
    assert_eq!(rest[0].data["note"], "é \"quoted\"");
}
