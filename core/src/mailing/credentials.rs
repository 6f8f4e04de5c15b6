//! A list's mail-account credentials (`mailing-service.md`, "Mail-account credentials"): an
//! `ingest` IMAP mailbox the list's mail is fetched from, a `submission` SMTP account its copies
//! go out through. The password is sealed with the operator's keyring (`COURRIER_KEYRING`; without
//! one, writes answer 503 `credential_keyring_missing`) bound to the list and kind, and never
//! leaves: no view, log line or audit entry holds it. The host goes through the egress guard when
//! stored and at every connection. A test opens a real session (TLS, authentication, and for
//! IMAP the folder) and records its outcome on the credential.

use super::accounts::{AccountError, Endpoint, Login, Security};
use super::model::MailingList;
use super::{MailingError, Service, lists};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::egress::{Egress, parse_host};
use crate::kernel::keyring::Keyring;
use crate::kernel::{DomainName, ListName, MailTransport, Timestamp};
use crate::storage::{in_read, in_write};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

pub use super::model::{CredentialKind, MailCredential};

/// A PUT: every field but the password, which an update may omit to keep the stored one.
#[derive(Debug, Clone)]
pub struct CredentialRequest {
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub username: String,
    pub password: Option<String>,
    pub folder: Option<String>,
}

pub const DEFAULT_FOLDER: &str = "INBOX";
pub const MAX_USERNAME: usize = 320;
pub const MAX_PASSWORD: usize = 1024;
pub const MAX_FOLDER: usize = 200;
/// Provider messages kept on the credential and echoed are cut to this many characters.
pub const MAX_ERROR: usize = 500;

/// The credentials' wiring: the keyring (absent when `COURRIER_KEYRING` is not set), the
/// sessions port, and the submission transports already opened (one per list, replaced when its
/// credential changes).
pub struct Credentials {
    pub keyring: Option<Keyring>,
    pub accounts: Arc<dyn super::accounts::MailAccounts>,
    transports: Mutex<HashMap<i64, OpenTransport>>,
}

/// A list's submission transport and the `updated_at` of the credential it was made from.
type OpenTransport = (Timestamp, Arc<dyn MailTransport>);

impl Credentials {
    pub fn new(keyring: Option<Keyring>, accounts: Arc<dyn super::accounts::MailAccounts>) -> Self {
        Self { keyring, accounts, transports: Mutex::new(HashMap::new()) }
    }
}

fn keyring(app: &Service) -> Result<&Keyring, MailingError> {
    app.credentials.keyring.as_ref().ok_or(MailingError::KeyringMissing)
}

fn target(list: &MailingList, kind: CredentialKind) -> String {
    format!("credential:{}:{}", kind.as_str(), list.address())
}

fn clean_error(message: &str) -> String {
    let one_line: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    one_line.trim().chars().take(MAX_ERROR).collect()
}

/// The list's credentials (never a password).
pub fn list(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
) -> Result<Vec<MailCredential>, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Read, domain, name, "credential.list")?;
    Ok(in_read(&*app.store, |tx| tx.credentials_of(list.id))?)
}

fn check_field(field: &str, value: &str, max: usize) -> Result<(), MailingError> {
    if value.is_empty() {
        return Err(MailingError::Invalid(format!("{field} must not be empty")));
    }
    if value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(MailingError::Invalid(format!(
            "{field} must be at most {max} characters without control characters"
        )));
    }
    Ok(())
}

/// Stores (creates or replaces) the list's account of `kind`.
pub fn put(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    kind: CredentialKind,
    req: CredentialRequest,
) -> Result<MailCredential, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Manage, domain, name, "credential.put")?;
    let keyring = keyring(app)?;
    if req.port == 0 {
        return Err(MailingError::Invalid("port must be a number from 1 to 65535".into()));
    }
    let host = parse_host(req.host.trim()).map_err(|e| MailingError::Invalid(format!("host: {e}")))?;
    check_field("username", &req.username, MAX_USERNAME)?;
    if let Some(pw) = &req.password {
        if pw.is_empty() {
            return Err(MailingError::Invalid("password must not be empty (omit it to keep the stored one)".into()));
        }
        if pw.chars().count() > MAX_PASSWORD || pw.contains(['\r', '\n', '\0']) {
            return Err(MailingError::Invalid(format!(
                "password must be at most {MAX_PASSWORD} characters without line breaks or NUL"
            )));
        }
    }
    let folder = match (kind, req.folder) {
        (CredentialKind::Submission, Some(_)) => {
            return Err(MailingError::Invalid("folder applies to ingest accounts only".into()));
        }
        (CredentialKind::Submission, None) => None,
        (CredentialKind::Ingest, f) => {
            let f = f.unwrap_or_else(|| DEFAULT_FOLDER.to_owned());
            check_field("folder", &f, MAX_FOLDER)?;
            Some(f)
        }
    };
    // Rule 5: a host that does not resolve to public addresses only is refused (422).
    app.egress.resolve_host(&host, req.port)?;
    let now = app.clock.now();
    let stored = in_write(&*app.store, |tx| {
        let existing = tx.credential(list.id, kind)?;
        let bound = Keyring::binding(list.id.get(), kind.as_str());
        let password_sealed = match (&req.password, &existing) {
            (Some(pw), _) => keyring.seal(pw.as_bytes(), &bound),
            (None, Some(old)) => old.password_sealed.clone(),
            (None, None) => {
                return Err(MailingError::Invalid("password is required for a new account".into()));
            }
        };
        let cred = MailCredential {
            list_id: list.id,
            kind,
            host: host.to_string(),
            port: req.port,
            security: req.security,
            username: req.username.clone(),
            password_sealed,
            folder,
            // A changed account has not been tried yet.
            last_ok_at: None,
            last_error: None,
            last_error_at: None,
            created_at: existing.as_ref().map_or(now, |e| e.created_at),
            updated_at: now,
        };
        tx.upsert_credential(&cred)?;
        audit_done(tx, p, ctx, now, "credential.put", &target(&list, kind))?;
        Ok(cred)
    })?;
    tracing::info!(list = %list.address(), kind = kind.as_str(), host = %stored.host, "mail-account credential stored");
    Ok(stored)
}

pub fn delete(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    kind: CredentialKind,
) -> Result<(), MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Manage, domain, name, "credential.delete")?;
    keyring(app)?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.delete_credential(list.id, kind)? {
            return Err(MailingError::NotFound("credential"));
        }
        audit_done(tx, p, ctx, now, "credential.delete", &target(&list, kind))?;
        Ok(())
    })?;
    tracing::info!(list = %list.address(), kind = kind.as_str(), "mail-account credential deleted");
    Ok(())
}

/// The password, opened with the keyring.
pub(crate) fn password_of(keyring: &Keyring, cred: &MailCredential) -> Result<String, MailingError> {
    let bound = Keyring::binding(cred.list_id.get(), cred.kind.as_str());
    let plain =
        keyring.open(&cred.password_sealed, &bound).map_err(|e| MailingError::KeyringCannotOpen(e.to_string()))?;
    String::from_utf8(plain).map_err(|_| MailingError::KeyringCannotOpen("the password is not UTF-8".into()))
}

/// The endpoint of a stored credential, its address given by the egress guard at each connection.
pub(crate) fn endpoint(egress: &Egress, cred: &MailCredential) -> Result<Endpoint, MailingError> {
    let host = parse_host(&cred.host).map_err(|e| MailingError::Invalid(format!("host: {e}")))?;
    let guard = Egress { dns: Arc::clone(&egress.dns), https: Arc::clone(&egress.https), allow: egress.allow.clone() };
    let (h, port) = (host.clone(), cred.port);
    Ok(Endpoint {
        host,
        port,
        security: cred.security,
        connect_to: Arc::new(move || guard.resolve_host(&h, port).map_err(|e| e.to_string())),
    })
}

/// Opens a real session with the account (nothing sent, nothing fetched) and records the
/// outcome: `last_ok_at`, or `last_error` and `last_error_at`. A refusal is 422 echoing the
/// provider's words; a host the guard refuses is 422 `url_refused`.
pub fn test(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    kind: CredentialKind,
) -> Result<(), MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Manage, domain, name, "credential.test")?;
    let keyring = keyring(app)?;
    let cred = in_read(&*app.store, |tx| tx.credential(list.id, kind))?.ok_or(MailingError::NotFound("credential"))?;
    let login = Login { username: cred.username.clone(), password: password_of(keyring, &cred)? };
    let outcome = check(app, &cred, &login);
    let now = app.clock.now();
    let error = outcome.as_ref().err().map(|e| clean_error(&e.to_string()));
    in_write(&*app.store, |tx| {
        tx.record_credential_outcome(list.id, kind, error.as_deref(), now)?;
        audit_done(tx, p, ctx, now, "credential.test", &target(&list, kind))?;
        Ok::<_, MailingError>(())
    })?;
    match &error {
        None => tracing::info!(list = %list.address(), kind = kind.as_str(), "mail-account test passed"),
        Some(e) => tracing::info!(list = %list.address(), kind = kind.as_str(), error = %e, "mail-account test failed"),
    }
    outcome
}

fn check(app: &Service, cred: &MailCredential, login: &Login) -> Result<(), MailingError> {
    let host = parse_host(&cred.host).map_err(|e| MailingError::Invalid(format!("host: {e}")))?;
    // Resolved and checked once, and that address is the one connected to.
    let addr = app.egress.resolve_host(&host, cred.port)?;
    let at = Endpoint { host, port: cred.port, security: cred.security, connect_to: Arc::new(move || Ok(addr)) };
    let accounts = &app.credentials.accounts;
    let result = match cred.kind {
        CredentialKind::Ingest => accounts.check_imap(&at, login, cred.folder.as_deref().unwrap_or(DEFAULT_FOLDER)),
        CredentialKind::Submission => accounts.check_smtp(&at, login),
    };
    result.map_err(|e| match e {
        AccountError::Refused(m) => MailingError::AccountRefused(clean_error(&m)),
        AccountError::Failed(m) => MailingError::AccountUnreachable(clean_error(&m)),
    })
}

/// The mail transport of the list's submission account: kept open across rounds, made anew when
/// the credential changed. An error when the password cannot be opened (no keyring, or a key
/// missing from it): the copy waits rather than leaving through another route.
pub(crate) fn submission_transport(app: &Service, cred: &MailCredential) -> Result<Arc<dyn MailTransport>, String> {
    let key = cred.list_id.get();
    {
        let cache = app.credentials.transports.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, t)) = cache.get(&key)
            && *at == cred.updated_at
        {
            return Ok(Arc::clone(t));
        }
    }
    let keyring = app.credentials.keyring.as_ref().ok_or_else(|| {
        "the list has a submission account but COURRIER_KEYRING is not set: its copies wait".to_owned()
    })?;
    let login =
        Login { username: cred.username.clone(), password: password_of(keyring, cred).map_err(|e| e.to_string())? };
    let at = endpoint(&app.egress, cred).map_err(|e| e.to_string())?;
    let transport = app.credentials.accounts.submission(at, login);
    app.credentials
        .transports
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, (cred.updated_at, Arc::clone(&transport)));
    Ok(transport)
}
