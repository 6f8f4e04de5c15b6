//! Held posts over a real store.

use crate::prelude::*;

use courrier_core::access::users::{self, NewUser};
use courrier_core::kernel::Clock;
use courrier_core::mailing::inbound::{self, Oversize};
use courrier_core::mailing::model::{PostingPolicy, SubscriptionPolicy};
use courrier_core::mailing::moderation::*;
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

#[test]
fn a_held_post_waits_its_lists_held_days_then_the_housekeeping_discards_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(RecordingTransport::default());
    let app =
        courrier_core::testing::mailing(Arc::new(store), clock.clone(), mail, courrier_core::egress::Egress::offline());
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    users::create(&app.access, &p, &ctx, NewUser { email: owner.clone(), profile: Default::default(), password: None })
        .unwrap();
    let d = DomainName::parse("example.org").unwrap();
    domains::create(
        &app,
        &p,
        &ctx,
        domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None },
    )
    .unwrap();
    for (name, days) in [("short", 2), ("long", 14)] {
        let l = ListName::parse(name).unwrap();
        let new = lists::NewList {
            name: l.clone(),
            display_name: name.into(),
            owner: owner.clone(),
            kind: None,
            subscription_policy: Some(SubscriptionPolicy::Open),
        };
        lists::create(&app, &p, &ctx, &d, new).unwrap();
        let patch = lists::ListPatch {
            posting_policy: Some(PostingPolicy::Moderated),
            held_days: Some(days),
            ..Default::default()
        };
        assert_eq!(lists::update(&app, &p, &ctx, &d, &l, patch).unwrap().policies.held_days, days);
        let raw = format!("From: a@example.net\r\nSubject: to {name}\r\nMessage-ID: <{name}@x>\r\n\r\nhi\r\n");
        inbound::receive(&app, Some("a@example.net"), &format!("{name}@example.org"), raw.as_bytes(), Oversize::Refuse)
            .unwrap();
    }
    let held =
        |name: &str| messages(&app, &p, &ctx, &d, &ListName::parse(name).unwrap(), Page::first(10)).unwrap().total;
    assert_eq!((held("short"), held("long")), (1, 1));
    assert_eq!(expire_held(&app).unwrap(), 0, "nothing is old yet");
    clock.advance_secs(2 * 86400 + 1);
    assert_eq!(expire_held(&app).unwrap(), 1);
    assert_eq!((held("short"), held("long")), (0, 1), "each list's own held_days");
    clock.advance_secs(12 * 86400);
    assert_eq!(expire_held(&app).unwrap(), 1);
    assert_eq!(held("long"), 0);
    let audit = in_read(&*app.store, |tx| {
        tx.list_audit(
            &courrier_core::kernel::AuditFilter {
                action: Some("moderation.message.expire".into()),
                ..Default::default()
            },
            Page::first(10),
        )
    })
    .unwrap();
    assert_eq!(audit.total, 2);
}
