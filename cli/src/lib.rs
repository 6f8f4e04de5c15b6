//! The `courrier` command line: each subcommand parses its arguments, calls core, and prints.
//! `main.rs` is glue: `main -> run -> exit code`.

mod admin;
mod chores;
pub mod config;
mod credentials;
pub mod error;
mod members;
mod moderation;
mod ocr;
mod output;
mod sends;
pub mod server;
mod shell;
mod store;
mod workers;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    /// Run delivery workers without the HTTP server (COURRIER_DELIVERY_WORKERS threads, at least 1),
    /// and the periodic jobs this process holds (see `courrier jobs`), until SIGTERM or SIGINT.
    Worker,
    /// Which process runs each periodic job of the installation (digests, purges, mailbox polling).
    Jobs,
    /// Print the version object: build information and the storage backend.
    Version,
    /// The installation's storage: copy an SQLite installation into PostgreSQL.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Accounts: create, invite, list, show, disable, enable, password.
    #[command(subcommand)]
    User(admin::UserCommand),
    /// Roles of accounts: grant, revoke, list.
    #[command(subcommand)]
    Role(admin::RoleCommand),
    /// Create an API key for an account; prints its secret (shown once).
    CreateApiKey(admin::CreateApiKey),
    /// API keys: list, revoke.
    #[command(subcommand)]
    Apikey(admin::ApiKeyCommand),
    /// The audit log, newest first, filtered.
    Audit(admin::AuditArgs),
    /// Sending domains: create, list, show, update, dns-check.
    #[command(subcommand)]
    Domain(members::DomainCommand),
    /// Mailing lists: create, list, show, update, suspend, resume.
    #[command(subcommand)]
    List(members::ListCommand),
    /// One member of a list: add, show, remove, list.
    #[command(subcommand)]
    Member(members::MemberCommand),
    /// Members of a list in bulk: CSV import and export.
    #[command(subcommand)]
    Members(members::MembersCommand),
    /// Messages to a list: submit, status, cancel.
    #[command(subcommand)]
    Send(sends::SendCommand),
    /// Moderation queues of a list: held posts and waiting subscriptions (list, approve, reject,
    /// discard).
    #[command(subcommand)]
    Moderation(moderation::ModerationCommand),
    /// Mail accounts of a list (IMAP ingest, SMTP submission): set, list, delete, test.
    #[command(subcommand)]
    Credential(credentials::CredentialCommand),
    /// Webhooks: create, list, delete, test.
    #[command(subcommand)]
    Webhook(sends::WebhookCommand),
    /// Digests of posts for digest members.
    #[command(subcommand)]
    Digests(members::DigestsCommand),
    /// Maintenance mode of the OCR service: while on, its routes answer 503.
    Maintenance {
        #[arg(value_enum)]
        state: ocr::Switch,
    },
    /// OCR documents and plans: failed, plan.
    #[command(subcommand)]
    Ocr(ocr::OcrCommand),
    /// Print the completion script of a shell (bash, zsh, fish).
    Completions {
        #[arg(value_enum)]
        shell: shell::Shell,
    },
    /// Print the manual page (roff) of courrier or of one command: `courrier man | man -l -`.
    Man {
        /// A command, e.g. `member add`.
        command: Vec<String>,
    },
    /// Reads a PDF from stdin under resource limits (the server runs it; not for people).
    #[command(hide = true)]
    Sandbox {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// The areas `courrier --help` groups the commands by; every visible command is in one.
const AREAS: &[(&str, &[&str])] = &[
    ("Server", &["serve", "worker", "jobs", "version", "store"]),
    ("Accounts and access", &["user", "role", "create-api-key", "apikey", "audit"]),
    (
        "Mailing lists",
        &["domain", "list", "member", "members", "send", "moderation", "credential", "webhook", "digests"],
    ),
    ("OCR service", &["maintenance", "ocr"]),
    ("Shell", &["completions", "man", "help"]),
];

/// The clap command with `--help` listing the commands by area (clap lists them in one block).
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    let width = cmd.get_subcommands().map(|c| c.get_name().len()).max().unwrap_or(0);
    let mut areas = String::new();
    for (area, names) in AREAS {
        areas.push_str(&format!("{area}:\n"));
        for name in *names {
            let about =
                cmd.find_subcommand(name).and_then(|c| c.get_about()).map(|a| a.to_string()).unwrap_or_default();
            let about = about.lines().next().unwrap_or_default().to_owned();
            areas.push_str(&format!("  {name:<width$}  {about}\n"));
        }
        areas.push('\n');
    }
    let template = format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{areas}Options:\n{{options}}{{after-help}}"
    );
    Cli::command().help_template(template)
}

/// Parses the arguments and runs the command. A value clap refuses (a number that is not one)
/// exits 1 like any invalid value; an unknown command or flag is usage, exit 2.
pub fn main_with_args() -> ExitCode {
    let json = std::env::args_os().any(|a| a == "--json");
    let parsed = command().try_get_matches().and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => run(cli),
        Err(e) => {
            use clap::error::ErrorKind as K;
            let value = matches!(e.kind(), K::InvalidValue | K::ValueValidation);
            let usage =
                !matches!(e.kind(), K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand);
            if json && usage {
                let message = e.kind().as_str().unwrap_or("usage error").to_owned();
                let detail = e.to_string();
                let first = detail.lines().next().unwrap_or(&message).trim_start_matches("error: ");
                eprintln!(
                    "{}",
                    serde_json::json!({ "error": { "code": if value { "validation_failed" } else { "usage" }, "message": first } })
                );
            } else {
                let _ = e.print();
            }
            if value { ExitCode::from(1) } else { ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2)) }
        }
    }
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
    // Generated from the definitions: no configuration, no data directory.
    match &cli.command {
        Command::Completions { shell } => return shell::completions(*shell),
        Command::Man { command } => return shell::man(command),
        _ => {}
    }
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
                backend: match &config.database_url {
                    Some(url) => courrier_store_postgres::describe_backend(url),
                    None => courrier_store_sqlite::describe_backend(),
                },
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
            // The ingest pollers are workers too (a server without delivery workers runs none).
            let intake =
                std::sync::Arc::new(courrier_core::mailing::ingest::MailIn(std::sync::Arc::clone(&services.mailing)));
            let ingest = workers::start_ingest(
                std::sync::Arc::clone(&services.mailing),
                intake,
                Default::default(),
                std::sync::Arc::clone(&services.jobs),
            );
            // The installation's periodic chores, each run by one process of it (this one or another).
            let chores = chores::start(&services);
            let workers = workers::start(
                services.mailing,
                server::delivery_config(&config),
                server::webhook_config(&config),
                config.delivery_workers.max(1),
                // Alone in its process, a worker competes with no LMTP session.
                0,
                std::time::Duration::ZERO,
            );
            tracing::info!(threads = config.delivery_workers.max(1), "delivery workers running");
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(error::CliError::Serve)?;
            runtime.block_on(server::termination_signal());
            chores.stop();
            ingest.stop();
            workers.stop();
            Ok(())
        }
        Command::Jobs => chores::jobs(&config, cli.json),
        Command::Store(cmd) => store::store(&config, cmd, cli.json),
        Command::Apikey(cmd) => admin::apikey(&config, cmd, cli.json),
        Command::Audit(args) => admin::audit(&config, args, cli.json),
        Command::Domain(cmd) => members::domain(&config, cmd, cli.json),
        Command::List(cmd) => members::list(&config, cmd, cli.json),
        Command::Member(cmd) => members::member(&config, cmd, cli.json),
        Command::Members(cmd) => members::members(&config, cmd, cli.json),
        Command::Send(cmd) => sends::send(&config, cmd, cli.json),
        Command::Moderation(cmd) => moderation::moderation(&config, cmd, cli.json),
        Command::Credential(cmd) => credentials::credential(&config, cmd, cli.json),
        Command::Webhook(cmd) => sends::webhook(&config, cmd, cli.json),
        Command::Digests(cmd) => members::digests(&config, cmd, cli.json),
        Command::Maintenance { state } => ocr::maintenance(&config, state, cli.json),
        Command::Ocr(cmd) => ocr::ocr(&config, cmd, cli.json),
        Command::Completions { .. } | Command::Man { .. } | Command::Sandbox { .. } => Ok(()),
    }
}

/// The PostgreSQL driver's log level, whatever COURRIER_LOG says.
const QUIET_DRIVER: &str = "tokio_postgres=info";

/// Logs go to stderr: human lines by default, JSON lines with COURRIER_LOG_FORMAT=json.
fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // The PostgreSQL driver logs every statement with its parameters at debug: password hashes,
    // token digests and sealed secrets would reach the log. Never below info, whatever the filter.
    let filter = filter.add_directive(QUIET_DRIVER.parse().expect("a valid directive"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = if config.log_json { builder.json().try_init() } else { builder.try_init() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_visible_command_in_one_area() {
        let mut cmd = Cli::command();
        cmd.build();
        let visible: Vec<&str> = cmd.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name()).collect();
        let grouped: Vec<&str> = AREAS.iter().flat_map(|(_, names)| names.iter().copied()).collect();
        for name in &visible {
            assert_eq!(grouped.iter().filter(|g| *g == name).count(), 1, "{name} is in one area");
        }
        for name in &grouped {
            assert!(visible.contains(name), "{name} is a command");
        }
        let help = command().render_help().to_string();
        assert!(help.contains("Mailing lists:\n  domain"), "{help}");
        assert!(!help.contains("sandbox"), "{help}");
    }

    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
