//! bench-cli: the command line's bulk work against its baselines (issue 24), same runs, ratios.
//!
//! - `export`: `courrier members export -o FILE` of a list of 1,000,000 members, beside the
//!   `sqlite3` shell's `-csv` output of the same rows (the same five columns, the time formatted
//!   in SQL) from the same database into a file. Target: at most 2x.
//! - `import`: `courrier members import` of a generated CSV of about 25 MiB into a fresh list of a
//!   running server (on its data directory), beside `POST .../members/import` of the same document
//!   into another fresh list of another fresh server. Target: at most 1.0x.
//!
//! Each timing is the wall time of the whole process (`courrier`, `sqlite3`) or of the whole HTTP
//! request, so the CLI pays its start (opening and checking the database) in every round.

use courrier_benches::{
    Api, BENCH_EMAIL, Server, check_status, cli, create_api_key, create_bench_user, free_port, harness_main, json,
    loadavg, median, positive, serve_command, sibling, utc,
};
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

const USAGE: &str = "usage: bench-cli [--scenario export|import|all (default)] [--smoke] [--courrier PATH] \
[--sqlite3 PATH] [--rounds N] [--export-members N] [--import-rows N] [--tmpfs DIR]";
const DOMAIN: &str = "example.org";
/// The contract's cap on an imported document, less a little: the document stays under it.
const IMPORT_BYTES: u64 = 25 * 1024 * 1024 - 64 * 1024;
const EXPORT_TARGET: f64 = 2.0;
const IMPORT_TARGET: f64 = 1.0;

fn main() -> ExitCode {
    harness_main("bench-cli", USAGE, Options::parse, run)
}

struct Options {
    export: bool,
    import: bool,
    smoke: bool,
    courrier: PathBuf,
    sqlite3: PathBuf,
    rounds: u64,
    export_members: u64,
    import_rows: u64,
    /// Where the data directories go (default: the system's temporary directory).
    tmpfs: Option<PathBuf>,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let (mut scenario, mut smoke, mut courrier, mut sqlite3, mut tmpfs) =
            ("all".to_owned(), false, None, PathBuf::from("sqlite3"), None);
        let (mut rounds, mut export_members, mut import_rows) = (None, None, None);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--help" | "-h" => return Ok(None),
                "--smoke" => smoke = true,
                "--scenario" => scenario = value()?,
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--sqlite3" => sqlite3 = PathBuf::from(value()?),
                "--tmpfs" => tmpfs = Some(PathBuf::from(value()?)),
                "--rounds" => rounds = Some(positive("--rounds", &value()?)?),
                "--export-members" => export_members = Some(positive("--export-members", &value()?)?),
                "--import-rows" => import_rows = Some(positive("--import-rows", &value()?)?),
                other => return Err(format!("unknown option {other}")),
            }
        }
        let (export, import) = match scenario.as_str() {
            "export" => (true, false),
            "import" => (false, true),
            "all" => (true, true),
            other => return Err(format!("--scenario must be export, import or all, got {other:?}")),
        };
        let courrier = match courrier {
            Some(c) => c,
            None => sibling("courrier")?,
        };
        Ok(Some(Self {
            export,
            import,
            smoke,
            courrier,
            sqlite3,
            rounds: rounds.unwrap_or(if smoke { 1 } else { 3 }),
            export_members: export_members.unwrap_or(if smoke { 2_000 } else { 1_000_000 }),
            import_rows: import_rows.unwrap_or(if smoke { 2_000 } else { u64::MAX }),
            tmpfs,
        }))
    }
}

fn run(opts: &Options) -> Result<(), String> {
    let scratch = match &opts.tmpfs {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("cannot make a scratch directory: {e}"))?;
    let mut report = String::new();
    if opts.export {
        report.push_str(&export_scenario(opts, scratch.path())?);
    }
    if opts.import {
        report.push_str(&import_scenario(opts, scratch.path())?);
    }
    print!("{report}");
    Ok(())
}

/// Row `i` of a generated member document: `email,display_name,delivery_mode`, about 45 bytes.
fn csv_row(i: u64, out: &mut String) {
    let mode = match i % 20 {
        0..=14 => "regular",
        15..=17 => "digest",
        _ => "nomail",
    };
    let _ = writeln!(out, "member{i}@example-{}.net,Member {i},{mode}", i % 97);
}

/// Writes rows `start..start + rows` to `path`, stopping before `max_bytes`; the rows written.
fn write_csv(path: &Path, start: u64, rows: u64, max_bytes: u64) -> Result<u64, String> {
    let file = std::fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let header = "email,display_name,delivery_mode\n";
    let mut bytes = header.len() as u64;
    let mut line = String::with_capacity(96);
    w.write_all(header.as_bytes()).map_err(|e| e.to_string())?;
    let mut written = 0;
    while written < rows {
        line.clear();
        csv_row(start + written, &mut line);
        if bytes + line.len() as u64 > max_bytes {
            break;
        }
        w.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
        bytes += line.len() as u64;
        written += 1;
    }
    w.flush().map_err(|e| e.to_string())?;
    Ok(written)
}

/// A data directory with the bench user (a site admin), the domain, and the open list `list`,
/// all made with the CLI.
fn prepare(opts: &Options, dir: &Path, list: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    create_bench_user(&opts.courrier, dir, true)?;
    cli(&opts.courrier, dir, &["domain", "create", DOMAIN], None)?;
    add_list(opts, dir, list)
}

fn add_list(opts: &Options, dir: &Path, list: &str) -> Result<(), String> {
    let args = [
        "list",
        "create",
        "--domain",
        DOMAIN,
        "--list",
        list,
        "--display-name",
        list,
        "--owner",
        BENCH_EMAIL,
        "--subscription-policy",
        "open",
    ];
    cli(&opts.courrier, dir, &args, None).map(|_| ())
}

/// `courrier --json members import` of `csv` into `list`; checks the report; the wall time.
fn import_cli(opts: &Options, dir: &Path, list: &str, csv: &Path, rows: u64) -> Result<Duration, String> {
    let file = csv.display().to_string();
    let args =
        ["--json", "members", "import", "--domain", DOMAIN, "--list", list, "--consent-evidence", "bench-cli", &file];
    let t = Instant::now();
    let out = cli(&opts.courrier, dir, &args, None)?;
    let took = t.elapsed();
    let report = json(&out)?;
    if report["added"].as_u64() != Some(rows) || report["errors"].as_u64() != Some(0) {
        return Err(format!("`courrier members import` did not add {rows} rows without error: {out}"));
    }
    Ok(took)
}

/// Counts the lines of a file.
fn lines(path: &Path) -> Result<u64, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(bytes.iter().filter(|b| **b == b'\n').count() as u64)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn smoke(opts: &Options) -> &'static str {
    if opts.smoke { " (smoke size: not a measurement)" } else { "" }
}

fn verdict(ratio: f64, target: f64) -> &'static str {
    if ratio <= target { "met" } else { "NOT met" }
}

// ---------------------------------------------------------------------------------------------
// Export: courrier members export vs sqlite3 -csv
// ---------------------------------------------------------------------------------------------

fn export_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let dir = scratch.join("export-data");
    prepare(opts, &dir, "big")?;
    let n = opts.export_members;
    let t = Instant::now();
    let (mut loaded, mut chunk) = (0, 0);
    while loaded < n {
        let csv = scratch.join(format!("load-{chunk}.csv"));
        let rows = write_csv(&csv, loaded, n - loaded, IMPORT_BYTES)?;
        import_cli(opts, &dir, "big", &csv, rows)?;
        let _ = std::fs::remove_file(&csv);
        loaded += rows;
        chunk += 1;
        eprintln!("export: {loaded}/{n} members loaded ({:.0} s)", t.elapsed().as_secs_f64());
    }
    let list =
        json(&cli(&opts.courrier, &dir, &["--json", "list", "show", "--domain", DOMAIN, "--list", "big"], None)?)?;
    let list_id = list["id"].as_i64().ok_or_else(|| format!("no list id in {list}"))?;
    let query = format!(
        "SELECT email, display_name, delivery_mode, status, \
         strftime('%Y-%m-%dT%H:%M:%fZ', subscribed_at / 1000000.0, 'unixepoch') \
         FROM members WHERE list_id = {list_id} ORDER BY id;"
    );
    let db = dir.join("courrier.db");
    let started = SystemTime::now();
    let load_start = loadavg();
    let mut rows_table = Vec::new();
    for round in 1..=opts.rounds {
        let out = scratch.join("export-courrier.csv");
        let args = ["members", "export", "--domain", DOMAIN, "--list", "big", "-o"];
        let t = Instant::now();
        let mut full: Vec<&str> = args.to_vec();
        let file = out.display().to_string();
        full.push(&file);
        cli(&opts.courrier, &dir, &full, None)?;
        let courrier = t.elapsed();
        let got = lines(&out)?;
        if got != n + 1 {
            return Err(format!("courrier members export wrote {got} lines, not {} (header and rows)", n + 1));
        }
        let base = scratch.join("export-sqlite3.csv");
        let file = std::fs::File::create(&base).map_err(|e| format!("cannot create {}: {e}", base.display()))?;
        let t = Instant::now();
        let status = Command::new(&opts.sqlite3)
            .arg("-readonly")
            .arg("-csv")
            .arg(&db)
            .arg(&query)
            .stdin(Stdio::null())
            .stdout(file)
            .status()
            .map_err(|e| format!("cannot run {} (apt-get install sqlite3): {e}", opts.sqlite3.display()))?;
        let sqlite3 = t.elapsed();
        if !status.success() || lines(&base)? != n {
            return Err(format!("sqlite3 -csv failed ({status}) or wrote other than {n} rows"));
        }
        let ratio = secs(courrier) / secs(sqlite3);
        eprintln!(
            "export round {round}/{}: courrier {courrier:.2?}, sqlite3 {sqlite3:.2?}, ratio {ratio:.2}",
            opts.rounds
        );
        rows_table.push((secs(courrier), secs(sqlite3), ratio));
    }
    let mut out = String::new();
    let _ = writeln!(out, "### export{} ({} UTC, load average {load_start} at its start)\n", smoke(opts), utc(started));
    let _ = writeln!(
        out,
        "{n} members of one list; courrier: `courrier --data-dir DIR members export --domain {DOMAIN} --list big -o \
         FILE`; sqlite3: `sqlite3 -readonly -csv DIR/courrier.db \"{query}\" > FILE` (the same rows and columns, \
         the time formatted in SQL); each the wall time of the whole process, files on the scratch directory.\n"
    );
    let _ = writeln!(out, "| round | courrier export | sqlite3 -csv | ratio courrier/sqlite3 |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (i, (c, s, r)) in rows_table.iter().enumerate() {
        let _ = writeln!(out, "| {} | {c:.2} s | {s:.2} s | {r:.2} |", i + 1);
    }
    let (c, s, r) = (
        median(rows_table.iter().map(|r| r.0).collect()),
        median(rows_table.iter().map(|r| r.1).collect()),
        median(rows_table.iter().map(|r| r.2).collect()),
    );
    let _ = writeln!(out, "| **median** | **{c:.2} s** | **{s:.2} s** | **{r:.2}** |\n");
    let _ = writeln!(out, "target <= {EXPORT_TARGET}x: {}\n", verdict(r, EXPORT_TARGET));
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Import: courrier members import vs POST .../members/import
// ---------------------------------------------------------------------------------------------

/// A fresh data directory with its list, and a `courrier serve` on it.
struct Running {
    server: Server,
    dir: PathBuf,
    api: Api,
}

fn start(opts: &Options, dir: &Path) -> Result<Running, String> {
    prepare(opts, dir, "bench")?;
    let key = create_api_key(&opts.courrier, dir, "bench", "read,members:write,manage", 100_000)?;
    let port = free_port()?;
    let mut server = Server::start("courrier", serve_command(&opts.courrier, dir, port), port, dir.join("server.log"))?
        .terminate_on_drop();
    server.wait_healthy()?;
    Ok(Running { server, dir: dir.to_path_buf(), api: Api::bearer(&format!("http://127.0.0.1:{port}"), &key) })
}

fn import_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let csv = scratch.join("import.csv");
    let rows = write_csv(&csv, 0, opts.import_rows, IMPORT_BYTES)?;
    let size = std::fs::metadata(&csv).map_err(|e| e.to_string())?.len();
    let doc = std::fs::read(&csv).map_err(|e| e.to_string())?;
    eprintln!("import: a document of {rows} rows, {size} bytes ({:.2} MiB)", size as f64 / 1048576.0);
    let started = SystemTime::now();
    let load_start = loadavg();
    let mut rows_table = Vec::new();
    for round in 1..=opts.rounds {
        // The API: the whole request, the document sent from memory.
        let running = start(opts, &scratch.join(format!("import-api-{round}")))?;
        let path = format!("/api/v1/domains/{DOMAIN}/lists/bench/members/import?consent_evidence=bench-cli");
        let t = Instant::now();
        let (status, body) = running.api.send("POST", &path, "text/csv", &doc, &[])?;
        let api = t.elapsed();
        check_status("POST members/import", status, &body, &[200])?;
        if json(&body)?["data"]["added"].as_u64() != Some(rows) {
            return Err(format!("the API import did not add {rows} rows: {body}"));
        }
        drop(running);
        // The CLI: the whole process, beside a running server on the same data directory.
        let running = start(opts, &scratch.join(format!("import-cli-{round}")))?;
        let cli_took = import_cli(opts, &running.dir, "bench", &csv, rows)?;
        let mut running = running;
        running.server.check_alive()?;
        drop(running);
        let ratio = secs(cli_took) / secs(api);
        eprintln!("import round {round}/{}: API {api:.2?}, CLI {cli_took:.2?}, ratio {ratio:.2}", opts.rounds);
        rows_table.push((secs(api), secs(cli_took), ratio));
        for side in ["api", "cli"] {
            let _ = std::fs::remove_dir_all(scratch.join(format!("import-{side}-{round}")));
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "### import{} ({} UTC, load average {load_start} at its start)\n", smoke(opts), utc(started));
    let _ = writeln!(
        out,
        "{rows} rows, {size} bytes; API: `POST /api/v1/domains/{DOMAIN}/lists/bench/members/import?consent_evidence=...` \
         (`text/csv`, the whole request); CLI: `courrier --data-dir DIR --json members import --domain {DOMAIN} --list \
         bench --consent-evidence ... FILE` (the whole process) beside `courrier serve` on DIR; each into a fresh \
         list of a fresh data directory.\n"
    );
    let _ = writeln!(out, "| round | API import | CLI import | ratio CLI/API |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (i, (a, c, r)) in rows_table.iter().enumerate() {
        let _ = writeln!(out, "| {} | {a:.2} s | {c:.2} s | {r:.2} |", i + 1);
    }
    let (a, c, r) = (
        median(rows_table.iter().map(|r| r.0).collect()),
        median(rows_table.iter().map(|r| r.1).collect()),
        median(rows_table.iter().map(|r| r.2).collect()),
    );
    let _ = writeln!(out, "| **median** | **{a:.2} s** | **{c:.2} s** | **{r:.2}** |\n");
    let _ = writeln!(out, "target <= {IMPORT_TARGET}x: {}\n", verdict(r, IMPORT_TARGET));
    Ok(out)
}
