//! Requests by mail, from raw messages through the inbound store: what each address and command
//! does, what is answered, and what is never answered (robots, loops).

use crate::prelude::*;
use courrier_core::mailing::Service;
use courrier_core::mailing::members::AddMember;
use courrier_core::mailing::requests::Outcome;

use courrier_core::access::Principal;
use courrier_core::access::model::Role as AccessRole;
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::users::{self, NewUser};
use courrier_core::kernel::{Clock, DomainName, EventName, ListName};
use courrier_core::mailing::inbound;
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_core::mailing::requests::*;
use courrier_core::mailing::{domains, lists};
use courrier_core::storage::in_read;
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

struct World {
    app: Service,
    mail: Arc<RecordingTransport>,
    _dir: tempfile::TempDir,
}

fn email(s: &str) -> EmailAddress {
    EmailAddress::parse(s).unwrap()
}

/// `news@example.org` under `policy`, owned by owner@example.org, moderated by mod@example.org,
/// with one active member `m@example.net`.
fn world(policy: SubscriptionPolicy) -> World {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(RecordingTransport::default());
    let app =
        courrier_core::testing::mailing(Arc::new(store), clock, mail.clone(), courrier_core::egress::Egress::offline());
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    for who in ["owner@example.org", "mod@example.org"] {
        let new = NewUser { email: email(who), profile: Default::default(), password: None };
        users::create(&app.access, &p, &ctx, new).unwrap();
    }
    let req = domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
    domains::create(&app, &p, &ctx, req).unwrap();
    let new = lists::NewList {
        name: l.clone(),
        display_name: "News".into(),
        owner: email("owner@example.org"),
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&app, &p, &ctx, &d, new).unwrap();
    let moderator = users::by_email(&app.access, &email("mod@example.org")).unwrap().0;
    courrier_core::access::roles::grant(
        &app.access,
        &p,
        &ctx,
        moderator.id,
        AccessRole::Moderator(d.clone(), l.clone()),
    )
    .unwrap();
    let add = AddMember::new(email("m@example.net"), None, None, false, None, None, None).unwrap();
    members::add(&app, &p, &ctx, None, &d, &l, add).unwrap();
    let patch = lists::ListPatch { subscription_policy: Some(policy), ..Default::default() };
    lists::update(&app, &p, &ctx, &d, &l, patch).unwrap();
    mail.sent.lock().unwrap().clear();
    World { app, mail, _dir: dir }
}

impl World {
    /// Stores `raw` as received for `to` from `envelope_from`, and processes it as a request.
    fn receive(&self, to: &str, envelope_from: Option<&str>, raw: &str) -> Outcome {
        let r = inbound::resolve(&self.app, to).unwrap();
        let id = inbound::store(&self.app, envelope_from, &[&r], raw.as_bytes()).unwrap().remove(0);
        let inbound::Processed::Request(outcome) = inbound::process(&self.app, id).unwrap() else {
            panic!("not processed as a request")
        };
        assert_eq!(inbound::process(&self.app, id).unwrap(), inbound::Processed::AlreadyDone, "processed once");
        let stored = in_read(&*self.app.store, |tx| tx.inbound_by_id(id)).unwrap().unwrap();
        assert_eq!(stored.outcome.as_deref(), Some(outcome.as_str()));
        outcome
    }

    /// The mails sent since the last call: (recipients, text with soft line breaks undone).
    fn take_mails(&self) -> Vec<(Vec<String>, String)> {
        let sent = std::mem::take(&mut *self.mail.sent.lock().unwrap());
        sent.into_iter()
            .map(|m| {
                let text = String::from_utf8_lossy(&m.data).replace("=\r\n", "").replace("=3D", "=");
                (m.recipients.iter().map(ToString::to_string).collect(), text)
            })
            .collect()
    }

    fn member(&self, address: &str) -> Option<courrier_core::mailing::model::Member> {
        let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
        in_read(&*self.app.store, |tx| {
            let list = tx.list_by_name(&d, &l)?.unwrap();
            tx.member_by_email(list.id, &email(address))
        })
        .unwrap()
    }
}

fn msg(from: &str, subject: &str, body: &str) -> String {
    format!(
        "From: Ann <{from}>\r\nTo: news-request@example.org\r\nSubject: {subject}\r\nMessage-ID: <r1@example.net>\r\n\r\n{body}\r\n"
    )
}

/// The path of the first link in `text` that contains `marker`.
fn link(text: &str, marker: &str) -> String {
    let line = text.lines().find(|l| l.contains(marker)).unwrap_or_else(|| panic!("no {marker} in {text}"));
    line[line.find(marker).unwrap() + marker.len()..].trim().to_owned()
}

#[test]
fn subscribe_in_the_subject_mails_a_confirmation_and_subscribes_nobody_yet() {
    let w = world(SubscriptionPolicy::Open);
    let raw = msg("ann@example.net", "subscribe", "");
    assert_eq!(w.receive("news-request@example.org", Some("ann@example.net"), &raw), Outcome::ConfirmationSent);
    let m = w.member("ann@example.net").expect("a pending member");
    assert_eq!((m.status, m.consent_source.as_deref()), (MemberStatus::Pending, Some("mail_request")));
    let mails = w.take_mails();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].0, ["ann@example.net"]);
    let token = link(&mails[0].1, "/p/confirm/");
    // Even an open list waits for the link: the mail alone is not consent.
    let confirmed = subscriptions::confirm(&w.app, &token, None).unwrap().unwrap();
    assert!(confirmed.now_active);
    assert_eq!(w.member("ann@example.net").unwrap().status, MemberStatus::Active);
}

#[test]
fn a_command_is_read_from_the_first_body_line_or_after_re() {
    let w = world(SubscriptionPolicy::Open);
    let raw = msg("bob@example.net", "(no subject)", "\r\n  Subscribe please\r\nunsubscribe");
    assert_eq!(w.receive("news-request@example.org", Some("bob@example.net"), &raw), Outcome::ConfirmationSent);
    let raw = msg("cat@example.net", "Re: RE: subscribe", "");
    assert_eq!(w.receive("news-request@example.org", Some("cat@example.net"), &raw), Outcome::ConfirmationSent);
    let mails = w.take_mails();
    assert_eq!(mails.iter().map(|m| m.0[0].as_str()).collect::<Vec<_>>(), ["bob@example.net", "cat@example.net"]);
}

#[test]
fn joining_a_moderated_list_by_mail_waits_for_the_link_then_for_a_moderator() {
    let w = world(SubscriptionPolicy::Moderate);
    let raw = msg("dan@example.net", "hello", "");
    assert_eq!(w.receive("news-join@example.org", Some("dan@example.net"), &raw), Outcome::ConfirmationSent);
    let mails = w.take_mails();
    assert_eq!(mails.len(), 1, "only the confirmation: nothing to moderate yet");
    let token = link(&mails[0].1, "/p/confirm/");
    let confirmed = subscriptions::confirm(&w.app, &token, None).unwrap().unwrap();
    assert!(!confirmed.now_active);
    let m = w.member("dan@example.net").unwrap();
    assert_eq!(
        (m.status, m.pending_reason),
        (MemberStatus::Pending, Some(courrier_core::mailing::model::PendingReason::Moderation))
    );
    let notices = w.take_mails();
    let mut to: Vec<&str> = notices.iter().map(|m| m.0[0].as_str()).collect();
    to.sort_unstable();
    assert_eq!(to, ["mod@example.org", "owner@example.org"], "one notice per owner and moderator");
    assert!(notices[0].1.contains("/moderation/subscriptions"), "{}", notices[0].1);
    // Asking again while held: told it waits, the moderators are not told again.
    assert_eq!(w.receive("news-join@example.org", Some("dan@example.net"), &raw), Outcome::AwaitingModeration);
    let again = w.take_mails();
    assert_eq!((again.len(), again[0].0[0].as_str()), (1, "dan@example.net"));
}

#[test]
fn unsubscribing_by_mail_sends_a_link_and_changes_nothing_until_it_is_followed() {
    let w = world(SubscriptionPolicy::Open);
    let raw = msg("m@example.net", "unsubscribe", "");
    assert_eq!(w.receive("news-request@example.org", Some("m@example.net"), &raw), Outcome::UnsubscribeLinkSent);
    assert_eq!(w.member("m@example.net").unwrap().status, MemberStatus::Active, "a From can be forged");
    let mails = w.take_mails();
    assert_eq!((mails.len(), mails[0].0[0].as_str()), (1, "m@example.net"));
    let token = link(&mails[0].1, "/p/unsubscribe/");
    assert!(delivery::unsubscribe(&w.app, &token).unwrap().is_some());
    assert_eq!(w.member("m@example.net").unwrap().status, MemberStatus::Unsubscribed);
    let removed = in_read(&*w.app.store, |tx| tx.events_after(None, 100)).unwrap();
    assert_eq!(removed.iter().filter(|e| e.name == EventName::MemberRemoved).count(), 1);
    // Leaving again, or someone never subscribed: told so, nothing to confirm.
    let raw = msg("m@example.net", "bye", "");
    assert_eq!(w.receive("news-leave@example.org", Some("m@example.net"), &raw), Outcome::NotSubscribed);
    let told = w.take_mails();
    assert!(told[0].1.contains("not subscribed") && !told[0].1.contains("/p/unsubscribe/"), "{}", told[0].1);
}

#[test]
fn help_and_unknown_commands_are_answered_with_the_addresses() {
    let w = world(SubscriptionPolicy::Open);
    assert_eq!(
        w.receive("news-request@example.org", Some("e@example.net"), &msg("e@example.net", "help", "")),
        Outcome::Help
    );
    assert_eq!(
        w.receive("news-request@example.org", Some("e@example.net"), &msg("e@example.net", "what is this", "hmm")),
        Outcome::NotUnderstood
    );
    let mails = w.take_mails();
    assert_eq!(mails.len(), 2);
    for (to, text) in &mails {
        assert_eq!(to, &["e@example.net"]);
        assert!(text.contains("news-join@example.org") && text.contains("news-leave@example.org"), "{text}");
    }
    assert!(mails[1].1.contains("was not understood"), "{}", mails[1].1);
    assert!(w.member("e@example.net").is_none());
}

#[test]
fn an_already_subscribed_or_closed_list_request_is_told_why() {
    let w = world(SubscriptionPolicy::Open);
    assert_eq!(
        w.receive("news-join@example.org", Some("m@example.net"), &msg("m@example.net", "x", "")),
        Outcome::AlreadySubscribed
    );
    let told = w.take_mails();
    assert!(told[0].1.contains("already subscribed"), "{}", told[0].1);
    let closed = world(SubscriptionPolicy::Closed);
    assert_eq!(
        closed.receive("news-request@example.org", Some("f@example.net"), &msg("f@example.net", "subscribe", "")),
        Outcome::Closed
    );
    assert!(closed.member("f@example.net").is_none());
    assert!(closed.take_mails()[0].1.contains("takes no subscriptions"));
}

#[test]
fn robots_and_bounces_to_a_request_address_are_never_answered() {
    let w = world(SubscriptionPolicy::Open);
    let base = msg("g@example.net", "subscribe", "");
    for header in ["Precedence: bulk", "Precedence: junk", "Precedence: List", "Auto-Submitted: auto-replied"] {
        let raw = format!("{header}\r\n{base}");
        assert_eq!(w.receive("news-request@example.org", Some("g@example.net"), &raw), Outcome::Robot, "{header}");
    }
    assert_eq!(w.receive("news-join@example.org", None, &base), Outcome::Robot, "the null sender: a bounce");
    assert!(w.take_mails().is_empty());
    assert!(w.member("g@example.net").is_none());
    // A person's mail that says so is answered.
    let raw = format!("Auto-Submitted: no\r\nPrecedence: first-class\r\n{base}");
    assert_eq!(w.receive("news-request@example.org", Some("g@example.net"), &raw), Outcome::ConfirmationSent);
}

#[test]
fn owner_mail_is_forwarded_to_the_owners_once_and_never_loops() {
    let w = world(SubscriptionPolicy::Open);
    let raw = "From: h@example.net\r\nTo: news-owner@example.org\r\nSubject: a question\r\n\r\nHello owners\r\n";
    assert_eq!(w.receive("news-owner@example.org", Some("h@example.net"), raw), Outcome::Forwarded);
    let mails = w.take_mails();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].0, ["owner@example.org"], "owners, not moderators");
    assert!(mails[0].1.starts_with("X-BeenThere: news-owner@example.org\r\n"), "{}", mails[0].1);
    assert!(mails[0].1.contains("Hello owners"));
    // What comes back to the owner address (an owner forwarding to it) is dropped.
    let back = format!("X-BeenThere: news-owner@example.org\r\n{raw}");
    assert_eq!(w.receive("news-owner@example.org", Some("owner@example.org"), &back), Outcome::Loop);
    assert!(w.take_mails().is_empty());
}

#[test]
fn a_command_is_the_first_word_only() {
    let m = |subject: &str, text: &str| RequestMail {
        sender: None,
        subject: subject.into(),
        text: text.into(),
        robot: false,
        been_there: Vec::new(),
        message_id: None,
    };
    assert_eq!(command(&m("SUBSCRIBE", "")), Some(Command::Subscribe));
    assert_eq!(command(&m("help:", "")), Some(Command::Help));
    assert_eq!(command(&m("please subscribe me", "")), None);
    assert_eq!(command(&m("", "\n\nleave\n")), Some(Command::Unsubscribe));
    assert_eq!(command(&m("re:", "")), None);
    assert_eq!(command(&m("Ré: subscribe", "")), None);
    assert_eq!(command(&m("éé subscribe", "")), None, "no panic inside a multi-byte character");
}
