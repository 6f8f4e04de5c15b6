//! `courrier maintenance on|off`, `courrier ocr failed` and `courrier ocr plan`: the operator's
//! OCR commands.

use crate::config::Config;
use crate::error::CliError;
use crate::server::wire;
use clap::{Subcommand, ValueEnum};
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::kernel::Page;
use courrier_core::ocr::{documents, maintenance, usage};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Debug, Subcommand)]
pub enum OcrCommand {
    /// Documents kept with action=ocrFailed for staff analysis, newest first.
    Failed {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// Sets one user's monthly page quota (0: no limit), or with --default puts the user back
    /// on the default plan (COURRIER_OCR_PAGES_PER_MONTH).
    Plan {
        #[arg(long)]
        email: String,
        #[arg(long, conflicts_with = "default", required_unless_present = "default")]
        pages_per_month: Option<u32>,
        #[arg(long)]
        default: bool,
    },
}

pub fn maintenance(config: &Config, state: Switch, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.ocr;
    let now = maintenance::set(&app, &Principal::operator(), &RequestCtx::cli(), matches!(state, Switch::On))?;
    let (on, since) = match now {
        maintenance::Maintenance::On { since } => (true, Some(since.to_rfc3339())),
        maintenance::Maintenance::Off => (false, None),
    };
    if json {
        println!("{}", serde_json::json!({ "maintenance": on, "since": since }));
    } else if let Some(since) = since {
        println!("maintenance on since {since}: the OCR routes answer 503");
    } else {
        println!("maintenance off");
    }
    Ok(())
}

pub fn ocr(config: &Config, cmd: OcrCommand, json: bool) -> Result<(), CliError> {
    match cmd {
        OcrCommand::Failed { limit, offset } => failed(config, limit, offset, json),
        OcrCommand::Plan { email, pages_per_month, default: _ } => plan(config, &email, pages_per_month, json),
    }
}

fn plan(config: &Config, email: &str, pages: Option<u32>, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.ocr;
    let plan = usage::set_plan(&app, &Principal::operator(), &RequestCtx::cli(), email, pages)?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "email": email, "plan": plan.name(), "pages_per_month": plan.pages_per_month })
        );
    } else if plan.pages_per_month == 0 {
        println!("{email}: plan {}, no page limit", plan.name());
    } else {
        println!("{email}: plan {}, {} pages per month", plan.name(), plan.pages_per_month);
    }
    Ok(())
}

fn failed(config: &Config, limit: u32, offset: u64, json: bool) -> Result<(), CliError> {
    let page = Page::parse(Some(&limit.to_string()), Some(&offset.to_string())).map_err(|e| CliError::Input {
        code: courrier_core::kernel::Code::InvalidPagination,
        message: e.to_string(),
    })?;
    let app = wire(config, crate::build_info())?.ocr;
    let found = documents::failed(&app, page)?;
    // The stored file, when documents are files; on PostgreSQL without COURRIER_DOCUMENTS_DIR they
    // are rows of `ocr_blobs`, named by the same SHA-256.
    let path = |d: &courrier_core::ocr::model::Document| {
        config
            .documents_in_files()
            .then(|| config.documents_dir().join(&d.blob.as_str()[..2]).join(&d.blob.as_str()[2..]))
    };
    if json {
        let items: Vec<serde_json::Value> = found
            .items
            .iter()
            .map(|d| {
                serde_json::json!({
                    "ocrID": d.ocr_id.as_str(),
                    "user_id": d.owner.get(),
                    "kind": d.kind.as_str(),
                    "size_bytes": d.size_bytes,
                    "sha256": d.blob.as_str(),
                    "path": path(d),
                    "created_at": d.created_at.to_rfc3339(),
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "items": items, "total": found.total }));
    } else {
        for d in &found.items {
            let path = path(d).map_or_else(|| "(in the database)".to_owned(), |p| p.display().to_string());
            println!(
                "{}  {}  user {}  {} {} bytes  {}",
                d.created_at.to_rfc3339(),
                d.ocr_id.as_str(),
                d.owner.get(),
                d.kind.as_str(),
                d.size_bytes,
                path
            );
        }
        println!("{} failed document(s)", found.total);
    }
    Ok(())
}
