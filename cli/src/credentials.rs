//! `courrier credential`: a list's mail-account credentials (the IMAP mailbox it fetches from,
//! the SMTP submission account it sends through), through the same core calls and views as the
//! API. The password is read from standard input, never from an argument (`ps` and shell
//! histories show arguments), and is never printed.

use crate::config::Config;
use crate::error::CliError;
use crate::output::{ListArgs, cell, emit, invalid, secret_from_stdin, table};
use crate::server::wire as services;
use clap::Subcommand;
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::mailing::accounts::Security;
use courrier_core::mailing::credentials::{self, CredentialKind, CredentialRequest};
use courrier_core::mailing::views;
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum CredentialCommand {
    /// Store the list's account of a kind (`ingest`: IMAP; `submission`: SMTP); the password is
    /// read from standard input unless --keep-password keeps the stored one.
    Set {
        #[command(flatten)]
        list: ListArgs,
        /// `ingest` or `submission`.
        kind: String,
        #[arg(long)]
        host: String,
        #[arg(long)]
        port: u16,
        /// `tls` (from the first byte) or `starttls`.
        #[arg(long, default_value = "tls")]
        security: String,
        #[arg(long)]
        username: String,
        /// The IMAP folder (`ingest` only; INBOX when not given).
        #[arg(long)]
        folder: Option<String>,
        /// Keep the password already stored (an update of the other fields).
        #[arg(long)]
        keep_password: bool,
    },
    /// The list's accounts and the outcome of their last use (never a password).
    List {
        #[command(flatten)]
        list: ListArgs,
    },
    /// Forget the list's account of a kind.
    Delete {
        #[command(flatten)]
        list: ListArgs,
        kind: String,
    },
    /// Open a real session with the account (nothing sent, nothing fetched); the outcome is
    /// recorded on the credential.
    Test {
        #[command(flatten)]
        list: ListArgs,
        kind: String,
    },
}

fn kind(raw: &str) -> Result<CredentialKind, CliError> {
    CredentialKind::parse(raw).ok_or_else(|| invalid(format!("the kind {raw:?} is not one of ingest, submission")))
}

pub fn credential(config: &Config, cmd: CredentialCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    match cmd {
        CredentialCommand::Set { list, kind: k, host, port, security, username, folder, keep_password } => {
            let (d, l) = list.names()?;
            let k = kind(&k)?;
            let security = Security::parse(&security)
                .ok_or_else(|| invalid(format!("security {security:?} is not one of tls, starttls")))?;
            let password = if keep_password { None } else { Some(secret_from_stdin("password")?) };
            let req = CredentialRequest { host, port, security, username, password, folder };
            let app = services(config, crate::build_info())?.mailing;
            let c = credentials::put(&app, &p, &ctx, &d, &l, k, req)?;
            emit(json, &views::credential(&c), || {
                format!("the {} account of {l}@{d} is {}@{}:{}", c.kind.as_str(), c.username, c.host, c.port)
            });
        }
        CredentialCommand::List { list } => {
            let (d, l) = list.names()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = credentials::list(&app, &p, &ctx, &d, &l)?;
            let items: Vec<_> = found.iter().map(views::credential).collect();
            let rows = found
                .iter()
                .map(|c| {
                    vec![
                        c.kind.as_str().to_owned(),
                        format!("{}:{}", c.host, c.port),
                        c.security.as_str().to_owned(),
                        c.username.clone(),
                        cell(c.folder.as_deref()),
                        cell(c.last_ok_at.map(|t| t.to_rfc3339())),
                        cell(c.last_error.as_deref()),
                    ]
                })
                .collect();
            emit(json, &json!({ "data": items }), || {
                table(&["KIND", "HOST", "SECURITY", "USERNAME", "FOLDER", "LAST OK", "LAST ERROR"], rows)
            });
        }
        CredentialCommand::Delete { list, kind: k } => {
            let (d, l) = list.names()?;
            let k = kind(&k)?;
            let app = services(config, crate::build_info())?.mailing;
            credentials::delete(&app, &p, &ctx, &d, &l, k)?;
            emit(json, &json!({ "kind": k.as_str(), "deleted": true }), || {
                format!("the {} account of {l}@{d} is forgotten", k.as_str())
            });
        }
        CredentialCommand::Test { list, kind: k } => {
            let (d, l) = list.names()?;
            let k = kind(&k)?;
            let app = services(config, crate::build_info())?.mailing;
            credentials::test(&app, &p, &ctx, &d, &l, k)?;
            emit(json, &json!({ "ok": true }), || format!("the {} account of {l}@{d} works", k.as_str()));
        }
    }
    Ok(())
}
