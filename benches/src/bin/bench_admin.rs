//! `bench-admin`: the administration pages of `courrier serve` (release) beside the JSON API
//! answering the same question, with the same session cookie, in the same run (issue 23):
//!
//! - the members page of a list of 1,000,000 members (`GET /admin/.../members`, its first page of
//!   50, HTML) beside `GET /api/v1/.../members?limit=50` (the same 50 as JSON);
//! - a search on it (`?email_contains=...`, a needle matching a few members) beside the API's;
//! - the dashboard (`GET /admin/`: the dashboard's counts and the queue) beside
//!   `GET /api/v1/dashboard`.
//!
//! Each pair alternates (A, B, A, B, ...) on one keep-alive connection, one request at a time, so
//! the time measured is the server's plus one loopback round trip; p50 and p99 of each, and their
//! ratio page/JSON (target <= 1.5). The members are loaded through the import API. Nothing here
//! asserts on timings; `--smoke` runs it tiny (CI).

use courrier_benches::{
    Api, BENCH_EMAIL, BENCH_PASSWORD, Server, check_status, create_api_key, create_bench_user, fmt_latency, free_port,
    harness_main, loadavg, median, percentile, positive, serve_command, sibling,
};
use serde_json::json;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: bench-admin [--members N (default 1000000)] [--requests N (default 400: per load)] \
[--courrier PATH] [--smoke]";
/// Page time over JSON time, at most.
const TARGET: f64 = 1.5;
/// Rows per import document: well under the contract's 25 MiB.
const CHUNK_ROWS: u64 = 500_000;
const LIST_PATH: &str = "domains/example.org/lists/big";

struct Options {
    members: u64,
    requests: usize,
    courrier: Option<PathBuf>,
}

fn main() -> ExitCode {
    harness_main("bench-admin", USAGE, parse, run)
}

fn parse(mut args: std::env::Args) -> Result<Option<Options>, String> {
    let mut o = Options { members: 1_000_000, requests: 400, courrier: None };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--members" => o.members = positive("--members", &value()?)?,
            "--requests" => o.requests = positive("--requests", &value()?)? as usize,
            "--courrier" => o.courrier = Some(PathBuf::from(value()?)),
            "--smoke" => (o.members, o.requests) = (2_000, 20),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(o))
}

/// The `i`th member's address: `m<i>.<word>@example.net`, the word one of a few, so that a needle
/// like `m12345.` matches one member and `.b0` a tenth of them.
fn address(i: u64) -> String {
    format!("m{i}.b{}@example.net", i % 10)
}

fn write_csv(path: &Path, start: u64, rows: u64) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let io = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    w.write_all(b"email,display_name\n").map_err(io)?;
    for i in start..start + rows {
        writeln!(w, "{},Member {i}", address(i)).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn run(o: &Options) -> Result<(), String> {
    let courrier = match &o.courrier {
        Some(p) => p.clone(),
        None => sibling("courrier")?,
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    create_bench_user(&courrier, &data, true)?;
    let key = create_api_key(&courrier, &data, "bench", "read,members:write,send,moderate,manage", 100_000)?;
    let port = free_port()?;
    let cmd = serve_command(&courrier, &data, port);
    let mut server = Server::start("courrier", cmd, port, dir.path().join("server.log"))?.terminate_on_drop();
    server.wait_healthy()?;
    let base = format!("http://127.0.0.1:{port}");
    let api = Api::bearer(&base, &key);
    api.expect("POST", "/api/v1/domains", &json!({ "name": "example.org" }), &[201])?;
    let list =
        json!({ "name": "big", "display_name": "Big", "owner_email": BENCH_EMAIL, "subscription_policy": "open" });
    api.expect("POST", "/api/v1/domains/example.org/lists", &list, &[201])?;
    println!("bench-admin: courrier {}, load average {} at start", courrier.display(), loadavg());

    let t = Instant::now();
    let csv = dir.path().join("members.csv");
    let mut done = 0;
    while done < o.members {
        let rows = CHUNK_ROWS.min(o.members - done);
        write_csv(&csv, done, rows)?;
        let doc = std::fs::read(&csv).map_err(|e| e.to_string())?;
        let path = format!("/api/v1/{LIST_PATH}/members/import?consent_evidence=bench-admin");
        let (status, body) = api.send("POST", &path, "text/csv", &doc, &[])?;
        check_status("POST members/import", status, &body, &[200])?;
        done += rows;
        eprintln!("  {done}/{} members loaded", o.members);
    }
    println!("loaded {} members through the import API in {:.1} s", o.members, t.elapsed().as_secs_f64());

    // The administrator's session, as the sign-in form and the API's login open it.
    let (status, head, body) = request(
        &base,
        "POST",
        "/api/v1/auth/login",
        "",
        Some(&json!({ "email": BENCH_EMAIL, "password": BENCH_PASSWORD }).to_string()),
    )?;
    check_status("POST /api/v1/auth/login", status, &body, &[200])?;
    let cookie = head.ok_or("no session cookie")?;
    let session = Session::new(&base, &cookie);

    let needle = format!("m{}.", o.members / 2 + 7);
    let pairs = [
        ("members, first page", format!("/admin/{LIST_PATH}/members"), format!("/api/v1/{LIST_PATH}/members?limit=50")),
        (
            "members, a search",
            format!("/admin/{LIST_PATH}/members?email_contains={needle}"),
            format!("/api/v1/{LIST_PATH}/members?limit=50&email_contains={needle}"),
        ),
        ("dashboard", "/admin/".to_owned(), "/api/v1/dashboard".to_owned()),
    ];
    // What each answers, checked once: the page shows what the JSON holds.
    for (what, page, listing) in &pairs {
        let (s, html) = session.get(page)?;
        check_status(page, s, &html, &[200])?;
        let (s, text) = session.get(listing)?;
        check_status(listing, s, &text, &[200])?;
        let v = courrier_benches::json(&text)?;
        if let Some(first) = v["data"].as_array().and_then(|a| a.first()) {
            let email = first["email"].as_str().unwrap_or_default();
            if !html.contains(email) {
                return Err(format!("{what}: the page does not show {email}, the JSON's first member"));
            }
        }
    }
    // The first search builds the list's in-memory search snapshot: one of each, untimed.
    println!(
        "\n{} requests per load, alternating page and JSON one at a time on one keep-alive connection each, after \
         {} untimed of each; session cookie on both",
        o.requests,
        o.requests.min(50)
    );
    println!("  {:<22} {:>10} {:>10} | {:>10} {:>10} | ratio p50  p99", "", "page p50", "p99", "JSON p50", "p99");
    for (what, page, listing) in &pairs {
        for _ in 0..o.requests.min(50) {
            session.get(page)?;
            session.get(listing)?;
        }
        let (mut a, mut b) = (Vec::with_capacity(o.requests), Vec::with_capacity(o.requests));
        for _ in 0..o.requests {
            a.push(session.timed(page)?);
            b.push(session.timed(listing)?);
        }
        let (ap, bp) = (median(a.clone()), median(b.clone()));
        let (a99, b99) = (percentile(&a, 0.99), percentile(&b, 0.99));
        let (r50, r99) = (ap / bp, a99 / b99);
        let verdict = if r50 <= TARGET && r99 <= TARGET { "met" } else { "NOT met" };
        println!(
            "  {what:<22} {:>10} {:>10} | {:>10} {:>10} | {r50:.2}x {r99:.2}x (target <= {TARGET}x: {verdict})",
            fmt_latency(ap),
            fmt_latency(a99),
            fmt_latency(bp),
            fmt_latency(b99)
        );
    }
    server.check_alive()?;
    println!("load average at the end: {}", loadavg());
    Ok(())
}

/// One request on a fresh agent (the login): status, the session cookie if set, the body.
fn request(
    base: &str,
    method: &str,
    path: &str,
    cookie: &str,
    json_body: Option<&str>,
) -> Result<(u16, Option<String>, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut req = ureq::http::Request::builder().method(method).uri(format!("{base}{path}"));
    if !cookie.is_empty() {
        req = req.header("cookie", cookie);
    }
    let resp = match json_body {
        Some(b) => agent.run(
            req.header("content-type", "application/json").body(b.as_bytes().to_vec()).map_err(|e| e.to_string())?,
        ),
        None => agent.run(req.body(()).map_err(|e| e.to_string())?),
    };
    let mut resp = resp.map_err(|e| format!("{method} {path}: {e}"))?;
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").to_owned())
        .find(|c| c.starts_with("svc_session="));
    let body = resp.body_mut().with_config().limit(64 << 20).read_to_string().map_err(|e| e.to_string())?;
    Ok((resp.status().as_u16(), cookie, body))
}

/// The session's requests, on ureq's keep-alive pool (one connection: one request at a time).
struct Session {
    agent: ureq::Agent,
    base: String,
    cookie: String,
}

impl Session {
    fn new(base: &str, cookie: &str) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        Self { agent, base: base.to_owned(), cookie: cookie.to_owned() }
    }

    fn get(&self, path: &str) -> Result<(u16, String), String> {
        let req = ureq::http::Request::builder()
            .uri(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .body(())
            .map_err(|e| e.to_string())?;
        let mut resp = self.agent.run(req).map_err(|e| format!("GET {path}: {e}"))?;
        let body = resp.body_mut().with_config().limit(64 << 20).read_to_string().map_err(|e| e.to_string())?;
        Ok((resp.status().as_u16(), body))
    }

    /// Seconds from sending to the whole answer read; a non-200 fails the run.
    fn timed(&self, path: &str) -> Result<f64, String> {
        let t = Instant::now();
        let (status, body) = self.get(path)?;
        let took = t.elapsed().as_secs_f64();
        check_status(path, status, &body, &[200])?;
        Ok(took)
    }
}
