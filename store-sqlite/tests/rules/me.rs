//! The rules of time a real server cannot show in a test (a link's hour, the session's sliding
//! hour and twelve-hour ceiling), on a real SQLite store with a clock that moves only when told.

use crate::prelude::*;
use courrier_core::mailing::Service;

use courrier_core::access::Principal;
use courrier_core::access::users::{self, NewUser};
use courrier_core::kernel::Clock;
use courrier_core::mailing::domains;
use courrier_core::mailing::lists;
use courrier_core::mailing::me::*;
use courrier_core::mailing::members::{self, AddMember};
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

struct World {
    app: Service,
    clock: Arc<FixedClock>,
    mail: Arc<RecordingTransport>,
    _dir: tempfile::TempDir,
}

const SUBSCRIBER: &str = "sub@example.net";

fn world() -> World {
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
    let d = DomainName::parse("example.org").unwrap();
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
        name: ListName::parse("news").unwrap(),
        display_name: "News".into(),
        owner,
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&app, &p, &ctx, &d, new_list).unwrap();
    let add = AddMember::regular(EmailAddress::parse(SUBSCRIBER).unwrap());
    members::add(&app, &p, &ctx, None, &d, &ListName::parse("news").unwrap(), add).unwrap();
    World { app, clock, mail, _dir: dir }
}

/// Mails a login link and returns its token, read from the recorded mail.
fn link(w: &World) -> String {
    let before = w.mail.sent.lock().unwrap().len();
    assert!(send_login_link(&w.app, &RequestCtx::cli(), &EmailAddress::parse(SUBSCRIBER).unwrap()).unwrap());
    let sent = w.mail.sent.lock().unwrap();
    assert_eq!(sent.len(), before + 1);
    let text = String::from_utf8_lossy(&sent[before].data).replace("=\r\n", "");
    let at = text.find("/p/me/login/").expect("a login link") + "/p/me/login/".len();
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')).collect()
}

fn is_unauthenticated<T: std::fmt::Debug>(r: Result<T, MailingError>) -> bool {
    matches!(r, Err(MailingError::Access(AccessError::Unauthenticated)))
}

#[test]
fn a_login_link_works_once_within_its_hour() {
    let w = world();
    let token = link(&w);
    w.clock.advance_secs(LINK_TTL_SECS - 1);
    let opened = open_session(&w.app, &RequestCtx::cli(), &token).unwrap();
    assert_eq!(opened.subscriber.email.to_string(), SUBSCRIBER);
    assert!(is_unauthenticated(open_session(&w.app, &RequestCtx::cli(), &token)), "single use");
    let late = link(&w);
    w.clock.advance_secs(LINK_TTL_SECS);
    assert!(is_unauthenticated(open_session(&w.app, &RequestCtx::cli(), &late)), "expired after an hour");
}

#[test]
fn an_unknown_address_gets_no_mail() {
    let w = world();
    let unknown = EmailAddress::parse("nobody@example.net").unwrap();
    let before = w.mail.sent.lock().unwrap().len();
    assert!(!send_login_link(&w.app, &RequestCtx::cli(), &unknown).unwrap());
    assert_eq!(w.mail.sent.lock().unwrap().len(), before);
}

#[test]
fn a_session_slides_with_an_hour_of_inactivity_and_ends_after_twelve_hours() {
    let w = world();
    let opened = open_session(&w.app, &RequestCtx::cli(), &link(&w)).unwrap();
    let token = opened.token;
    // Used every 59 minutes, it lives until its twelfth hour, not longer.
    let mut lived = 0;
    while lived + 59 * 60 < SESSION_MAX_SECS {
        w.clock.advance_secs(59 * 60);
        lived += 59 * 60;
        let s = authenticate(&w.app, &token, None, false).unwrap();
        assert!(s.expires_at <= w.clock.now().plus_secs(SESSION_IDLE_SECS));
    }
    w.clock.advance_secs(SESSION_MAX_SECS - lived);
    assert!(is_unauthenticated(authenticate(&w.app, &token, None, false)), "the absolute ceiling");

    let idle = open_session(&w.app, &RequestCtx::cli(), &link(&w)).unwrap().token;
    w.clock.advance_secs(SESSION_IDLE_SECS);
    assert!(is_unauthenticated(authenticate(&w.app, &idle, None, false)), "an idle hour ends it");
}

#[test]
fn mutations_need_the_sessions_csrf_token_and_logout_ends_it() {
    let w = world();
    let opened = open_session(&w.app, &RequestCtx::cli(), &link(&w)).unwrap();
    let csrf = opened.subscriber.csrf_token.clone();
    assert!(matches!(
        authenticate(&w.app, &opened.token, None, true),
        Err(MailingError::Access(AccessError::CsrfFailed))
    ));
    assert!(matches!(
        authenticate(&w.app, &opened.token, Some("wrong"), true),
        Err(MailingError::Access(AccessError::CsrfFailed))
    ));
    authenticate(&w.app, &opened.token, Some(&csrf), true).unwrap();
    logout(&w.app, &opened.token).unwrap();
    assert!(is_unauthenticated(authenticate(&w.app, &opened.token, Some(&csrf), false)));
}

/// A request for a link from `source` (the HTTP frontend passes the peer's address).
fn from(source: &str) -> RequestCtx {
    RequestCtx { source: Some(source.to_owned()), ..RequestCtx::cli() }
}

fn retry_after(r: Result<(), MailingError>) -> Option<u64> {
    match r {
        Err(MailingError::Access(AccessError::RateLimited { retry_after })) => Some(retry_after),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_source_gets_twenty_links_an_hour_even_five_a_minute_apart() {
    let w = world();
    let source = from("203.0.113.7");
    let mut n = 0;
    // Four minutes of five requests each (new addresses: the address's own limit stays out of it).
    for _ in 0..4 {
        for _ in 0..5 {
            n += 1;
            take_link_request(&w.app, &source, &format!("a{n}@example.net")).unwrap();
        }
        w.clock.advance_secs(61);
    }
    // The minute is fresh, the hour is full: refused until the first request's hour has passed.
    let wait = retry_after(take_link_request(&w.app, &source, "late@example.net")).unwrap();
    assert!(wait > 60 && wait <= 3600, "the hour's window, not the minute's: {wait}");
    // Another source is not held back by this one.
    take_link_request(&w.app, &from("203.0.113.8"), "other@example.net").unwrap();
    w.clock.advance_secs(i64::try_from(wait).unwrap());
    take_link_request(&w.app, &source, "late@example.net").unwrap();
}
