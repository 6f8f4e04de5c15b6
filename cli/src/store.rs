//! `courrier store copy --to postgres://...`: the SQLite installation of the data directory into
//! an empty PostgreSQL database (core's `adapters::store_copy`), with a progress bar on a
//! terminal (plain lines every few seconds otherwise) and the count table at the end.

use crate::config::{Config, ConfigError};
use crate::error::CliError;
use crate::output;
use clap::Subcommand;
use courrier_core::kernel::Clock;
use courrier_store_postgres::store_copy::{self, CopyReport, CopyRequest, Progress, StoreCopyError};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy this SQLite installation (COURRIER_DATA_DIR), documents included, into an empty
    /// PostgreSQL database; run it again to continue an interrupted copy. Needs
    /// COURRIER_MASTER_KEY: the servers on PostgreSQL read the data key sealed by it.
    Copy {
        /// The target database: postgres://user:password@host:port/database.
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

/// A test's hook: stop after this many batches, as a copy killed half-way would.
const STOP_AFTER: &str = "COURRIER_STORE_COPY_STOP_AFTER_BATCHES";

pub fn store(config: &Config, cmd: StoreCommand, json: bool) -> Result<(), CliError> {
    let StoreCommand::Copy { to } = cmd;
    let to = to.trim().to_owned();
    courrier_store_postgres::check_url(&to).map_err(|reason| ConfigError::Invalid { var: "--to", reason })?;
    let master = config.master_key.as_ref().ok_or_else(|| ConfigError::Required {
        var: "COURRIER_MASTER_KEY",
        reason: "the copied installation's data key (webhook secrets, DKIM keys) is stored in the database sealed \
                 by this key, which every server on PostgreSQL is given (make one with `openssl rand -base64 32`)"
            .into(),
    })?;
    let stop_after_batches = std::env::var(STOP_AFTER).ok().and_then(|v| v.trim().parse().ok());
    let documents = config.documents_dir_set.is_none().then(|| config.documents_dir());
    if documents.is_none() {
        tracing::info!(dir = %config.documents_dir().display(), "documents stay in COURRIER_DOCUMENTS_DIR: not copied");
    }
    let req = CopyRequest {
        data_dir: &config.data_dir,
        documents,
        url: &to,
        master,
        now_micros: courrier_core::adapters::system_clock::SystemClock.now().unix_micros(),
        stop_after_batches,
    };
    let mut shown = Shown::new(json);
    let copied = store_copy::copy(&req, &mut |p| shown.update(p));
    shown.done();
    let report = copied?;
    print_report(&report, json);
    let mismatches = report.mismatches();
    if !mismatches.is_empty() {
        let named = mismatches
            .iter()
            .map(|c| format!("{} ({} in SQLite, {} in PostgreSQL)", c.what, c.sqlite, c.postgres))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(StoreCopyError::Mismatch(named).into());
    }
    Ok(())
}

fn print_report(report: &CopyReport, json: bool) {
    let doc = serde_json::json!({
        "resumed": report.resumed,
        "rows_copied": report.rows_copied,
        "bytes_copied": report.bytes_copied,
        "rows_seconds": report.rows_time.as_secs_f64(),
        "documents_seconds": report.documents_time.as_secs_f64(),
        "verified": report.mismatches().is_empty(),
        "counts": report.counts.iter().map(|c| serde_json::json!({
            "table": c.what, "sqlite": c.sqlite, "postgresql": c.postgres,
        })).collect::<Vec<_>>(),
    });
    output::emit(json, &doc, || {
        let rows = report
            .counts
            .iter()
            .map(|c| {
                let ok = if c.sqlite == c.postgres { "ok" } else { "MISMATCH" };
                vec![c.what.clone(), c.sqlite.to_string(), c.postgres.to_string(), ok.to_owned()]
            })
            .collect();
        let verdict = if report.mismatches().is_empty() { "verified: every count matches" } else { "NOT verified" };
        let per_sec = |n: f64, t: Duration| if t.as_secs_f64() > 0.0 { n / t.as_secs_f64() } else { 0.0 };
        let mib = report.bytes_copied as f64 / 1048576.0;
        format!(
            "{}\n{} rows and {} bytes of documents copied by this run{}; {verdict}\n\
             rows: {:.1} s ({:.0} rows/s); documents: {mib:.1} MiB in {:.1} s ({:.1} MiB/s)",
            output::table(&["TABLE", "SQLITE", "POSTGRESQL", ""], rows),
            report.rows_copied,
            report.bytes_copied,
            if report.resumed { " (a copy continued)" } else { "" },
            report.rows_time.as_secs_f64(),
            per_sec(report.rows_copied as f64, report.rows_time),
            report.documents_time.as_secs_f64(),
            per_sec(mib, report.documents_time),
        )
    });
}

/// The progress as it is shown: a bar on a terminal, a line every few seconds otherwise (CI,
/// a log), nothing with `--json` (whose caller is a program).
struct Shown {
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    last_line: Option<Instant>,
    last: Option<Progress>,
}

const LINE_EVERY: Duration = Duration::from_secs(5);

impl Shown {
    fn new(json: bool) -> Self {
        let tty = !json && std::io::stderr().is_terminal();
        let bar = tty.then(|| {
            let bar =
                output::progress(false, Some(0), "{spinner} [{bar:30}] {pos}/{len} rows ({percent}%) {msg} {eta}");
            bar.set_message("opening both databases");
            bar
        });
        Self { bar, lines: !json && !tty, last_line: None, last: None }
    }

    fn update(&mut self, p: &Progress) {
        if let Some(bar) = &self.bar {
            bar.set_length(p.rows_total);
            bar.set_position(p.rows_done);
            bar.set_message(describe(p));
            return;
        }
        if self.lines && self.last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY) {
            line(p);
            self.last_line = Some(Instant::now());
        }
        self.last = Some(p.clone());
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        // Where it ended, copied to the end or stopped.
        if let (true, Some(p)) = (self.lines, &self.last) {
            line(p);
        }
    }
}

fn line(p: &Progress) {
    let percent = (p.rows_done * 100).checked_div(p.rows_total).unwrap_or(100);
    eprintln!("store copy: {}/{} rows ({percent}%), {}", p.rows_done, p.rows_total, describe(p));
}

fn describe(p: &Progress) -> String {
    let table = if p.table.is_empty() { "counting" } else { p.table };
    if p.bytes_total > 0 {
        format!("{table}; documents {:.1}/{:.1} MiB", p.bytes_done as f64 / 1048576.0, p.bytes_total as f64 / 1048576.0)
    } else {
        table.to_owned()
    }
}
