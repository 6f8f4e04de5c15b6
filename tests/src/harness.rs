use courrier_cli::config::Config;
use courrier_cli::server::{self, Running};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace").to_path_buf()
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: ureq::http::HeaderMap,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// RFC 9110: a 401 carries `WWW-Authenticate` (the bearer scheme, courrier's realm); no
    /// other answer does.
    pub fn expect_challenge_on_401(&self) {
        let expected = (self.status == 401).then_some("Bearer realm=\"courrier\"");
        assert_eq!(self.header("www-authenticate"), expected, "status {}: {}", self.status, self.body);
    }

    /// Asserts the error envelope with this status and code; returns the body.
    pub fn expect_error(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{}", self.body);
        self.expect_challenge_on_401();
        let body = self.json();
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
        assert_eq!(body["meta"]["api_version"], "v1");
        assert_eq!(Some(body["meta"]["request_id"].as_str().unwrap()), self.header("x-request-id"));
        body
    }
}

/// How long the tests' clients keep an idle connection for reuse: under the server's idle limit
/// (an idle keep-alive connection is closed after its 10-15 s header-read time-out), so a client
/// never sends on a connection the server is closing. ureq's default (15 s) reused such
/// connections when a loaded machine stretched a test's pause between two requests past 10 s,
/// and the request failed with "Peer disconnected" (a client that probes before reuse, as curl
/// does, would not; ureq does not).
pub const CLIENT_IDLE_AGE: Duration = Duration::from_secs(5);

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .max_idle_age(CLIENT_IDLE_AGE)
        .build()
        .into()
}

fn read(mut resp: ureq::http::Response<ureq::Body>) -> Resp {
    let body = resp.body_mut().with_config().limit(64 * 1024 * 1024).read_to_string().unwrap_or_default();
    Resp { status: resp.status().as_u16(), headers: resp.headers().clone(), body }
}

/// A client of one server.
pub struct Client {
    pub base: String,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(addr: SocketAddr) -> Self {
        Self::with_timeout(addr, Duration::from_secs(30))
    }

    /// A client that waits up to `timeout` for each answer: for requests that queue behind others
    /// on purpose (a test of a concurrency cap), whose wait grows with the machine's load.
    pub fn with_timeout(addr: SocketAddr, timeout: Duration) -> Self {
        Self { base: format!("http://{addr}"), agent: agent(timeout) }
    }

    pub fn get(&self, path: &str) -> Resp {
        read(self.agent.get(format!("{}{path}", self.base)).call().expect("request failed"))
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Resp {
        let mut req = ureq::http::Request::builder().method(method).uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = match body {
            Some(b) => self.agent.run(req.body(b.to_vec()).unwrap()),
            None => self.agent.run(req.body(()).unwrap()),
        };
        read(resp.expect("request failed"))
    }

    /// As [`Client::request`], the body kept as bytes (images).
    pub fn request_bytes(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> (u16, ureq::http::HeaderMap, Vec<u8>) {
        let mut req = ureq::http::Request::builder().method(method).uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = match body {
            Some(b) => self.agent.run(req.body(b.to_vec()).unwrap()),
            None => self.agent.run(req.body(()).unwrap()),
        };
        let mut resp = resp.expect("request failed");
        let bytes = resp.body_mut().with_config().limit(64 * 1024 * 1024).read_to_vec().unwrap_or_default();
        (resp.status().as_u16(), resp.headers().clone(), bytes)
    }

    pub fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.request("POST", path, &[("content-type", "application/json")], Some(body.to_string().as_bytes()))
    }
}

/// Sends raw bytes on a new connection; reads until the server closes or `wait` passes.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8], wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The real server, in this process, on a free port, with a fresh data directory.
pub struct TestApp {
    pub addr: SocketAddr,
    /// The LMTP server (on a free port unless a test turned it off).
    pub lmtp: Option<SocketAddr>,
    pub client: Client,
    /// The same wired core the server uses, to set up accounts and data.
    pub core: courrier_cli::server::Services,
    running: Option<Running>,
    pub dir: tempfile::TempDir,
}

impl TestApp {
    pub fn spawn() -> Self {
        Self::spawn_with(&[])
    }

    /// With extra settings, e.g. `("COURRIER_SMTP_URL", &sink.url())`.
    pub fn spawn_with(vars: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // A test that names its own database (tests/src/postgres.rs) sets every setting it needs.
        let database =
            if vars.iter().any(|(k, _)| *k == "COURRIER_DATABASE_URL") { Vec::new() } else { database_env(dir.path()) };
        let env = |k: &str| match k {
            "COURRIER_LISTEN" => Some("127.0.0.1:0".to_owned()),
            "COURRIER_LMTP_LISTEN" if !vars.iter().any(|(name, _)| *name == k) => Some("127.0.0.1:0".to_owned()),
            // The server reads PDFs by running `<exe> sandbox`: here the test binary is the process,
            // so it is pointed at the `courrier` binary (OCR tests build it with `courrier_bin()`).
            "COURRIER_OCR_SANDBOX_BIN" if !vars.iter().any(|(name, _)| *name == k) => {
                Some(courrier_bin_path().display().to_string())
            }
            _ => vars
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
                .or_else(|| database.iter().find(|(name, _)| *name == k).map(|(_, v)| v.clone())),
        };
        let config = Config::from_env(env, Some(dir.path().to_path_buf())).unwrap();
        let bound = server::bind(&config, courrier_cli::build_info()).expect("server binds");
        let core = bound.services().clone();
        let running = server::spawn(bound);
        let (addr, lmtp) = (running.addr, running.lmtp_addr);
        Self { addr, lmtp, client: Client::new(addr), core, running: Some(running), dir }
    }

    pub fn get(&self, path: &str) -> Resp {
        self.client.get(path)
    }

    pub fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().expect("clean stop");
        }
    }
}

/// Set to the URL of a database on a running PostgreSQL server (`scripts/test-postgres` starts
/// one), the suite runs on PostgreSQL: every server a test starts gets a fresh database there, and
/// the CLI commands a test runs on that server's data directory reach the same database. Unset,
/// every test runs on SQLite in its data directory, the embedded default.
pub const POSTGRES_VAR: &str = "COURRIER_TEST_POSTGRES";

/// The master key the suite's servers share on PostgreSQL (what `COURRIER_MASTER_KEY` holds: 32
/// bytes, base64).
const TEST_MASTER_KEY: &str = "Y291cnJpZXItdGVzdC1tYXN0ZXIta2V5LTMyLWJ5dGU=";

/// Whether the suite runs on PostgreSQL (see [`POSTGRES_VAR`]).
pub fn on_postgres() -> bool {
    std::env::var_os(POSTGRES_VAR).is_some_and(|v| !v.is_empty())
}

/// The settings that put the installation of data directory `dir` on its PostgreSQL database:
/// none on SQLite; on PostgreSQL the database recorded in `dir` (created and recorded the first
/// time), so a server restarted on `dir`, or a CLI command run on it, finds the same data.
pub fn database_env(dir: &Path) -> Vec<(&'static str, String)> {
    let Some(admin) = std::env::var(POSTGRES_VAR).ok().filter(|v| !v.is_empty()) else {
        return Vec::new();
    };
    let record = dir.join(".test-database-url");
    let url = match std::fs::read_to_string(&record) {
        Ok(url) => url.trim().to_owned(),
        Err(_) => {
            let url = courrier_store_postgres::test_server::fresh_database_at(&admin)
                .unwrap_or_else(|e| panic!("{POSTGRES_VAR}={admin}: {e}"));
            std::fs::write(&record, &url).expect("the data directory takes the database's URL");
            url
        }
    };
    // Documents in the data directory, as on SQLite: the suite's OCR tests count and name their
    // files. Their bytes in the database (the default on PostgreSQL) have tests of their own
    // (tests/src/postgres.rs and the adapter's).
    let documents = dir.join("documents").display().to_string();
    vec![
        ("COURRIER_DATABASE_URL", url),
        ("COURRIER_MASTER_KEY", TEST_MASTER_KEY.to_owned()),
        ("COURRIER_DOCUMENTS_DIR", documents),
    ]
}

/// True, with a note on stderr, when the suite runs on PostgreSQL: for the few tests of what only
/// an SQLite installation has (its database file, its WAL, its locks).
pub fn skip_on_postgres(why: &str) -> bool {
    let skip = on_postgres();
    if skip {
        eprintln!("not run on PostgreSQL: {why}");
    }
    skip
}

/// The mailing store of the installation whose data directory is `dir` (its SQLite file, or the
/// PostgreSQL database the suite gave it), for tests that read what a stopped server left.
pub fn open_mailing_store(dir: &Path) -> std::sync::Arc<courrier_core::mailing::ports::Store> {
    match std::fs::read_to_string(dir.join(".test-database-url")) {
        Ok(url) => std::sync::Arc::new(courrier_store_postgres::PostgresStore::open(url.trim(), 0).unwrap()),
        Err(_) => std::sync::Arc::new(courrier_store_sqlite::SqliteStore::open(&dir.join("courrier.db"), 0).unwrap()),
    }
}

/// The `courrier` binary of this checkout, built once per test process (a no-op when fresh), so
/// that process tests never run a stale binary.
pub fn courrier_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(bin) = std::env::var("COURRIER_BIN") {
            return PathBuf::from(bin);
        }
        build_cli_bin("courrier");
        courrier_bin_path()
    })
}

/// The lean `courrier-sandbox` binary beside [`courrier_bin`]: as it is when `COURRIER_BIN` is set
/// (whoever set it built the workspace's binaries, as `.ci/run` does: a `cargo build` of one
/// package from inside a test resolved other features and rebuilt for minutes), built otherwise.
pub fn sandbox_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = courrier_bin().with_file_name("courrier-sandbox");
        if std::env::var_os("COURRIER_BIN").is_some() {
            assert!(
                bin.is_file(),
                "COURRIER_BIN is set but {} is missing: build the workspace's binaries",
                bin.display()
            );
            return bin;
        }
        build_cli_bin("courrier-sandbox");
        bin
    })
    .clone()
}

/// `cargo build` of one of courrier-cli's binaries, for a run without `COURRIER_BIN`.
fn build_cli_bin(name: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "courrier-cli", "--bin", name])
        .current_dir(workspace_root())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building {name} failed");
}

/// Where `cargo build` puts the `courrier` binary of this checkout (not built by this call). The
/// test executable is target/<profile>/deps/integration-<hash>.
pub fn courrier_bin_path() -> PathBuf {
    if let Ok(bin) = std::env::var("COURRIER_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().join("courrier")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs `courrier ARGS` to completion with a fresh data directory unless `--data-dir` is given.
pub fn run_cli(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String, String) {
    run_cli_with_stdin(args, env, None)
}

/// As [`run_cli`], feeding `stdin` (a password for `--password-stdin`).
pub fn run_cli_with_stdin(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> (ExitStatus, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(courrier_bin());
    let data_dir = match args.iter().position(|a| *a == "--data-dir") {
        Some(i) => args.get(i + 1).map_or_else(|| dir.path().to_path_buf(), PathBuf::from),
        None => {
            cmd.arg("--data-dir").arg(dir.path());
            dir.path().to_path_buf()
        }
    };
    cmd.args(args).env_remove("COURRIER_DATA_DIR").env("COURRIER_LOG", "warn");
    // A test that names its own database (or none) wins over the suite's.
    let own_database = env.iter().any(|(k, _)| *k == "COURRIER_DATABASE_URL");
    if on_postgres() && !own_database && !args.contains(&"version") {
        // The database is recorded in the data directory, which the command would create anyway
        // (`version` opens no installation and must leave no directory behind).
        let _ = std::fs::create_dir_all(&data_dir);
    }
    if !own_database && data_dir.is_dir() {
        for (k, v) in database_env(&data_dir) {
            cmd.env(k, v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = match stdin {
        None => cmd.stdin(Stdio::null()).output().expect("courrier runs"),
        Some(text) => {
            let mut child =
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("courrier runs");
            child.stdin.take().expect("piped").write_all(text.as_bytes()).expect("stdin written");
            child.wait_with_output().expect("courrier ends")
        }
    };
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// As [`run_cli_with_stdin`], on the data directory `data_dir` (one a test set up or a server
/// uses).
pub fn run_cli_in(
    data_dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> (ExitStatus, String, String) {
    let data_dir = data_dir.to_str().expect("a UTF-8 data directory");
    let all: Vec<&str> = ["--data-dir", data_dir].into_iter().chain(args.iter().copied()).collect();
    run_cli_with_stdin(&all, env, stdin)
}

/// The real binary serving on a free port.
pub struct ProcessApp {
    pub addr: SocketAddr,
    /// The LMTP server's address (a free port, unless the test set `COURRIER_LMTP_LISTEN`).
    pub lmtp: SocketAddr,
    pub client: Client,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl ProcessApp {
    pub fn spawn(env: &[(&str, &str)]) -> Self {
        Self::spawn_in(tempfile::tempdir().unwrap(), env)
    }

    /// The server on an existing data directory (prepared by the CLI, or left by a crash).
    pub fn spawn_in(dir: tempfile::TempDir, env: &[(&str, &str)]) -> Self {
        Self::spawn_cmd(dir, Command::new(courrier_bin()), env)
    }

    /// The server started with a soft open-file limit of `soft` (as many systems hand down 1,024),
    /// its hard limit unchanged.
    pub fn spawn_with_soft_open_files(soft: u64, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("ulimit -Sn {soft} && exec \"$0\" \"$@\"")).arg(courrier_bin());
        Self::spawn_cmd(tempfile::tempdir().unwrap(), cmd, env)
    }

    fn spawn_cmd(dir: tempfile::TempDir, mut cmd: Command, env: &[(&str, &str)]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let lmtp: SocketAddr = match env.iter().find(|(k, _)| *k == "COURRIER_LMTP_LISTEN") {
            Some((_, v)) => v.parse().unwrap_or_else(|_| "127.0.0.1:0".parse().unwrap()),
            None => format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        };
        cmd.arg("--data-dir")
            .arg(dir.path())
            .arg("serve")
            .env("COURRIER_LISTEN", addr.to_string())
            .env("COURRIER_LMTP_LISTEN", lmtp.to_string());
        if !env.iter().any(|(k, _)| *k == "COURRIER_DATABASE_URL") {
            for (k, v) in database_env(dir.path()) {
                cmd.env(k, v);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let app = Self { addr, lmtp, client: Client::new(addr), child, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "the server did not start listening within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        app
    }

    /// SIGKILL, as a crash would stop it: no shutdown, leases left held. The data directory is
    /// handed back for a restart.
    pub fn crash(mut self) -> tempfile::TempDir {
        self.child.kill().unwrap();
        let _ = self.child.wait();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit (at most `within`); returns its status and stderr.
    pub fn wait(mut self, within: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the server did not exit within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        (status, stderr)
    }
}

impl Drop for ProcessApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real SMTP server for the mail tests: Python's aiosmtpd on a free port of 127.0.0.1, writing
/// what it accepts into a Maildir of its own temporary directory. Killed on drop.
///
/// aiosmtpd's `Mailbox` handler stores each message as received (dot-unstuffed, with LF line
/// ends) and appends three headers after the message's own: `X-Peer: ('127.0.0.1', <client
/// port>)` (so messages of one connection share it), `X-MailFrom: <reverse-path>` (without brackets;
/// the null path is `<>`) and `X-RcptTo: <recipients, comma-separated>`.
///
/// aiosmtpd runs from the CI venv (`$COURRIER_TEST_VENV`, else `$XDG_CACHE_HOME` or
/// `$HOME/.cache`, + `/courrier-ci-venv`), which `.ci/run` creates; without it the test fails.
pub struct SmtpSink {
    port: u16,
    options: SinkOptions,
    child: Child,
    pub dir: tempfile::TempDir,
}

/// How an [`SmtpSink`] behaves. The default is aiosmtpd's stock `Mailbox` handler, which does not
/// offer PIPELINING.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkOptions {
    /// Offer PIPELINING in the EHLO reply (aiosmtpd reads pipelined commands fine but never says so).
    pub pipelining: bool,
    /// Refuse `RCPT TO` with this code for every address whose local part starts with `refuse`.
    pub refuse_rcpt: Option<u16>,
}

/// The handler behind the non-default [`SinkOptions`], written into the sink's directory.
const SINK_HANDLER: &str = r#"
"""courrier's test sink: aiosmtpd's Mailbox, optionally offering PIPELINING and refusing
RCPT TO addresses whose local part starts with "refuse" with a given code."""
from aiosmtpd.handlers import Mailbox


class Sink(Mailbox):
    def __init__(self, mail_dir, pipelining, refuse_code):
        super().__init__(mail_dir)
        self.pipelining = pipelining == "pipelining"
        self.refuse_code = int(refuse_code)

    @classmethod
    def from_cli(cls, parser, *args):
        return cls(*args)

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        if self.pipelining:
            responses.insert(len(responses) - 1, "250-PIPELINING")
        return responses

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.refuse_code and address.split("@")[0].startswith("refuse"):
            code = self.refuse_code
            return "%d %d.1.1 <%s>: refused by the test sink" % (code, code // 100, address)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"
"#;

/// The venv's python, checked once to have aiosmtpd.
fn sink_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| venv_python("aiosmtpd"))
}

/// The CI venv's python (`$COURRIER_TEST_VENV`, else `$XDG_CACHE_HOME` or `$HOME/.cache`, +
/// `/courrier-ci-venv`), checked to import `module`; the test fails with what to do otherwise.
pub fn venv_python(module: &str) -> PathBuf {
    let venv = std::env::var_os("COURRIER_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .expect("neither XDG_CACHE_HOME nor HOME is set");
        cache.join("courrier-ci-venv")
    });
    let python = venv.join("bin/python");
    let has_module = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_module,
        "these tests need {module} in the venv {}: run .ci/run once, or `{} -m pip install {module}` \
         (after `python3 -m venv {}` if it does not exist); COURRIER_TEST_VENV names another venv",
        venv.display(),
        python.display(),
        venv.display(),
    );
    python
}

impl SmtpSink {
    /// aiosmtpd's stock `Mailbox`: accepts everything, no PIPELINING.
    pub fn start() -> Self {
        Self::start_with(SinkOptions::default())
    }

    /// Refuses `RCPT TO` with `code` for local parts starting with `refuse`, accepts the rest.
    pub fn start_refusing(code: u16) -> Self {
        Self::start_with(SinkOptions { refuse_rcpt: Some(code), ..SinkOptions::default() })
    }

    pub fn start_with(options: SinkOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("courrier_sink.py"), SINK_HANDLER).unwrap();
        let port = free_port();
        let child = Self::spawn(dir.path(), port, options);
        let mut sink = Self { port, options, child, dir };
        sink.wait_until_listening();
        sink
    }

    fn spawn(dir: &Path, port: u16, options: SinkOptions) -> Child {
        let maildir = dir.join("maildir").display().to_string();
        let (class, args) = match options {
            SinkOptions { pipelining: false, refuse_rcpt: None } => ("aiosmtpd.handlers.Mailbox", vec![maildir]),
            SinkOptions { pipelining, refuse_rcpt } => {
                let pipelining = if pipelining { "pipelining" } else { "plain" };
                ("courrier_sink.Sink", vec![maildir, pipelining.into(), refuse_rcpt.unwrap_or(0).to_string()])
            }
        };
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("sink.log")).unwrap();
        Command::new(sink_python())
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}"), "-c", class])
            .args(args)
            .env("PYTHONPATH", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the venv's python starts")
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(self.addr()).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("aiosmtpd exited ({status}) before listening:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "aiosmtpd did not listen within 20 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What aiosmtpd wrote on stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sink.log")).unwrap_or_default()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its connections close) and starts it again on the same port and Maildir.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.dir.path(), self.port, self.options);
        self.wait_until_listening();
    }

    /// Every message received so far, raw, oldest first (by the Maildir file's modification time).
    pub fn messages(&self) -> Vec<String> {
        let mut files = Vec::new();
        for sub in ["new", "cur"] {
            let Ok(entries) = std::fs::read_dir(self.dir.path().join("maildir").join(sub)) else { continue };
            for entry in entries {
                let entry = entry.unwrap();
                let modified = entry.metadata().unwrap().modified().unwrap();
                files.push((modified, entry.path()));
            }
        }
        files.sort();
        files.into_iter().map(|(_, path)| std::fs::read_to_string(path).unwrap()).collect()
    }

    /// Waits until at least `n` messages arrived (at most `timeout`); returns them all.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let messages = self.messages();
            if messages.len() >= n {
                return messages;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} messages arrived within {timeout:?}:\n{}",
                messages.len(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
