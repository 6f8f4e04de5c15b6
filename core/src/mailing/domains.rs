//! Sending domains: created `pending_mta` by a site administrator, read and changed by whoever
//! administers them.

use super::Service;
use super::model::{Domain, DomainId, DomainStatus, DomainVisibility, SubscriptionPolicy};
use super::within::Within;
use super::{MailingError, dkim};
use crate::access::model::KeyScope;
use crate::access::principal::{AuditSink, RequestCtx, audit_done, audited_refusal};
use crate::access::{Perm, Principal, Role, Target, Via};
use crate::kernel::{DomainName, Page, Paged};
use crate::mailing::ports::NewDomain;
use crate::storage::{StoreError, in_read, in_write};

#[derive(Debug, Clone)]
pub struct NewDomainRequest {
    pub name: DomainName,
    pub dkim_selector: Option<String>,
    pub default_subscription_policy: Option<SubscriptionPolicy>,
}

/// A PATCH: only present fields change; `dkim_selector: Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct DomainPatch {
    pub status: Option<DomainStatus>,
    pub dkim_selector: Option<Option<String>>,
    pub default_subscription_policy: Option<SubscriptionPolicy>,
}

/// A DKIM selector is a DNS label (RFC 6376 3.1 allows dotted sub-labels too).
fn check_selector(s: &str) -> Result<(), MailingError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.len() > 253 || !s.split('.').all(label_ok) {
        return Err(MailingError::Invalid(format!(
            "dkim_selector {s:?} must be a DNS label (letters, digits, hyphens; dots between labels)"
        )));
    }
    Ok(())
}

/// Authorises `need` on the domain and loads it: 404 when it does not exist or lies outside the
/// caller's reach (never telling which), 403 inside without the permission; refusals audited.
pub fn authorized(
    mut on: impl Within,
    p: &Principal,
    ctx: &RequestCtx,
    need: Perm,
    name: &DomainName,
    action: &str,
) -> Result<Domain, MailingError> {
    let found = p
        .authorize(need, &Target::Domain(name), "domain")
        .map_err(MailingError::from)
        .and_then(|()| on.read(|tx| tx.domain_by_name(name))?.ok_or(MailingError::NotFound("domain")));
    found.map_err(|e| refuse(on, p, ctx, action, &format!("domain:{name}"), e))
}

/// Audits a 403/404 refusal where `on` says (other errors pass through untouched).
pub(super) fn refuse(
    on: impl AuditSink,
    p: &Principal,
    ctx: &RequestCtx,
    action: &str,
    target: &str,
    e: MailingError,
) -> MailingError {
    let refused = match e {
        MailingError::Access(a) => a,
        MailingError::NotFound(what) => crate::access::AccessError::NotFound(what),
        other => return other,
    };
    MailingError::Access(audited_refusal(on, p, ctx, action, target, refused))
}

pub fn create(app: &Service, p: &Principal, ctx: &RequestCtx, req: NewDomainRequest) -> Result<Domain, MailingError> {
    let target = format!("domain:{}", req.name);
    // Creating a domain is the installation's business: a key scoped to a domain or a list does
    // not reach it (404); anyone else but a site administrator with manage is refused (403).
    let allowed = p.authorize_self(Perm::Manage).and_then(|()| {
        if p.is_site_admin() {
            Ok(())
        } else {
            Err(crate::access::AccessError::Forbidden("only a site administrator creates domains".into()))
        }
    });
    allowed.map_err(|e| MailingError::Access(audited_refusal(&*app.access, p, ctx, "domain.create", &target, e)))?;
    if let Some(s) = &req.dkim_selector {
        check_selector(s)?;
    }
    // Made before the transaction: key generation runs a process and takes a fraction of a second.
    let key = req.dkim_selector.as_ref().map(|_| app.dkim.make()).transpose()?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let new = NewDomain {
            name: &req.name,
            status: DomainStatus::PendingMta,
            dkim_selector: req.dkim_selector.as_deref(),
            default_subscription_policy: req.default_subscription_policy.unwrap_or(SubscriptionPolicy::Confirm),
        };
        tx.insert_domain(&new, now).map_err(|e| match e {
            StoreError::Duplicate => MailingError::Conflict(format!("the domain {} exists", req.name)),
            other => other.into(),
        })?;
        audit_done(tx, p, ctx, now, "domain.create", &target)?;
        let d = tx.domain_by_name(&req.name)?.ok_or(MailingError::NotFound("domain"))?;
        if let (Some(selector), Some(pair)) = (&req.dkim_selector, &key) {
            store_key(app, tx, d.id, selector, pair)?;
        }
        tx.domain_by_name(&req.name)?.ok_or(MailingError::NotFound("domain"))
    })
}

/// What a sealed DKIM private key is bound to: opened for another domain or selector, it fails.
pub(crate) fn dkim_binding(id: DomainId, selector: &str) -> String {
    format!("dkim:{}:{selector}", id.get())
}

fn store_key(
    app: &Service,
    tx: &mut dyn crate::mailing::ports::Tx,
    id: DomainId,
    selector: &str,
    pair: &dkim::KeyPair,
) -> Result<(), MailingError> {
    use base64::Engine as _;
    let sealed = app.data_key.seal(&pair.private_der, &dkim_binding(id, selector));
    let public = base64::engine::general_purpose::STANDARD.encode(&pair.public_spki);
    Ok(tx.set_domain_dkim_key(id, selector, &sealed, &public)?)
}

pub fn get(app: &Service, p: &Principal, ctx: &RequestCtx, name: &DomainName) -> Result<Domain, MailingError> {
    authorized(app, p, ctx, Perm::Read, name, "domain.read")
}

pub fn update(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    name: &DomainName,
    patch: DomainPatch,
) -> Result<Domain, MailingError> {
    let current = authorized(app, p, ctx, Perm::Manage, name, "domain.update")?;
    if let Some(Some(s)) = &patch.dkim_selector {
        check_selector(s)?;
    }
    // A new selector gets a new key (rotation: publish the new record, then switch selectors).
    let key = match &patch.dkim_selector {
        Some(Some(s)) if current.dkim_public_key.as_ref().is_none_or(|(made_for, _)| made_for != s) => {
            Some(app.dkim.make()?)
        }
        _ => None,
    };
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        // Read again under the write lock: the change applies to the current record.
        let mut d = tx.domain_by_name(name)?.ok_or(MailingError::NotFound("domain"))?;
        if let Some(s) = patch.status {
            d.status = s;
        }
        if let Some(sel) = patch.dkim_selector {
            if let (Some(selector), Some(pair)) = (&sel, &key) {
                store_key(app, tx, d.id, selector, pair)?;
            }
            d.dkim_selector = sel;
        }
        if let Some(pol) = patch.default_subscription_policy {
            d.default_subscription_policy = pol;
        }
        d.updated_at = now;
        tx.update_domain(&d)?;
        audit_done(tx, p, ctx, now, "domain.update", &format!("domain:{name}"))?;
        Ok(tx.domain_by_name(name)?.unwrap_or(d))
    })
}

/// Which domains the principal sees: all for a site administrator with a user-scoped
/// credential; otherwise those its roles name, narrowed to the key's scope.
pub fn visibility(p: &Principal) -> DomainVisibility {
    let scoped = match &p.via {
        Via::Key(k) => match &k.scope {
            KeyScope::User => None,
            KeyScope::Domain(d) | KeyScope::List(d, _) => Some(d.clone()),
        },
        Via::Session(_) | Via::Operator => None,
    };
    match scoped {
        Some(d) => {
            let reach = p.is_site_admin() || p.roles.iter().any(|r| r.domain() == Some(&d));
            DomainVisibility::Only(if reach { vec![d] } else { Vec::new() })
        }
        None if p.is_site_admin() => DomainVisibility::All,
        None => {
            let mut names: Vec<DomainName> = p.roles.iter().filter_map(Role::domain).cloned().collect();
            names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
            names.dedup();
            DomainVisibility::Only(names)
        }
    }
}

pub fn list(
    app: &Service,
    p: &Principal,
    status: Option<DomainStatus>,
    page: Page,
) -> Result<Paged<Domain>, MailingError> {
    if !p.credential_perms().contains(Perm::Read) {
        return Err(crate::access::AccessError::Forbidden("this needs the read permission".into()).into());
    }
    let visible = visibility(p);
    Ok(in_read(&*app.store, |tx| tx.list_domains(&visible, status, page))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_dns_labels() {
        for ok in ["s1", "mail-2026", "a.b"] {
            assert!(check_selector(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "a..b", "sel ector", "s_1", &"a".repeat(64)] {
            assert!(check_selector(bad).is_err(), "{bad}");
        }
    }
}
