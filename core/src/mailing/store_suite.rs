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
    domains_are_unique_listed_by_visibility_and_keep_their_dkim_key(&*fresh());
    a_send_fans_out_to_active_regular_members_and_its_copies_are_leased_once(&*fresh());
    webhook_deliveries_are_queued_once_leased_and_stop_when_the_receiver_is_gone(&*fresh());
    login_links_are_used_once_and_subscriptions_are_found_whatever_the_case(&*fresh());
    inbound_messages_are_finished_once_and_held_posts_expire_by_their_list_s_days(&*fresh());
    credentials_are_one_per_list_and_kind_and_throttling_only_moves_forward(&*fresh());
    bounces_are_recorded_counted_and_scores_decay_for_quiet_members(&*fresh());
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

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_secs(1_700_000_000 + secs)
}

/// A post (not a digest) to `list`, its text "b".
fn post<'a>(
    list: crate::mailing::model::ListId,
    subject: &'a str,
    message_id: &'a str,
    raw: Option<&'a [u8]>,
) -> super::ports::NewSend<'a> {
    super::ports::NewSend {
        list_id: list,
        subject,
        text: Some("b"),
        html: None,
        message_id,
        created_by: None,
        kind: crate::mailing::model::SendKind::Post,
        raw,
    }
}

fn active(
    list: crate::mailing::model::ListId,
    email: &str,
    mode: crate::mailing::model::DeliveryMode,
) -> crate::mailing::model::NewMember {
    use crate::mailing::model::{MemberStatus, NewMember};
    NewMember {
        list_id: list,
        email: crate::kernel::EmailAddress::parse(email).unwrap(),
        display_name: None,
        status: MemberStatus::Active,
        pending_reason: None,
        delivery_mode: mode,
        subscribed_at: Some(at(0)),
        consent_source: None,
        consent_at: None,
        consent_id: None,
    }
}

pub fn domains_are_unique_listed_by_visibility_and_keep_their_dkim_key(store: &Store) {
    use crate::kernel::DomainName;
    use crate::mailing::model::{DomainStatus, DomainVisibility, SubscriptionPolicy};
    let name = |n: &str| DomainName::parse(n).unwrap();
    let (a, b) = (name("a.example"), name("b.example"));
    let new = |n| super::ports::NewDomain {
        name: n,
        status: DomainStatus::PendingMta,
        dkim_selector: Some("s1"),
        default_subscription_policy: SubscriptionPolicy::Confirm,
    };
    let id = in_write(store, |tx| {
        let id = tx.insert_domain(&new(&b), at(1))?;
        tx.insert_domain(&new(&a), at(1))?;
        assert_eq!(tx.insert_domain(&new(&a), at(2)), Err(StoreError::Duplicate));
        // The refusal leaves the transaction usable.
        tx.set_domain_dkim_key(id, "s1", "sealed", "MIIB")?;
        Ok::<_, StoreError>(id)
    })
    .unwrap();
    let mut d = in_read(store, |tx| tx.domain_by_id(id)).unwrap().unwrap();
    assert_eq!(d.dkim_public_key, Some(("s1".into(), "MIIB".into())));
    assert_eq!(in_read(store, |tx| tx.domain_dkim_private(id)).unwrap(), Some(("s1".into(), "sealed".into())));
    d.status = DomainStatus::Active;
    d.dns_ok = Some(true);
    d.dns_checked_at = Some(at(3));
    in_write(store, |tx| tx.update_domain(&d)).unwrap();
    assert_eq!(in_read(store, |tx| tx.domain_by_name(&b)).unwrap().unwrap(), d);
    let names = |v: &DomainVisibility, s| {
        in_read(store, |tx| tx.list_domains(v, s, Page::default()))
            .unwrap()
            .items
            .into_iter()
            .map(|d| d.name.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&DomainVisibility::All, None), ["a.example", "b.example"], "ordered by name");
    assert_eq!(names(&DomainVisibility::All, Some(DomainStatus::Active)), ["b.example"]);
    assert_eq!(names(&DomainVisibility::Only(vec![a.clone()]), None), ["a.example"]);
    assert!(names(&DomainVisibility::Only(Vec::new()), None).is_empty());
    assert_eq!(in_read(store, |tx| tx.domain_by_name(&name("c.example"))).unwrap(), None);
}

pub fn a_send_fans_out_to_active_regular_members_and_its_copies_are_leased_once(store: &Store) {
    use crate::mailing::model::{CopyState, DeliveryMode, MemberStatus, SendState};
    let news = new_list(store, "example.org", "news");
    let send = in_write(store, |tx| {
        tx.insert_member(&active(news.id, "one@Alpha.example", DeliveryMode::Regular), at(0))?;
        tx.insert_member(&active(news.id, "two@alpha.example", DeliveryMode::Regular), at(0))?;
        tx.insert_member(&active(news.id, "three@beta.example", DeliveryMode::Regular), at(0))?;
        tx.insert_member(&active(news.id, "digest@beta.example", DeliveryMode::Digest), at(0))?;
        let gone = tx.insert_member(&active(news.id, "gone@beta.example", DeliveryMode::Regular), at(0))?;
        let mut m = tx.find_member(gone)?.unwrap();
        m.status = MemberStatus::Unsubscribed;
        tx.update_member(&m, None, at(0))?;
        let send = tx.insert_send(&post(news.id, "Hello", "m1@example.org", Some(b"raw post")), at(10))?;
        assert_eq!(tx.fan_out(send, news.id, DeliveryMode::Regular, at(10))?, 3, "active regular members only");
        Ok::<_, StoreError>(send)
    })
    .unwrap();
    let record = in_read(store, |tx| tx.send_by_id(news.id, send)).unwrap().unwrap();
    assert_eq!((record.state, record.recipients, record.subject.as_str()), (SendState::Queued, 3, "Hello"));
    assert_eq!(in_read(store, |tx| tx.send_raw(send)).unwrap().as_deref(), Some(&b"raw post"[..]));
    assert_eq!(in_read(store, |tx| tx.send_list(send)).unwrap(), Some(news.id));
    assert_eq!(in_read(store, |tx| tx.lists_with_digest_members()).unwrap(), [news.id]);
    assert_eq!(in_read(store, |tx| tx.posts_between(news.id, None, at(10))).unwrap().len(), 1);
    assert!(in_read(store, |tx| tx.posts_between(news.id, Some(at(10)), at(20))).unwrap().is_empty());
    assert!(!in_read(store, |tx| tx.copies_due(at(9))).unwrap(), "nothing due before the send");
    assert!(in_read(store, |tx| tx.copies_due(at(10))).unwrap());

    // Each destination domain is free (no batch in flight): one claim takes every due copy.
    let mut first = in_write(store, |tx| tx.claim_copies(at(11), at(71), 10, 1)).unwrap();
    first.sort_by_key(|c| c.id);
    assert_eq!(first.len(), 3, "one claim leases every due copy when each domain is free");
    let again = in_write(store, |tx| tx.claim_copies(at(12), at(72), 10, 1)).unwrap();
    assert!(again.is_empty(), "a leased copy is not leased again");
    let domains: Vec<String> = first.iter().map(|c| c.recipient.domain().as_str().to_lowercase()).collect();
    assert!(domains.contains(&"alpha.example".to_owned()) && domains.contains(&"beta.example".to_owned()));
    assert!(first.iter().all(|c| c.attempts == 1 && c.send_id == send));
    let counts = in_read(store, |tx| tx.copy_counts(send)).unwrap();
    assert_eq!(counts.get(CopyState::Sending), 3);
    in_write(store, |tx| tx.mark_sending(send)).unwrap();

    // Outcomes: sent, deferred (due again later), released (attempt not counted).
    let (sent, deferred, released) = (first[0].id, first[1].id, first[2].id);
    in_write(store, |tx| {
        assert!(tx.finish_copy(sent, CopyState::Sent, None, None, at(13))?);
        assert!(!tx.finish_copy(sent, CopyState::Failed, None, Some("late"), at(13))?, "finished once");
        assert!(tx.finish_copy(deferred, CopyState::Deferred, Some(at(100)), Some("421"), at(13))?);
        tx.release_copy(released, at(14))
    })
    .unwrap();
    let retaken = in_write(store, |tx| tx.claim_copies(at(15), at(75), 10, 1)).unwrap();
    assert_eq!(retaken.iter().map(|c| (c.id, c.attempts)).collect::<Vec<_>>(), [(released, 1)]);
    // A lease that runs out goes back to the queue.
    assert_eq!(in_write(store, |tx| tx.requeue_expired(at(74))).unwrap(), 0);
    assert_eq!(in_write(store, |tx| tx.requeue_expired(at(76))).unwrap(), 1);
    assert!(!in_write(store, |tx| tx.finish_copy(released, CopyState::Sent, None, None, at(77))).unwrap());
    let (stats, oldest) = in_read(store, |tx| tx.queue_stats()).unwrap();
    assert_eq!((stats.get(CopyState::Queued), stats.get(CopyState::Deferred)), (1, 1));
    assert_eq!(oldest, Some(at(10)));
    assert_eq!(in_read(store, |tx| tx.open_sends(Some(&[news.id]))).unwrap(), 1);
    assert!(in_read(store, |tx| tx.settled_sends(10)).unwrap().is_empty(), "copies still wait");
    assert_eq!(in_write(store, |tx| tx.cancel_waiting(send, at(80))).unwrap(), 2);
    assert_eq!(in_read(store, |tx| tx.settled_sends(10)).unwrap(), [send]);
    assert!(in_write(store, |tx| tx.close_send(send, SendState::Completed, at(81))).unwrap());
    assert!(!in_write(store, |tx| tx.close_send(send, SendState::Completed, at(82))).unwrap(), "closed once");
    assert_eq!(in_read(store, |tx| tx.open_sends(None)).unwrap(), 0);

    // A suspended list's copies are not claimed.
    let send2 = in_write(store, |tx| {
        let s = tx.insert_send(&post(news.id, "Again", "m2@example.org", None), at(90))?;
        tx.fan_out(s, news.id, DeliveryMode::Regular, at(90))?;
        let mut l = tx.list_by_id(news.id)?.unwrap();
        l.send_suspended = true;
        tx.update_list(&l)?;
        Ok::<_, StoreError>(s)
    })
    .unwrap();
    assert!(in_write(store, |tx| tx.claim_copies(at(91), at(151), 10, 5)).unwrap().is_empty());
    assert_eq!(in_read(store, |tx| tx.send_raw(send2)).unwrap(), None);
    in_write(store, |tx| tx.set_digest_state(news.id, at(5), at(6))).unwrap();
    in_write(store, |tx| tx.set_digest_state(news.id, at(7), at(8))).unwrap();
    assert_eq!(in_read(store, |tx| tx.digest_state(news.id)).unwrap(), Some((at(7), at(8))));
}

pub fn webhook_deliveries_are_queued_once_leased_and_stop_when_the_receiver_is_gone(store: &Store) {
    use super::ports::{CallResult, NewWebhook};
    use crate::kernel::{Event, EventId, EventName};
    use crate::mailing::model::DeliveryState;
    let events = [EventName::parse("send.completed").unwrap()];
    let new = |url| NewWebhook {
        url,
        events: &events,
        domain_id: None,
        list_id: None,
        secret_sealed: "sealed",
        created_by: Some(7),
    };
    let (one, two) = in_write(store, |tx| {
        Ok::<_, StoreError>((
            tx.insert_webhook(&new("https://a.example/h"), at(0))?,
            tx.insert_webhook(&new("https://b.example/h"), at(0))?,
        ))
    })
    .unwrap();
    let hook = in_read(store, |tx| tx.webhook_by_id(one)).unwrap().unwrap();
    assert_eq!(
        (hook.url.as_str(), hook.events.as_slice(), hook.created_by),
        ("https://a.example/h", &events[..], Some(7))
    );
    assert_eq!(in_read(store, |tx| tx.all_webhooks()).unwrap().iter().map(|w| w.id).collect::<Vec<_>>(), [one, two]);
    assert_eq!(in_read(store, |tx| tx.webhook_cursor()).unwrap(), None);
    in_write(store, |tx| tx.set_webhook_cursor(EventId::from_stored(5))).unwrap();
    in_write(store, |tx| tx.set_webhook_cursor(EventId::from_stored(3))).unwrap();
    assert_eq!(in_read(store, |tx| tx.webhook_cursor()).unwrap(), Some(EventId::from_stored(5)), "never goes back");

    let event = |id| Event {
        id: EventId::from_stored(id),
        public_id: format!("evt_{id}"),
        name: events[0],
        at: at(1),
        domain_id: None,
        list_id: None,
        data: serde_json::json!({}),
    };
    in_write(store, |tx| {
        tx.enqueue_delivery(one, &event(1), "{}", at(1))?;
        tx.enqueue_delivery(one, &event(1), "{}", at(1))?;
        tx.enqueue_delivery(one, &event(2), "{}", at(2))?;
        tx.enqueue_delivery(two, &event(1), "{}", at(1))
    })
    .unwrap();
    assert_eq!(in_read(store, |tx| tx.delivery_counts(one)).unwrap(), [(DeliveryState::Queued, 2)], "queued once");
    assert!(in_read(store, |tx| tx.deliveries_waiting(at(1))).unwrap());
    let mut leased = in_write(store, |tx| tx.claim_deliveries(at(3), at(63), 10)).unwrap();
    leased.sort_by_key(|d| d.id);
    assert_eq!(leased.len(), 3);
    assert!(in_write(store, |tx| tx.claim_deliveries(at(4), at(64), 10)).unwrap().is_empty());
    let of_one: Vec<_> = leased.iter().filter(|d| d.webhook_id == one).collect();
    assert_eq!(of_one[0].event_public_id, "evt_1");
    in_write(store, |tx| {
        assert!(tx.finish_delivery(of_one[0].id, DeliveryState::Delivered, None, None, at(5))?);
        assert!(!tx.finish_delivery(of_one[0].id, DeliveryState::Failed, None, None, at(5))?);
        tx.release_delivery(of_one[1].id, at(5))?;
        tx.record_call(one, CallResult::Success, at(5))?;
        tx.record_call(two, CallResult::Gone("410"), at(5))
    })
    .unwrap();
    assert_eq!(in_write(store, |tx| tx.requeue_expired_deliveries(at(64))).unwrap(), 1, "two's lease ran out");
    // A webhook gone is not called again; the other one's released delivery is claimed again.
    let again = in_write(store, |tx| tx.claim_deliveries(at(65), at(125), 10)).unwrap();
    assert_eq!(again.iter().map(|d| (d.id, d.attempts)).collect::<Vec<_>>(), [(of_one[1].id, 1)]);
    let gone = in_read(store, |tx| tx.webhook_by_id(two)).unwrap().unwrap();
    assert_eq!((gone.disabled_at, gone.last_error.as_deref()), (Some(at(5)), Some("410")));
    assert_eq!(in_read(store, |tx| tx.webhook_by_id(one)).unwrap().unwrap().last_success_at, Some(at(5)));
    assert!(in_write(store, |tx| tx.delete_webhook(one)).unwrap());
    assert!(!in_write(store, |tx| tx.delete_webhook(one)).unwrap());
    assert!(in_read(store, |tx| tx.delivery_counts(one)).unwrap().is_empty(), "its deliveries went with it");
}

pub fn login_links_are_used_once_and_subscriptions_are_found_whatever_the_case(store: &Store) {
    use crate::kernel::EmailAddress;
    use crate::mailing::model::{DeliveryMode, MemberStatus};
    let email = EmailAddress::parse("Reader@Example.net").unwrap();
    in_write(store, |tx| tx.insert_login_link("h1", &email, at(0), at(900))).unwrap();
    assert_eq!(in_write(store, |tx| tx.insert_login_link("h1", &email, at(0), at(900))), Err(StoreError::Duplicate));
    let link = in_read(store, |tx| tx.login_link_by_hash("h1")).unwrap().unwrap();
    assert_eq!((link.email.to_string(), link.used_at), (email.to_string(), None));
    assert!(in_write(store, |tx| tx.use_login_link(link.id, at(1))).unwrap());
    assert!(!in_write(store, |tx| tx.use_login_link(link.id, at(2))).unwrap(), "used once");
    assert_eq!(in_read(store, |tx| tx.login_link_by_hash("nope")).unwrap(), None);

    let session = in_write(store, |tx| tx.insert_subscriber_session("s1", &email, at(0), at(3600))).unwrap();
    in_write(store, |tx| {
        tx.touch_subscriber_session(session, at(10))?;
        tx.revoke_subscriber_session(session, at(20))?;
        tx.revoke_subscriber_session(session, at(30))
    })
    .unwrap();
    let s = in_read(store, |tx| tx.subscriber_session_by_hash("s1")).unwrap().unwrap();
    assert_eq!((s.id, s.last_seen_at, s.expires_at, s.revoked_at), (session, at(10), at(3600), Some(at(20))));

    let news = new_list(store, "example.org", "news");
    let jobs = new_list(store, "example.org", "jobs");
    in_write(store, |tx| {
        tx.insert_member(&active(jobs.id, "reader@example.net", DeliveryMode::Regular), at(0))?;
        tx.insert_member(&active(news.id, "READER@example.net", DeliveryMode::Digest), at(0))?;
        tx.insert_member(&active(news.id, "other@example.net", DeliveryMode::Regular), at(0))
    })
    .unwrap();
    let found = in_read(store, |tx| tx.subscriptions_of(&email, &[MemberStatus::Active], Page::default())).unwrap();
    assert_eq!(found.total, 2);
    let lists: Vec<_> = found.items.iter().map(|s| (s.list.id, s.member.list_id)).collect();
    let mut ordered = [(news.id, news.id), (jobs.id, jobs.id)];
    ordered.sort();
    assert_eq!(lists, ordered, "ordered by list, each with its list");
    let none = in_read(store, |tx| tx.subscriptions_of(&email, &[MemberStatus::Pending], Page::default())).unwrap();
    assert_eq!(none.total, 0);
}

pub fn inbound_messages_are_finished_once_and_held_posts_expire_by_their_list_s_days(store: &Store) {
    use super::ports::{NewHeldPost, NewInbound};
    use crate::mailing::model::{HoldReason, InboundState, Role};
    let news = new_list(store, "example.org", "news");
    let bounces = Role::Bounces { token: Some("tok".into()) };
    let (first, second) = in_write(store, |tx| {
        let first = tx.insert_inbound(
            &NewInbound {
                list_id: news.id,
                role: &Role::Post,
                recipient: "news@example.org",
                envelope_from: Some("a@x.example"),
                raw: b"post",
            },
            at(0),
        )?;
        let second = tx.insert_inbound(
            &NewInbound {
                list_id: news.id,
                role: &bounces,
                recipient: "news-bounces+tok@example.org",
                envelope_from: None,
                raw: b"dsn",
            },
            at(1),
        )?;
        Ok::<_, StoreError>((first, second))
    })
    .unwrap();
    let m = in_read(store, |tx| tx.inbound_by_id(second)).unwrap().unwrap();
    assert_eq!((m.role, m.envelope_from, m.raw, m.state), (bounces, None, b"dsn".to_vec(), InboundState::Received));
    assert_eq!(in_read(store, |tx| tx.inbound_waiting(None, 10)).unwrap(), [first, second]);
    assert_eq!(in_read(store, |tx| tx.inbound_waiting(Some(first), 10)).unwrap(), [second]);
    assert!(in_write(store, |tx| tx.finish_inbound(first, "held", at(2))).unwrap());
    assert!(!in_write(store, |tx| tx.finish_inbound(first, "posted", at(3))).unwrap(), "finished once");
    assert_eq!(in_read(store, |tx| tx.inbound_by_id(first)).unwrap().unwrap().outcome.as_deref(), Some("held"));

    let held = |raw: &'static [u8], id: &'static str| NewHeldPost {
        list_id: news.id,
        inbound_id: Some(first),
        raw,
        envelope_from: Some("a@x.example"),
        from: Some("A <a@x.example>"),
        subject: Some("S"),
        message_id: Some(id),
        reason: HoldReason::NotMember,
    };
    let (old, new) = in_write(store, |tx| {
        tx.set_held_days(news.id, 1)?;
        Ok::<_, StoreError>((
            tx.insert_held(&held(b"old post", "old@x"), at(0))?,
            tx.insert_held(&held(b"new post", "new@x"), at(86_400))?,
        ))
    })
    .unwrap();
    let listed = in_read(store, |tx| tx.held_posts(news.id, Page::default())).unwrap();
    assert_eq!(listed.total, 2);
    assert!(listed.items.iter().all(|h| h.raw.is_empty()), "the listing leaves the message out");
    assert_eq!(listed.items[0].size, 8);
    let full = in_read(store, |tx| tx.held_by_id(news.id, old)).unwrap().unwrap();
    assert_eq!(
        (full.raw.as_slice(), full.reason, full.inbound_id),
        (&b"old post"[..], HoldReason::NotMember, Some(first))
    );
    assert!(in_read(store, |tx| tx.message_id_seen(news.id, "old@x", at(-1))).unwrap());
    assert!(!in_read(store, |tx| tx.message_id_seen(news.id, "old@x", at(0))).unwrap(), "only after `since`");
    assert_eq!(in_read(store, |tx| tx.count_held(Some(&[news.id]))).unwrap(), 2);
    assert_eq!(in_write(store, |tx| tx.expire_held(at(86_401))).unwrap(), [(news.id, old)]);
    assert!(in_write(store, |tx| tx.delete_held(news.id, new)).unwrap());
    assert!(!in_write(store, |tx| tx.delete_held(news.id, new)).unwrap());
    assert_eq!(in_read(store, |tx| tx.count_held(None)).unwrap(), 0);
}

pub fn credentials_are_one_per_list_and_kind_and_throttling_only_moves_forward(store: &Store) {
    use crate::mailing::model::{CredentialKind, MailCredential, Security};
    let news = new_list(store, "example.org", "news");
    let cred = |kind, host: &str| MailCredential {
        list_id: news.id,
        kind,
        host: host.into(),
        port: 465,
        security: Security::Tls,
        username: "u".into(),
        password_sealed: "sealed".into(),
        folder: None,
        last_ok_at: None,
        last_error: None,
        last_error_at: None,
        created_at: at(0),
        updated_at: at(0),
    };
    in_write(store, |tx| {
        tx.upsert_credential(&cred(CredentialKind::Submission, "old.example"))?;
        tx.upsert_credential(&cred(CredentialKind::Submission, "smtp.example"))?;
        tx.upsert_credential(&cred(CredentialKind::Ingest, "imap.example"))?;
        tx.record_credential_outcome(news.id, CredentialKind::Ingest, Some("auth failed"), at(5))?;
        tx.record_credential_outcome(news.id, CredentialKind::Submission, None, at(6))?;
        tx.throttle_submission(news.id, at(100))?;
        tx.throttle_submission(news.id, at(50))
    })
    .unwrap();
    let all = in_read(store, |tx| tx.credentials_of(news.id)).unwrap();
    assert_eq!(all.iter().map(|c| c.host.as_str()).collect::<Vec<_>>(), ["imap.example", "smtp.example"]);
    let ingest = in_read(store, |tx| tx.credential(news.id, CredentialKind::Ingest)).unwrap().unwrap();
    assert_eq!((ingest.last_error.as_deref(), ingest.last_error_at), (Some("auth failed"), Some(at(5))));
    let submission = in_read(store, |tx| tx.credentials_of_kind(CredentialKind::Submission)).unwrap();
    assert_eq!(submission[0].last_ok_at, Some(at(6)));
    // The list's copies wait until the throttle's end (the later of the two), then go.
    use crate::mailing::model::DeliveryMode;
    in_write(store, |tx| {
        tx.insert_member(&active(news.id, "r@x.example", DeliveryMode::Regular), at(0))?;
        let s = tx.insert_send(&post(news.id, "S", "m@x", None), at(10))?;
        tx.fan_out(s, news.id, DeliveryMode::Regular, at(10))
    })
    .unwrap();
    assert!(in_write(store, |tx| tx.claim_copies(at(99), at(120), 10, 5)).unwrap().is_empty(), "throttled");
    assert_eq!(in_write(store, |tx| tx.claim_copies(at(101), at(120), 10, 5)).unwrap().len(), 1);
    assert!(in_write(store, |tx| tx.delete_credential(news.id, CredentialKind::Ingest)).unwrap());
    assert!(!in_write(store, |tx| tx.delete_credential(news.id, CredentialKind::Ingest)).unwrap());
    assert_eq!(in_read(store, |tx| tx.credential(news.id, CredentialKind::Ingest)).unwrap(), None);
}

pub fn bounces_are_recorded_counted_and_scores_decay_for_quiet_members(store: &Store) {
    use super::ports::NewBounce;
    use crate::access::model::{Profile, Role};
    use crate::kernel::{DomainName, EmailAddress, ListName};
    use crate::mailing::model::{BounceSource, CopyState, DeliveryMode, MemberStatus, PendingReason, Permanence};
    let news = new_list(store, "example.org", "news");
    let (member, copy) = in_write(store, |tx| {
        let member = tx.insert_member(&active(news.id, "b@x.example", DeliveryMode::Regular), at(0))?;
        let s = tx.insert_send(&post(news.id, "S", "m@x", None), at(0))?;
        tx.fan_out(s, news.id, DeliveryMode::Regular, at(0))?;
        let copy = tx.claim_copies(at(1), at(60), 1, 5)?.remove(0);
        Ok::<_, StoreError>((member, copy))
    })
    .unwrap();
    assert!(
        !in_write(store, |tx| tx.mark_copy_bounced(copy.id, "550", at(2))).unwrap(),
        "a leased copy is not bounced"
    );
    in_write(store, |tx| tx.finish_copy(copy.id, CopyState::Sent, None, None, at(2))).unwrap();
    assert!(in_write(store, |tx| tx.mark_copy_bounced(copy.id, "550", at(3))).unwrap());
    let bounced = in_read(store, |tx| tx.copy_for_bounce(copy.id)).unwrap().unwrap();
    assert_eq!((bounced.member_id, bounced.state), (member, CopyState::Bounced));
    let bounce = |copy_id, permanence| NewBounce {
        list_id: news.id,
        member_id: member,
        copy_id,
        permanence,
        source: BounceSource::Dsn,
        status_code: Some("5.1.1"),
        diagnostic: None,
        scored: true,
    };
    in_write(store, |tx| {
        tx.insert_bounce(&bounce(Some(copy.id), Permanence::Permanent), at(3))?;
        tx.insert_bounce(&bounce(None, Permanence::Temporary), at(4))?;
        let mut m = tx.find_member(member)?.unwrap();
        m.bounce_score = 3;
        m.last_bounce_at = Some(at(4));
        tx.update_member(&m, None, at(4))
    })
    .unwrap();
    let history = in_read(store, |tx| tx.member_bounces(member, 10)).unwrap();
    assert_eq!(
        history.iter().map(|b| b.permanence).collect::<Vec<_>>(),
        [Permanence::Temporary, Permanence::Permanent]
    );
    assert_eq!(history[1].copy_id, Some(copy.id));
    assert_eq!(in_read(store, |tx| tx.bounce_counts(None, at(0))).unwrap(), (1, 1));
    assert_eq!(in_read(store, |tx| tx.bounce_counts(Some(&[news.id]), at(4))).unwrap(), (0, 1));
    assert_eq!(in_write(store, |tx| tx.decay_bounce_scores(at(3), at(10))).unwrap(), 0, "not quiet long enough");
    assert_eq!(in_write(store, |tx| tx.decay_bounce_scores(at(4), at(10))).unwrap(), 1);
    assert_eq!(in_read(store, |tx| tx.find_member(member)).unwrap().unwrap().bounce_score, 0);

    // Owners and moderators hear of what waits; a disabled account does not.
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    in_write(store, |tx| {
        let owner =
            tx.insert_user(&EmailAddress::parse("owner@example.org").unwrap(), &Profile::default(), None, at(0))?;
        let moderator =
            tx.insert_user(&EmailAddress::parse("mod@example.org").unwrap(), &Profile::default(), None, at(0))?;
        tx.grant_role(owner, &Role::Owner(d.clone(), l.clone()), at(0))?;
        tx.grant_role(moderator, &Role::Moderator(d.clone(), l.clone()), at(0))?;
        let mut pending = active(news.id, "wait@x.example", DeliveryMode::Regular);
        pending.status = MemberStatus::Pending;
        pending.pending_reason = Some(PendingReason::Moderation);
        tx.insert_member(&pending, at(0))
    })
    .unwrap();
    let emails = |v: Vec<EmailAddress>| v.iter().map(|e| e.to_string()).collect::<Vec<_>>();
    assert_eq!(emails(in_read(store, |tx| tx.list_owners(&d, &l)).unwrap()), ["owner@example.org"]);
    assert_eq!(
        emails(in_read(store, |tx| tx.list_moderators(&d, &l)).unwrap()),
        ["mod@example.org", "owner@example.org"]
    );
    assert_eq!(emails(in_read(store, |tx| tx.list_owner_emails(&news)).unwrap()), ["owner@example.org"]);
    assert_eq!(in_read(store, |tx| tx.pending_moderation(news.id, Page::default())).unwrap().total, 1);
    assert_eq!(in_read(store, |tx| tx.count_pending_moderation(Some(&[news.id]))).unwrap(), 1);
    assert_eq!(in_read(store, |tx| tx.count_pending_moderation(Some(&[]))).unwrap(), 0);
}
