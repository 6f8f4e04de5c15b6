//! The store test suite: every storage adapter must pass it (Stalwart's pattern). An adapter's
//! tests call [`run_all`] with a function that makes a fresh, empty, migrated store.

use super::{Store, StoreError, Transaction, in_read, in_write};
use crate::kernel::{Actor, AuditFilter, EventName, NewAuditEntry, NewEvent, Outcome, Page, RequestId, Timestamp};
use std::sync::Arc;

/// Makes a fresh, empty, migrated store seen through some context's transaction `X`.
pub type Factory<'a, X> = &'a dyn Fn() -> Arc<dyn Store<X>>;

/// The transaction machinery and the kernel's repositories (audit, outbox), through any
/// context's transaction. Each context's own repositories have their suite beside their port.
pub fn run_all<X: ?Sized + Transaction + 'static>(fresh: Factory<'_, X>) {
    commit_keeps_change_audit_and_event_together(&*fresh());
    error_rolls_everything_back(&*fresh());
    dropping_an_uncommitted_transaction_rolls_back(&*fresh());
    concurrent_writers_all_commit(fresh());
    a_failing_unit_among_waiting_writers_takes_back_only_its_own_writes(fresh());
    a_nested_unit_undoes_alone(&*fresh());
    audit_filters_and_pages_in_the_query(&*fresh());
    events_come_back_in_order_after_a_cursor(&*fresh());
}

fn audit(action: &str, at: i64, user: Option<i64>) -> NewAuditEntry {
    NewAuditEntry {
        at: Timestamp::from_unix_secs(at),
        request_id: RequestId::internal("suite"),
        actor: Actor { user_id: user, key_id: None, member_id: None },
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

fn count<X: ?Sized + Transaction>(store: &dyn Store<X>) -> (u64, usize) {
    in_read(store, |tx| {
        let audits = tx.list_audit(&AuditFilter::default(), Page::default())?.total;
        let events = tx.events_after(None, 500)?.len();
        Ok::<_, StoreError>((audits, events))
    })
    .unwrap()
}

pub fn commit_keeps_change_audit_and_event_together<X: ?Sized + Transaction>(store: &dyn Store<X>) {
    in_write(store, |tx| {
        tx.append_audit(&audit("domain.create", 1, Some(7)))?;
        tx.append_event(&event(EventName::ListSuspended, 1))?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    assert_eq!(count(store), (1, 1));
}

pub fn error_rolls_everything_back<X: ?Sized + Transaction>(store: &dyn Store<X>) {
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

pub fn dropping_an_uncommitted_transaction_rolls_back<X: ?Sized + Transaction>(store: &dyn Store<X>) {
    {
        let mut tx = store.write().unwrap();
        tx.append_audit(&audit("x", 1, None)).unwrap();
    }
    assert_eq!(count(store), (0, 0));
    // The connection went back to its pool usable: a later transaction works.
    commit_keeps_change_audit_and_event_together(store);
}

pub fn concurrent_writers_all_commit<X: ?Sized + Transaction + 'static>(store: Arc<dyn Store<X>>) {
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

/// Writers that queued behind a long one (and that an adapter may therefore commit together):
/// the one whose rule fails loses its writes and gets its own error; every other one commits.
pub fn a_failing_unit_among_waiting_writers_takes_back_only_its_own_writes<X: ?Sized + Transaction + 'static>(
    store: Arc<dyn Store<X>>,
) {
    #[derive(Debug, PartialEq)]
    enum E {
        Rule,
        Store(StoreError),
    }
    impl From<StoreError> for E {
        fn from(e: StoreError) -> Self {
            E::Store(e)
        }
    }
    let mut first = store.write().unwrap();
    first.append_audit(&audit("first", 1, None)).unwrap();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                in_write(&*store, |tx| {
                    tx.append_audit(&audit("member.add", 10 + t, Some(t)))?;
                    tx.append_event(&event(EventName::MemberAdded, 10 + t))?;
                    if t == 3 { Err(E::Rule) } else { Ok(()) }
                })
            })
        })
        .collect();
    // Let them queue behind the open unit.
    std::thread::sleep(std::time::Duration::from_millis(200));
    first.commit().unwrap();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (t, out) in outcomes.iter().enumerate() {
        assert_eq!(out, &if t == 3 { Err(E::Rule) } else { Ok(()) }, "writer {t}");
    }
    assert_eq!(count(&*store), (6, 5));
    let failed = in_read(&*store, |tx| tx.list_audit(&AuditFilter::default(), Page::default())).unwrap();
    assert!(failed.items.iter().all(|a| a.actor.user_id != Some(3)), "the failing unit's audit entry is gone");
}

/// A nested unit's writes go when it fails; the transaction's other writes stay.
pub fn a_nested_unit_undoes_alone<X: ?Sized + Transaction>(store: &dyn Store<X>) {
    in_write(store, |tx| {
        tx.append_audit(&audit("kept", 1, None))?;
        let failed: Result<(), StoreError> = crate::storage::in_nested(tx, |tx| {
            tx.append_audit(&audit("undone", 2, None))?;
            tx.append_event(&event(EventName::MemberAdded, 2))?;
            Err(StoreError::Duplicate)
        });
        assert_eq!(failed, Err(StoreError::Duplicate));
        crate::storage::in_nested(tx, |tx| tx.append_event(&event(EventName::MemberAdded, 3)).map(drop))?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    assert_eq!(count(store), (1, 1));
}

pub fn audit_filters_and_pages_in_the_query<X: ?Sized + Transaction>(store: &dyn Store<X>) {
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

pub fn events_come_back_in_order_after_a_cursor<X: ?Sized + Transaction>(store: &dyn Store<X>) {
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
