//! `bench-http`: requests per second and p99 latency of `GET /api/v1/system/health` on
//! `courrier serve`, against the `bare-hello` hyper server started in the same run on the same
//! machine, both loaded by `wrk`. Rounds alternate bare, courrier, bare, courrier, ... so that
//! drift (thermal, other load) hits both alike; the report is the medians and their ratio.
//! Results go to BENCHMARKS.md.
//!
//! `bench-http --smoke` does everything for real at a tiny size (CI runs it so this cannot rot).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

const HEALTH_PATH: &str = "/api/v1/system/health";
const START_TIMEOUT: Duration = Duration::from_secs(30);
const TARGET_RATIO: f64 = 0.8;

const USAGE: &str = "usage: bench-http [--courrier PATH] [--bare PATH] [--wrk PATH] [--duration SECS] \
[--connections N] [--threads N] [--rounds N] [--warmup SECS] [--smoke]";

fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench-http: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-http: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone)]
struct Options {
    courrier: PathBuf,
    bare: PathBuf,
    wrk: PathBuf,
    duration: u64,
    connections: u32,
    threads: u32,
    rounds: u32,
    warmup: u64,
    smoke: bool,
}

impl Options {
    /// `Ok(None)` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let sibling = |name: &str| -> Result<PathBuf, String> {
            let exe = std::env::current_exe().map_err(|e| format!("cannot locate the current executable: {e}"))?;
            Ok(exe.with_file_name(name))
        };
        let (mut courrier, mut bare, mut wrk) = (None, None, PathBuf::from("wrk"));
        let (mut duration, mut connections, mut threads, mut rounds, mut warmup) = (None, None, None, None, None);
        let mut smoke = false;
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--bare" => bare = Some(PathBuf::from(value()?)),
                "--wrk" => wrk = PathBuf::from(value()?),
                "--duration" => duration = Some(positive(&arg, &value()?)?),
                "--connections" => connections = Some(positive(&arg, &value()?)?),
                "--threads" => threads = Some(positive(&arg, &value()?)?),
                "--rounds" => rounds = Some(positive(&arg, &value()?)?),
                "--warmup" => warmup = Some(value()?.parse::<u64>().map_err(|e| format!("--warmup: {e}"))?),
                "--smoke" => smoke = true,
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let (d_duration, d_connections, d_rounds, d_warmup) = if smoke { (1, 8, 1, 1) } else { (20, 64, 3, 2) };
        let opts = Self {
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
            smoke,
        };
        if opts.connections < opts.threads {
            return Err(format!("wrk needs --connections ({}) >= --threads ({})", opts.connections, opts.threads));
        }
        Ok(Some(opts))
    }

    fn wrk_args(&self, duration: u64, port: u16) -> Vec<String> {
        vec![
            format!("-t{}", self.threads),
            format!("-c{}", self.connections),
            format!("-d{duration}s"),
            "--latency".into(),
            format!("http://127.0.0.1:{port}{HEALTH_PATH}"),
        ]
    }
}

fn positive(flag: &str, raw: &str) -> Result<u64, String> {
    match raw.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} must be a positive integer, got {raw:?}")),
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

fn run(opts: &Options) -> Result<(), String> {
    check_wrk(&opts.wrk)?;
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
    let (bare_port, courrier_port) = free_ports()?;

    let mut bare_cmd = Command::new(&opts.bare);
    bare_cmd.arg(format!("127.0.0.1:{bare_port}"));
    let bare = Server::start(Target::Bare, bare_cmd, bare_port, scratch.path())?;

    let mut courrier_cmd = Command::new(&opts.courrier);
    courrier_cmd
        .arg("serve")
        .arg("--data-dir")
        .arg(&data_dir)
        .env("COURRIER_LISTEN", format!("127.0.0.1:{courrier_port}"))
        .env("COURRIER_LOG", "warn");
    let courrier = Server::start(Target::Courrier, courrier_cmd, courrier_port, scratch.path())?;

    let mut servers = [bare, courrier];
    for server in &mut servers {
        let answer = server.wait_healthy()?;
        check_health_answer(server.target, &answer)?;
        eprintln!("{} is up on port {} ({} bytes of health answer)", server.target.name(), server.port, answer.len());
    }

    let result = measure(opts, &mut servers);
    for server in &mut servers {
        server.stop();
    }
    drop(scratch);
    let table = result?;
    println!("{table}");
    Ok(())
}

fn measure(opts: &Options, servers: &mut [Server; 2]) -> Result<String, String> {
    let started = SystemTime::now();
    if opts.warmup > 0 {
        for server in servers.iter_mut() {
            eprintln!("warm-up: {} for {}s", server.target.name(), opts.warmup);
            server.load(opts, opts.warmup)?;
        }
    }
    let mut rounds: Vec<[WrkResult; 2]> = Vec::new();
    for round in 1..=opts.rounds {
        let mut pair = Vec::with_capacity(2);
        for server in servers.iter_mut() {
            eprintln!("round {round}/{}: {} for {}s", opts.rounds, server.target.name(), opts.duration);
            let r = server.load(opts, opts.duration)?;
            eprintln!("  {:.0} req/s, p99 {}", r.rps, fmt_latency(r.p99));
            pair.push(r);
        }
        rounds.push([pair[0], pair[1]]);
    }
    Ok(report(opts, started, &rounds))
}

fn report(opts: &Options, started: SystemTime, rounds: &[[WrkResult; 2]]) -> String {
    let median_of = |i: usize, f: fn(&WrkResult) -> f64| median(rounds.iter().map(|r| f(&r[i])).collect());
    let (bare_rps, courrier_rps) = (median_of(0, |r| r.rps), median_of(1, |r| r.rps));
    let (bare_p99, courrier_p99) = (median_of(0, |r| r.p99), median_of(1, |r| r.p99));
    let ratio = courrier_rps / bare_rps;
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);

    let mut out = String::new();
    let wrk_cmd = format!("wrk {}", opts.wrk_args(opts.duration, 0).join(" ")).replace(":0/", ":PORT/");
    let _ =
        writeln!(out, "bench-http{}: {} UTC, {cores} cores", if opts.smoke { " (smoke)" } else { "" }, utc(started));
    let _ = writeln!(out, "load: `{wrk_cmd}`, {} round(s), warm-up {}s each", opts.rounds, opts.warmup);
    let _ = writeln!(out);
    let _ =
        writeln!(out, "| round | bare-hello req/s | bare-hello p99 | courrier req/s | courrier p99 | ratio req/s |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for (i, [b, c]) in rounds.iter().enumerate() {
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
    let verdict = if ratio >= TARGET_RATIO { "met" } else { "NOT met" };
    let _ = writeln!(out, "ratio courrier/bare (median req/s): {ratio:.2} (target >= {TARGET_RATIO}: {verdict})");
    out
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Seconds, shown in the unit wrk would use.
fn fmt_latency(secs: f64) -> String {
    if secs < 1e-3 {
        format!("{:.0} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
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

/// A child server, killed when dropped (error paths included).
struct Server {
    target: Target,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl Server {
    fn start(target: Target, mut cmd: Command, port: u16, scratch: &Path) -> Result<Self, String> {
        let log = scratch.join(format!("{}.log", target.name()));
        let file = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let file2 = file.try_clone().map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(file2);
        let child =
            cmd.spawn().map_err(|e| format!("cannot start {} ({:?}): {e}", target.name(), cmd.get_program()))?;
        Ok(Self { target, port, child: Some(child), log })
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        if tail.is_empty() { "(its output was empty)".into() } else { format!("its last output:\n{tail}") }
    }

    /// Fails if the process is gone.
    fn check_alive(&mut self) -> Result<(), String> {
        let status = match self.child.as_mut().map(Child::try_wait) {
            None => Some(None),
            Some(Ok(None)) => None,
            Some(Ok(Some(status))) => Some(Some(status)),
            Some(Err(e)) => return Err(format!("cannot check on {}: {e}", self.target.name())),
        };
        match status {
            None => Ok(()),
            Some(status) => {
                self.child = None;
                let how = status.map_or_else(|| "was already stopped".to_owned(), |s| format!("exited ({s})"));
                Err(format!("{} {how}; {}", self.target.name(), self.log_tail()))
            }
        }
    }

    /// Polls the health route until it answers 200; returns the raw answer.
    fn wait_healthy(&mut self) -> Result<String, String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last_error = String::from("no attempt made");
        while Instant::now() < deadline {
            self.check_alive()?;
            match http_get(self.port, HEALTH_PATH) {
                Ok(answer) if answer.starts_with("HTTP/1.1 200") => return Ok(answer),
                Ok(answer) => last_error = format!("answered {:?}", answer.lines().next().unwrap_or("")),
                Err(e) => last_error = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{} did not answer GET {HEALTH_PATH} with 200 on port {} within {}s (last: {last_error}); {}",
            self.target.name(),
            self.port,
            START_TIMEOUT.as_secs(),
            self.log_tail()
        ))
    }

    fn load(&mut self, opts: &Options, duration: u64) -> Result<WrkResult, String> {
        let args = opts.wrk_args(duration, self.port);
        let output = Command::new(&opts.wrk)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run wrk: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let context = || {
            format!(
                "`wrk {}` against {}\n--- stdout\n{stdout}--- stderr\n{}",
                args.join(" "),
                self.target.name(),
                String::from_utf8_lossy(&output.stderr)
            )
        };
        if !output.status.success() {
            return Err(format!("wrk failed ({}): {}", output.status, context()));
        }
        let result = parse_wrk(&stdout).map_err(|e| format!("{e}: {}", context()))?;
        self.check_alive()?;
        Ok(result)
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A one-shot `GET` over a fresh connection; the whole answer as text.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Both servers must answer the JSON shape of courrier's health route, so that wrk moves the
/// same kind of bytes from each.
fn check_health_answer(target: Target, answer: &str) -> Result<(), String> {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let json: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| format!("{}: the health answer is not JSON ({e}): {answer:?}", target.name()))?;
    if json["data"]["status"] != "ok" || !json["meta"]["request_id"].is_string() {
        return Err(format!("{}: unexpected health answer {answer:?}", target.name()));
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

/// `YYYY-MM-DD HH:MM` in UTC (civil-from-days, H. Hinnant).
fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
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

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
    }

    #[test]
    fn formats_utc_dates() {
        assert_eq!(utc(SystemTime::UNIX_EPOCH), "1970-01-01 00:00");
        assert_eq!(utc(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_660)), "2000-02-29 01:01");
    }
}
