//! Administrator sessions over a real store: the sliding idle hour, the twelve-hour ceiling, a
//! revoked role seen at the next request.

use courrier_core::access::model::{Role, User};
use courrier_core::access::principal::{Principal, RequestCtx, SESSION_MAX_SECS};
use courrier_core::access::{AccessError, Service};
use courrier_core::kernel::{EmailAddress, Timestamp};

use courrier_core::access::model::Profile;
use courrier_core::access::principal::{Credential, SESSION_IDLE_SECS, authenticate};
use courrier_core::access::sessions::*;
use courrier_core::access::{roles, users};
use courrier_core::kernel::Clock;
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::sync::Arc;

const PASSWORD: &str = "a long enough password";

fn world() -> (tempfile::TempDir, Arc<FixedClock>, Arc<Service>, User) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let app = courrier_core::testing::access(Arc::new(store), clock.clone(), Arc::new(RecordingTransport::default()));
    let new = users::NewUser {
        email: EmailAddress::parse("admin@example.org").unwrap(),
        profile: Profile::default(),
        password: Some(PASSWORD.into()),
    };
    let (user, _) = users::create(&app, &Principal::operator(), &RequestCtx::cli(), new).unwrap();
    roles::grant(&app, &Principal::operator(), &RequestCtx::cli(), user.id, Role::SiteAdmin).unwrap();
    (dir, clock, app, user)
}

fn session(token: &str) -> Credential {
    Credential::Session { token: token.to_owned(), csrf: None }
}

fn refused(r: Result<Arc<Principal>, AccessError>) -> bool {
    matches!(r, Err(AccessError::Unauthenticated))
}

#[test]
fn an_administrator_session_slides_with_an_idle_hour_and_ends_after_twelve_hours() {
    let (_dir, clock, app, _) = world();
    let token = login(&app, &RequestCtx::cli(), "admin@example.org", PASSWORD).unwrap().token;
    // Used every 59 minutes, it lives until its twelfth hour, not longer.
    let mut lived = 0;
    while lived + 59 * 60 < SESSION_MAX_SECS {
        clock.advance_secs(59 * 60);
        lived += 59 * 60;
        assert!(authenticate(&app, &session(&token), false).is_ok(), "alive after {lived} s");
    }
    clock.advance_secs(SESSION_MAX_SECS - lived);
    assert!(refused(authenticate(&app, &session(&token), false)), "the absolute ceiling");

    let idle = login(&app, &RequestCtx::cli(), "admin@example.org", PASSWORD).unwrap().token;
    clock.advance_secs(SESSION_IDLE_SECS);
    assert!(refused(authenticate(&app, &session(&idle), false)), "an idle hour ends it");
}

#[test]
fn a_revoked_role_is_gone_at_the_sessions_next_request() {
    let (_dir, _clock, app, user) = world();
    let token = login(&app, &RequestCtx::cli(), "admin@example.org", PASSWORD).unwrap().token;
    assert!(authenticate(&app, &session(&token), false).unwrap().is_site_admin());
    // (The last site administrator keeps the role: another holds it too.)
    let other = users::NewUser {
        email: EmailAddress::parse("other@example.org").unwrap(),
        profile: Profile::default(),
        password: None,
    };
    let (other, _) = users::create(&app, &Principal::operator(), &RequestCtx::cli(), other).unwrap();
    roles::grant(&app, &Principal::operator(), &RequestCtx::cli(), other.id, Role::SiteAdmin).unwrap();
    roles::revoke(&app, &Principal::operator(), &RequestCtx::cli(), user.id, Role::SiteAdmin).unwrap();
    assert!(!authenticate(&app, &session(&token), false).unwrap().is_site_admin());
}
