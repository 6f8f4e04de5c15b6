//! A real PostgreSQL server for tests: `initdb` into a temporary directory, `postgres` on a free
//! 127.0.0.1 port with its socket in that directory, stopped and removed on drop. `fsync` stays on
//! (the server's default): what the tests measure and check is what an installation gets.
//!
//! PostgreSQL refuses to run as root. Run as root (CI, this machine), the cluster belongs to the
//! unprivileged `nobody` and every server command runs through `runuser -u nobody`; run as anyone
//! else, the commands run as that user. The binaries are Debian's (`/usr/lib/postgresql/N/bin`,
//! the newest N; `scripts/setup-system --test` installs `postgresql`), or `COURRIER_PG_BIN`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The role the tests connect as: the cluster's superuser, trusted on loopback only.
pub const USER: &str = "courrier";

/// A running server. Dropping it stops the server and deletes the cluster.
pub struct TestServer {
    bin: PathBuf,
    /// Holds `data/` (the cluster), the socket and the log; removed on drop.
    dir: tempfile::TempDir,
    port: u16,
    run_as: Option<String>,
    databases: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
pub enum TestServerError {
    #[error("no PostgreSQL binaries: install Debian's postgresql (scripts/setup-system --test) or set COURRIER_PG_BIN")]
    NoBinaries,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{command} failed: {output}")]
    Command { command: String, output: String },
    #[error("cannot create a database: {0}")]
    Sql(#[from] postgres::Error),
}

fn binaries() -> Result<PathBuf, TestServerError> {
    if let Some(dir) = std::env::var_os("COURRIER_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| TestServerError::NoBinaries)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or(TestServerError::NoBinaries)
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The uid and gid of `nobody`, from `/etc/passwd`.
fn nobody() -> Result<(u32, u32), TestServerError> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"nobody") && f.len() > 3)
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .ok_or_else(|| TestServerError::Command { command: "getpwnam nobody".into(), output: "no such user".into() })
}

fn free_port() -> Result<u16, TestServerError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl TestServer {
    /// Creates a cluster and starts its server.
    pub fn start() -> Result<Self, TestServerError> {
        let bin = binaries()?;
        let dir = tempfile::Builder::new().prefix("courrier-pg-").tempdir()?;
        let run_as = if is_root() {
            let (uid, gid) = nobody()?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
            Some("nobody".to_owned())
        } else {
            None
        };
        let mut server = Self { bin, dir, port: 0, run_as, databases: std::sync::atomic::AtomicUsize::new(0) };
        let data = server.data_dir();
        // `--no-sync` only skips initdb's own final flush of the fresh cluster (a throw-away
        // directory); the server itself runs with fsync on.
        server.run(
            "initdb",
            &["-D", &data, "-U", USER, "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
        )?;
        // A port taken between our probe and the server's bind fails the start: try a few.
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            let options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=200 -c fsync=on",
                server.port,
                server.dir.path().display()
            );
            let log = server.dir.path().join("server.log").display().to_string();
            match server.run("pg_ctl", &["-D", &data, "-l", &log, "-o", &options, "-w", "-t", "120", "start"]) {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(TestServerError::NoBinaries))
    }

    fn data_dir(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), TestServerError> {
        let exe = self.bin.join(tool);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        // The tool runs from the cluster's directory: `nobody` may not read the caller's.
        let out = command.args(args).current_dir(self.dir.path()).stdin(Stdio::null()).output()?;
        if out.status.success() {
            return Ok(());
        }
        let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
        if let Ok(log) = std::fs::read_to_string(self.dir.path().join("server.log")) {
            output.push_str(&log);
        }
        Err(TestServerError::Command { command: format!("{tool} {}", args.join(" ")), output })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    pub fn fresh_database(&self) -> Result<String, TestServerError> {
        let n = self.databases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("t{n}");
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)?;
        admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }
}

/// Creates a new, empty database on the server that `admin_url` reaches (the URL of any database
/// on it that the role may connect to, e.g. `postgres://courrier@127.0.0.1:5433/postgres`) and
/// returns the new database's URL. This is how the integration suite, run on PostgreSQL, gives each
/// test a database of its own on the one server `.ci/run` starts (`COURRIER_TEST_POSTGRES`):
/// nextest runs each test in a process of its own, so a cluster per test would cost an `initdb`
/// each.
pub fn fresh_database_at(admin_url: &str) -> Result<String, TestServerError> {
    create_database_at(admin_url, None)
}

/// A new database on the server that `admin_url` reaches, a copy of the database of `from_url`
/// (`CREATE DATABASE ... TEMPLATE`: nothing may be connected to it); the new database's URL. The
/// benches start each round on a copy of a loaded installation this way.
pub fn copy_database_at(admin_url: &str, from_url: &str) -> Result<String, TestServerError> {
    create_database_at(admin_url, Some(database_name(from_url)?))
}

/// Drops the database of `url` (one [`fresh_database_at`] or [`copy_database_at`] made), closing
/// whatever connection is still open on it; nothing when it is gone already.
pub fn drop_database_at(admin_url: &str, url: &str) -> Result<(), TestServerError> {
    let name = database_name(url)?;
    let mut admin = postgres::Client::connect(admin_url, postgres::NoTls)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
    Ok(())
}

/// The database of a URL this module made (letters, digits and `_` only: safe to name in SQL).
fn database_name(url: &str) -> Result<&str, TestServerError> {
    match url.rsplit_once('/') {
        Some((_, name)) if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => Ok(name),
        _ => Err(TestServerError::Command {
            command: "a database URL".into(),
            output: format!("{url} is not a postgres://.../database URL of a database made here"),
        }),
    }
}

fn create_database_at(admin_url: &str, template: Option<&str>) -> Result<String, TestServerError> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let (server, _) = admin_url.rsplit_once('/').ok_or_else(|| TestServerError::Command {
        command: "COURRIER_TEST_POSTGRES".into(),
        output: format!("{admin_url} is not a postgres://.../database URL"),
    })?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("t_{}_{nanos}_{n}", std::process::id());
    let mut admin = postgres::Client::connect(admin_url, postgres::NoTls)?;
    match template {
        None => admin.batch_execute(&format!("CREATE DATABASE {name}"))?,
        Some(from) => admin.batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {from}"))?,
    }
    Ok(format!("{server}/{name}"))
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let data = self.data_dir();
        if let Err(e) = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]) {
            eprintln!("cannot stop the test PostgreSQL server: {e}");
        }
    }
}
