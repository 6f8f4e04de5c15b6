//! `bench-store`: the storage adapters side by side (issue 25), SQLite and PostgreSQL in the same
//! run, through the access and mailing contexts' ports.
//!
//! - `write`: write transactions of one account creation and its audit entry, committed one by
//!   one, from 1 and from 8 threads: what one writer at a time costs on each (SQLite's group
//!   commit, PostgreSQL's installation-wide write lock, each with its fsync).
//! - `auth`: read transactions of what authenticating an API key reads (the key by prefix, its
//!   user, its roles), from 1 and 8 threads.
//! - `member add`: write transactions of one member's addition through the mailing port (its
//!   uniqueness check, its counts), from 1 and 8 threads.
//! - `member list`: read transactions of a filtered page over a list of `--members` members: the
//!   first page of the active regular members (with its total), and a search by a substring of
//!   the address (`email_contains`, with its total).
//! - `quota check`: one API-key request counted against its quota (`access::limits::Limits`), in
//!   this process's memory (a lone SQLite server) against PostgreSQL's shared counters (one
//!   upsert into an UNLOGGED table), from 1 and 8 threads, over 1,000 keys.
//!
//! PostgreSQL is a throw-away server of Debian's binaries (`initdb` in a temporary directory, fsync
//! on, as `nobody` when run as root), on loopback. `--smoke`: a few operations of each. Nothing
//! asserts on timings.

use courrier_benches::{harness_main, loadavg};
use courrier_core::access::limits::{Limiter, Limits};
use courrier_core::access::model::{ApiKey, KeyId, KeyScope, Perm, PermSet, Profile, Role, UserId};
use courrier_core::access::ports::Store;
use courrier_core::kernel::{
    Actor, DomainName, EmailAddress, ListName, NewAuditEntry, Outcome, Page, RequestId, Timestamp,
};
use courrier_core::mailing::model::{
    DeliveryMode, DomainStatus, ListId, ListKind, ListPolicies, ListStatus, MailingList, MemberFilter, MemberStatus,
    NewMember, SubscriptionPolicy,
};
use courrier_core::mailing::ports::{NewDomain, Store as MailingStore};
use courrier_core::storage::{StoreError, in_read, in_write};
use courrier_store_postgres::{PostgresStore, test_server::TestServer};
use courrier_store_sqlite::SqliteStore;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

const USAGE: &str =
    "bench-store [--smoke] [--ops N (2000): operations per measurement] [--members N (100000): the listed list's size]";

fn main() -> ExitCode {
    harness_main("bench-store", USAGE, Options::parse, run)
}

struct Options {
    ops: u64,
    members: u64,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut o = Options { ops: 2000, members: 100_000 };
        while let Some(a) = args.next() {
            match a.as_str() {
                "--smoke" => (o.ops, o.members) = (40, 1000),
                "--ops" => o.ops = args.next().and_then(|v| v.parse().ok()).ok_or("--ops takes a number")?,
                "--members" => {
                    o.members = args.next().and_then(|v| v.parse().ok()).ok_or("--members takes a number")?
                }
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(Some(o))
    }
}

fn at() -> Timestamp {
    Timestamp::from_unix_secs(1_700_000_000)
}

/// `ops` write transactions spread over `threads`; transactions per second.
fn writes(store: &Arc<Store>, threads: u64, ops: u64, tag: &str) -> Result<f64, String> {
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = Arc::clone(store);
            let tag = tag.to_owned();
            std::thread::spawn(move || -> Result<(), StoreError> {
                for i in 0..ops / threads {
                    let email = EmailAddress::parse(&format!("w{tag}-{t}-{i}@example.org")).expect("valid address");
                    in_write(&*store, |tx| {
                        let id = tx.insert_user(&email, &Profile::default(), None, at())?;
                        tx.append_audit(&NewAuditEntry {
                            at: at(),
                            request_id: RequestId::internal("bench"),
                            actor: Actor { user_id: Some(id.get()), key_id: None, member_id: None },
                            action: "user.create".into(),
                            target: format!("user:{email}"),
                            outcome: Outcome::Done,
                        })
                        .map(drop)
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a writer panicked")?.map_err(|e| e.to_string())?;
    }
    Ok((ops / threads * threads) as f64 / started.elapsed().as_secs_f64())
}

/// Keys to authenticate: one user with a role and `n` keys.
fn seed_keys(store: &Store, n: u64) -> Result<Vec<String>, String> {
    in_write(store, |tx| {
        let user =
            tx.insert_user(&EmailAddress::parse("keys@example.org").expect("valid"), &Profile::default(), None, at())?;
        tx.grant_role(user, &Role::SiteAdmin, at())?;
        (0..n)
            .map(|i| {
                let prefix = format!("{i:08x}");
                tx.insert_key(&key(user, &prefix), "hash")?;
                Ok(prefix)
            })
            .collect::<Result<Vec<_>, StoreError>>()
    })
    .map_err(|e| e.to_string())
}

fn key(user: UserId, prefix: &str) -> ApiKey {
    ApiKey {
        id: KeyId::from_stored(0),
        user_id: user,
        name: "bench".into(),
        prefix: prefix.to_owned(),
        scope: KeyScope::User,
        perms: PermSet::of(&[Perm::Read]),
        rate_limit_per_min: 1000,
        expires_at: None,
        created_at: at(),
        revoked_at: None,
    }
}

/// `ops` authentication reads over `threads`; reads per second.
fn auths(store: &Arc<Store>, prefixes: &Arc<Vec<String>>, threads: u64, ops: u64) -> Result<f64, String> {
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, prefixes) = (Arc::clone(store), Arc::clone(prefixes));
            std::thread::spawn(move || -> Result<(), StoreError> {
                for i in 0..ops / threads {
                    let prefix = &prefixes[((t * 7919 + i) % prefixes.len() as u64) as usize];
                    in_read(&*store, |tx| {
                        let (key, _) = tx.key_by_prefix(prefix)?.ok_or(StoreError::Backend("no key".into()))?;
                        tx.user_by_id(key.user_id)?;
                        tx.roles_of(key.user_id).map(drop)
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a reader panicked")?.map_err(|e| e.to_string())?;
    }
    Ok((ops / threads * threads) as f64 / started.elapsed().as_secs_f64())
}

/// A list of the mailing context to add members to.
fn new_list(store: &MailingStore, name: &str) -> Result<ListId, String> {
    let domain = DomainName::parse("example.org").map_err(|e| e.to_string())?;
    let name = ListName::parse(name).map_err(|e| e.to_string())?;
    in_write(store, |tx| {
        let domain_id = match tx.domain_by_name(&domain)? {
            Some(d) => d.id,
            None => tx.insert_domain(
                &NewDomain {
                    name: &domain,
                    status: DomainStatus::Active,
                    dkim_selector: None,
                    default_subscription_policy: SubscriptionPolicy::Open,
                },
                at(),
            )?,
        };
        tx.insert_list(&MailingList {
            id: ListId::from_stored(0),
            domain_id,
            domain: domain.clone(),
            name: name.clone(),
            display_name: "Bench".into(),
            kind: ListKind::Announce,
            status: ListStatus::Active,
            send_suspended: false,
            policies: ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Announce),
            created_at: at(),
            updated_at: at(),
        })
    })
    .map_err(|e| e.to_string())
}

fn member(list: ListId, email: &str, i: u64) -> Result<NewMember, String> {
    Ok(NewMember {
        list_id: list,
        email: EmailAddress::parse(email).map_err(|e| e.to_string())?,
        display_name: None,
        // One in ten unsubscribed, one in five of the rest on digests: the filters have work.
        status: if i % 10 == 9 { MemberStatus::Unsubscribed } else { MemberStatus::Active },
        pending_reason: None,
        delivery_mode: if i % 5 == 4 { DeliveryMode::Digest } else { DeliveryMode::Regular },
        subscribed_at: Some(at()),
        consent_source: Some("bench".into()),
        consent_at: Some(at()),
        consent_id: None,
    })
}

/// `ops` additions of one member each over `threads`; transactions per second.
fn member_adds(store: &Arc<MailingStore>, list: ListId, threads: u64, ops: u64, tag: &str) -> Result<f64, String> {
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = Arc::clone(store);
            let tag = tag.to_owned();
            std::thread::spawn(move || -> Result<(), String> {
                for i in 0..ops / threads {
                    let m = member(list, &format!("a{tag}-{t}-{i}@example.net"), i)?;
                    in_write(&*store, |tx| tx.insert_member(&m, at()).map(drop)).map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a writer panicked")??;
    }
    Ok((ops / threads * threads) as f64 / started.elapsed().as_secs_f64())
}

/// A list of `n` members, added as an import adds them.
fn seed_members(store: &MailingStore, n: u64) -> Result<ListId, String> {
    let list = new_list(store, "listed")?;
    let mut i = 0;
    while i < n {
        let batch = (i..(i + 5000).min(n))
            .map(|j| member(list, &format!("user{j:07}@host{}.example", j % 997), j))
            .collect::<Result<Vec<_>, _>>()?;
        in_write(store, |tx| tx.insert_members_if_absent(&batch, at())).map_err(|e| e.to_string())?;
        i += 5000;
    }
    Ok(list)
}

/// `ops` listings of the first page of `filter`s over `threads`; reads per second.
fn listings(
    store: &Arc<MailingStore>,
    list: ListId,
    filter: impl Fn(u64) -> MemberFilter + Send + Sync + 'static,
    threads: u64,
    ops: u64,
) -> Result<f64, String> {
    let filter = Arc::new(filter);
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, filter) = (Arc::clone(store), Arc::clone(&filter));
            std::thread::spawn(move || -> Result<(), StoreError> {
                for i in 0..ops / threads {
                    let f = filter(t * 7919 + i);
                    in_read(&*store, |tx| tx.list_members(list, &f, Page::first(50)).map(drop))?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a reader panicked")?.map_err(|e| e.to_string())?;
    }
    Ok((ops / threads * threads) as f64 / started.elapsed().as_secs_f64())
}

/// `ops` key requests counted over `threads`, spread over 1,000 keys whose quota is never spent;
/// checks per second.
fn quota_checks(limits: &Arc<dyn Limits>, threads: u64, ops: u64) -> Result<f64, String> {
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let limits = Arc::clone(limits);
            std::thread::spawn(move || -> Result<(), String> {
                for i in 0..ops / threads {
                    let key = ((t * 7919 + i) % 1000) as i64;
                    limits.take_key_request(key, u32::MAX, at()).map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a counter panicked")??;
    }
    Ok((ops / threads * threads) as f64 / started.elapsed().as_secs_f64())
}

fn run(o: &Options) -> Result<(), String> {
    println!("bench-store, load average {}", loadavg());
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let server = TestServer::start().map_err(|e| e.to_string())?;
    let url = server.fresh_database().map_err(|e| e.to_string())?;
    let sqlite_db = Arc::new(SqliteStore::open(&dir.path().join("bench.db"), 0).map_err(|e| e.to_string())?);
    let postgres_db = Arc::new(PostgresStore::open(&url, 0).map_err(|e| e.to_string())?);
    println!("postgres: {}", courrier_core::storage::Database::backend(&*postgres_db));
    let shared: Arc<dyn Limits> = Arc::new(postgres_db.limits());
    let (sqlite, postgres): (Arc<Store>, Arc<Store>) = (sqlite_db.clone(), postgres_db.clone());
    println!("{:<28} {:>12} {:>12} {:>8}", "measure", "sqlite/s", "postgres/s", "pg/sqlite");
    for threads in [1, 8] {
        let s = writes(&sqlite, threads, o.ops, &format!("s{threads}"))?;
        let p = writes(&postgres, threads, o.ops, &format!("p{threads}"))?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.2}", format!("write, {threads} thread(s)"), p / s);
    }
    let keys = 1000.min(o.ops.max(1));
    let (sk, pk) = (Arc::new(seed_keys(&*sqlite, keys)?), Arc::new(seed_keys(&*postgres, keys)?));
    for threads in [1, 8] {
        let s = auths(&sqlite, &sk, threads, o.ops * 5)?;
        let p = auths(&postgres, &pk, threads, o.ops * 5)?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.2}", format!("auth read, {threads} thread(s)"), p / s);
    }
    let (sqlite, postgres): (Arc<MailingStore>, Arc<MailingStore>) = (sqlite_db, postgres_db);
    let (sl, pl) = (new_list(&*sqlite, "adds")?, new_list(&*postgres, "adds")?);
    for threads in [1, 8] {
        let s = member_adds(&sqlite, sl, threads, o.ops, &format!("s{threads}"))?;
        let p = member_adds(&postgres, pl, threads, o.ops, &format!("p{threads}"))?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.2}", format!("member add, {threads} thread(s)"), p / s);
    }
    let seeding = Instant::now();
    let sl = seed_members(&*sqlite, o.members)?;
    let s = o.members as f64 / seeding.elapsed().as_secs_f64();
    let seeding = Instant::now();
    let pl = seed_members(&*postgres, o.members)?;
    let p = o.members as f64 / seeding.elapsed().as_secs_f64();
    println!("{:<28} {s:>12.0} {p:>12.0} {:>8.2}", "member import (rows)", p / s);
    let active_regular = |_| MemberFilter {
        status: Some(MemberStatus::Active),
        delivery_mode: Some(DeliveryMode::Regular),
        ..Default::default()
    };
    // A substring matching about one member in 1,000 (`user00123` matches user0012300-99).
    let members = o.members.max(1);
    let search = move |i: u64| MemberFilter {
        email_contains: Some(format!("user{:05}", (i * 7919) % (members / 100).max(1))),
        ..Default::default()
    };
    for threads in [1, 8] {
        let s = listings(&sqlite, sl, active_regular, threads, o.ops)?;
        let p = listings(&postgres, pl, active_regular, threads, o.ops)?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.2}", format!("member list, {threads} thread(s)"), p / s);
        let s = listings(&sqlite, sl, search, threads, o.ops / 4)?;
        let p = listings(&postgres, pl, search, threads, o.ops / 4)?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.2}", format!("member search, {threads} thread(s)"), p / s);
    }
    let memory: Arc<dyn Limits> = Arc::new(Limiter::default());
    for threads in [1, 8] {
        let s = quota_checks(&memory, threads, o.ops * 5)?;
        let p = quota_checks(&shared, threads, o.ops * 5)?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.4}", format!("quota check, {threads} thread(s)"), p / s);
    }
    println!("load average after: {}", loadavg());
    Ok(())
}
