//! `courrier user`, `courrier role`, `courrier create-api-key`: the operator's administration,
//! through the same core calls as the API, as the installation's own authority.

use crate::config::Config;
use crate::error::CliError;
use crate::server::wire;
use clap::{Args, Subcommand};
use courrier_core::access::model::{Profile, Role, RoleKind};
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Principal, keys, roles, users};
use courrier_core::kernel::{DomainName, EmailAddress, ListName};
use std::io::Read;

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create an account; without --password-stdin, an invitation mail with a set-password link.
    Create {
        #[arg(long)]
        email: String,
        #[arg(long)]
        name: Option<String>,
        /// Read the password from standard input (one line).
        #[arg(long)]
        password_stdin: bool,
        /// Also grant the site_admin role.
        #[arg(long)]
        site_admin: bool,
    },
    /// Delete an account with its roles, keys and sessions, and its OCR documents (files
    /// included) and usage.
    Delete {
        #[arg(long)]
        email: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum RoleCommand {
    /// Grant a role to an account.
    Grant {
        #[arg(long)]
        email: String,
        #[arg(long, value_parser = ["site_admin", "domain_admin", "owner", "moderator"])]
        role: String,
        #[arg(long)]
        domain: Option<String>,
        #[arg(long)]
        list: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct CreateApiKey {
    #[arg(long)]
    email: String,
    #[arg(long, value_parser = ["user", "domain", "list"])]
    scope: String,
    #[arg(long)]
    domain: Option<String>,
    #[arg(long)]
    list: Option<String>,
    /// Comma-separated subset of read, members:write, send, moderate, manage.
    #[arg(long, value_delimiter = ',', required = true)]
    perms: Vec<String>,
    #[arg(long)]
    name: String,
    /// Last day of validity, YYYY-MM-DD (the key stops at its midnight UTC).
    #[arg(long)]
    expires: Option<String>,
    #[arg(long)]
    rate_limit_per_min: Option<u32>,
}

fn print(json: bool, doc: &serde_json::Value, text: &str) {
    if json {
        println!("{doc}");
    } else {
        println!("{text}");
    }
}

pub fn user(config: &Config, cmd: UserCommand, json: bool) -> Result<(), CliError> {
    let (email, name, password_stdin, site_admin) = match cmd {
        UserCommand::Create { email, name, password_stdin, site_admin } => (email, name, password_stdin, site_admin),
        UserCommand::Delete { email } => return delete_user(config, &email, json),
    };
    let email = EmailAddress::parse(email.trim())?;
    let password = if password_stdin {
        let mut line = String::new();
        std::io::stdin().read_to_string(&mut line).map_err(CliError::Stdin)?;
        Some(line.trim_end_matches(['\r', '\n']).to_owned())
    } else {
        None
    };
    let app = wire(config, crate::build_info())?.access;
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let profile = Profile { name: name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()), ..Profile::default() };
    let (user, invitation) = users::create(&app, &p, &ctx, users::NewUser { email, profile, password })?;
    if site_admin {
        roles::grant(&app, &p, &ctx, user.id, Role::SiteAdmin)?;
    }
    let mut doc = courrier_core::access::views::user(&user);
    doc["invitation"] = invitation.as_str().into();
    let mut text = format!("created user {} ({})", user.id, user.email);
    match &invitation {
        users::Invitation::Sent => text.push_str("; invitation mailed"),
        users::Invitation::Failed(why) => {
            eprintln!("courrier: warning: the invitation mail failed: {why}");
            text.push_str("; invitation NOT mailed");
        }
        users::Invitation::NotNeeded => {}
    }
    if site_admin {
        text.push_str("; site_admin");
    }
    print(json, &doc, &text);
    Ok(())
}

fn delete_user(config: &Config, email: &str, json: bool) -> Result<(), CliError> {
    let email = EmailAddress::parse(email.trim())?;
    let app = wire(config, crate::build_info())?.access;
    let (user, _) = users::by_email(&app, &email)?;
    users::delete(&app, &Principal::operator(), &RequestCtx::cli(), user.id)?;
    print(
        json,
        &serde_json::json!({ "id": user.id.get(), "email": user.email.to_string(), "deleted": true }),
        &format!("deleted user {} ({})", user.id, user.email),
    );
    Ok(())
}

pub fn role(config: &Config, cmd: RoleCommand, json: bool) -> Result<(), CliError> {
    let RoleCommand::Grant { email, role, domain, list } = cmd;
    let email = EmailAddress::parse(email.trim())?;
    let kind = RoleKind::parse(&role).expect("clap restricts the values");
    let domain = domain.as_deref().map(DomainName::parse).transpose()?;
    let list = list.as_deref().map(ListName::parse).transpose()?;
    let role = Role::new(kind, domain, list)
        .map_err(|e| CliError::Input { code: courrier_core::kernel::Code::ValidationFailed, message: e.to_string() })?;
    let app = wire(config, crate::build_info())?.access;
    let (user, _) = users::by_email(&app, &email)?;
    let grant = roles::grant(&app, &Principal::operator(), &RequestCtx::cli(), user.id, role)?;
    print(
        json,
        &courrier_core::access::views::role_grant(&grant),
        &format!("granted {} to {}", kind.as_str(), user.email),
    );
    Ok(())
}

pub fn create_api_key(config: &Config, cmd: CreateApiKey, json: bool) -> Result<(), CliError> {
    let email = EmailAddress::parse(cmd.email.trim())?;
    // A bare date means the end of that day, UTC.
    let expires = cmd.expires.map(|d| if d.len() == 10 { format!("{d}T23:59:59Z") } else { d });
    let perms: Vec<String> = cmd.perms.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();
    let new = keys::NewKey::parse(
        cmd.name,
        &cmd.scope,
        cmd.domain.as_deref(),
        cmd.list.as_deref(),
        &perms,
        expires.as_deref(),
        cmd.rate_limit_per_min,
    )?;
    let app = wire(config, crate::build_info())?.access;
    let (user, grants) = users::by_email(&app, &email)?;
    let created =
        keys::create_for(&app, &Principal::operator(), &RequestCtx::cli(), &user, &keys::roles_of(&grants), new)?;
    let doc = serde_json::json!({ "id": created.key.id.get(), "secret": created.secret, "prefix": created.key.prefix });
    print(json, &doc, &created.secret);
    Ok(())
}
