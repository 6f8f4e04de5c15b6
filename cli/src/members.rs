//! `courrier domain create`, `courrier list create`, `courrier members import|export`: the
//! operator's side of the mailing lists, through the same core calls as the API.

use crate::config::Config;
use crate::error::CliError;
use crate::server::wire;
use clap::Subcommand;
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::kernel::{DomainName, EmailAddress, ListName};
use courrier_core::mailing::import::{self, ImportConsent};
use courrier_core::mailing::model::{MemberFilter, SubscriptionPolicy};
use courrier_core::mailing::{domains, export, lists};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum DomainCommand {
    /// Create a sending domain (state pending_mta).
    Create {
        name: String,
        #[arg(long)]
        dkim_selector: Option<String>,
    },
    /// Check the domain's SPF, DKIM selector and _dmarc records (COURRIER_DNS_SERVER, else the
    /// system resolver); stores the verdict on the domain. Exit code 0 whenever the check ran:
    /// read `dns_ok` for the verdict.
    DnsCheck { name: String },
}

#[derive(Debug, Subcommand)]
pub enum ListCommand {
    /// Create a list on a domain, owned by an existing account.
    Create {
        #[arg(long)]
        domain: String,
        #[arg(long)]
        list: String,
        #[arg(long)]
        display_name: String,
        #[arg(long)]
        owner: String,
        #[arg(long, value_parser = ["open", "confirm", "moderate", "closed"])]
        subscription_policy: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DigestsCommand {
    /// Build now the digest of every list (or one) with posts since its last digest, whatever its
    /// frequency; the delivery workers send them.
    Run {
        #[arg(long, requires = "list")]
        domain: Option<String>,
        #[arg(long, requires = "domain")]
        list: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MembersCommand {
    /// Import a CSV document (header email,display_name,delivery_mode); rows become active members.
    Import {
        #[arg(long)]
        domain: String,
        #[arg(long)]
        list: String,
        /// The consent covering every row (required).
        #[arg(long)]
        consent_evidence: String,
        /// The CSV file; `-` reads standard input.
        file: PathBuf,
    },
    /// Export the members as CSV (email,display_name,delivery_mode,status,subscribed_at).
    Export {
        #[arg(long)]
        domain: String,
        #[arg(long)]
        list: String,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        delivery_mode: Option<String>,
        /// Write here instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

fn names(domain: &str, list: &str) -> Result<(DomainName, ListName), CliError> {
    Ok((DomainName::parse(domain)?, ListName::parse(list)?))
}

pub fn domain(config: &Config, cmd: DomainCommand, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.mailing;
    let (name, dkim_selector) = match cmd {
        DomainCommand::Create { name, dkim_selector } => (name, dkim_selector),
        DomainCommand::DnsCheck { name } => return dns_check(&app, &name, json),
    };
    let req =
        domains::NewDomainRequest { name: DomainName::parse(&name)?, dkim_selector, default_subscription_policy: None };
    let d = domains::create(&app, &Principal::operator(), &RequestCtx::cli(), req)?;
    if json {
        println!("{}", courrier_core::mailing::views::domain(&d));
    } else {
        println!("domain {} created ({})", d.name, d.status.as_str());
    }
    Ok(())
}

fn dns_check(app: &courrier_core::mailing::Service, name: &str, json: bool) -> Result<(), CliError> {
    let name = DomainName::parse(name)?;
    let check = courrier_core::mailing::dns_check::run(app, &Principal::operator(), &RequestCtx::cli(), &name)?;
    if json {
        println!("{}", courrier_core::mailing::views::dns_check(&check));
        return Ok(());
    }
    for v in &check.records {
        let verdict = match (v.checked, v.found, &v.error) {
            (false, _, _) => "not checked".to_owned(),
            (true, _, Some(e)) => format!("ERROR ({e})"),
            (true, true, None) => "ok".to_owned(),
            (true, false, None) => "MISSING".to_owned(),
        };
        println!("{:<6} {:<40} {verdict}", v.kind.as_str(), v.name);
        for value in &v.values {
            println!("       found:    {value}");
        }
        if v.checked && !v.found {
            println!("       expected: {}", v.expected);
        }
    }
    let ok = check.domain.dns_ok == Some(true);
    println!("dns_ok: {ok}");
    Ok(())
}

pub fn list(config: &Config, cmd: ListCommand, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.mailing;
    let ListCommand::Create { domain, list, display_name, owner, subscription_policy } = cmd;
    let (d, l) = names(&domain, &list)?;
    let req = lists::NewList {
        name: l,
        display_name,
        owner: EmailAddress::parse(&owner)?,
        kind: None,
        subscription_policy: subscription_policy.as_deref().and_then(SubscriptionPolicy::parse),
    };
    let created = lists::create(&app, &Principal::operator(), &RequestCtx::cli(), &d, req)?;
    if json {
        println!("{}", courrier_core::mailing::views::list_detail(&created));
    } else {
        println!("list {} created", created.address());
    }
    Ok(())
}

pub fn members(config: &Config, cmd: MembersCommand, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.mailing;
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    match cmd {
        MembersCommand::Import { domain, list, consent_evidence, file } => {
            let (d, l) = names(&domain, &list)?;
            let target = import::authorize(&app, &p, &ctx, &d, &l)?;
            let consent = ImportConsent::new(Some(&consent_evidence), None)?;
            let (reader, size): (Box<dyn std::io::Read>, Option<u64>) = if file.as_os_str() == "-" {
                (Box::new(std::io::stdin().lock()), None)
            } else {
                let f = std::fs::File::open(&file)
                    .map_err(|e| CliError::File { path: file.display().to_string(), source: e })?;
                let size = f.metadata().ok().map(|m| m.len());
                (Box::new(f), size)
            };
            // A progress bar on a terminal only (indicatif draws nothing when stderr is not one).
            let bar = match size {
                Some(n) => indicatif::ProgressBar::new(n),
                None => indicatif::ProgressBar::new_spinner(),
            };
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let report =
                import::import(&app, &p, &ctx, &target, &consent, std::io::BufReader::new(bar.wrap_read(reader)));
            bar.finish_and_clear();
            let report = report?;
            if json {
                println!("{}", courrier_core::mailing::views::import_report(&report));
            } else {
                println!(
                    "{} rows: {} added, {} skipped (already on the list), {} errors, {} delivery modes set to regular",
                    report.total, report.added, report.skipped, report.errors, report.mode_coerced
                );
                for s in &report.error_samples {
                    println!("  row {}: {}", s.row, s.reason);
                }
            }
            Ok(())
        }
        MembersCommand::Export { domain, list, status, delivery_mode, output } => {
            let (d, l) = names(&domain, &list)?;
            let filter = MemberFilter::parse(status.as_deref(), delivery_mode.as_deref(), None, None)?;
            let mut exp = export::open(&app, &p, &ctx, &d, &l, filter)?;
            let mut out: Box<dyn Write> = match &output {
                Some(path) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(path)
                        .map_err(|e| CliError::File { path: path.display().to_string(), source: e })?,
                )),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            let write = |out: &mut Box<dyn Write>, s: &str| out.write_all(s.as_bytes()).map_err(CliError::Output);
            write(&mut out, export::HEADER)?;
            while let Some(chunk) = exp.next_chunk(&app)? {
                write(&mut out, &chunk)?;
            }
            out.flush().map_err(CliError::Output)
        }
    }
}

pub fn digests(config: &Config, cmd: DigestsCommand, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.mailing;
    let DigestsCommand::Run { domain, list } = cmd;
    let only = match (domain, list) {
        (Some(d), Some(l)) => {
            let (d, l) = names(&d, &l)?;
            Some(lists::get(&app, &Principal::operator(), &RequestCtx::cli(), &d, &l)?.id)
        }
        _ => None,
    };
    let built = courrier_core::mailing::digests::run(&app, only, true)?;
    for b in &built {
        if json {
            println!(
                "{}",
                serde_json::json!({ "list": b.list_address, "send_id": b.send_id.get(), "posts": b.posts, "recipients": b.recipients })
            );
        } else {
            println!(
                "{}: digest of {} posts queued for {} members (send {})",
                b.list_address, b.posts, b.recipients, b.send_id
            );
        }
    }
    if built.is_empty() && !json {
        println!("no list has posts waiting for a digest");
    }
    Ok(())
}
