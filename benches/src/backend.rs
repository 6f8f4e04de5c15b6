//! Which store an installation under measure runs on: SQLite in its data directory (the default,
//! nothing to do) or a fresh database of its own on a PostgreSQL server (`--backend postgres`).
//! On PostgreSQL the data directory records its database (`.bench-database-url`), so that every
//! process a harness runs on that directory ([`crate::cli`], [`crate::serve_command`],
//! [`crate::worker_command`]) is given the same `COURRIER_DATABASE_URL` and `COURRIER_MASTER_KEY`.

use courrier_store_postgres::test_server::{
    TestServer as PostgresTestServer, copy_database_at as copy_postgres_database_at,
    drop_database_at as drop_postgres_database_at, fresh_database_at as fresh_postgres_database_at,
};
use std::path::Path;
use std::sync::Mutex;

/// Where a data directory on PostgreSQL records its database's URL.
const RECORD: &str = ".bench-database-url";
/// The master key every bench server on PostgreSQL is given (32 bytes, base64).
const MASTER_KEY: &str = "Y291cnJpZXItYmVuY2gtbWFzdGVyLWtleS0zMi1ieXQ=";

/// `--backend`: the stores a harness measures, in the order it measures them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// `sqlite`, `postgres` or `both` (SQLite first, then PostgreSQL).
    pub fn parse_list(raw: &str) -> Result<Vec<Backend>, String> {
        match raw {
            "sqlite" => Ok(vec![Self::Sqlite]),
            "postgres" => Ok(vec![Self::Postgres]),
            "both" => Ok(vec![Self::Sqlite, Self::Postgres]),
            _ => Err(format!("--backend must be sqlite, postgres or both, got {raw:?}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
        }
    }
}

/// The PostgreSQL server the installations of a run get their databases on: the one at
/// `--postgres URL`, or a scratch server this harness starts (fsync on), stopped when dropped.
/// Databases still there when it is dropped (a run that failed) are dropped with it.
pub struct Postgres {
    admin: String,
    /// How the report names it.
    pub described: String,
    made: Mutex<Vec<String>>,
    /// Declared last: stopped after the databases are dropped.
    _server: Option<PostgresTestServer>,
}

impl Postgres {
    /// The server at `admin_url` (a database URL the role may connect to and create databases
    /// from, as `scripts/test-postgres start` prints), or a new scratch server when `None`.
    pub fn connect(admin_url: Option<&str>) -> Result<Self, String> {
        let (admin, server, described) = match admin_url {
            Some(url) => (url.to_owned(), None, format!("the server of --postgres {url}")),
            None => {
                let server = PostgresTestServer::start()
                    .map_err(|e| format!("cannot start a scratch PostgreSQL server (or pass --postgres URL): {e}"))?;
                let url = server.url("postgres");
                let described = format!("a scratch server this harness started ({url}, fsync on)");
                (url, Some(server), described)
            }
        };
        Ok(Self { admin, described, made: Mutex::new(Vec::new()), _server: server })
    }

    fn remember(&self, url: &str) {
        self.made.lock().expect("not poisoned").push(url.to_owned());
    }

    fn forget(&self, url: &str) {
        self.made.lock().expect("not poisoned").retain(|u| u != url);
    }
}

/// The PostgreSQL server the run needs (`None` when `backends` names only SQLite), announced
/// with `what` gets a fresh database there.
pub fn connect_for(backends: &[Backend], admin_url: Option<&str>, what: &str) -> Result<Option<Postgres>, String> {
    if !backends.contains(&Backend::Postgres) {
        return Ok(None);
    }
    let pg = Postgres::connect(admin_url)?;
    println!("PostgreSQL: {}; every {what} a fresh database there\n", pg.described);
    Ok(Some(pg))
}

/// The stores to measure, in `backends`' order.
pub fn stores<'a>(backends: &[Backend], pg: Option<&'a Postgres>) -> Vec<Store<'a>> {
    backends
        .iter()
        .map(|b| match (b, pg) {
            (Backend::Postgres, Some(pg)) => Store::Postgres(pg),
            _ => Store::Sqlite,
        })
        .collect()
}

impl Drop for Postgres {
    fn drop(&mut self) {
        for url in self.made.lock().expect("not poisoned").drain(..) {
            let _ = drop_postgres_database_at(&self.admin, &url);
        }
    }
}

/// The store of one installation (a data directory): SQLite in it, or a database on `Postgres`.
#[derive(Clone, Copy)]
pub enum Store<'a> {
    Sqlite,
    Postgres(&'a Postgres),
}

impl Store<'_> {
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
        }
    }

    pub fn name(&self) -> &'static str {
        self.backend().name()
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// Creates the data directory `dir` and, on PostgreSQL, a fresh database for it.
    pub fn create(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if let Self::Postgres(pg) = self
            && !dir.join(RECORD).exists()
        {
            let url = fresh_postgres_database_at(&pg.admin).map_err(|e| format!("a fresh database: {e}"))?;
            pg.remember(&url);
            record(dir, &url)?;
        }
        Ok(())
    }

    /// A copy of the installation of `from` (stopped) at `to`: its files, and on PostgreSQL its
    /// database (`CREATE DATABASE ... TEMPLATE`).
    pub fn copy(&self, from: &Path, to: &Path) -> Result<(), String> {
        copy_dir(from, to)?;
        if let Self::Postgres(pg) = self {
            let source = database_url(from).ok_or_else(|| format!("{} has no database", from.display()))?;
            let url = copy_postgres_database_at(&pg.admin, &source).map_err(|e| format!("a copy of {source}: {e}"))?;
            pg.remember(&url);
            record(to, &url)?;
        }
        Ok(())
    }

    /// Removes the installation of `dir` (stopped): its database on PostgreSQL, then the directory.
    pub fn remove(&self, dir: &Path) {
        if let (Self::Postgres(pg), Some(url)) = (self, database_url(dir)) {
            match drop_postgres_database_at(&pg.admin, &url) {
                Ok(()) => pg.forget(&url),
                Err(e) => eprintln!("cannot drop {url}: {e}"),
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn record(dir: &Path, url: &str) -> Result<(), String> {
    std::fs::write(dir.join(RECORD), url).map_err(|e| format!("cannot write {}: {e}", dir.join(RECORD).display()))
}

/// The PostgreSQL database of the installation of `dir`, if it has one.
pub fn database_url(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(RECORD)).ok().map(|s| s.trim().to_owned())
}

/// The settings that put a process on the installation of `dir`: none on SQLite.
pub fn database_env(dir: &Path) -> Vec<(&'static str, String)> {
    match database_url(dir) {
        Some(url) => vec![("COURRIER_DATABASE_URL", url), ("COURRIER_MASTER_KEY", MASTER_KEY.to_owned())],
        None => Vec::new(),
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_name() == RECORD {
            continue;
        }
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| format!("cannot copy {}: {e}", src.display()))?;
        }
    }
    Ok(())
}

/// One figure of a scenario, for the side-by-side table of `--backend both`: what, the value,
/// whether it is a rate (more is better, per second) or a latency in seconds.
pub struct Headline {
    pub what: String,
    pub value: f64,
    pub rate: bool,
}

/// Each store's headline figures side by side (SQLite, PostgreSQL) with their ratio; a figure one
/// store has not (NaN or absent) is `n/a`.
pub fn side_by_side(headlines: &[(Backend, Vec<Headline>)]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### PostgreSQL beside SQLite (same run; load average {} now)\n\n\
         | measure | SQLite | PostgreSQL | PostgreSQL/SQLite |\n|---|---:|---:|---:|",
        crate::loadavg()
    );
    let of = |backend: Backend| headlines.iter().find(|(b, _)| *b == backend).map(|(_, h)| h.as_slice()).unwrap_or(&[]);
    let (sqlite, postgres) = (of(Backend::Sqlite), of(Backend::Postgres));
    let mut whats: Vec<&str> = Vec::new();
    for h in sqlite.iter().chain(postgres) {
        if !whats.contains(&h.what.as_str()) {
            whats.push(&h.what);
        }
    }
    let find = |hs: &[Headline], what: &str| {
        hs.iter().find(|h| h.what == what && !h.value.is_nan()).map(|h| (h.value, h.rate))
    };
    let show = |v: Option<(f64, bool)>| match v {
        Some((v, true)) => format!("{v:.0}/s"),
        Some((v, false)) => crate::fmt_latency(v),
        None => "n/a".to_owned(),
    };
    for what in whats {
        let (s, p) = (find(sqlite, what), find(postgres, what));
        let ratio = match (s, p) {
            (Some((s, _)), Some((p, _))) => format!("{:.2}", p / s),
            _ => "-".to_owned(),
        };
        let _ = writeln!(out, "| {what} | {} | {} | {ratio} |", show(s), show(p));
    }
    let _ = writeln!(out, "\n(ratios of rates: above 1 PostgreSQL is faster; of latencies: above 1 it is slower)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_in_measuring_order() {
        assert_eq!(Backend::parse_list("both").unwrap(), vec![Backend::Sqlite, Backend::Postgres]);
        assert_eq!(Backend::parse_list("postgres").unwrap(), vec![Backend::Postgres]);
        assert!(Backend::parse_list("mysql").unwrap_err().contains("sqlite, postgres or both"));
    }

    #[test]
    fn side_by_side_says_n_a_where_a_store_has_no_figure() {
        let h = |what: &str, value: f64, rate: bool| Headline { what: what.to_owned(), value, rate };
        let table = side_by_side(&[
            (Backend::Sqlite, vec![h("adds", 200.0, true), h("p99", 0.002, false)]),
            (Backend::Postgres, vec![h("adds", 100.0, true), h("p99", 0.004, false), h("two servers", 50.0, true)]),
        ]);
        assert!(table.contains("| adds | 200/s | 100/s | 0.50 |"), "{table}");
        assert!(table.contains("| p99 | 2.00 ms | 4.00 ms | 2.00 |"), "{table}");
        assert!(table.contains("| two servers | n/a | 50/s | - |"), "{table}");
    }

    #[test]
    fn only_a_recorded_database_changes_a_process_settings() {
        let dir = tempfile::TempDir::new().unwrap();
        assert!(database_env(dir.path()).is_empty());
        record(dir.path(), "postgres://u@127.0.0.1:1/t_1\n").unwrap();
        let env = database_env(dir.path());
        assert_eq!(env[0], ("COURRIER_DATABASE_URL", "postgres://u@127.0.0.1:1/t_1".to_owned()));
        assert_eq!(env[1].0, "COURRIER_MASTER_KEY");
    }
}
