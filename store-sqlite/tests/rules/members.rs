//! Members over a real store.

use crate::prelude::*;

use courrier_core::mailing::members::*;

#[test]
fn an_administrator_removes_a_member_once() {
    use courrier_core::access::users::{self, NewUser};
    use courrier_core::kernel::Clock;
    use courrier_core::mailing::domains;
    use courrier_core::testing::{FixedClock, RecordingTransport};
    use courrier_store_sqlite::SqliteStore;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(RecordingTransport::default());
    let app = courrier_core::testing::mailing(Arc::new(store), clock, mail, courrier_core::egress::Egress::offline());
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    users::create(&app.access, &p, &ctx, NewUser { email: owner.clone(), profile: Default::default(), password: None })
        .unwrap();
    let req = domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
    domains::create(&app, &p, &ctx, req).unwrap();
    let new = lists::NewList {
        name: l.clone(),
        display_name: "News".into(),
        owner,
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&app, &p, &ctx, &d, new).unwrap();
    let a = EmailAddress::parse("a@example.net").unwrap();
    let req = AddMember::regular(a.clone());
    add(&app, &p, &ctx, None, &d, &l, req).unwrap();

    let removed = remove(&app, &p, &ctx, &d, &l, &MemberRef::Email(a.clone())).unwrap();
    assert_eq!(removed.status, MemberStatus::Removed);
    let stored = get(&app, &p, &ctx, &d, &l, &MemberRef::Id(removed.id)).unwrap();
    assert_eq!(stored.status, MemberStatus::Removed);
    let events = in_read(&*app.store, |tx| tx.events_after(None, 100)).unwrap();
    let gone: Vec<_> = events.iter().filter(|e| e.name == EventName::MemberRemoved).collect();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].data["email"], "a@example.net");
    assert!(matches!(remove(&app, &p, &ctx, &d, &l, &MemberRef::Email(a)), Err(MailingError::Conflict(_))));
    let nobody = MemberRef::Email(EmailAddress::parse("b@example.net").unwrap());
    assert!(matches!(remove(&app, &p, &ctx, &d, &l, &nobody), Err(MailingError::NotFound("member"))));
}
