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
    a_failing_unit_among_waiting_writers_takes_back_only_its_own_writes(fresh());
    a_nested_unit_undoes_alone(&*fresh());
    audit_filters_and_pages_in_the_query(&*fresh());
    events_come_back_in_order_after_a_cursor(&*fresh());
    members_are_unique_per_list_whatever_the_case_and_filtered_in_the_query(&*fresh());
    bulk_inserts_skip_addresses_already_there_and_count_the_rest(&*fresh());
    idempotency_records_reserve_once_finish_and_expire(&*fresh());
    suppliers_zones_and_usage_accumulate(&*fresh());
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

/// Writers that queued behind a long one (and that an adapter may therefore commit together):
/// the one whose rule fails loses its writes and gets its own error; every other one commits.
pub fn a_failing_unit_among_waiting_writers_takes_back_only_its_own_writes(store: Arc<dyn Store>) {
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
pub fn a_nested_unit_undoes_alone(store: &dyn Store) {
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

fn new_list(store: &dyn Store, domain: &str, name: &str) -> crate::mailing::model::MailingList {
    use crate::kernel::{DomainName, ListName};
    use crate::mailing::model::{
        DomainStatus, ListId, ListKind, ListPolicies, ListStatus, ListVisibility, MailingList, SubscriptionPolicy,
    };
    let (d, l) = (DomainName::parse(domain).unwrap(), ListName::parse(name).unwrap());
    let now = Timestamp::from_unix_secs(1_700_000_000);
    in_write(store, |tx| {
        let domain_id = match tx.domain_by_name(&d)? {
            Some(existing) => existing.id,
            None => tx.insert_domain(
                &super::NewDomain {
                    name: &d,
                    status: DomainStatus::PendingMta,
                    dkim_selector: None,
                    default_subscription_policy: SubscriptionPolicy::Confirm,
                },
                now,
            )?,
        };
        let list = MailingList {
            id: ListId::from_stored(0),
            domain_id,
            domain: d.clone(),
            name: l.clone(),
            display_name: "L".into(),
            kind: ListKind::Discussion,
            status: ListStatus::Active,
            send_suspended: false,
            policies: ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Discussion),
            created_at: now,
            updated_at: now,
        };
        tx.insert_list(&list)?;
        assert_eq!(tx.lists_of_domain(domain_id, &ListVisibility::All)?.iter().filter(|x| x.name == l).count(), 1);
        Ok::<_, StoreError>(tx.list_by_name(&d, &l)?.expect("the list just made"))
    })
    .unwrap()
}

pub fn members_are_unique_per_list_whatever_the_case_and_filtered_in_the_query(store: &dyn Store) {
    use crate::kernel::EmailAddress;
    use crate::mailing::model::{DeliveryMode, MemberFilter, MemberStatus, NewMember};
    let news = new_list(store, "example.org", "news");
    let jobs = new_list(store, "example.org", "jobs");
    let now = Timestamp::from_unix_secs(1_700_000_100);
    let member = |list, email: &str, mode| NewMember {
        list_id: list,
        email: EmailAddress::parse(email).unwrap(),
        display_name: None,
        status: MemberStatus::Active,
        pending_reason: None,
        delivery_mode: mode,
        subscribed_at: Some(now),
        consent_source: None,
        consent_at: None,
        consent_id: None,
    };
    in_write(store, |tx| {
        tx.insert_member(&member(news.id, "a_b@example.net", DeliveryMode::Regular), now)?;
        tx.insert_member(&member(news.id, "axb@example.net", DeliveryMode::Digest), now)?;
        tx.insert_member(&member(jobs.id, "a_b@example.net", DeliveryMode::Regular), now)?;
        assert_eq!(
            tx.insert_member(&member(news.id, "A_B@Example.NET", DeliveryMode::Regular), now),
            Err(StoreError::Duplicate)
        );
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let total = |f: MemberFilter| in_read(store, |tx| tx.list_members(news.id, &f, Page::default())).unwrap().total;
    assert_eq!(total(MemberFilter::default()), 2, "the other list's member is not counted");
    assert_eq!(total(MemberFilter { email_contains: Some("a_b".into()), ..Default::default() }), 1, "_ is literal");
    assert_eq!(total(MemberFilter { email_contains: Some("_b".into()), ..Default::default() }), 1, "two characters");
    assert_eq!(total(MemberFilter { delivery_mode: Some(DeliveryMode::Digest), ..Default::default() }), 1);
    let found = in_read(store, |tx| tx.member_by_email(news.id, &EmailAddress::parse("A_B@EXAMPLE.net").unwrap()))
        .unwrap()
        .expect("found whatever the case");
    assert_eq!(found.email.to_string(), "a_b@example.net");
    let after = in_read(store, |tx| tx.members_after(news.id, &MemberFilter::default(), Some(found.id), 10)).unwrap();
    assert_eq!(after.len(), 1);
    let counts = in_read(store, |tx| tx.member_counts(None)).unwrap();
    assert_eq!(counts.active, 3);
    // Counts follow changes of state and mode (an adapter may keep them apart from the rows).
    let mut moved = found.clone();
    moved.status = MemberStatus::Unsubscribed;
    moved.delivery_mode = DeliveryMode::Nomail;
    in_write(store, |tx| tx.update_member(&moved, None, now)).unwrap();
    let active = MemberFilter { status: Some(MemberStatus::Active), ..Default::default() };
    assert_eq!(total(active), 1);
    assert_eq!(total(MemberFilter { delivery_mode: Some(DeliveryMode::Nomail), ..Default::default() }), 1);
    assert_eq!(in_read(store, |tx| tx.count_status(news.id, MemberStatus::Unsubscribed)).unwrap(), 1);
    assert_eq!(in_read(store, |tx| tx.member_counts(Some(&[news.id]))).unwrap().active, 1);
}

pub fn idempotency_records_reserve_once_finish_and_expire(store: &dyn Store) {
    use super::IdempotencyRecord;
    let now = Timestamp::from_unix_secs(1_700_000_000);
    let later = now.plus_secs(86_400);
    in_write(store, |tx| tx.idempotency_reserve(1, "k", "fp", now, later)).unwrap();
    assert_eq!(in_write(store, |tx| tx.idempotency_reserve(1, "k", "fp", now, later)), Err(StoreError::Duplicate));
    in_write(store, |tx| tx.idempotency_reserve(2, "k", "fp", now, later)).unwrap();
    assert!(matches!(
        in_read(store, |tx| tx.idempotency_get(1, "k")).unwrap(),
        Some(IdempotencyRecord::Running { .. })
    ));
    in_write(store, |tx| tx.idempotency_finish(1, "k", 201, "{\"data\":1}")).unwrap();
    assert_eq!(
        in_read(store, |tx| tx.idempotency_get(1, "k")).unwrap(),
        Some(IdempotencyRecord::Done {
            fingerprint: "fp".into(),
            status: 201,
            body: "{\"data\":1}".into(),
            expires_at: later
        })
    );
    assert_eq!(in_write(store, |tx| tx.idempotency_purge(later)).unwrap(), 2);
    assert_eq!(in_read(store, |tx| tx.idempotency_get(1, "k")).unwrap(), None);
}

pub fn suppliers_zones_and_usage_accumulate(store: &dyn Store) {
    use crate::access::model::Profile;
    use crate::kernel::EmailAddress;
    use crate::ocr::cuts::LearnedZone;
    use crate::ocr::suppliers::{self, Facts, Source, VatNumber};
    use crate::ocr::usage::MonthUsage;
    use crate::ocr::zones::PixelRect;
    let now = Timestamp::from_unix_secs(1_700_000_000);
    let vat = VatNumber::parse("FR40303265045").unwrap();
    in_write(store, |tx| {
        let user = tx.insert_user(&EmailAddress::parse("u@example.org").unwrap(), &Profile::default(), None, now)?;
        let facts = Facts { vat_number: Some(vat.clone()), name: Some("ACME".into()), ..Facts::default() };
        let s = suppliers::learn(tx, &facts, Source::Invoice, now)?.expect("identified");
        // Found again by number and by folded name; a later extraction does not rename it.
        let again = Facts { vat_number: Some(vat.clone()), name: Some("Misread".into()), ..Facts::default() };
        assert_eq!(
            suppliers::learn(tx, &again, Source::Invoice, now)?.map(|x| (x.id, x.name)),
            Some((s.id, "ACME".into()))
        );
        assert_eq!(tx.supplier_by_name("acme")?.map(|x| x.id), Some(s.id));
        let zone = |name: &str, x| LearnedZone {
            name: name.into(),
            page: 1,
            rect: PixelRect { x, y: 2, w: 3, h: 4 },
            confirmations: 1,
            last_value: "v".into(),
            updated_at: now,
        };
        tx.confirm_supplier_zone(s.id, &zone("total", 1))?;
        tx.confirm_supplier_zone(s.id, &zone("date", 1))?;
        tx.confirm_supplier_zone(s.id, &zone("total", 9))?;
        let zones = tx.supplier_zones(s.id)?;
        assert_eq!(
            zones.iter().map(|z| (z.name.as_str(), z.confirmations, z.rect.x)).collect::<Vec<_>>(),
            [("total", 2, 9), ("date", 1, 1)]
        );
        let d = |documents, pages, cuts| MonthUsage { month: String::new(), documents, pages, cuts };
        tx.add_ocr_usage(user, "2026-10", &d(1, 3, 0))?;
        tx.add_ocr_usage(user, "2026-11", &d(1, 2, 0))?;
        tx.add_ocr_usage(user, "2026-11", &d(0, 0, 5))?;
        let months = tx.ocr_usage_of(user)?;
        assert_eq!(
            months.iter().map(|m| (m.month.as_str(), m.documents, m.pages, m.cuts)).collect::<Vec<_>>(),
            [("2026-11", 1, 2, 5), ("2026-10", 1, 3, 0)]
        );
        tx.set_ocr_plan(user, Some(10))?;
        assert_eq!(tx.ocr_plan(user)?, Some(10));
        tx.set_ocr_plan(user, None)?;
        assert_eq!(tx.ocr_plan(user)?, None);
        Ok::<_, StoreError>(())
    })
    .unwrap();
}

pub fn bulk_inserts_skip_addresses_already_there_and_count_the_rest(store: &dyn Store) {
    use crate::kernel::EmailAddress;
    use crate::mailing::model::{DeliveryMode, MemberFilter, MemberStatus, NewMember};
    let news = new_list(store, "example.org", "news");
    let now = Timestamp::from_unix_secs(1_700_000_100);
    let member = |email: &str, mode| NewMember {
        list_id: news.id,
        email: EmailAddress::parse(email).unwrap(),
        display_name: Some("N".into()),
        status: MemberStatus::Active,
        pending_reason: None,
        delivery_mode: mode,
        subscribed_at: Some(now),
        consent_source: Some("import".into()),
        consent_at: Some(now),
        consent_id: None,
    };
    in_write(store, |tx| tx.insert_member(&member("there@example.net", DeliveryMode::Regular), now)).unwrap();
    // More rows than one statement takes, an address already there (another case), and one
    // address twice in the same slice, far apart.
    let mut rows: Vec<NewMember> = (0..150)
        .map(|i| {
            member(&format!("m{i}@example.net"), if i % 3 == 0 { DeliveryMode::Digest } else { DeliveryMode::Regular })
        })
        .collect();
    rows[70] = member("THERE@example.net", DeliveryMode::Regular);
    rows[140] = member("M5@Example.net", DeliveryMode::Regular);
    // An address of the slice on another list is that list's new member.
    let jobs = new_list(store, "example.org", "jobs");
    rows[20] = NewMember { list_id: jobs.id, ..member("m1@example.net", DeliveryMode::Regular) };
    let ids = in_write(store, |tx| tx.insert_members_if_absent(&rows, now)).unwrap();
    assert_eq!(ids.len(), 150);
    assert!(ids[70].is_none() && ids[140].is_none(), "addresses already on the list are skipped");
    assert!(ids[1].is_some() && ids[20].is_some() && ids[1] != ids[20], "one address, two lists");
    assert_eq!(
        in_read(store, |tx| tx.member_by_id(jobs.id, ids[20].unwrap())).unwrap().map(|m| m.list_id),
        Some(jobs.id)
    );
    let inserted: Vec<_> = ids.iter().flatten().collect();
    assert_eq!(inserted.len(), 148);
    assert!(inserted.windows(2).all(|w| w[0] < w[1]), "ids follow the order of the rows");
    for (row, id) in rows.iter().zip(&ids) {
        if let Some(id) = id {
            let m = in_read(store, |tx| tx.member_by_id(row.list_id, *id)).unwrap().unwrap();
            assert_eq!((m.email.to_string(), m.delivery_mode), (row.email.to_string(), row.delivery_mode));
        }
    }
    let total = |f: MemberFilter| in_read(store, |tx| tx.list_members(news.id, &f, Page::default())).unwrap().total;
    let digest =
        rows.iter().zip(&ids).filter(|(r, id)| id.is_some() && r.delivery_mode == DeliveryMode::Digest).count();
    assert_eq!(total(MemberFilter { status: Some(MemberStatus::Active), ..Default::default() }), 148);
    assert_eq!(total(MemberFilter { delivery_mode: Some(DeliveryMode::Digest), ..Default::default() }), digest as u64);
}
