//! The `courrier` command line: each subcommand parses its arguments, calls core, and prints.
//! `main.rs` is glue: `main -> run -> exit code`.

mod admin;
pub mod config;
pub mod error;
mod members;
mod ocr;
pub mod server;
mod workers;

use clap::{Parser, Subcommand};
use config::Config;
use courrier_core::kernel::{BuildInfo, CoreError};
use error::{CliError, exit_code};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "courrier", version, about = "Courrier: a mailing-list service and an OCR document service")]
pub struct Cli {
    /// The data directory (database, documents); overrides COURRIER_DATA_DIR.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve both HTTP APIs (COURRIER_LISTEN, default 127.0.0.1:8080) until SIGTERM or SIGINT.
    Serve,
    /// Print the version object: build information and the storage backend.
    Version,
    /// Accounts.
    #[command(subcommand)]
    User(admin::UserCommand),
    /// Roles of accounts.
    #[command(subcommand)]
    Role(admin::RoleCommand),
    /// Create an API key for an account; prints its secret (shown once).
    CreateApiKey(admin::CreateApiKey),
    /// Run delivery workers without the HTTP server (COURRIER_DELIVERY_WORKERS threads, at least 1),
    /// until SIGTERM or SIGINT.
    Worker,
    /// Sending domains.
    #[command(subcommand)]
    Domain(members::DomainCommand),
    /// Mailing lists.
    #[command(subcommand)]
    List(members::ListCommand),
    /// Digests of posts for digest members.
    #[command(subcommand)]
    Digests(members::DigestsCommand),
    /// Members of a list: CSV import and export.
    #[command(subcommand)]
    Members(members::MembersCommand),
    /// Maintenance mode of the OCR service: while on, its routes answer 503.
    Maintenance {
        #[arg(value_enum)]
        state: ocr::Switch,
    },
    /// OCR documents.
    #[command(subcommand)]
    Ocr(ocr::OcrCommand),
    /// Reads a PDF from stdin under resource limits (the server runs it; not for people).
    #[command(hide = true)]
    Sandbox {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// What the binary was built from (see build.rs).
pub fn build_info() -> BuildInfo {
    let non_empty = |s: &'static str| (!s.is_empty()).then_some(s);
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("COURRIER_COMMIT"),
        commit_at: non_empty(env!("COURRIER_COMMIT_AT")),
        dirty: env!("COURRIER_DIRTY") == "true",
        built_at: non_empty(env!("COURRIER_BUILT_AT_STAMP")),
        rustc: env!("COURRIER_RUSTC"),
        platform: env!("COURRIER_PLATFORM"),
    }
}

pub fn run(cli: Cli) -> ExitCode {
    // The sandbox reads neither configuration nor database, and logs nothing: it limits itself
    // and answers on stdout.
    if let Command::Sandbox { args } = &cli.command {
        return ExitCode::from(courrier_core::adapters::pdf_sandbox::child_main(args));
    }
    let json = cli.json;
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::debug!(error = ?e, "command failed");
            if json {
                eprintln!(
                    "{}",
                    serde_json::json!({ "error": { "code": e.code().as_str(), "message": e.to_string() } })
                );
            } else {
                eprintln!("courrier: {e}");
            }
            ExitCode::from(exit_code(e.kind()))
        }
    }
}

fn execute(cli: Cli) -> Result<(), CliError> {
    let config = Config::from_env(|k| std::env::var(k).ok(), cli.data_dir)?;
    init_logging(&config);
    match cli.command {
        Command::Serve => {
            let bound = server::bind(&config, build_info())?;
            server::run(bound, server::termination_signal())
        }
        Command::Version => {
            // Read-only: no data directory, database or migration is created to say what this
            // build is and which backend it uses.
            let version = courrier_core::kernel::VersionInfo {
                build: build_info(),
                backend: courrier_core::adapters::sqlite::describe_backend(),
            };
            let doc = courrier_core::system::version_view(&version);
            if cli.json {
                println!("{doc}");
            } else {
                let field = |k: &str| doc.get(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
                println!("courrier {}", field("version"));
                println!("commit   {}{}", field("commit"), if version.build.dirty { " (dirty)" } else { "" });
                println!("compiler {}", field("rust_version"));
                println!("platform {}", field("platform"));
                println!("backend  {}", field("backend"));
            }
            Ok(())
        }
        Command::User(cmd) => admin::user(&config, cmd, cli.json),
        Command::Role(cmd) => admin::role(&config, cmd, cli.json),
        Command::CreateApiKey(cmd) => admin::create_api_key(&config, cmd, cli.json),
        Command::Worker => {
            let services = server::wire(&config, build_info())?;
            let workers = workers::start(
                services.mailing,
                server::delivery_config(&config),
                server::webhook_config(&config),
                config.delivery_workers.max(1),
            );
            tracing::info!(threads = config.delivery_workers.max(1), "delivery workers running");
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(error::CliError::Serve)?;
            runtime.block_on(server::termination_signal());
            workers.stop();
            Ok(())
        }
        Command::Domain(cmd) => members::domain(&config, cmd, cli.json),
        Command::List(cmd) => members::list(&config, cmd, cli.json),
        Command::Members(cmd) => members::members(&config, cmd, cli.json),
        Command::Digests(cmd) => members::digests(&config, cmd, cli.json),
        Command::Maintenance { state } => ocr::maintenance(&config, state, cli.json),
        Command::Ocr(cmd) => ocr::ocr(&config, cmd, cli.json),
        Command::Sandbox { .. } => Ok(()),
    }
}

/// Logs go to stderr: human lines by default, JSON lines with COURRIER_LOG_FORMAT=json.
fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = if config.log_json { builder.json().try_init() } else { builder.try_init() };
}
