//! The acceptor of mail in (LMTP sessions storing together) over a real store and spool.

use crate::prelude::*;
use courrier_core::mailing::inbound::{InboundError, Resolved};
use courrier_core::mailing::ports::Spool;

use crate::inbound::world;
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::kernel::{DomainName, ListName};
use courrier_core::mailing::accept::*;
use courrier_core::mailing::inbound::resolve;
use courrier_core::mailing::model::{ListId, MailingList};
use courrier_core::storage::in_read;
use std::sync::mpsc;

/// A job for `to`, its outcome sent to `out`.
fn job(to: &Resolved, raw: Vec<u8>, out: &mpsc::Sender<Stored>) -> Job {
    let out = out.clone();
    Job {
        envelope_from: Some("m@example.net".into()),
        recipients: vec![to.clone()],
        raw,
        done: Box::new(move |stored| out.send(stored).unwrap()),
    }
}

fn inbound_id(taken: &Result<Taken, InboundError>) -> InboundId {
    match taken {
        Ok(Taken::Inbound(id)) => *id,
        other => panic!("not stored in the inbound store: {other:?}"),
    }
}

/// The wait for an answer: a bound against a hang, not a measurement.
const ANSWER: Duration = Duration::from_secs(60);

#[test]
fn a_connection_recalls_a_fresh_recipient_in_any_case_until_a_refusal_or_a_too_small_limit() {
    let (app, _dir) = world();
    let found = resolve(&app, "news@example.org");
    let limit = found.as_ref().unwrap().list.policies.max_message_kb as usize * 1024;
    let mut memory = RecipientMemory::new(2, Duration::from_secs(600));
    assert!(memory.recall("news@example.org", None).is_none(), "nothing learnt yet");
    memory.learn("news@example.org", &found);
    let recalled = memory.recall("NEWS@example.org", Some(limit)).expect("remembered, any case");
    assert_eq!((recalled.address.as_str(), recalled.list.id), ("NEWS@example.org", found.as_ref().unwrap().list.id));
    assert!(memory.recall("news@example.org", Some(limit + 1)).is_none(), "looked up again: raised since?");
    memory.stored("news@example.org", &Err(InboundError::TooLarge { limit_kb: 1 }));
    assert!(memory.recall("news@example.org", None).is_none(), "a refusal at the store forgets it");
    memory.learn("news@example.org", &found);
    memory.learn("news@example.org", &Err(InboundError::UnknownAddress("news@example.org".into())));
    assert!(memory.recall("news@example.org", None).is_none(), "a refused lookup forgets it");
    let mut stale = RecipientMemory::new(2, Duration::ZERO);
    stale.learn("news@example.org", &found);
    assert!(stale.recall("news@example.org", None).is_none(), "past its time");
}

#[test]
fn stores_of_sessions_receiving_together_share_one_commit_and_each_is_answered() {
    let (app, _dir) = world();
    let app = Arc::new(app);
    let to = resolve(&app, "news@example.org").unwrap();
    // A delay far longer than the test: the batch closes because nobody is receiving any more.
    let acceptor = Acceptor::start(Arc::clone(&app), Duration::from_secs(600)).unwrap();
    let sessions: Vec<Receiving> = (0..3).map(|_| acceptor.receiving(false)).collect();
    let (tx, rx) = mpsc::channel();
    for (i, receiving) in sessions.into_iter().enumerate() {
        acceptor.submit(Some(receiving), job(&to, format!("Subject: {i}\r\n\r\nx\r\n").into_bytes(), &tx));
    }
    let answers: Vec<Stored> = (0..3).map(|_| rx.recv_timeout(ANSWER).unwrap()).collect();
    let mut ids: Vec<i64> = answers.iter().map(|a| inbound_id(&a[0]).get()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three messages stored: {answers:?}");
    assert_eq!(acceptor.commits(), (1, 3), "in one transaction");
    for id in ids {
        let m = in_read(&*app.store, |tx| tx.inbound_by_id(InboundId::from_stored(id))).unwrap();
        assert!(m.is_some_and(|m| m.recipient == "news@example.org"));
    }
}

#[test]
fn a_store_waits_for_the_sessions_just_answered_to_come_back_with_their_next_message() {
    let (app, _dir) = world();
    let app = Arc::new(app);
    let to = resolve(&app, "news@example.org").unwrap();
    let acceptor = Acceptor::start(Arc::clone(&app), Duration::from_secs(600)).unwrap();
    let (tx, rx) = mpsc::channel();
    // Sessions A and B share a first commit.
    let (a, b) = (acceptor.receiving(false), acceptor.receiving(false));
    acceptor.submit(Some(a), job(&to, b"Subject: a1\r\n\r\nx\r\n".to_vec(), &tx));
    acceptor.submit(Some(b), job(&to, b"Subject: b1\r\n\r\nx\r\n".to_vec(), &tx));
    for _ in 0..2 {
        assert!(rx.recv_timeout(ANSWER).unwrap()[0].is_ok());
    }
    assert_eq!(acceptor.commits(), (1, 2));
    // C's message arrives while A and B, just answered, have not started their next ones:
    // it waits for them rather than commit alone.
    acceptor.submit(None, job(&to, b"Subject: c1\r\n\r\nx\r\n".to_vec(), &tx));
    let a = acceptor.receiving(true);
    acceptor.submit(Some(a), job(&to, b"Subject: a2\r\n\r\nx\r\n".to_vec(), &tx));
    let b = acceptor.receiving(true);
    acceptor.submit(Some(b), job(&to, b"Subject: b2\r\n\r\nx\r\n".to_vec(), &tx));
    for _ in 0..3 {
        assert!(rx.recv_timeout(ANSWER).unwrap()[0].is_ok());
    }
    assert_eq!(acceptor.commits(), (2, 5), "C, A and B in one commit");
}

#[test]
fn a_store_waits_for_a_silent_sibling_only_until_the_commit_delay_and_then_answers() {
    let (app, _dir) = world();
    let app = Arc::new(app);
    let to = resolve(&app, "news@example.org").unwrap();
    let acceptor = Acceptor::start(Arc::clone(&app), Duration::from_millis(20)).unwrap();
    // Another session is in the middle of a message and never finishes it.
    let silent = acceptor.receiving(false);
    let (tx, rx) = mpsc::channel();
    acceptor.submit(None, job(&to, b"Subject: alone\r\n\r\nx\r\n".to_vec(), &tx));
    let answer = rx.recv_timeout(ANSWER).expect("answered although the sibling never sent its message");
    assert!(answer[0].is_ok(), "{answer:?}");
    // A session that gives up (RSET, a closed connection) stops counting; the next store goes on.
    drop(silent);
    acceptor.submit(None, job(&to, b"Subject: next\r\n\r\nx\r\n".to_vec(), &tx));
    assert!(rx.recv_timeout(ANSWER).unwrap()[0].is_ok());
    assert_eq!(acceptor.commits(), (2, 2));
}

#[test]
fn with_a_spool_accepted_messages_commit_there_and_a_list_gone_or_too_small_is_still_refused() {
    let (mut app, dir) = world();
    let spool: Arc<dyn Spool> =
        Arc::new(courrier_store_sqlite::SqliteSpool::open(&dir.path().join("spool.db")).unwrap());
    app.mail_in.spool = Some(Arc::clone(&spool));
    let app = Arc::new(app);
    let to = resolve(&app, "news@example.org").unwrap();
    let acceptor = Acceptor::start(Arc::clone(&app), Duration::ZERO).unwrap();
    let (tx, rx) = mpsc::channel();
    let gone = Resolved { address: "gone@example.org".into(), ..to.clone() };
    let mut three = job(&to, b"Subject: s\r\n\r\nx\r\n".to_vec(), &tx);
    three.recipients = vec![to.clone(), gone, to.clone()];
    acceptor.submit(None, three);
    let answer = rx.recv_timeout(ANSWER).unwrap();
    assert!(matches!(&answer[0], Ok(Taken::Spool(_))), "{answer:?}");
    assert!(matches!(answer[1], Err(InboundError::UnknownAddress(_))), "{answer:?}");
    assert!(matches!((&answer[0], &answer[2]), (Ok(Taken::Spool(a)), Ok(Taken::Spool(b))) if a != b), "{answer:?}");
    assert_eq!(spool.count().unwrap(), 2, "both in the spool");
    assert!(in_read(&*app.store, |tx| tx.inbound_waiting(None, 10)).unwrap().is_empty(), "none in the main database");
    let patch = courrier_core::mailing::lists::ListPatch { max_message_kb: Some(1), ..Default::default() };
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    courrier_core::mailing::lists::update(&app, &Principal::operator(), &RequestCtx::cli(), &d, &l, patch).unwrap();
    acceptor.submit(None, job(&to, vec![b'x'; 2048], &tx));
    let answer = rx.recv_timeout(ANSWER).unwrap();
    assert!(matches!(answer[0], Err(InboundError::TooLarge { limit_kb: 1 })), "{answer:?}");
    assert_eq!(spool.count().unwrap(), 2);
}

#[test]
fn a_list_gone_renamed_or_with_its_limit_lowered_since_its_rcpt_is_refused_at_the_store() {
    let (app, _dir) = world();
    let app = Arc::new(app);
    let to = resolve(&app, "news@example.org").unwrap();
    let acceptor = Acceptor::start(Arc::clone(&app), Duration::ZERO).unwrap();
    let (tx, rx) = mpsc::channel();
    let big = format!("Subject: big\r\n\r\n{}\r\n", "x".repeat(2048)).into_bytes();
    // The name now belongs to another list (renamed, and another made under the old name).
    let other = Resolved {
        list: MailingList { id: ListId::from_stored(to.list.id.get() + 100), ..to.list.clone() },
        ..to.clone()
    };
    // An address whose list is gone.
    let gone = Resolved { address: "gone@example.org".into(), ..to.clone() };
    let mut two = job(&to, big.clone(), &tx);
    two.recipients = vec![other, gone, to.clone()];
    acceptor.submit(None, two);
    let answer = rx.recv_timeout(ANSWER).unwrap();
    assert!(matches!(answer[0], Err(InboundError::UnknownAddress(_))), "{answer:?}");
    assert!(matches!(answer[1], Err(InboundError::UnknownAddress(_))), "{answer:?}");
    assert!(answer[2].is_ok(), "the list still there takes it: {answer:?}");
    // The limit lowered to 1 KiB after the RCPT: the store sees the list as it is now.
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let patch = courrier_core::mailing::lists::ListPatch { max_message_kb: Some(1), ..Default::default() };
    courrier_core::mailing::lists::update(&app, &Principal::operator(), &RequestCtx::cli(), &d, &l, patch).unwrap();
    acceptor.submit(None, job(&to, big, &tx));
    let answer = rx.recv_timeout(ANSWER).unwrap();
    assert!(matches!(answer[0], Err(InboundError::TooLarge { limit_kb: 1 })), "{answer:?}");
    assert!(
        matches!(in_read(&*app.store, |tx| tx.inbound_waiting(None, 10)).unwrap().as_slice(), [_]),
        "only the one message stored"
    );
}
