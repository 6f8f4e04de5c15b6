//! `bench-credentials`: a list's mail accounts (issue 22), against reference clients measured in
//! the same run against the same servers (`courrier_benches::mailpeers`, scratch processes on
//! 127.0.0.1):
//!
//! - `submission`: one send of N copies through the list's submission account (an aiosmtpd
//!   server requiring AUTH over TLS), from `POST .../sends` to every copy `sent`, one delivery
//!   worker; beside Python's smtplib sending N messages of the copy's size through one
//!   authenticated TLS session to the same server. (Postfix's `smtp-source` speaks neither TLS nor
//!   AUTH, so it cannot be the baseline here.)
//! - `ingest`: a Dovecot mailbox holding N posts emptied by courrier's poller (fetched, handed to
//!   mail in, stored, then deleted), from the server's start to the mailbox empty; beside Python's
//!   imaplib fetching and deleting the same N messages one by one (UID FETCH, STORE \Deleted,
//!   UID EXPUNGE) over TLS.
//!
//! Contenders alternate round by round; the report gives every round, the medians and the ratio
//! (courrier messages/s over the reference's). Nothing here asserts on timings. `--smoke` runs a
//! tiny size once (CI).

use courrier_benches::mailpeers::{Dovecot, Mode, PASSWORD, Submission, USER};
use courrier_benches::{
    Api, BENCH_EMAIL, Server, check_status, create_api_key, create_bench_user, free_port, harness_main, json, loadavg,
    median, positive, serve_command, sibling, utc,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime};

const DOMAIN: &str = "example.org";
const LIST: &str = "bench";
const CLIENTS: &str = include_str!("../../peers/mail_clients.py");
const SUBMISSION_TARGET: f64 = 0.5;
const INGEST_TARGET: f64 = 1.0;
const TIMEOUT: Duration = Duration::from_secs(900);

const USAGE: &str = "usage: bench-credentials [--scenario submission|ingest|all (default)] [--smoke] [--courrier PATH] \
[--python PATH (the CI venv's)] [--rounds N (3)] [--copies N (2000)] [--posts N (2000)]";

fn main() -> ExitCode {
    harness_main("bench-credentials", USAGE, Options::parse, run)
}

#[derive(Debug, Clone)]
struct Options {
    submission: bool,
    ingest: bool,
    smoke: bool,
    courrier: PathBuf,
    python: PathBuf,
    rounds: u64,
    copies: u64,
    posts: u64,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let (mut submission, mut ingest, mut smoke) = (true, true, false);
        let (mut courrier, mut python) = (None, None);
        let (mut rounds, mut copies, mut posts) = (None, None, None);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--scenario" => match value()?.as_str() {
                    "submission" => ingest = false,
                    "ingest" => submission = false,
                    "all" => {}
                    other => return Err(format!("--scenario must be submission, ingest or all, got {other:?}")),
                },
                "--smoke" => smoke = true,
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--python" => python = Some(PathBuf::from(value()?)),
                "--rounds" => rounds = Some(positive("--rounds", &value()?)?),
                "--copies" => copies = Some(positive("--copies", &value()?)?),
                "--posts" => posts = Some(positive("--posts", &value()?)?),
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let d = |full: u64, tiny: u64| if smoke { tiny } else { full };
        let python = python.unwrap_or_else(|| {
            let venv = std::env::var_os("COURRIER_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
                cache.join("courrier-ci-venv")
            });
            venv.join("bin/python")
        });
        Ok(Some(Self {
            submission,
            ingest,
            smoke,
            courrier: match courrier {
                Some(p) => p,
                None => sibling("courrier")?,
            },
            python,
            rounds: rounds.unwrap_or(d(3, 1)),
            copies: copies.unwrap_or(d(2_000, 20)),
            posts: posts.unwrap_or(d(2_000, 20)),
        }))
    }
}

fn run(opts: &Options) -> Result<(), String> {
    if !opts.courrier.is_file() {
        return Err(format!(
            "courrier binary not found at {} (cargo build --release -p courrier-cli, or pass --courrier)",
            opts.courrier.display()
        ));
    }
    let scratch = tempfile::TempDir::new().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    std::fs::write(scratch.path().join("mail_clients.py"), CLIENTS).map_err(|e| e.to_string())?;
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let tag = if opts.smoke { " (smoke)" } else { "" };
    println!("bench-credentials{tag}: {} UTC, {cores} cores, load average {}\n", utc(SystemTime::now()), loadavg());
    if opts.submission {
        println!("{}", submission(opts, scratch.path())?);
    }
    if opts.ingest {
        println!("{}", ingest(opts, scratch.path())?);
    }
    println!("load average at the end: {}; finished {} UTC", loadavg(), utc(SystemTime::now()));
    Ok(())
}

/// A running courrier with a list `bench` of `members` members and the given extra settings.
struct Courrier {
    api: Api,
    _server: Server,
}

impl Courrier {
    fn launch(opts: &Options, dir: &Path, key: &str, env: &[(&str, String)]) -> Result<Self, String> {
        let port = free_port()?;
        let mut cmd = serve_command(&opts.courrier, dir, port);
        cmd.env("COURRIER_PUBLIC_URL", "https://lists.example.org")
            .env("COURRIER_EGRESS_ALLOW", "127.0.0.0/8")
            .env("COURRIER_OCR_WORKERS", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut server = Server::start("courrier", cmd, port, dir.join("server.log"))?.terminate_on_drop();
        server.wait_healthy()?;
        Ok(Self { api: Api::bearer(&format!("http://127.0.0.1:{port}"), key), _server: server })
    }

    fn setup_list(&self, members: u64) -> Result<(), String> {
        self.api.expect("POST", "/api/v1/domains", &serde_json::json!({ "name": DOMAIN }), &[201, 409])?;
        let body = serde_json::json!({
            "name": LIST, "display_name": "Bench", "owner_email": BENCH_EMAIL, "subscription_policy": "open",
        });
        self.api.expect("POST", &format!("/api/v1/domains/{DOMAIN}/lists"), &body, &[201, 409])?;
        let mut csv = String::from("email,display_name,delivery_mode\n");
        for i in 0..members {
            let _ = writeln!(csv, "m{i}@example.net,,regular");
        }
        let path = format!("/api/v1/domains/{DOMAIN}/lists/{LIST}/members/import?consent_evidence=bench");
        let (status, body) = self.api.send("POST", &path, "text/csv", csv.as_bytes(), &[])?;
        check_status("POST members/import", status, &body, &[200])
    }

    fn put_credential(&self, kind: &str, body: serde_json::Value) -> Result<(), String> {
        let path = format!("/api/v1/domains/{DOMAIN}/lists/{LIST}/credentials/{kind}");
        self.api.expect("PUT", &path, &body, &[200])?;
        let (status, answer) = self.api.post_json(&format!("{path}/test"), &serde_json::json!({}), &[])?;
        check_status("POST credentials/test", status, &answer, &[200])
    }

    /// One send; waits until it is no longer open; its sent count.
    fn send_and_wait(&self) -> Result<u64, String> {
        let text = "Bonjour à toutes et à tous. ".repeat(50);
        let body = serde_json::json!({ "subject": "Bench: through the account", "text": text });
        let (status, answer) =
            self.api.post_json(&format!("/api/v1/domains/{DOMAIN}/lists/{LIST}/sends"), &body, &[])?;
        check_status("POST sends", status, &answer, &[202])?;
        let id = json(&answer)?["data"]["send_id"].as_i64().ok_or("no send_id")?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let (status, body) = self.api.get(&format!("/api/v1/domains/{DOMAIN}/lists/{LIST}/sends/{id}"))?;
            check_status("GET send", status, &body, &[200])?;
            let s = json(&body)?["data"].clone();
            if !matches!(s["state"].as_str(), Some("queued" | "sending")) {
                return Ok(s["counts"]["sent"].as_u64().unwrap_or(0));
            }
            if Instant::now() > deadline {
                return Err(format!("the send did not settle within {TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn prepare(opts: &Options, dir: &Path) -> Result<String, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    create_bench_user(&opts.courrier, dir, true)?;
    create_api_key(&opts.courrier, dir, "bench-credentials", "read,members:write,send,moderate,manage", 100_000)
}

fn keyring(dir: &Path) -> Result<String, String> {
    let path = dir.join("keyring");
    std::fs::write(&path, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").map_err(|e| e.to_string())?;
    Ok(path.display().to_string())
}

fn clients(opts: &Options, scratch: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(&opts.python)
        .arg(scratch.join("mail_clients.py"))
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", opts.python.display()))?;
    if !out.status.success() {
        return Err(format!("mail_clients.py {}: {}", args[0], String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("{what}: not within {TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn report(
    title: &str,
    opts: &Options,
    n: u64,
    rounds: &[(Duration, Duration)],
    names: (&str, &str),
    target: f64,
) -> String {
    let mut out = String::new();
    let tag = if opts.smoke { " (smoke)" } else { "" };
    let _ = writeln!(out, "### {title}{tag}, {n} messages a round");
    let _ = writeln!(out, "| round | {} | {} |", names.0, names.1);
    let _ = writeln!(out, "|---|---|---|");
    let rate = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    for (i, (base, ours)) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {:.2} s ({:.0} msg/s) | {:.2} s ({:.0} msg/s) |",
            i + 1,
            base.as_secs_f64(),
            rate(*base),
            ours.as_secs_f64(),
            rate(*ours)
        );
    }
    let base = median(rounds.iter().map(|r| rate(r.0)).collect());
    let ours = median(rounds.iter().map(|r| rate(r.1)).collect());
    let ratio = ours / base.max(1e-9);
    let verdict = if ratio >= target { "meets" } else { "misses" };
    let _ = writeln!(
        out,
        "\nmedians: {} {base:.0} msg/s, {} {ours:.0} msg/s; ratio {ratio:.2} ({verdict} the target {target})",
        names.0, names.1
    );
    out
}

fn submission(opts: &Options, scratch: &Path) -> Result<String, String> {
    let n = opts.copies;
    let peer = Submission::start(&opts.python, Mode::Tls)?;
    let dir = scratch.join("submission");
    let key = prepare(opts, &dir)?;
    let ring = keyring(scratch)?;
    let env = [
        ("COURRIER_KEYRING", ring),
        ("COURRIER_EXTRA_CA", peer.ca.ca_pem.display().to_string()),
        ("COURRIER_DELIVERY_WORKERS", "1".to_owned()),
        // Copies never leave through the relay: a closed port.
        ("COURRIER_SMTP_URL", "smtp://127.0.0.1:9".to_owned()),
    ];
    let c = Courrier::launch(opts, &dir, &key, &env)?;
    c.setup_list(n)?;
    let body = serde_json::json!({
        "host": "127.0.0.1", "port": peer.port, "security": "tls", "username": USER, "password": PASSWORD,
    });
    c.put_credential("submission", body)?;
    let ca = peer.ca.ca_pem.display().to_string();
    let mut rounds = Vec::new();
    let mut size = 0usize;
    for round in 1..=opts.rounds {
        eprintln!("submission round {round}/{}: courrier, one send of {n} copies through the account", opts.rounds);
        let before = peer.count() as u64;
        let t = Instant::now();
        let sent = c.send_and_wait()?;
        let ours = t.elapsed();
        if sent != n {
            return Err(format!("{sent} of {n} copies sent:\n{}", peer.log()));
        }
        wait_for("the copies at the submission server", || peer.count() as u64 >= before + n)?;
        if size == 0 {
            size = peer.messages().first().map_or(2000, String::len);
        }
        eprintln!("submission round {round}/{}: smtplib, {n} messages of {size} bytes", opts.rounds);
        let before = peer.count() as u64;
        let t = Instant::now();
        clients(
            opts,
            scratch,
            &[
                "submit",
                &peer.port.to_string(),
                &ca,
                USER,
                PASSWORD,
                &n.to_string(),
                &size.to_string(),
                "m0@example.net",
            ],
        )?;
        let base = t.elapsed();
        wait_for("smtplib's messages at the submission server", || peer.count() as u64 >= before + n)?;
        rounds.push((base, ours));
    }
    Ok(report(
        "submission: copies through the list's account",
        opts,
        n,
        &rounds,
        ("smtplib", "courrier"),
        SUBMISSION_TARGET,
    ))
}

fn ingest(opts: &Options, scratch: &Path) -> Result<String, String> {
    let n = opts.posts;
    let dovecot = Dovecot::start()?;
    let ca = dovecot.ca.as_ref().ok_or("no CA")?.ca_pem.display().to_string();
    let dir = scratch.join("ingest");
    let key = prepare(opts, &dir)?;
    let ring = keyring(scratch)?;
    let env = [
        ("COURRIER_KEYRING", ring),
        ("COURRIER_EXTRA_CA", ca.clone()),
        // The pollers run beside delivery workers; the posts' copies meet a closed relay port and wait.
        ("COURRIER_DELIVERY_WORKERS", "1".to_owned()),
        ("COURRIER_SMTP_URL", "smtp://127.0.0.1:9".to_owned()),
    ];
    {
        let c = Courrier::launch(opts, &dir, &key, &env)?;
        c.setup_list(1)?;
        // A member posts: every post is accepted.
        let body = serde_json::json!({
            "host": "127.0.0.1", "port": dovecot.imaps_port, "security": "tls", "username": USER,
            "password": PASSWORD, "folder": "INBOX",
        });
        c.put_credential("ingest", body)?;
    }
    let port = dovecot.imaps_port.to_string();
    let fill = || -> Result<(), String> {
        clients(
            opts,
            scratch,
            &["fill", &port, &ca, USER, PASSWORD, &n.to_string(), "m0@example.net", "bench@example.org"],
        )?;
        if dovecot.inbox_count() as u64 != n {
            return Err(format!("the mailbox holds {} messages, not {n}", dovecot.inbox_count()));
        }
        Ok(())
    };
    let mut rounds = Vec::new();
    for round in 1..=opts.rounds {
        eprintln!("ingest round {round}/{}: imaplib fetching and deleting {n} messages", opts.rounds);
        fill()?;
        let t = Instant::now();
        let drained = clients(opts, scratch, &["drain", &port, &ca, USER, PASSWORD])?;
        let base = t.elapsed();
        if drained.trim() != n.to_string() || dovecot.inbox_count() != 0 {
            return Err(format!("imaplib drained {drained:?} of {n}"));
        }
        eprintln!("ingest round {round}/{}: courrier's poller, from the server's start", opts.rounds);
        fill()?;
        let t = Instant::now();
        let c = Courrier::launch(opts, &dir, &key, &env)?;
        wait_for("the mailbox emptied by courrier", || dovecot.inbox_count() == 0)?;
        let ours = t.elapsed();
        drop(c);
        rounds.push((base, ours));
    }
    Ok(report("ingest: a Dovecot mailbox of posts emptied", opts, n, &rounds, ("imaplib", "courrier"), INGEST_TARGET))
}
