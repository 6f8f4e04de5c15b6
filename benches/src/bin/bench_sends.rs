//! `bench-sends`: sends of `courrier serve` against baselines measured in the same run on the same
//! machine (issue 5's benchmarks). Scenarios (`--scenario`, default all):
//!
//! - `fanout`: one `POST .../sends` to a list of 100,000 active regular members, delivery workers
//!   off (`COURRIER_DELIVERY_WORKERS=0`), so the time is the submit transaction that queues every
//!   copy; against a bare baseline, 100,000 rows inserted into a table shaped like `copies` (same
//!   indexes) in one SQLite transaction with courrier's settings (WAL, `synchronous=FULL`).
//! - `throughput`: courrier's workers delivering one send of N copies to Postfix's `smtp-sink`,
//!   from the submit to the last copy `sent`, against Postfix's `smtp-source` sending N messages of
//!   the same size to the same sink over as many connections as courrier has workers.
//!   `--dkim` gives the domain a DKIM selector, so that every copy is signed; `--compare PATH`
//!   adds another courrier binary (an earlier build) as a third contender, on its own data
//!   directory, alternating with the other two: a same-run before/after ratio.
//! - `mailman`: one send to 2,000 members end to end, beside GNU Mailman 3 delivering one injected
//!   post (`mailman inject`) to the same 2,000 addresses through the same sink (a small SMTP sink
//!   in this program, which counts recipients as well as transactions: Mailman puts up to
//!   `max_recipients` recipients in one transaction).
//!
//! - `delivery` (issue 25): one send of N copies to `smtp-sink` delivered by one `courrier serve`
//!   (`--workers` delivery threads) against two servers and two `courrier worker` processes
//!   (as many threads each) on the same PostgreSQL database, alternating; copies/s and the ratio
//!   two/one. On SQLite, one server only: an SQLite installation cannot be shared across hosts.
//!
//! `--backend postgres|both` (default sqlite) runs `fanout` and `delivery` on PostgreSQL: each
//! installation a fresh database on the server of `--postgres URL` or on a scratch server the
//! harness starts (fsync on); `both` runs SQLite then PostgreSQL and ends with the figures side by
//! side. The baselines that write SQLite files (the bare fan-out insert, `smtp-source`, Mailman) are
//! measured on the SQLite runs only; `delivery` runs under `all` only with `--backend`.
//!
//! Contenders alternate round by round (baseline, courrier, baseline, courrier, ...); reports give
//! every round, the medians and the ratios. Results go to BENCHMARKS.md. Nothing here asserts on
//! timings.
//!
//! `bench-sends --smoke` runs everything at a tiny size without Mailman, and without
//! `smtp-source` when it is not installed (CI; it says so), in a few seconds.

use courrier_benches::mailman;
use courrier_benches::{
    Api, BENCH_EMAIL, Backend, Headline, Server, Store, check_status, create_api_key, create_bench_user, free_port,
    harness_main, json, loadavg, median, positive, serve_command, sibling, utc, worker_command,
};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

const DOMAIN: &str = "example.org";
const LIST: &str = "bench";
/// Seconds from `POST .../sends` to every copy queued, on 100,000 members.
const FANOUT_TARGET_SECS: f64 = 2.0;
/// courrier messages per second / smtp-source's.
const THROUGHPUT_TARGET: f64 = 0.5;
/// A send that has not settled after this long is reported as a failure of the run.
const SEND_TIMEOUT: Duration = Duration::from_secs(900);
/// Mailman: no new recipient at the sink for this long means it stopped delivering.
const MAILMAN_STALL: Duration = Duration::from_secs(60);

const INSTALL_POSTFIX: &str = "echo \"postfix postfix/main_mailer_type select No configuration\" | debconf-set-selections; \
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postfix";

const USAGE: &str = "usage: bench-sends [--scenario fanout|throughput|mailman|delivery|all (default)] [--smoke] [--courrier PATH] \
[--rounds N (3)] [--fanout-members N (100000)] [--messages N (10000)] [--workers N (2)] [--sessions N (= workers)] \
[--mailman-members N (2000)] [--mailman-rounds N (2)] [--mailman-url URL (http://127.0.0.1:8001)] \
[--mailman-auth USER:PASS] [--mailman-dir DIR ($COURRIER_MAILMAN_DIR or $TMPDIR/courrier-mailman3)] [--no-mailman] \
[--smtp-sink PATH] [--smtp-source PATH] [--scratch DIR] [--dkim] [--compare PATH (throughput: another courrier)] \
[--backend sqlite (default)|postgres|both] [--postgres ADMIN_URL (default: a scratch server)]";

fn main() -> ExitCode {
    harness_main("bench-sends", USAGE, Options::parse, run)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Fanout,
    Throughput,
    Mailman,
    Delivery,
    All,
}

impl Scenario {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "fanout" => Ok(Self::Fanout),
            "throughput" => Ok(Self::Throughput),
            "mailman" => Ok(Self::Mailman),
            "delivery" => Ok(Self::Delivery),
            "all" => Ok(Self::All),
            _ => Err(format!("--scenario must be fanout, throughput, mailman, delivery or all, got {raw:?}")),
        }
    }

    fn includes(self, s: Scenario) -> bool {
        self == Self::All || self == s
    }
}

#[derive(Debug, Clone)]
struct Options {
    scenario: Scenario,
    smoke: bool,
    courrier: PathBuf,
    /// Throughput: another courrier binary measured in the same rounds.
    compare: Option<PathBuf>,
    /// Throughput: the domain signs its copies (a DKIM selector).
    dkim: bool,
    smtp_sink: PathBuf,
    smtp_source: PathBuf,
    rounds: u32,
    fanout_members: u64,
    messages: u64,
    workers: u64,
    sessions: u64,
    mailman_members: u64,
    mailman_rounds: u32,
    /// None: no Mailman columns.
    mailman: Option<String>,
    mailman_auth: String,
    mailman_dir: PathBuf,
    scratch: Option<PathBuf>,
    /// The stores measured, in order.
    backends: Vec<Backend>,
    /// The PostgreSQL server's admin URL; None: a scratch server.
    postgres: Option<String>,
}

impl Options {
    /// `Ok(None)` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut scenario = Scenario::All;
        let mut smoke = false;
        let mut courrier = None;
        let (mut compare, mut dkim) = (None, false);
        let (mut smtp_sink, mut smtp_source) =
            (PathBuf::from("/usr/sbin/smtp-sink"), PathBuf::from("/usr/sbin/smtp-source"));
        let (mut mailman_url, mut no_mailman) = (None, false);
        let mut mailman_auth = String::from("restadmin:restpass");
        let mut mailman_dir = None;
        let mut scratch = None;
        let (mut backends, mut postgres) = (vec![Backend::Sqlite], None);
        let mut num = std::collections::BTreeMap::new();
        const NUMERIC: [&str; 8] = [
            "--rounds",
            "--fanout-members",
            "--messages",
            "--workers",
            "--sessions",
            "--mailman-members",
            "--mailman-rounds",
            "--unused",
        ];
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--scenario" => scenario = Scenario::parse(&value()?)?,
                "--smoke" => smoke = true,
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--compare" => compare = Some(PathBuf::from(value()?)),
                "--dkim" => dkim = true,
                "--smtp-sink" => smtp_sink = PathBuf::from(value()?),
                "--smtp-source" => smtp_source = PathBuf::from(value()?),
                "--mailman-url" => mailman_url = Some(value()?.trim_end_matches('/').to_owned()),
                "--mailman-auth" => mailman_auth = value()?,
                "--mailman-dir" => mailman_dir = Some(PathBuf::from(value()?)),
                "--no-mailman" => no_mailman = true,
                "--scratch" => scratch = Some(PathBuf::from(value()?)),
                "--backend" => backends = Backend::parse_list(&value()?)?,
                "--postgres" => postgres = Some(value()?),
                "-h" | "--help" => return Ok(None),
                other => match NUMERIC.iter().find(|n| **n == other && **n != "--unused") {
                    Some(name) => {
                        num.insert(*name, positive(name, &value()?)?);
                    }
                    None => return Err(format!("unknown argument {other:?}")),
                },
            }
        }
        let d = |full: u64, tiny: u64| if smoke { tiny } else { full };
        let get = |name: &str, default: u64| num.get(name).copied().unwrap_or(default);
        let as_u32 = |name: &str, v: u64| u32::try_from(v).map_err(|_| format!("{name} is too large"));
        let workers = get("--workers", 2);
        if workers > 64 {
            return Err("--workers must be at most 64 (COURRIER_DELIVERY_WORKERS' range)".into());
        }
        let courrier = match courrier {
            Some(p) => p,
            None => sibling("courrier")?,
        };
        let mailman_dir = mailman_dir.unwrap_or_else(|| match std::env::var_os("COURRIER_MAILMAN_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => std::env::temp_dir().join("courrier-mailman3"),
        });
        Ok(Some(Self {
            scenario,
            smoke,
            courrier,
            compare,
            dkim,
            smtp_sink,
            smtp_source,
            rounds: as_u32("--rounds", get("--rounds", d(3, 1)))?,
            fanout_members: get("--fanout-members", d(100_000, 50)),
            messages: get("--messages", d(10_000, 50)),
            workers,
            sessions: get("--sessions", workers),
            mailman_members: get("--mailman-members", d(2_000, 50)),
            mailman_rounds: as_u32("--mailman-rounds", get("--mailman-rounds", d(2, 1)))?,
            mailman: if smoke || no_mailman {
                None
            } else {
                Some(mailman_url.unwrap_or_else(|| "http://127.0.0.1:8001".to_owned()))
            },
            mailman_auth,
            mailman_dir,
            scratch,
            backends,
            postgres,
        }))
    }
}

fn run(opts: &Options) -> Result<(), String> {
    if !opts.courrier.is_file() {
        return Err(format!(
            "courrier binary not found at {} (build it: cargo build --release -p courrier-cli, or pass --courrier)",
            opts.courrier.display()
        ));
    }
    if let Some(other) = opts.compare.as_ref().filter(|p| !p.is_file()) {
        return Err(format!("--compare: no courrier binary at {}", other.display()));
    }
    let scratch = match &opts.scratch {
        Some(dir) => tempfile::TempDir::new_in(dir),
        None => tempfile::TempDir::new(),
    }
    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "bench-sends{}: {} UTC, {cores} cores, load average at start {}\n",
        smoke(opts),
        utc(SystemTime::now()),
        loadavg()
    );
    let pg = courrier_benches::backend::connect_for(&opts.backends, opts.postgres.as_deref(), "installation")?;
    let stores = courrier_benches::backend::stores(&opts.backends, pg.as_ref());
    let sqlite = opts.backends.contains(&Backend::Sqlite);
    let mut headlines: Vec<(Backend, Vec<Headline>)> = opts.backends.iter().map(|b| (*b, Vec::new())).collect();
    if opts.scenario.includes(Scenario::Fanout) {
        for (i, store) in stores.iter().enumerate() {
            let (report, figure) = fanout_scenario(opts, *store, scratch.path())?;
            println!("{report}");
            headlines[i].1.push(figure);
        }
    }
    if opts.scenario.includes(Scenario::Throughput) && sqlite {
        println!("{}", throughput_scenario(opts, scratch.path())?);
    }
    if opts.scenario.includes(Scenario::Mailman) && sqlite {
        println!("{}", mailman_scenario(opts, scratch.path())?);
    }
    // Not in `all` of the default run: its SQLite report is as it always was.
    let delivery = opts.scenario == Scenario::Delivery || (opts.scenario == Scenario::All && pg.is_some());
    if delivery {
        for (i, store) in stores.iter().enumerate() {
            let (report, figures) = delivery_scenario(opts, *store, scratch.path())?;
            println!("{report}");
            headlines[i].1.extend(figures);
        }
    }
    if headlines.len() > 1 {
        println!("{}", courrier_benches::backend::side_by_side(&headlines));
    }
    println!("load average at the end: {}; finished {} UTC", loadavg(), utc(SystemTime::now()));
    drop(scratch);
    drop(pg);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The message
// ---------------------------------------------------------------------------------------------

const SUBJECT: &str = "Bench: the monthly letter";

/// About 1.5 KB of text, and the same as HTML: a typical newsletter's size.
fn message_text() -> String {
    let para = "Bonjour à toutes et à tous. This month the association meets on Thursday at 19:00 in the \
                usual room; the agenda, the minutes of the last meeting and the accounts are attached to \
                the page of the meeting. Please answer before Monday if you come.";
    (0..6).map(|i| format!("{i}. {para}")).collect::<Vec<_>>().join("\n\n")
}

fn message_html(text: &str) -> String {
    let paras: String = text.split("\n\n").map(|p| format!("<p>{p}</p>\n")).collect();
    format!("<html><body>\n{paras}</body></html>")
}

fn member(i: u64) -> String {
    format!("m{i}@example.net")
}

// ---------------------------------------------------------------------------------------------
// SMTP sinks
// ---------------------------------------------------------------------------------------------

/// A local SMTP sink on 127.0.0.1: Postfix's `smtp-sink` (its `-c` counters read from its
/// output), or this program's own (`builtin`), which also counts recipients and keeps the size
/// of the last message's data.
struct Sink {
    port: u16,
    messages: Arc<AtomicU64>,
    recipients: Arc<AtomicU64>,
    last_size: Arc<AtomicU64>,
    child: Option<Child>,
    what: &'static str,
}

impl Sink {
    fn smtp_sink(bin: &Path, port: u16) -> Result<Self, String> {
        let mut cmd = Command::new(bin);
        cmd.arg("-c");
        if is_root() {
            // smtp-sink refuses to keep root's privileges.
            cmd.args(["-u", "nobody"]);
        }
        let mut child = cmd
            .arg(format!("127.0.0.1:{port}"))
            .arg("1024")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let messages = Arc::new(AtomicU64::new(0));
        let out = child.stdout.take().expect("piped");
        let counter = Arc::clone(&messages);
        // `-c` prints `sess=N quit=N mesg=N` and a carriage return after every session and message.
        std::thread::spawn(move || {
            let mut token = Vec::new();
            for b in BufReader::new(out).bytes() {
                let Ok(b) = b else { return };
                if b.is_ascii_whitespace() {
                    if let Some(n) = token.strip_prefix(b"mesg=").and_then(|d| std::str::from_utf8(d).ok())
                        && let Ok(n) = n.parse::<u64>()
                    {
                        counter.store(n, Ordering::Relaxed);
                    }
                    token.clear();
                } else {
                    token.push(b);
                }
            }
        });
        let sink = Self {
            port,
            messages,
            recipients: Arc::new(AtomicU64::new(0)),
            last_size: Arc::new(AtomicU64::new(0)),
            child: Some(child),
            what: "smtp-sink",
        };
        wait_port(port)?;
        Ok(sink)
    }

    fn builtin(port: u16) -> Result<Self, String> {
        let listener =
            TcpListener::bind(("127.0.0.1", port)).map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
        let sink = Self {
            port,
            messages: Arc::new(AtomicU64::new(0)),
            recipients: Arc::new(AtomicU64::new(0)),
            last_size: Arc::new(AtomicU64::new(0)),
            child: None,
            what: "builtin sink",
        };
        let counters = (Arc::clone(&sink.messages), Arc::clone(&sink.recipients), Arc::clone(&sink.last_size));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let c = (Arc::clone(&counters.0), Arc::clone(&counters.1), Arc::clone(&counters.2));
                std::thread::spawn(move || {
                    let _ = sink_session(stream, &c.0, &c.1, &c.2);
                });
            }
        });
        Ok(sink)
    }

    fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    fn recipients(&self) -> u64 {
        self.recipients.load(Ordering::Relaxed)
    }

    /// Waits until `count()` reaches `n`; fails when it stops moving for `stall`.
    fn wait(&self, count: impl Fn(&Self) -> u64, n: u64, stall: Duration) -> Result<(), String> {
        let (mut last, mut moved) = (count(self), Instant::now());
        while last < n {
            std::thread::sleep(Duration::from_millis(5));
            let now = count(self);
            if now != last {
                (last, moved) = (now, Instant::now());
            } else if moved.elapsed() > stall {
                return Err(format!("the {} got {last} of {n} after no progress for {}s", self.what, stall.as_secs()));
            }
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One session of the builtin sink: accepts every command (PIPELINING offered, replies written
/// in order), counts messages and recipients.
fn sink_session(
    stream: TcpStream,
    messages: &AtomicU64,
    recipients: &AtomicU64,
    size: &AtomicU64,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    out.write_all(b"220 bench-sink ESMTP\r\n")?;
    let mut line = Vec::new();
    let (mut rcpts, mut replies) = (0, Vec::new());
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).map(|v| v.to_ascii_uppercase()).unwrap_or_default();
        match verb.as_slice() {
            b"EHLO" => replies.extend_from_slice(b"250-bench-sink\r\n250-PIPELINING\r\n250 8BITMIME\r\n"),
            b"RCPT" => {
                rcpts += 1;
                replies.extend_from_slice(b"250 ok\r\n");
            }
            b"DATA" => {
                out.write_all(&replies)?;
                replies.clear();
                out.write_all(b"354 go ahead\r\n")?;
                let mut bytes = 0;
                loop {
                    line.clear();
                    if input.read_until(b'\n', &mut line)? == 0 {
                        return Ok(());
                    }
                    if line == b".\r\n" || line == b".\n" {
                        break;
                    }
                    bytes += line.len() as u64;
                }
                size.store(bytes, Ordering::Relaxed);
                recipients.fetch_add(rcpts, Ordering::Relaxed);
                messages.fetch_add(1, Ordering::Relaxed);
                rcpts = 0;
                replies.extend_from_slice(b"250 queued\r\n");
            }
            b"RSET" => {
                rcpts = 0;
                replies.extend_from_slice(b"250 ok\r\n");
            }
            b"QUIT" => {
                out.write_all(&replies)?;
                return out.write_all(b"221 bye\r\n");
            }
            _ => replies.extend_from_slice(b"250 ok\r\n"),
        }
        // Replies go out when the client waits for them: nothing more is buffered from it.
        if input.buffer().is_empty() {
            out.write_all(&replies)?;
            replies.clear();
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

fn wait_port(port: u16) -> Result<(), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("nothing listens on 127.0.0.1:{port} after 5 s"))
}

// ---------------------------------------------------------------------------------------------
// courrier: server, accounts, API
// ---------------------------------------------------------------------------------------------

/// Creates the installation of `data_dir` on `store`, the bench user (site admin) and an API key
/// with the CLI; the key.
fn prepare(opts: &Options, store: Store<'_>, data_dir: &Path) -> Result<String, String> {
    store.create(data_dir)?;
    prepare_with(&opts.courrier, data_dir)
}

/// [`prepare`] with the given courrier binary.
fn prepare_with(courrier: &Path, data_dir: &Path) -> Result<String, String> {
    std::fs::create_dir_all(data_dir).map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    create_bench_user(courrier, data_dir, true)?;
    create_api_key(courrier, data_dir, "bench-sends", "read,members:write,send,moderate,manage", 100_000)
}

/// A running `courrier serve` on a prepared data directory, with its delivery workers sending to
/// `127.0.0.1:smtp_port`.
struct Courrier {
    /// Dropped first: its keep-alive connection would hold the server's graceful shutdown.
    api: Api,
    server: Server,
}

impl Courrier {
    fn launch(opts: &Options, dir: &Path, key: &str, smtp_port: u16, workers: u64) -> Result<Self, String> {
        Self::launch_with(&opts.courrier, dir, key, smtp_port, workers)
    }

    /// [`Courrier::launch`] of the given binary.
    fn launch_with(courrier: &Path, dir: &Path, key: &str, smtp_port: u16, workers: u64) -> Result<Self, String> {
        let port = free_port()?;
        let mut cmd = serve_command(courrier, dir, port);
        cmd.env("COURRIER_PUBLIC_URL", "https://lists.example.org")
            .env("COURRIER_SMTP_URL", format!("smtp://127.0.0.1:{smtp_port}"))
            .env("COURRIER_DELIVERY_WORKERS", workers.to_string())
            .env("COURRIER_OCR_WORKERS", "1");
        // SIGTERM when dropped: the server closes its database cleanly (the fan-out template is
        // copied after).
        let mut server = Server::start("courrier", cmd, port, dir.join("server.log"))?.terminate_on_drop();
        server.wait_healthy()?;
        Ok(Self { api: Api::bearer(&format!("http://127.0.0.1:{port}"), key), server })
    }

    /// The domain and a list named `list` (either may exist already).
    fn create_list(&self, list: &str) -> Result<(), String> {
        self.api.expect("POST", "/api/v1/domains", &serde_json::json!({ "name": DOMAIN }), &[201, 409])?;
        let body = serde_json::json!({
            "name": list,
            "display_name": format!("Bench {list}"),
            "owner_email": BENCH_EMAIL,
            "subscription_policy": "open",
        });
        self.api.expect("POST", &format!("/api/v1/domains/{DOMAIN}/lists"), &body, &[201, 409])?;
        Ok(())
    }

    /// Gives the domain a DKIM selector: a key is made and every copy is signed.
    fn sign_copies(&self) -> Result<(), String> {
        let body = serde_json::json!({ "dkim_selector": "bench" });
        self.api.expect("PATCH", &format!("/api/v1/domains/{DOMAIN}"), &body, &[200])?;
        Ok(())
    }

    /// Members `m{first}..m{first+n-1}@example.net`, all regular, through the import API.
    fn import(&self, list: &str, first: u64, n: u64) -> Result<(), String> {
        let t = Instant::now();
        let mut csv = String::from("email,display_name,delivery_mode\n");
        for i in first..first + n {
            let _ = writeln!(csv, "{},,regular", member(i));
        }
        let path = format!("/api/v1/domains/{DOMAIN}/lists/{list}/members/import?consent_evidence=bench-sends");
        let (status, body) = self.api.send("POST", &path, "text/csv", csv.as_bytes(), &[])?;
        check_status("POST members/import", status, &body, &[200])?;
        let added = json(&body)?["data"]["added"].as_u64();
        if added != Some(n) {
            return Err(format!("the import did not add {n} members: {}", body.chars().take(300).collect::<String>()));
        }
        eprintln!("  {n} members imported into {list} in {:.1} s", t.elapsed().as_secs_f64());
        Ok(())
    }

    /// `POST .../sends`; the send's id, its recipients and the time the request took.
    fn submit(&self, list: &str) -> Result<(i64, u64, Duration), String> {
        let text = message_text();
        let body = serde_json::json!({ "subject": SUBJECT, "text": text, "html": message_html(&text) });
        let t = Instant::now();
        let (status, answer) =
            self.api.post_json(&format!("/api/v1/domains/{DOMAIN}/lists/{list}/sends"), &body, &[])?;
        let took = t.elapsed();
        check_status("POST sends", status, &answer, &[202])?;
        let data = &json(&answer)?["data"];
        match (data["send_id"].as_i64(), data["recipients"].as_u64()) {
            (Some(id), Some(n)) => Ok((id, n, took)),
            _ => Err(format!("POST sends answered {answer}")),
        }
    }

    fn send_status(&self, list: &str, id: i64) -> Result<serde_json::Value, String> {
        let (status, body) = self.api.get(&format!("/api/v1/domains/{DOMAIN}/lists/{list}/sends/{id}"))?;
        check_status("GET send", status, &body, &[200])?;
        Ok(json(&body)?["data"].clone())
    }

    /// Polls the send every 10 ms until it is no longer queued or sending; checks that every one
    /// of its `n` copies was sent.
    fn wait_sent(&mut self, list: &str, id: i64, n: u64) -> Result<(), String> {
        let deadline = Instant::now() + SEND_TIMEOUT;
        loop {
            let s = self.send_status(list, id)?;
            match s["state"].as_str() {
                Some("queued" | "sending") if Instant::now() < deadline => {
                    self.server.check_alive()?;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Some("completed") if s["counts"]["sent"].as_u64() == Some(n) => return Ok(()),
                _ => return Err(format!("send {id} did not deliver its {n} copies: {s}")),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 1: fan-out to 100,000 members
// ---------------------------------------------------------------------------------------------

/// `copies` as `store-sqlite/src/migrations/0004_sends.sql` creates it, with its indexes.
const COPIES_DDL: &str = "CREATE TABLE copies (
    id INTEGER PRIMARY KEY, send_id INTEGER NOT NULL, list_id INTEGER NOT NULL, member_id INTEGER NOT NULL,
    recipient TEXT NOT NULL, dest_domain TEXT NOT NULL, state TEXT NOT NULL CHECK (state IN ('queued', 'sending',
    'sent', 'deferred', 'failed', 'bounced', 'cancelled')), attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL, lease_until INTEGER, last_error TEXT, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL);
CREATE INDEX copies_due ON copies (state, next_attempt_at) WHERE state IN ('queued', 'deferred');
CREATE INDEX copies_leased ON copies (lease_until) WHERE state = 'sending';
CREATE INDEX copies_send_state ON copies (send_id, state);";

/// The bare baseline: `n` rows into `copies` in one transaction (prepared statement, WAL,
/// `synchronous=FULL`), on a fresh database; the time from `BEGIN` to after `COMMIT`.
fn bare_insert(db: &Path, n: u64) -> Result<Duration, String> {
    let e = |e: rusqlite::Error| format!("sqlite baseline: {e}");
    remove_db(db);
    let mut conn = rusqlite::Connection::open(db).map_err(e)?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;").map_err(e)?;
    conn.execute_batch(COPIES_DDL).map_err(e)?;
    let t = Instant::now();
    let tx = conn.transaction().map_err(e)?;
    {
        let mut st = tx
            .prepare(
                "INSERT INTO copies (send_id, list_id, member_id, recipient, dest_domain, state, next_attempt_at, \
                 created_at, updated_at) VALUES (1, 1, ?1, ?2, 'example.net', 'queued', ?3, ?3, ?3)",
            )
            .map_err(e)?;
        let now = 1_800_000_000_000_000_i64;
        for i in 0..n {
            st.execute(rusqlite::params![i as i64, member(i), now]).map_err(e)?;
        }
    }
    tx.commit().map_err(e)?;
    let took = t.elapsed();
    drop(conn);
    remove_db(db);
    Ok(took)
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

fn fanout_scenario(opts: &Options, store: Store<'_>, scratch: &Path) -> Result<(String, Headline), String> {
    let n = opts.fanout_members;
    let started = (SystemTime::now(), loadavg());
    // The members are loaded once into a template data directory; each round's server starts on
    // a fresh copy of it (on PostgreSQL, of its database too), so every round submits to the same
    // list with an empty queue.
    let template = scratch.join("fanout-template");
    let key = prepare(opts, store, &template)?;
    eprintln!("fanout: loading {n} members");
    {
        let c = Courrier::launch(opts, &template, &key, 9, 0)?;
        c.create_list(LIST)?;
        c.import(LIST, 0, n)?;
    }
    let mut rounds = Vec::new();
    for round in 1..=opts.rounds {
        // The bare baseline writes an SQLite file: measured on the SQLite run only.
        let bare = if store.is_postgres() {
            Duration::ZERO
        } else {
            eprintln!("fanout round {round}/{}: bare SQLite, {n} rows in one transaction", opts.rounds);
            let bare = bare_insert(&scratch.join("bare.db"), n)?;
            eprintln!("  {:.3} s", bare.as_secs_f64());
            bare
        };
        eprintln!("fanout round {round}/{}: courrier POST sends, workers off{}", opts.rounds, on(store));
        let dir = scratch.join(format!("fanout-{round}"));
        store.copy(&template, &dir)?;
        let took = {
            let c = Courrier::launch(opts, &dir, &key, 9, 0)?;
            let (id, recipients, took) = c.submit(LIST)?;
            let s = c.send_status(LIST, id)?;
            if recipients != n || s["counts"]["queued"].as_u64() != Some(n) {
                return Err(format!("the send queued {recipients} copies, not {n}: {s}"));
            }
            took
        };
        store.remove(&dir);
        eprintln!("  {:.3} s", took.as_secs_f64());
        rounds.push((bare, took));
    }
    store.remove(&template);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "### fanout{}{} ({} UTC, load average {} at its start)",
        on(store),
        smoke(opts),
        utc(started.0),
        started.1
    );
    let _ = writeln!(
        out,
        "one `POST /api/v1/domains/{DOMAIN}/lists/{LIST}/sends` (text + html, {} bytes) to {n} active regular \
         members, `COURRIER_DELIVERY_WORKERS=0`: the time of the request (the 202 comes after the transaction that \
         queues every copy commits); each round on a fresh copy of the same data directory. Bare SQLite: {n} rows \
         into a table shaped like `copies` (same indexes), prepared INSERTs in one transaction, WAL, \
         `synchronous=FULL`, BEGIN to after COMMIT",
        message_text().len() + message_html(&message_text()).len()
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "| round | bare SQLite | courrier submit | copies/s | ratio courrier/bare |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    // On PostgreSQL the bare SQLite baseline is not run.
    let bare = |b: f64| if store.is_postgres() { "n/a".to_owned() } else { secs(b) };
    let ratio = |b: f64, c: f64| if store.is_postgres() { "n/a".to_owned() } else { format!("{:.2}", c / b) };
    for (i, (b, c)) in rounds.iter().enumerate() {
        let (b, c) = (b.as_secs_f64(), c.as_secs_f64());
        let _ = writeln!(out, "| {} | {} | {} | {:.0} | {} |", i + 1, bare(b), secs(c), n as f64 / c, ratio(b, c));
    }
    let b = median(rounds.iter().map(|r| r.0.as_secs_f64()).collect());
    let c = median(rounds.iter().map(|r| r.1.as_secs_f64()).collect());
    let _ = writeln!(
        out,
        "| **median** | **{}** | **{}** | **{:.0}** | **{}** |",
        bare(b),
        secs(c),
        n as f64 / c,
        ratio(b, c)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "fan-out to {n} members: {} (target < {FANOUT_TARGET_SECS} s{}: {})",
        secs(c),
        if n == 100_000 { "" } else { " on 100,000" },
        if n != 100_000 {
            "not this size"
        } else if c < FANOUT_TARGET_SECS {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok((out, Headline { what: format!("fan-out of {n} copies (submit)"), value: n as f64 / c, rate: true }))
}

// ---------------------------------------------------------------------------------------------
// Scenario 2: delivery throughput against smtp-source
// ---------------------------------------------------------------------------------------------

fn throughput_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let n = opts.messages;
    let started = (SystemTime::now(), loadavg());
    let have_sink = opts.smtp_sink.is_file();
    let have_source = have_sink && opts.smtp_source.is_file();
    if !have_source {
        let missing = if have_sink { &opts.smtp_source } else { &opts.smtp_sink };
        if !opts.smoke {
            return Err(format!(
                "{} is missing: install Postfix's tools ({INSTALL_POSTFIX}; its services need not run), or pass \
                 --smtp-source/--smtp-sink",
                missing.display()
            ));
        }
        eprintln!("throughput (smoke): {} is missing, so courrier alone against the builtin sink", missing.display());
    }
    let dir = scratch.join("throughput");
    let key = prepare(opts, Store::Sqlite, &dir)?;

    // The size of courrier's copy, measured at a builtin sink with a one-member list, sets the
    // size of smtp-source's messages.
    let probe = Sink::builtin(free_port()?)?;
    let copy_size = {
        let mut c = Courrier::launch(opts, &dir, &key, probe.port, 1)?;
        c.create_list("probe")?;
        if opts.dkim {
            c.sign_copies()?;
        }
        c.import("probe", 0, 1)?;
        c.create_list(LIST)?;
        c.import(LIST, 0, n)?;
        let (id, _, _) = c.submit("probe")?;
        c.wait_sent("probe", id, 1)?;
        probe.last_size.load(Ordering::Relaxed)
    };
    let payload = if have_source {
        // smtp-source adds its own headers (From, To, Date, Message-Id) to the -l payload.
        let l = 1000;
        source(opts, probe.port, 1, 1, l)?;
        let overhead = probe.last_size.load(Ordering::Relaxed).saturating_sub(l);
        let payload = copy_size.saturating_sub(overhead);
        source(opts, probe.port, 1, 1, payload)?;
        eprintln!(
            "throughput: courrier's copy is {copy_size} bytes; smtp-source -l {payload} sends {} bytes",
            probe.last_size.load(Ordering::Relaxed)
        );
        Some(payload)
    } else {
        None
    };
    let source_size = probe.last_size.load(Ordering::Relaxed);
    drop(probe);

    let sink = if have_sink { Sink::smtp_sink(&opts.smtp_sink, free_port()?)? } else { Sink::builtin(free_port()?)? };
    // The other binary on a data directory of its own, prepared the same way (its idle workers
    // only poll while the others run).
    let mut other = match &opts.compare {
        Some(bin) => {
            let other_dir = scratch.join("throughput-compare");
            let other_key = prepare_with(bin, &other_dir)?;
            let c = Courrier::launch_with(bin, &other_dir, &other_key, sink.port, opts.workers)?;
            c.create_list(LIST)?;
            if opts.dkim {
                c.sign_copies()?;
            }
            c.import(LIST, 0, n)?;
            Some(c)
        }
        None => None,
    };
    let mut c = Courrier::launch(opts, &dir, &key, sink.port, opts.workers)?;
    let mut rounds: Vec<(Option<Duration>, Duration)> = Vec::new();
    let mut compared: Vec<Duration> = Vec::new();
    for round in 1..=opts.rounds {
        let s = match payload {
            Some(l) => {
                eprintln!("throughput round {round}/{}: smtp-source, {n} messages", opts.rounds);
                let before = sink.messages();
                let t = Instant::now();
                source(opts, sink.port, opts.sessions, n, l)?;
                sink.wait(Sink::messages, before + n, Duration::from_secs(10))?;
                let took = t.elapsed();
                eprintln!("  {:.2} s", took.as_secs_f64());
                Some(took)
            }
            None => None,
        };
        if let Some(o) = other.as_mut() {
            eprintln!("throughput round {round}/{}: compared courrier, one send of {n} copies", opts.rounds);
            let before = sink.messages();
            let t = Instant::now();
            let (id, recipients, _) = o.submit(LIST)?;
            if recipients != n {
                return Err(format!("the compared send has {recipients} recipients, not {n}"));
            }
            o.wait_sent(LIST, id, n)?;
            let took = t.elapsed();
            sink.wait(Sink::messages, before + n, Duration::from_secs(10))?;
            eprintln!("  {:.2} s", took.as_secs_f64());
            compared.push(took);
        }
        eprintln!("throughput round {round}/{}: courrier, one send of {n} copies", opts.rounds);
        let before = sink.messages();
        let t = Instant::now();
        let (id, recipients, _) = c.submit(LIST)?;
        if recipients != n {
            return Err(format!("the send has {recipients} recipients, not {n}"));
        }
        c.wait_sent(LIST, id, n)?;
        let took = t.elapsed();
        sink.wait(Sink::messages, before + n, Duration::from_secs(10))?;
        eprintln!("  {:.2} s", took.as_secs_f64());
        rounds.push((s, took));
    }
    drop(c);
    drop(other);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "### throughput{} ({} UTC, load average {} at its start)",
        smoke(opts),
        utc(started.0),
        started.1
    );
    let _ = writeln!(
        out,
        "sink: {} on 127.0.0.1 (every message accepted, nothing stored); courrier: `courrier serve` with \
         `COURRIER_DELIVERY_WORKERS={}`, one `POST .../sends` to {n} members, timed from the POST until `GET \
         .../sends/ID` (polled every 10 ms) says `completed` with {n} sent; copy size {copy_size} bytes at the sink; \
         copies {}. smtp-source: {}",
        sink.what,
        opts.workers,
        if opts.dkim { "DKIM-signed (rsa-sha256, a 2048-bit key made by `openssl`)" } else { "unsigned" },
        match payload {
            Some(l) => format!(
                "`smtp-source -d -s {} -m {n} -l {l} -f {BENCH_EMAIL} -t {} 127.0.0.1:PORT` ({source_size} bytes \
                 a message at the sink; -d: connections are reused, as courrier's are; -s: as many connections as \
                 courrier has workers)",
                opts.sessions,
                member(0)
            ),
            None => "not installed, not measured".into(),
        }
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | smtp-source | smtp-source msg/s | courrier | courrier msg/s | ratio courrier/smtp-source |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    for (i, (s, c)) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {} |",
            i + 1,
            s.map_or("-".into(), |d| secs(d.as_secs_f64())),
            s.map_or("-".into(), |d| format!("{:.0}", rate(d))),
            secs(c.as_secs_f64()),
            rate(*c),
            s.map_or("-".into(), |d| format!("{:.2}", rate(*c) / rate(d)))
        );
    }
    let cm = median(rounds.iter().map(|r| rate(r.1)).collect());
    let sm = median(rounds.iter().filter_map(|r| r.0.map(rate)).collect());
    let _ = writeln!(
        out,
        "| **median** | | **{}** | | **{cm:.0}** | **{}** |",
        if sm.is_nan() { "-".into() } else { format!("{sm:.0}") },
        if sm.is_nan() { "-".into() } else { format!("{:.2}", cm / sm) }
    );
    let _ = writeln!(out);
    if sm.is_nan() {
        let _ = writeln!(out, "smtp-source not installed: no ratio ({INSTALL_POSTFIX})");
    } else {
        let _ = writeln!(
            out,
            "ratio courrier/smtp-source (median messages/s): {:.2} (target >= {THROUGHPUT_TARGET}: {})",
            cm / sm,
            if opts.smoke {
                "smoke size, no verdict"
            } else if cm / sm >= THROUGHPUT_TARGET {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    if let Some(bin) = &opts.compare {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "compared: `{}` on its own data directory, the same list and sink, run just before courrier in \
             each round",
            bin.display()
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "| round | compared | compared msg/s | courrier msg/s | ratio courrier/compared |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for (i, (o, (_, c))) in compared.iter().zip(&rounds).enumerate() {
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.0} | {:.2} |",
                i + 1,
                secs(o.as_secs_f64()),
                rate(*o),
                rate(*c),
                rate(*c) / rate(*o)
            );
        }
        let om = median(compared.iter().map(|d| rate(*d)).collect());
        let _ = writeln!(out, "| **median** | | **{om:.0}** | **{cm:.0}** | **{:.2}** |", cm / om);
    }
    Ok(out)
}

/// `smtp-source -d -s SESSIONS -m COUNT -l PAYLOAD` to 127.0.0.1:port; waits for it to finish.
fn source(opts: &Options, port: u16, sessions: u64, count: u64, payload: u64) -> Result<(), String> {
    let out = Command::new(&opts.smtp_source)
        .args(["-d", "-s", &sessions.to_string(), "-m", &count.to_string(), "-l", &payload.to_string()])
        .args(["-f", BENCH_EMAIL, "-t", &member(0)])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", opts.smtp_source.display()))?;
    if !out.status.success() {
        return Err(format!("smtp-source failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: one send to 2,000 members beside Mailman 3
// ---------------------------------------------------------------------------------------------

/// Mailman 3 core's REST API and its `mailman` command (for `inject`).
struct Mailman {
    api: Api,
    dir: PathBuf,
    list: String,
}

impl Mailman {
    /// Checks that Mailman answers, reads the SMTP port it delivers to, creates a fresh list.
    fn connect(opts: &Options, url: &str) -> Result<(Self, u16), String> {
        let api = Api::basic(url, &opts.mailman_auth);
        mailman::check_reachable(&api)?;
        let cfg = opts.mailman_dir.join("mailman.cfg");
        let text = std::fs::read_to_string(&cfg).map_err(|e| {
            format!(
                "cannot read {} (pass --mailman-dir, or start Mailman with scripts/peer-mailman3): {e}",
                cfg.display()
            )
        })?;
        let smtp_port = text
            .lines()
            .find_map(|l| l.strip_prefix("smtp_port:").map(str::trim))
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(25);
        let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let list = format!("sends{stamp}");
        // Posts from a non-member are accepted (the bench's sender is not a member); no welcome.
        mailman::create_list(
            &api,
            &list,
            &[("send_welcome_message", "False"), ("default_nonmember_action", "accept")],
        )?;
        Ok((Self { api, dir: opts.mailman_dir.clone(), list }, smtp_port))
    }

    /// The list's `personalize`: `none` (bulk delivery) or `individual` (one copy per member).
    fn personalize(&self, how: &str) -> Result<(), String> {
        let path = format!("/3.1/lists/{}.example.com/config", self.list);
        let (status, body) = self.api.form("PATCH", &path, &[("personalize", how)])?;
        check_status("Mailman PATCH personalize", status, &body, &[204])
    }

    fn add(&self, i: u64) -> Result<(), String> {
        mailman::add_member(&self.api, &format!("{}.example.com", self.list), &member(i), None)
    }

    /// `mailman inject` of one post (the same text and html as courrier's) into the list.
    fn inject(&self, scratch: &Path, round: u32) -> Result<(), String> {
        let text = message_text();
        let post = format!(
            "From: {BENCH_EMAIL}\r\nTo: {list}@example.com\r\nSubject: {SUBJECT}\r\nMessage-ID: \
             <bench-sends-{list}-{round}@example.org>\r\nDate: Mon, 23 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/alternative; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain; \
             charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{text}\r\n--b\r\nContent-Type: text/html; \
             charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{html}\r\n--b--\r\n",
            list = self.list,
            html = message_html(&text)
        );
        let file = scratch.join(format!("post-{round}.eml"));
        std::fs::write(&file, post).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        let out = Command::new(self.dir.join("venv/bin/mailman"))
            .env("MAILMAN_CONFIG_FILE", self.dir.join("mailman.cfg"))
            .args(["--run-as-root", "inject", "-f"])
            .arg(&file)
            .arg(format!("{}@example.com", self.list))
            .output()
            .map_err(|e| format!("cannot run mailman inject: {e}"))?;
        if !out.status.success() {
            return Err(format!("mailman inject failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
        }
        Ok(())
    }
}

fn mailman_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let n = opts.mailman_members;
    let started = (SystemTime::now(), loadavg());
    let mut note = None;
    let mailman = match &opts.mailman {
        None => {
            note = Some(if opts.smoke { "smoke run: no Mailman" } else { "--no-mailman" }.to_owned());
            None
        }
        Some(url) => match Mailman::connect(opts, url) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("mailman: not measured: {e}");
                note = Some(format!("Mailman not measured: {e}"));
                None
            }
        },
    };
    // The sink listens where Mailman delivers (its smtp_port); courrier is pointed at it too.
    let port = match &mailman {
        Some((_, port)) => *port,
        None => free_port()?,
    };
    let sink = Sink::builtin(port)?;
    let dir = scratch.join("mailman-courrier");
    let key = prepare(opts, Store::Sqlite, &dir)?;
    let mut c = Courrier::launch(opts, &dir, &key, port, opts.workers)?;
    c.create_list(LIST)?;
    c.import(LIST, 0, n)?;
    if let Some((m, _)) = &mailman {
        eprintln!("mailman: adding {n} members to {}@example.com one by one (about 16 a second)", m.list);
        let t = Instant::now();
        for i in 0..n {
            m.add(i)?;
            if (i + 1) % 250 == 0 {
                eprintln!("  {}/{n}, {:.0} s", i + 1, t.elapsed().as_secs_f64());
            }
        }
    }
    // Each round: Mailman as installed (bulk: up to `max_recipients`, 10, recipients a
    // transaction), Mailman personalised (`personalize=individual`: one copy and one transaction per
    // member, as courrier's copies are, each with its own VERP address and unsubscription link),
    // then courrier.
    let mut rounds: Vec<([Option<MailmanRun>; 2], Duration, u64)> = Vec::new();
    for round in 1..=opts.mailman_rounds {
        let mut mm = [None, None];
        if let Some((m, _)) = &mailman {
            for (k, personalize) in ["none", "individual"].into_iter().enumerate() {
                m.personalize(personalize)?;
                eprintln!(
                    "mailman round {round}/{}: Mailman (personalize={personalize}), one post to {n} members",
                    opts.mailman_rounds
                );
                let (r0, m0) = (sink.recipients(), sink.messages());
                let t = Instant::now();
                m.inject(scratch, round * 2 + k as u32)?;
                let inject = t.elapsed();
                sink.wait(Sink::recipients, r0 + n, MAILMAN_STALL)?;
                let run = MailmanRun { took: t.elapsed(), transactions: sink.messages() - m0, inject };
                eprintln!(
                    "  {:.1} s ({:.1} s in `mailman inject`), {} SMTP transactions",
                    run.took.as_secs_f64(),
                    inject.as_secs_f64(),
                    run.transactions
                );
                mm[k] = Some(run);
            }
        }
        eprintln!("mailman round {round}/{}: courrier, one send to {n} members", opts.mailman_rounds);
        let (r0, m0) = (sink.recipients(), sink.messages());
        let t = Instant::now();
        let (id, _, _) = c.submit(LIST)?;
        c.wait_sent(LIST, id, n)?;
        let took = t.elapsed();
        sink.wait(Sink::recipients, r0 + n, Duration::from_secs(10))?;
        eprintln!("  {:.2} s", took.as_secs_f64());
        rounds.push((mm, took, sink.messages() - m0));
    }
    drop(c);

    let mut out = String::new();
    let _ =
        writeln!(out, "### mailman{} ({} UTC, load average {} at its start)", smoke(opts), utc(started.0), started.1);
    let _ = writeln!(
        out,
        "{n} members (the same addresses on both); sink: this program's SMTP sink on 127.0.0.1:{port}, counting \
         recipients and transactions; Mailman: `mailman inject` of one multipart/alternative post (same text and \
         html) into a fresh list, timed from the start of `mailman inject` until the sink has {n} recipients, \
         as installed (personalize=none: bulk, up to 10 recipients a transaction) and with \
         `personalize=individual` (one copy a member); courrier: `POST .../sends` with \
         `COURRIER_DELIVERY_WORKERS={}`, timed until the send is `completed` with {n} sent",
        opts.workers
    );
    if let Some(note) = &note {
        let _ = writeln!(out, "{note}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | Mailman bulk | copies/s | transactions | Mailman personalised | copies/s | transactions | \
         courrier | copies/s | transactions | ratio courrier/Mailman bulk | ratio courrier/Mailman personalised |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let cells = |r: &Option<MailmanRun>| match r {
        Some(r) => format!(
            "{} ({} inject) | {:.1} | {}",
            secs(r.took.as_secs_f64()),
            secs(r.inject.as_secs_f64()),
            rate(r.took),
            r.transactions
        ),
        None => "- | - | -".into(),
    };
    let ratio = |c: Duration, r: &Option<MailmanRun>| {
        r.as_ref().map_or("-".into(), |r| format!("{:.0}", rate(c) / rate(r.took)))
    };
    for (i, (mm, c, ct)) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {ct} | {} | {} |",
            i + 1,
            cells(&mm[0]),
            cells(&mm[1]),
            secs(c.as_secs_f64()),
            rate(*c),
            ratio(*c, &mm[0]),
            ratio(*c, &mm[1])
        );
    }
    let cm = median(rounds.iter().map(|r| rate(r.1)).collect());
    let mmed = |k: usize| median(rounds.iter().filter_map(|r| r.0[k].as_ref().map(|m| rate(m.took))).collect());
    let f = |v: f64, digits: usize| if v.is_nan() { "-".into() } else { format!("{v:.digits$}") };
    let _ = writeln!(
        out,
        "| **median** | | **{}** | | | **{}** | | | **{cm:.0}** | | **{}** | **{}** |",
        f(mmed(0), 1),
        f(mmed(1), 1),
        f(cm / mmed(0), 0),
        f(cm / mmed(1), 0)
    );
    Ok(out)
}

/// One Mailman delivery of a post: from the start of `mailman inject` to the last recipient at
/// the sink; the sink's transactions; the time `mailman inject` itself took.
#[derive(Debug, Clone, Copy)]
struct MailmanRun {
    took: Duration,
    transactions: u64,
    inject: Duration,
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: one server against two servers and two workers on one PostgreSQL database
// ---------------------------------------------------------------------------------------------

/// `courrier worker` on `dir`, its delivery workers sending to 127.0.0.1:`smtp_port`, started and
/// waited for (its log says its delivery threads run); stopped with SIGTERM when dropped.
fn start_worker(opts: &Options, dir: &Path, smtp_port: u16, name: &str) -> Result<Server, String> {
    let mut cmd = worker_command(&opts.courrier, dir);
    cmd.env("COURRIER_PUBLIC_URL", "https://lists.example.org")
        .env("COURRIER_SMTP_URL", format!("smtp://127.0.0.1:{smtp_port}"))
        .env("COURRIER_DELIVERY_WORKERS", opts.workers.to_string())
        .env("COURRIER_LOG", "warn,courrier_cli=info");
    let mut worker = Server::start(name, cmd, 0, dir.join(format!("{name}.log")))?.terminate_on_drop();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        worker.check_alive()?;
        if std::fs::read_to_string(&worker.log).is_ok_and(|l| l.contains("delivery workers running")) {
            return Ok(worker);
        }
        if Instant::now() > deadline {
            return Err(format!("{name} did not start its delivery workers within 30 s; {}", worker.log_tail()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One send of `n` copies from the submit on `c` to `completed` with `n` sent and the sink
/// holding them all; the time.
fn deliver_one_send(c: &mut Courrier, sink: &Sink, n: u64) -> Result<Duration, String> {
    let before = sink.messages();
    let t = Instant::now();
    let (id, recipients, _) = c.submit(LIST)?;
    if recipients != n {
        return Err(format!("the send has {recipients} recipients, not {n}"));
    }
    c.wait_sent(LIST, id, n)?;
    let took = t.elapsed();
    sink.wait(Sink::messages, before + n, Duration::from_secs(10))?;
    Ok(took)
}

fn delivery_scenario(opts: &Options, store: Store<'_>, scratch: &Path) -> Result<(String, Vec<Headline>), String> {
    let n = opts.messages;
    let started = (SystemTime::now(), loadavg());
    let sink = if opts.smtp_sink.is_file() {
        Sink::smtp_sink(&opts.smtp_sink, free_port()?)?
    } else if opts.smoke {
        eprintln!("delivery (smoke): {} is missing, so the builtin sink", opts.smtp_sink.display());
        Sink::builtin(free_port()?)?
    } else {
        return Err(format!("{} is missing: install Postfix's tools ({INSTALL_POSTFIX})", opts.smtp_sink.display()));
    };
    let dir = scratch.join(if store.is_postgres() { "delivery-pg" } else { "delivery" });
    let key = prepare(opts, store, &dir)?;
    {
        // Workers off while the list is loaded.
        let c = Courrier::launch(opts, &dir, &key, sink.port, 0)?;
        c.create_list(LIST)?;
        c.import(LIST, 0, n)?;
    }
    // Per round: one server; two servers and two workers (PostgreSQL only); the load average.
    let mut rounds: Vec<(Duration, Option<Duration>, String)> = Vec::new();
    for round in 1..=opts.rounds {
        let load = loadavg();
        eprintln!("delivery round {round}/{}{}: one server, {n} copies", opts.rounds, on(store));
        let one = {
            let mut c = Courrier::launch(opts, &dir, &key, sink.port, opts.workers)?;
            deliver_one_send(&mut c, &sink, n)?
        };
        eprintln!("  {:.2} s", one.as_secs_f64());
        let two = if store.is_postgres() {
            eprintln!("delivery round {round}/{}: two servers and two workers, {n} copies", opts.rounds);
            let mut a = Courrier::launch(opts, &dir, &key, sink.port, opts.workers)?;
            let mut b = Courrier::launch(opts, &dir, &key, sink.port, opts.workers)?;
            let mut w1 = start_worker(opts, &dir, sink.port, "courrier-worker-1")?;
            let mut w2 = start_worker(opts, &dir, sink.port, "courrier-worker-2")?;
            let took = deliver_one_send(&mut a, &sink, n)?;
            for process in [&mut b.server, &mut w1, &mut w2] {
                process.check_alive()?;
            }
            eprintln!("  {:.2} s", took.as_secs_f64());
            Some(took)
        } else {
            None
        };
        rounds.push((one, two, load));
    }
    store.remove(&dir);

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### delivery{}{} ({} UTC, load average {} at its start)",
        on(store),
        smoke(opts),
        utc(started.0),
        started.1
    );
    let _ = writeln!(
        out,
        "sink: {} on 127.0.0.1; one `POST .../sends` to {n} members timed from the POST until `GET .../sends/ID` \
         says `completed` with {n} sent and the sink has them all. **one**: one `courrier serve` with \
         `COURRIER_DELIVERY_WORKERS={w}`. **two**: two `courrier serve` and two `courrier worker` processes on the \
         same database, `COURRIER_DELIVERY_WORKERS={w}` each ({} delivery threads claiming from one queue with \
         `FOR UPDATE SKIP LOCKED`), the send submitted to the first server. Every process is started, and its \
         workers running, before the POST; the two alternate round by round on the same installation.",
        sink.what,
        4 * opts.workers,
        w = opts.workers
    );
    if !store.is_postgres() {
        let _ = writeln!(
            out,
            "two: n/a on SQLite: its database is a file of one host (every process of an SQLite installation \
             runs there, sharing it through its locks), so it has no several-server configuration to measure"
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "| round | load average | one | one copies/s | two | two copies/s | ratio two/one |");
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    let na = || "n/a".to_owned();
    for (i, (one, two, load)) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {load} | {} | {:.0} | {} | {} | {} |",
            i + 1,
            secs(one.as_secs_f64()),
            rate(*one),
            two.map_or_else(na, |d| secs(d.as_secs_f64())),
            two.map_or_else(na, |d| format!("{:.0}", rate(d))),
            two.map_or_else(na, |d| format!("{:.2}", rate(d) / rate(*one)))
        );
    }
    let one = median(rounds.iter().map(|r| rate(r.0)).collect());
    let two: Vec<f64> = rounds.iter().filter_map(|r| r.1.map(rate)).collect();
    let two = if two.is_empty() { f64::NAN } else { median(two) };
    let ratio = median(rounds.iter().filter_map(|r| r.1.map(|d| rate(d) / rate(r.0))).collect());
    let _ = writeln!(
        out,
        "| **median** | | | **{one:.0}** | | **{}** | **{}** |",
        if two.is_nan() { na() } else { format!("{two:.0}") },
        if ratio.is_nan() { na() } else { format!("{ratio:.2}") }
    );
    if !ratio.is_nan() {
        let _ = writeln!(out);
        let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
        let verdict = if opts.smoke {
            "smoke size, no verdict"
        } else if cores < 4 {
            "four processes, the sink and PostgreSQL share these cores: no verdict"
        } else if ratio >= 1.6 {
            "met"
        } else {
            "NOT met"
        };
        let _ = writeln!(
            out,
            "ratio two/one (median of the rounds'): {ratio:.2} (target >= 1.6 on a machine with the cores for it; \
             {cores} cores here: {verdict})"
        );
    }
    let figures = vec![
        Headline { what: format!("delivery of {n} copies, one server"), value: one, rate: true },
        Headline { what: format!("delivery of {n} copies, two servers + two workers"), value: two, rate: true },
    ];
    Ok((out, figures))
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn smoke(opts: &Options) -> &'static str {
    if opts.smoke { " (smoke)" } else { "" }
}

/// A scenario's title suffix: nothing on SQLite (its reports as they always were).
fn on(store: Store<'_>) -> &'static str {
    if store.is_postgres() { " on PostgreSQL" } else { "" }
}

fn secs(s: f64) -> String {
    if s < 1.0 { format!("{:.0} ms", s * 1e3) } else { format!("{s:.2} s") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoke_sizes_never_use_mailman() {
        let parse = |args: &[&str]| Options::parse(args.iter().map(|s| (*s).to_owned()));
        let smoke = parse(&["--smoke", "--courrier", "/c", "--mailman-url", "http://x"]).unwrap().unwrap();
        assert!(smoke.mailman.is_none());
        assert_eq!((smoke.rounds, smoke.fanout_members, smoke.messages, smoke.mailman_members), (1, 50, 50, 50));
        let full = parse(&["--courrier", "/c", "--workers", "4"]).unwrap().unwrap();
        assert_eq!(full.mailman.as_deref(), Some("http://127.0.0.1:8001"));
        assert_eq!((full.fanout_members, full.workers, full.sessions), (100_000, 4, 4));
        assert!(parse(&["--rounds", "0"]).is_err());
        assert!(parse(&["--workers", "65"]).is_err());
    }

    #[test]
    fn sqlite_alone_unless_a_backend_is_named() {
        let parse = |args: &[&str]| Options::parse(args.iter().map(|s| (*s).to_owned()));
        let default = parse(&["--courrier", "/c"]).unwrap().unwrap();
        assert_eq!((default.backends, default.postgres), (vec![Backend::Sqlite], None));
        let both = parse(&["--courrier", "/c", "--backend", "both", "--postgres", "postgres://u@h/postgres"])
            .unwrap()
            .unwrap();
        assert_eq!(both.backends, vec![Backend::Sqlite, Backend::Postgres]);
        assert_eq!(both.postgres.as_deref(), Some("postgres://u@h/postgres"));
        assert_eq!(
            parse(&["--courrier", "/c", "--scenario", "delivery"]).unwrap().unwrap().scenario,
            Scenario::Delivery
        );
        assert!(parse(&["--courrier", "/c", "--backend", "oracle"]).is_err());
    }

    #[test]
    fn the_builtin_sink_counts_pipelined_messages_and_recipients() {
        let sink = Sink::builtin(free_port().unwrap()).unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", sink.port)).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("220"));
        s.write_all(b"EHLO x\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nRCPT TO:<c@y>\r\nDATA\r\n").unwrap();
        for _ in 0..7 {
            line.clear();
            r.read_line(&mut line).unwrap();
        }
        assert!(line.starts_with("354"), "{line}");
        s.write_all(b"Subject: x\r\n\r\nhi\r\n.\r\nQUIT\r\n").unwrap();
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "250 queued\r\n221 bye\r\n");
        assert_eq!((sink.messages(), sink.recipients(), sink.last_size.load(Ordering::Relaxed)), (1, 2, 18));
    }
}
