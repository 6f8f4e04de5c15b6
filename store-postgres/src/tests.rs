//! The adapter against a real PostgreSQL server (the harness in `test_server.rs`).

use super::test_server::TestServer;
use super::*;
use courrier_core::kernel::{Actor, AuditFilter, NewAuditEntry, Outcome, Page, RequestId, Timestamp};
use courrier_core::storage::{AuditRepo, WriteKey, in_read, suite};
use std::sync::Arc;

fn access(s: &PostgresStore) -> &courrier_core::access::ports::Store {
    s
}

fn fresh(server: &TestServer) -> (String, PostgresStore) {
    let url = server.fresh_database().unwrap();
    let store = PostgresStore::open(&url, 0).unwrap();
    (url, store)
}

fn audit(action: &str) -> NewAuditEntry {
    NewAuditEntry {
        at: Timestamp::from_unix_secs(1),
        request_id: RequestId::internal("t"),
        actor: Actor::default(),
        action: action.into(),
        target: "y".into(),
        outcome: Outcome::Done,
    }
}

/// Another server's connection to the same database.
fn other(url: &str) -> postgres::Client {
    postgres::Client::connect(url, NoTls).unwrap()
}

#[test]
fn passes_the_kernel_and_access_store_suites() {
    let server = TestServer::start().unwrap();
    let store = || Arc::new(fresh(&server).1) as Arc<courrier_core::access::ports::Store>;
    suite::run_all(&store);
    courrier_core::access::store_suite::run_all(&store);
}

#[test]
fn passes_the_ocr_store_suite_and_keeps_documents_bytes() {
    let server = TestServer::start().unwrap();
    courrier_core::ocr::store_suite::run_all(&|| Arc::new(fresh(&server).1) as Arc<courrier_core::ocr::ports::Store>);
    let (_, store) = fresh(&server);
    courrier_core::ocr::store_suite::blob_store_keeps_content_by_its_hash(&store.blobs());
}

/// A document stored through one server is read through another: the bytes are in the database.
#[test]
fn a_document_stored_on_one_server_is_read_on_the_other() {
    use courrier_core::ocr::blobs::BlobStore;
    let server = TestServer::start().unwrap();
    let (url, one) = fresh(&server);
    let two = PostgresStore::open(&url, 0).unwrap();
    // The upload limit's size: BYTEA holds it in one row.
    let bytes: Vec<u8> = (0..20 * 1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
    let id = one.blobs().put(&bytes).unwrap();
    assert_eq!(two.blobs().get(&id).unwrap(), bytes);
    two.blobs().delete(&id).unwrap();
    assert!(one.blobs().get(&id).is_err());
}

#[test]
fn passes_the_mailing_store_suite() {
    let server = TestServer::start().unwrap();
    courrier_core::mailing::store_suite::run_all(&|| {
        Arc::new(fresh(&server).1) as Arc<courrier_core::mailing::ports::Store>
    });
}

#[test]
fn migrates_once_names_the_backend_and_refuses_a_newer_schema() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    assert!(store.backend().starts_with("postgresql 1"), "{}", store.backend());
    assert!(store.backend().contains("fsync=on"), "{}", store.backend());
    suite::commit_keeps_change_audit_and_event_together(access(&store));
    drop(store);
    // A second server opening the same database keeps the data and applies nothing again.
    let store = PostgresStore::open(&url, 1).unwrap();
    let total = in_read(access(&store), |tx| tx.list_audit(&AuditFilter::default(), Page::default())).unwrap().total;
    assert_eq!(total, 1);
    let applied: i64 = other(&url).query_one("SELECT COUNT(*) FROM schema_migrations", &[]).unwrap().get(0);
    assert_eq!(applied, migrations::known());

    other(&url).execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)", &[]).unwrap();
    match PostgresStore::open(&url, 0) {
        Err(StoreError::SchemaTooNew { found: 999, known }) => assert_eq!(known, migrations::latest()),
        other => panic!("expected SchemaTooNew, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn servers_starting_together_migrate_once() {
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PostgresStore::open(&url, 0).map(drop))
        })
        .collect();
    for o in opened {
        o.join().unwrap().unwrap();
    }
    let applied: i64 = other(&url).query_one("SELECT COUNT(*) FROM schema_migrations", &[]).unwrap().get(0);
    assert_eq!(applied, migrations::known());
}

#[test]
fn an_unreachable_server_is_a_clear_error_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://courrier:s3cret@127.0.0.1:{port}/courrier");
    let err = PostgresStore::open(&url, 0).map(|_| ()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")) && !text.contains("s3cret"), "{text}");
}

#[test]
fn a_writer_waits_for_another_server_s_writer_and_sees_its_commit() {
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let (one, two) = (Arc::new(PostgresStore::open(&url, 0).unwrap()), Arc::new(PostgresStore::open(&url, 0).unwrap()));
    let mut first = access(&one).write().unwrap();
    first.append_audit(&audit("first")).unwrap();
    let second = {
        let two = Arc::clone(&two);
        std::thread::spawn(move || {
            // Its write transaction begins only once the first one has committed: it sees it.
            let mut tx = access(&two).write().unwrap();
            let seen = tx.list_audit(&AuditFilter::default(), Page::default()).unwrap().total;
            tx.append_audit(&audit("second")).unwrap();
            tx.commit().unwrap();
            seen
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!second.is_finished(), "the second writer waits for the write lock");
    first.commit().unwrap();
    assert_eq!(second.join().unwrap(), 1, "the second writer saw the first one's commit");
}

#[test]
fn a_writer_held_past_the_busy_time_out_is_busy_not_an_error() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    let mut holder = other(&url);
    holder.batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})")).unwrap();
    assert_eq!(access(&store).write().err(), Some(StoreError::Busy));
    holder.batch_execute("ROLLBACK").unwrap();
    // The connection that waited went back to the pool usable.
    suite::commit_keeps_change_audit_and_event_together(access(&store));
}

#[test]
fn a_failed_statement_makes_commit_fail_instead_of_rolling_back_silently() {
    let server = TestServer::start().unwrap();
    let (_, store) = fresh(&server);
    let mut tx = store.begin(Some(Write::All)).unwrap();
    tx.append_audit(&audit("kept?")).unwrap();
    // A statement that may not fail by a uniqueness rule runs without a savepoint of its own:
    // its failure aborts the whole transaction in PostgreSQL.
    let refused = tx.execute("UPDATE audit_log SET outcome = 'maybe'", &[]);
    assert!(matches!(refused, Err(StoreError::Backend(_))), "{refused:?}");
    assert!(matches!(tx.commit(), Err(StoreError::Backend(_))));
    let total = in_read(access(&store), |tx| tx.list_audit(&AuditFilter::default(), Page::default())).unwrap().total;
    assert_eq!(total, 0);
}

#[test]
fn a_read_is_one_snapshot() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    let mut read = access(&store).read().unwrap();
    assert_eq!(read.list_audit(&AuditFilter::default(), Page::default()).unwrap().total, 0);
    suite::commit_keeps_change_audit_and_event_together(access(&PostgresStore::open(&url, 0).unwrap()));
    assert_eq!(read.list_audit(&AuditFilter::default(), Page::default()).unwrap().total, 0, "same snapshot");
    assert!(read.append_audit(&audit("x")).is_err(), "a read transaction does not write");
}

#[test]
fn the_access_marker_moves_on_access_changes_only_from_any_server() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    let mut other = other(&url);
    let a0 = store.access_marker().unwrap();
    other.execute("DELETE FROM audit_log", &[]).unwrap();
    suite::commit_keeps_change_audit_and_event_together(access(&store));
    assert_eq!(store.access_marker().unwrap(), a0, "audit and events are not access");
    other
        .execute(
            "INSERT INTO users (email, email_key, status, created_at, updated_at)
             VALUES ('a@example.org', 'a@example.org', 'active', 0, 0)",
            &[],
        )
        .unwrap();
    let a1 = store.access_marker().unwrap();
    assert!(a1 > a0, "a new user");
    other.execute("INSERT INTO roles (user_id, kind, granted_at) SELECT id, 'site_admin', 0 FROM users", &[]).unwrap();
    let a2 = store.access_marker().unwrap();
    assert!(a2 > a1, "a role");
    other
        .execute(
            "INSERT INTO api_keys (user_id, name, prefix, secret_hash, scope_kind, perms, rate_limit_per_min, created_at)
             SELECT id, 'k', 'p', 'h', 'user', 1, 10, 0 FROM users",
            &[],
        )
        .unwrap();
    let a3 = store.access_marker().unwrap();
    assert!(a3 > a2, "a key");
    other.execute("UPDATE api_keys SET revoked_at = 1", &[]).unwrap();
    assert!(store.access_marker().unwrap() > a3, "a revocation");
    let a4 = store.access_marker().unwrap();
    other.execute("DELETE FROM roles", &[]).unwrap();
    assert!(store.access_marker().unwrap() > a4, "a role taken away");
}

#[test]
fn the_change_marker_moves_on_a_commit_from_any_server() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    let m0 = store.change_marker().unwrap();
    other(&url)
        .execute("INSERT INTO outbox_events (public_id, name, at, data) VALUES ('e', 'x', 0, '{}')", &[])
        .unwrap();
    assert_ne!(store.change_marker().unwrap(), m0);
}

#[test]
fn a_role_is_held_on_a_domain_or_list_that_exists() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    other(&url)
        .batch_execute(
            "INSERT INTO domains (name, status, default_subscription_policy, created_at, updated_at)
             VALUES ('example.org', 'active', 'confirm', 0, 0);
             INSERT INTO lists (domain_id, name, display_name, kind, status, subscription_policy, posting_policy,
                                reply_to, bounce_disable_score, digest_frequency, max_message_kb, created_at, updated_at)
             SELECT id, 'news', 'News', 'announce', 'active', 'confirm', 'owners', 'list', 5, 'daily', 1024, 0, 0
             FROM domains",
        )
        .unwrap();
    use courrier_core::access::model::Role;
    use courrier_core::kernel::{DomainName, ListName};
    let d = DomainName::parse("example.org").unwrap();
    let exists = |role: Role| in_read(access(&store), |tx| tx.role_scope_exists(&role)).unwrap();
    assert!(exists(Role::DomainAdmin(d.clone())));
    assert!(exists(Role::Owner(d.clone(), ListName::parse("news").unwrap())));
    assert!(!exists(Role::Moderator(d, ListName::parse("jobs").unwrap())));
}

#[test]
fn the_test_server_is_removed_on_drop() {
    let server = TestServer::start().unwrap();
    let (dir, port) = (server.socket_dir().to_owned(), server.port());
    drop(server);
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "the server still listens on {port}");
}

/// Two servers on one database, each with its own key cache: a key one of them revoked is refused
/// by the other at its next request, its cached entry no longer trusted (issue 25).
#[test]
fn a_key_revoked_on_one_server_is_refused_by_the_other_at_its_next_request() {
    use courrier_core::access::keys::{self, NewKey};
    use courrier_core::access::principal::{self, Credential, Principal, RequestCtx};
    use courrier_core::access::users::{self, NewUser};
    use courrier_core::kernel::{Clock, EmailAddress};
    use courrier_core::testing::{FixedClock, RecordingTransport};
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_700_000_000)));
    let mail = Arc::new(RecordingTransport::default());
    let service =
        || courrier_core::testing::access(Arc::new(PostgresStore::open(&url, 0).unwrap()), clock.clone(), mail.clone());
    let (one, two) = (service(), service());
    let (operator, ctx) = (Principal::operator(), RequestCtx::cli());
    let new =
        NewUser { email: EmailAddress::parse("ann@example.org").unwrap(), profile: Default::default(), password: None };
    let (user, _) = users::create(&one, &operator, &ctx, new).unwrap();
    let request = NewKey::parse("k".into(), "user", None, None, &["read".into()], None, None).unwrap();
    let key = keys::create_for(&one, &operator, &ctx, &user, &[], request).unwrap();
    let credential = Credential::ApiKey(key.secret.clone());

    principal::authenticate(&two, &credential, false).unwrap();
    assert!(matches!(principal::authenticate_cached_key(&two, &key.secret), Some(Ok(_))), "the other server caches it");
    keys::revoke(&one, &operator, &ctx, key.key.id).unwrap();
    assert!(principal::authenticate_cached_key(&two, &key.secret).is_none(), "its cache no longer answers");
    assert!(principal::authenticate(&two, &credential, false).is_err(), "and the store says revoked");
}

/// The access rules over PostgreSQL, across two servers: an account opened on one exists for the
/// other (a second opening is a conflict), its session opened on one is accepted by the other, and
/// once signed out there, refused by the first.
#[test]
fn a_session_opened_on_one_server_is_seen_and_ended_on_the_other() {
    use courrier_core::access::AccessError;
    use courrier_core::access::model::Role;
    use courrier_core::access::principal::{self, Credential, Principal, RequestCtx};
    use courrier_core::access::{roles, sessions, users};
    use courrier_core::kernel::{Clock, EmailAddress};
    use courrier_core::testing::{FixedClock, RecordingTransport};
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_700_000_000)));
    let mail = Arc::new(RecordingTransport::default());
    let service =
        || courrier_core::testing::access(Arc::new(PostgresStore::open(&url, 0).unwrap()), clock.clone(), mail.clone());
    let (one, two) = (service(), service());
    let (operator, ctx) = (Principal::operator(), RequestCtx::cli());
    let new = |password: Option<&str>| users::NewUser {
        email: EmailAddress::parse("admin@example.org").unwrap(),
        profile: Default::default(),
        password: password.map(str::to_owned),
    };
    let (user, _) = users::create(&one, &operator, &ctx, new(Some("a long enough password"))).unwrap();
    roles::grant(&one, &operator, &ctx, user.id, Role::SiteAdmin).unwrap();
    assert!(matches!(users::create(&two, &operator, &ctx, new(None)), Err(AccessError::Conflict(_))));

    let token = sessions::login(&two, &ctx, "admin@example.org", "a long enough password").unwrap().token;
    let credential = Credential::Session { token: token.clone(), csrf: None };
    assert!(principal::authenticate(&one, &credential, false).unwrap().is_site_admin());
    sessions::logout(&one, &ctx, &token).unwrap();
    assert!(matches!(principal::authenticate(&two, &credential, false), Err(AccessError::Unauthenticated)));
}

/// Two servers on one database count one quota per key and one window per address (issue 25):
/// the same behaviour as one server's memory, whichever server counts.
#[test]
fn two_servers_share_every_quota_and_limit() {
    let server = TestServer::start().unwrap();
    let (url, one) = fresh(&server);
    let two = PostgresStore::open(&url, 0).unwrap();
    let (l1, l2) = (one.limits(), two.limits());
    courrier_core::access::limits::shared_suite(&l1, &l2, &l1, &l2);
}

/// The limits live in UNLOGGED tables: counters, not records, written without the WAL's fsync.
#[test]
fn limits_are_counted_in_unlogged_tables() {
    let server = TestServer::start().unwrap();
    let (url, _store) = fresh(&server);
    let rows = other(&url)
        .query("SELECT relname::TEXT FROM pg_class WHERE relpersistence = 'u' AND relkind = 'r' ORDER BY 1", &[])
        .unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(names, ["limit_buckets", "limit_windows"]);
}

fn mailing(s: &PostgresStore) -> &courrier_core::mailing::ports::Store {
    s
}

/// A list with `n` active regular members on as many destination domains, and a send fanned out
/// to them: `n` copies due at `at(0)`.
fn queued_copies(store: &PostgresStore, n: usize) -> courrier_core::mailing::model::ListId {
    use courrier_core::kernel::{DomainName, EmailAddress, ListName};
    use courrier_core::mailing::model::{
        DeliveryMode, DomainStatus, ListId, ListKind, ListPolicies, ListStatus, MailingList, MemberStatus, NewMember,
        SendKind, SubscriptionPolicy,
    };
    use courrier_core::mailing::ports::{NewDomain, NewSend};
    let now = Timestamp::from_unix_secs(1_700_000_000);
    courrier_core::storage::in_write(mailing(store), |tx| {
        let name = DomainName::parse("example.org").unwrap();
        let domain_id = tx.insert_domain(
            &NewDomain {
                name: &name,
                status: DomainStatus::Active,
                dkim_selector: None,
                default_subscription_policy: SubscriptionPolicy::Open,
            },
            now,
        )?;
        let list = tx.insert_list(&MailingList {
            id: ListId::from_stored(0),
            domain_id,
            domain: name,
            name: ListName::parse("news").unwrap(),
            display_name: "News".into(),
            kind: ListKind::Announce,
            status: ListStatus::Active,
            send_suspended: false,
            policies: ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Announce),
            created_at: now,
            updated_at: now,
        })?;
        let members: Vec<NewMember> = (0..n)
            .map(|i| NewMember {
                list_id: list,
                email: EmailAddress::parse(&format!("m{i}@d{i}.example")).unwrap(),
                display_name: None,
                status: MemberStatus::Active,
                pending_reason: None,
                delivery_mode: DeliveryMode::Regular,
                subscribed_at: Some(now),
                consent_source: None,
                consent_at: None,
                consent_id: None,
            })
            .collect();
        tx.insert_members_if_absent(&members, now)?;
        let send = tx.insert_send(
            &NewSend {
                list_id: list,
                subject: "S",
                text: Some("b"),
                html: None,
                message_id: "m@example.org",
                created_by: None,
                kind: SendKind::Post,
                raw: None,
            },
            now,
        )?;
        assert_eq!(tx.fan_out(send, list, DeliveryMode::Regular, now)?, n as u64);
        Ok::<_, StoreError>(list)
    })
    .unwrap()
}

/// Workers of two servers claim copies from one queue at once: every copy is leased once, none
/// twice, none left (issue 25: a send with workers on both delivers each copy once).
#[test]
fn workers_of_two_servers_claiming_at_once_never_lease_one_copy_twice() {
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let stores = [Arc::new(PostgresStore::open(&url, 0).unwrap()), Arc::new(PostgresStore::open(&url, 0).unwrap())];
    queued_copies(&stores[0], 300);
    let now = Timestamp::from_unix_secs(1_700_000_001);
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let store = Arc::clone(&stores[w % 2]);
            std::thread::spawn(move || {
                let mut leased = Vec::new();
                loop {
                    let batch = courrier_core::storage::in_write(mailing(&store), |tx| {
                        tx.claim_copies(now, now.plus_secs(600), 7, 1_000)
                    })
                    .unwrap();
                    if batch.is_empty() {
                        return leased;
                    }
                    leased.extend(batch.into_iter().map(|c| c.id));
                }
            })
        })
        .collect();
    let mut all: Vec<_> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let claimed = all.len();
    all.sort();
    all.dedup();
    assert_eq!((claimed, all.len()), (300, 300), "each copy leased once");
}

/// A claim passes over a copy another connection holds locked (`SKIP LOCKED`) and leases the rest
/// at once, where a plain `FOR UPDATE` would wait for that connection, and end Busy.
#[test]
fn a_claim_skips_a_copy_another_connection_holds_instead_of_waiting_for_it() {
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    queued_copies(&store, 5);
    let mut holder = other(&url);
    let mut held = holder.transaction().unwrap();
    let locked: i64 = held.query_one("SELECT MIN(id) FROM copies", &[]).unwrap().get(0);
    held.execute("SELECT id FROM copies WHERE id = $1 FOR UPDATE", &[&locked]).unwrap();
    let now = Timestamp::from_unix_secs(1_700_000_001);
    let leased =
        courrier_core::storage::in_write(mailing(&store), |tx| tx.claim_copies(now, now.plus_secs(600), 10, 1_000))
            .expect("the claim does not wait for the locked copy");
    let ids: Vec<i64> = leased.iter().map(|c| c.id.get()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(!ids.contains(&locked), "the locked copy is left to its holder");
    held.rollback().unwrap();
    let rest =
        courrier_core::storage::in_write(mailing(&store), |tx| tx.claim_copies(now, now.plus_secs(600), 10, 1_000))
            .unwrap();
    assert_eq!(rest.iter().map(|c| c.id.get()).collect::<Vec<_>>(), [locked], "and leased once it is free");
}

/// Every server opens the same data key: the first one made it and sealed it with the master key
/// in the database; a server given another master key is refused, naming the key that sealed it.
#[test]
fn every_server_opens_the_data_key_sealed_in_the_database_with_the_master_key() {
    use base64::Engine;
    use courrier_core::adapters::data_key::MasterKey;
    let master = |b: u8| MasterKey::parse(&base64::engine::general_purpose::STANDARD.encode([b; 32])).unwrap();
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let keys: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PostgresStore::open(&url, 0).unwrap().data_key(&master(1), 0).unwrap())
        })
        .collect();
    let keys: Vec<_> = keys.into_iter().map(|k| k.join().unwrap()).collect();
    let sealed = keys[0].seal(b"webhook secret", "webhook:1");
    for k in &keys {
        assert_eq!(k.open(&sealed, "webhook:1").unwrap(), b"webhook secret", "one key for every server");
    }
    let stored: String = other(&url).query_one("SELECT sealed FROM installation_secrets", &[]).unwrap().get(0);
    assert!(stored.starts_with(&format!("v1.{}.", master(1).sealing_key().id())), "sealed by the master key");
    let store = PostgresStore::open(&url, 0).unwrap();
    match store.data_key(&master(2), 0) {
        Err(DataKeyError::OtherMasterKey(id)) => assert_eq!(id, master(1).sealing_key().id()),
        other => panic!("expected OtherMasterKey, got {other:?}"),
    }
}

/// Two servers' mailing contexts on one database, one clock: the first with a list of `n`
/// members, made through the rules as the API makes them.
fn two_mailing_servers(
    server: &TestServer,
    n: usize,
) -> (
    [courrier_core::mailing::Service; 2],
    [Arc<courrier_core::testing::RecordingTransport>; 2],
    Arc<courrier_core::testing::FixedClock>,
) {
    use courrier_core::access::principal::{Principal, RequestCtx};
    use courrier_core::access::users::{self, NewUser};
    use courrier_core::kernel::{DomainName, EmailAddress, ListName};
    use courrier_core::mailing::members::{self, AddMember};
    use courrier_core::mailing::model::SubscriptionPolicy;
    use courrier_core::mailing::{domains, lists};
    use courrier_core::testing::{FixedClock, RecordingTransport};
    let url = server.fresh_database().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let mails = [Arc::new(RecordingTransport::default()), Arc::new(RecordingTransport::default())];
    let app = |mail: &Arc<RecordingTransport>| {
        let store = Arc::new(PostgresStore::open(&url, 0).unwrap());
        courrier_core::testing::mailing(store, clock.clone(), mail.clone(), courrier_core::egress::Egress::offline())
    };
    let apps = [app(&mails[0]), app(&mails[1])];
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    let new_owner = NewUser { email: owner.clone(), profile: Default::default(), password: None };
    users::create(&apps[0].access, &p, &ctx, new_owner).unwrap();
    let new_domain =
        domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
    domains::create(&apps[0], &p, &ctx, new_domain).unwrap();
    let new_list = lists::NewList {
        name: l.clone(),
        display_name: "News".into(),
        owner,
        kind: None,
        subscription_policy: Some(SubscriptionPolicy::Open),
    };
    lists::create(&apps[0], &p, &ctx, &d, new_list).unwrap();
    for i in 0..n {
        let req = AddMember::regular(EmailAddress::parse(&format!("m{i}@d{}.example", i % 7)).unwrap());
        members::add(&apps[i % 2], &p, &ctx, None, &d, &l, req).unwrap();
    }
    mails[0].sent.lock().unwrap().clear(); // the owner's invitation
    (apps, mails, clock)
}

/// A send submitted on one server, delivered by workers of both at once: each member gets one
/// copy, and `send.completed` is recorded once (issue 25).
#[test]
fn a_send_with_workers_on_two_servers_delivers_each_copy_once_and_completes_once() {
    use courrier_core::access::principal::{Principal, RequestCtx};
    use courrier_core::kernel::{DomainName, EventName, ListName};
    use courrier_core::mailing::{delivery, sends};
    let server = TestServer::start().unwrap();
    let (apps, mails, _clock) = two_mailing_servers(&server, 60);
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let msg = sends::NewMessage { subject: "Hi".into(), text: Some("x".into()), html: None };
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    sends::submit(&apps[1], &p, &ctx, None, &d, &l, msg).unwrap().ran().unwrap();
    let cfg = delivery::DeliveryConfig { batch: 4, ..Default::default() };
    // One round on each first (both servers deliver, whatever the threads' timing), then two
    // workers on each at once until the queue is empty.
    for app in &apps {
        assert_eq!(delivery::run_once(app, &cfg).unwrap().sent, 4);
    }
    std::thread::scope(|s| {
        for app in apps.iter().chain(apps.iter()) {
            s.spawn(move || while delivery::run_once(app, &cfg).unwrap().claimed > 0 {});
        }
    });
    for app in &apps {
        delivery::run_once(app, &cfg).unwrap();
    }
    let mut recipients: Vec<String> = mails
        .iter()
        .flat_map(|m| m.sent.lock().unwrap().iter().flat_map(|s| s.recipients.clone()).collect::<Vec<_>>())
        .map(|r| r.to_string())
        .collect();
    let delivered = recipients.len();
    recipients.sort();
    recipients.dedup();
    assert_eq!((delivered, recipients.len()), (60, 60), "each member once");
    assert!(mails.iter().all(|m| !m.sent.lock().unwrap().is_empty()), "both servers' workers delivered");
    let completed = in_read(&*apps[0].store, |tx| tx.events_after(None, 10_000))
        .unwrap()
        .iter()
        .filter(|e| e.name == EventName::SendCompleted)
        .count();
    assert_eq!(completed, 1);
}

/// The same Idempotency-Key sent to two servers at once: one runs the send, the other replays its
/// answer, and the list has one send (issue 25).
#[test]
fn the_same_idempotency_key_sent_to_two_servers_executes_once() {
    use courrier_core::access::model::Role;
    use courrier_core::access::principal::{self, Credential, Principal, RequestCtx};
    use courrier_core::access::{keys, roles, users};
    use courrier_core::kernel::{DomainName, EmailAddress, ListName};
    use courrier_core::mailing::idempotency::{IdempotentRequest, Keyed};
    use courrier_core::mailing::sends;
    let server = TestServer::start().unwrap();
    let (apps, _mails, _clock) = two_mailing_servers(&server, 3);
    let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
    let (operator, ctx) = (Principal::operator(), RequestCtx::cli());
    let sender = users::NewUser {
        email: EmailAddress::parse("sender@example.org").unwrap(),
        profile: Default::default(),
        password: None,
    };
    let (user, _) = users::create(&apps[0].access, &operator, &ctx, sender).unwrap();
    let owner = Role::Owner(d.clone(), l.clone());
    roles::grant(&apps[0].access, &operator, &ctx, user.id, owner.clone()).unwrap();
    let request =
        keys::NewKey::parse("k".into(), "list", Some("example.org"), Some("news"), &["send".into()], None, None)
            .unwrap();
    let key = keys::create_for(&apps[0].access, &operator, &ctx, &user, &[owner], request).unwrap();
    let body = br#"{"subject":"Hi","text":"x"}"#;
    let outcomes: Vec<Keyed<sends::Submitted>> = std::thread::scope(|s| {
        let runs: Vec<_> = apps
            .iter()
            .map(|app| {
                let (secret, d, l, ctx) = (&key.secret, &d, &l, &ctx);
                s.spawn(move || {
                    let p = principal::authenticate(&app.access, &Credential::ApiKey(secret.clone()), true).unwrap();
                    let req = IdempotentRequest::new(&p, Some("k-1"), "POST", "/api/v1/sends", body).unwrap();
                    let msg = sends::NewMessage { subject: "Hi".into(), text: Some("x".into()), html: None };
                    sends::submit(app, &p, ctx, req.as_ref(), d, l, msg).unwrap()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let ran = outcomes.iter().filter(|o| matches!(o, Keyed::Ran(_))).count();
    let replayed = outcomes.iter().filter(|o| matches!(o, Keyed::Replay { .. })).count();
    assert_eq!((ran, replayed), (1, 1));
    assert_eq!(in_read(&*apps[1].store, |tx| tx.open_sends(None)).unwrap(), 1, "one send");
}

#[test]
fn a_document_store_in_progress_on_one_server_holds_off_removals_on_every_other() {
    use courrier_core::ocr::blobs::{BlobStore as _, Hold};
    let server = TestServer::start().unwrap();
    let (url, store) = fresh(&server);
    let blobs = store.blobs();
    let mut two = other(&url);
    let gate = super::ocr::BLOB_GATE;
    let may = |c: &mut postgres::Client, hold: Hold| -> bool {
        let (lock, unlock) = match hold {
            Hold::Store => ("SELECT pg_try_advisory_lock_shared($1)", "SELECT pg_advisory_unlock_shared($1)"),
            Hold::Removal => ("SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"),
        };
        let got: bool = c.query_one(lock, &[&gate]).unwrap().get(0);
        if got {
            c.execute(unlock, &[&gate]).unwrap();
        }
        got
    };
    let storing = blobs.hold(Hold::Store).unwrap();
    assert!(!may(&mut two, Hold::Removal), "another server's removal waits for the upload's commit");
    assert!(may(&mut two, Hold::Store), "uploads do not wait for one another");
    drop(storing);
    assert!(may(&mut two, Hold::Removal), "released, and its connection back in the pool unlocked");
    let removing = blobs.hold(Hold::Removal).unwrap();
    assert!(!may(&mut two, Hold::Store), "another server's upload waits for the removal");
    drop(removing);
    assert!(may(&mut two, Hold::Store));
}

fn key(name: &str) -> WriteKey {
    WriteKey::new("list", &["example.org", name])
}

/// Begins a write on another thread; the handle ends once it has begun (and then commits it).
fn begin_elsewhere(
    store: &Arc<PostgresStore>,
    key: Option<WriteKey>,
) -> std::thread::JoinHandle<Result<(), StoreError>> {
    let store = Arc::clone(store);
    std::thread::spawn(move || {
        let mut tx = match &key {
            Some(key) => access(&store).write_keyed(key)?,
            None => access(&store).write()?,
        };
        tx.append_audit(&audit("elsewhere"))?;
        tx.commit()
    })
}

/// Waits up to `within` for `handle` to end; whether it did.
fn ends_within(handle: &std::thread::JoinHandle<Result<(), StoreError>>, within: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + within;
    while !handle.is_finished() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    handle.is_finished()
}

#[test]
fn writes_of_different_keys_commit_together_and_of_one_key_or_unkeyed_take_turns() {
    use std::time::Duration;
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let (one, two) = (Arc::new(PostgresStore::open(&url, 0).unwrap()), Arc::new(PostgresStore::open(&url, 0).unwrap()));
    let mut held = access(&one).write_keyed(&key("news")).unwrap();
    held.append_audit(&audit("held")).unwrap();

    // Another list's write, from another server, begins and commits while "news" is held.
    let other_key = begin_elsewhere(&two, Some(key("jobs")));
    assert!(ends_within(&other_key, Duration::from_secs(4)), "a write of another key waited");
    other_key.join().unwrap().unwrap();

    // The same list's write, and an unkeyed write, wait for it.
    let same_key = begin_elsewhere(&two, Some(key("news")));
    let unkeyed = begin_elsewhere(&two, None);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!same_key.is_finished(), "a write of the same key ran beside the held one");
    assert!(!unkeyed.is_finished(), "an unkeyed write ran beside a keyed one");
    held.commit().unwrap();
    same_key.join().unwrap().unwrap();
    unkeyed.join().unwrap().unwrap();

    // And an unkeyed write holds every keyed one back.
    let mut all = access(&one).write().unwrap();
    all.append_audit(&audit("all")).unwrap();
    let keyed = begin_elsewhere(&two, Some(key("jobs")));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!keyed.is_finished(), "a keyed write ran beside an unkeyed one");
    all.commit().unwrap();
    keyed.join().unwrap().unwrap();
    let total = in_read(access(&one), |tx| tx.list_audit(&AuditFilter::default(), Page::default())).unwrap().total;
    assert_eq!(total, 6);
}

/// The outbox's reader never skips an event that commits after a later one (decisions.md,
/// "Several servers: PostgreSQL"): two keyed writers, the first to record its event commits last.
#[test]
fn an_event_committed_after_a_later_one_is_not_skipped_by_a_cursor() {
    use courrier_core::kernel::{EventName, NewEvent};
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let (one, two) = (PostgresStore::open(&url, 0).unwrap(), PostgresStore::open(&url, 0).unwrap());
    let event = |n: i64| NewEvent {
        name: EventName::MemberAdded,
        at: Timestamp::from_unix_secs(n),
        domain_id: None,
        list_id: None,
        data: serde_json::json!({ "n": n }),
    };
    let read_all = |cursor: &mut Option<courrier_core::kernel::EventId>, seen: &mut Vec<i64>| {
        let events = in_read(access(&one), |tx| tx.events_after(*cursor, 100)).unwrap();
        if let Some(last) = events.last() {
            *cursor = Some(last.id);
        }
        seen.extend(events.iter().map(|e| e.data["n"].as_i64().unwrap()));
    };
    let (mut cursor, mut seen) = (None, Vec::new());

    let mut early = access(&one).write_keyed(&key("news")).unwrap();
    let first = early.append_event(&event(1)).unwrap();
    let mut late = access(&two).write_keyed(&key("jobs")).unwrap();
    let second = late.append_event(&event(2)).unwrap();
    assert!(first.id < second.id);
    late.commit().unwrap();
    // Event 2 is committed, event 1 (a smaller id) not yet: a reader that took 2 and moved its
    // cursor past 1 would never see 1.
    read_all(&mut cursor, &mut seen);
    early.commit().unwrap();
    read_all(&mut cursor, &mut seen);
    read_all(&mut cursor, &mut seen);
    seen.sort_unstable();
    assert_eq!(seen, [1, 2], "each event read once, none skipped");
    let last = in_read(access(&one), |tx| tx.last_event_id()).unwrap();
    assert_eq!(last, cursor, "the last event is where a reader that read everything stands");
}

/// The webhooks' cursor follows the outbox's reading order: an event read after another with a
/// larger id moves it on (it must not stay at the larger id, which would read that event again
/// and again), and a position already passed never moves it back.
#[test]
fn the_webhook_cursor_moves_in_reading_order_even_to_a_smaller_id() {
    use courrier_core::kernel::{EventName, NewEvent};
    let server = TestServer::start().unwrap();
    let url = server.fresh_database().unwrap();
    let (one, two) = (PostgresStore::open(&url, 0).unwrap(), PostgresStore::open(&url, 0).unwrap());
    let event = |n: i64| NewEvent {
        name: EventName::MemberAdded,
        at: Timestamp::from_unix_secs(n),
        domain_id: None,
        list_id: None,
        data: serde_json::json!({ "n": n }),
    };
    // The transaction that takes its id first records its event last (the larger event id).
    let mut first_xid = mailing(&one).write_keyed(&key("news")).unwrap();
    first_xid.append_audit(&audit("takes its transaction id")).unwrap();
    let mut second_xid = mailing(&two).write_keyed(&key("jobs")).unwrap();
    let small = second_xid.append_event(&event(1)).unwrap();
    let large = first_xid.append_event(&event(2)).unwrap();
    assert!(small.id < large.id);
    first_xid.commit().unwrap();
    second_xid.commit().unwrap();

    let mut seen = Vec::new();
    for _ in 0..4 {
        let read = courrier_core::storage::in_write(mailing(&one), |tx| {
            let cursor = tx.webhook_cursor()?;
            let events = tx.events_after(cursor, 1)?;
            if let Some(last) = events.last() {
                tx.set_webhook_cursor(last.id)?;
            }
            Ok::<_, StoreError>(events)
        })
        .unwrap();
        seen.extend(read.iter().map(|e| e.data["n"].as_i64().unwrap()));
    }
    assert_eq!(seen, [2, 1], "each event once, in the writing transactions' order");
    let cursor = in_read(mailing(&one), |tx| tx.webhook_cursor()).unwrap();
    assert_eq!(cursor, Some(small.id), "the cursor stands at the last event read, the smaller id");
    courrier_core::storage::in_write(mailing(&one), |tx| tx.set_webhook_cursor(large.id)).unwrap();
    let cursor = in_read(mailing(&one), |tx| tx.webhook_cursor()).unwrap();
    assert_eq!(cursor, Some(small.id), "a position already passed does not move it back");
}

/// Transaction ids are the cluster's: a writer left open in another database (another
/// installation on the same server) must not hold this installation's outbox readers back.
#[test]
fn a_writer_open_in_another_database_does_not_hold_the_outbox_back() {
    use courrier_core::kernel::{EventName, NewEvent};
    let server = TestServer::start().unwrap();
    let (_, ours) = fresh(&server);
    let (_, theirs) = fresh(&server);
    let mut open_elsewhere = access(&theirs).write().unwrap();
    open_elsewhere.append_audit(&audit("an xid taken, never committed during the test")).unwrap();
    let event = NewEvent {
        name: EventName::MemberAdded,
        at: Timestamp::from_unix_secs(1),
        domain_id: None,
        list_id: None,
        data: serde_json::json!({ "n": 1 }),
    };
    courrier_core::storage::in_write(access(&ours), |tx| tx.append_event(&event)).unwrap();
    let read = in_read(access(&ours), |tx| tx.events_after(None, 10)).unwrap();
    assert_eq!(read.len(), 1, "the event committed here is read at once");
    assert_eq!(in_read(access(&ours), |tx| tx.last_event_id()).unwrap(), Some(read[0].id));
    open_elsewhere.commit().unwrap();
}
