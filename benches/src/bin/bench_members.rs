//! `bench-members`: the members API of `courrier serve` against baselines measured in the same
//! run on the same machine (issue 4's benchmarks). Scenarios (`--scenario`, default all):
//!
//! - `import`: a generated CSV of about 25 MiB (about 500,000 rows) imported through
//!   `POST .../members/import` (and, for context, the `courrier members import` CLI) against the
//!   `sqlite3` shell's `.import` of the same file into a bare table.
//! - `list`: `GET .../members` on a list of 1,000,000 members (loaded through the import API in
//!   chunks under 25 MiB), filtered by `status` + `delivery_mode` and by `email_contains`, with
//!   varied query values; p50 and p99 against the public health route of the same server.
//! - `add`: `POST .../members` one member per request, 1 client and 8 clients, against GNU Mailman
//!   3 core's REST API (`--mailman-url`), with courrier also on a tmpfs data directory (to show
//!   what `synchronous=FULL` fsyncs cost) and with an `Idempotency-Key` on every request; then
//!   listing 2,000 members (courrier 500 a page, Mailman's roster).
//!
//! Every scenario alternates its contenders round by round (A, B, A, B, ...) so that drift hits
//! them alike; reports give every round, the medians and the ratios. Results go to BENCHMARKS.md.
//! Nothing here asserts on timings.
//!
//! `bench-members --smoke` runs everything for real at a tiny size, without Mailman (CI).

use courrier_benches::mailman;
use courrier_benches::{
    Api, BENCH_EMAIL, HEALTH_PATH, Server, check_status, cli, create_api_key, create_bench_user, fmt_latency,
    free_port, harness_main, json, loadavg, median, percent_encode, percentile, positive, serve_command, sibling, utc,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

const DOMAIN: &str = "example.org";
/// The contract's cap on an imported document (413 beyond).
const IMPORT_CAP: u64 = 25 * 1024 * 1024;
/// Generated documents stay this far under the cap.
const IMPORT_SLACK: u64 = 4096;
/// courrier import time / sqlite3 `.import` time.
const IMPORT_TARGET: f64 = 3.0;
/// p99 targets of the listing, in seconds.
const FILTER_P99_TARGET: f64 = 0.020;
const SEARCH_P99_TARGET: f64 = 0.100;
/// courrier members per second / Mailman's.
const ADD_TARGET: f64 = 50.0;
/// Keys' quota (per minute and server process); the add load gives each client its own key.
const KEY_QUOTA_PER_MIN: u32 = 100_000;
const MAX_CLIENTS: usize = 8;

const USAGE: &str = "usage: bench-members [--scenario import|list|add|all (default)] [--smoke] [--courrier PATH] \
[--sqlite3 PATH] [--mailman-url URL (default http://127.0.0.1:8001)] [--mailman-auth USER:PASS] [--no-mailman] \
[--rounds N] [--import-rows N] [--list-members N] [--queries N] [--list-limit N] [--add-members N] \
[--mailman-add-members N] [--roster N] [--tmpfs DIR (default /dev/shm)] [--scratch DIR] [--csv-out FILE]";

fn main() -> ExitCode {
    harness_main("bench-members", USAGE, Options::parse, run)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Import,
    List,
    Add,
    All,
}

impl Scenario {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "import" => Ok(Self::Import),
            "list" => Ok(Self::List),
            "add" => Ok(Self::Add),
            "all" => Ok(Self::All),
            _ => Err(format!("--scenario must be import, list, add or all, got {raw:?}")),
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
    sqlite3: PathBuf,
    /// None: no Mailman columns.
    mailman: Option<String>,
    mailman_auth: String,
    rounds: u32,
    /// Rows of the import document; capped by its size (25 MiB less a little).
    import_rows: u64,
    list_members: u64,
    /// Requests per query class and round in the listing scenario.
    queries: usize,
    list_limit: u32,
    add_members: u64,
    mailman_add_members: u64,
    roster: u64,
    tmpfs: Option<PathBuf>,
    /// Where the data directories and documents go (a temporary directory under it).
    scratch: Option<PathBuf>,
    /// Write the import document there and exit (to look at it or import it by hand).
    csv_out: Option<PathBuf>,
}

impl Options {
    /// `Ok(None)` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut scenario = Scenario::All;
        let mut smoke = false;
        let (mut courrier, mut sqlite3) = (None, PathBuf::from("sqlite3"));
        let (mut mailman_url, mut no_mailman) = (None, false);
        let mut mailman_auth = String::from("restadmin:restpass");
        let mut num: BTreeMap<&'static str, u64> = BTreeMap::new();
        let (mut tmpfs, mut scratch, mut csv_out) = (Some(PathBuf::from("/dev/shm")), None, None);
        const NUMERIC: [&str; 9] = [
            "--rounds",
            "--import-rows",
            "--list-members",
            "--queries",
            "--list-limit",
            "--add-members",
            "--mailman-add-members",
            "--roster",
            "--unused",
        ];
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--scenario" => scenario = Scenario::parse(&value()?)?,
                "--smoke" => smoke = true,
                "--courrier" => courrier = Some(PathBuf::from(value()?)),
                "--sqlite3" => sqlite3 = PathBuf::from(value()?),
                "--mailman-url" => mailman_url = Some(value()?.trim_end_matches('/').to_owned()),
                "--mailman-auth" => mailman_auth = value()?,
                "--no-mailman" => no_mailman = true,
                "--tmpfs" => {
                    let v = value()?;
                    tmpfs = if v.is_empty() || v == "none" { None } else { Some(PathBuf::from(v)) };
                }
                "--scratch" => scratch = Some(PathBuf::from(value()?)),
                "--csv-out" => csv_out = Some(PathBuf::from(value()?)),
                "-h" | "--help" => return Ok(None),
                other => match NUMERIC.iter().find(|n| **n == other && **n != "--unused") {
                    Some(name) => {
                        num.insert(name, positive(name, &value()?)?);
                    }
                    None => return Err(format!("unknown argument {other:?}")),
                },
            }
        }
        // Smoke: tiny sizes, one round, never Mailman (CI has none).
        let d = |full: u64, tiny: u64| if smoke { tiny } else { full };
        let get = |name: &str, default: u64| num.get(name).copied().unwrap_or(default);
        let mailman = if smoke || no_mailman {
            None
        } else {
            Some(mailman_url.unwrap_or_else(|| "http://127.0.0.1:8001".to_owned()))
        };
        let as_u32 = |name: &str, v: u64| u32::try_from(v).map_err(|_| format!("{name} is too large"));
        let opts = Self {
            scenario,
            smoke,
            courrier: match courrier {
                Some(p) => p,
                None => sibling("courrier")?,
            },
            sqlite3,
            mailman,
            mailman_auth,
            rounds: as_u32("--rounds", get("--rounds", d(3, 1)))?,
            import_rows: get("--import-rows", d(u64::MAX, 2_000)),
            list_members: get("--list-members", d(1_000_000, 5_000)),
            queries: usize::try_from(get("--queries", d(300, 20))).map_err(|e| e.to_string())?,
            list_limit: as_u32("--list-limit", get("--list-limit", 50))?,
            add_members: get("--add-members", d(2_000, 50)),
            mailman_add_members: get("--mailman-add-members", 300),
            roster: get("--roster", d(2_000, 200)),
            tmpfs: tmpfs.filter(|p| p.is_dir()),
            scratch,
            csv_out,
        };
        if opts.list_limit > 500 {
            return Err("--list-limit must be at most 500 (the API's maximum)".into());
        }
        Ok(Some(opts))
    }
}

fn run(opts: &Options) -> Result<(), String> {
    if let Some(path) = &opts.csv_out {
        let (rows, bytes) = write_csv(path, 0, opts.import_rows, IMPORT_CAP - IMPORT_SLACK)?;
        println!("{}: {rows} rows, {bytes} bytes", path.display());
        return Ok(());
    }
    if !opts.courrier.is_file() {
        return Err(format!(
            "courrier binary not found at {} (build it: cargo build --release -p courrier-cli, or pass --courrier)",
            opts.courrier.display()
        ));
    }
    let scratch = match &opts.scratch {
        Some(dir) => tempfile::TempDir::new_in(dir),
        None => tempfile::TempDir::new(),
    }
    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let started = SystemTime::now();
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let smoke = if opts.smoke { " (smoke)" } else { "" };
    let _ =
        writeln!(out, "bench-members{smoke}: {} UTC, {cores} cores, load average at start {}", utc(started), loadavg());
    println!("{out}");

    if opts.scenario.includes(Scenario::Import) {
        let report = import_scenario(opts, scratch.path())?;
        println!("{report}");
    }
    if opts.scenario.includes(Scenario::List) {
        let report = list_scenario(opts, scratch.path())?;
        println!("{report}");
    }
    if opts.scenario.includes(Scenario::Add) {
        let report = add_scenario(opts, scratch.path())?;
        println!("{report}");
    }
    println!("load average at the end: {}; finished {} UTC", loadavg(), utc(SystemTime::now()));
    drop(scratch);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The CSV document
// ---------------------------------------------------------------------------------------------

const FIRST: &[&str] = &[
    "Alice",
    "Bruno",
    "Camille",
    "Chloé",
    "David",
    "Émilie",
    "François",
    "Gabriel",
    "Hugo",
    "Inès",
    "Jules",
    "Karim",
    "Léa",
    "Lucas",
    "Manon",
    "Nathan",
    "Olivia",
    "Paul",
    "Quentin",
    "Rose",
    "Sofia",
    "Thomas",
    "Victor",
    "Wen",
    "Xavier",
    "Yasmine",
    "Zoë",
    "Anna",
    "Ben",
    "Carlos",
    "Dmitri",
    "Eva",
    "Fatima",
    "Greta",
    "Hiro",
    "James",
    "Kofi",
    "Liam",
    "María",
    "Noah",
    "Omar",
    "Priya",
    "Raj",
    "Sara",
    "Tom",
    "Uma",
    "Wei",
    "Yuki",
    "Jürgen",
    "Siobhán",
];
const LAST: &[&str] = &[
    "Martin", "Bernard", "Dubois", "Thomas", "Robert", "Richard", "Petit", "Durand", "Leroy", "Moreau", "Simon",
    "Laurent", "Lefèvre", "Michel", "García", "Müller", "Schmidt", "Smith", "Johnson", "Brown", "Nguyen", "Kim",
    "Rossi", "Russo", "Novák", "Kowalski", "Silva", "Santos", "O'Brien", "Murphy", "Jensen", "Hansen", "Yamamoto",
    "Tanaka", "Chen", "Wang", "Singh", "Patel", "Okafor", "Mensah", "Haddad", "Cohen", "Ivanov", "Popescu", "Nagy",
    "Horvath", "Fischer", "Weber", "Costa", "Björk",
];
const DOMAINS: &[&str] = &[
    "gmail.com",
    "yahoo.fr",
    "outlook.com",
    "orange.fr",
    "free.fr",
    "laposte.net",
    "proton.me",
    "hotmail.com",
    "icloud.com",
    "gmx.de",
    "web.de",
    "sfr.fr",
    "univ-lyon1.fr",
    "mairie-example.fr",
    "acme-corp.co.uk",
    "example.net",
];

/// splitmix64: row `i`'s content is a function of `i` alone, so every document and chunk is
/// reproducible and distinct indexes give distinct addresses.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A name as it can appear in an address: accents folded, other non-letters dropped, lowercased.
fn ascii_fold(s: &str) -> String {
    s.chars()
        .filter_map(|c| match c {
            'a'..='z' | 'A'..='Z' => Some(c.to_ascii_lowercase()),
            'é' | 'É' | 'è' | 'ë' => Some('e'),
            'á' | 'à' => Some('a'),
            'í' | 'ï' => Some('i'),
            'ó' | 'ö' => Some('o'),
            'ü' | 'ú' => Some('u'),
            'ç' => Some('c'),
            _ => None,
        })
        .collect()
}

/// Row `i`: `email,display_name,delivery_mode` and its newline. 75% `regular`, 5% blank (which
/// means regular), 12% `digest`, 8% `nomail`; 5% without a display name; 2% of addresses
/// capitalised as people type them. The index in the local part makes it unique.
fn csv_row(i: u64, out: &mut String) {
    let r = mix(i);
    let first = FIRST[(r % FIRST.len() as u64) as usize];
    let last = LAST[((r >> 8) % LAST.len() as u64) as usize];
    let domain = DOMAINS[((r >> 16) % DOMAINS.len() as u64) as usize];
    let (f, l) = (ascii_fold(first), ascii_fold(last));
    let start = out.len();
    match (r >> 24) % 5 {
        0 => write!(out, "{f}.{l}{i}"),
        1 => write!(out, "{}.{l}{i}", &f[..1]),
        2 => write!(out, "{f}{l}{i}"),
        3 => write!(out, "{l}_{f}{i}"),
        _ => write!(out, "{f}{i}"),
    }
    .expect("writing to a String");
    if (r >> 32).is_multiple_of(50) {
        let cap = out[start..start + 1].to_ascii_uppercase();
        out.replace_range(start..start + 1, &cap);
    }
    out.push('@');
    out.push_str(domain);
    out.push(',');
    if !(r >> 40).is_multiple_of(20) {
        out.push_str(first);
        out.push(' ');
        out.push_str(last);
    }
    out.push(',');
    out.push_str(match (r >> 48) % 100 {
        0..=74 => "regular",
        75..=79 => "",
        80..=91 => "digest",
        _ => "nomail",
    });
    out.push('\n');
}

const CSV_HEADER: &str = "email,display_name,delivery_mode\n";

/// Writes rows `start..start + max_rows` to `path`, stopping early so that the document stays
/// within `max_bytes`. Returns the rows written and the document's size.
fn write_csv(path: &Path, start: u64, max_rows: u64, max_bytes: u64) -> Result<(u64, u64), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut bytes = CSV_HEADER.len() as u64;
    w.write_all(CSV_HEADER.as_bytes()).map_err(|e| e.to_string())?;
    let mut row = String::with_capacity(128);
    let mut rows = 0;
    while rows < max_rows {
        row.clear();
        csv_row(start + rows, &mut row);
        if bytes + row.len() as u64 > max_bytes {
            break;
        }
        w.write_all(row.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        bytes += row.len() as u64;
        rows += 1;
    }
    w.flush().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((rows, bytes))
}

// ---------------------------------------------------------------------------------------------
// courrier: server, accounts, API client
// ---------------------------------------------------------------------------------------------

/// A `courrier serve` on a free port with its own data directory, the bench user (a site admin),
/// `MAX_CLIENTS` API keys with every permission and the highest quota, and the domain.
struct Courrier {
    /// Stops the server when dropped.
    server: Server,
    data_dir: PathBuf,
    keys: Vec<String>,
    base: String,
}

impl Courrier {
    fn start(opts: &Options, name: &str, data_dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(data_dir).map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
        // Accounts are made with the CLI before the server starts, as bench-http does.
        create_bench_user(&opts.courrier, data_dir, true)?;
        let mut keys = Vec::new();
        for i in 1..=MAX_CLIENTS {
            let perms = "read,members:write,send,moderate,manage";
            keys.push(create_api_key(&opts.courrier, data_dir, &format!("bench-{i}"), perms, KEY_QUOTA_PER_MIN)?);
        }
        let port = free_port()?;
        let mut cmd = serve_command(&opts.courrier, data_dir, port);
        // The search snapshot's build (time, rows, bytes) is reported by the list scenario.
        cmd.env("COURRIER_LOG", "warn,courrier_core::adapters::sqlite::search=info");
        let mut server = Server::start(name, cmd, port, data_dir.join("server.log"))?;
        server.wait_healthy()?;
        let this = Self { server, data_dir: data_dir.to_path_buf(), keys, base: format!("http://127.0.0.1:{port}") };
        let api = this.api(0);
        api.expect("POST", "/api/v1/domains", &serde_json::json!({ "name": DOMAIN }), &[201])?;
        eprintln!("{name} is up on port {port}, data directory {}", data_dir.display());
        Ok(this)
    }

    fn api(&self, key: usize) -> Api {
        Api::bearer(&self.base, &self.keys[key % self.keys.len()])
    }

    fn create_list(&self, list: &str) -> Result<(), String> {
        let body = serde_json::json!({
            "name": list,
            "display_name": format!("Bench {list}"),
            "owner_email": BENCH_EMAIL,
            "subscription_policy": "open",
        });
        self.api(0).expect("POST", &format!("/api/v1/domains/{DOMAIN}/lists"), &body, &[201])?;
        Ok(())
    }

    fn members_path(list: &str) -> String {
        format!("/api/v1/domains/{DOMAIN}/lists/{list}/members")
    }

    /// `meta.total` of the list's active members.
    fn count(&self, list: &str) -> Result<u64, String> {
        let (status, body) = self.api(0).get(&format!("{}?limit=1&status=active", Self::members_path(list)))?;
        check_status("GET members", status, &body, &[200])?;
        json(&body)?["meta"]["total"].as_u64().ok_or_else(|| format!("GET members: no meta.total in {body}"))
    }

    /// Imports `csv` through the API; checks that every row was added. Returns the time taken.
    fn import_api(&self, list: &str, csv: &Path, rows: u64) -> Result<Duration, String> {
        let doc = std::fs::read(csv).map_err(|e| format!("cannot read {}: {e}", csv.display()))?;
        let api = self.api(0);
        let path = format!("{}/import?consent_evidence=bench-members", Self::members_path(list));
        let t = Instant::now();
        let (status, body) = api.send("POST", &path, "text/csv", &doc, &[])?;
        let took = t.elapsed();
        check_status("POST members/import", status, &body, &[200])?;
        check_import_report(&body, rows)?;
        Ok(took)
    }

    /// Imports `csv` with `courrier members import` on the running server's data directory.
    fn import_cli(&self, opts: &Options, list: &str, csv: &Path, rows: u64) -> Result<Duration, String> {
        let file = csv.display().to_string();
        let args =
            ["members", "import", "--domain", DOMAIN, "--list", list, "--consent-evidence", "bench-members", &file];
        let t = Instant::now();
        let out = cli(&opts.courrier, &self.data_dir, &args, None)?;
        let took = t.elapsed();
        let added = self.count(list)?;
        if added != rows {
            return Err(format!(
                "`courrier members import` left {added} active members, not {rows}; it printed {out:?}"
            ));
        }
        Ok(took)
    }
}

fn check_import_report(body: &str, rows: u64) -> Result<(), String> {
    let report = json(body)?;
    let data = &report["data"];
    let field = |k: &str| data[k].as_u64();
    match (field("total"), field("added"), field("errors")) {
        (Some(total), Some(added), Some(0)) if total == rows && added == rows => Ok(()),
        _ => Err(format!("the import report does not say {rows} rows added and no error: {body}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 1: CSV import vs sqlite3 .import
// ---------------------------------------------------------------------------------------------

/// The sqlite3 shell's import of `csv` into a bare table of a fresh database, in WAL mode with
/// `synchronous=FULL` like courrier's store (the shell's `.import` runs in one transaction).
const SQLITE3_BARE: &str = "PRAGMA journal_mode=WAL;
PRAGMA synchronous=FULL;
CREATE TABLE members (email TEXT NOT NULL, display_name TEXT, delivery_mode TEXT);
.import --csv --skip 1 'FILE' members
SELECT count(*) FROM members;
";

/// For context, not the target's baseline: the same `.import` into a staging table, then one
/// `INSERT ... SELECT` into a table with courrier's members indexes (unique address per list,
/// list, status, status and mode), as in `core/src/adapters/sqlite/migrations/0003_lists_members.sql`
/// since migrations 11 and 12 (no trigram index, no insert trigger): what the schema alone costs,
/// without validation, consent records or events.
const SQLITE3_SCHEMA: &str = "PRAGMA journal_mode=WAL;
PRAGMA synchronous=FULL;
CREATE TABLE staging (email TEXT NOT NULL, display_name TEXT, delivery_mode TEXT);
.import --csv --skip 1 'FILE' staging
CREATE TABLE members (
    id INTEGER PRIMARY KEY, list_id INTEGER NOT NULL, email TEXT NOT NULL, email_key TEXT NOT NULL,
    display_name TEXT, status TEXT NOT NULL, delivery_mode TEXT NOT NULL, bounce_score INTEGER NOT NULL DEFAULT 0,
    subscribed_at INTEGER, consent_id INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    UNIQUE (list_id, email_key));
CREATE INDEX members_list ON members (list_id);
CREATE INDEX members_list_status ON members (list_id, status);
CREATE INDEX members_list_status_mode ON members (list_id, status, delivery_mode);
INSERT INTO members (list_id, email, email_key, display_name, status, delivery_mode, subscribed_at, consent_id, created_at, updated_at)
  SELECT 1, email, lower(email), nullif(display_name, ''), 'active', coalesce(nullif(delivery_mode, ''), 'regular'), 0, 1, 0, 0
  FROM staging;
DROP TABLE staging;
SELECT count(*) FROM members;
";

/// Runs `script` (with `FILE` standing for `csv`) in the sqlite3 shell on a fresh database.
/// Returns the wall time of the whole `sqlite3` process.
fn sqlite3_import(opts: &Options, script: &str, db: &Path, csv: &Path, rows: u64) -> Result<Duration, String> {
    remove_db(db);
    let script = script.replace("FILE", &csv.display().to_string());
    let t = Instant::now();
    let mut child = Command::new(&opts.sqlite3)
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run {} (apt-get install sqlite3, or --sqlite3 PATH): {e}", opts.sqlite3.display())
        })?;
    child.stdin.take().expect("piped").write_all(script.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let took = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let counted = stdout.lines().last().and_then(|l| l.trim().parse::<u64>().ok());
    if !out.status.success() || counted != Some(rows) {
        return Err(format!(
            "sqlite3 .import failed or counted {counted:?} rows, not {rows} ({}): {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(took)
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

fn import_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let csv = scratch.join("import.csv");
    let (rows, bytes) = write_csv(&csv, 0, opts.import_rows, IMPORT_CAP - IMPORT_SLACK)?;
    eprintln!("import: a document of {rows} rows, {bytes} bytes ({:.2} MiB)", bytes as f64 / 1048576.0);
    let started = SystemTime::now();
    let load_start = loadavg();
    let mut results: Vec<[Option<Duration>; 4]> = Vec::new();
    let mut cli_note = None;
    for round in 1..=opts.rounds {
        // Each contender starts from an empty database in every round.
        eprintln!("import round {round}/{}: sqlite3 .import", opts.rounds);
        let db = scratch.join(format!("sqlite3-{round}.db"));
        let s = sqlite3_import(opts, SQLITE3_BARE, &db, &csv, rows)?;
        remove_db(&db);
        eprintln!("  {:.2} s", s.as_secs_f64());

        eprintln!("import round {round}/{}: courrier POST members/import", opts.rounds);
        let dir = scratch.join(format!("import-api-{round}"));
        let api_time = {
            let c = Courrier::start(opts, "courrier", &dir)?;
            c.create_list("bench")?;
            let t = c.import_api("bench", &csv, rows)?;
            eprintln!("  {:.2} s", t.as_secs_f64());
            t
        };
        let _ = std::fs::remove_dir_all(&dir);

        eprintln!("import round {round}/{}: courrier members import (CLI, server running)", opts.rounds);
        let dir = scratch.join(format!("import-cli-{round}"));
        let cli_time = {
            let c = Courrier::start(opts, "courrier", &dir)?;
            c.create_list("bench")?;
            match c.import_cli(opts, "bench", &csv, rows) {
                Ok(t) => {
                    eprintln!("  {:.2} s", t.as_secs_f64());
                    Some(t)
                }
                Err(e) => {
                    eprintln!("  skipped: {e}");
                    cli_note = Some(e.lines().next().unwrap_or("").to_owned());
                    None
                }
            }
        };
        let _ = std::fs::remove_dir_all(&dir);

        eprintln!("import round {round}/{}: sqlite3 .import then INSERT into courrier's schema", opts.rounds);
        let schema = sqlite3_import(opts, SQLITE3_SCHEMA, &db, &csv, rows)?;
        remove_db(&db);
        eprintln!("  {:.2} s", schema.as_secs_f64());
        results.push([Some(s), Some(api_time), cli_time, Some(schema)]);
    }

    let secs = |i: usize| -> Vec<f64> { results.iter().filter_map(|r| r[i]).map(|d| d.as_secs_f64()).collect() };
    let (sq, api, cl, sch) = (median(secs(0)), median(secs(1)), median(secs(2)), median(secs(3)));
    let ratio = api / sq;
    let mut out = String::new();
    let _ = writeln!(out, "### import{} ({} UTC, load average {load_start} at its start)", smoke(opts), utc(started));
    let _ = writeln!(
        out,
        "document: {rows} rows, {bytes} bytes ({:.2} MiB), header `email,display_name,delivery_mode`; every contender \
         starts from an empty database each round",
        bytes as f64 / 1048576.0
    );
    let _ = writeln!(
        out,
        "sqlite3: `PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE members (email TEXT NOT NULL, \
         display_name TEXT, delivery_mode TEXT); .import --csv --skip 1 FILE members` (a bare table: no index, no \
         validation); courrier API: `POST /api/v1/domains/{DOMAIN}/lists/bench/members/import?consent_evidence=...` \
         with `Content-Type: text/csv`; CLI: `courrier --data-dir DIR members import --domain {DOMAIN} --list bench \
         --consent-evidence ... FILE` beside the running server; \"sqlite3, courrier's schema\" (context, not \
         the baseline): the same `.import` into a staging table then one `INSERT ... SELECT` into a table with \
         courrier's member indexes (no validation, consent records or events)"
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | sqlite3 .import | courrier API | API rows/s | ratio API/sqlite3 | courrier CLI | ratio CLI/sqlite3 \
         | sqlite3, courrier's schema | ratio API/that |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
    for (i, r) in results.iter().enumerate() {
        let (s, a) = (r[0].map_or(f64::NAN, |d| d.as_secs_f64()), r[1].map_or(f64::NAN, |d| d.as_secs_f64()));
        let c = r[2].map_or(f64::NAN, |d| d.as_secs_f64());
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {} | {} | {} | {:.2} |",
            i + 1,
            f(r[0]),
            f(r[1]),
            rows as f64 / a,
            a / s,
            f(r[2]),
            if c.is_nan() { "-".into() } else { format!("{:.2}", c / s) },
            f(r[3]),
            a / r[3].map_or(f64::NAN, |d| d.as_secs_f64())
        );
    }
    let _ = writeln!(
        out,
        "| **median** | **{sq:.2} s** | **{api:.2} s** | **{:.0}** | **{ratio:.2}** | **{}** | **{}** | **{sch:.2} s** \
         | **{:.2}** |",
        rows as f64 / api,
        if cl.is_nan() { "-".into() } else { format!("{cl:.2} s") },
        if cl.is_nan() { "-".into() } else { format!("{:.2}", cl / sq) },
        api / sch
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "ratio courrier API / sqlite3 .import (median times): {ratio:.2} (target within {IMPORT_TARGET}x: {})",
        if ratio <= IMPORT_TARGET { "met" } else { "NOT met" }
    );
    if let Some(note) = cli_note {
        let _ = writeln!(out, "CLI column skipped: {note}");
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Scenario 2: listing a list of 1,000,000 members
// ---------------------------------------------------------------------------------------------

/// Loads `n` members into `list` through the import API, in documents under 25 MiB.
fn load_members(c: &Courrier, scratch: &Path, list: &str, start: u64, n: u64) -> Result<(u64, Duration), String> {
    let csv = scratch.join(format!("load-{list}.csv"));
    let (mut done, mut chunks) = (0, 0);
    let mut took = Duration::ZERO;
    while done < n {
        let (rows, bytes) = write_csv(&csv, start + done, n - done, IMPORT_CAP - IMPORT_SLACK)?;
        let t = c.import_api(list, &csv, rows)?;
        took += t;
        done += rows;
        chunks += 1;
        eprintln!(
            "  chunk {chunks}: {rows} rows ({:.1} MiB) in {:.1} s, {done}/{n} members",
            bytes as f64 / 1048576.0,
            t.as_secs_f64()
        );
    }
    let _ = std::fs::remove_file(&csv);
    Ok((chunks, took))
}

/// One member listing query.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Query {
    limit: u32,
    offset: u64,
    status: Option<&'static str>,
    mode: Option<&'static str>,
    contains: Option<String>,
}

/// The member columns courrier's store reads for a listing
/// (`core/src/adapters/sqlite/mailing.rs`, `MEMBER_COLUMNS`).
const MEMBER_COLUMNS: &str = "id, list_id, email, display_name, status, pending_reason, delivery_mode, bounce_score, \
    subscribed_at, last_bounce_at, disabled_reason, disabled_at, consent_source, consent_at, created_at, updated_at";

impl Query {
    fn filter(limit: u32, offset: u64, status: &'static str, mode: &'static str) -> Self {
        Self { limit, offset, status: Some(status), mode: Some(mode), contains: None }
    }

    fn search(limit: u32, needle: &str) -> Self {
        Self { limit, offset: 0, status: None, mode: None, contains: Some(needle.to_owned()) }
    }

    /// The query string of `GET .../members`.
    fn url(&self) -> String {
        let mut out = format!("?limit={}", self.limit);
        if self.offset > 0 {
            let _ = write!(out, "&offset={}", self.offset);
        }
        if let Some(s) = self.status {
            let _ = write!(out, "&status={s}");
        }
        if let Some(m) = self.mode {
            let _ = write!(out, "&delivery_mode={m}");
        }
        if let Some(c) = &self.contains {
            out.push_str("&email_contains=");
            percent_encode(c, &mut out);
        }
        out
    }

    /// The same filter as courrier's store writes it in SQL (`member_where` in
    /// `core/src/adapters/sqlite/mailing.rs`, as of commit 9c16124): the WHERE clause and its
    /// arguments. A search is `instr` over the list's lowercased addresses, which is what SQLite
    /// alone can do; courrier answers big lists' searches from its in-memory snapshot instead.
    fn sql(&self, list_id: i64) -> (String, Vec<rusqlite::types::Value>) {
        use rusqlite::types::Value;
        let mut args = vec![Value::Integer(list_id)];
        let mut sql = String::from("list_id = ?");
        if let Some(s) = self.status {
            args.push(Value::Text(s.into()));
            sql.push_str(" AND status = ?");
        }
        if let Some(m) = self.mode {
            args.push(Value::Text(m.into()));
            sql.push_str(" AND delivery_mode = ?");
        }
        if let Some(needle) = &self.contains {
            args.push(Value::Text(needle.to_lowercase()));
            sql.push_str(" AND instr(email_key, ?) > 0");
        }
        (sql, args)
    }
}

/// The listing's database work without courrier: in one read transaction, the count of matching
/// rows and the page of them, every column read. Returns (total, rows on the page).
fn raw_listing(conn: &rusqlite::Connection, list_id: i64, q: &Query) -> Result<(u64, usize), String> {
    let run = || -> rusqlite::Result<(u64, usize)> {
        let (clause, mut args) = q.sql(list_id);
        conn.execute_batch("BEGIN")?;
        // Status and mode alone: courrier reads its per-list tallies instead of counting rows.
        let count_sql = if q.contains.is_none() {
            format!("SELECT COALESCE(SUM(n), 0) FROM member_tallies WHERE {clause}")
        } else {
            format!("SELECT COUNT(*) FROM members WHERE {clause}")
        };
        let total: i64 = conn.prepare_cached(&count_sql)?.query_row(rusqlite::params_from_iter(&args), |r| r.get(0))?;
        args.push(rusqlite::types::Value::Integer(i64::from(q.limit)));
        args.push(rusqlite::types::Value::Integer(i64::try_from(q.offset).unwrap_or(i64::MAX)));
        let mut st = conn.prepare_cached(&format!(
            "SELECT {MEMBER_COLUMNS} FROM members WHERE {clause} ORDER BY id LIMIT ? OFFSET ?"
        ))?;
        let mut rows = st.query(rusqlite::params_from_iter(&args))?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            for i in 0..16 {
                let _: rusqlite::types::Value = row.get(i)?;
            }
            n += 1;
        }
        drop(rows);
        conn.execute_batch("COMMIT")?;
        Ok((u64::try_from(total).unwrap_or(0), n))
    };
    run().map_err(|e| format!("raw SQLite listing {q:?}: {e}"))
}

/// The query classes of the listing scenario, each a set of queries cycled through.
fn list_queries(opts: &Options, members: u64) -> Vec<(&'static str, Vec<Query>)> {
    let limit = opts.list_limit;
    let mut filter = Vec::new();
    // Offsets spread over the first part of the list, where a paging client is most of the time;
    // deeper pages are measured apart (OFFSET costs grow with depth).
    for offset in [0, 500, 5_000, 20_000] {
        for (status, mode) in
            [("active", "regular"), ("active", "digest"), ("active", "nomail"), ("pending", "regular")]
        {
            filter.push(Query::filter(limit, offset, status, mode));
        }
    }
    let deep: Vec<Query> = [members / 4, members / 2, members * 3 / 4]
        .iter()
        .map(|o| Query::filter(limit, *o, "active", "regular"))
        .collect();
    // Substrings people search for: a surname, a first name, a domain, a number, an address
    // fragment, a miss; three characters or more (the class the target is set for).
    let mut search: Vec<Query> = [
        "martin",
        "dubois",
        "yamamoto",
        "muller",
        "chloe",
        "olivia",
        "orange.fr",
        "proton",
        "univ-lyon",
        "12345",
        "nguyen4",
        "kowalski1",
        "zzqx",
        "@gmx.de",
        "smith_j",
        "o.rossi",
    ]
    .iter()
    .map(|s| Query::search(limit, s))
    .collect();
    // And one exact address from the list, as a support desk would look a subscriber up.
    let mut row = String::new();
    csv_row(members / 3, &mut row);
    search.push(Query::search(limit, &row.split(',').next().unwrap_or("x").to_ascii_lowercase()));
    // Two characters, the contract's minimum (no target; the same snapshot answers them).
    let short: Vec<Query> = ["99", "ab", "x.", "zq"].iter().map(|s| Query::search(limit, s)).collect();
    vec![("filter", filter), ("search", search), ("search 2 chars", short), ("deep offset", deep)]
}

/// Latencies of one query class (seconds), over all rounds and by round.
struct ClassSamples {
    api: Vec<f64>,
    raw: Vec<f64>,
    api_rounds: Vec<(f64, f64)>,
    raw_rounds: Vec<(f64, f64)>,
    /// By query string: API latencies and the `meta.total` answered.
    by_query: BTreeMap<String, (Vec<f64>, u64)>,
}

fn list_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let dir = scratch.join("list-data");
    let c = Courrier::start(opts, "courrier", &dir)?;
    c.create_list("big")?;
    eprintln!("list: loading {} members through the import API", opts.list_members);
    let load_started = loadavg();
    let (chunks, load_time) = load_members(&c, scratch, "big", 0, opts.list_members)?;
    let total = c.count("big")?;
    if total != opts.list_members {
        return Err(format!("the list has {total} active members, not {}", opts.list_members));
    }
    let db_size = dir_size(&dir);
    let classes = list_queries(opts, opts.list_members);
    let api = c.api(0);
    let path = Courrier::members_path("big");
    let conn = rusqlite::Connection::open_with_flags(
        dir.join("courrier.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open {}/courrier.db: {e}", dir.display()))?;
    let list_id: i64 = conn
        .query_row(
            "SELECT l.id FROM lists l JOIN domains d ON d.id = l.domain_id WHERE d.name = ?1 AND l.name = 'big'",
            [DOMAIN],
            |r| r.get(0),
        )
        .map_err(|e| format!("cannot find the list in courrier.db: {e}"))?;
    // The first search builds the list's in-memory search snapshot: timed apart, with the server's
    // memory before and after, and the server's own account of the build from its log.
    let rss_before = c.server.rss_kib();
    let first = Query::search(opts.list_limit, "zzqx");
    let t = Instant::now();
    let (status, body) = api.get(&format!("{path}{}", first.url()))?;
    let first_search = t.elapsed();
    check_status("GET members (first search)", status, &body, &[200])?;
    let rss_after = c.server.rss_kib();
    let built: Vec<String> = std::fs::read_to_string(&c.server.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("search snapshot built"))
        .map(str::to_owned)
        .collect();
    eprintln!("list: first search {} ms; {built:?}", first_search.as_millis());
    // One request of every query as a warm-up, checking that the API answers 200 and that the
    // raw query finds the same total (so that it is the same filter).
    let mut mismatches = Vec::new();
    for (_, qs) in &classes {
        for q in qs {
            let (status, body) = api.get(&format!("{path}{}", q.url()))?;
            check_status(&format!("GET members{}", q.url()), status, &body, &[200])?;
            let total = json(&body)?["meta"]["total"].as_u64().ok_or("no meta.total")?;
            let (raw_total, _) = raw_listing(&conn, list_id, q)?;
            if raw_total != total {
                mismatches.push(format!("`{}`: API total {total}, raw SQLite {raw_total}", q.url()));
            }
        }
    }
    let started = SystemTime::now();
    let load_start = loadavg();
    let mut health = Vec::new();
    let mut health_rounds = Vec::new();
    let mut samples: Vec<ClassSamples> = classes
        .iter()
        .map(|_| ClassSamples {
            api: Vec::new(),
            raw: Vec::new(),
            api_rounds: Vec::new(),
            raw_rounds: Vec::new(),
            by_query: BTreeMap::new(),
        })
        .collect();
    let p = |v: &[f64]| (percentile(v, 0.50), percentile(v, 0.99));
    for round in 1..=opts.rounds {
        eprintln!("list round {round}/{}: {} requests per class and contender", opts.rounds, opts.queries);
        let mut h = Vec::with_capacity(opts.queries);
        for _ in 0..opts.queries {
            let t = Instant::now();
            let (status, body) = api.get(HEALTH_PATH)?;
            let d = t.elapsed().as_secs_f64();
            check_status("GET health", status, &body, &[200])?;
            h.push(d);
        }
        health_rounds.push(p(&h));
        health.extend(h);
        for ((name, qs), s) in classes.iter().zip(&mut samples) {
            let mut raw = Vec::with_capacity(opts.queries);
            for i in 0..opts.queries {
                let q = &qs[i % qs.len()];
                let t = Instant::now();
                raw_listing(&conn, list_id, q)?;
                raw.push(t.elapsed().as_secs_f64());
            }
            let mut lat = Vec::with_capacity(opts.queries);
            for i in 0..opts.queries {
                let q = &qs[i % qs.len()];
                let url = q.url();
                let t = Instant::now();
                let (status, body) = api.get(&format!("{path}{url}"))?;
                let d = t.elapsed().as_secs_f64();
                check_status(&format!("GET members{url}"), status, &body, &[200])?;
                let total = json(&body)?["meta"]["total"].as_u64().ok_or("no meta.total")?;
                lat.push(d);
                s.by_query.entry(url).or_insert_with(|| (Vec::new(), total)).0.push(d);
            }
            eprintln!(
                "  {name}: API p50 {} p99 {}; raw SQLite p50 {} p99 {}",
                fmt_latency(percentile(&lat, 0.5)),
                fmt_latency(percentile(&lat, 0.99)),
                fmt_latency(percentile(&raw, 0.5)),
                fmt_latency(percentile(&raw, 0.99))
            );
            s.api_rounds.push(p(&lat));
            s.raw_rounds.push(p(&raw));
            s.api.extend(lat);
            s.raw.extend(raw);
        }
    }
    drop(conn);
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);

    let mut out = String::new();
    let _ = writeln!(out, "### list{} ({} UTC, load average {load_start} at its start)", smoke(opts), utc(started));
    let _ = writeln!(
        out,
        "list: {} active members loaded through `POST .../members/import` in {chunks} document(s) under 25 MiB, \
         in {:.1} s ({:.0} rows/s; load average {load_started} before), data directory {:.0} MiB afterwards. \
         One client, keep-alive, sequential requests, `limit={}`; {} round(s) of {} requests per class and \
         contender, after one warm-up request per query. Contenders: the API; courrier's SQL path (its count, from its tallies \
         without a search, and its page query; `instr` for a search, which is what SQLite alone can do) in one read transaction on a read-only connection to the same database file, in the \
         harness's process (raw SQLite, the database floor); the public health route (the HTTP floor).",
        opts.list_members,
        load_time.as_secs_f64(),
        opts.list_members as f64 / load_time.as_secs_f64(),
        db_size as f64 / 1048576.0,
        opts.list_limit,
        opts.rounds,
        opts.queries
    );
    let mib = |k: Option<u64>| k.map_or("?".into(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    let _ = writeln!(
        out,
        "First search (builds the list's search snapshot): {} ms; server resident memory {} before, {} after. \
         Server log: {}",
        first_search.as_millis(),
        mib(rss_before),
        mib(rss_after),
        if built.is_empty() { "no build logged".into() } else { built.join(" / ") }
    );
    for m in &mismatches {
        let _ = writeln!(out, "note: the raw query's total differs from the API's: {m}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| class | round | API p50 | API p99 | raw SQLite p50 | raw SQLite p99 | health p50 | health p99 |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
    let l = fmt_latency;
    for ((name, _), s) in classes.iter().zip(&samples) {
        for (r, ((a, w), h)) in s.api_rounds.iter().zip(&s.raw_rounds).zip(&health_rounds).enumerate() {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} | {} | {} |",
                r + 1,
                l(a.0),
                l(a.1),
                l(w.0),
                l(w.1),
                l(h.0),
                l(h.1)
            );
        }
        let (a, w, h) = (p(&s.api), p(&s.raw), p(&health));
        let _ = writeln!(
            out,
            "| **{name}** | **all** | **{}** | **{}** | **{}** | **{}** | **{}** | **{}** |",
            l(a.0),
            l(a.1),
            l(w.0),
            l(w.1),
            l(h.0),
            l(h.1)
        );
    }
    let _ = writeln!(out);
    for ((name, _), s) in classes.iter().zip(&samples) {
        let (a, w) = (p(&s.api), p(&s.raw));
        let target = match *name {
            "filter" => Some(FILTER_P99_TARGET),
            "search" => Some(SEARCH_P99_TARGET),
            _ => None,
        };
        let verdict = target.map_or(String::from("no target"), |t| {
            format!("target p99 < {}: {}", l(t), if a.1 < t { "met" } else { "NOT met" })
        });
        let _ = writeln!(
            out,
            "{name}: API p50 {} p99 {} ({verdict}); API/raw SQLite: p50 {:.1}x, p99 {:.1}x",
            l(a.0),
            l(a.1),
            a.0 / w.0,
            a.1 / w.1
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "| class | query (API, all rounds) | meta.total | n | p50 | p99 | max |");
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    for ((name, _), s) in classes.iter().zip(&samples) {
        for (q, (lat, total)) in &s.by_query {
            let max = lat.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                out,
                "| {name} | `{q}` | {total} | {} | {} | {} | {} |",
                lat.len(),
                l(percentile(lat, 0.5)),
                l(percentile(lat, 0.99)),
                l(max)
            );
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: adding members, 1 and 8 clients, beside Mailman 3; listing 2,000 members
// ---------------------------------------------------------------------------------------------

struct Mailman {
    api: Api,
    list_id: String,
    fqdn: String,
    next: AtomicU64,
    base: String,
    auth: String,
}

impl Mailman {
    /// None (with the reason) when Mailman does not answer.
    fn connect(opts: &Options, list: &str) -> Result<Self, String> {
        let url = opts.mailman.clone().ok_or("no --mailman-url")?;
        let api = Api::basic(&url, &opts.mailman_auth);
        mailman::check_reachable(&api)?;
        mailman::create_list(&api, list, &[("send_welcome_message", "False"), ("subscription_policy", "open")])?;
        let fqdn = format!("{list}@example.com");
        Ok(Self {
            api,
            list_id: format!("{list}.example.com"),
            fqdn,
            next: AtomicU64::new(0),
            base: url,
            auth: opts.mailman_auth.clone(),
        })
    }

    fn client(&self) -> Api {
        Api::basic(&self.base, &self.auth)
    }

    fn add(&self, api: &Api, i: u64) -> Result<(), String> {
        let mut row = String::new();
        csv_row(i, &mut row);
        let mut cells = row.trim_end().split(',');
        let (email, name) = (cells.next().unwrap_or(""), cells.next().unwrap_or(""));
        mailman::add_member(api, &self.list_id, email, Some(name))
    }

    fn count(&self) -> Result<u64, String> {
        let (status, body) = self.api.get(&format!("/3.1/lists/{}/roster/member?count=1&page=1", self.list_id))?;
        check_status("Mailman GET roster", status, &body, &[200])?;
        json(&body)?["total_size"].as_u64().ok_or_else(|| format!("no total_size in {body}"))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AddTarget {
    Mailman,
    Courrier,
    CourrierIdem,
    CourrierTmpfs,
}

impl AddTarget {
    fn name(self) -> &'static str {
        match self {
            Self::Mailman => "Mailman 3",
            Self::Courrier => "courrier",
            Self::CourrierIdem => "courrier + Idempotency-Key",
            Self::CourrierTmpfs => "courrier on tmpfs",
        }
    }
}

#[derive(Clone, Debug)]
struct AddResult {
    members: u64,
    secs: f64,
    p50: f64,
    p99: f64,
}

impl AddResult {
    fn rate(&self) -> f64 {
        self.members as f64 / self.secs
    }
}

/// Adds `n` members with `clients` threads, each with its own connection(s) and key; member
/// indexes come from `next`. One call of `add(client, index)` per member.
fn add_load<C: Send>(
    clients: usize,
    n: u64,
    next: &AtomicU64,
    make: impl Fn(usize) -> C + Sync,
    add: impl Fn(&C, u64) -> Result<(), String> + Sync,
) -> Result<AddResult, String> {
    let end = next.load(Ordering::SeqCst) + n;
    let barrier = Barrier::new(clients + 1);
    let latencies = Mutex::new(Vec::with_capacity(usize::try_from(n).unwrap_or(0)));
    let error = Mutex::new(None);
    let elapsed = std::thread::scope(|s| {
        for c in 0..clients {
            let (barrier, latencies, error, make, add) = (&barrier, &latencies, &error, &make, &add);
            s.spawn(move || {
                let client = make(c);
                let mut mine = Vec::new();
                barrier.wait();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= end {
                        break;
                    }
                    let t = Instant::now();
                    if let Err(e) = add(&client, i) {
                        *error.lock().expect("not poisoned") = Some(e);
                        next.store(end, Ordering::SeqCst);
                        break;
                    }
                    mine.push(t.elapsed().as_secs_f64());
                }
                latencies.lock().expect("not poisoned").extend(mine);
            });
        }
        barrier.wait();
        let t = Instant::now();
        // The scope joins every client before returning.
        t
    });
    let secs = elapsed.elapsed().as_secs_f64();
    if let Some(e) = error.into_inner().expect("not poisoned") {
        return Err(e);
    }
    let lat = latencies.into_inner().expect("not poisoned");
    Ok(AddResult { members: lat.len() as u64, secs, p50: percentile(&lat, 0.5), p99: percentile(&lat, 0.99) })
}

fn courrier_add(api: &Api, list: &str, i: u64, idem: bool) -> Result<(), String> {
    let mut row = String::new();
    csv_row(i, &mut row);
    let mut cells = row.trim_end().split(',');
    let (email, name, mode) = (cells.next().unwrap_or(""), cells.next().unwrap_or(""), cells.next().unwrap_or(""));
    let mode = if mode.is_empty() { "regular" } else { mode };
    let body = serde_json::json!({ "email": email, "name": name, "delivery_mode": mode });
    let key = format!("bench-{i}");
    let headers: &[(&str, &str)] = if idem { &[("idempotency-key", &key)] } else { &[] };
    let (status, text) = api.post_json(&Courrier::members_path(list), &body, headers)?;
    check_status("POST members", status, &text, &[201])?;
    if idem || i.is_multiple_of(64) {
        // Spot checks (parsing every answer would add client time to every request).
        let v = json(&text)?;
        if v["data"]["status"] != "active" || !v["data"]["member_id"].is_u64() {
            return Err(format!("POST members answered {text}"));
        }
    }
    Ok(())
}

fn add_scenario(opts: &Options, scratch: &Path) -> Result<String, String> {
    let mut notes = Vec::new();
    let mailman = match &opts.mailman {
        None => {
            notes.push(if opts.smoke {
                "Mailman columns skipped: --smoke never uses Mailman".to_owned()
            } else {
                "Mailman columns skipped: --no-mailman".to_owned()
            });
            None
        }
        Some(url) => {
            let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            match Mailman::connect(opts, &format!("bench{stamp}")) {
                Ok(m) => {
                    eprintln!("Mailman answers at {url}; list {}", m.fqdn);
                    Some(m)
                }
                Err(e) => {
                    notes.push(format!("Mailman columns skipped: {e} (start it: scripts/peer-mailman3 start)"));
                    eprintln!("{}", notes.last().expect("just pushed"));
                    None
                }
            }
        }
    };
    let disk = Courrier::start(opts, "courrier", &scratch.join("add-disk"))?;
    disk.create_list("bench")?;
    let tmpfs_dir = match &opts.tmpfs {
        Some(t) => Some(
            tempfile::TempDir::new_in(t).map_err(|e| format!("cannot create a directory in {}: {e}", t.display()))?,
        ),
        None => {
            notes.push("tmpfs column skipped: no --tmpfs directory".into());
            None
        }
    };
    let tmpfs = match &tmpfs_dir {
        Some(d) => {
            let c = Courrier::start(opts, "courrier-tmpfs", &d.path().join("data"))?;
            c.create_list("bench")?;
            Some(c)
        }
        None => None,
    };
    // The idempotent load goes to its own list on the disk server.
    disk.create_list("idem")?;

    let started = SystemTime::now();
    let load_start = loadavg();
    let counters = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    // results[clients index][round] = per target
    let client_counts = [1usize, MAX_CLIENTS];
    let mut results: Vec<Vec<Vec<(AddTarget, AddResult)>>> = vec![Vec::new(), Vec::new()];
    for round in 1..=opts.rounds {
        for (ci, &clients) in client_counts.iter().enumerate() {
            let mut row = Vec::new();
            for target in [AddTarget::Mailman, AddTarget::Courrier, AddTarget::CourrierIdem, AddTarget::CourrierTmpfs] {
                let r = match target {
                    AddTarget::Mailman => match &mailman {
                        Some(m) => Some(add_load(
                            clients,
                            opts.mailman_add_members,
                            &m.next,
                            |_| m.client(),
                            |api, i| m.add(api, i),
                        )?),
                        None => None,
                    },
                    AddTarget::Courrier => Some(add_load(
                        clients,
                        opts.add_members,
                        &counters[1],
                        |c| disk.api(c),
                        |api, i| courrier_add(api, "bench", i, false),
                    )?),
                    AddTarget::CourrierIdem => Some(add_load(
                        clients,
                        opts.add_members,
                        &counters[2],
                        |c| disk.api(c),
                        |api, i| courrier_add(api, "idem", i, true),
                    )?),
                    AddTarget::CourrierTmpfs => match &tmpfs {
                        Some(t) => Some(add_load(
                            clients,
                            opts.add_members,
                            &counters[3],
                            |c| t.api(c),
                            |api, i| courrier_add(api, "bench", i, false),
                        )?),
                        None => None,
                    },
                };
                if let Some(r) = r {
                    eprintln!(
                        "add round {round}/{}, {clients} client(s), {}: {} members in {:.2} s, {:.1}/s, p50 {} p99 {}",
                        opts.rounds,
                        target.name(),
                        r.members,
                        r.secs,
                        r.rate(),
                        fmt_latency(r.p50),
                        fmt_latency(r.p99)
                    );
                    row.push((target, r));
                }
            }
            results[ci].push(row);
        }
    }

    // Listing `opts.roster` members: courrier 500 a page from a list loaded by import, Mailman's
    // whole roster in one request and 500 a page.
    eprintln!("roster: preparing lists of {} members", opts.roster);
    disk.create_list("roster")?;
    let csv = scratch.join("roster.csv");
    let (rows, _) = write_csv(&csv, 10_000_000, opts.roster, IMPORT_CAP - IMPORT_SLACK)?;
    disk.import_api("roster", &csv, rows)?;
    let mm_roster = match &mailman {
        Some(m) => {
            // The add runs' list serves when it holds at most `roster` members; else a new one.
            let list = if m.count()? > opts.roster {
                let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                Mailman::connect(opts, &format!("roster{stamp}"))?
            } else {
                m.clone_handle()
            };
            let have = list.count()?;
            if have < opts.roster {
                eprintln!("roster: adding {} members to Mailman's {}", opts.roster - have, list.fqdn);
                add_load(MAX_CLIENTS, opts.roster - have, &list.next, |_| list.client(), |api, i| list.add(api, i))?;
            }
            let have = list.count()?;
            if have != opts.roster {
                return Err(format!("Mailman's roster list has {have} members, not {}", opts.roster));
            }
            Some(list)
        }
        None => None,
    };
    let roster_started = SystemTime::now();
    let mut roster_rounds: Vec<[Option<f64>; 3]> = Vec::new();
    let pages = opts.roster.div_ceil(500);
    for round in 1..=opts.rounds {
        let mut row = [None; 3];
        if let Some(m) = &mm_roster {
            let api = m.client();
            let t = Instant::now();
            let (status, body) = api.get(&format!("/3.1/lists/{}/roster/member", m.list_id))?;
            let d = t.elapsed().as_secs_f64();
            check_status("Mailman GET roster/member", status, &body, &[200])?;
            let n = json(&body)?["entries"].as_array().map_or(0, Vec::len);
            if n as u64 != opts.roster {
                return Err(format!("Mailman's roster answered {n} entries"));
            }
            row[0] = Some(d);
            let t = Instant::now();
            let mut seen = 0;
            for page in 1..=pages {
                let (status, body) =
                    api.get(&format!("/3.1/lists/{}/roster/member?count=500&page={page}", m.list_id))?;
                check_status("Mailman GET roster/member?count=500", status, &body, &[200])?;
                seen += json(&body)?["entries"].as_array().map_or(0, Vec::len);
            }
            let d = t.elapsed().as_secs_f64();
            if seen as u64 != opts.roster {
                return Err(format!("Mailman's roster pages gave {seen} entries"));
            }
            row[1] = Some(d);
        }
        let api = disk.api(0);
        let t = Instant::now();
        let mut seen = 0;
        for page in 0..pages {
            let (status, body) =
                api.get(&format!("{}?limit=500&offset={}", Courrier::members_path("roster"), page * 500))?;
            check_status("GET members", status, &body, &[200])?;
            seen += json(&body)?["data"].as_array().map_or(0, Vec::len);
        }
        let d = t.elapsed().as_secs_f64();
        if seen as u64 != opts.roster {
            return Err(format!("courrier's pages gave {seen} members, not {}", opts.roster));
        }
        row[2] = Some(d);
        eprintln!("roster round {round}/{}: {row:?}", opts.rounds);
        roster_rounds.push(row);
    }
    drop(tmpfs);
    drop(tmpfs_dir);
    drop(disk);

    Ok(report_add(opts, started, &load_start, &results, &client_counts, roster_started, &roster_rounds, pages, &notes))
}

impl Mailman {
    fn clone_handle(&self) -> Self {
        Self {
            api: self.client(),
            list_id: self.list_id.clone(),
            fqdn: self.fqdn.clone(),
            next: AtomicU64::new(self.next.load(Ordering::SeqCst)),
            base: self.base.clone(),
            auth: self.auth.clone(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn report_add(
    opts: &Options,
    started: SystemTime,
    load_start: &str,
    results: &[Vec<Vec<(AddTarget, AddResult)>>],
    client_counts: &[usize],
    roster_started: SystemTime,
    roster_rounds: &[[Option<f64>; 3]],
    pages: u64,
    notes: &[String],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### add{} ({} UTC, load average {load_start} at its start)", smoke(opts), utc(started));
    let _ = writeln!(
        out,
        "one member per `POST /api/v1/domains/{DOMAIN}/lists/LIST/members` (JSON `email`, `name`, `delivery_mode`; \
         open list, 201 active), {} per run for courrier, {} for Mailman (`POST /3.1/members` with pre_verified, \
         pre_confirmed, pre_approved, no welcome message); each client a thread with its own keep-alive connection \
         and key (Mailman's gunicorn closes every connection); rounds alternate the contenders",
        opts.add_members, opts.mailman_add_members
    );
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    for (ci, &clients) in client_counts.iter().enumerate() {
        let rounds = &results[ci];
        let targets: Vec<AddTarget> = rounds.first().map(|r| r.iter().map(|(t, _)| *t).collect()).unwrap_or_default();
        let _ = writeln!(out);
        let _ = writeln!(out, "{clients} client(s):");
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| round | {} |",
            targets.iter().map(|t| format!("{} members/s (p50, p99)", t.name())).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(out, "|---|{}", "---:|".repeat(targets.len()));
        let cell = |r: &AddResult| format!("{:.1} ({}, {})", r.rate(), fmt_latency(r.p50), fmt_latency(r.p99));
        for (i, row) in rounds.iter().enumerate() {
            let _ =
                writeln!(out, "| {} | {} |", i + 1, row.iter().map(|(_, r)| cell(r)).collect::<Vec<_>>().join(" | "));
        }
        let med = |t: AddTarget, f: fn(&AddResult) -> f64| {
            median(rounds.iter().flat_map(|r| r.iter().filter(|(x, _)| *x == t).map(|(_, r)| f(r))).collect())
        };
        let _ = writeln!(
            out,
            "| **median** | {} |",
            targets
                .iter()
                .map(|t| format!(
                    "**{:.1}** ({}, {})",
                    med(*t, AddResult::rate),
                    fmt_latency(med(*t, |r| r.p50)),
                    fmt_latency(med(*t, |r| r.p99))
                ))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(out);
        let c = med(AddTarget::Courrier, AddResult::rate);
        if targets.contains(&AddTarget::Mailman) {
            let m = med(AddTarget::Mailman, AddResult::rate);
            let _ = writeln!(
                out,
                "{clients} client(s): ratio courrier/Mailman (median members/s): {:.1} (target >= {ADD_TARGET}: {})",
                c / m,
                if c / m >= ADD_TARGET { "met" } else { "NOT met" }
            );
        }
        if targets.contains(&AddTarget::CourrierTmpfs) {
            let t = med(AddTarget::CourrierTmpfs, AddResult::rate);
            let _ = writeln!(
                out,
                "{clients} client(s): courrier on disk / on tmpfs: {:.2} (the fsync share: {:.0}% of the disk run's time per member; tmpfs only shows that share, it is not a configuration)",
                c / t,
                (1.0 - c / t) * 100.0
            );
        }
        let i = med(AddTarget::CourrierIdem, AddResult::rate);
        let _ = writeln!(out, "{clients} client(s): with Idempotency-Key / without: {:.2}", i / c);
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "listing {} members ({} UTC): courrier `GET .../members?limit=500&offset=N`, {pages} pages; Mailman `GET /3.1/lists/ID/roster/member` (one answer) and `?count=500&page=N` ({pages} pages)",
        opts.roster,
        utc(roster_started)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| round | Mailman roster | Mailman 500/page | courrier 500/page | ratio Mailman roster/courrier |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    let f = |v: Option<f64>| v.map_or("-".to_owned(), fmt_latency);
    for (i, r) in roster_rounds.iter().enumerate() {
        let ratio = match (r[0], r[2]) {
            (Some(m), Some(c)) => format!("{:.0}", m / c),
            _ => "-".into(),
        };
        let _ = writeln!(out, "| {} | {} | {} | {} | {ratio} |", i + 1, f(r[0]), f(r[1]), f(r[2]));
    }
    let med = |i: usize| {
        let v: Vec<f64> = roster_rounds.iter().filter_map(|r| r[i]).collect();
        if v.is_empty() { None } else { Some(median(v)) }
    };
    let ratio = match (med(0), med(2)) {
        (Some(m), Some(c)) => format!("{:.0}", m / c),
        _ => "-".into(),
    };
    let _ = writeln!(out, "| **median** | **{}** | **{}** | **{}** | **{ratio}** |", f(med(0)), f(med(1)), f(med(2)));
    out
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn smoke(opts: &Options) -> &'static str {
    if opts.smoke { " (smoke)" } else { "" }
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_reproducible_valid_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        let mut modes = BTreeMap::new();
        for i in 0..20_000 {
            let mut a = String::new();
            let mut b = String::new();
            csv_row(i, &mut a);
            csv_row(i, &mut b);
            assert_eq!(a, b);
            assert!(a.ends_with('\n'));
            let cells: Vec<&str> = a.trim_end().split(',').collect();
            assert_eq!(cells.len(), 3, "{a}");
            let (local, domain) = cells[0].split_once('@').expect("an address");
            assert!(!local.is_empty() && local.is_ascii() && domain.contains('.'), "{a}");
            assert!(seen.insert(cells[0].to_ascii_lowercase()), "duplicate {a}");
            *modes.entry(cells[2].to_owned()).or_insert(0) += 1;
        }
        for mode in ["regular", "", "digest", "nomail"] {
            assert!(modes.get(mode).copied().unwrap_or(0) > 500, "{modes:?}");
        }
    }

    #[test]
    fn documents_stay_under_the_cap() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("x.csv");
        let (rows, bytes) = write_csv(&path, 0, u64::MAX, 10_000).unwrap();
        assert!(bytes <= 10_000 && bytes > 9_800, "{bytes}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count() as u64, rows + 1);
        assert!(text.starts_with(CSV_HEADER));
        assert_eq!(write_csv(&path, 5, 3, 10_000).unwrap().0, 3);
    }

    #[test]
    fn smoke_sizes_never_use_mailman() {
        let opts = Options::parse(
            ["--smoke", "--courrier", "/c", "--mailman-url", "http://x"].iter().map(|s| (*s).to_owned()),
        )
        .unwrap()
        .unwrap();
        assert!(opts.mailman.is_none());
        assert_eq!((opts.rounds, opts.list_members, opts.add_members), (1, 5_000, 50));
        let full = Options::parse(["--courrier", "/c"].iter().map(|s| (*s).to_owned())).unwrap().unwrap();
        assert_eq!(full.mailman.as_deref(), Some("http://127.0.0.1:8001"));
        assert_eq!((full.list_members, full.import_rows), (1_000_000, u64::MAX));
        assert!(Options::parse(["--rounds", "0"].iter().map(|s| (*s).to_owned())).is_err());
        assert!(Options::parse(["--list-limit", "501", "--courrier", "/c"].iter().map(|s| (*s).to_owned())).is_err());
    }

    #[test]
    fn query_classes_cover_the_filters() {
        let opts = Options::parse(["--courrier", "/c"].iter().map(|s| (*s).to_owned())).unwrap().unwrap();
        let classes = list_queries(&opts, 1_000_000);
        assert_eq!(
            classes.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            ["filter", "search", "search 2 chars", "deep offset"]
        );
        assert!(classes[0].1.iter().all(|q| q.url().contains("&status=") && q.url().contains("&delivery_mode=")));
        assert!(
            classes[1].1.iter().all(|q| q.url().contains("email_contains=") && q.contains.as_ref().unwrap().len() >= 3)
        );
        assert!(classes[1].1.iter().any(|q| q.url().contains("%40")));
        assert!(classes[2].1.iter().all(|q| q.contains.as_ref().unwrap().len() == 2));
        assert_eq!(
            Query::filter(50, 500, "active", "digest").url(),
            "?limit=50&offset=500&status=active&delivery_mode=digest"
        );
        let (sql, args) = Query::search(50, "Ab\"c").sql(7);
        assert_eq!(sql, "list_id = ? AND instr(email_key, ?) > 0");
        assert_eq!(args[1], rusqlite::types::Value::Text("ab\"c".into()));
    }

    /// Against a running Mailman 3 (`scripts/peer-mailman3 start`):
    /// `cargo test --release -p courrier-benches --bin bench-members -- --ignored`.
    #[test]
    #[ignore = "needs Mailman 3 on 127.0.0.1:8001"]
    fn mailman_peer_adds_and_lists() {
        let opts = Options::parse(["--courrier", "/c"].iter().map(|s| (*s).to_owned())).unwrap().unwrap();
        let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos();
        let m = Mailman::connect(&opts, &format!("test{stamp}")).unwrap();
        let r = add_load(2, 10, &m.next, |_| m.client(), |api, i| m.add(api, i)).unwrap();
        assert_eq!(r.members, 10);
        assert_eq!(m.count().unwrap(), 10);
        let copy = m.clone_handle();
        add_load(1, 2, &copy.next, |_| copy.client(), |api, i| copy.add(api, i)).unwrap();
        assert_eq!(m.count().unwrap(), 12);
    }
}
