//! Mailing lists: creation with an owner, detail and policies, partial updates, the circuit
//! breaker (suspend, resume), and the domain's list listing with its visibility rules.

use super::MailingError;
use super::Service;
use super::model::{
    DigestFrequency, ListKind, ListPolicies, ListStatus, ListVisibility, MailingList, PostingPolicy, ReplyTo,
    SubscriptionPolicy,
};
use super::within::Within;
use super::{check_text, domains};
use crate::access::model::KeyScope;
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{Perm, Principal, Role, Target, Via};
use crate::kernel::{DomainName, EmailAddress, EventName, ListName, NewEvent};
use crate::mailing::ports::Tx;
use crate::storage::{StoreError, in_read, in_write};
use serde_json::json;

pub const MAX_SUBJECT_TAG: usize = 64;
pub const MAX_FOOTER: usize = 8 * 1024;
pub const MAX_DISPLAY_NAME: usize = 200;

#[derive(Debug, Clone)]
pub struct NewList {
    pub name: ListName,
    pub display_name: String,
    pub owner: EmailAddress,
    pub kind: Option<ListKind>,
    pub subscription_policy: Option<SubscriptionPolicy>,
}

/// A PATCH: only present fields change. For the three text policies, `Some(None)` clears.
#[derive(Debug, Clone, Default)]
pub struct ListPatch {
    pub display_name: Option<String>,
    pub status: Option<ListStatus>,
    pub subscription_policy: Option<SubscriptionPolicy>,
    pub posting_policy: Option<PostingPolicy>,
    pub subject_tag: Option<Option<String>>,
    pub footer_text: Option<Option<String>>,
    pub footer_html: Option<Option<String>>,
    pub reply_to: Option<ReplyTo>,
    pub bounce_disable_score: Option<u32>,
    pub held_days: Option<u32>,
    pub digest_frequency: Option<DigestFrequency>,
    pub max_message_kb: Option<u32>,
    pub dmarc_mitigation: Option<super::model::DmarcMitigation>,
}

/// What the writes of one list serialise on ([`crate::storage::WriteKey`]): its members, their
/// consents and tallies, its sends and their copies, its events and audit entries. Writes of
/// other lists run beside them on a server database; renaming or deleting a list is an unkeyed
/// write, so a name's key always means the list that bears it while keyed writes run.
pub fn write_key(domain: &DomainName, name: &ListName) -> crate::storage::WriteKey {
    crate::storage::WriteKey::new("list", &[domain.as_str(), name.as_str()])
}

/// Authorises `need` on the list and loads it (404 unknown or out of reach; 403 without the
/// permission; refusals audited).
pub fn authorized(
    mut on: impl Within,
    p: &Principal,
    ctx: &RequestCtx,
    need: Perm,
    domain: &DomainName,
    name: &ListName,
    action: &str,
) -> Result<MailingList, MailingError> {
    let found = p
        .authorize(need, &Target::List(domain, name), "list")
        .map_err(MailingError::from)
        .and_then(|()| on.read(|tx| tx.list_by_name(domain, name))?.ok_or(MailingError::NotFound("list")));
    found.map_err(|e| domains::refuse(on, p, ctx, action, &format!("list:{name}@{domain}"), e))
}

fn check_display_name(s: &str) -> Result<(), MailingError> {
    if s.trim().is_empty() {
        return Err(MailingError::Invalid("display_name must not be empty".into()));
    }
    check_text("display_name", s, MAX_DISPLAY_NAME, false)
}

pub fn create(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    req: NewList,
) -> Result<MailingList, MailingError> {
    let d = domains::authorized(app, p, ctx, Perm::Manage, domain, "list.create")?;
    check_display_name(&req.display_name)?;
    let kind = req.kind.unwrap_or(ListKind::Discussion);
    let now = app.clock.now();
    let target = format!("list:{}@{domain}", req.name);
    in_write(&*app.store, |tx| {
        let owner = tx.user_by_email(&req.owner)?.ok_or_else(|| {
            MailingError::Invalid(format!("owner_email: no account has the address {}; create it first", req.owner))
        })?;
        let list = MailingList {
            id: super::model::ListId::from_stored(0),
            domain_id: d.id,
            domain: d.name.clone(),
            name: req.name.clone(),
            display_name: req.display_name.trim().to_owned(),
            kind,
            status: ListStatus::Active,
            send_suspended: false,
            policies: ListPolicies::defaults(req.subscription_policy.unwrap_or(d.default_subscription_policy), kind),
            created_at: now,
            updated_at: now,
        };
        tx.insert_list(&list).map_err(|e| match e {
            StoreError::Duplicate => MailingError::Conflict(format!("the list {} exists", list.address())),
            other => other.into(),
        })?;
        let role = Role::Owner(d.name.clone(), req.name.clone());
        match tx.grant_role(owner.user.id, &role, now) {
            Ok(_) | Err(StoreError::Duplicate) => {}
            Err(e) => return Err(e.into()),
        }
        audit_done(tx, p, ctx, now, "list.create", &target)?;
        tx.list_by_name(domain, &req.name)?.ok_or(MailingError::NotFound("list"))
    })
}

pub fn get(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
) -> Result<MailingList, MailingError> {
    authorized(app, p, ctx, Perm::Read, domain, name, "list.read")
}

/// The list named `name` when its domain is not named: the one domain in the caller's sight that
/// has a list of that name. None has it: 404; several do: refused, naming them, for the caller
/// to choose (a list name alone is only unambiguous when one domain has it).
pub fn find_anywhere(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    name: &ListName,
) -> Result<MailingList, MailingError> {
    let visible = domains::visibility(p);
    let holders = in_read(&*app.store, |tx| {
        let mut holders = Vec::new();
        let mut offset = 0u64;
        loop {
            let page = crate::kernel::Page::parse(None, Some(&offset.to_string()))
                .map_err(|e| MailingError::Invalid(e.to_string()))?;
            let domains = tx.list_domains(&visible, None, page)?;
            for d in &domains.items {
                if tx.list_by_name(&d.name, name)?.is_some() {
                    holders.push(d.name.clone());
                }
            }
            offset += domains.items.len() as u64;
            if domains.items.is_empty() || offset >= domains.total {
                break;
            }
        }
        Ok::<_, MailingError>(holders)
    })?;
    match holders.as_slice() {
        [] => Err(MailingError::NotFound("list")),
        [one] => get(app, p, ctx, one, name),
        several => {
            let names: Vec<&str> = several.iter().map(DomainName::as_str).collect();
            Err(MailingError::Invalid(format!(
                "the domains {} each have a list {name}: name the domain",
                names.join(", ")
            )))
        }
    }
}

fn clearable(field: &str, v: Option<String>, max: usize, multiline: bool) -> Result<Option<String>, MailingError> {
    match v {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => {
            check_text(field, &s, max, multiline)?;
            Ok(Some(s))
        }
    }
}

pub fn update(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    patch: ListPatch,
) -> Result<MailingList, MailingError> {
    authorized(app, p, ctx, Perm::Manage, domain, name, "list.update")?;
    if let Some(n) = &patch.display_name {
        check_display_name(n)?;
    }
    if let Some(score) = patch.bounce_disable_score
        && !(1..=1000).contains(&score)
    {
        return Err(MailingError::Invalid("bounce_disable_score must be between 1 and 1000".into()));
    }
    if let Some(days) = patch.held_days
        && !(1..=365).contains(&days)
    {
        return Err(MailingError::Invalid("held_days must be between 1 and 365".into()));
    }
    if let Some(kb) = patch.max_message_kb
        && !(1..=102_400).contains(&kb)
    {
        return Err(MailingError::Invalid("max_message_kb must be between 1 and 102400".into()));
    }
    let subject_tag = patch.subject_tag.map(|v| clearable("subject_tag", v, MAX_SUBJECT_TAG, false)).transpose()?;
    let footer_text = patch.footer_text.map(|v| clearable("footer_text", v, MAX_FOOTER, true)).transpose()?;
    let footer_html = patch.footer_html.map(|v| clearable("footer_html", v, MAX_FOOTER, true)).transpose()?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let mut l = tx.list_by_name(domain, name)?.ok_or(MailingError::NotFound("list"))?;
        let pol = &mut l.policies;
        if let Some(v) = patch.display_name {
            l.display_name = v.trim().to_owned();
        }
        if let Some(v) = patch.status {
            l.status = v;
        }
        if let Some(v) = patch.subscription_policy {
            pol.subscription_policy = v;
        }
        if let Some(v) = patch.posting_policy {
            pol.posting_policy = v;
        }
        if let Some(v) = subject_tag {
            pol.subject_tag = v;
        }
        if let Some(v) = footer_text {
            pol.footer_text = v;
        }
        if let Some(v) = footer_html {
            pol.footer_html = v;
        }
        if let Some(v) = patch.reply_to {
            pol.reply_to = v;
        }
        if let Some(v) = patch.bounce_disable_score {
            pol.bounce_disable_score = v;
        }
        if let Some(v) = patch.held_days {
            pol.held_days = v;
            tx.set_held_days(l.id, v)?;
        }
        if let Some(v) = patch.digest_frequency {
            pol.digest_frequency = v;
        }
        if let Some(v) = patch.max_message_kb {
            pol.max_message_kb = v;
        }
        if let Some(v) = patch.dmarc_mitigation {
            pol.dmarc_mitigation = v;
        }
        l.updated_at = now;
        tx.update_list(&l)?;
        audit_done(tx, p, ctx, now, "list.update", &format!("list:{}", l.address()))?;
        Ok(l)
    })
}

/// Suspends (`true`) or resumes (`false`) distribution. Queued copies stay queued while suspended.
/// Idempotent: suspending a suspended list changes nothing and emits no second event.
pub fn set_suspended(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    suspended: bool,
) -> Result<MailingList, MailingError> {
    let action = if suspended { "list.suspend" } else { "list.resume" };
    authorized(app, p, ctx, Perm::Manage, domain, name, action)?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let mut l = tx.list_by_name(domain, name)?.ok_or(MailingError::NotFound("list"))?;
        if l.send_suspended == suspended {
            return Ok(l);
        }
        l.send_suspended = suspended;
        l.updated_at = now;
        tx.update_list(&l)?;
        if suspended {
            emit(tx, EventName::ListSuspended, &l, json!({}), now)?;
        }
        audit_done(tx, p, ctx, now, action, &format!("list:{}", l.address()))?;
        Ok(l)
    })
}

/// Records a lifecycle event about a list, with the list's identity in `data`.
pub(super) fn emit(
    tx: &mut dyn Tx,
    name: EventName,
    list: &MailingList,
    mut data: serde_json::Value,
    at: crate::kernel::Timestamp,
) -> Result<(), StoreError> {
    if let Some(obj) = data.as_object_mut() {
        obj.insert("list_id".into(), json!(list.id.get()));
        obj.insert("list_address".into(), json!(list.address()));
        obj.insert("domain".into(), json!(list.domain.as_str()));
    }
    tx.append_event(&NewEvent { name, at, domain_id: Some(list.domain_id.get()), list_id: Some(list.id.get()), data })?;
    Ok(())
}

/// The lists of a domain the principal sees: a list-scoped key its list; a site or domain
/// administrator every list; anyone else the lists it owns or moderates.
pub fn list(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
) -> Result<Vec<MailingList>, MailingError> {
    let d = domains::authorized(app, p, ctx, Perm::Read, domain, "list.list")?;
    let key_list = match &p.via {
        Via::Key(k) => match &k.scope {
            KeyScope::List(_, l) => Some(l.clone()),
            KeyScope::User | KeyScope::Domain(_) => None,
        },
        Via::Session(_) | Via::Operator => None,
    };
    let administers = p.is_site_admin() || p.roles.contains(&Role::DomainAdmin(domain.clone()));
    let mut own: Vec<ListName> = p
        .roles
        .iter()
        .filter_map(|r| match r {
            Role::Owner(rd, l) | Role::Moderator(rd, l) if rd == domain => Some(l.clone()),
            _ => None,
        })
        .collect();
    let visible = match key_list {
        Some(l) if administers || own.contains(&l) => ListVisibility::Only(vec![l]),
        Some(_) => ListVisibility::Only(Vec::new()),
        None if administers => ListVisibility::All,
        None => {
            own.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
            own.dedup();
            ListVisibility::Only(own)
        }
    };
    Ok(in_read(&*app.store, |tx| tx.lists_of_domain(d.id, &visible))?)
}
