//! Lists over a real store.

use crate::prelude::*;
use courrier_core::mailing::Service;

use courrier_core::access::users::{self, NewUser};
use courrier_core::kernel::{Clock, Timestamp};
use courrier_core::mailing::lists::*;
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

/// A real SQLite store with the lists `news` on a.example and b.example, and `jobs` on a.example.
fn world(dir: &std::path::Path) -> Service {
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.join("t.db"), clock.now().unix_micros()).unwrap();
    let mail = Arc::new(RecordingTransport::default());
    let app = courrier_core::testing::mailing(Arc::new(store), clock, mail, courrier_core::egress::Egress::offline());
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    let new_user = NewUser { email: owner.clone(), profile: Default::default(), password: None };
    users::create(&app.access, &p, &ctx, new_user).unwrap();
    for (domain, list) in [("a.example", "news"), ("a.example", "jobs"), ("b.example", "news")] {
        let d = DomainName::parse(domain).unwrap();
        let req = domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
        let _ = domains::create(&app, &p, &ctx, req);
        let new = NewList {
            name: ListName::parse(list).unwrap(),
            display_name: list.into(),
            owner: owner.clone(),
            kind: None,
            subscription_policy: None,
        };
        create(&app, &p, &ctx, &d, new).unwrap();
    }
    app
}

#[test]
fn a_list_name_alone_finds_the_one_domain_that_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let app = world(dir.path());
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let find = |name: &str| find_anywhere(&app, &p, &ctx, &ListName::parse(name).unwrap());
    assert_eq!(find("jobs").unwrap().address(), "jobs@a.example");
    match find("news") {
        Err(MailingError::Invalid(why)) => assert!(why.contains("a.example, b.example"), "{why}"),
        other => panic!("two domains have news: {other:?}"),
    }
    assert!(matches!(find("nothing"), Err(MailingError::NotFound("list"))));
}
