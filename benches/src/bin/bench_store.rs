//! `bench-store`: the storage adapters side by side (issue 25), SQLite and PostgreSQL in the same
//! run, through the access context's port (the part of the schema both hold so far).
//!
//! - `write`: write transactions of one account creation and its audit entry, committed one by
//!   one, from 1 and from 8 threads: what one writer at a time costs on each (SQLite's group
//!   commit, PostgreSQL's installation-wide write lock, each with its fsync).
//! - `auth`: read transactions of what authenticating an API key reads (the key by prefix, its
//!   user, its roles), from 1 and 8 threads.
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
use courrier_core::adapters::sqlite::SqliteStore;
use courrier_core::adapters::{PostgresStore, PostgresTestServer as TestServer};
use courrier_core::kernel::{Actor, EmailAddress, NewAuditEntry, Outcome, RequestId, Timestamp};
use courrier_core::storage::{StoreError, in_read, in_write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

const USAGE: &str = "bench-store [--smoke] [--ops N (2000): operations per measurement]";

fn main() -> ExitCode {
    harness_main("bench-store", USAGE, Options::parse, run)
}

struct Options {
    ops: u64,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut o = Options { ops: 2000 };
        while let Some(a) = args.next() {
            match a.as_str() {
                "--smoke" => o.ops = 40,
                "--ops" => o.ops = args.next().and_then(|v| v.parse().ok()).ok_or("--ops takes a number")?,
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
    let sqlite: Arc<Store> = Arc::new(SqliteStore::open(&dir.path().join("bench.db"), 0).map_err(|e| e.to_string())?);
    let postgres = PostgresStore::open(&url, 0).map_err(|e| e.to_string())?;
    println!("postgres: {}", courrier_core::storage::Database::backend(&postgres));
    let shared: Arc<dyn Limits> = Arc::new(postgres.limits());
    let postgres: Arc<Store> = Arc::new(postgres);
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
    let memory: Arc<dyn Limits> = Arc::new(Limiter::default());
    for threads in [1, 8] {
        let s = quota_checks(&memory, threads, o.ops * 5)?;
        let p = quota_checks(&shared, threads, o.ops * 5)?;
        println!("{:<28} {s:>12.0} {p:>12.0} {:>8.4}", format!("quota check, {threads} thread(s)"), p / s);
    }
    println!("load average after: {}", loadavg());
    Ok(())
}
