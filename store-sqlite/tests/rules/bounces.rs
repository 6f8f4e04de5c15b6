//! Bounce scoring over a real store: a DSN scores its member once a day, thresholds, decay,
//! forwarding what names no copy.

use crate::prelude::*;
use courrier_core::mailing::Service;

use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::users::{self, NewUser};
use courrier_core::kernel::{Clock, DomainName, EmailAddress, ListName};
use courrier_core::mailing::bounces::*;
use courrier_core::mailing::delivery::{self, DeliveryConfig};
use courrier_core::mailing::members::{self, AddMember};
use courrier_core::mailing::model::{CopyId, CopyState, DeliveryMode, SendId, SubscriptionPolicy};
use courrier_core::mailing::{digests, domains, lists, sends};
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

struct World {
    app: Service,
    clock: Arc<FixedClock>,
    mail: Arc<RecordingTransport>,
    list: MailingList,
    _dir: tempfile::TempDir,
}

/// A list (owner `owner@example.org`) with members `m0@example.net`, `m1@example.net`, ...
fn world(n: usize) -> World {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(RecordingTransport::default());
    let app = courrier_core::testing::mailing(
        Arc::new(store),
        clock.clone(),
        mail.clone(),
        courrier_core::egress::Egress::offline(),
    );
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    let new_user = NewUser { email: owner.clone(), profile: Default::default(), password: None };
    users::create(&app.access, &p, &ctx, new_user).unwrap();
    let req = domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
    domains::create(&app, &p, &ctx, req).unwrap();
    let new_list = lists::NewList {
        name: l.clone(),
        display_name: "News".into(),
        owner,
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&app, &p, &ctx, &d, new_list).unwrap();
    for i in 0..n {
        let req = AddMember {
            delivery_mode: if i == n - 1 && n > 2 { DeliveryMode::Digest } else { DeliveryMode::Regular },
            ..AddMember::regular(EmailAddress::parse(&format!("m{i}@example.net")).unwrap())
        };
        members::add(&app, &p, &ctx, None, &d, &l, req).unwrap();
    }
    let list = in_read(&*app.store, |tx| tx.list_by_name(&d, &l)).unwrap().unwrap();
    mail.sent.lock().unwrap().clear();
    World { app, clock, mail, list, _dir: dir }
}

/// Submits a post and delivers it; the copies' ids, in member order.
fn post(w: &World) -> (SendId, Vec<i64>) {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let msg = sends::NewMessage { subject: "Hi".into(), text: Some("x".into()), html: None };
    let send = sends::submit(&w.app, &p, &ctx, None, &w.list.domain, &w.list.name, msg).unwrap().ran().unwrap().send_id;
    let before = w.mail.sent.lock().unwrap().len();
    delivery::run_once(&w.app, &DeliveryConfig::default()).unwrap();
    let sent: Vec<i64> = w.mail.sent.lock().unwrap()[before..]
        .iter()
        .filter_map(|m| m.envelope_from.as_ref())
        .filter_map(|f| f.to_string().split_once('+').and_then(|(_, r)| r.split_once('@')).map(|(t, _)| t.to_owned()))
        .map(|t| copy_of_token(&w.app.data_key, &t).expect("a copy's token verifies").get())
        .collect();
    (send, sent)
}

fn dsn(recipient: &str, action: &str, status: &str) -> Vec<u8> {
    format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.net>\r\nTo: news-bounces@example.org\r\n\
         Subject: Undelivered Mail Returned to Sender\r\nAuto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n\
         --B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n\r\n\
         Final-Recipient: rfc822; {recipient}\r\nAction: {action}\r\nStatus: {status}\r\n\
         Diagnostic-Code: smtp; {status} mailbox unavailable\r\n\r\n\
         --B\r\nContent-Type: text/rfc822-headers\r\n\r\nSubject: Hi\r\n\r\n--B--\r\n"
    )
    .into_bytes()
}

fn member(w: &World, i: usize) -> Member {
    let e = EmailAddress::parse(&format!("m{i}@example.net")).unwrap();
    in_read(&*w.app.store, |tx| tx.member_by_email(w.list.id, &e)).unwrap().unwrap()
}

fn bounced_events(w: &World) -> Vec<serde_json::Value> {
    let evs = in_read(&*w.app.store, |tx| tx.events_after(None, 10_000)).unwrap();
    evs.into_iter().filter(|e| e.name == EventName::MemberBounced).map(|e| e.data).collect()
}

fn receive_dsn(w: &World, copy: i64, recipient: &str, action: &str, status: &str) -> Received {
    receive(&w.app, w.list.id, &token(w, copy), &dsn(recipient, action, status)).unwrap()
}

fn token(w: &World, copy: i64) -> String {
    verp_token(&w.app.data_key, CopyId::from_stored(copy))
}

#[test]
fn a_dsn_for_one_copy_scores_its_member_at_most_once_a_day() {
    let w = world(2);
    let (send, copies) = post(&w);
    assert_eq!(copies.len(), 2);
    let r = receive_dsn(&w, copies[0], "m0@example.net", "failed", "5.1.1");
    assert!(matches!(r, Received::Recorded(Recorded { scored: true, score: 1, .. })), "{r:?}");
    assert_eq!(member(&w, 0).bounce_score, 1);
    assert_eq!(member(&w, 1).bounce_score, 0, "only the copy's member");
    let counts = in_read(&*w.app.store, |tx| tx.copy_counts(send)).unwrap();
    assert_eq!((counts.get(CopyState::Bounced), counts.get(CopyState::Sent)), (1, 1));
    // Another bounce the same day: recorded and announced, not scored.
    w.clock.advance_secs(3600);
    let (_, copies2) = post(&w);
    let r = receive_dsn(&w, copies2[0], "m0@example.net", "failed", "5.1.1");
    assert!(matches!(r, Received::Recorded(Recorded { scored: false, score: 1, .. })), "{r:?}");
    assert_eq!(member(&w, 0).last_bounce_at, Some(w.clock.now()));
    let events = bounced_events(&w);
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["score"], 1);
    assert_eq!(events[1]["status_code"], "5.1.1");
    assert_eq!(events[1]["diagnostic"], "5.1.1 mailbox unavailable");
    // The next day scores again.
    w.clock.advance_secs(24 * 3600);
    receive_dsn(&w, copies2[0], "m0@example.net", "failed", "5.1.1");
    assert_eq!(member(&w, 0).bounce_score, 2);
}

#[test]
fn the_copy_names_the_member_even_when_the_dsn_names_a_forwarding_address() {
    let w = world(2);
    let (_, copies) = post(&w);
    receive_dsn(&w, copies[1], "someone.else@forwarded.example", "failed", "5.1.1");
    assert_eq!((member(&w, 0).bounce_score, member(&w, 1).bounce_score), (0, 1));
}

#[test]
fn a_delayed_dsn_is_recorded_without_scoring() {
    let w = world(1);
    let (_, copies) = post(&w);
    let r = receive_dsn(&w, copies[0], "m0@example.net", "delayed", "4.4.7");
    assert!(matches!(r, Received::Recorded(Recorded { permanence: Permanence::Temporary, scored: false, .. })));
    let m = member(&w, 0);
    assert_eq!((m.bounce_score, m.last_bounce_at), (0, None));
    assert_eq!(in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap().len(), 1);
    assert!(bounced_events(&w).is_empty());
    assert_eq!(receive_dsn(&w, copies[0], "m0@example.net", "delivered", "2.0.0"), Received::NoFailure);
}

#[test]
fn reaching_the_threshold_disables_the_member_and_mails_one_reenable_link() {
    let w = world(2);
    let threshold = w.list.policies.bounce_disable_score;
    let (_, copies) = post(&w);
    for day in 0..threshold + 1 {
        receive_dsn(&w, copies[0], "m0@example.net", "failed", "5.1.1");
        if day + 1 == threshold {
            let m = member(&w, 0);
            assert_eq!(m.status, MemberStatus::Disabled, "disabled at {threshold}");
            assert_eq!(m.disabled_reason.as_deref(), Some("bounces"));
            assert_eq!(m.disabled_at, Some(w.clock.now()));
        }
        w.clock.advance_secs(24 * 3600);
    }
    let mails: Vec<String> = w
        .mail
        .sent
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.recipients[0].to_string() == "m0@example.net")
        .map(|m| String::from_utf8_lossy(&m.data).replace("=\r\n", ""))
        .filter(|t| t.contains("/p/reenable/"))
        .collect();
    assert_eq!(mails.len(), 1, "one mail, not one per bounce");
    let token = mails[0].split("/p/reenable/").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    // A disabled member gets no copy of the next post.
    let (_, next) = post(&w);
    assert_eq!(next.len(), 1);
    assert_eq!(reenable_peek(&w.app, &token).unwrap().unwrap().email, "m0@example.net");
    assert!(reenable_peek(&w.app, "not-a-token").unwrap().is_none());
    assert_eq!(reenable(&w.app, &token).unwrap().unwrap().list_address, "news@example.org");
    let m = member(&w, 0);
    assert_eq!((m.status, m.bounce_score, m.disabled_reason, m.disabled_at), (MemberStatus::Active, 0, None, None));
    assert!(reenable(&w.app, &token).unwrap().is_none(), "the link works once");
    assert_eq!(post(&w).1.len(), 2, "back on the list");
}

#[test]
fn a_score_with_no_bounce_for_7_days_returns_to_0() {
    let w = world(2);
    let (_, copies) = post(&w);
    receive_dsn(&w, copies[0], "m0@example.net", "failed", "5.1.1");
    w.clock.advance_secs(24 * 3600);
    receive_dsn(&w, copies[1], "m1@example.net", "failed", "5.1.1");
    w.clock.advance_secs(DECAY_SECS - 24 * 3600 - 1);
    assert_eq!(decay(&w.app).unwrap(), 0, "not yet 7 days");
    w.clock.advance_secs(1);
    assert_eq!(decay(&w.app).unwrap(), 1, "m0's last bounce was 7 days ago, m1's a day later");
    assert_eq!((member(&w, 0).bounce_score, member(&w, 1).bounce_score), (0, 1));
    assert!(member(&w, 0).last_bounce_at.is_some(), "the last bounce stays known");
    // Lazily too: a bounce after 7 quiet days starts again from 0, whether the sweep ran or not.
    w.clock.advance_secs(DECAY_SECS);
    receive_dsn(&w, copies[1], "m1@example.net", "failed", "5.1.1");
    assert_eq!(member(&w, 1).bounce_score, 1);
}

#[test]
fn an_unrecognised_message_or_a_token_of_no_copy_is_forwarded_to_the_owners() {
    let w = world(1);
    let (_, copies) = post(&w);
    let before = w.mail.sent.lock().unwrap().len();
    let reply = b"From: m0@example.net\r\nTo: news-bounces@example.org\r\nSubject: Re: Hi\r\n\r\nThanks!\r\n";
    assert_eq!(receive(&w.app, w.list.id, &token(&w, copies[0]), reply).unwrap(), Received::Forwarded(1));
    let dsn = dsn("m0@example.net", "failed", "5.1.1");
    assert_eq!(receive(&w.app, w.list.id, "999999", &dsn).unwrap(), Received::Forwarded(1));
    assert_eq!(receive(&w.app, w.list.id, "x'; --", &dsn).unwrap(), Received::Forwarded(1));
    let sent = w.mail.sent.lock().unwrap();
    assert_eq!(sent.len(), before + 3);
    assert!(sent[before..].iter().all(|m| m.recipients[0].to_string() == "owner@example.org"));
    assert!(String::from_utf8_lossy(&sent[before].data).contains("Thanks!"));
    drop(sent);
    assert_eq!(member(&w, 0).bounce_score, 0);
}

#[test]
fn a_dsn_naming_a_copy_by_its_bare_id_or_a_forged_tag_is_forwarded_and_scores_nobody() {
    let w = world(2);
    let (_, copies) = post(&w);
    let before = w.mail.sent.lock().unwrap().len();
    let dsn = dsn("m1@example.net", "failed", "5.1.1");
    let genuine = token(&w, copies[1]);
    let (_, tag) = genuine.split_once('-').unwrap();
    let other_key = courrier_core::kernel::sealed::DataKey::generate().1;
    for forged in [
        copies[1].to_string(),                                  // the bare id (the old tokens)
        format!("{}-{}", copies[1], "0".repeat(tag.len())),     // a made-up tag
        format!("{}-{tag}", copies[0]),                         // another copy's tag
        verp_token(&other_key, CopyId::from_stored(copies[1])), // another installation's
        format!("{genuine}0"),                                  // a longer one
    ] {
        assert_eq!(receive(&w.app, w.list.id, &forged, &dsn).unwrap(), Received::Forwarded(1), "{forged}");
    }
    assert_eq!(member(&w, 1).bounce_score, 0, "no forged token scored the member");
    assert!(bounced_events(&w).is_empty());
    let sent = w.mail.sent.lock().unwrap();
    assert_eq!(sent.len(), before + 5);
    assert!(sent[before..].iter().all(|m| m.recipients[0].to_string() == "owner@example.org"));
    drop(sent);
    // The genuine token, in any case, names the copy.
    let r = receive(&w.app, w.list.id, &genuine.to_ascii_uppercase(), &dsn).unwrap();
    assert!(matches!(r, Received::Recorded(_)), "{r:?}");
    assert_eq!(member(&w, 1).bounce_score, 1);
}

#[test]
fn a_disabled_member_gets_no_digest() {
    let w = world(3); // m2 reads the digest
    post(&w);
    let digest_member = member(&w, 2);
    in_write(&*w.app.store, |tx| {
        let mut m = tx.find_member(digest_member.id)?.unwrap();
        let facts = BounceFacts {
            permanence: Permanence::Permanent,
            source: BounceSource::Smtp,
            status_code: None,
            diagnostic: None,
        };
        let mut list = w.list.clone();
        list.policies.bounce_disable_score = 1;
        record(tx, &list, &mut m, None, &facts, w.clock.now())
    })
    .unwrap();
    assert_eq!(member(&w, 2).status, MemberStatus::Disabled);
    let built = digests::run(&w.app, None, true).unwrap();
    assert!(built.iter().all(|b| b.recipients == 0), "{built:?}");
}
