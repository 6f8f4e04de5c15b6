//! `courrier send` and `courrier webhook`: messages to a list, and the webhooks that hear of
//! them, through the same core calls as the API.

use crate::config::Config;
use crate::error::CliError;
use crate::output::{self, ListArgs, PageArgs, cell, collection, emit, invalid, listing};
use crate::server::wire as services;
use clap::Subcommand;
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::kernel::{Code, DomainName, EventName, ListName};
use courrier_core::mailing::model::{CopyCounts, CopyState, SendId, SendRecord, WebhookId};
use courrier_core::mailing::{domains, lists, sends, views, webhooks};
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum SendCommand {
    /// Submit a message to the list: one copy per active regular member, sent by the delivery
    /// workers. The text and HTML bodies come from files (`-`: standard input) or --text.
    Submit {
        #[command(flatten)]
        list: ListArgs,
        #[arg(long)]
        subject: String,
        /// The plain-text body.
        #[arg(long, conflicts_with = "text_file")]
        text: Option<String>,
        /// A file holding the plain-text body; `-` reads standard input.
        #[arg(long, value_name = "FILE")]
        text_file: Option<PathBuf>,
        /// A file holding the HTML body; `-` reads standard input.
        #[arg(long, value_name = "FILE")]
        html_file: Option<PathBuf>,
    },
    /// A send and its copies counted by state.
    Status {
        #[command(flatten)]
        list: ListArgs,
        /// The send's id.
        send: String,
    },
    /// Cancel the copies of a send still queued (exit 4 when none is).
    Cancel {
        #[command(flatten)]
        list: ListArgs,
        /// The send's id.
        send: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Create a webhook (an https URL resolving to public addresses); prints its signing secret,
    /// shown this once. Without --domain, it hears the whole installation.
    Create {
        #[arg(long)]
        url: String,
        /// Comma-separated event names, e.g. member.added,send.completed.
        #[arg(long, value_delimiter = ',', required = true)]
        events: Vec<String>,
        /// Only the events of this domain (or, with --list, of this list).
        #[arg(long)]
        domain: Option<String>,
        #[arg(long, requires = "domain")]
        list: Option<String>,
    },
    /// The webhooks, with their last success and error (never their secrets).
    List {
        #[command(flatten)]
        page: PageArgs,
    },
    /// Delete a webhook and its pending deliveries.
    Delete {
        #[arg(value_name = "ID")]
        id: String,
    },
    /// Send a signed test ping now and show what the receiver answered.
    Test {
        #[arg(value_name = "ID")]
        id: String,
    },
}

fn operator() -> (Principal, RequestCtx) {
    (Principal::operator(), RequestCtx::cli())
}

/// A message body from a file, or standard input for `-`.
fn body(path: &Path) -> Result<String, CliError> {
    let file_error = |e| CliError::File { path: path.display().to_string(), source: e };
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(CliError::Stdin)?;
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text)).map_err(file_error)?;
    }
    Ok(text)
}

fn send_text(send: &SendRecord, counts: &CopyCounts) -> String {
    let by_state: Vec<String> = CopyState::ALL
        .iter()
        .filter(|s| counts.get(**s) > 0)
        .map(|s| format!("{} {}", counts.get(*s), s.as_str()))
        .collect();
    [
        format!("send       {} ({})", send.id, send.state.as_str()),
        format!("subject    {}", send.subject),
        format!("recipients {}", send.recipients),
        format!("copies     {}", if by_state.is_empty() { "none".to_owned() } else { by_state.join(", ") }),
        format!("created    {}", send.created_at.to_rfc3339()),
        format!("completed  {}", cell(send.completed_at.map(|t| t.to_rfc3339()))),
    ]
    .join("\n")
}

pub fn send(config: &Config, cmd: SendCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        SendCommand::Submit { list, subject, text, text_file, html_file } => {
            let (d, l) = list.names()?;
            if text_file.as_deref().zip(html_file.as_deref()).is_some_and(|(t, h)| t == h && t.as_os_str() == "-") {
                return Err(invalid("standard input can hold one body: give the other as a file"));
            }
            let text = match (text, text_file) {
                (Some(t), _) => Some(t),
                (None, Some(path)) => Some(body(&path)?),
                (None, None) => None,
            };
            let html = html_file.as_deref().map(body).transpose()?;
            let message = sends::NewMessage { subject, text, html };
            let app = services(config, crate::build_info())?.mailing;
            let submitted = sends::submit(&app, &p, &ctx, None, &d, &l, message)?.ran().ok_or_else(|| {
                CliError::Input { code: Code::Internal, message: "a send without a key always runs".into() }
            })?;
            let doc = serde_json::json!({ "send_id": submitted.send_id.get(), "recipients": submitted.recipients });
            emit(json, &doc, || {
                format!("send {} queued for {} members of {l}@{d}", submitted.send_id, submitted.recipients)
            });
        }
        SendCommand::Status { list, send } => {
            let (d, l) = list.names()?;
            let id = SendId::from_stored(output::id("the send id", &send)?);
            let app = services(config, crate::build_info())?.mailing;
            let (send, counts) = sends::get(&app, &p, &ctx, &d, &l, id)?;
            emit(json, &views::send_status(&send, &counts), || send_text(&send, &counts));
        }
        SendCommand::Cancel { list, send } => {
            let (d, l) = list.names()?;
            let id = SendId::from_stored(output::id("the send id", &send)?);
            let app = services(config, crate::build_info())?.mailing;
            let (send, counts) = sends::cancel(&app, &p, &ctx, &d, &l, id)?;
            emit(json, &views::send_status(&send, &counts), || send_text(&send, &counts));
        }
    }
    Ok(())
}

pub fn webhook(config: &Config, cmd: WebhookCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        WebhookCommand::Create { url, events, domain, list } => {
            let names: Vec<&str> = EventName::ALL.iter().map(|e| e.as_str()).collect();
            let events = events
                .iter()
                .map(|e| e.trim())
                .filter(|e| !e.is_empty())
                .map(|e| {
                    EventName::parse(e)
                        .ok_or_else(|| invalid(format!("events: {e:?} is not one of {}", names.join(", "))))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let domain = domain.as_deref().map(DomainName::parse).transpose()?;
            let list = list.as_deref().map(ListName::parse).transpose()?;
            let app = services(config, crate::build_info())?.mailing;
            // The API names the filter by ids; the command line by names, resolved here.
            let (domain_id, list_id) = match (&domain, &list) {
                (Some(d), Some(l)) => {
                    let found = lists::get(&app, &p, &ctx, d, l)?;
                    (Some(found.domain_id), Some(found.id))
                }
                (Some(d), None) => (Some(domains::get(&app, &p, &ctx, d)?.id), None),
                _ => (None, None),
            };
            let req = webhooks::NewWebhookRequest { url, events, domain_id, list_id };
            let created = webhooks::create(&app, &p, &ctx, req)?;
            emit(json, &views::webhook_created(&created.webhook, &created.secret), || {
                format!(
                    "webhook {} created for {}\nsecret (shown this once): {}",
                    created.webhook.id, created.webhook.url, created.secret
                )
            });
        }
        WebhookCommand::List { page } => {
            let page = page.page()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = webhooks::list(&app, &p, page)?;
            let items = found.items.iter().map(views::webhook).collect();
            let rows = found
                .items
                .iter()
                .map(|w| {
                    let scope = match (w.domain_id, w.list_id) {
                        (_, Some(l)) => format!("list {l}"),
                        (Some(d), None) => format!("domain {d}"),
                        (None, None) => "all".to_owned(),
                    };
                    let events: Vec<&str> = w.events.iter().map(|e| e.as_str()).collect();
                    vec![
                        w.id.to_string(),
                        w.url.clone(),
                        scope,
                        events.join(","),
                        cell(w.last_success_at.map(|t| t.to_rfc3339())),
                        cell(w.last_error.as_deref()),
                    ]
                })
                .collect();
            let headers = ["ID", "URL", "SCOPE", "EVENTS", "LAST_SUCCESS", "LAST_ERROR"];
            emit(json, &collection(items, found.total, page), || listing(&headers, rows, found.total, page));
        }
        WebhookCommand::Delete { id } => {
            let id = WebhookId::from_stored(output::id("the webhook id", &id)?);
            let app = services(config, crate::build_info())?.mailing;
            webhooks::delete(&app, &p, &ctx, id)?;
            emit(json, &serde_json::json!({ "id": id.get(), "deleted": true }), || format!("webhook {id} deleted"));
        }
        WebhookCommand::Test { id } => {
            let id = WebhookId::from_stored(output::id("the webhook id", &id)?);
            let app = services(config, crate::build_info())?.mailing;
            let outcome = webhooks::test(&app, &p, &ctx, id)?;
            emit(json, &views::webhook_ping(&outcome), || match (&outcome.status, &outcome.error) {
                (Some(s), _) if outcome.delivered => format!("delivered: the receiver answered {s}"),
                (Some(s), _) => format!("NOT delivered: the receiver answered {s}"),
                (None, Some(e)) => format!("NOT delivered: {e}"),
                (None, None) => "NOT delivered".to_owned(),
            });
        }
    }
    Ok(())
}
