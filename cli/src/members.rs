//! `courrier domain`, `list`, `member`, `members` and `digests`: the operator's side of the
//! mailing lists, through the same core calls as the API.

use crate::config::Config;
use crate::error::CliError;
use crate::output::{self, ListArgs, PageArgs, cell, collection, emit, invalid, listing, progress, wire};
use crate::server::wire as services;
use clap::{Args, Subcommand};
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::kernel::{DomainName, EmailAddress, ListName, Page};
use courrier_core::mailing::import::{self, ImportConsent};
use courrier_core::mailing::members::{self as member_ops, AddMember, MemberRef};
use courrier_core::mailing::model::{
    DigestFrequency, DmarcMitigation, Domain, DomainStatus, ListStatus, MailingList, Member, MemberFilter,
    PostingPolicy, ReplyTo, SubscriptionPolicy,
};
use courrier_core::mailing::{domains, export, lists, views};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

/// A domain, as `DOMAIN` or `--domain DOMAIN` (the shape of the list commands).
#[derive(Debug, Clone, Args)]
pub struct DomainArg {
    #[arg(value_name = "DOMAIN", required_unless_present = "domain", conflicts_with = "domain")]
    name: Option<String>,
    /// The domain (the same as DOMAIN).
    #[arg(long = "domain", value_name = "DOMAIN")]
    domain: Option<String>,
}

impl DomainArg {
    fn parse(&self) -> Result<DomainName, CliError> {
        let raw = self.name.as_deref().or(self.domain.as_deref()).unwrap_or_default();
        Ok(DomainName::parse(raw)?)
    }
}

#[derive(Debug, Subcommand)]
pub enum DomainCommand {
    /// Create a sending domain (state pending_mta).
    Create {
        #[command(flatten)]
        domain: DomainArg,
        #[arg(long)]
        dkim_selector: Option<String>,
        /// open, confirm, moderate or closed: the policy of the domain's new lists.
        #[arg(long)]
        default_subscription_policy: Option<String>,
    },
    /// The domains, by name.
    List {
        /// Only the domains in this state (pending_mta, active, disabled).
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// A domain's detail, its DNS verdict and the DKIM record to publish.
    Show {
        #[command(flatten)]
        domain: DomainArg,
    },
    /// Change a domain: its state, DKIM selector (a new one makes a new key; "" clears it) or the
    /// policy of its new lists.
    #[command(name = "update")]
    Change {
        #[command(flatten)]
        domain: DomainArg,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        dkim_selector: Option<String>,
        #[arg(long)]
        default_subscription_policy: Option<String>,
    },
    /// Check the domain's SPF, DKIM selector and _dmarc records (COURRIER_DNS_SERVER, else the
    /// system resolver); stores the verdict on the domain. Exit code 0 whenever the check ran:
    /// read `dns_ok` for the verdict.
    DnsCheck {
        #[command(flatten)]
        domain: DomainArg,
    },
}

/// The policies of a list, as `list update` changes them; a text policy given as "" is cleared.
#[derive(Debug, Args)]
pub struct ListPolicyArgs {
    #[arg(long)]
    display_name: Option<String>,
    /// active or archived (an archived list takes no subscription and sends nothing).
    #[arg(long)]
    status: Option<String>,
    /// open, confirm, moderate or closed.
    #[arg(long)]
    subscription_policy: Option<String>,
    /// members, moderated, owners or open.
    #[arg(long)]
    posting_policy: Option<String>,
    #[arg(long)]
    subject_tag: Option<String>,
    #[arg(long)]
    footer_text: Option<String>,
    #[arg(long)]
    footer_html: Option<String>,
    /// list or poster.
    #[arg(long)]
    reply_to: Option<String>,
    /// From 1 to 1000.
    #[arg(long)]
    bounce_disable_score: Option<String>,
    /// Days a held post waits for a moderator before it is discarded (1 to 365).
    #[arg(long)]
    held_days: Option<String>,
    /// daily or weekly.
    #[arg(long)]
    digest_frequency: Option<String>,
    /// From 1 to 102400.
    #[arg(long)]
    max_message_kb: Option<String>,
    /// munge_from or none: what a post's copies do when the poster's domain publishes DMARC
    /// p=reject or p=quarantine.
    #[arg(long)]
    dmarc_mitigation: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ListCommand {
    /// Create a list on a domain, owned by an existing account.
    Create {
        #[command(flatten)]
        list: ListArgs,
        #[arg(long)]
        display_name: String,
        /// The owner's account, by address.
        #[arg(long)]
        owner: String,
        /// open, confirm, moderate or closed (default: the domain's).
        #[arg(long)]
        subscription_policy: Option<String>,
    },
    /// The lists of a domain, by name.
    List {
        /// The domain.
        #[arg(long)]
        domain: String,
    },
    /// A list's detail and policies.
    Show {
        #[command(flatten)]
        list: ListArgs,
    },
    /// Change a list's name or policies (only the options given).
    #[command(name = "update")]
    Change {
        #[command(flatten)]
        list: ListArgs,
        #[command(flatten)]
        policies: Box<ListPolicyArgs>,
    },
    /// Suspend distribution: queued copies wait until the list is resumed.
    Suspend {
        #[command(flatten)]
        list: ListArgs,
    },
    /// Resume distribution.
    Resume {
        #[command(flatten)]
        list: ListArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// Add or subscribe an address under the list's policy (active, or pending a confirmation
    /// mail or a moderator); with --force and --consent-evidence, active at once.
    Add {
        #[command(flatten)]
        list: ListArgs,
        #[arg(long)]
        email: String,
        #[arg(long)]
        name: Option<String>,
        /// regular, digest or nomail (default regular).
        #[arg(long)]
        delivery_mode: Option<String>,
        /// Active at once whatever the policy: the consent is attested (--consent-evidence).
        #[arg(long)]
        force: bool,
        #[arg(long)]
        consent_evidence: Option<String>,
        #[arg(long)]
        consent_source: Option<String>,
    },
    /// One member, by id or address.
    Show {
        #[command(flatten)]
        list: ListArgs,
        /// The member's id or address.
        member: String,
    },
    /// Remove a member (status removed; the member.removed event goes to webhooks).
    Remove {
        #[command(flatten)]
        list: ListArgs,
        /// The member's id or address.
        member: String,
    },
    /// Re-enable a member disabled by bounces (active again, bounce score 0); audited.
    Enable {
        #[command(flatten)]
        list: ListArgs,
        /// The member's id or address.
        member: String,
    },
    /// The members, by id, every filter applied.
    List {
        #[command(flatten)]
        list: ListArgs,
        /// pending, active, disabled, unsubscribed or removed.
        #[arg(long)]
        status: Option<String>,
        /// regular, digest or nomail.
        #[arg(long)]
        delivery_mode: Option<String>,
        #[arg(long)]
        min_bounce_score: Option<String>,
        /// Addresses containing this text (at least 2 characters).
        #[arg(long)]
        email_contains: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum DigestsCommand {
    /// Build now the digest of every list (or one) with posts since its last digest, whatever its
    /// frequency; the delivery workers send them. --list alone names a list when only one domain
    /// has a list of that name.
    Run {
        #[arg(long, requires = "list")]
        domain: Option<String>,
        #[arg(long)]
        list: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MembersCommand {
    /// Import a CSV document (header email,display_name,delivery_mode); rows become active members.
    Import {
        #[command(flatten)]
        list: ListArgs,
        /// The consent covering every row (required).
        #[arg(long)]
        consent_evidence: String,
        /// The CSV file; `-` reads standard input.
        file: PathBuf,
    },
    /// Export the members as CSV (email,display_name,delivery_mode,status,subscribed_at). With
    /// --json, --output is required and a report is printed.
    Export {
        #[command(flatten)]
        list: ListArgs,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        delivery_mode: Option<String>,
        /// Write here instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

fn operator() -> (Principal, RequestCtx) {
    (Principal::operator(), RequestCtx::cli())
}

fn policy(field: &str, raw: Option<&str>) -> Result<Option<SubscriptionPolicy>, CliError> {
    wire(field, raw, SubscriptionPolicy::parse, &SubscriptionPolicy::names())
}

fn number(field: &str, raw: Option<&str>) -> Result<Option<u32>, CliError> {
    raw.map(|v| {
        v.trim().parse::<u32>().map_err(|_| invalid(format!("{field} must be a non-negative integer, got {v:?}")))
    })
    .transpose()
}

fn domain_text(d: &Domain) -> String {
    let doc = views::domain(d);
    let mut lines = vec![
        format!("domain    {}", d.name),
        format!("status    {}", d.status.as_str()),
        format!("policy    {} (new lists)", d.default_subscription_policy.as_str()),
        format!("dkim      {}", cell(d.dkim_selector.as_deref())),
        format!("dns_ok    {}", cell(d.dns_ok)),
    ];
    if let Some(record) = doc["dkim_record"].as_object() {
        let field = |k: &str| record.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        lines.push(format!("publish   {} TXT \"{}\"", field("name"), field("value")));
    }
    lines.join("\n")
}

pub fn domain(config: &Config, cmd: DomainCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        DomainCommand::Create { domain, dkim_selector, default_subscription_policy } => {
            let req = domains::NewDomainRequest {
                name: domain.parse()?,
                dkim_selector,
                default_subscription_policy: policy(
                    "default_subscription_policy",
                    default_subscription_policy.as_deref(),
                )?,
            };
            let app = services(config, crate::build_info())?.mailing;
            let d = domains::create(&app, &p, &ctx, req)?;
            emit(json, &views::domain(&d), || format!("domain {} created ({})", d.name, d.status.as_str()));
        }
        DomainCommand::List { status, page } => {
            let status = wire("status", status.as_deref(), DomainStatus::parse, &DomainStatus::names())?;
            let page = page.page()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = domains::list(&app, &p, status, page)?;
            let items = found.items.iter().map(views::domain).collect();
            let rows = found
                .items
                .iter()
                .map(|d| {
                    vec![
                        d.name.to_string(),
                        d.status.as_str().to_owned(),
                        cell(d.dkim_selector.as_deref()),
                        cell(d.dns_ok),
                        d.default_subscription_policy.as_str().to_owned(),
                    ]
                })
                .collect();
            let headers = ["DOMAIN", "STATUS", "DKIM", "DNS_OK", "POLICY"];
            emit(json, &collection(items, found.total, page), || listing(&headers, rows, found.total, page));
        }
        DomainCommand::Show { domain } => {
            let name = domain.parse()?;
            let app = services(config, crate::build_info())?.mailing;
            let d = domains::get(&app, &p, &ctx, &name)?;
            emit(json, &views::domain(&d), || domain_text(&d));
        }
        DomainCommand::Change { domain, status, dkim_selector, default_subscription_policy } => {
            let name = domain.parse()?;
            let patch = domains::DomainPatch {
                status: wire("status", status.as_deref(), DomainStatus::parse, &DomainStatus::names())?,
                dkim_selector: dkim_selector.map(|s| Some(s).filter(|s| !s.is_empty())),
                default_subscription_policy: policy(
                    "default_subscription_policy",
                    default_subscription_policy.as_deref(),
                )?,
            };
            let app = services(config, crate::build_info())?.mailing;
            let d = domains::update(&app, &p, &ctx, &name, patch)?;
            emit(json, &views::domain(&d), || domain_text(&d));
        }
        DomainCommand::DnsCheck { domain } => {
            let name = domain.parse()?;
            let app = services(config, crate::build_info())?.mailing;
            dns_check(&app, &name, json)?;
        }
    }
    Ok(())
}

fn dns_check(app: &courrier_core::mailing::Service, name: &DomainName, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    let check = courrier_core::mailing::dns_check::run(app, &p, &ctx, name)?;
    emit(json, &views::dns_check(&check), || {
        let mut out = Vec::new();
        for v in &check.records {
            let verdict = match (v.checked, v.found, &v.error) {
                (false, _, _) => "not checked".to_owned(),
                (true, _, Some(e)) => format!("ERROR ({e})"),
                (true, true, None) => "ok".to_owned(),
                (true, false, None) => "MISSING".to_owned(),
            };
            out.push(format!("{:<6} {:<40} {verdict}", v.kind.as_str(), v.name));
            for value in &v.values {
                out.push(format!("       found:    {value}"));
            }
            if v.checked && !v.found {
                out.push(format!("       expected: {}", v.expected));
            }
        }
        out.push(format!("dns_ok: {}", check.domain.dns_ok == Some(true)));
        out.join("\n")
    });
    Ok(())
}

fn list_text(l: &MailingList) -> String {
    let p = &l.policies;
    [
        format!("list           {} ({})", l.address(), l.display_name),
        format!("status         {}{}", l.status.as_str(), if l.send_suspended { ", sending suspended" } else { "" }),
        format!("subscription   {}", p.subscription_policy.as_str()),
        format!("posting        {}", p.posting_policy.as_str()),
        format!("reply-to       {}", p.reply_to.as_str()),
        format!("subject tag    {}", cell(p.subject_tag.as_deref())),
        format!("digests        {}", p.digest_frequency.as_str()),
        format!("bounce score   {} disables", p.bounce_disable_score),
        format!("held posts     {} days", p.held_days),
        format!("max message    {} KiB", p.max_message_kb),
        format!("dmarc          {}", p.dmarc_mitigation.as_str()),
    ]
    .join("\n")
}

pub fn list(config: &Config, cmd: ListCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        ListCommand::Create { list, display_name, owner, subscription_policy } => {
            let (d, l) = list.names()?;
            let req = lists::NewList {
                name: l,
                display_name,
                owner: EmailAddress::parse(owner.trim())?,
                kind: None,
                subscription_policy: policy("subscription_policy", subscription_policy.as_deref())?,
            };
            let app = services(config, crate::build_info())?.mailing;
            let created = lists::create(&app, &p, &ctx, &d, req)?;
            emit(json, &views::list_detail(&created), || format!("list {} created", created.address()));
        }
        ListCommand::List { domain } => {
            let d = DomainName::parse(&domain)?;
            let app = services(config, crate::build_info())?.mailing;
            let found = lists::list(&app, &p, &ctx, &d)?;
            let items: Vec<_> = found.iter().map(views::list_summary).collect();
            let total = items.len() as u64;
            let rows = found
                .iter()
                .map(|l| {
                    vec![
                        l.address(),
                        l.display_name.clone(),
                        l.status.as_str().to_owned(),
                        if l.send_suspended { "suspended" } else { "-" }.to_owned(),
                    ]
                })
                .collect::<Vec<_>>();
            emit(json, &json!({ "items": items, "total": total }), || {
                if rows.is_empty() {
                    format!("{d} has no list")
                } else {
                    output::table(&["LIST", "NAME", "STATUS", "SENDING"], rows)
                }
            });
        }
        ListCommand::Show { list } => {
            let (d, l) = list.names()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = lists::get(&app, &p, &ctx, &d, &l)?;
            emit(json, &views::list_detail(&found), || list_text(&found));
        }
        ListCommand::Change { list, policies: a } => {
            let (d, l) = list.names()?;
            let patch = lists::ListPatch {
                display_name: a.display_name,
                status: wire("status", a.status.as_deref(), ListStatus::parse, &ListStatus::names())?,
                subscription_policy: policy("subscription_policy", a.subscription_policy.as_deref())?,
                posting_policy: wire(
                    "posting_policy",
                    a.posting_policy.as_deref(),
                    PostingPolicy::parse,
                    &PostingPolicy::names(),
                )?,
                subject_tag: a.subject_tag.map(Some),
                footer_text: a.footer_text.map(Some),
                footer_html: a.footer_html.map(Some),
                reply_to: wire("reply_to", a.reply_to.as_deref(), ReplyTo::parse, &ReplyTo::names())?,
                bounce_disable_score: number("bounce_disable_score", a.bounce_disable_score.as_deref())?,
                held_days: number("held_days", a.held_days.as_deref())?,
                digest_frequency: wire(
                    "digest_frequency",
                    a.digest_frequency.as_deref(),
                    DigestFrequency::parse,
                    &DigestFrequency::names(),
                )?,
                max_message_kb: number("max_message_kb", a.max_message_kb.as_deref())?,
                dmarc_mitigation: wire(
                    "dmarc_mitigation",
                    a.dmarc_mitigation.as_deref(),
                    DmarcMitigation::parse,
                    &DmarcMitigation::names(),
                )?,
            };
            let app = services(config, crate::build_info())?.mailing;
            let found = lists::update(&app, &p, &ctx, &d, &l, patch)?;
            emit(json, &views::list_detail(&found), || list_text(&found));
        }
        ListCommand::Suspend { list } => suspend(config, &list, true, json)?,
        ListCommand::Resume { list } => suspend(config, &list, false, json)?,
    }
    Ok(())
}

fn suspend(config: &Config, list: &ListArgs, on: bool, json: bool) -> Result<(), CliError> {
    let (d, l) = list.names()?;
    let app = services(config, crate::build_info())?.mailing;
    let (p, ctx) = operator();
    let found = lists::set_suspended(&app, &p, &ctx, &d, &l, on)?;
    emit(json, &views::list_detail(&found), || {
        format!("{}: sending {}", found.address(), if found.send_suspended { "suspended" } else { "resumed" })
    });
    Ok(())
}

fn member_row(m: &Member) -> Vec<String> {
    vec![
        m.id.to_string(),
        m.email.to_string(),
        cell(m.display_name.as_deref()),
        m.status.as_str().to_owned(),
        m.delivery_mode.as_str().to_owned(),
        m.bounce_score.to_string(),
        cell(m.subscribed_at.map(|t| t.to_rfc3339())),
    ]
}

const MEMBER_HEADERS: [&str; 7] = ["ID", "EMAIL", "NAME", "STATUS", "DELIVERY", "BOUNCES", "SUBSCRIBED"];

pub fn member(config: &Config, cmd: MemberCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        MemberCommand::Add { list, email, name, delivery_mode, force, consent_evidence, consent_source } => {
            let (d, l) = list.names()?;
            let req = AddMember::new(
                EmailAddress::parse(email.trim())?,
                name,
                delivery_mode.as_deref(),
                force,
                consent_source,
                consent_evidence,
                None,
            )?;
            let address = req.email.clone();
            let app = services(config, crate::build_info())?.mailing;
            let outcome = member_ops::add(&app, &p, &ctx, None, &d, &l, req)?;
            let outcome = outcome.ran().ok_or_else(|| invalid("no Idempotency-Key was given: the add always runs"))?;
            emit(json, &outcome.view(), || {
                format!("{address}: {} on {l}@{d} (member {})", outcome.as_str(), outcome.member_id())
            });
        }
        MemberCommand::Show { list, member } => {
            let (d, l) = list.names()?;
            let who = MemberRef::parse(member.trim())?;
            let app = services(config, crate::build_info())?.mailing;
            let m = member_ops::get(&app, &p, &ctx, &d, &l, &who)?;
            emit(json, &views::member(&m), || output::table(&MEMBER_HEADERS, vec![member_row(&m)]));
        }
        MemberCommand::Remove { list, member } => {
            let (d, l) = list.names()?;
            let who = MemberRef::parse(member.trim())?;
            let app = services(config, crate::build_info())?.mailing;
            let m = member_ops::remove(&app, &p, &ctx, &d, &l, &who)?;
            emit(json, &views::member(&m), || format!("{} removed from {l}@{d}", m.email));
        }
        MemberCommand::Enable { list, member } => {
            let (d, l) = list.names()?;
            let who = MemberRef::parse(member.trim())?;
            let app = services(config, crate::build_info())?.mailing;
            let m = member_ops::set_status(&app, &p, &ctx, &d, &l, &who, "active")?;
            emit(json, &views::member(&m), || {
                format!("{} is active on {l}@{d}, bounce score {}", m.email, m.bounce_score)
            });
        }
        MemberCommand::List { list, status, delivery_mode, min_bounce_score, email_contains, page } => {
            let (d, l) = list.names()?;
            let filter = MemberFilter::parse(
                status.as_deref(),
                delivery_mode.as_deref(),
                min_bounce_score.as_deref(),
                email_contains.as_deref(),
            )?;
            let page = page.page()?;
            let app = services(config, crate::build_info())?.mailing;
            let found = member_ops::list(&app, &p, &ctx, &d, &l, &filter, page)?;
            let items = found.items.iter().map(views::member).collect();
            let rows = found.items.iter().map(member_row).collect();
            emit(json, &collection(items, found.total, page), || listing(&MEMBER_HEADERS, rows, found.total, page));
        }
    }
    Ok(())
}

pub fn members(config: &Config, cmd: MembersCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        MembersCommand::Import { list, consent_evidence, file } => {
            let (d, l) = list.names()?;
            let consent = ImportConsent::new(Some(&consent_evidence), None)?;
            let app = services(config, crate::build_info())?.mailing;
            let target = import::authorize(&app, &p, &ctx, &d, &l)?;
            let (reader, size): (Box<dyn std::io::Read>, Option<u64>) = if file.as_os_str() == "-" {
                (Box::new(std::io::stdin().lock()), None)
            } else {
                let f = std::fs::File::open(&file)
                    .map_err(|e| CliError::File { path: file.display().to_string(), source: e })?;
                let size = f.metadata().ok().map(|m| m.len());
                (Box::new(f), size)
            };
            let bar = progress(json, size, "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}");
            let report =
                import::import(&app, &p, &ctx, &target, &consent, std::io::BufReader::new(bar.wrap_read(reader)));
            bar.finish_and_clear();
            let report = report?;
            emit(json, &views::import_report(&report), || {
                let mut out = vec![format!(
                    "{} rows: {} added, {} skipped (already on the list), {} errors, {} delivery modes set to regular",
                    report.total, report.added, report.skipped, report.errors, report.mode_coerced
                )];
                for s in &report.error_samples {
                    out.push(format!("  row {}: {}", s.row, s.reason));
                }
                out.join("\n")
            });
            Ok(())
        }
        MembersCommand::Export { list, status, delivery_mode, output } => {
            let (d, l) = list.names()?;
            let filter = MemberFilter::parse(status.as_deref(), delivery_mode.as_deref(), None, None)?;
            if json && output.is_none() {
                return Err(invalid("with --json, the CSV goes to a file (--output FILE) and a report is printed"));
            }
            let app = services(config, crate::build_info())?.mailing;
            let mut exp = export::open(&app, &p, &ctx, &d, &l, filter.clone())?;
            let bar = progress(json, None, "{spinner} {pos} members {per_sec} {elapsed}");
            if !bar.is_hidden() {
                // The count is one more query: only made when someone watches the bar.
                let total = member_ops::list(&app, &p, &ctx, &d, &l, &filter, Page::first(1))?.total;
                bar.set_length(total);
                bar.set_style(
                    indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} members {per_sec} eta {eta}")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
            }
            let mut out: Box<dyn Write> = match &output {
                Some(path) => Box::new(std::io::BufWriter::with_capacity(
                    1 << 16,
                    std::fs::File::create(path)
                        .map_err(|e| CliError::File { path: path.display().to_string(), source: e })?,
                )),
                None => Box::new(std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock())),
            };
            let write = |out: &mut Box<dyn Write>, s: &str| out.write_all(s.as_bytes()).map_err(CliError::Output);
            write(&mut out, export::HEADER)?;
            let (mut rows, mut bytes) = (0u64, export::HEADER.len() as u64);
            while let Some(chunk) = exp.next_chunk(&app)? {
                let n = chunk.as_bytes().iter().filter(|b| **b == b'\n').count() as u64;
                rows += n;
                bytes += chunk.len() as u64;
                bar.inc(n);
                write(&mut out, &chunk)?;
            }
            out.flush().map_err(CliError::Output)?;
            bar.finish_and_clear();
            if let Some(path) = &output {
                let doc = json!({ "list": exp.list().address(), "rows": rows, "bytes": bytes, "output": path });
                emit(json, &doc, || {
                    format!("{rows} members of {} written to {}", exp.list().address(), path.display())
                });
            }
            Ok(())
        }
    }
}

pub fn digests(config: &Config, cmd: DigestsCommand, json: bool) -> Result<(), CliError> {
    let DigestsCommand::Run { domain, list } = cmd;
    let app = services(config, crate::build_info())?.mailing;
    let (p, ctx) = operator();
    let only = match (domain, list) {
        (Some(d), Some(l)) => Some(lists::get(&app, &p, &ctx, &DomainName::parse(&d)?, &ListName::parse(&l)?)?.id),
        (None, Some(l)) => Some(lists::find_anywhere(&app, &p, &ctx, &ListName::parse(&l)?)?.id),
        _ => None,
    };
    let bar = progress(json, None, "{spinner} building digests {elapsed}");
    let built = courrier_core::mailing::digests::run(&app, only, true);
    bar.finish_and_clear();
    let built = built?;
    let items: Vec<_> = built
        .iter()
        .map(|b| json!({ "list": b.list_address, "send_id": b.send_id.get(), "posts": b.posts, "recipients": b.recipients }))
        .collect();
    emit(json, &json!({ "items": items }), || {
        if built.is_empty() {
            return "no list has posts waiting for a digest".to_owned();
        }
        built
            .iter()
            .map(|b| {
                format!(
                    "{}: digest of {} posts queued for {} members (send {})",
                    b.list_address, b.posts, b.recipients, b.send_id
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}
