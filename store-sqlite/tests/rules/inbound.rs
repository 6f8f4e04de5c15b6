//! Mail in over a real store and spool: posts held, dropped or posted once, batches, crashes.

use crate::prelude::*;
use courrier_core::mailing::Service;
use courrier_core::mailing::ports::NewInbound;

use courrier_core::kernel::{Clock, Timestamp};
use courrier_core::mailing::inbound::*;

/// A real SQLite store and a list `news@example.org` (posting policy `members`) with one
/// active member `m@example.net`.
pub fn world() -> (Service, tempfile::TempDir) {
    use courrier_core::access::users::{self, NewUser};
    use courrier_core::kernel::{Clock, EmailAddress};
    use courrier_core::mailing::members::{self, AddMember};
    use courrier_core::mailing::model::SubscriptionPolicy;
    use courrier_core::mailing::{domains, lists};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(courrier_core::testing::FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = courrier_store_sqlite::SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(courrier_core::testing::RecordingTransport::default());
    let app = courrier_core::testing::mailing(Arc::new(store), clock, mail, courrier_core::egress::Egress::offline());
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    users::create(&app.access, &p, &ctx, NewUser { email: owner.clone(), profile: Default::default(), password: None })
        .unwrap();
    let new_domain =
        domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
    domains::create(&app, &p, &ctx, new_domain).unwrap();
    let new_list = lists::NewList {
        name: l.clone(),
        display_name: "News".into(),
        owner,
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&app, &p, &ctx, &d, new_list).unwrap();
    let req = AddMember::regular(EmailAddress::parse("m@example.net").unwrap());
    members::add(&app, &p, &ctx, None, &d, &l, req).unwrap();
    (app, dir)
}

fn post(app: &Service, from: &str, message_id: &str) -> Processed {
    let raw =
        format!("From: {from}\r\nTo: news@example.org\r\nSubject: Hi\r\nMessage-ID: <{message_id}>\r\n\r\nHello\r\n");
    let r = resolve(app, "news@example.org").unwrap();
    let id = store(app, Some(from), &[&r], raw.as_bytes()).unwrap().remove(0);
    let first = process(app, id).unwrap();
    assert_eq!(process(app, id).unwrap(), Processed::AlreadyDone, "processed once");
    first
}

fn outcome(p: &Processed) -> &'static str {
    match p {
        Processed::Done(o) => o.as_str(),
        Processed::Request(o) => o.as_str(),
        Processed::Bounce(_) => "bounce",
        Processed::Waiting => "waiting",
        Processed::Failed(_) => "failed",
        Processed::AlreadyDone => "already",
    }
}

#[test]
fn a_stored_post_is_posted_held_or_dropped_once() {
    let (app, _dir) = world();
    assert_eq!(outcome(&post(&app, "m@example.net", "a@x")), "posted");
    assert_eq!(outcome(&post(&app, "m@example.net", "a@x")), "duplicate");
    let held = post(&app, "stranger@example.net", "b@x");
    let Processed::Done(posts::Outcome::Held(id, posts::HoldReason::NotMember)) = held else { panic!("{held:?}") };
    let list = in_read(&*app.store, |tx| {
        tx.list_by_name(&DomainName::parse("example.org").unwrap(), &ListName::parse("news").unwrap())
    })
    .unwrap()
    .unwrap();
    let h = posts::held(&app, list.id, id).unwrap().unwrap();
    assert_eq!((h.from.as_deref(), h.subject.as_deref()), (Some("stranger@example.net"), Some("Hi")));
    let events = in_read(&*app.store, |tx| tx.events_after(None, 100)).unwrap();
    assert_eq!(events.iter().filter(|e| e.name == courrier_core::kernel::EventName::MessageHeld).count(), 1);
    assert_eq!(events.iter().filter(|e| e.name == courrier_core::kernel::EventName::SendSubmitted).count(), 1);
    assert!(matches!(resolve(&app, "nope@example.org"), Err(InboundError::UnknownAddress(_))));
    let r = resolve(&app, "news-request@example.org").unwrap();
    let id = store(&app, None, &[&r], b"Subject: help\r\n\r\n").unwrap().remove(0);
    assert_eq!(
        process(&app, id).unwrap(),
        Processed::Request(courrier_core::mailing::requests::Outcome::Robot),
        "a request from the null sender is not answered"
    );
}

/// Runs `rule` over `ids` in as many batches as it takes, as `process_after` does; the
/// messages looked at, and the first refusal of a batch's first message (which stops).
fn batches(app: &Service, ids: &[InboundId], rule: &ActFn) -> (Vec<(InboundId, Processed)>, Option<InboundId>) {
    let (mut seen, mut rest) = (Vec::new(), ids);
    while !rest.is_empty() {
        match batch_with(app, rest, rule) {
            Ok(done) => {
                assert!(!done.is_empty());
                rest = &rest[done.len()..];
                seen.extend(done);
            }
            Err(_) => return (seen, Some(rest[0])),
        }
    }
    (seen, None)
}

fn state_of(app: &Service, id: InboundId) -> (InboundState, Option<String>) {
    let m = in_read(&*app.store, |tx| tx.inbound_by_id(id)).unwrap().unwrap();
    (m.state, m.outcome)
}

fn sends_submitted(app: &Service) -> usize {
    let events = in_read(&*app.store, |tx| tx.events_after(None, 1000)).unwrap();
    events.iter().filter(|e| e.name == courrier_core::kernel::EventName::SendSubmitted).count()
}

fn stored_posts(app: &Service, n: usize) -> Vec<InboundId> {
    let r = resolve(app, "news@example.org").unwrap();
    (0..n)
        .map(|i| {
            let raw = format!(
                "From: m@example.net\r\nTo: news@example.org\r\nSubject: Hi {i}\r\nMessage-ID: <batch-{i}@x>\r\n\r\nHello\r\n"
            );
            store(app, Some("m@example.net"), &[&r], raw.as_bytes()).unwrap().remove(0)
        })
        .collect()
}

#[test]
fn a_batch_records_the_message_its_rule_refuses_failed_and_processes_the_others() {
    let (app, _dir) = world();
    let ids = stored_posts(&app, 3);
    let failing = ids[1];
    // The middle message's rule does all its writes (a send, its outcome), then refuses.
    let rule = move |app: &Service,
                     tx: &mut dyn courrier_core::mailing::ports::Tx,
                     m: &InboundMessage,
                     r: &Read,
                     now: Timestamp| {
        let acted = act(app, tx, m, r, now)?;
        if m.id == failing {
            return Err(courrier_core::mailing::MailingError::Conflict("refused after writing".into()));
        }
        Ok(acted)
    };
    let (seen, stopped) = batches(&app, &ids, &rule);
    assert_eq!(stopped, None);
    let got: Vec<&str> = seen.iter().map(|(_, p)| outcome(p)).collect();
    assert_eq!(got, ["posted", "failed", "posted"]);
    assert_eq!(state_of(&app, ids[0]), (InboundState::Done, Some("posted".into())));
    assert_eq!(state_of(&app, failing), (InboundState::Done, Some("failed".into())));
    assert_eq!(state_of(&app, ids[2]), (InboundState::Done, Some("posted".into())));
    assert_eq!(sends_submitted(&app), 2, "the refused message's send was taken back with it");
    assert_eq!(process(&app, failing).unwrap(), Processed::AlreadyDone, "and it does not come back");
}

#[test]
fn a_database_error_leaves_its_message_received_and_commits_the_messages_before_it() {
    let (app, _dir) = world();
    let ids = stored_posts(&app, 3);
    let broken = ids[2];
    let rule = move |app: &Service,
                     tx: &mut dyn courrier_core::mailing::ports::Tx,
                     m: &InboundMessage,
                     r: &Read,
                     now: Timestamp| {
        let acted = act(app, tx, m, r, now)?;
        if m.id == broken {
            return Err(courrier_core::mailing::MailingError::Store(StoreError::Busy));
        }
        Ok(acted)
    };
    let (seen, stopped) = batches(&app, &ids, &rule);
    assert_eq!(stopped, Some(broken), "the error is the answer once its message comes first");
    assert_eq!(seen.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids[..2]);
    assert_eq!(state_of(&app, ids[1]), (InboundState::Done, Some("posted".into())));
    assert_eq!(state_of(&app, broken), (InboundState::Received, None), "processed again later");
    assert_eq!(sends_submitted(&app), 2);
    // Later, the database answers: it is posted, once.
    let mut cursor = None;
    assert_eq!(process_after(&app, &mut cursor).unwrap(), 1);
    assert_eq!(state_of(&app, broken), (InboundState::Done, Some("posted".into())));
    assert_eq!(sends_submitted(&app), 3);
}

/// The service of a server restarted on `dir` (the main database `t.db` and the spool
/// `spool.db` as they were left).
fn restarted(dir: &std::path::Path) -> Service {
    use std::sync::Arc;
    let clock = Arc::new(courrier_core::testing::FixedClock::at(Timestamp::from_unix_secs(1_800_000_100)));
    let store = courrier_store_sqlite::SqliteStore::open(&dir.join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(courrier_core::testing::RecordingTransport::default());
    let mut app =
        courrier_core::testing::mailing(Arc::new(store), clock, mail, courrier_core::egress::Egress::offline());
    app.mail_in.spool = Some(Arc::new(courrier_store_sqlite::SqliteSpool::open(&dir.join("spool.db")).unwrap()));
    app
}

fn inbound_rows(app: &Service) -> usize {
    (1..10).filter(|id| state_of_opt(app, InboundId::from_stored(*id)).is_some()).count()
}

fn state_of_opt(app: &Service, id: InboundId) -> Option<InboundMessage> {
    in_read(&*app.store, |tx| tx.inbound_by_id(id)).unwrap()
}

#[test]
fn a_spooled_post_moved_again_after_a_crash_between_the_moves_commit_and_the_spools_delete_is_posted_once() {
    let (app, dir) = world();
    drop(app);
    let app = restarted(dir.path());
    let spool = app.mail_in.spool.clone().unwrap();
    let r = resolve(&app, "news@example.org").unwrap();
    // No Message-ID: the duplicate check cannot catch a second copy, only the spool key can.
    let raw = b"From: m@example.net\r\nTo: news@example.org\r\nSubject: Spooled\r\n\r\nHello\r\n";
    let new = NewInbound { list_id: r.list.id, role: &r.role, recipient: &r.address, envelope_from: None, raw };
    spool.put(&[new], app.clock.now()).unwrap();
    // The move's commit in the main database, then the process dies before the spool's delete.
    let batch = spool.oldest(10).unwrap();
    assert_eq!(copy_spooled(&app, &batch).unwrap(), 1);
    drop((app, spool));
    // Restarted on the same files: the spool still holds the message, the main database too.
    let app = restarted(dir.path());
    assert_eq!(waiting(&app, 10).unwrap(), 2, "one in each store until the move ends");
    assert_eq!(process_waiting(&app).unwrap(), 1);
    assert_eq!(inbound_rows(&app), 1, "moved once");
    assert_eq!(sends_submitted(&app), 1, "posted once");
    assert_eq!(app.mail_in.spool.as_ref().unwrap().count().unwrap(), 0, "the spool forgot it");
    assert_eq!(waiting(&app, 10).unwrap(), 0);
    // Another restart finds nothing to do.
    drop(app);
    let app = restarted(dir.path());
    assert_eq!(process_waiting(&app).unwrap(), 0);
    assert_eq!((inbound_rows(&app), sends_submitted(&app)), (1, 1));
}

#[test]
fn a_post_in_the_spool_at_a_crash_is_moved_and_posted_once_at_the_restart() {
    let (app, dir) = world();
    drop(app);
    let app = restarted(dir.path());
    let r = resolve(&app, "news@example.org").unwrap();
    let raw = b"From: m@example.net\r\nTo: news@example.org\r\nSubject: Spooled\r\n\r\nHello\r\n";
    let new = NewInbound { list_id: r.list.id, role: &r.role, recipient: &r.address, envelope_from: None, raw };
    app.mail_in.spool.as_ref().unwrap().put(&[new], app.clock.now()).unwrap();
    assert_eq!((inbound_rows(&app), waiting(&app, 10).unwrap()), (0, 1), "in the spool only");
    drop(app);
    let app = restarted(dir.path());
    assert_eq!(process_waiting(&app).unwrap(), 1);
    let m = state_of_opt(&app, InboundId::from_stored(1)).unwrap();
    assert_eq!((m.state, m.outcome.as_deref(), m.raw.as_slice()), (InboundState::Done, Some("posted"), &raw[..]));
    assert_eq!((inbound_rows(&app), sends_submitted(&app)), (1, 1));
}

#[test]
fn a_spool_fuller_than_one_move_is_moved_a_part_at_a_time_and_all_processed_in_one_round() {
    let (app, dir) = world();
    drop(app);
    let app = restarted(dir.path());
    let r = resolve(&app, "news@example.org").unwrap();
    let raws: Vec<String> =
        (0..300).map(|i| format!("From: m@example.net\r\nSubject: {i}\r\nMessage-ID: <m{i}@x>\r\n\r\nx\r\n")).collect();
    let news: Vec<NewInbound<'_>> = raws
        .iter()
        .map(|raw| NewInbound {
            list_id: r.list.id,
            role: &r.role,
            recipient: &r.address,
            envelope_from: None,
            raw: raw.as_bytes(),
        })
        .collect();
    app.mail_in.spool.as_ref().unwrap().put(&news, app.clock.now()).unwrap();
    assert_eq!(move_spooled(&app).unwrap(), u64::from(MOVE_BATCH) * MOVE_BATCHES as u64, "one part");
    assert_eq!(waiting(&app, 1000).unwrap(), 300);
    assert_eq!(process_waiting(&app).unwrap(), 300, "the rest moved and everything processed");
    assert_eq!((waiting(&app, 1000).unwrap(), sends_submitted(&app)), (0, 300));
}
