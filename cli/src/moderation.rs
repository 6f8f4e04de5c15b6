//! `courrier moderation`: a list's moderation queues (held posts, and subscriptions waiting for a
//! moderator), through the same core calls as the API.

use crate::config::Config;
use crate::error::CliError;
use crate::output::{self, ListArgs, PageArgs, cell, collection, emit, listing};
use crate::server::wire as services;
use clap::Subcommand;
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::mailing::model::MemberId;
use courrier_core::mailing::moderation::{self, Decision, MessageDecision};
use courrier_core::mailing::posts::HeldId;
use courrier_core::mailing::views;

#[derive(Debug, Subcommand)]
pub enum ModerationCommand {
    /// The posts the list holds, oldest first; with --subscriptions, the subscriptions waiting
    /// for a moderator.
    List {
        #[command(flatten)]
        list: ListArgs,
        #[arg(long)]
        subscriptions: bool,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Approve a held post (it is posted) or, with --subscription, a waiting subscription (the
    /// member becomes active).
    Approve {
        #[command(flatten)]
        list: ListArgs,
        /// The held post's id, or the member's with --subscription.
        id: String,
        #[arg(long)]
        subscription: bool,
    },
    /// Reject a held post (its poster is told, with --reason when given) or, with
    /// --subscription, a waiting subscription (the requester is told).
    Reject {
        #[command(flatten)]
        list: ListArgs,
        id: String,
        #[arg(long)]
        subscription: bool,
        /// Mailed to the poster of a rejected post.
        #[arg(long, conflicts_with = "subscription")]
        reason: Option<String>,
    },
    /// Discard a held post: deleted, nobody told.
    Discard {
        #[command(flatten)]
        list: ListArgs,
        id: String,
    },
}

pub fn moderation(config: &Config, cmd: ModerationCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    match cmd {
        ModerationCommand::List { list, subscriptions: true, page } => {
            let (d, l) = list.names()?;
            let page = page.page()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = moderation::subscriptions(&app, &p, &ctx, &d, &l, page)?;
            let items = found.items.iter().map(views::pending_subscription).collect();
            let rows = found
                .items
                .iter()
                .map(|m| {
                    vec![
                        m.id.to_string(),
                        m.email.to_string(),
                        cell(m.display_name.as_deref()),
                        m.updated_at.to_rfc3339(),
                    ]
                })
                .collect();
            emit(json, &collection(items, found.total, page), || {
                listing(&["ID", "EMAIL", "NAME", "REQUESTED"], rows, found.total, page)
            });
        }
        ModerationCommand::List { list, subscriptions: false, page } => {
            let (d, l) = list.names()?;
            let page = page.page()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = moderation::messages(&app, &p, &ctx, &d, &l, page)?;
            let items = found.items.iter().map(views::held_message).collect();
            let rows = found
                .items
                .iter()
                .map(|h| {
                    vec![
                        h.id.to_string(),
                        cell(h.from.as_deref().or(h.envelope_from.as_deref())),
                        cell(h.subject.as_deref()),
                        h.reason.as_str().to_owned(),
                        h.received_at.to_rfc3339(),
                    ]
                })
                .collect();
            emit(json, &collection(items, found.total, page), || {
                listing(&["ID", "FROM", "SUBJECT", "REASON", "RECEIVED"], rows, found.total, page)
            });
        }
        ModerationCommand::Approve { list, id, subscription: true } => {
            decide_subscription(config, &list, &id, Decision::Approve, json)?
        }
        ModerationCommand::Reject { list, id, subscription: true, .. } => {
            decide_subscription(config, &list, &id, Decision::Reject, json)?
        }
        ModerationCommand::Approve { list, id, subscription: false } => {
            decide_message(config, &list, &id, MessageDecision::Approve, json)?;
        }
        ModerationCommand::Reject { list, id, subscription: false, reason } => {
            let reason = reason.filter(|r| !r.trim().is_empty());
            decide_message(config, &list, &id, MessageDecision::Reject(reason), json)?;
        }
        ModerationCommand::Discard { list, id } => decide_message(config, &list, &id, MessageDecision::Discard, json)?,
    }
    Ok(())
}

fn decide_subscription(
    config: &Config,
    list: &ListArgs,
    id: &str,
    decision: Decision,
    json: bool,
) -> Result<(), CliError> {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = list.names()?;
    let id = MemberId::from_stored(output::id("the member id", id)?);
    let app = services(config, crate::build_info())?.mailing;
    let m = moderation::decide_subscription(&app, &p, &ctx, &d, &l, id, decision)?;
    emit(json, &views::member(&m), || format!("{} is now {} on {l}@{d}", m.email, m.status.as_str()));
    Ok(())
}

fn decide_message(
    config: &Config,
    list: &ListArgs,
    id: &str,
    decision: MessageDecision,
    json: bool,
) -> Result<(), CliError> {
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let (d, l) = list.names()?;
    let id = HeldId::from_stored(output::id("the held post id", id)?);
    let label = match decision {
        MessageDecision::Approve => "approved",
        MessageDecision::Reject(_) => "rejected",
        MessageDecision::Discard => "discarded",
    };
    let app = services(config, crate::build_info())?.mailing;
    match moderation::decide_message(&app, &p, &ctx, &d, &l, id, decision)? {
        Some(sent) => emit(json, &views::held_approved(id, &sent), || {
            format!("held post {id} approved: send {} to {} members of {l}@{d}", sent.send_id, sent.recipients)
        }),
        None => emit(json, &views::held_decided(id, label), || format!("held post {id} {label}")),
    }
    Ok(())
}
