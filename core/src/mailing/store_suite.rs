//! The mailing context's store suite: every storage adapter runs it on its implementation of
//! [`super::ports::Tx`] (with the kernel's `crate::storage::suite`).

use super::ports::Store;
use crate::kernel::{Page, Timestamp};
use crate::storage::{StoreError, in_read, in_write};
use std::sync::Arc;

pub type Factory<'a> = &'a dyn Fn() -> Arc<Store>;

pub fn run_all(fresh: Factory<'_>) {
    members_are_unique_per_list_whatever_the_case_and_filtered_in_the_query(&*fresh());
    bulk_inserts_skip_addresses_already_there_and_count_the_rest(&*fresh());
    idempotency_records_reserve_once_finish_and_expire(&*fresh());
}

fn new_list(store: &Store, domain: &str, name: &str) -> crate::mailing::model::MailingList {
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
                &super::ports::NewDomain {
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

pub fn members_are_unique_per_list_whatever_the_case_and_filtered_in_the_query(store: &Store) {
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

pub fn idempotency_records_reserve_once_finish_and_expire(store: &Store) {
    use super::ports::IdempotencyRecord;
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

pub fn bulk_inserts_skip_addresses_already_there_and_count_the_rest(store: &Store) {
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
