//! `bench-subscribers`: the subscriber self-service of `courrier serve` (release), two same-run
//! comparisons.
//!
//! - `login-link`: `POST /api/v1/me/login-link` for a known address (subscribed to a list: a link
//!   is stored and mailed after the answer) and an unknown one (nothing is), N of each,
//!   interleaved: the medians and p99 of the two must not tell them
//!   apart (target: under 10 % apart). Each request comes from a source address of its own
//!   group of four: the client binds 127.x.y.z (all of 127.0.0.0/8 is this machine), a
//!   connection per source making 4 timed requests (2 known, 2 unknown, each address asked for
//!   once, in the order known, unknown, unknown, known or its reverse, after an untimed health
//!   check that opens the connection):
//!   under the real limits (3 links per address per hour, 5 per source per minute, 20 per
//!   hour), as many people behind many addresses would be. The limits are not changed; a 429
//!   fails the run.
//! - `pages`: `GET /p/me` (the HTML page: 50 subscriptions, each with its delivery-mode form and
//!   unsubscribe button) beside `GET /api/v1/me/subscriptions?limit=50` (the same 50 as JSON),
//!   with one subscriber session opened by a mailed login link; requests per second over C
//!   keep-alive connections, rounds alternating the two; target: page/JSON >= 0.5.
//!
//! The mails go to an SMTP sink of this program on 127.0.0.1 (it keeps them: the session's
//! login link is read from it, and the known addresses' mails are counted). `--smoke` runs it
//! tiny (CI).

use courrier_benches::{
    BENCH_EMAIL, Server, cli, create_api_key, create_bench_user, fmt_latency, free_port, harness_main, loadavg, median,
    percentile, positive, serve_command, sibling,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USAGE: &str = "usage: bench-subscribers [--scenario login-link|pages|all (default)] [--requests N (default \
1000: login links of each kind)] [--page-requests N (default 2000: per load and round)] [--connections N (default 4)] \
[--rounds N (default 3)] [--courrier PATH] [--smoke]";
/// The largest difference of the medians (and of the p99s) of known and unknown addresses.
const TIMING_TARGET: f64 = 0.10;
/// `GET /p/me` requests per second over `GET /api/v1/me/subscriptions`'s, at least.
const PAGE_TARGET: f64 = 0.5;
/// Requests per source connection (2 known, 2 unknown): under the 5 a minute of a source.
const PER_SOURCE: usize = 4;
const SUBSCRIPTIONS: usize = 50;
const READER: &str = "reader@example.net";

struct Options {
    scenario: String,
    requests: usize,
    page_requests: usize,
    connections: usize,
    rounds: usize,
    courrier: Option<PathBuf>,
}

fn main() -> ExitCode {
    harness_main("bench-subscribers", USAGE, parse, run)
}

fn parse(mut args: std::env::Args) -> Result<Option<Options>, String> {
    let mut o = Options {
        scenario: "all".into(),
        requests: 1000,
        page_requests: 2000,
        connections: 4,
        rounds: 3,
        courrier: None,
    };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--scenario" => o.scenario = value()?,
            "--requests" => o.requests = positive("--requests", &value()?)? as usize,
            "--page-requests" => o.page_requests = positive("--page-requests", &value()?)? as usize,
            "--connections" => o.connections = positive("--connections", &value()?)? as usize,
            "--rounds" => o.rounds = positive("--rounds", &value()?)? as usize,
            "--courrier" => o.courrier = Some(PathBuf::from(value()?)),
            "--smoke" => {
                (o.requests, o.page_requests, o.connections, o.rounds) = (20, 40, 2, 1);
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !["login-link", "pages", "all"].contains(&o.scenario.as_str()) {
        return Err(format!("unknown scenario {:?}", o.scenario));
    }
    Ok(Some(o))
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
    cli(&courrier, &data, &["domain", "create", "example.org"], None)?;
    let key = create_api_key(&courrier, &data, "bench", "read,members:write,send,moderate,manage", 100_000)?;
    let sink = Sink::start()?;
    let port = free_port()?;
    let mut cmd = serve_command(&courrier, &data, port);
    cmd.env("COURRIER_SMTP_URL", format!("smtp://127.0.0.1:{}", sink.port))
        .env("COURRIER_MAIL_FROM", "lists@example.org")
        .env("COURRIER_DELIVERY_WORKERS", "0");
    let mut server = Server::start("courrier", cmd, port, dir.path().join("server.log"))?.terminate_on_drop();
    server.wait_healthy()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let api = Admin { port, key };
    println!("bench-subscribers: courrier {}, load average {} at start", courrier.display(), loadavg());
    if o.scenario != "pages" {
        rt.block_on(login_links(o, &api, &sink))?;
        server.check_alive()?;
    }
    if o.scenario != "login-link" {
        rt.block_on(pages(o, &api, &sink))?;
        server.check_alive()?;
    }
    println!("load average at the end: {}", loadavg());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The two scenarios
// ---------------------------------------------------------------------------------------------

async fn login_links(o: &Options, api: &Admin, sink: &Sink) -> Result<(), String> {
    let n = o.requests;
    api.list("known")?;
    let (mut all_k, mut all_u) = (Vec::new(), Vec::new());
    let mut reference: Option<Value> = None;
    let sources = n.div_ceil(PER_SOURCE / 2);
    println!();
    println!(
        "login-link: {n} known + {n} unknown addresses per round, {} rounds after a warm-up (new addresses and \
         sources each), sequential, from {sources} sources per round (127.x.y.z, {PER_SOURCE} timed requests each on one \
         keep-alive connection)",
        o.rounds
    );
    // Round 0 warms up (200 of each kind, untimed figures): the rounds after it are reported.
    for round in 0..=o.rounds {
        let n = if round == 0 { n.min(200) } else { n };
        let known: Vec<String> = (0..n).map(|i| format!("known{round}-{i}@example.net")).collect();
        let unknown: Vec<String> = (0..n).map(|i| format!("unknown{round}-{i}@example.net")).collect();
        for email in &known {
            api.post("/api/v1/domains/example.org/lists/known/members", &json!({ "email": email }), 201)?;
        }
        let mails_before = sink.count();
        let (mut k, mut u) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (s, chunk) in (0..n).collect::<Vec<_>>().chunks(PER_SOURCE / 2).enumerate() {
            let mut conn = Conn::connect_from(source_ip(round * sources + s), api.port).await?;
            // The connection's first request (its accept, its task) is not timed.
            let (status, text) = conn.send("GET", courrier_benches::HEALTH_PATH, &[], "").await?;
            courrier_benches::check_status("GET health", status, &text, &[200])?;
            for (p, &i) in chunk.iter().enumerate() {
                // Known, unknown, unknown, known from one source, the reverse from the next: each
                // kind is as often first as second, and follows each kind as often.
                let order = if (s + p) % 2 == 0 { [true, false] } else { [false, true] };
                for is_known in order {
                    let (email, times) = if is_known { (&known[i], &mut k) } else { (&unknown[i], &mut u) };
                    let body = json!({ "email": email }).to_string();
                    let t = Instant::now();
                    let (status, text) = conn
                        .send("POST", "/api/v1/me/login-link", &[("content-type", "application/json")], &body)
                        .await?;
                    times.push(t.elapsed().as_secs_f64());
                    if status != 202 {
                        return Err(format!("POST /api/v1/me/login-link ({email}) answered {status}: {text}"));
                    }
                    let data = courrier_benches::json(&text)?["data"].clone();
                    match &reference {
                        None => reference = Some(data),
                        Some(r) if *r != data => return Err(format!("two answers differ: {r} and {data}")),
                        Some(_) => {}
                    }
                }
            }
        }
        // Every known address got its mail, no unknown one.
        sink.wait_for(mails_before + n, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_millis(500));
        let mails = sink.count() - mails_before;
        if mails != n {
            return Err(format!("{mails} login mails for {n} known and {n} unknown addresses"));
        }
        if round > 0 {
            report_timing(&format!("round {round}"), &k, &u);
            noise_floor(&u);
            all_k.extend(k);
            all_u.extend(u);
        }
    }
    if o.rounds > 1 {
        report_timing("all rounds", &all_k, &all_u);
        noise_floor(&all_u);
    }
    println!("  every answer 202 with the same body; one mail per known address, none for an unknown one");
    Ok(())
}

/// The same figures between two halves of the unknown addresses' requests (the same kind; the
/// sources of each half alternate their orders as the two kinds do, so each half has the same
/// positions on its connections): how far apart this machine puts two loads that cannot differ.
fn noise_floor(u: &[f64]) {
    // One unknown request per pair, PER_SOURCE / 2 pairs per source, in order.
    let half = |j: usize| (j / (PER_SOURCE / 2)) % 4 < 2;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (j, &t) in u.iter().enumerate() {
        if half(j) { a.push(t) } else { b.push(t) }
    }
    println!(
        "  {:<10} unknown vs unknown (two halves, {} and {}): median {:+5.1} %, p99 {:+5.1} %",
        "  noise",
        a.len(),
        b.len(),
        (median(a.clone()) / median(b.clone()) - 1.0) * 100.0,
        (percentile(&a, 0.99) / percentile(&b, 0.99) - 1.0) * 100.0
    );
}

/// Medians and p99 of the two kinds, and how far apart.
fn report_timing(what: &str, k: &[f64], u: &[f64]) {
    let (km, um) = (median(k.to_vec()), median(u.to_vec()));
    let (kp, up) = (percentile(k, 0.99), percentile(u, 0.99));
    let (dm, dp) = (km / um - 1.0, kp / up - 1.0);
    let verdict = if dm.abs() < TIMING_TARGET && dp.abs() < TIMING_TARGET { "met" } else { "NOT met" };
    println!(
        "  {what:<10} known: median {:>8}, p99 {:>8} | unknown: median {:>8}, p99 {:>8} | known/unknown: median \
         {:+5.1} %, p99 {:+5.1} % (within {:.0} %: {verdict})",
        fmt_latency(km),
        fmt_latency(kp),
        fmt_latency(um),
        fmt_latency(up),
        dm * 100.0,
        dp * 100.0,
        TIMING_TARGET * 100.0
    );
}

async fn pages(o: &Options, api: &Admin, sink: &Sink) -> Result<(), String> {
    for i in 0..SUBSCRIPTIONS {
        let list = format!("list{i:02}");
        api.list(&list)?;
        api.post(&format!("/api/v1/domains/example.org/lists/{list}/members"), &json!({ "email": READER }), 201)?;
    }
    // A session as a subscriber opens one: the login link, from the mail, posted.
    let before = sink.count();
    let mut conn = Conn::connect_from(Ipv4Addr::new(127, 0, 0, 1), api.port).await?;
    let body = json!({ "email": READER }).to_string();
    let (status, text) =
        conn.send("POST", "/api/v1/me/login-link", &[("content-type", "application/json")], &body).await?;
    courrier_benches::check_status("POST /api/v1/me/login-link", status, &text, &[202])?;
    sink.wait_for(before + 1, Duration::from_secs(30))?;
    let mail = sink.last_to(READER).ok_or("no login mail for the reader")?;
    let text = mail.replace("=\r\n", "");
    let at = text.find("/p/me/login/").ok_or("no login link in the mail")? + "/p/me/login/".len();
    let token: String =
        text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')).collect();
    let body = json!({ "token": token }).to_string();
    let (status, head, text) =
        conn.send_full("POST", "/api/v1/me/session", &[("content-type", "application/json")], &body).await?;
    courrier_benches::check_status("POST /api/v1/me/session", status, &text, &[200])?;
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: ").or_else(|| l.strip_prefix("Set-Cookie: ")))
        .and_then(|c| c.split(';').next())
        .ok_or("no session cookie")?
        .to_owned();

    // What each load answers, checked once before measuring.
    let (s, page) = conn.send("GET", "/p/me", &[("cookie", &cookie)], "").await?;
    let forms = page.matches("/unsubscribe\"").count();
    if s != 200 || forms != SUBSCRIPTIONS {
        return Err(format!("GET /p/me answered {s} with {forms} unsubscribe forms, not {SUBSCRIPTIONS}"));
    }
    let (s, listed) = conn.send("GET", "/api/v1/me/subscriptions?limit=50", &[("cookie", &cookie)], "").await?;
    let total = courrier_benches::json(&listed)?["data"].as_array().map_or(0, Vec::len);
    if s != 200 || total != SUBSCRIPTIONS {
        return Err(format!("GET /api/v1/me/subscriptions answered {s} with {total} items"));
    }
    let loads =
        [("GET /api/v1/me/subscriptions?limit=50", "/api/v1/me/subscriptions?limit=50"), ("GET /p/me", "/p/me")];
    // One warm-up of each, then the rounds.
    for (_, path) in loads {
        rate(api.port, path, &cookie, o.connections, o.page_requests.min(200)).await?;
    }
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..o.rounds {
        for (i, (_, path)) in loads.iter().enumerate() {
            rates[i].push(rate(api.port, path, &cookie, o.connections, o.page_requests).await?);
        }
        eprintln!("round {}: JSON {:.0}/s, page {:.0}/s", round + 1, rates[0][round], rates[1][round]);
    }
    let (json_rate, page_rate) = (median(rates[0].clone()), median(rates[1].clone()));
    println!();
    println!(
        "pages: one subscriber with {SUBSCRIPTIONS} subscriptions, {} requests per load and round over {} keep-alive \
         connections, {} rounds alternating; bodies {} B (JSON) and {} B (HTML)",
        o.page_requests,
        o.connections,
        o.rounds,
        listed.len(),
        page.len()
    );
    println!("  {:<40} {json_rate:>8.0} req/s (median)", loads[0].0);
    println!("  {:<40} {page_rate:>8.0} req/s (median)", loads[1].0);
    let ratio = page_rate / json_rate;
    let verdict = if ratio >= PAGE_TARGET { "met" } else { "NOT met" };
    println!("  ratio page/JSON: {ratio:.2} (target >= {PAGE_TARGET}: {verdict})");
    Ok(())
}

/// `127.1.0.1` onwards: the `n`th source address (127.1.0.0/16 to 127.255.0.0/16: millions).
fn source_ip(n: usize) -> Ipv4Addr {
    let n = u32::try_from(n + 1).unwrap_or(u32::MAX);
    Ipv4Addr::new(127, 1 + (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// Requests per second of `GET path` with the session cookie, `total` requests over
/// `connections` keep-alive connections; every answer must be a 200.
async fn rate(port: u16, path: &str, cookie: &str, connections: usize, total: usize) -> Result<f64, String> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let share = total / connections + usize::from(c < total % connections);
        let (path, cookie) = (path.to_owned(), cookie.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect_from(Ipv4Addr::new(127, 0, 0, 1), port).await?;
            for _ in 0..share {
                let (status, text) = conn.send("GET", &path, &[("cookie", &cookie)], "").await?;
                courrier_benches::check_status(&format!("GET {path}"), status, &text, &[200])?;
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// The instruments: an HTTP/1.1 keep-alive connection from a chosen source, the admin's API calls,
// an SMTP sink
// ---------------------------------------------------------------------------------------------

/// One keep-alive HTTP/1.1 connection to 127.0.0.1:port, from a chosen local address.
struct Conn {
    stream: tokio::net::TcpStream,
    port: u16,
    buf: Vec<u8>,
}

impl Conn {
    async fn connect_from(source: Ipv4Addr, port: u16) -> Result<Self, String> {
        let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
        socket.bind(SocketAddr::from((source, 0))).map_err(|e| format!("cannot bind {source}: {e}"))?;
        let stream = socket
            .connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .map_err(|e| format!("cannot connect from {source}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self { stream, port, buf: Vec::new() })
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(u16, String), String> {
        let (status, _, text) = self.send_full(method, path, headers, body).await?;
        Ok((status, text))
    }

    /// The status, the head (lowercase names as sent) and the body.
    async fn send_full(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(u16, String, String), String> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", self.port);
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            req.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        let io = |e: std::io::Error| format!("{method} {path}: {e}");
        self.stream.write_all(req.as_bytes()).await.map_err(io)?;
        let mut chunk = [0u8; 16 * 1024];
        let head_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let got = self.stream.read(&mut chunk).await.map_err(io)?;
            if got == 0 {
                return Err(format!("{method} {path}: the server closed the connection"));
            }
            self.buf.extend_from_slice(&chunk[..got]);
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{method} {path}: an answer without Content-Length: {head}"))?;
        while self.buf.len() < head_end + length {
            let got = self.stream.read(&mut chunk).await.map_err(io)?;
            if got == 0 {
                return Err(format!("{method} {path}: the server closed the connection mid-answer"));
            }
            self.buf.extend_from_slice(&chunk[..got]);
        }
        let text = String::from_utf8_lossy(&self.buf[head_end..head_end + length]).into_owned();
        self.buf.drain(..head_end + length);
        Ok((status, head, text))
    }
}

/// The bench user's API calls that set the scene (lists and members), on their own connection.
struct Admin {
    port: u16,
    key: String,
}

impl Admin {
    fn post(&self, path: &str, body: &Value, expected: u16) -> Result<String, String> {
        let api = courrier_benches::Api::bearer(&format!("http://127.0.0.1:{}", self.port), &self.key);
        let (status, text) = api.post_json(path, body, &[])?;
        courrier_benches::check_status(&format!("POST {path}"), status, &text, &[expected])?;
        Ok(text)
    }

    fn list(&self, name: &str) -> Result<(), String> {
        let body = json!({ "name": name, "display_name": format!("List {name}"), "owner_email": BENCH_EMAIL,
                           "subscription_policy": "open" });
        self.post("/api/v1/domains/example.org/lists", &body, 201).map(drop)
    }
}

/// An SMTP server on 127.0.0.1 that accepts every message and keeps it.
struct Sink {
    port: u16,
    messages: Arc<Mutex<Vec<String>>>,
}

impl Sink {
    fn start() -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&messages);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || {
                    let _ = smtp_session(stream, &kept);
                });
            }
        });
        Ok(Self { port, messages })
    }

    fn count(&self) -> usize {
        self.messages.lock().map_or(0, |m| m.len())
    }

    /// The newest message with a `To:` of `to`.
    fn last_to(&self, to: &str) -> Option<String> {
        let m = self.messages.lock().ok()?;
        m.iter().rev().find(|m| m.lines().any(|l| l.starts_with("To:") && l.contains(to))).cloned()
    }

    /// Waits until `n` messages arrived, `within` at most.
    fn wait_for(&self, n: usize, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while self.count() < n {
            if Instant::now() > deadline {
                return Err(format!("the sink got {} of {n} messages within {}s", self.count(), within.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

/// One SMTP session: every command accepted in turn, each message's data kept.
fn smtp_session(stream: TcpStream, kept: &Mutex<Vec<String>>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut lines = BufReader::new(stream);
    out.write_all(b"220 bench sink ESMTP\r\n")?;
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
        match verb.as_str() {
            "EHLO" => out.write_all(b"250-bench sink\r\n250 8BITMIME\r\n")?,
            "DATA" => {
                out.write_all(b"354 go ahead\r\n")?;
                let mut data = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line)? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" || line == ".\n" {
                        break;
                    }
                    data.push_str(&line);
                }
                if let Ok(mut m) = kept.lock() {
                    m.push(data);
                }
                out.write_all(b"250 kept\r\n")?;
            }
            "QUIT" => {
                out.write_all(b"221 bye\r\n")?;
                return Ok(());
            }
            _ => out.write_all(b"250 ok\r\n")?,
        }
    }
}
