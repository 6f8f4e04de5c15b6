//! `bench-mailin`: mail in through `courrier serve`'s LMTP server, against baselines measured in
//! the same run on the same machine (issue 20). Scenarios (`--scenario`, default both):
//!
//! - `accept`: posts per second taken (250 after the durable store) by courrier's LMTP server from
//!   Postfix's `smtp-source -L` (10 KiB messages, 4 sessions, to a list of 10 members, posting
//!   open, the server's workers processing and delivering meanwhile), beside the same
//!   `smtp-source -L` into Postfix's bare `smtp-sink -L` (which stores nothing). Target >= 0.5.
//! - `latency`: a post to a list of 10,000 members, from the LMTP 250 to its last copy at the
//!   sink (Postfix's `smtp-sink`), beside the same message sent through `POST .../sends`, from
//!   the POST to its last copy. Target <= 1.2x.
//!
//! Contenders alternate round by round; the report gives every round, the medians and the ratio.
//! `--smoke` runs both at a tiny size in a few seconds (CI). Nothing here asserts on timings.

use courrier_benches::{
    Api, BENCH_EMAIL, Server, check_status, create_api_key, create_bench_user, free_port, harness_main, json, loadavg,
    median, positive, serve_command, sibling, utc,
};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

const DOMAIN: &str = "example.org";
const ACCEPT_TARGET: f64 = 0.5;
const LATENCY_TARGET: f64 = 1.2;
const POSTER: &str = "poster@example.net";

const USAGE: &str = "usage: bench-mailin [--scenario accept|latency|all (default)] [--smoke] [--courrier PATH] \
[--rounds N (3)] [--posts N (2000)] [--warmup-posts N (2000; 0: none)] [--sessions N (4)] [--size BYTES (10240)] [--accept-members N (10)] \
[--members N (10000)] [--workers N (2)] [--smtp-sink PATH] [--smtp-source PATH] [--scratch DIR]";

fn main() -> ExitCode {
    harness_main("bench-mailin", USAGE, Options::parse, run)
}

struct Options {
    accept: bool,
    latency: bool,
    smoke: bool,
    courrier: PathBuf,
    smtp_sink: PathBuf,
    smtp_source: PathBuf,
    rounds: u64,
    posts: u64,
    /// Posts sent to each contender before the measured rounds, not counted (0: none).
    warmup: u64,
    sessions: u64,
    size: u64,
    accept_members: u64,
    members: u64,
    workers: u64,
    scratch: Option<PathBuf>,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let (mut accept, mut latency, mut smoke) = (true, true, false);
        let mut courrier = None;
        let (mut smtp_sink, mut smtp_source) =
            (PathBuf::from("/usr/sbin/smtp-sink"), PathBuf::from("/usr/sbin/smtp-source"));
        let mut scratch = None;
        let mut warmup = None;
        let mut num = std::collections::BTreeMap::new();
        const NUMERIC: [&str; 8] =
            ["--rounds", "--posts", "--sessions", "--size", "--accept-members", "--members", "--workers", "--unused"];
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--scenario" => match value()?.as_str() {
                    "accept" => (accept, latency) = (true, false),
                    "latency" => (accept, latency) = (false, true),
                    "all" => (accept, latency) = (true, true),
                    other => return Err(format!("--scenario must be accept, latency or all, got {other:?}")),
                },
                "--smoke" => smoke = true,
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--smtp-sink" => smtp_sink = PathBuf::from(value()?),
                "--smtp-source" => smtp_source = PathBuf::from(value()?),
                "--scratch" => scratch = Some(PathBuf::from(value()?)),
                "--warmup-posts" => {
                    let raw = value()?;
                    warmup =
                        Some(raw.parse::<u64>().map_err(|_| format!("--warmup-posts must be a number, got {raw:?}"))?);
                }
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
        let workers = get("--workers", 2);
        if workers > 64 {
            return Err("--workers must be at most 64 (COURRIER_DELIVERY_WORKERS' range)".into());
        }
        Ok(Some(Self {
            accept,
            latency,
            smoke,
            courrier: match courrier {
                Some(p) => p,
                None => sibling("courrier")?,
            },
            smtp_sink,
            smtp_source,
            rounds: get("--rounds", d(3, 1)),
            posts: get("--posts", d(2_000, 20)),
            warmup: warmup.unwrap_or(d(2_000, 20)),
            sessions: get("--sessions", 4),
            size: get("--size", 10 * 1024),
            accept_members: get("--accept-members", 10),
            members: get("--members", d(10_000, 20)),
            workers,
            scratch,
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
    for tool in [&opts.smtp_sink, &opts.smtp_source] {
        if !tool.is_file() {
            return Err(format!(
                "{} is missing: install Postfix's tools (scripts/setup-system --test)",
                tool.display()
            ));
        }
    }
    let scratch = match &opts.scratch {
        Some(dir) => tempfile::TempDir::new_in(dir),
        None => tempfile::TempDir::new(),
    }
    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "bench-mailin{}: {} UTC, {cores} cores, load average at start {}\n",
        smoke(opts),
        utc(SystemTime::now()),
        loadavg()
    );
    let dir = scratch.path().join("courrier");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    create_bench_user(&opts.courrier, &dir, true)?;
    let key = create_api_key(&opts.courrier, &dir, "bench-mailin", "read,members:write,send,moderate,manage", 100_000)?;
    // Copies of posts and sends go to one smtp-sink that counts them.
    let copies = Sink::start(&opts.smtp_sink, Protocol::Smtp)?;
    let mut c = Courrier::launch(opts, &dir, &key, copies.port, opts.workers)?;
    if opts.accept {
        // A second server with processing paused (no workers: it stores, processes nothing): the
        // store alone, without the processing and delivery that share its write lane.
        let paused_dir = scratch.path().join("paused");
        std::fs::create_dir_all(&paused_dir).map_err(|e| format!("cannot create {}: {e}", paused_dir.display()))?;
        create_bench_user(&opts.courrier, &paused_dir, true)?;
        let paused_key = create_api_key(
            &opts.courrier,
            &paused_dir,
            "bench-mailin",
            "read,members:write,send,moderate,manage",
            1000,
        )?;
        let mut paused = Courrier::launch(opts, &paused_dir, &paused_key, copies.port, 0)?;
        let floor_dir = scratch.path().join("floor");
        std::fs::create_dir_all(&floor_dir).map_err(|e| format!("cannot create {}: {e}", floor_dir.display()))?;
        println!("{}", accept_scenario(opts, &mut c, &mut paused, &copies, &floor_dir)?);
    }
    if opts.latency {
        println!("{}", latency_scenario(opts, &mut c, &copies)?);
    }
    println!("load average at the end: {}; finished {} UTC", loadavg(), utc(SystemTime::now()));
    Ok(())
}

fn smoke(opts: &Options) -> &'static str {
    if opts.smoke { " (smoke size: numbers mean nothing)" } else { "" }
}

fn member(i: u64) -> String {
    format!("m{i}@example.net")
}

// ---------------------------------------------------------------------------------------------
// Postfix's smtp-sink, counting messages
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Smtp,
    Lmtp,
}

/// `smtp-sink -c [-L] 127.0.0.1:PORT 1024`: accepts everything, stores nothing; its `-c` counters
/// (`mesg=N`, printed after every message) are read from its output.
struct Sink {
    port: u16,
    messages: Arc<AtomicU64>,
    child: Child,
}

impl Sink {
    fn start(bin: &Path, protocol: Protocol) -> Result<Self, String> {
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.arg("-c");
        if protocol == Protocol::Lmtp {
            cmd.arg("-L");
        }
        // smtp-sink refuses to keep root's privileges.
        if is_root() {
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
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("{} did not listen on {port}", bin.display()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self { port, messages, child })
    }

    fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Waits until the sink counted `n` messages; the instant it saw them (polled every ms).
    fn wait_for(&self, n: u64, timeout: Duration) -> Result<Instant, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.messages() >= n {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                return Err(format!("the sink counted {} messages, not {n}, after {timeout:?}", self.messages()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

// ---------------------------------------------------------------------------------------------
// courrier
// ---------------------------------------------------------------------------------------------

struct Courrier {
    /// Dropped first: its keep-alive connection would hold the server's graceful shutdown.
    api: Api,
    server: Server,
    lmtp: u16,
    db: PathBuf,
}

impl Courrier {
    fn launch(opts: &Options, dir: &Path, key: &str, smtp_port: u16, workers: u64) -> Result<Self, String> {
        let (port, lmtp) = (free_port()?, free_port()?);
        let mut cmd = serve_command(&opts.courrier, dir, port);
        cmd.env("COURRIER_PUBLIC_URL", "https://lists.example.org")
            .env("COURRIER_SMTP_URL", format!("smtp://127.0.0.1:{smtp_port}"))
            .env("COURRIER_LMTP_LISTEN", format!("127.0.0.1:{lmtp}"))
            .env("COURRIER_DELIVERY_WORKERS", workers.to_string())
            .env("COURRIER_OCR_WORKERS", "1");
        let mut server = Server::start("courrier", cmd, port, dir.join("server.log"))?.terminate_on_drop();
        server.wait_healthy()?;
        let api = Api::bearer(&format!("http://127.0.0.1:{port}"), key);
        api.expect("POST", "/api/v1/domains", &serde_json::json!({ "name": DOMAIN }), &[201, 409])?;
        Ok(Self { api, server, lmtp, db: dir.join("courrier.db") })
    }

    /// A list open to posts with `n` regular members.
    fn list_with_members(&self, list: &str, n: u64) -> Result<(), String> {
        let body = serde_json::json!({
            "name": list, "display_name": format!("Bench {list}"), "owner_email": BENCH_EMAIL,
            "subscription_policy": "open",
        });
        self.api.expect("POST", &format!("/api/v1/domains/{DOMAIN}/lists"), &body, &[201])?;
        let path = format!("/api/v1/domains/{DOMAIN}/lists/{list}");
        self.api.expect("PATCH", &path, &serde_json::json!({ "posting_policy": "open" }), &[200])?;
        let mut csv = String::from("email,display_name,delivery_mode\n");
        for i in 0..n {
            let _ = writeln!(csv, "{},,regular", member(i));
        }
        let import = format!("{path}/members/import?consent_evidence=bench-mailin");
        let (status, body) = self.api.send("POST", &import, "text/csv", csv.as_bytes(), &[])?;
        check_status("POST members/import", status, &body, &[200])?;
        match json(&body)?["data"]["added"].as_u64() {
            Some(added) if added == n => Ok(()),
            _ => Err(format!("the import did not add {n} members: {}", body.chars().take(300).collect::<String>())),
        }
    }
}

/// `smtp-source -L -d -s SESSIONS -m COUNT -l SIZE` to `to` at 127.0.0.1:port; its wall time.
fn source_lmtp(opts: &Options, port: u16, count: u64, to: &str) -> Result<Duration, String> {
    let t = Instant::now();
    let out = Command::new(&opts.smtp_source)
        .args(["-L", "-d", "-s", &opts.sessions.to_string(), "-m", &count.to_string()])
        .args(["-l", &opts.size.to_string(), "-f", POSTER, "-t", to])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", opts.smtp_source.display()))?;
    let took = t.elapsed();
    if !out.status.success() {
        return Err(format!("smtp-source failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(took)
}

fn accept_scenario(
    opts: &Options,
    c: &mut Courrier,
    paused: &mut Courrier,
    copies: &Sink,
    floor_dir: &Path,
) -> Result<String, String> {
    let started = (SystemTime::now(), loadavg());
    let (n, list) = (opts.posts, "accept");
    c.list_with_members(list, opts.accept_members)?;
    paused.list_with_members(list, opts.accept_members)?;
    let to = format!("{list}@{DOMAIN}");
    let bare = Sink::start(&opts.smtp_sink, Protocol::Lmtp)?;
    let floor = Floor::create(&floor_dir.join("floor.db"))?;
    let mut rounds = Vec::new();
    // Per round: how long after courrier's last 250 its last copy reached the sink.
    let mut drains = Vec::new();
    let (mut stored_before, mut paused_before) = (0, 0);
    let mut copies_expected = copies.messages();
    // A warm-up round, not counted: the first posts into a freshly started server grow its spool's
    // WAL file from nothing (each of those fsyncs also commits the file's new size: every first
    // round of a run was the slowest, for every build); a server that has been running overwrites
    // its WAL in place. Every contender gets the same warm-up, and its figures are printed.
    let mut warm = None;
    let first = if opts.warmup > 0 { 0 } else { 1 };
    for round in first..=opts.rounds {
        let n = if round == 0 { opts.warmup } else { n };
        let round_name = if round == 0 { "warm-up".to_owned() } else { format!("round {round}/{}", opts.rounds) };
        let round_name = round_name.as_str();
        eprintln!("accept {round_name}: smtp-source -L into smtp-sink -L, {n} posts");
        let before = bare.messages();
        let b = source_lmtp(opts, bare.port, n, &to)?;
        bare.wait_for(before + n, Duration::from_secs(10))?;
        eprintln!("  {:.2} s", b.as_secs_f64());
        eprintln!("accept {round_name}: smtp-source -L into courrier's LMTP server, {n} posts");
        let t = source_lmtp(opts, c.lmtp, n, &to)?;
        c.server.check_alive()?;
        // Every post acknowledged was stored: the inbound store holds n more.
        let stored = count_inbound(&c.db)?;
        if stored - stored_before != n {
            return Err(format!("courrier stored {} posts, not {n}", stored - stored_before));
        }
        stored_before = stored;
        eprintln!("  {:.2} s", t.as_secs_f64());
        // The posts it acknowledged are still being processed and delivered (10 copies each):
        // the next contenders must not share the cores with that backlog, or they are measured
        // slower than they are (and the next round's smtp-sink baseline with them).
        copies_expected += n * opts.accept_members;
        let drain = Instant::now();
        copies.wait_for(copies_expected, Duration::from_secs(600))?;
        let drain = drain.elapsed();
        eprintln!("  its backlog processed and delivered {:.2} s later", drain.as_secs_f64());
        eprintln!("accept {round_name}: the same into courrier with processing paused");
        let p = source_lmtp(opts, paused.lmtp, n, &to)?;
        paused.server.check_alive()?;
        let stored = count_inbound(&paused.db)?;
        if stored - paused_before != n {
            return Err(format!("courrier (paused) stored {} posts, not {n}", stored - paused_before));
        }
        paused_before = stored;
        eprintln!("  {:.2} s", p.as_secs_f64());
        eprintln!("accept {round_name}: floor, bare rusqlite inserts of the same rows");
        let (alone, grouped) = floor.run(n, opts.sessions, opts.size)?;
        eprintln!(
            "  {:.2} s one commit each, {:.2} s {} rows a commit",
            alone.as_secs_f64(),
            grouped.as_secs_f64(),
            opts.sessions
        );
        if round == 0 {
            warm = Some(([b, t, p, alone, grouped], drain));
        } else {
            rounds.push([b, t, p, alone, grouped]);
            drains.push(drain);
        }
    }
    let rate = |d: &Duration| n as f64 / d.as_secs_f64();
    let mut out = String::new();
    let _ =
        writeln!(out, "### accept{} ({} UTC, load average {} at its start)", smoke(opts), utc(started.0), started.1);
    let _ = writeln!(
        out,
        "`smtp-source -L -d -s {s} -m {n} -l {} -f {POSTER} -t {to} 127.0.0.1:PORT` into Postfix's `smtp-sink -L` \
         (accepts, stores nothing), then into `courrier serve`'s LMTP server (each post stored durably before its \
         250; the list has {} members and posting open; `COURRIER_DELIVERY_WORKERS={}` process and deliver the \
         posts meanwhile to an `smtp-sink`), then into a second server with processing paused \
         (`COURRIER_DELIVERY_WORKERS=0`: it stores and does nothing else). Wall time of smtp-source. {warm}Floor: the same \
         {n} rows ({} bytes each, the inbound table's columns) inserted by bare rusqlite into a WAL database with \
         `synchronous=FULL`, by {s} threads each committing every row alone (`BEGIN IMMEDIATE`, `INSERT`, \
         `COMMIT`), and by one thread committing {s} rows at a time (what {s} sessions waiting for their 250 can \
         share at best: a durable store before the reply caps the rate at {s} messages per fsync). Backlog: how \
         long after courrier's last 250 the last of the round's copies reached the sink (processing, which gives way \
         to busy LMTP sessions for at most `COURRIER_MAIL_IN_DEFER_MS`, and delivery); end to end: the round's posts \
         over the time from its first post to its last copy.",
        opts.size,
        opts.accept_members,
        opts.workers,
        opts.size,
        s = opts.sessions,
        warm = if opts.warmup > 0 {
            format!(
                "Before the measured rounds, a warm-up of {} posts into each contender, not counted (its row is \
                 printed): the first posts into a freshly started server grow its spool's WAL file from nothing. ",
                opts.warmup
            )
        } else {
            String::new()
        },
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | smtp-sink -L | courrier | courrier, processing paused | floor: {s} threads, a commit each | floor: {s} rows a commit | courrier/smtp-sink | paused/smtp-sink | {s}-rows floor/smtp-sink | backlog after the last 250 | courrier end to end |",
        s = opts.sessions
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // One row: the round's label, its five durations, its backlog, the posts it sent.
    let row = |out: &mut String, label: &str, r: &[Duration; 5], d: &Duration, posts: u64| {
        let rate = |d: &Duration| posts as f64 / d.as_secs_f64();
        let _ = writeln!(
            out,
            "| {label} | {:.0}/s | {:.0}/s | {:.0}/s | {:.0}/s | {:.0}/s | {:.2} | {:.2} | {:.2} | {:.2} s | {:.0}/s |",
            rate(&r[0]),
            rate(&r[1]),
            rate(&r[2]),
            rate(&r[3]),
            rate(&r[4]),
            rate(&r[1]) / rate(&r[0]),
            rate(&r[2]) / rate(&r[0]),
            rate(&r[4]) / rate(&r[0]),
            d.as_secs_f64(),
            rate(&(r[1] + *d)),
        );
    };
    if let Some((r, d)) = &warm {
        row(&mut out, &format!("warm-up, {} posts, not counted", opts.warmup), r, d, opts.warmup);
    }
    for (i, (r, d)) in rounds.iter().zip(&drains).enumerate() {
        row(&mut out, &(i + 1).to_string(), r, d, n);
    }
    let med = |k: usize| median(rounds.iter().map(|r| rate(&r[k])).collect());
    let (bm, cm, pm, am, gm) = (med(0), med(1), med(2), med(3), med(4));
    let dm = median(drains.iter().map(Duration::as_secs_f64).collect());
    let em = median(rounds.iter().zip(&drains).map(|(r, d)| rate(&(r[1] + *d))).collect());
    let _ = writeln!(
        out,
        "| **median** | **{bm:.0}/s** | **{cm:.0}/s** | **{pm:.0}/s** | **{am:.0}/s** | **{gm:.0}/s** | **{:.2}** | **{:.2}** | **{:.2}** | **{dm:.2} s** | **{em:.0}/s** |",
        cm / bm,
        pm / bm,
        gm / bm
    );
    let _ = writeln!(out);
    let verdict = if opts.smoke {
        "smoke size, no verdict"
    } else if cm / bm >= ACCEPT_TARGET {
        "met"
    } else {
        "NOT met"
    };
    let _ = writeln!(
        out,
        "ratio courrier/smtp-sink -L (median posts/s): {:.2} (target >= {ACCEPT_TARGET}: {verdict}); processing paused {:.2}; \
         the {}-rows-a-commit floor {:.2}",
        cm / bm,
        pm / bm,
        opts.sessions,
        gm / bm
    );
    Ok(out)
}

/// The floor of a durable store: bare rusqlite inserting rows like the inbound store's into a
/// WAL database with `synchronous=FULL` (courrier's settings), no server, no parsing, no lane.
struct Floor {
    path: PathBuf,
}

impl Floor {
    fn open(path: &Path) -> Result<rusqlite::Connection, String> {
        let e = |e: rusqlite::Error| format!("floor database {}: {e}", path.display());
        let conn = rusqlite::Connection::open(path).map_err(e)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(e)?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;").map_err(e)?;
        Ok(conn)
    }

    fn create(path: &Path) -> Result<Self, String> {
        Self::open(path)?
            .execute_batch(
                "CREATE TABLE inbound (id INTEGER PRIMARY KEY, list_id INTEGER NOT NULL, role TEXT NOT NULL,
                     bounce_token TEXT, recipient TEXT NOT NULL, envelope_from TEXT, raw BLOB NOT NULL,
                     size INTEGER NOT NULL, received_at INTEGER NOT NULL, state TEXT NOT NULL, outcome TEXT,
                     processed_at INTEGER);
                 CREATE INDEX inbound_waiting ON inbound (id) WHERE state = 'received';",
            )
            .map_err(|e| format!("floor schema: {e}"))?;
        Ok(Self { path: path.to_owned() })
    }

    fn insert(conn: &rusqlite::Connection, raw: &[u8]) -> rusqlite::Result<()> {
        conn.prepare_cached(
            "INSERT INTO inbound (list_id, role, recipient, envelope_from, raw, size, received_at, state)
             VALUES (1, 'post', 'accept@example.org', 'poster@example.net', ?1, ?2, ?3, 'received')",
        )?
        .execute(rusqlite::params![raw, raw.len() as i64, 1_800_000_000_000_000_i64])
        .map(drop)
    }

    /// `n` rows: by `threads` threads committing each alone, then by one thread `threads` at a
    /// time. The two wall times.
    fn run(&self, n: u64, threads: u64, size: u64) -> Result<(Duration, Duration), String> {
        let raw = vec![b'x'; usize::try_from(size).unwrap_or(10_240)];
        let t = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (path, raw) = (self.path.clone(), raw.clone());
                let rows = n / threads + u64::from(i < n % threads);
                std::thread::spawn(move || -> Result<(), String> {
                    let conn = Self::open(&path)?;
                    for _ in 0..rows {
                        conn.execute_batch("BEGIN IMMEDIATE")
                            .and_then(|()| Self::insert(&conn, &raw))
                            .and_then(|()| conn.execute_batch("COMMIT"))
                            .map_err(|e| format!("floor insert: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a floor thread panicked".to_owned())??;
        }
        let alone = t.elapsed();
        let conn = Self::open(&self.path)?;
        let t = Instant::now();
        let mut left = n;
        while left > 0 {
            let k = left.min(threads);
            conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| format!("floor: {e}"))?;
            for _ in 0..k {
                Self::insert(&conn, &raw).map_err(|e| format!("floor insert: {e}"))?;
            }
            conn.execute_batch("COMMIT").map_err(|e| format!("floor: {e}"))?;
            left -= k;
        }
        Ok((alone, t.elapsed()))
    }
}

/// The messages a server has taken, read from its database files (WAL: readers beside it): the
/// inbound store's rows, plus the messages still in its spool of accepted mail (`spool.db`, when
/// the build has one) not moved into the inbound store yet. The spool is read first: a message
/// moved meanwhile is then found in the inbound store by its spool key, counted once.
fn count_inbound(db: &Path) -> Result<u64, String> {
    let e = |e: rusqlite::Error| format!("reading {}: {e}", db.display());
    let open = |path: &Path| -> Result<rusqlite::Connection, String> {
        let conn =
            rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(e)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(e)?;
        Ok(conn)
    };
    let spool_path = db.with_file_name("spool.db");
    let spooled: Vec<String> = if spool_path.exists() {
        let spool = open(&spool_path)?;
        let mut st = spool.prepare("SELECT (SELECT generation FROM spool_file) || ':' || id FROM spool").map_err(e)?;
        st.query_map([], |r| r.get(0)).and_then(Iterator::collect).map_err(e)?
    } else {
        Vec::new()
    };
    let mut conn = open(db)?;
    let tx = conn.transaction().map_err(e)?;
    let mut n: i64 = tx.query_row("SELECT COUNT(*) FROM inbound", [], |r| r.get(0)).map_err(e)?;
    for key in &spooled {
        let moved: bool = tx
            .query_row("SELECT EXISTS (SELECT 1 FROM inbound WHERE spool_key = ?1)", [key], |r| r.get(0))
            .map_err(e)?;
        n += i64::from(!moved);
    }
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A minimal LMTP client: one post to `to`; returns when its 250 is read.
fn lmtp_post(port: u16, to: &str, message: &str) -> Result<Instant, String> {
    let io = |e: std::io::Error| format!("LMTP: {e}");
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(io)?;
    let mut r = BufReader::new(stream.try_clone().map_err(io)?);
    let mut w = stream;
    let reply = |r: &mut BufReader<TcpStream>| -> Result<String, String> {
        loop {
            let mut line = String::new();
            r.read_line(&mut line).map_err(io)?;
            if line.is_empty() {
                return Err("LMTP: connection closed".into());
            }
            if line.as_bytes().get(3) != Some(&b'-') {
                return Ok(line);
            }
        }
    };
    let expect = |r: &mut BufReader<TcpStream>, w: &mut TcpStream, cmd: &str, code: &str| -> Result<(), String> {
        if !cmd.is_empty() {
            w.write_all(cmd.as_bytes()).map_err(io)?;
        }
        let got = reply(r)?;
        if got.starts_with(code) { Ok(()) } else { Err(format!("LMTP {cmd:?}: {got}")) }
    };
    expect(&mut r, &mut w, "", "220")?;
    expect(&mut r, &mut w, "LHLO bench\r\n", "250")?;
    expect(&mut r, &mut w, &format!("MAIL FROM:<{POSTER}>\r\n"), "250")?;
    expect(&mut r, &mut w, &format!("RCPT TO:<{to}>\r\n"), "250")?;
    expect(&mut r, &mut w, "DATA\r\n", "354")?;
    expect(&mut r, &mut w, &format!("{message}.\r\n"), "250")?;
    let at = Instant::now();
    let _ = w.write_all(b"QUIT\r\n");
    Ok(at)
}

/// About 1.5 KB of text: a typical list message.
fn text() -> String {
    "A line of a typical list message, long enough to wrap in a mail reader.\n".repeat(20)
}

fn latency_scenario(opts: &Options, c: &mut Courrier, sink: &Sink) -> Result<String, String> {
    let started = (SystemTime::now(), loadavg());
    let (m, list) = (opts.members, "big");
    eprintln!("latency: {m} members");
    c.list_with_members(list, m)?;
    let mut rounds = Vec::new();
    let timeout = Duration::from_secs(900);
    for round in 1..=opts.rounds {
        eprintln!("latency round {round}/{}: POST .../sends to {m} members", opts.rounds);
        let before = sink.messages();
        let body = serde_json::json!({ "subject": format!("Bench {round}"), "text": text() });
        let t = Instant::now();
        let (status, answer) = c.api.post_json(&format!("/api/v1/domains/{DOMAIN}/lists/{list}/sends"), &body, &[])?;
        check_status("POST sends", status, &answer, &[202])?;
        let api = sink.wait_for(before + m, timeout)?.duration_since(t);
        eprintln!("  {:.2} s", api.as_secs_f64());
        eprintln!("latency round {round}/{}: one post over LMTP to {m} members", opts.rounds);
        let before = sink.messages();
        let message = format!(
            "From: Poster <{POSTER}>\r\nTo: {list}@{DOMAIN}\r\nSubject: Bench post {round}\r\n\
             Message-ID: <bench-{round}-{}@example.net>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{}",
            utc(SystemTime::now()).replace(' ', "T"),
            text().replace('\n', "\r\n")
        );
        let accepted = lmtp_post(c.lmtp, &format!("{list}@{DOMAIN}"), &message)?;
        let post = sink.wait_for(before + m, timeout)?.duration_since(accepted);
        c.server.check_alive()?;
        eprintln!("  {:.2} s", post.as_secs_f64());
        rounds.push((api, post));
    }
    let mut out = String::new();
    let _ =
        writeln!(out, "### latency{} ({} UTC, load average {} at its start)", smoke(opts), utc(started.0), started.1);
    let _ = writeln!(
        out,
        "One message to a list of {m} members, `COURRIER_DELIVERY_WORKERS={}`, copies to Postfix's `smtp-sink` \
         (counted from its `-c` output, polled every ms): through `POST .../sends`, from the request to the last copy \
         at the sink; as a post over LMTP, from its 250 (stored) to the last copy (processing, fan-out and \
         delivery).",
        opts.workers
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "| round | POST .../sends | LMTP post | ratio post/sends |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (i, (a, p)) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {:.2} s | {:.2} s | {:.2} |",
            i + 1,
            a.as_secs_f64(),
            p.as_secs_f64(),
            p.as_secs_f64() / a.as_secs_f64()
        );
    }
    let am = median(rounds.iter().map(|r| r.0.as_secs_f64()).collect());
    let pm = median(rounds.iter().map(|r| r.1.as_secs_f64()).collect());
    let _ = writeln!(out, "| **median** | **{am:.2} s** | **{pm:.2} s** | **{:.2}** |", pm / am);
    let _ = writeln!(out);
    let verdict = if opts.smoke {
        "smoke size, no verdict"
    } else if pm / am <= LATENCY_TARGET {
        "met"
    } else {
        "NOT met"
    };
    let _ = writeln!(out, "ratio post/sends (medians): {:.2} (target <= {LATENCY_TARGET}: {verdict})", pm / am);
    Ok(out)
}
