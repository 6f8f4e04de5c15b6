//! Periodic work runs once for the installation (issue 25): `courrier worker` runs the chores too,
//! not only `serve`, and with both on one data directory each job is held by one process, named by
//! `courrier jobs`.

use courrier_tests::harness::{ProcessApp, SmtpSink, courrier_bin, run_cli_in};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ENV: [(&str, &str); 2] = [("COURRIER_DNS_SERVER", "127.0.0.1:9"), ("COURRIER_LOG", "warn")];

fn cli(dir: &Path, args: &[&str]) -> Value {
    let all: Vec<&str> = ["--json"].into_iter().chain(args.iter().copied()).collect();
    let (st, out, err) = run_cli_in(dir, &all, &ENV, None);
    assert!(st.success(), "courrier {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("courrier {args:?} printed {out:?}: {e}"))
}

/// A list with one digest member and one post waiting for its digest (none was ever sent: due).
fn list_with_a_due_digest(dir: &Path) {
    let (st, _, err) = run_cli_in(
        dir,
        &["user", "create", "--email", "admin@example.org", "--password-stdin", "--site-admin"],
        &ENV,
        Some("a long enough password"),
    );
    assert!(st.success(), "{err}");
    cli(dir, &["domain", "create", "example.org"]);
    cli(
        dir,
        &[
            "list",
            "create",
            "--domain",
            "example.org",
            "--list",
            "news",
            "--display-name",
            "News",
            "--owner",
            "admin@example.org",
        ],
    );
    let member = cli(
        dir,
        &[
            "member",
            "add",
            "--domain",
            "example.org",
            "--list",
            "news",
            "--email",
            "d@example.net",
            "--delivery-mode",
            "digest",
            "--force",
            "--consent-evidence",
            "test",
        ],
    );
    assert_eq!(member["status"], "active", "{member}");
    let send = cli(
        dir,
        &["send", "submit", "--domain", "example.org", "--list", "news", "--subject", "Hi", "--text", "Hello"],
    );
    assert_eq!(send["recipients"], 0, "the only member takes digests: {send}");
}

/// Who holds each job, by name: `Some(pid)` or `None`.
fn holders(dir: &Path) -> Vec<(String, Option<u64>)> {
    let doc = cli(dir, &["jobs"]);
    doc["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc}"))
        .iter()
        .map(|j| (j["job"].as_str().unwrap().to_owned(), j["holder"]["pid"].as_u64()))
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(dir: &Path, smtp: &str) -> Worker {
    let child = Command::new(courrier_bin())
        .arg("--data-dir")
        .arg(dir)
        .arg("worker")
        .envs(ENV)
        .envs(courrier_tests::harness::database_env(dir))
        .env("COURRIER_SMTP_URL", smtp)
        .env_remove("COURRIER_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("courrier worker starts");
    Worker(child)
}

fn digests_at(sink: &SmtpSink) -> usize {
    sink.messages().iter().filter(|m| m.contains("X-RcptTo: d@example.net")).count()
}

#[test]
fn a_worker_alone_sends_a_due_digest_and_a_server_beside_it_runs_no_job_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    list_with_a_due_digest(dir.path());
    assert!(holders(dir.path()).iter().all(|(_, pid)| pid.is_none()), "no process runs: every job is free");

    let sink = SmtpSink::start();
    let worker = worker(dir.path(), &sink.url());
    let pid = u64::from(worker.0.id());
    // The worker's chores: the due digest is built and its copy delivered by its delivery threads.
    wait_until("the digest at the sink", || digests_at(&sink) == 1);
    let held = holders(dir.path());
    for job in ["digests", "idempotency-purge", "held-post-expiry", "bounce-decay", "mailbox-polling"] {
        assert!(held.contains(&(job.to_owned(), Some(pid))), "{job} is held by the worker: {held:?}");
    }

    // A server on the same data directory finds every job held: it runs none of them.
    let server = ProcessApp::spawn_in(
        dir,
        &[ENV[0], ENV[1], ("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_DELIVERY_WORKERS", "1")],
    );
    let held_beside = holders(server.dir.path());
    assert_eq!(held_beside, held, "the worker still holds every job it held");
    let digest = cli(server.dir.path(), &["send", "status", "--domain", "example.org", "--list", "news", "2"]);
    assert!(digest["subject"].as_str().is_some_and(|s| s.ends_with("(1 message)")), "the digest: {digest}");
    assert_eq!(digest["counts"]["sent"], 1, "{digest}");
    assert_eq!(digests_at(&sink), 1, "one digest mail, not one per process");
}

#[test]
fn jobs_refuses_an_argument_it_does_not_take() {
    let dir = tempfile::tempdir().unwrap();
    let (st, _, err) = run_cli_in(dir.path(), &["jobs", "digests"], &ENV, None);
    assert_eq!(st.code(), Some(2), "usage: {err}");
    // Text for people: every job, each free.
    let (st, out, err) = run_cli_in(dir.path(), &["jobs"], &ENV, None);
    assert!(st.success(), "{err}");
    assert_eq!(out.lines().filter(|l| l.contains("no process runs it now")).count(), 6, "{out}");
}
