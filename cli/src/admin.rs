//! `courrier user`, `role`, `create-api-key`, `apikey` and `audit`: the accounts and access of the
//! installation, through the same core calls as the API, as the operator (a site administrator;
//! audited with request id `cli` and no user).

use crate::config::Config;
use crate::error::CliError;
use crate::output::{self, PageArgs, cell, collection, emit, invalid, listing};
use crate::server::wire;
use clap::{Args, Subcommand};
use courrier_core::access::model::{KeyId, Profile, Role, RoleGrant, RoleKind, User, UserStatus};
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Principal, Service, keys, roles, users, views};
use courrier_core::kernel::{AuditFilter, DomainName, EmailAddress, ListName, Timestamp};
use serde_json::json;

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
    /// Create an account and mail it an invitation: a single-use set-password link (72 hours).
    Invite {
        #[arg(long)]
        email: String,
        #[arg(long)]
        name: Option<String>,
        /// Also grant the site_admin role.
        #[arg(long)]
        site_admin: bool,
    },
    /// The accounts, by id.
    List {
        #[command(flatten)]
        page: PageArgs,
    },
    /// One account and its roles.
    Show {
        #[arg(long)]
        email: String,
    },
    /// Disable an account: it can no longer sign in, and its API keys stop working.
    Disable {
        #[arg(long)]
        email: String,
    },
    /// Enable a disabled account again.
    Enable {
        #[arg(long)]
        email: String,
    },
    /// Set an account's password, read from standard input.
    Password {
        #[arg(long)]
        email: String,
    },
    /// Delete an account with its roles, keys and sessions, and its OCR documents (files
    /// included) and usage.
    Delete {
        #[arg(long)]
        email: String,
    },
}

/// A role and where it applies: `--role R [--domain D] [--list L]`.
#[derive(Debug, Args)]
pub struct RoleArgs {
    #[arg(long)]
    email: String,
    /// site_admin, domain_admin (with --domain), owner or moderator (with --domain and --list).
    #[arg(long)]
    role: String,
    #[arg(long)]
    domain: Option<String>,
    #[arg(long)]
    list: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum RoleCommand {
    /// Grant a role to an account.
    Grant(RoleArgs),
    /// Revoke a role from an account (the last active site administrator keeps the role).
    Revoke(RoleArgs),
    /// The roles of an account.
    List {
        #[arg(long)]
        email: String,
    },
}

#[derive(Debug, Args)]
pub struct CreateApiKey {
    #[arg(long)]
    email: String,
    /// user, domain (with --domain) or list (with --domain and --list).
    #[arg(long)]
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

#[derive(Debug, Subcommand)]
pub enum ApiKeyCommand {
    /// Every API key of the installation, newest first (never their secrets).
    List {
        #[command(flatten)]
        page: PageArgs,
    },
    /// Revoke an API key by id (idempotent).
    Revoke {
        #[arg(value_name = "ID")]
        id: String,
    },
}

/// `courrier audit`: the audit log, newest first, every filter applied.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this action, e.g. member.add, role.grant.
    #[arg(long)]
    action: Option<String>,
    /// Only the actions of this account (by address).
    #[arg(long, value_name = "EMAIL", conflicts_with = "actor_user_id")]
    actor: Option<String>,
    /// Only the actions of this account (by id).
    #[arg(long, value_name = "ID")]
    actor_user_id: Option<String>,
    /// From this time on (RFC 3339, or a date YYYY-MM-DD).
    #[arg(long)]
    since: Option<String>,
    /// Up to this time (RFC 3339, or a date YYYY-MM-DD).
    #[arg(long)]
    until: Option<String>,
    #[command(flatten)]
    page: PageArgs,
}

fn operator() -> (Principal, RequestCtx) {
    (Principal::operator(), RequestCtx::cli())
}

fn email(raw: &str) -> Result<EmailAddress, CliError> {
    Ok(EmailAddress::parse(raw.trim())?)
}

fn account(app: &Service, raw: &str) -> Result<(User, Vec<RoleGrant>), CliError> {
    Ok(users::by_email(app, &email(raw)?)?)
}

fn role_label(r: &Role) -> String {
    match (r.domain(), r.list()) {
        (Some(d), Some(l)) => format!("{} of {l}@{d}", r.kind().as_str()),
        (Some(d), None) => format!("{} of {d}", r.kind().as_str()),
        _ => r.kind().as_str().to_owned(),
    }
}

fn user_text(u: &User, grants: &[RoleGrant]) -> String {
    let roles: Vec<String> = grants.iter().map(|g| role_label(&g.role)).collect();
    let mut lines = vec![
        format!("id        {}", u.id),
        format!("email     {}", u.email),
        format!("name      {}", cell(u.profile.name.as_deref())),
        format!("status    {}", u.status.as_str()),
        format!("password  {}", if u.has_password { "set" } else { "not set" }),
        format!("created   {}", u.created_at.to_rfc3339()),
    ];
    lines.push(format!("roles     {}", if roles.is_empty() { "none".to_owned() } else { roles.join(", ") }));
    lines.join("\n")
}

pub fn user(config: &Config, cmd: UserCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        UserCommand::Create { email: address, name, password_stdin, site_admin } => {
            let password = if password_stdin { Some(output::secret_from_stdin("password")?) } else { None };
            create(config, &address, name, password, site_admin, json)
        }
        UserCommand::Invite { email: address, name, site_admin } => {
            create(config, &address, name, None, site_admin, json)
        }
        UserCommand::List { page } => {
            let page = page.page()?;
            let app = wire(config, crate::build_info())?.access;
            let found = users::list(&app, &p, page)?;
            let items = found.items.iter().map(views::user).collect();
            let rows = found
                .items
                .iter()
                .map(|u| {
                    vec![
                        u.id.to_string(),
                        u.email.to_string(),
                        cell(u.profile.name.as_deref()),
                        u.status.as_str().to_owned(),
                        u.created_at.to_rfc3339(),
                    ]
                })
                .collect();
            let text = || listing(&["ID", "EMAIL", "NAME", "STATUS", "CREATED"], rows, found.total, page);
            emit(json, &collection(items, found.total, page), text);
            Ok(())
        }
        UserCommand::Show { email: address } => {
            let app = wire(config, crate::build_info())?.access;
            let (found, _) = account(&app, &address)?;
            let (user, grants) = users::get(&app, &p, &ctx, found.id)?;
            let mut doc = views::user(&user);
            doc["roles"] = grants.iter().map(views::role_grant).collect();
            emit(json, &doc, || user_text(&user, &grants));
            Ok(())
        }
        UserCommand::Delete { email: address } => {
            let app = wire(config, crate::build_info())?.access;
            let (found, _) = account(&app, &address)?;
            users::delete(&app, &p, &ctx, found.id)?;
            let doc = json!({ "id": found.id.get(), "email": found.email.to_string(), "deleted": true });
            emit(json, &doc, || format!("deleted user {} ({})", found.id, found.email));
            Ok(())
        }
        UserCommand::Disable { email: address } => set_status(config, &address, UserStatus::Disabled, json),
        UserCommand::Enable { email: address } => set_status(config, &address, UserStatus::Active, json),
        UserCommand::Password { email: address } => {
            let password = output::secret_from_stdin("password")?;
            let app = wire(config, crate::build_info())?.access;
            let (found, _) = account(&app, &address)?;
            users::set_password(&app, &p, &ctx, found.id, &password)?;
            emit(json, &json!({ "id": found.id.get(), "email": found.email.to_string(), "password": "set" }), || {
                format!("password of {} set", found.email)
            });
            Ok(())
        }
    }
}

fn create(
    config: &Config,
    address: &str,
    name: Option<String>,
    password: Option<String>,
    site_admin: bool,
    json: bool,
) -> Result<(), CliError> {
    let email = email(address)?;
    let app = wire(config, crate::build_info())?.access;
    let (p, ctx) = operator();
    let profile = Profile { name: name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()), ..Profile::default() };
    let (user, invitation) = users::create(&app, &p, &ctx, users::NewUser { email, profile, password })?;
    if site_admin {
        roles::grant(&app, &p, &ctx, user.id, Role::SiteAdmin)?;
    }
    let mut doc = views::user(&user);
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
    emit(json, &doc, || text);
    Ok(())
}

fn set_status(config: &Config, address: &str, status: UserStatus, json: bool) -> Result<(), CliError> {
    let app = wire(config, crate::build_info())?.access;
    let (found, _) = account(&app, address)?;
    let (p, ctx) = operator();
    let patch = users::UserPatch { status: Some(status), ..Default::default() };
    let user = users::update(&app, &p, &ctx, found.id, patch)?;
    emit(json, &views::user(&user), || format!("user {} ({}) is {}", user.id, user.email, user.status.as_str()));
    Ok(())
}

fn parse_role(args: &RoleArgs) -> Result<Role, CliError> {
    let kind = output::wire("role", Some(&args.role), RoleKind::parse, &RoleKind::ALL.map(RoleKind::as_str))?
        .ok_or_else(|| invalid("a role is required"))?;
    let domain = args.domain.as_deref().map(DomainName::parse).transpose()?;
    let list = args.list.as_deref().map(ListName::parse).transpose()?;
    Role::new(kind, domain, list).map_err(|e| invalid(e.to_string()))
}

pub fn role(config: &Config, cmd: RoleCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        RoleCommand::Grant(args) => {
            let role = parse_role(&args)?;
            let app = wire(config, crate::build_info())?.access;
            let (user, _) = account(&app, &args.email)?;
            let grant = roles::grant(&app, &p, &ctx, user.id, role)?;
            emit(json, &views::role_grant(&grant), || format!("granted {} to {}", role_label(&grant.role), user.email));
        }
        RoleCommand::Revoke(args) => {
            let role = parse_role(&args)?;
            let app = wire(config, crate::build_info())?.access;
            let (user, _) = account(&app, &args.email)?;
            roles::revoke(&app, &p, &ctx, user.id, role.clone())?;
            let mut doc = views::role(&role);
            doc["user_id"] = json!(user.id.get());
            doc["revoked"] = json!(true);
            emit(json, &doc, || format!("revoked {} from {}", role_label(&role), user.email));
        }
        RoleCommand::List { email: address } => {
            let app = wire(config, crate::build_info())?.access;
            let (user, _) = account(&app, &address)?;
            let grants = roles::list(&app, &p, &ctx, user.id)?;
            let doc =
                json!({ "user_id": user.id.get(), "items": grants.iter().map(views::role_grant).collect::<Vec<_>>() });
            let rows = grants
                .iter()
                .map(|g| {
                    vec![
                        g.role.kind().as_str().to_owned(),
                        cell(g.role.domain().map(DomainName::as_str)),
                        cell(g.role.list().map(ListName::as_str)),
                        g.granted_at.to_rfc3339(),
                    ]
                })
                .collect::<Vec<_>>();
            emit(json, &doc, || {
                if rows.is_empty() {
                    format!("{} holds no role", user.email)
                } else {
                    output::table(&["ROLE", "DOMAIN", "LIST", "GRANTED"], rows)
                }
            });
        }
    }
    Ok(())
}

pub fn create_api_key(config: &Config, cmd: CreateApiKey, json: bool) -> Result<(), CliError> {
    let email = email(&cmd.email)?;
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
    let (p, ctx) = operator();
    let created = keys::create_for(&app, &p, &ctx, &user, &keys::roles_of(&grants), new)?;
    let doc = json!({ "id": created.key.id.get(), "secret": created.secret, "prefix": created.key.prefix });
    emit(json, &doc, || created.secret.clone());
    Ok(())
}

pub fn apikey(config: &Config, cmd: ApiKeyCommand, json: bool) -> Result<(), CliError> {
    let (p, ctx) = operator();
    match cmd {
        ApiKeyCommand::List { page } => {
            let page = page.page()?;
            let app = wire(config, crate::build_info())?.access;
            let found = keys::list(&app, &p, page)?;
            let items = found.items.iter().map(views::api_key).collect();
            let rows = found
                .items
                .iter()
                .map(|k| {
                    let perms: Vec<&str> = k.perms.iter().map(|p| p.as_str()).collect();
                    let scope = match &k.scope {
                        courrier_core::access::model::KeyScope::User => "user".to_owned(),
                        courrier_core::access::model::KeyScope::Domain(d) => format!("domain {d}"),
                        courrier_core::access::model::KeyScope::List(d, l) => format!("list {l}@{d}"),
                    };
                    let state = match (k.revoked_at, k.expires_at) {
                        (Some(at), _) => format!("revoked {}", at.to_rfc3339()),
                        (None, Some(at)) => format!("expires {}", at.to_rfc3339()),
                        (None, None) => "active".to_owned(),
                    };
                    vec![
                        k.id.to_string(),
                        k.user_id.to_string(),
                        k.name.clone(),
                        k.prefix.clone(),
                        scope,
                        perms.join(","),
                        state,
                    ]
                })
                .collect();
            let headers = ["ID", "USER", "NAME", "PREFIX", "SCOPE", "PERMS", "STATE"];
            emit(json, &collection(items, found.total, page), || listing(&headers, rows, found.total, page));
        }
        ApiKeyCommand::Revoke { id } => {
            let id = KeyId::from_stored(output::id("the key id", &id)?);
            let app = wire(config, crate::build_info())?.access;
            keys::revoke(&app, &p, &ctx, id)?;
            emit(json, &json!({ "id": id.get(), "revoked": true }), || format!("API key {id} revoked"));
        }
    }
    Ok(())
}

/// A time filter: RFC 3339, or a bare date meaning its midnight UTC.
fn time(field: &str, raw: Option<&str>) -> Result<Option<Timestamp>, CliError> {
    raw.map(|v| {
        let full = if v.len() == 10 { format!("{v}T00:00:00Z") } else { v.to_owned() };
        Timestamp::parse_rfc3339(&full)
            .ok_or_else(|| invalid(format!("{field} must be an RFC 3339 date or time, got {v:?}")))
    })
    .transpose()
}

pub fn audit(config: &Config, args: AuditArgs, json: bool) -> Result<(), CliError> {
    let page = args.page.page()?;
    let since = time("since", args.since.as_deref())?;
    let until = time("until", args.until.as_deref())?;
    let mut actor_user_id = args.actor_user_id.as_deref().map(|v| output::id("actor-user-id", v)).transpose()?;
    let actor = args.actor.as_deref().map(email).transpose()?;
    let services = wire(config, crate::build_info())?;
    if let Some(address) = &actor {
        actor_user_id = Some(users::by_email(&services.access, address)?.0.id.get());
    }
    let filter = AuditFilter { action: args.action.filter(|a| !a.is_empty()), actor_user_id, since, until };
    let found = courrier_core::system::audit(&services.access, &Principal::operator(), filter, page)?;
    let items = found.items.iter().map(views::audit_entry).collect();
    let rows = found
        .items
        .iter()
        .map(|e| {
            let who = match (e.actor.user_id, e.actor.key_id, e.actor.member_id) {
                (Some(u), Some(k), _) => format!("user {u} key {k}"),
                (Some(u), None, _) => format!("user {u}"),
                (None, _, Some(m)) => format!("member {m}"),
                (None, _, None) if e.request_id == "cli" => "cli".to_owned(),
                (None, _, None) => "-".to_owned(),
            };
            vec![
                e.at.to_rfc3339(),
                who,
                e.action.clone(),
                e.target.clone(),
                e.outcome.as_str().to_owned(),
                e.request_id.clone(),
            ]
        })
        .collect();
    let headers = ["AT", "ACTOR", "ACTION", "TARGET", "OUTCOME", "REQUEST"];
    emit(json, &collection(items, found.total, page), || listing(&headers, rows, found.total, page));
    Ok(())
}
