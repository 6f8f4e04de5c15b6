//! Delivery over a real store: leases, per-domain concurrency, back-off, bounces, submission accounts.

use crate::prelude::*;
use courrier_core::mailing::Service;

use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::users::{self, NewUser};
use courrier_core::kernel::Clock;
use courrier_core::kernel::{DomainName, EmailAddress, ListName};
use courrier_core::mailing::delivery::*;
use courrier_core::mailing::members::{self, AddMember};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_core::mailing::{domains, lists, sends};
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

struct World {
    app: courrier_core::mailing::Service,
    clock: Arc<FixedClock>,
    mail: Arc<RecordingTransport>,
    _dir: tempfile::TempDir,
}

/// A real SQLite store, a clock that moves only when told, and a recording transport; a list
/// with `n` active regular members and one send to them.
fn world(n: usize) -> (World, courrier_core::mailing::model::SendId) {
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
    users::create(&app.access, &p, &ctx, NewUser { email: owner.clone(), profile: Default::default(), password: None })
        .unwrap();
    domains::create(
        &app,
        &p,
        &ctx,
        domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None },
    )
    .unwrap();
    let new_list = lists::NewList {
        name: l.clone(),
        display_name: "News".into(),
        owner,
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&app, &p, &ctx, &d, new_list).unwrap();
    for i in 0..n {
        let req = AddMember::regular(EmailAddress::parse(&format!("m{i}@example.net")).unwrap());
        members::add(&app, &p, &ctx, None, &d, &l, req).unwrap();
    }
    mail.sent.lock().unwrap().clear(); // the owner's invitation
    let msg = sends::NewMessage { subject: "Hi".into(), text: Some("x".into()), html: None };
    let send = sends::submit(&app, &p, &ctx, None, &d, &l, msg).unwrap().ran().unwrap().send_id;
    (World { app, clock, mail, _dir: dir }, send)
}

fn events(app: &Service, name: EventName) -> usize {
    in_read(&*app.store, |tx| tx.events_after(None, 10_000)).unwrap().iter().filter(|e| e.name == name).count()
}

#[test]
fn a_worker_that_dies_holding_a_lease_loses_no_copy_and_cannot_overwrite_its_successor() {
    let (w, _) = world(3);
    let cfg = DeliveryConfig::default();
    let now = w.clock.now();
    // A worker claims everything, then dies before sending.
    let dead = in_write(&*w.app.store, |tx| tx.claim_copies(now, now.plus_secs(cfg.lease_secs), 100, 20)).unwrap();
    assert_eq!(dead.len(), 3);
    assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0, "leased copies are not claimed twice");
    w.clock.advance_secs(cfg.lease_secs + 1);
    let round = run_once(&w.app, &cfg).unwrap();
    assert_eq!((round.requeued, round.sent), (3, 3));
    assert_eq!(w.mail.sent.lock().unwrap().len(), 3);
    // The dead worker wakes up and reports: its lease is gone, nothing changes.
    let later = w.clock.now();
    let stale = in_write(&*w.app.store, |tx| tx.finish_copy(dead[0].id, CopyState::Failed, None, Some("late"), later));
    assert_eq!(stale, Ok(false));
    assert_eq!(events(&w.app, EventName::SendCompleted), 1);
    assert_eq!(settle(&w.app).unwrap(), 0, "the aggregate is recorded once");
    assert_eq!(events(&w.app, EventName::SendCompleted), 1);
}

#[test]
fn a_destination_domain_gets_at_most_its_concurrency_in_batches_at_once() {
    let (w, _) = world(5);
    let lease = |tx: &mut dyn courrier_core::mailing::ports::Tx, at: Timestamp, per_domain| {
        tx.claim_copies(at, at.plus_secs(300), 2, per_domain)
    };
    let t0 = w.clock.now();
    let first = in_write(&*w.app.store, |tx| lease(tx, t0, 1)).unwrap();
    assert_eq!(first.len(), 2);
    w.clock.advance_secs(1);
    let t1 = w.clock.now();
    // example.net has one batch in flight: with a limit of 1 nothing more goes there.
    assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t1, 1)).unwrap().len(), 0);
    // A limit of 2 lets a second batch go.
    assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t1, 2)).unwrap().len(), 2);
    w.clock.advance_secs(1);
    let t2 = w.clock.now();
    assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t2, 2)).unwrap().len(), 0);
    // The first batch finishes: room for one more.
    in_write(&*w.app.store, |tx| {
        for c in &first {
            tx.finish_copy(c.id, CopyState::Sent, None, None, t2)?;
        }
        Ok::<_, courrier_core::storage::StoreError>(())
    })
    .unwrap();
    assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t2, 2)).unwrap().len(), 1);
}

/// `COURRIER_DOMAIN_CONCURRENCY` holds across processes: the claim counts the batches leased
/// in the database, whichever process leased them (here a second store on the same file, as a
/// `courrier worker` beside the server opens it).
#[test]
fn a_destination_domains_concurrency_counts_the_batches_another_process_leased() {
    let (w, _) = world(4);
    let other = SqliteStore::open(&w._dir.path().join("t.db"), w.clock.now().unix_micros()).unwrap();
    let other: &dyn courrier_core::storage::Store<dyn courrier_core::mailing::ports::Tx> = &other;
    let t0 = w.clock.now();
    let first = in_write(&*w.app.store, |tx| tx.claim_copies(t0, t0.plus_secs(300), 2, 1)).unwrap();
    assert_eq!(first.len(), 2);
    let t1 = t0.plus_secs(1);
    let none = in_write(other, |tx| tx.claim_copies(t1, t1.plus_secs(300), 2, 1)).unwrap();
    assert!(none.is_empty(), "example.net has its one batch in flight, leased by the other process");
    let second = in_write(other, |tx| tx.claim_copies(t1, t1.plus_secs(300), 2, 2)).unwrap();
    assert_eq!(second.len(), 2, "a limit of 2 lets the other process lease a second batch");
}

fn member0(w: &World) -> courrier_core::mailing::model::Member {
    in_read(&*w.app.store, |tx| {
        let list = tx.list_by_name(&DomainName::parse("example.org").unwrap(), &ListName::parse("news").unwrap())?;
        tx.member_by_email(list.unwrap().id, &EmailAddress::parse("m0@example.net").unwrap())
    })
    .unwrap()
    .unwrap()
}

#[test]
fn temporary_failures_back_off_then_fail_as_a_soft_bounce_past_the_retry_horizon() {
    let (w, send) = world(1);
    let cfg = DeliveryConfig { retry_horizon_secs: 30, retry_base_secs: 10, ..DeliveryConfig::default() };
    *w.mail.fail_with.lock().unwrap() = Some(SendError::Temporary("451 4.3.0 try later".into()));
    assert_eq!(run_once(&w.app, &cfg).unwrap().deferred, 1);
    assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0, "not before its time");
    w.clock.advance_secs(10);
    assert_eq!(run_once(&w.app, &cfg).unwrap().deferred, 1, "second attempt");
    w.clock.advance_secs(19);
    assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0, "the second wait is twice the first");
    w.clock.advance_secs(1);
    assert_eq!(run_once(&w.app, &cfg).unwrap().failed, 1, "30 s after it was queued: past the horizon");
    let list = in_read(&*w.app.store, |tx| tx.send_list(send)).unwrap().unwrap();
    let s = in_read(&*w.app.store, |tx| tx.send_by_id(list, send)).unwrap().unwrap();
    assert_eq!(s.state, SendState::Failed);
    assert_eq!(events(&w.app, EventName::SendFailed), 1);
    // A soft bounce: recorded, not scored, no event.
    let m = member0(&w);
    assert_eq!((m.bounce_score, m.last_bounce_at), (0, None));
    let recorded = in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].permanence, Permanence::Temporary);
    assert_eq!(recorded[0].source, BounceSource::Expired);
    assert!(!recorded[0].scored);
    assert_eq!(events(&w.app, EventName::MemberBounced), 0);
}

#[test]
fn a_5xx_of_the_receiving_server_bounces_the_copy_and_scores_its_member() {
    let (w, send) = world(1);
    *w.mail.fail_with.lock().unwrap() = Some(SendError::Permanent("550 5.1.1 <m0@example.net>: no such user".into()));
    let round = run_once(&w.app, &DeliveryConfig::default()).unwrap();
    assert_eq!((round.sent, round.failed), (0, 1));
    let counts = in_read(&*w.app.store, |tx| tx.copy_counts(send)).unwrap();
    assert_eq!(counts.get(CopyState::Bounced), 1);
    let m = member0(&w);
    assert_eq!(m.bounce_score, 1);
    assert_eq!(m.last_bounce_at, Some(w.clock.now()));
    let recorded = in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap();
    assert_eq!(recorded[0].status_code.as_deref(), Some("5.1.1"));
    assert_eq!(recorded[0].source, BounceSource::Smtp);
    let evs = in_read(&*w.app.store, |tx| tx.events_after(None, 100)).unwrap();
    let bounced: Vec<_> = evs.iter().filter(|e| e.name == EventName::MemberBounced).collect();
    assert_eq!(bounced.len(), 1);
    assert_eq!(bounced[0].data["score"], 1);
    assert_eq!(bounced[0].data["status_code"], "5.1.1");
    assert_eq!(bounced[0].data["member"]["email"], "m0@example.net");
    assert_eq!(events(&w.app, EventName::SendFailed), 1, "no copy was delivered");
}

/// Accounts whose every submission goes to one recording transport.
struct OneAccount(Arc<RecordingTransport>);

impl courrier_core::mailing::accounts::MailAccounts for OneAccount {
    fn check_imap(
        &self,
        _: &courrier_core::mailing::accounts::Endpoint,
        _: &courrier_core::mailing::accounts::Login,
        _: &str,
    ) -> Result<(), courrier_core::mailing::accounts::AccountError> {
        Ok(())
    }
    fn check_smtp(
        &self,
        _: &courrier_core::mailing::accounts::Endpoint,
        _: &courrier_core::mailing::accounts::Login,
    ) -> Result<(), courrier_core::mailing::accounts::AccountError> {
        Ok(())
    }
    fn submission(
        &self,
        _: courrier_core::mailing::accounts::Endpoint,
        login: courrier_core::mailing::accounts::Login,
    ) -> Arc<dyn MailTransport> {
        assert_eq!(login.password, "pw", "the password opened from the keyring");
        Arc::clone(&self.0) as Arc<dyn MailTransport>
    }
    fn open_mailbox(
        &self,
        _: &courrier_core::mailing::accounts::Endpoint,
        _: &courrier_core::mailing::accounts::Login,
        _: &str,
    ) -> Result<Box<dyn courrier_core::mailing::accounts::Mailbox>, courrier_core::mailing::accounts::AccountError>
    {
        Err(courrier_core::mailing::accounts::AccountError::Failed("no mailbox".into()))
    }
}

/// Gives "news" a submission account (a recording transport) that answers `answer`.
fn with_account(w: &mut World, answer: SendError) -> Arc<RecordingTransport> {
    let d = DomainName::parse("example.org").unwrap();
    let account = Arc::new(RecordingTransport::default());
    *account.fail_with.lock().unwrap() = Some(answer);
    let keyring =
        courrier_core::kernel::keyring::Keyring::parse("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
    let news = in_read(&*w.app.store, |tx| tx.list_by_name(&d, &ListName::parse("news").unwrap())).unwrap().unwrap();
    let now = w.clock.now();
    let cred = credentials::MailCredential {
        list_id: news.id,
        kind: CredentialKind::Submission,
        host: "smtp.example.net".into(),
        port: 587,
        security: courrier_core::mailing::accounts::Security::StartTls,
        username: "news".into(),
        password_sealed: keyring
            .seal(b"pw", &courrier_core::kernel::keyring::Keyring::binding(news.id.get(), "submission")),
        folder: None,
        last_ok_at: None,
        last_error: None,
        last_error_at: None,
        created_at: now,
        updated_at: now,
    };
    in_write(&*w.app.store, |tx| tx.upsert_credential(&cred)).unwrap();
    w.app.credentials = credentials::Credentials::new(Some(keyring), Arc::new(OneAccount(Arc::clone(&account))));
    account
}

#[test]
fn a_submission_account_answering_5xx_fails_the_copies_and_scores_no_member() {
    let (mut w, send) = world(2);
    let account = with_account(&mut w, SendError::Permanent("535 5.7.8 authentication failed".into()));
    let round = run_once(&w.app, &DeliveryConfig::default()).unwrap();
    assert_eq!((round.sent, round.failed), (0, 2), "{round:?}");
    let counts = in_read(&*w.app.store, |tx| tx.copy_counts(send)).unwrap();
    assert_eq!(counts.get(CopyState::Failed), 2);
    assert_eq!(counts.get(CopyState::Bounced), 0);
    assert!(account.sent.lock().unwrap().is_empty());
    assert!(w.mail.sent.lock().unwrap().is_empty(), "never through the relay instead");
    let m = member0(&w);
    assert_eq!((m.bounce_score, m.last_bounce_at), (0, None));
    assert!(in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap().is_empty());
    assert_eq!(events(&w.app, EventName::MemberBounced), 0);
}

#[test]
fn a_submission_account_answering_4xx_slows_its_list_only_and_loses_no_copy() {
    let (mut w, _) = world(3);
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let d = DomainName::parse("example.org").unwrap();
    // A second list, without an account: its copies go through the relay (`w.mail`).
    let other = ListName::parse("other").unwrap();
    let new_list = lists::NewList {
        name: other.clone(),
        display_name: "Other".into(),
        owner: EmailAddress::parse("owner@example.org").unwrap(),
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&w.app, &p, &ctx, &d, new_list).unwrap();
    for i in 0..2 {
        let req = AddMember::regular(EmailAddress::parse(&format!("o{i}@example.com")).unwrap());
        members::add(&w.app, &p, &ctx, None, &d, &other, req).unwrap();
    }
    let msg = sends::NewMessage { subject: "Other".into(), text: Some("x".into()), html: None };
    sends::submit(&w.app, &p, &ctx, None, &d, &other, msg).unwrap();
    w.mail.sent.lock().unwrap().clear();
    // "news" has a submission account, which answers 451.
    let account = with_account(&mut w, SendError::Temporary("451 4.7.0 rate limit".into()));
    let cfg = DeliveryConfig { retry_base_secs: 60, ..DeliveryConfig::default() };

    let round = run_once(&w.app, &cfg).unwrap();
    // One copy of "news" met the 451 and waits; its two others went back untried; the other
    // list's two copies went out through the relay.
    assert_eq!((round.claimed, round.deferred, round.sent), (5, 1, 2), "{round:?}");
    assert_eq!(w.mail.sent.lock().unwrap().len(), 2, "the other list is not slowed");
    assert!(w.mail.sent.lock().unwrap().iter().all(|m| m.recipients[0].to_string().ends_with("example.com")));
    assert!(account.sent.lock().unwrap().is_empty());
    // While the account rests, nothing of "news" is claimed, whatever is due.
    w.clock.advance_secs(30);
    assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0);
    // After the rest, the account takes mail again: every copy arrives, once, through it.
    *account.fail_with.lock().unwrap() = None;
    w.clock.advance_secs(31);
    let mut sent = 0;
    for _ in 0..5 {
        sent += run_once(&w.app, &cfg).unwrap().sent;
        w.clock.advance_secs(61);
    }
    assert_eq!(sent, 3);
    assert_eq!(account.sent.lock().unwrap().len(), 3);
    assert_eq!(w.mail.sent.lock().unwrap().len(), 2, "no copy of news left through the relay");
}
