//! Access against the real server: the authorisation matrix, uniform 401s, quotas, keys never
//! wider than their user, revocations that take effect at once, sessions with CSRF, invitations
//! over real SMTP, and secrets that never come back.

use courrier_cli::server::Services;
use courrier_core::access::model::{KeyId, KeyScope, PermSet, Profile, Role, User, UserId};
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Perm, Principal, keys, roles, users};
use courrier_core::kernel::{DomainName, EmailAddress, EventName, ListName};
use courrier_core::mailing::members::{self, AddMember};
use courrier_core::mailing::model::{DeliveryMode, MemberStatus, NewMember, PendingReason, SubscriptionPolicy};
use courrier_core::mailing::{domains, lists, sends, webhooks};
use courrier_core::storage::{in_read, in_write};
use courrier_http::routes::{self, Access, Api};
use courrier_tests::harness::{Resp, SmtpSink, TestApp, run_cli_in};
use serde_json::{Value, json};
use std::time::Duration;

pub(crate) const PASSWORD: &str = "correct horse battery staple";

fn email(s: &str) -> EmailAddress {
    EmailAddress::parse(s).unwrap()
}
fn domain(s: &str) -> DomainName {
    DomainName::parse(s).unwrap()
}
fn list(s: &str) -> ListName {
    ListName::parse(s).unwrap()
}

pub(crate) fn make_user(core: &Services, address: &str, grant: &[Role]) -> User {
    make_user_with(core, address, Some(PASSWORD), grant)
}

/// As [`make_user`], with the given password or none (hashing one is the slowest part of making a
/// user).
fn make_user_with(core: &Services, address: &str, password: Option<&str>, grant: &[Role]) -> User {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let new = users::NewUser { email: email(address), profile: Profile::default(), password: password.map(Into::into) };
    let (user, _) = users::create(&core.access, &p, &ctx, new).unwrap();
    for role in grant {
        ensure_scope(core, role);
        roles::grant(&core.access, &p, &ctx, user.id, role.clone()).unwrap();
    }
    user
}

/// Creates the domain and list a role names, when missing (roles name existing ones only); the
/// lists are owned by an account of their own, so the role under test is the only one granted.
pub(crate) fn ensure_scope(core: &Services, role: &Role) {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    if let Some(d) = role.domain()
        && domains::get(&core.mailing, &p, &ctx, d).is_err()
    {
        let req = domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
        domains::create(&core.mailing, &p, &ctx, req).unwrap();
    }
    if let (Some(d), Some(l)) = (role.domain(), role.list())
        && lists::get(&core.mailing, &p, &ctx, d, l).is_err()
    {
        let owner = email("scope-owner@example.com");
        if users::by_email(&core.access, &owner).is_err() {
            let new =
                users::NewUser { email: owner.clone(), profile: Profile::default(), password: Some(PASSWORD.into()) };
            users::create(&core.access, &p, &ctx, new).unwrap();
        }
        let req = lists::NewList {
            name: l.clone(),
            display_name: l.as_str().to_uppercase(),
            owner,
            kind: None,
            subscription_policy: Some(SubscriptionPolicy::Open),
        };
        lists::create(&core.mailing, &p, &ctx, d, req).unwrap();
        // The list exists; its owner's role would show in listings of accounts: taken back.
        let owner = users::by_email(&core.access, &email("scope-owner@example.com")).unwrap().0;
        roles::revoke(&core.access, &p, &ctx, owner.id, Role::Owner(d.clone(), l.clone())).unwrap();
    }
}

pub(crate) fn make_key(core: &Services, user: &User, scope: KeyScope, perms: &[Perm], rate: Option<u32>) -> String {
    let grants = users::by_email(&core.access, &user.email).unwrap().1;
    let new = keys::NewKey {
        name: "test".into(),
        scope,
        perms: PermSet::of(perms),
        expires_at: None,
        rate_limit_per_min: rate,
    };
    keys::create_for(&core.access, &Principal::operator(), &RequestCtx::cli(), user, &keys::roles_of(&grants), new)
        .unwrap()
        .secret
}

/// A domain (created when missing) and a list on it, through core as the operator.
pub(crate) fn make_list(core: &Services, d: &str, l: &str, owner: &str, policy: SubscriptionPolicy) {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    if domains::get(&core.mailing, &p, &ctx, &domain(d)).is_err() {
        let req = domains::NewDomainRequest { name: domain(d), dkim_selector: None, default_subscription_policy: None };
        domains::create(&core.mailing, &p, &ctx, req).unwrap();
    }
    let req = lists::NewList {
        name: list(l),
        display_name: l.to_uppercase(),
        owner: email(owner),
        kind: None,
        subscription_policy: Some(policy),
    };
    lists::create(&core.mailing, &p, &ctx, &domain(d), req).unwrap();
}

#[test]
fn a_role_names_an_existing_domain_or_list() {
    let app = TestApp::spawn();
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, None);
    let grant =
        |body: Value| call(&app, "POST", &format!("/api/v1/users/{}/roles", admin.id), &[bearer(&key)], Some(&body));
    grant(json!({ "role": "domain_admin", "domain": "nowhere.org" })).expect_error(422, "validation_failed");
    grant(json!({ "role": "owner", "domain": "nowhere.org", "list": "news" })).expect_error(422, "validation_failed");
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    assert_eq!(grant(json!({ "role": "moderator", "domain": "example.org", "list": "news" })).status, 201);
    grant(json!({ "role": "moderator", "domain": "example.org", "list": "jobs" }))
        .expect_error(422, "validation_failed");
}

pub(crate) fn bearer(key: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {key}"))
}

pub(crate) fn call(app: &TestApp, method: &str, path: &str, headers: &[(&str, String)], body: Option<&Value>) -> Resp {
    let mut h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let bytes = body.map(|b| match b {
        Value::String(csv) => csv.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    });
    match body {
        Some(Value::String(_)) => h.push(("content-type", "text/csv")),
        Some(_) => h.push(("content-type", "application/json")),
        None => {}
    }
    app.client.request(method, path, &h, bytes.as_deref())
}

pub(crate) struct Session {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

pub(crate) fn login(app: &TestApp, address: &str) -> Session {
    let resp = app.client.post_json("/api/v1/auth/login", &json!({ "email": address, "password": PASSWORD }));
    assert_eq!(resp.status, 200, "{}", resp.body);
    let set_cookie = resp.header("set-cookie").unwrap().to_owned();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"), "{set_cookie}");
    assert!(!set_cookie.contains("Secure"), "the public URL is http: {set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    Session { cookie, csrf: resp.json()["data"]["csrf_token"].as_str().unwrap().to_owned() }
}

/// The address whose subscriber session probes the `/me` routes.
const PROBE_SUBSCRIBER: &str = "me@example.net";

/// One request per route of the table, repeatable: `n` makes each call's data fresh.
fn probe(app: &TestApp, admin: &User, method: &str, path: &str, n: usize) -> (String, Option<Value>) {
    let core = &app.core;
    // Only what the route's path names is made for it: a cell makes no user, member or send it
    // does not use (the matrix has well over a thousand cells; making all of them for each had
    // every send fan out to a list that grew by a member a cell, and an Argon2 hash a cell).
    let path = path.replace("{domain}", "example.org").replace("{list}", "news");
    let (op, ctx, news) = (Principal::operator(), RequestCtx::cli(), (domain("example.org"), list("news")));
    // A send goes to at least one member.
    let path = if path.contains("{member}") || path.contains("{send}") {
        let member = members::add(
            &core.mailing,
            &op,
            &ctx,
            None,
            &news.0,
            &news.1,
            AddMember::regular(email(&format!("member{n}@example.net"))),
        )
        .unwrap()
        .ran()
        .unwrap()
        .member_id();
        path.replace("{member}", &member.to_string())
    } else {
        path
    };
    let path = if path.contains("{send}") {
        let message = sends::NewMessage { subject: format!("probe {n}"), text: Some("hello".into()), html: None };
        let send =
            sends::submit(&core.mailing, &op, &ctx, None, &news.0, &news.1, message).unwrap().ran().unwrap().send_id;
        path.replace("{send}", &send.to_string())
    } else {
        path
    };
    let id = if !path.contains("{id}") {
        String::new()
    } else if path.starts_with("/api/v1/apikeys") {
        make_key(core, admin, KeyScope::User, &[Perm::Read], None);
        keys::list(&core.access, &Principal::operator(), courrier_core::kernel::Page::first(1)).unwrap().items[0]
            .id
            .to_string()
    } else if path.starts_with("/api/v1/webhooks/") {
        // A closed port of 127.0.0.1 (the matrix's server allows loopback): the ping is refused at once.
        let req = webhooks::NewWebhookRequest {
            url: "https://127.0.0.1:9/hook".into(),
            events: vec![EventName::ListSuspended],
            domain_id: None,
            list_id: None,
        };
        webhooks::create(&core.mailing, &Principal::operator(), &RequestCtx::cli(), req).unwrap().webhook.id.to_string()
    } else if path.contains("/moderation/subscriptions/") {
        held_subscription(core, n).to_string()
    } else if path.contains("/moderation/messages/") {
        held_post(core, n).to_string()
    } else {
        // A user for the route to act on, without a password (no route here reads it).
        let owner = Role::Owner(domain("example.org"), list("news"));
        make_user_with(core, &format!("target{n}@example.org"), None, &[owner]).id.to_string()
    };
    let path = path.replace("{id}", &id);
    // A list's mail account, to read, delete or test: a closed port of 127.0.0.1 (the matrix's
    // server allows loopback), so the test fails at once.
    let path = if path.contains("{kind}") {
        let req = courrier_core::mailing::credentials::CredentialRequest {
            host: "127.0.0.1".into(),
            port: 9,
            security: courrier_core::mailing::accounts::Security::Tls,
            username: "news".into(),
            password: Some("probe".into()),
            folder: None,
        };
        let (p, ctx) = (Principal::operator(), RequestCtx::cli());
        let kind = courrier_core::mailing::credentials::CredentialKind::Submission;
        courrier_core::mailing::credentials::put(
            &core.mailing,
            &p,
            &ctx,
            &domain("example.org"),
            &list("news"),
            kind,
            req,
        )
        .unwrap();
        path.replace("{kind}", "submission")
    } else {
        path
    };
    // The probing subscriber is (again) on `news`, so that a `/me` mutation has one to change.
    let path = if path.contains("{list_id}") {
        let again = AddMember {
            email: email(PROBE_SUBSCRIBER),
            display_name: None,
            delivery_mode: DeliveryMode::Regular,
            force: true,
            consent_source: Some("test".into()),
            consent_evidence: Some("the authorization matrix".into()),
            source_ip: None,
        };
        let (p, ctx) = (Principal::operator(), RequestCtx::cli());
        let _ = members::add(&core.mailing, &p, &ctx, None, &domain("example.org"), &list("news"), again);
        let news = in_read(&*core.mailing.store, |tx| tx.list_by_name(&domain("example.org"), &list("news")))
            .unwrap()
            .unwrap();
        path.replace("{list_id}", &news.id.to_string())
    } else {
        path
    };
    let body = match (method, path.as_str()) {
        ("POST", "/api/v1/auth/login") => Some(json!({ "email": "admin@example.org", "password": PASSWORD })),
        ("PATCH", p) if p.starts_with("/api/v1/me/subscriptions/") => Some(json!({ "delivery_mode": "digest" })),
        ("POST", "/api/v1/users") => Some(json!({ "email": format!("new{n}@example.org"), "password": PASSWORD })),
        ("PATCH", p) if p.starts_with("/api/v1/users/") => Some(json!({ "name": "Renamed" })),
        ("POST", p) if p.ends_with("/password") => Some(json!({ "password": PASSWORD })),
        ("POST", p) if p.ends_with("/roles") => {
            Some(json!({ "role": "moderator", "domain": "example.org", "list": "news" }))
        }
        ("DELETE", p) if p.ends_with("/roles") => {
            Some(json!({ "role": "owner", "domain": "example.org", "list": "news" }))
        }
        ("POST", "/api/v1/domains") => Some(json!({ "name": format!("d{n}.example.org") })),
        ("PATCH", "/api/v1/domains/example.org") => Some(json!({ "dkim_selector": format!("s{n}") })),
        ("POST", "/api/v1/domains/example.org/lists") => {
            Some(json!({ "name": format!("l{n}"), "display_name": "L", "owner_email": "admin@example.org" }))
        }
        ("PATCH", "/api/v1/domains/example.org/lists/news") => Some(json!({ "subject_tag": format!("[n{n}]") })),
        // An active member set active stays as it is (re-enabling is for disabled ones).
        ("PATCH", p) if p.starts_with("/api/v1/domains/example.org/lists/news/members/") => {
            Some(json!({ "status": "active" }))
        }
        ("POST", "/api/v1/domains/example.org/lists/news/members") => {
            Some(json!({ "email": format!("new{n}@example.net") }))
        }
        ("POST", "/api/v1/domains/example.org/lists/news/sends") => Some(json!({ "subject": "s", "text": "t" })),
        ("PUT", p) if p.contains("/credentials/") => Some(json!({
            "host": "127.0.0.1", "port": 9, "security": "tls", "username": "news", "password": "probe"
        })),
        ("POST", "/api/v1/webhooks") => {
            Some(json!({ "url": "https://127.0.0.1:9/hook", "events": ["list.suspended"] }))
        }
        // A JSON string stands for a CSV document (see `call`).
        ("POST", "/api/v1/domains/example.org/lists/news/members/import") => {
            return (format!("{path}?consent_evidence=test"), Some(json!(format!("email\ncsv{n}@example.net\n"))));
        }
        // A key may only make keys within its own permissions: the route needs manage, so ask for manage.
        ("POST", "/api/v1/apikeys") => Some(json!({ "name": "k", "scope_kind": "user", "perms": ["manage"] })),
        _ => None,
    };
    (path, body)
}

/// A subscription to `news` waiting for a moderator (the list itself is open): its member id.
fn held_subscription(core: &Services, n: usize) -> i64 {
    let news =
        in_read(&*core.mailing.store, |tx| tx.list_by_name(&domain("example.org"), &list("news"))).unwrap().unwrap();
    let now = core.mailing.clock.now();
    let held = NewMember {
        list_id: news.id,
        email: email(&format!("held{n}@example.net")),
        display_name: None,
        status: MemberStatus::Pending,
        pending_reason: Some(PendingReason::Moderation),
        delivery_mode: DeliveryMode::Regular,
        subscribed_at: None,
        consent_source: None,
        consent_at: None,
        consent_id: None,
    };
    in_write(&*core.mailing.store, |tx| tx.insert_member(&held, now)).unwrap().get()
}

/// A post to `news` held for a moderator (its sender is no member): its id.
fn held_post(core: &Services, n: usize) -> i64 {
    use courrier_core::mailing::inbound;
    let raw =
        format!("From: stranger@example.net\r\nSubject: probe {n}\r\nMessage-ID: <probe{n}@example.net>\r\n\r\nhi\r\n");
    let from = Some("stranger@example.net");
    inbound::receive(&core.mailing, from, "news@example.org", raw.as_bytes(), inbound::Oversize::Refuse).unwrap();
    let news =
        in_read(&*core.mailing.store, |tx| tx.list_by_name(&domain("example.org"), &list("news"))).unwrap().unwrap();
    let page = courrier_core::kernel::Page::parse(Some("1"), Some("0")).unwrap();
    let total = in_read(&*core.mailing.store, |tx| tx.held_posts(news.id, page)).unwrap().total;
    let last = courrier_core::kernel::Page::parse(Some("1"), Some(&(total - 1).to_string())).unwrap();
    in_read(&*core.mailing.store, |tx| tx.held_posts(news.id, last)).unwrap().items[0].id.get()
}

fn success_of(route: &routes::Route) -> u16 {
    // The probe's mail account is a closed port: the test, once allowed, says so (422).
    if route.operation_id == "testCredential" {
        return 422;
    }
    match route.success {
        routes::Success::Data(status, _) | routes::Success::DataEither(status, ..) => status,
        routes::Success::Collection(_) | routes::Success::Raw(..) => 200,
        routes::Success::NoContent => 204,
    }
}

/// Where a route acts, for keys scoped to a domain or a list.
#[derive(PartialEq)]
enum Reach {
    /// Users, keys, the audit log, domain creation: a scoped key does not reach them (404).
    Installation,
    /// Summaries over what the caller sees (dashboard, queue, domain listing), and what acts within
    /// the key's own scope (an unfiltered webhook).
    Summary,
    DomainRead,
    /// A list-scoped key reads its domain and changes nothing of it (403).
    DomainWrite,
    List,
}

fn reach_of(route: &routes::Route) -> Reach {
    let p = route.path;
    if p.starts_with("/api/v1/domains/{domain}/lists/{list}") {
        Reach::List
    } else if p.starts_with("/api/v1/domains/{domain}") {
        if route.method == routes::Method::GET { Reach::DomainRead } else { Reach::DomainWrite }
    } else if p == "/api/v1/dashboard"
        || p == "/api/v1/system/queue"
        || ((p == "/api/v1/domains" || p == "/api/v1/webhooks") && route.method == routes::Method::GET)
        // A webhook created without a domain or list follows the creator's scope (decisions.md):
        // a scoped key's webhook is filtered to the key's domain or list.
        || (p == "/api/v1/webhooks" && route.method == routes::Method::POST)
    {
        Reach::Summary
    } else {
        Reach::Installation
    }
}

/// A kind of credential: its name, its headers, and the status it should get on a route.
type CredentialKind = (String, Vec<(&'static str, String)>, Box<dyn Fn(&routes::Route) -> u16>);

/// Every `/api/v1` route x every kind of credential -> the status the contract names.
#[test]
fn authorization_matrix() {
    // Webhooks may reach loopback (their pings go to a closed port); the DNS check asks a closed
    // port too, so it answers at once (with errors) instead of waiting on an unreachable resolver.
    let dns = format!("127.0.0.1:{}", courrier_tests::harness::free_port());
    // Mail-account credentials are sealed by a keyring (without one their writes are 503).
    let keys = tempfile::tempdir().unwrap();
    let keyring = keys.path().join("keyring");
    std::fs::write(&keyring, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").unwrap();
    let keyring = keyring.display().to_string();
    let app = TestApp::spawn_with(&[
        ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ("COURRIER_DNS_SERVER", &dns),
        ("COURRIER_KEYRING", &keyring),
    ]);
    let core = app.core.clone();
    let admin = make_user(&core, "admin@example.org", &[Role::SiteAdmin]);
    let ex = domain("example.org");
    make_list(&core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let session = login(&app, "admin@example.org");
    let mut kinds: Vec<CredentialKind> = Vec::new();
    kinds.push(("no credential".into(), vec![], Box::new(|_| 401)));
    for perm in Perm::ALL {
        let key = make_key(&core, &admin, KeyScope::User, &[perm], None);
        kinds.push((
            format!("user key with {}", perm.as_str()),
            vec![bearer(&key)],
            Box::new(move |r: &routes::Route| match r.access {
                Access::Perm(need) if need != perm => 403,
                _ => success_of(r),
            }),
        ));
    }
    let domain_key = make_key(&core, &admin, KeyScope::Domain(ex.clone()), &Perm::ALL, None);
    kinds.push((
        "domain key".into(),
        vec![("x-api-key", domain_key.clone())],
        Box::new(|r: &routes::Route| match reach_of(r) {
            Reach::Installation if matches!(r.access, Access::Perm(_)) => 404,
            _ => success_of(r),
        }),
    ));
    let list_key = make_key(&core, &admin, KeyScope::List(ex.clone(), list("news")), &Perm::ALL, None);
    kinds.push((
        "list key".into(),
        vec![bearer(&list_key)],
        Box::new(|r: &routes::Route| match reach_of(r) {
            Reach::Installation if matches!(r.access, Access::Perm(_)) => 404,
            Reach::DomainWrite => 403,
            _ => success_of(r),
        }),
    ));
    kinds.push((
        "session without CSRF token".into(),
        vec![("cookie", session.cookie.clone())],
        Box::new(|r: &routes::Route| if r.method == http_method("GET") { success_of(r) } else { 403 }),
    ));
    kinds.push((
        "session with CSRF token".into(),
        vec![("cookie", session.cookie.clone()), ("x-csrf-token", session.csrf.clone())],
        Box::new(success_of),
    ));
    // The subscriber's cookie opens the `/me` routes and nothing else; no administration
    // credential opens them (every kind above gets 401 there: see the loop).
    let sub = crate::subscribers::subscriber_session(&app, PROBE_SUBSCRIBER);
    kinds.push((
        "subscriber session without CSRF token".into(),
        vec![("cookie", sub.cookie.clone())],
        Box::new(|r: &routes::Route| match r.access {
            Access::Subscriber if r.method == http_method("GET") => success_of(r),
            Access::Subscriber => 403,
            _ => 401,
        }),
    ));
    kinds.push((
        "subscriber session with CSRF token".into(),
        vec![("cookie", sub.cookie.clone()), ("x-csrf-token", sub.csrf.clone())],
        Box::new(|r: &routes::Route| if r.access == Access::Subscriber { success_of(r) } else { 401 }),
    ));
    kinds.push((
        "subscriber session with an API key".into(),
        vec![("cookie", sub.cookie.clone()), ("x-csrf-token", sub.csrf.clone()), bearer(&domain_key)],
        Box::new(|r: &routes::Route| match reach_of(r) {
            _ if r.access == Access::Subscriber => 401,
            Reach::Installation if matches!(r.access, Access::Perm(_)) => 404,
            _ => success_of(r),
        }),
    ));
    let mut n = 0;
    let mut checked = 0;
    for route in routes::all().filter(|r| r.api == Api::Mailing && r.access != Access::Public) {
        for (kind, headers, expect) in &kinds {
            n += 1;
            let (path, body) = probe(&app, &admin, route.method.as_str(), route.path, n);
            let resp = call(&app, route.method.as_str(), &path, headers, body.as_ref());
            let expected =
                if route.access == Access::Subscriber && !kind.starts_with("subscriber") { 401 } else { expect(route) };
            assert_eq!(resp.status, expected, "{} {} with {kind}: {}", route.method, path, resp.body);
            if resp.status == 403 && kind.contains("session without") {
                assert_eq!(resp.json()["error"]["code"], "csrf_failed");
            }
            checked += 1;
        }
    }
    assert!(checked >= 13 * 9, "the matrix shrank: {checked} cells");
}

fn http_method(m: &str) -> ureq::http::Method {
    ureq::http::Method::from_bytes(m.as_bytes()).unwrap()
}

#[test]
fn every_401_is_the_same_body_whatever_the_reason() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let user = make_user(&core, "u@example.org", &[]);
    let revoked = make_key(&core, &user, KeyScope::User, &[Perm::Read], None);
    let id = keys::list(&core.access, &Principal::operator(), Default::default()).unwrap().items[0].id;
    keys::revoke(&core.access, &Principal::operator(), &RequestCtx::cli(), id).unwrap();
    let disabled = make_user(&core, "gone@example.org", &[]);
    let disabled_key = make_key(&core, &disabled, KeyScope::User, &[Perm::Read], None);
    let patch =
        users::UserPatch { status: Some(courrier_core::access::model::UserStatus::Disabled), ..Default::default() };
    users::update(&core.access, &Principal::operator(), &RequestCtx::cli(), disabled.id, patch).unwrap();
    let good = make_key(&core, &user, KeyScope::User, &[Perm::Read], None);
    let wrong_secret = format!("{}{}", &good[..good.len() - 1], if good.ends_with('0') { '1' } else { '0' });
    let headers: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("authorization", "Bearer nonsense".into())],
        vec![("authorization", "Basic dXNlcjpwYXNz".into())],
        vec![bearer(&format!("svc_{}_{}", "0".repeat(16), "0".repeat(64)))],
        vec![bearer(&revoked)],
        vec![bearer(&disabled_key)],
        vec![bearer(&wrong_secret)],
        vec![("cookie", "svc_session=forged".into())],
    ];
    let bodies: Vec<Value> = headers
        .iter()
        .map(|h| {
            let resp = call(&app, "GET", "/api/v1/system/version", h, None);
            let mut body = resp.expect_error(401, "unauthenticated");
            body["meta"]["request_id"] = Value::Null;
            body
        })
        .collect();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:#?}");
    assert_eq!(call(&app, "GET", "/api/v1/system/version", &[bearer(&good)], None).status, 200);
}

#[test]
fn a_key_over_its_quota_gets_429_with_retry_after() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let user = make_user(&core, "u@example.org", &[]);
    let key = make_key(&core, &user, KeyScope::User, &[Perm::Read], Some(3));
    let statuses: Vec<u16> =
        (0..5).map(|_| call(&app, "GET", "/api/v1/system/version", &[bearer(&key)], None).status).collect();
    // Three in this minute, unless the minute turned during the loop (then a fourth passes).
    assert!(statuses[..3].iter().all(|s| *s == 200), "{statuses:?}");
    let refused = call(&app, "GET", "/api/v1/system/version", &[bearer(&key)], None);
    if refused.status == 429 {
        refused.expect_error(429, "rate_limited");
        let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
    } else {
        assert!(statuses.contains(&429), "no 429 at all: {statuses:?}");
    }
    let other = make_key(&core, &user, KeyScope::User, &[Perm::Read], Some(3));
    assert_eq!(call(&app, "GET", "/api/v1/system/version", &[bearer(&other)], None).status, 200, "quotas are per key");
}

#[test]
fn a_key_is_never_wider_than_its_user_nor_than_the_key_that_makes_it() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let owner = make_user(&core, "owner@example.org", &[Role::Owner(domain("example.org"), list("news"))]);
    let session = login(&app, "owner@example.org");
    let s = vec![("cookie", session.cookie.clone()), ("x-csrf-token", session.csrf.clone())];
    let create = |body: Value| call(&app, "POST", "/api/v1/apikeys", &s, Some(&body));
    let ok = create(
        json!({ "name": "n", "scope_kind": "list", "domain": "example.org", "list": "news", "perms": ["send"] }),
    );
    assert_eq!(ok.status, 201, "{}", ok.body);
    let resp = create(
        json!({ "name": "n", "scope_kind": "list", "domain": "example.org", "list": "jobs", "perms": ["read"] }),
    );
    let body = resp.expect_error(403, "forbidden");
    assert!(body["error"]["message"].as_str().unwrap().contains("wider than its user"), "{body}");
    create(json!({ "name": "n", "scope_kind": "domain", "domain": "other.org", "perms": ["read"] }))
        .expect_error(403, "forbidden");
    // A key with manage and read makes keys with at most manage and read.
    let manager = make_key(&core, &owner, KeyScope::User, &[Perm::Read, Perm::Manage], None);
    let resp = call(
        &app,
        "POST",
        "/api/v1/apikeys",
        &[bearer(&manager)],
        Some(&json!({ "name": "n", "scope_kind": "user", "perms": ["send"] })),
    );
    resp.expect_error(403, "forbidden");
    let resp = call(
        &app,
        "POST",
        "/api/v1/apikeys",
        &[bearer(&manager)],
        Some(&json!({ "name": "n", "scope_kind": "user", "perms": ["read"] })),
    );
    assert_eq!(resp.status, 201, "{}", resp.body);
    // Bad requests are 422 with the reason.
    for bad in [
        json!({ "name": "n", "scope_kind": "galaxy", "perms": ["read"] }),
        json!({ "name": "n", "scope_kind": "user", "perms": ["fly"] }),
        json!({ "name": "n", "scope_kind": "user", "perms": [] }),
        json!({ "name": "n", "scope_kind": "domain", "perms": ["read"] }),
        json!({ "name": "", "scope_kind": "user", "perms": ["read"] }),
        json!({ "name": "n", "scope_kind": "user", "perms": ["read"], "rate_limit_per_min": 0 }),
        json!({ "name": "n", "scope_kind": "user", "perms": ["read"], "expires_at": "2001-01-01" }),
        json!({ "name": "n", "scope_kind": "user", "perms": ["read"], "colour": "blue" }),
    ] {
        create(bad).expect_error(422, "validation_failed");
    }
}

/// The id of `user`'s key, as `p` sees the keys.
fn key_of(core: &Services, p: &Principal, user: UserId) -> KeyId {
    keys::list(&core.access, p, Default::default()).unwrap().items.iter().find(|k| k.user_id == user).unwrap().id
}

#[test]
fn revocations_and_role_changes_take_effect_on_the_next_request() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let ex = domain("example.org");
    let admin = make_user(&core, "da@example.org", &[Role::DomainAdmin(ex.clone())]);
    let member = make_user(&core, "m@example.org", &[Role::Owner(ex.clone(), list("news"))]);
    let key = make_key(&core, &admin, KeyScope::User, &[Perm::Read, Perm::Manage], None);
    let session = login(&app, "da@example.org");
    let path = format!("/api/v1/users/{}", member.id);
    assert_eq!(call(&app, "GET", &path, &[bearer(&key)], None).status, 200);
    assert_eq!(call(&app, "GET", &path, &[("cookie", session.cookie.clone())], None).status, 200);
    roles::revoke(&core.access, &p, &ctx, admin.id, Role::DomainAdmin(ex.clone())).unwrap();
    call(&app, "GET", &path, &[bearer(&key)], None).expect_error(404, "not_found");
    call(&app, "GET", &path, &[("cookie", session.cookie.clone())], None).expect_error(404, "not_found");
    roles::grant(&core.access, &p, &ctx, admin.id, Role::DomainAdmin(ex)).unwrap();
    assert_eq!(call(&app, "GET", &path, &[bearer(&key)], None).status, 200);
    // Revoking the key through the API, twice: the second is a no-op, not an error.
    let id = key_of(&core, &p, admin.id);
    let s = vec![("cookie", session.cookie.clone()), ("x-csrf-token", session.csrf.clone())];
    assert_eq!(call(&app, "DELETE", &format!("/api/v1/apikeys/{id}"), &s, None).status, 204);
    assert_eq!(call(&app, "DELETE", &format!("/api/v1/apikeys/{id}"), &s, None).status, 204);
    call(&app, "GET", &path, &[bearer(&key)], None).expect_error(401, "unauthenticated");
    call(&app, "DELETE", "/api/v1/apikeys/999999", &s, None).expect_error(404, "not_found");
    // Disabling the account closes its session at once.
    let site = make_user(&core, "site@example.org", &[Role::SiteAdmin]);
    let site_key = make_key(&core, &site, KeyScope::User, &[Perm::Manage], None);
    let patch = json!({ "status": "disabled" });
    let resp = call(&app, "PATCH", &format!("/api/v1/users/{}", admin.id), &[bearer(&site_key)], Some(&patch));
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.json()["data"]["status"], "disabled");
    call(&app, "GET", "/api/v1/auth/session", &[("cookie", session.cookie.clone())], None)
        .expect_error(401, "unauthenticated");
}

#[test]
fn sessions_need_their_csrf_token_to_change_anything_and_end_at_logout() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    make_user(&core, "admin@example.org", &[Role::SiteAdmin]);
    let s = login(&app, "admin@example.org");
    let info = call(&app, "GET", "/api/v1/auth/session", &[("cookie", s.cookie.clone())], None).json();
    assert_eq!(info["data"]["csrf_token"], s.csrf.as_str());
    assert_eq!(info["data"]["via"], "session");
    assert_eq!(info["data"]["capabilities"]["manage_users"], true);
    let body = json!({ "email": "x@example.org" });
    call(&app, "POST", "/api/v1/users", &[("cookie", s.cookie.clone())], Some(&body)).expect_error(403, "csrf_failed");
    call(&app, "POST", "/api/v1/users", &[("cookie", s.cookie.clone()), ("x-csrf-token", "0".repeat(64))], Some(&body))
        .expect_error(403, "csrf_failed");
    let ok = call(
        &app,
        "POST",
        "/api/v1/users",
        &[("cookie", s.cookie.clone()), ("x-csrf-token", s.csrf.clone())],
        Some(&body),
    );
    assert_eq!(ok.status, 201, "{}", ok.body);
    assert_eq!(ok.json()["data"]["invitation"], "failed", "no relay listens on the default smtp://127.0.0.1:25 here");
    let out = call(&app, "POST", "/api/v1/auth/logout", &[("cookie", s.cookie.clone())], None);
    assert_eq!(out.status, 204);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    call(&app, "GET", "/api/v1/auth/session", &[("cookie", s.cookie)], None).expect_error(401, "unauthenticated");
}

#[test]
fn logins_are_refused_uniformly_and_throttled() {
    let app = TestApp::spawn();
    make_user(&app.core, "admin@example.org", &[]);
    let attempt = |e: &str, p: &str| app.client.post_json("/api/v1/auth/login", &json!({ "email": e, "password": p }));
    let unknown = attempt("nobody@example.org", PASSWORD).expect_error(401, "unauthenticated");
    let wrong = attempt("admin@example.org", "wrong password!!").expect_error(401, "unauthenticated");
    assert_eq!(unknown["error"], wrong["error"]);
    // One failure so far on this address (the other was on another): four more reach the limit of 5.
    for _ in 0..4 {
        attempt("admin@example.org", "wrong password!!").expect_error(401, "unauthenticated");
    }
    let throttled = attempt("admin@example.org", PASSWORD);
    throttled.expect_error(429, "rate_limited");
    assert!(throttled.header("retry-after").is_some());
    app.client
        .post_json("/api/v1/auth/login", &json!({ "email": "admin@example.org" }))
        .expect_error(422, "validation_failed");
    app.client
        .request("POST", "/api/v1/auth/login", &[("content-type", "application/json")], Some(b"{"))
        .expect_error(400, "malformed_body");
}

#[test]
fn an_invitation_mails_a_single_use_set_password_link() {
    let sink = SmtpSink::start();
    let app = TestApp::spawn_with(&[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "lists@example.org")]);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let key = make_key(&app.core, &admin, KeyScope::User, &[Perm::Manage, Perm::Read], None);
    let resp = call(
        &app,
        "POST",
        "/api/v1/users",
        &[bearer(&key)],
        Some(&json!({ "email": "Anna@Example.ORG", "firstname": "Anna" })),
    );
    assert_eq!(resp.status, 201, "{}", resp.body);
    let created = resp.json()["data"].clone();
    assert_eq!((created["email"].as_str(), created["invitation"].as_str()), (Some("Anna@example.org"), Some("sent")));
    assert_eq!(created["has_password"], false);
    call(&app, "POST", "/api/v1/users", &[bearer(&key)], Some(&json!({ "email": "Anna@example.org" })))
        .expect_error(409, "conflict");
    let mail = sink.wait_for(1, Duration::from_secs(10)).remove(0);
    assert!(mail.contains("To: Anna@example.org"), "{mail}");
    let unfolded = mail.replace("=\r\n", "").replace("=\n", "");
    let start = unfolded.find("/p/password/").expect("a link in the mail");
    let token: String =
        unfolded[start + 12..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
    assert_eq!(token.len(), 43, "{unfolded}");
    let page = app.get(&format!("/p/password/{token}"));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Anna@example.org") && page.body.contains("<form"), "{}", page.body);
    let form = |pw: &str, again: &str| {
        let body = format!("password={}&password_confirmation={}", pw.replace(' ', "+"), again.replace(' ', "+"));
        app.client.request(
            "POST",
            &format!("/p/password/{token}"),
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(body.as_bytes()),
        )
    };
    assert_eq!(form("short", "short").status, 422);
    assert_eq!(form(PASSWORD, "something else entirely").status, 422);
    let done = form(PASSWORD, PASSWORD);
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(form(PASSWORD, PASSWORD).status, 404, "the link works once");
    assert_eq!(app.get(&format!("/p/password/{token}")).status, 404);
    assert_eq!(app.get("/p/password/forged-token").status, 404);
    // The address is the account whatever its case.
    login(&app, "anna@example.org");
    login(&app, "ANNA@EXAMPLE.ORG");
}

#[test]
fn scoping_users_and_the_audit_log() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let ex = domain("example.org");
    let da = make_user(&core, "da@example.org", &[Role::DomainAdmin(ex.clone())]);
    let inside = make_user(&core, "in@example.org", &[Role::Owner(ex.clone(), list("news"))]);
    let outside = make_user(&core, "out@other.org", &[Role::Owner(domain("other.org"), list("news"))]);
    let both = make_user(
        &core,
        "both@example.org",
        &[Role::Owner(ex.clone(), list("jobs")), Role::Moderator(domain("other.org"), list("x"))],
    );
    let key = make_key(&core, &da, KeyScope::User, &[Perm::Read, Perm::Manage], None);
    let listed = call(&app, "GET", "/api/v1/users?limit=10", &[bearer(&key)], None).json();
    let ids: Vec<i64> = listed["data"].as_array().unwrap().iter().map(|u| u["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![da.id.get(), inside.id.get(), both.id.get()]);
    assert_eq!(listed["meta"]["total"], 3);
    call(&app, "GET", &format!("/api/v1/users/{}", outside.id), &[bearer(&key)], None).expect_error(404, "not_found");
    let patch = json!({ "status": "disabled" });
    call(&app, "PATCH", &format!("/api/v1/users/{}", both.id), &[bearer(&key)], Some(&patch))
        .expect_error(403, "forbidden");
    assert_eq!(call(&app, "PATCH", &format!("/api/v1/users/{}", inside.id), &[bearer(&key)], Some(&patch)).status, 200);
    call(&app, "PATCH", &format!("/api/v1/users/{}", da.id), &[bearer(&key)], Some(&patch))
        .expect_error(403, "forbidden");
    let grant = json!({ "role": "site_admin" });
    call(&app, "POST", &format!("/api/v1/users/{}/roles", inside.id), &[bearer(&key)], Some(&grant))
        .expect_error(403, "forbidden");
    let grant = json!({ "role": "owner", "domain": "other.org", "list": "news" });
    call(&app, "POST", &format!("/api/v1/users/{}/roles", inside.id), &[bearer(&key)], Some(&grant))
        .expect_error(404, "not_found");
    for bad in ["?limit=0", "?limit=501", "?offset=-1", "?limt=5", "?limit=5&limit=6"] {
        call(&app, "GET", &format!("/api/v1/users{bad}"), &[bearer(&key)], None).expect_error(
            422,
            if bad.contains("offset") || bad.contains("=0") || bad.contains("501") {
                "invalid_pagination"
            } else {
                "validation_failed"
            },
        );
    }
    // The largest offset SQL takes is a valid, empty page; one more is refused.
    let far = call(&app, "GET", "/api/v1/users?offset=9223372036854775807", &[bearer(&key)], None).json();
    assert_eq!((far["data"].as_array().map(Vec::len), far["meta"]["total"].as_u64()), (Some(0), Some(3)));
    call(&app, "GET", "/api/v1/users?offset=9223372036854775808", &[bearer(&key)], None)
        .expect_error(422, "invalid_pagination");
    // The refusals above are audited; an unauthenticated flood is not.
    for _ in 0..5 {
        call(&app, "GET", "/api/v1/users", &[bearer("svc_bogus")], None);
    }
    let site = make_user(&core, "site@example.org", &[Role::SiteAdmin]);
    let site_key = make_key(&core, &site, KeyScope::User, &[Perm::Read], None);
    let audit = call(&app, "GET", "/api/v1/audit?limit=500", &[bearer(&site_key)], None).json();
    let entries = audit["data"].as_array().unwrap();
    let outcomes: Vec<(&str, &str)> =
        entries.iter().map(|e| (e["action"].as_str().unwrap(), e["outcome"].as_str().unwrap())).collect();
    assert!(outcomes.contains(&("user.read", "not_found")), "{outcomes:?}");
    assert!(outcomes.contains(&("user.update", "forbidden")), "{outcomes:?}");
    assert!(outcomes.contains(&("role.grant", "forbidden")), "{outcomes:?}");
    assert!(outcomes.contains(&("user.update", "done")), "{outcomes:?}");
    assert!(entries.iter().all(|e| e["request_id"].as_str().is_some_and(|r| !r.is_empty())));
    let mine = call(&app, "GET", "/api/v1/audit", &[bearer(&key)], None).json();
    assert!(mine["data"].as_array().unwrap().iter().all(|e| e["actor_user_id"] == da.id.get()), "{mine}");
    call(&app, "GET", "/api/v1/audit?since=yesterday", &[bearer(&site_key)], None)
        .expect_error(422, "validation_failed");
    let filtered = call(&app, "GET", "/api/v1/audit?action=role.grant&limit=1", &[bearer(&site_key)], None).json();
    assert_eq!(filtered["meta"]["limit"], 1);
    assert!(filtered["meta"]["total"].as_u64().unwrap() >= 2);
}

#[test]
fn secrets_never_come_back_nor_reach_the_log() {
    let app = courrier_tests::harness::ProcessApp::spawn(&[("COURRIER_LOG", "debug"), ("COURRIER_LOG_FORMAT", "json")]);
    let cli = |args: &[&str], stdin: Option<&str>| {
        let (status, out, err) = run_cli_in(app.dir.path(), args, &[("COURRIER_LOG", "debug")], stdin);
        assert!(status.success(), "{err}");
        (out, err)
    };
    let (_, log1) =
        cli(&["user", "create", "--email", "admin@example.org", "--password-stdin", "--site-admin"], Some(PASSWORD));
    let (secret, log2) = cli(
        &[
            "create-api-key",
            "--email",
            "admin@example.org",
            "--scope",
            "user",
            "--perms",
            "read,manage",
            "--name",
            "ops",
        ],
        None,
    );
    let secret = secret.trim().to_owned();
    assert!(secret.starts_with("svc_"), "{secret}");
    let (json_out, _) = cli(
        &[
            "--json",
            "create-api-key",
            "--email",
            "admin@example.org",
            "--scope",
            "user",
            "--perms",
            "read",
            "--name",
            "j",
        ],
        None,
    );
    let created: Value = serde_json::from_str(&json_out).unwrap();
    assert!(created["id"].is_i64() && created["prefix"].is_string() && created["secret"].is_string());
    let c = &app.client;
    let login = c.post_json("/api/v1/auth/login", &json!({ "email": "admin@example.org", "password": PASSWORD }));
    let cookie = login.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    let token = cookie.trim_start_matches("svc_session=").to_owned();
    let auth = [("authorization", format!("Bearer {secret}"))];
    let h: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let listed = c.request("GET", "/api/v1/apikeys", &h, None);
    assert_eq!(listed.status, 200);
    let new_key = c.request(
        "POST",
        "/api/v1/apikeys",
        &[h[0], ("content-type", "application/json")],
        Some(br#"{"name":"x","scope_kind":"user","perms":["read"]}"#),
    );
    let new_secret = new_key.json()["data"]["secret"].as_str().unwrap().to_owned();
    let pw = c.request(
        "POST",
        "/api/v1/users/1/password",
        &[h[0], ("content-type", "application/json")],
        Some(br#"{"password":"another long passphrase"}"#),
    );
    assert_eq!(pw.status, 204);
    let user = c.request("GET", "/api/v1/users/1", &h, None);
    let keys_after = c.request("GET", "/api/v1/apikeys", &h, None);
    app.signal("TERM");
    let (_, server_log) = app.wait(Duration::from_secs(10));
    let secret_part = |s: &str| s.rsplit('_').next().unwrap().to_owned();
    for (name, text) in [
        ("key listing", listed.body.as_str()),
        ("key listing after", keys_after.body.as_str()),
        ("user", user.body.as_str()),
        ("server log", server_log.as_str()),
        ("cli log", &format!("{log1}{log2}")),
    ] {
        for (what, s) in [
            ("first key", secret_part(&secret)),
            ("second key", secret_part(&new_secret)),
            ("session", token.clone()),
            ("password", PASSWORD.to_owned()),
            ("new password", "another long passphrase".to_owned()),
        ] {
            assert!(!text.contains(&s), "the {what} secret appears in the {name}");
        }
    }
    assert!(server_log.contains("request_id"), "the log was captured");
}

#[test]
fn the_last_site_administrator_keeps_the_role() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let first = make_user(&core, "first@example.org", &[Role::SiteAdmin]);
    let key = make_key(&core, &first, KeyScope::User, &[Perm::Manage, Perm::Read], None);
    let revoke = json!({ "role": "site_admin" });
    let path = format!("/api/v1/users/{}/roles", first.id);
    call(&app, "DELETE", &path, &[bearer(&key)], Some(&revoke)).expect_error(409, "conflict");
    let second = make_user(&core, "second@example.org", &[Role::SiteAdmin]);
    assert_eq!(call(&app, "DELETE", &path, &[bearer(&key)], Some(&revoke)).status, 204, "another one remains");
    let second_key = make_key(&core, &second, KeyScope::User, &[Perm::Manage, Perm::Read], None);
    let path = format!("/api/v1/users/{}/roles", second.id);
    call(&app, "DELETE", &path, &[bearer(&second_key)], Some(&revoke)).expect_error(409, "conflict");
}

/// A key's authentication is cached in the server; a role granted by the CLI, another process,
/// still takes effect on the very next request.
#[test]
fn changes_made_by_another_process_reach_cached_keys_at_once() {
    let app = courrier_tests::harness::ProcessApp::spawn(&[("COURRIER_LOG", "warn")]);
    let cli = |args: &[&str], stdin: &str| {
        let (status, out, err) = run_cli_in(app.dir.path(), args, &[], Some(stdin));
        assert!(status.success(), "{err}");
        out.trim().to_owned()
    };
    cli(&["user", "create", "--email", "a@example.org", "--password-stdin"], PASSWORD);
    cli(&["user", "create", "--email", "b@example.org", "--password-stdin"], PASSWORD);
    let key =
        cli(&["create-api-key", "--email", "a@example.org", "--scope", "user", "--perms", "read", "--name", "k"], "");
    let auth = format!("Bearer {key}");
    let total = || {
        let r = app.client.request("GET", "/api/v1/users", &[("authorization", auth.as_str())], None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["meta"]["total"].as_u64().unwrap()
    };
    assert_eq!(total(), 1, "without a role, only itself");
    assert_eq!(total(), 1, "the key is now cached");
    cli(&["role", "grant", "--email", "a@example.org", "--role", "site_admin"], "");
    assert_eq!(total(), 2, "the grant by another process is seen at once");
}

/// A key's secret, once checked, is remembered by its cache entry (no SHA-256 on later requests):
/// another secret under the same prefix is still refused, also right after the right one, and a
/// revocation refuses the remembered secret on the very next request.
#[test]
fn a_remembered_key_secret_admits_only_those_bytes_and_not_past_a_revocation() {
    let app = TestApp::spawn();
    let core = app.core.clone();
    let admin = make_user(&core, "da@example.org", &[Role::SiteAdmin]);
    let key = make_key(&core, &admin, KeyScope::User, &[Perm::Read], None);
    let (prefix, secret) = courrier_core::access::principal::parse_key(&key).expect("a well-formed key");
    // The same prefix, the last hex digit of the secret changed: well-formed, wrong.
    let last = if secret.ends_with('0') { '1' } else { '0' };
    let forged = format!("svc_{prefix}_{}{last}", &secret[..secret.len() - 1]);
    for round in 0..3 {
        assert_eq!(call(&app, "GET", "/api/v1/system/version", &[bearer(&key)], None).status, 200, "round {round}");
        call(&app, "GET", "/api/v1/system/version", &[bearer(&forged)], None).expect_error(401, "unauthenticated");
    }
    assert_eq!(call(&app, "GET", "/api/v1/system/version", &[bearer(&key)], None).status, 200);
    let id = key_of(&core, &Principal::operator(), admin.id);
    keys::revoke(&core.access, &Principal::operator(), &RequestCtx::cli(), id).unwrap();
    call(&app, "GET", "/api/v1/system/version", &[bearer(&key)], None).expect_error(401, "unauthenticated");
}
