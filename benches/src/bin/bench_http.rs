//! `bench-http`: requests per second and p99 latency of `courrier serve` under `wrk`, against a
//! baseline started in the same run on the same machine. Two scenarios (`--scenario`):
//!
//! - `health`: `GET /api/v1/system/health` on courrier against the `bare-hello` hyper server
//!   answering the same bytes: the cost of courrier's request pipeline.
//! - `auth`: the authenticated `GET /api/v1/system/version`, its API keys rotating round-robin,
//!   against courrier's own public health route on the same server: the price of authentication.
//!   bare-hello is measured alongside for context.
//! - `slow`: the p99 of the health route, each probe on a fresh connection, while the harness holds
//!   1,000 slowloris connections on the server (re-opened as the server closes them), against the
//!   same probes on the idle server: what slow clients cost the operator's health checks.
//!
//! Rounds alternate the loads (A, B, A, B, ...) so that drift (thermal, other load) hits them
//! alike; the report is the medians and their ratio. Results go to BENCHMARKS.md.
//!
//! `bench-http --smoke` does everything for real at a tiny size (CI runs it so this cannot rot).

use courrier_benches::{
    HEALTH_PATH, Server, create_api_key, create_bench_user, fmt_latency, harness_main, http_get, median, percentile,
    positive, serve_command, sibling, utc,
};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

const VERSION_PATH: &str = "/api/v1/system/version";
/// courrier health / bare-hello (issue 18).
const HEALTH_TARGET: f64 = 0.85;
/// courrier version (authenticated) / courrier health (issue 18).
const AUTH_TARGET: f64 = 0.75;
/// The highest quota courrier gives a key (core's `MAX_RATE_LIMIT_PER_MIN`), per calendar minute
/// and per server process; over it, 429. The `auth` load rotates over enough keys to stay under.
const KEY_QUOTA_PER_MIN: u32 = 100_000;

const USAGE: &str = "usage: bench-http [--scenario health|auth|slow|all (default)] [--courrier PATH] [--bare PATH] [--wrk PATH] \
[--duration SECS] [--connections N] [--threads N] [--rounds N] [--warmup SECS] [--keys N] [--slow-connections N] [--smoke]";

fn main() -> ExitCode {
    harness_main("bench-http", USAGE, Options::parse, run)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Health,
    Auth,
    Slow,
    All,
}

impl Scenario {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "health" => Ok(Self::Health),
            "auth" => Ok(Self::Auth),
            "slow" => Ok(Self::Slow),
            "all" => Ok(Self::All),
            _ => Err(format!("--scenario must be health, auth, slow or all, got {raw:?}")),
        }
    }

    fn health(self) -> bool {
        matches!(self, Self::Health | Self::All)
    }

    fn auth(self) -> bool {
        matches!(self, Self::Auth | Self::All)
    }

    fn slow(self) -> bool {
        matches!(self, Self::Slow | Self::All)
    }
}

#[derive(Debug, Clone)]
struct Options {
    scenario: Scenario,
    courrier: PathBuf,
    bare: PathBuf,
    wrk: PathBuf,
    duration: u64,
    connections: u32,
    threads: u32,
    rounds: u32,
    warmup: u64,
    /// API keys the `auth` load rotates over.
    keys: u32,
    /// Slowloris connections the `slow` scenario holds open.
    slow_connections: usize,
    smoke: bool,
}

impl Options {
    /// `Ok(None)` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let (mut courrier, mut bare, mut wrk) = (None, None, PathBuf::from("wrk"));
        let (mut duration, mut connections, mut threads, mut rounds, mut warmup) = (None, None, None, None, None);
        let (mut scenario, mut keys, mut slow_connections) = (Scenario::All, None, None);
        let mut smoke = false;
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--scenario" => scenario = Scenario::parse(&value()?)?,
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--bare" => bare = Some(PathBuf::from(value()?)),
                "--wrk" => wrk = PathBuf::from(value()?),
                "--duration" => duration = Some(positive(&arg, &value()?)?),
                "--connections" => connections = Some(positive(&arg, &value()?)?),
                "--threads" => threads = Some(positive(&arg, &value()?)?),
                "--rounds" => rounds = Some(positive(&arg, &value()?)?),
                "--warmup" => warmup = Some(value()?.parse::<u64>().map_err(|e| format!("--warmup: {e}"))?),
                "--keys" => keys = Some(positive(&arg, &value()?)?),
                "--slow-connections" => slow_connections = Some(positive(&arg, &value()?)?),
                "--smoke" => smoke = true,
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let (d_duration, d_connections, d_rounds, d_warmup, d_keys, d_slow) =
            if smoke { (1, 8, 1, 1, 4, 50) } else { (20, 64, 3, 2, 128, 1_000) };
        let opts = Self {
            scenario,
            courrier: match courrier {
                Some(p) => p,
                None => sibling("courrier")?,
            },
            bare: match bare {
                Some(p) => p,
                None => sibling("bare-hello")?,
            },
            wrk,
            duration: duration.unwrap_or(d_duration),
            connections: connections.map_or(Ok(d_connections), u32::try_from).map_err(|e| e.to_string())?,
            threads: threads.map_or(Ok(2), u32::try_from).map_err(|e| e.to_string())?,
            rounds: rounds.map_or(Ok(d_rounds), u32::try_from).map_err(|e| e.to_string())?,
            warmup: warmup.unwrap_or(d_warmup),
            keys: keys.map_or(Ok(d_keys), u32::try_from).map_err(|e| e.to_string())?,
            slow_connections: slow_connections.map_or(Ok(d_slow), usize::try_from).map_err(|e| e.to_string())?,
            smoke,
        };
        if opts.connections < opts.threads {
            return Err(format!("wrk needs --connections ({}) >= --threads ({})", opts.connections, opts.threads));
        }
        Ok(Some(opts))
    }

    /// wrk's arguments for one run of `load` against `port`.
    fn wrk_args(&self, duration: u64, port: u16, load: &Load) -> Vec<String> {
        let mut args = vec![
            format!("-t{}", self.threads),
            format!("-c{}", self.connections),
            format!("-d{duration}s"),
            "--latency".into(),
        ];
        if let Some(script) = &load.script {
            args.extend(["-s".into(), script.display().to_string()]);
        }
        args.push(format!("http://127.0.0.1:{port}{}", load.path));
        args
    }

    /// The wrk command of `load` as the report shows it: no port, the script by its file name.
    fn wrk_command(&self, load: &Load) -> String {
        let shown =
            Load { script: load.script.as_ref().and_then(|s| s.file_name()).map(PathBuf::from), ..load.clone() };
        format!("wrk {}", self.wrk_args(self.duration, 0, &shown).join(" ")).replace(":0/", ":PORT/")
    }

    /// Requests per second the keys' quotas allow in all (per calendar minute, on average).
    fn key_capacity(&self) -> f64 {
        f64::from(self.keys) * f64::from(KEY_QUOTA_PER_MIN) / 60.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Bare,
    Courrier,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Bare => "bare-hello",
            Target::Courrier => "courrier",
        }
    }
}

/// One kind of wrk run: which server, which path, and the Lua script making the requests (none:
/// wrk's own static request).
#[derive(Debug, Clone)]
struct Load {
    name: &'static str,
    target: Target,
    path: &'static str,
    script: Option<PathBuf>,
    /// Its requests carry API keys, so a non-2xx answer is most likely a key over its quota.
    keyed: bool,
}

impl Load {
    fn new(name: &'static str, target: Target, path: &'static str, script: Option<&Path>) -> Self {
        Self { name, target, path, script: script.map(Path::to_path_buf), keyed: false }
    }
}

fn run(opts: &Options) -> Result<(), String> {
    if opts.scenario.health() || opts.scenario.auth() {
        check_wrk(&opts.wrk)?;
    }
    for (what, path) in [("courrier", &opts.courrier), ("bare-hello", &opts.bare)] {
        if !path.is_file() {
            return Err(format!(
                "{what} binary not found at {} (build it: cargo build --release -p courrier-cli -p courrier-benches, \
                 or pass --{})",
                path.display(),
                if what == "courrier" { "courrier" } else { "bare" }
            ));
        }
    }

    // Declared before the servers so that it is removed after they are killed.
    let scratch = tempfile::TempDir::new().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let data_dir = scratch.path().join("data");
    // Made before the server starts, with the CLI on the same data directory.
    let keys = if opts.scenario.auth() { create_keys(opts, &data_dir)? } else { Vec::new() };
    let (bare_port, courrier_port) = free_ports()?;

    let mut bare_cmd = Command::new(&opts.bare);
    bare_cmd.arg(format!("127.0.0.1:{bare_port}"));
    let bare = start_server(Target::Bare, bare_cmd, bare_port, scratch.path())?;
    let courrier_cmd = serve_command(&opts.courrier, &data_dir, courrier_port);
    let courrier = start_server(Target::Courrier, courrier_cmd, courrier_port, scratch.path())?;

    let mut servers = [bare, courrier];
    for server in &mut servers {
        let answer = server.wait_healthy()?;
        check_health_answer(&server.name, &answer)?;
        eprintln!("{} is up on port {} ({} bytes of health answer)", server.name, server.port, answer.len());
    }
    if opts.scenario.auth() {
        check_keys(courrier_port, &keys)?;
    }

    if opts.scenario.health() {
        let loads = [Load::new("bare-hello", Target::Bare, HEALTH_PATH, None), courrier_health(None)];
        let (started, rounds) = measure(opts, &mut servers, &loads)?;
        println!("{}", report_health(opts, started, &loads, &rounds));
    }
    if opts.scenario.auth() {
        // All three loads go through a script with a `request()` function, so that wrk spends
        // the same per request on each (the health route gets no key: it is public).
        let plain = scratch.path().join("plain.lua");
        let keyed = scratch.path().join("keys.lua");
        for (path, keys) in [(&plain, &[][..]), (&keyed, &keys[..])] {
            std::fs::write(path, wrk_script(keys)).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        let loads = [
            Load::new("bare-hello", Target::Bare, HEALTH_PATH, Some(&plain)),
            courrier_health(Some(&plain)),
            Load { keyed: true, ..Load::new("courrier version", Target::Courrier, VERSION_PATH, Some(&keyed)) },
        ];
        let (started, rounds) = measure(opts, &mut servers, &loads)?;
        println!("{}", report_auth(opts, started, &loads, &rounds));
    }
    if opts.scenario.slow() {
        let server_pid = servers[1].pid();
        println!("{}", slow_clients(opts, courrier_port, server_pid)?);
        servers[1].check_alive()?;
    }

    for server in &mut servers {
        server.stop();
    }
    drop(scratch);
    Ok(())
}

fn courrier_health(script: Option<&Path>) -> Load {
    Load::new("courrier health", Target::Courrier, HEALTH_PATH, script)
}

/// Runs the warm-ups, then `opts.rounds` rounds of every load in turn. Results by round, then
/// in the order of `loads`.
fn measure(
    opts: &Options,
    servers: &mut [Server; 2],
    loads: &[Load],
) -> Result<(SystemTime, Vec<Vec<WrkResult>>), String> {
    // `servers` is [bare-hello, courrier].
    let server = |target| usize::from(target == Target::Courrier);
    let started = SystemTime::now();
    if opts.warmup > 0 {
        for load in loads {
            eprintln!("warm-up: {} for {}s", load.name, opts.warmup);
            let i = server(load.target);
            wrk_load(&mut servers[i], opts, opts.warmup, load)?;
        }
    }
    let mut rounds = Vec::new();
    for round in 1..=opts.rounds {
        let mut results = Vec::with_capacity(loads.len());
        for load in loads {
            eprintln!("round {round}/{}: {} for {}s", opts.rounds, load.name, opts.duration);
            let i = server(load.target);
            let r = wrk_load(&mut servers[i], opts, opts.duration, load)?;
            eprintln!("  {:.0} req/s, p99 {}", r.rps, fmt_latency(r.p99));
            results.push(r);
        }
        rounds.push(results);
    }
    Ok((started, rounds))
}

fn median_of(rounds: &[Vec<WrkResult>], load: usize, f: fn(&WrkResult) -> f64) -> f64 {
    median(rounds.iter().map(|r| f(&r[load])).collect())
}

fn report_heading(out: &mut String, opts: &Options, scenario: &str, started: SystemTime) {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let smoke = if opts.smoke { " (smoke)" } else { "" };
    let _ = writeln!(out, "bench-http {scenario}{smoke}: {} UTC, {cores} cores", utc(started));
}

fn verdict(ratio: f64, target: f64) -> &'static str {
    if ratio >= target { "met" } else { "NOT met" }
}

/// `loads`: bare-hello, courrier health.
fn report_health(opts: &Options, started: SystemTime, loads: &[Load], rounds: &[Vec<WrkResult>]) -> String {
    let (bare_rps, courrier_rps) = (median_of(rounds, 0, |r| r.rps), median_of(rounds, 1, |r| r.rps));
    let (bare_p99, courrier_p99) = (median_of(rounds, 0, |r| r.p99), median_of(rounds, 1, |r| r.p99));
    let ratio = courrier_rps / bare_rps;

    let mut out = String::new();
    report_heading(&mut out, opts, "health", started);
    let _ = writeln!(
        out,
        "load: `{}`, {} round(s), warm-up {}s each",
        opts.wrk_command(&loads[1]),
        opts.rounds,
        opts.warmup
    );
    let _ = writeln!(out);
    let _ =
        writeln!(out, "| round | bare-hello req/s | bare-hello p99 | courrier req/s | courrier p99 | ratio req/s |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for (i, r) in rounds.iter().enumerate() {
        let (b, c) = (&r[0], &r[1]);
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {:.0} | {} | {:.2} |",
            i + 1,
            b.rps,
            fmt_latency(b.p99),
            c.rps,
            fmt_latency(c.p99),
            c.rps / b.rps
        );
    }
    let _ = writeln!(
        out,
        "| **median** | **{bare_rps:.0}** | **{}** | **{courrier_rps:.0}** | **{}** | **{ratio:.2}** |",
        fmt_latency(bare_p99),
        fmt_latency(courrier_p99)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "ratio courrier/bare (median req/s): {ratio:.2} (target >= {HEALTH_TARGET}: {})",
        verdict(ratio, HEALTH_TARGET)
    );
    out
}

/// `loads`: bare-hello, courrier health, courrier version.
fn report_auth(opts: &Options, started: SystemTime, loads: &[Load], rounds: &[Vec<WrkResult>]) -> String {
    let rps = |i| median_of(rounds, i, |r| r.rps);
    let p99 = |i| median_of(rounds, i, |r| r.p99);
    let (bare_rps, health_rps, version_rps) = (rps(0), rps(1), rps(2));
    let ratio = version_rps / health_rps;

    let mut out = String::new();
    report_heading(&mut out, opts, "auth", started);
    let _ = writeln!(
        out,
        "load: `{}` ({} API keys rotating round-robin, `Authorization: Bearer`; their quotas allow {:.0} req/s sustained); \
         health and bare-hello: `{}`; {} round(s), warm-up {}s each",
        opts.wrk_command(&loads[2]),
        opts.keys,
        opts.key_capacity(),
        opts.wrk_command(&loads[1]),
        opts.rounds,
        opts.warmup
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | bare-hello req/s | health req/s | health p99 | version req/s | version p99 | ratio version/health |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for (i, r) in rounds.iter().enumerate() {
        let (b, h, v) = (&r[0], &r[1], &r[2]);
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {} | {:.0} | {} | {:.2} |",
            i + 1,
            b.rps,
            h.rps,
            fmt_latency(h.p99),
            v.rps,
            fmt_latency(v.p99),
            v.rps / h.rps
        );
    }
    let _ = writeln!(
        out,
        "| **median** | **{bare_rps:.0}** | **{health_rps:.0}** | **{}** | **{version_rps:.0}** | **{}** | **{ratio:.2}** |",
        fmt_latency(p99(1)),
        fmt_latency(p99(2))
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "ratio version/health (median req/s): {ratio:.2} (target >= {AUTH_TARGET}: {})",
        verdict(ratio, AUTH_TARGET)
    );
    let _ = writeln!(
        out,
        "for context: health/bare-hello {:.2}, version/bare-hello {:.2}",
        health_rps / bare_rps,
        version_rps / bare_rps
    );
    out
}

/// Creates the bench user (a site admin) and `opts.keys` API keys with the highest quota, with
/// the `courrier` CLI on `data_dir`. Returns the keys' secrets.
fn create_keys(opts: &Options, data_dir: &Path) -> Result<Vec<String>, String> {
    let started = Instant::now();
    create_bench_user(&opts.courrier, data_dir, true)?;
    let mut keys = Vec::new();
    for i in 1..=opts.keys {
        keys.push(create_api_key(&opts.courrier, data_dir, &format!("bench-{i}"), "read", KEY_QUOTA_PER_MIN)?);
    }
    eprintln!("created the bench user and {} API keys in {:.1}s", keys.len(), started.elapsed().as_secs_f64());
    Ok(keys)
}

/// Before measuring: the version route refuses a request without a key (so the load does measure
/// authentication) and answers every key with 200 and the version object.
fn check_keys(port: u16, keys: &[String]) -> Result<(), String> {
    let status = |answer: &str| answer.lines().next().unwrap_or("").to_owned();
    let anonymous = http_get(port, VERSION_PATH, "").map_err(|e| format!("GET {VERSION_PATH} failed: {e}"))?;
    if !anonymous.starts_with("HTTP/1.1 401") {
        return Err(format!("GET {VERSION_PATH} without a key answered {:?}, not 401", status(&anonymous)));
    }
    for (i, key) in keys.iter().enumerate() {
        let answer = http_get(port, VERSION_PATH, &format!("Authorization: Bearer {key}\r\n"))
            .map_err(|e| format!("GET {VERSION_PATH} with key {} failed: {e}", i + 1))?;
        if !answer.starts_with("HTTP/1.1 200") {
            return Err(format!("GET {VERSION_PATH} with key {} answered {:?}, not 200", i + 1, status(&answer)));
        }
        check_version_answer(&answer)?;
    }
    eprintln!("GET {VERSION_PATH}: 401 without a key, 200 and the version object with each of the {} keys", keys.len());
    Ok(())
}

/// A wrk script whose `request()` cycles over prepared requests: one per key, each with its
/// `Authorization: Bearer` header, or a single request without a header when `keys` is empty.
/// Every wrk thread has its own Lua state; `setup` (run once per thread, in the main state)
/// numbers them so that they start at different keys.
fn wrk_script(keys: &[String]) -> String {
    let mut out = String::from("-- Written by bench-http.\nlocal keys = {\n");
    for key in keys {
        let _ = writeln!(out, "  \"{key}\",");
    }
    out.push_str(
        r#"}
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
local requests, n, i = {}, 0, 0
function init(args)
  if #keys == 0 then
    requests[1] = wrk.format("GET")
  else
    for j, key in ipairs(keys) do
      requests[j] = wrk.format("GET", nil, { ["Authorization"] = "Bearer " .. key })
    end
  end
  n = #requests
  i = (id or 0) % n
end
function request()
  i = i % n + 1
  return requests[i]
end
"#,
    );
    out
}

fn check_wrk(wrk: &Path) -> Result<(), String> {
    // `wrk -v` prints its version and exits non-zero; only its absence matters here.
    match Command::new(wrk).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("wrk not found ({}): install it (apt-get install wrk) or pass --wrk PATH", wrk.display()))
        }
        Err(e) => Err(format!("cannot run wrk ({}): {e}", wrk.display())),
    }
}

/// Two distinct free ports on 127.0.0.1 (both listeners are held until both are known).
fn free_ports() -> Result<(u16, u16), String> {
    let bind = || TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"));
    let (a, b) = (bind()?, bind()?);
    let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).map_err(|e| format!("cannot find a free port: {e}"));
    Ok((port(&a)?, port(&b)?))
}

/// A server of `target`, its output in `scratch/<name>.log`, killed when dropped.
fn start_server(target: Target, cmd: Command, port: u16, scratch: &Path) -> Result<Server, String> {
    Server::start(target.name(), cmd, port, scratch.join(format!("{}.log", target.name())))
}

/// One wrk run of `load` against `server`, which must still be up after it.
fn wrk_load(server: &mut Server, opts: &Options, duration: u64, load: &Load) -> Result<WrkResult, String> {
    let args = opts.wrk_args(duration, server.port, load);
    let output = Command::new(&opts.wrk)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run wrk: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let context = || {
        format!(
            "`wrk {}` ({})\n--- stdout\n{stdout}--- stderr\n{}",
            args.join(" "),
            load.name,
            String::from_utf8_lossy(&output.stderr)
        )
    };
    if !output.status.success() {
        return Err(format!("wrk failed ({}): {}", output.status, context()));
    }
    let result = parse_wrk(&stdout).map_err(|e| {
        let hint = if load.keyed && e.contains("non-2xx") {
            format!(
                " (429s, most likely: {} keys allow {:.0} req/s in all; pass a larger --keys)",
                opts.keys,
                opts.key_capacity()
            )
        } else {
            String::new()
        };
        format!("{e}{hint}: {}", context())
    })?;
    server.check_alive()?;
    Ok(result)
}

/// Both servers must answer the JSON shape of courrier's health route, so that wrk moves the
/// same kind of bytes from each.
fn check_health_answer(name: &str, answer: &str) -> Result<(), String> {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("{name}: the health answer is not JSON ({e}): {answer:?}"))?;
    if json["data"]["status"] != "ok" || !json["meta"]["request_id"].is_string() {
        return Err(format!("{name}: unexpected health answer {answer:?}"));
    }
    Ok(())
}

/// Courrier's `Version` object in the success envelope.
fn check_version_answer(answer: &str) -> Result<(), String> {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let json: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| format!("the answer of GET {VERSION_PATH} is not JSON ({e}): {answer:?}"))?;
    let data = &json["data"];
    if !(data["version"].is_string() && data["backend"].is_string() && json["meta"]["request_id"].is_string()) {
        return Err(format!("GET {VERSION_PATH} did not answer the version object: {answer:?}"));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct WrkResult {
    rps: f64,
    /// Seconds.
    p99: f64,
    requests: u64,
}

fn parse_wrk(out: &str) -> Result<WrkResult, String> {
    let mut rps = None;
    let mut p99 = None;
    let mut requests = None;
    for line in out.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            rps = Some(rest.trim().parse::<f64>().map_err(|e| format!("cannot parse {line:?}: {e}"))?);
        } else if let Some(rest) = line.strip_prefix("99%") {
            p99 = Some(parse_duration(rest.trim()).ok_or_else(|| format!("cannot parse the latency in {line:?}"))?);
        } else if let Some((n, _)) = line.split_once(" requests in ") {
            requests = Some(n.trim().parse::<u64>().map_err(|e| format!("cannot parse {line:?}: {e}"))?);
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            return Err(format!("the run had non-2xx answers ({})", rest.trim()));
        } else if line.starts_with("Socket errors:") {
            return Err(format!("the run had socket errors ({line})"));
        }
    }
    let rps = rps.ok_or("no `Requests/sec:` line in wrk's output")?;
    let p99 = p99.ok_or("no `99%` latency line in wrk's output (was --latency passed?)")?;
    let requests = requests.ok_or("no `N requests in` line in wrk's output")?;
    if requests == 0 || rps <= 0.0 {
        return Err("the run completed no request".into());
    }
    Ok(WrkResult { rps, p99, requests })
}

/// wrk's latencies: a number then us, ms, s, m or h. In seconds.
fn parse_duration(s: &str) -> Option<f64> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let scale = match unit.trim() {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Some(n * scale)
}

// --- The `slow` scenario: health probes beside slowloris connections ---------------------------

/// A probe (or the opening of a slow connection) that gets no answer in this long has failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Between two probes: about a hundred a second, so that a p99 rests on a few dozen probes.
const PROBE_PAUSE: Duration = Duration::from_millis(10);
/// How often every slow connection sends one more header line (and a closed one is re-opened).
const SLOW_TICK: Duration = Duration::from_millis(500);

/// The health probes of one phase: each probe's time (seconds) and whether it was answered 200.
#[derive(Debug, Clone, Default, PartialEq)]
struct Probes {
    times: Vec<f64>,
    failed: usize,
}

impl Probes {
    /// The `q` quantile (nearest rank) of every probe's time, failed ones included (at the time
    /// they took to fail).
    fn quantile(&self, q: f64) -> f64 {
        percentile(&self.times, q)
    }

    fn max(&self) -> f64 {
        self.times.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// One round of the `slow` scenario: the idle server's probes, then the probes beside the slow
/// connections, how many slow connections were open at the start and how many were re-opened.
#[derive(Debug, Clone, Default, PartialEq)]
struct SlowRound {
    idle: Probes,
    slow: Probes,
    opened: usize,
    reopened: usize,
}

/// One health probe on a fresh connection, as an operator's monitor makes it: its time from
/// `connect()` to the end of the answer, and whether the answer was a 200.
fn probe(addr: SocketAddr) -> (f64, bool) {
    let started = Instant::now();
    let answered = (|| -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
        s.set_read_timeout(Some(PROBE_TIMEOUT))?;
        s.set_write_timeout(Some(PROBE_TIMEOUT))?;
        write!(s, "GET {HEALTH_PATH} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        Ok(out.starts_with(b"HTTP/1.1 200"))
    })()
    .unwrap_or(false);
    (started.elapsed().as_secs_f64(), answered)
}

/// Probes `addr` one after the other for `duration`.
fn probe_for(addr: SocketAddr, duration: Duration) -> Probes {
    let mut probes = Probes::default();
    let until = Instant::now() + duration;
    while Instant::now() < until {
        let (secs, answered) = probe(addr);
        probes.times.push(secs);
        probes.failed += usize::from(!answered);
        std::thread::sleep(PROBE_PAUSE);
    }
    probes
}

/// A slowloris connection: a request line and one header, then (from [`hold_slow`]) a header line
/// now and then, never the blank line that ends the headers.
fn open_slow(addr: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(format!("GET {HEALTH_PATH} HTTP/1.1\r\nHost: slow\r\n").as_bytes()).ok()?;
    Some(s)
}

/// Keeps the slow connections going until `until`: a header line on each every [`SLOW_TICK`], a new
/// connection for each one the server closed (as the attack does). How many were re-opened.
fn hold_slow(addr: SocketAddr, slow: &mut [Option<TcpStream>], until: Instant) -> usize {
    let mut reopened = 0;
    while Instant::now() < until {
        for s in slow.iter_mut() {
            let alive = s.as_mut().is_some_and(|c| c.write_all(b"X-Slow: 1\r\n").is_ok());
            if !alive {
                *s = open_slow(addr);
                reopened += 1;
            }
        }
        std::thread::sleep(SLOW_TICK.min(until.saturating_duration_since(Instant::now())));
    }
    reopened
}

/// The `slow` scenario on the courrier server at `port`: rounds of an idle phase and a phase with
/// `opts.slow_connections` slowloris connections, each `opts.duration` long; the report.
fn slow_clients(opts: &Options, port: u16, server_pid: Option<u32>) -> Result<String, String> {
    // The harness holds a descriptor per slow connection (the server raises its own limit).
    let own_limit = courrier_core::adapters::open_files::raise_to_hard_limit()
        .map_err(|e| format!("cannot raise the open-file limit: {e}"))?;
    if own_limit < opts.slow_connections as u64 + 64 {
        return Err(format!(
            "the open-file limit ({own_limit}) is too low for {} slow connections",
            opts.slow_connections
        ));
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let phase = Duration::from_secs(opts.duration);
    let started = SystemTime::now();
    if opts.warmup > 0 {
        eprintln!("warm-up: health probes for {}s", opts.warmup);
        probe_for(addr, Duration::from_secs(opts.warmup));
    }
    let mut rounds = Vec::new();
    for round in 1..=opts.rounds {
        eprintln!("round {round}/{}: idle server, health probes for {}s", opts.rounds, opts.duration);
        let idle = probe_for(addr, phase);
        eprintln!(
            "round {round}/{}: {} slow connections, health probes for {}s",
            opts.rounds, opts.slow_connections, opts.duration
        );
        let mut slow: Vec<Option<TcpStream>> = (0..opts.slow_connections).map(|_| open_slow(addr)).collect();
        let opened = slow.iter().filter(|s| s.is_some()).count();
        let (slow_probes, reopened) = std::thread::scope(|s| {
            let prober = s.spawn(|| probe_for(addr, phase));
            let reopened = hold_slow(addr, &mut slow, Instant::now() + phase);
            (prober.join(), reopened)
        });
        let slow_probes = slow_probes.map_err(|_| "the prober thread panicked".to_owned())?;
        drop(slow);
        let r = SlowRound { idle, slow: slow_probes, opened, reopened };
        eprintln!(
            "  idle p99 {}, slow p99 {} ({} of {} probes failed; {opened} slow connections opened, {reopened} re-opened)",
            fmt_latency(r.idle.quantile(0.99)),
            fmt_latency(r.slow.quantile(0.99)),
            r.slow.failed,
            r.slow.times.len()
        );
        rounds.push(r);
        // The server notices the closed slow connections before the next idle phase.
        std::thread::sleep(Duration::from_secs(1));
    }
    let server_limit = server_pid.map_or_else(|| "?".to_owned(), open_file_limit);
    Ok(report_slow(opts, started, own_limit, &server_limit, &rounds))
}

/// The soft open-file limit of process `pid`, from `/proc`.
fn open_file_limit(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max open files"))?.to_owned();
            line.split_whitespace().nth(3).map(str::to_owned)
        })
        .unwrap_or_else(|| "?".into())
}

fn report_slow(
    opts: &Options,
    started: SystemTime,
    own_limit: u64,
    server_limit: &str,
    rounds: &[SlowRound],
) -> String {
    let med = |f: &dyn Fn(&SlowRound) -> f64| median(rounds.iter().map(f).collect());
    let (idle_p99, slow_p99) = (med(&|r| r.idle.quantile(0.99)), med(&|r| r.slow.quantile(0.99)));
    let ratio = slow_p99 / idle_p99;
    let failed: usize = rounds.iter().map(|r| r.slow.failed + r.idle.failed).sum();
    let probes: usize = rounds.iter().map(|r| r.slow.times.len() + r.idle.times.len()).sum();

    let mut out = String::new();
    report_heading(&mut out, opts, "slow", started);
    let _ = writeln!(
        out,
        "load: {} slowloris connections from this process on 127.0.0.1 (request line and one header, then a \
         header line every {} ms, re-opened when the server closes them); health probes one after the other, \
         each on a fresh connection (`Connection: close`, {} ms apart, {} s time-out); {} round(s) of {} s idle \
         then {} s slow, warm-up {}s; open-file limits: harness {own_limit}, server {server_limit}",
        opts.slow_connections,
        SLOW_TICK.as_millis(),
        PROBE_PAUSE.as_millis(),
        PROBE_TIMEOUT.as_secs(),
        opts.rounds,
        opts.duration,
        opts.duration,
        opts.warmup
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | idle probes | idle p50 | idle p99 | idle max | slow probes | failed | slow p50 | slow p99 | slow max | slow conns opened / re-opened | ratio p99 slow/idle |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, r) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {:.2} |",
            i + 1,
            r.idle.times.len(),
            fmt_latency(r.idle.quantile(0.5)),
            fmt_latency(r.idle.quantile(0.99)),
            fmt_latency(r.idle.max()),
            r.slow.times.len(),
            r.slow.failed,
            fmt_latency(r.slow.quantile(0.5)),
            fmt_latency(r.slow.quantile(0.99)),
            fmt_latency(r.slow.max()),
            r.opened,
            r.reopened,
            r.slow.quantile(0.99) / r.idle.quantile(0.99)
        );
    }
    let _ = writeln!(
        out,
        "| **median** | | **{}** | **{}** | | | | **{}** | **{}** | | | **{ratio:.2}** |",
        fmt_latency(med(&|r| r.idle.quantile(0.5))),
        fmt_latency(idle_p99),
        fmt_latency(med(&|r| r.slow.quantile(0.5))),
        fmt_latency(slow_p99),
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "ratio health p99 under {} slow connections / idle (medians): {ratio:.2}; failed probes: {failed} of {probes}",
        opts.slow_connections
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Running 1s test @ http://127.0.0.1:1234/api/v1/system/health
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   102.50us   50.10us   1.20ms   90.00%
    Req/Sec    30.00k     1.00k   32.00k    70.00%
  Latency Distribution
     50%   95.00us
     75%  120.00us
     90%  150.00us
     99%    1.05ms
  59700 requests in 1.00s, 12.00MB read
Requests/sec:  59700.12
Transfer/sec:     12.00MB
";

    #[test]
    fn parses_wrk_output() {
        let r = parse_wrk(SAMPLE).unwrap();
        assert_eq!(r.requests, 59_700);
        assert!((r.rps - 59_700.12).abs() < 1e-6);
        assert!((r.p99 - 1.05e-3).abs() < 1e-12);
    }

    #[test]
    fn errors_and_non_2xx_fail_the_run() {
        let errors =
            SAMPLE.replace("Requests/sec:", "  Socket errors: connect 0, read 3, write 0, timeout 0\nRequests/sec:");
        assert!(parse_wrk(&errors).unwrap_err().contains("socket errors"));
        let non_2xx = SAMPLE.replace("Requests/sec:", "  Non-2xx or 3xx responses: 12\nRequests/sec:");
        assert!(parse_wrk(&non_2xx).unwrap_err().contains("non-2xx"));
        assert!(parse_wrk("garbage").is_err());
    }

    #[test]
    fn parses_latency_units() {
        assert_eq!(parse_duration("250.00us"), Some(250e-6));
        assert_eq!(parse_duration("2.00s"), Some(2.0));
        assert_eq!(parse_duration("1.50m"), Some(90.0));
        assert_eq!(parse_duration("12"), None);
        assert_eq!(parse_duration("3.0xs"), None);
    }

    fn options(args: &[&str]) -> Options {
        let args = ["--courrier", "/c", "--bare", "/b"].iter().chain(args).map(|s| (*s).to_owned());
        Options::parse(args).unwrap().unwrap()
    }

    #[test]
    fn parses_scenarios_and_sizes() {
        let default = options(&[]);
        assert_eq!((default.scenario, default.keys, default.duration, default.rounds), (Scenario::All, 128, 20, 3));
        let smoke = options(&["--smoke", "--scenario", "auth"]);
        assert_eq!((smoke.scenario, smoke.keys, smoke.duration, smoke.rounds), (Scenario::Auth, 4, 1, 1));
        assert_eq!(options(&["--scenario", "health", "--keys", "9"]).keys, 9);
        assert!(Scenario::All.health() && Scenario::All.auth());
        assert!(Scenario::Health.health() && !Scenario::Health.auth());
        assert!(!Scenario::Auth.health() && Scenario::Auth.auth());
        let parse = |args: &[&str]| Options::parse(args.iter().map(|s| (*s).to_owned()));
        assert!(parse(&["--scenario", "nope"]).unwrap_err().contains("health, auth, slow or all"));
        assert!(Scenario::All.slow() && Scenario::Slow.slow() && !Scenario::Slow.health() && !Scenario::Auth.slow());
        assert_eq!((default.slow_connections, smoke.slow_connections), (1_000, 50));
        assert_eq!(options(&["--scenario", "slow", "--slow-connections", "7"]).slow_connections, 7);
        assert!(parse(&["--slow-connections", "0"]).is_err());
        assert!(parse(&["--keys", "0"]).is_err());
        assert!(parse(&["--scenario"]).unwrap_err().contains("needs a value"));
    }

    #[test]
    fn wrk_commands_show_the_script_by_name() {
        let opts = options(&[]);
        let plain = Load::new("courrier health", Target::Courrier, HEALTH_PATH, None);
        assert_eq!(opts.wrk_command(&plain), "wrk -t2 -c64 -d20s --latency http://127.0.0.1:PORT/api/v1/system/health");
        let keyed = Load::new("courrier version", Target::Courrier, VERSION_PATH, Some(Path::new("/tmp/x/keys.lua")));
        assert_eq!(
            opts.wrk_command(&keyed),
            "wrk -t2 -c64 -d20s --latency -s keys.lua http://127.0.0.1:PORT/api/v1/system/version"
        );
        assert_eq!(opts.wrk_args(5, 80, &keyed)[5], "/tmp/x/keys.lua");
        assert!((opts.key_capacity() - 128.0 * 100_000.0 / 60.0).abs() < 1e-6);
    }

    #[test]
    fn scripts_rotate_over_the_keys() {
        let keys = vec![
            format!("svc_{}_{}", "1".repeat(16), "2".repeat(64)),
            format!("svc_{}_{}", "3".repeat(16), "4".repeat(64)),
        ];
        let script = wrk_script(&keys);
        for key in &keys {
            assert!(script.contains(&format!("  \"{key}\",\n")));
        }
        assert!(script.contains("\"Bearer \" .. key"));
        assert!(script.contains("function request()"));
        assert!(wrk_script(&[]).contains("local keys = {\n}\n"));
    }

    #[test]
    fn checks_the_version_answer() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n\
                  {\"data\":{\"version\":\"0.0.0\",\"backend\":\"sqlite\"},\"meta\":{\"request_id\":\"req_1\"}}";
        assert!(check_version_answer(ok).is_ok());
        assert!(check_version_answer(&ok.replace("\"version\"", "\"other\"")).is_err());
        assert!(check_version_answer("HTTP/1.1 200 OK\r\n\r\nnot json").is_err());
    }

    #[test]
    fn reports_the_auth_ratio() {
        let opts = options(&["--rounds", "2"]);
        let r = |rps: f64| WrkResult { rps, p99: 2e-3, requests: 1 };
        let loads = [
            Load::new("bare-hello", Target::Bare, HEALTH_PATH, Some(Path::new("plain.lua"))),
            courrier_health(Some(Path::new("plain.lua"))),
            Load {
                keyed: true,
                ..Load::new("courrier version", Target::Courrier, VERSION_PATH, Some(Path::new("keys.lua")))
            },
        ];
        let rounds = vec![vec![r(150_000.0), r(100_000.0), r(80_000.0)], vec![r(150_000.0), r(100_000.0), r(60_000.0)]];
        let out = report_auth(&opts, SystemTime::UNIX_EPOCH, &loads, &rounds);
        assert!(out.contains("| 1 | 150000 | 100000 | 2.00 ms | 80000 | 2.00 ms | 0.80 |"), "{out}");
        assert!(
            out.contains("| **median** | **150000** | **100000** | **2.00 ms** | **70000** | **2.00 ms** | **0.70** |"),
            "{out}"
        );
        assert!(out.contains("ratio version/health (median req/s): 0.70 (target >= 0.75: NOT met)"), "{out}");
        assert!(out.contains("health/bare-hello 0.67, version/bare-hello 0.47"), "{out}");
        let health = report_health(&opts, SystemTime::UNIX_EPOCH, &loads[..2], &rounds);
        assert!(health.contains("ratio courrier/bare (median req/s): 0.67 (target >= 0.85: NOT met)"), "{health}");
    }

    #[test]
    fn probe_quantiles_count_failed_probes_at_their_time() {
        let probes = Probes { times: (1..=200).map(|i| f64::from(i) * 1e-3).collect(), failed: 1 };
        assert!((probes.quantile(0.99) - 0.198).abs() < 1e-12);
        assert!((probes.quantile(0.5) - 0.100).abs() < 1e-12);
        assert!((probes.max() - 0.2).abs() < 1e-12);
        assert!(Probes::default().quantile(0.99).is_nan());
        let one = Probes { times: vec![5.0], failed: 1 };
        assert!((one.quantile(0.99) - 5.0).abs() < 1e-12);
    }

    #[test]
    fn reports_the_slow_ratio() {
        let opts = options(&["--rounds", "1", "--scenario", "slow"]);
        let probes = |ms: f64, failed| Probes { times: vec![ms * 1e-3; 100], failed };
        let rounds = vec![SlowRound { idle: probes(0.5, 0), slow: probes(2.0, 3), opened: 1000, reopened: 950 }];
        let out = report_slow(&opts, SystemTime::UNIX_EPOCH, 20_000, "20000", &rounds);
        assert!(
            out.contains(
                "| 1 | 100 | 500 µs | 500 µs | 500 µs | 100 | 3 | 2.00 ms | 2.00 ms | 2.00 ms | 1000 / 950 | 4.00 |"
            ),
            "{out}"
        );
        assert!(out.contains("(medians): 4.00; failed probes: 3 of 200"), "{out}");
        assert!(out.contains("open-file limits: harness 20000, server 20000"), "{out}");
    }
}
