//! Members of a list: adding under the list's subscription policy, reading by id or address,
//! and the filtered listing.

use super::Service;
use super::idempotency::{self, IdempotentRequest, Keyed};
use super::model::{
    Consent, DeliveryMode, ListStatus, MailingList, Member, MemberFilter, MemberId, MemberStatus, NewMember,
    PendingReason, SubscriptionPolicy,
};
use super::state::{self, MemberState, Refusal, Trigger};
use super::{MailingError, check_text, lists, moderation, subscriptions};
use crate::access::principal::{InTx, RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::kernel::{DomainName, EmailAddress, EventName, ListName, Page, Paged, Timestamp, parse_positive_id};
use crate::mailing::ports::Tx;
use crate::storage::{StoreError, in_nested, in_read, in_write};
use serde_json::json;

pub const MAX_CONSENT_SOURCE: usize = 200;
pub const MAX_CONSENT_EVIDENCE: usize = 4096;
pub const MIN_EMAIL_CONTAINS: usize = 2;

/// A request to add or subscribe an address.
#[derive(Debug, Clone)]
pub struct AddMember {
    pub email: EmailAddress,
    pub display_name: Option<String>,
    pub delivery_mode: DeliveryMode,
    /// The caller attests consent: active at once whatever the policy; evidence required.
    pub force: bool,
    pub consent_source: Option<String>,
    pub consent_evidence: Option<String>,
    /// The client's address, kept with the consent record.
    pub source_ip: Option<String>,
}

impl AddMember {
    /// The plainest request: the address alone, regular delivery, no consent attested (the
    /// list's subscription policy decides).
    pub fn regular(email: EmailAddress) -> Self {
        Self {
            email,
            display_name: None,
            delivery_mode: DeliveryMode::Regular,
            force: false,
            consent_source: None,
            consent_evidence: None,
            source_ip: None,
        }
    }

    /// A request as both frontends receive it: an empty name, source or evidence is none; the
    /// delivery mode is `regular` unless given.
    pub fn new(
        email: EmailAddress,
        display_name: Option<String>,
        delivery_mode: Option<&str>,
        force: bool,
        consent_source: Option<String>,
        consent_evidence: Option<String>,
        source_ip: Option<String>,
    ) -> Result<Self, MailingError> {
        Ok(Self {
            email,
            display_name: display_name.filter(|n| !n.trim().is_empty()),
            delivery_mode: delivery_mode.map(parse_delivery_mode).transpose()?.unwrap_or(DeliveryMode::Regular),
            force,
            consent_source: consent_source.filter(|s| !s.is_empty()),
            consent_evidence: consent_evidence.filter(|s| !s.is_empty()),
            source_ip,
        })
    }
}

/// What adding an address did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    Active(MemberId),
    PendingConfirmation(MemberId),
    PendingModeration(MemberId),
}

impl AddOutcome {
    pub fn member_id(self) -> MemberId {
        match self {
            AddOutcome::Active(id) | AddOutcome::PendingConfirmation(id) | AddOutcome::PendingModeration(id) => id,
        }
    }

    /// The contract's status of the answer: 201 when the member is active, 202 when pending.
    pub fn status(self) -> u16 {
        match self {
            AddOutcome::Active(_) => 201,
            AddOutcome::PendingConfirmation(_) | AddOutcome::PendingModeration(_) => 202,
        }
    }

    /// The answer's `data`, as every frontend shows it and the Idempotency-Key registry replays it.
    pub fn view(self) -> serde_json::Value {
        json!({ "status": self.as_str(), "member_id": self.member_id().get() })
    }

    /// The contract's `status` of the add-member answer.
    pub fn as_str(self) -> &'static str {
        match self {
            AddOutcome::Active(_) => "active",
            AddOutcome::PendingConfirmation(_) => "pending_confirmation",
            AddOutcome::PendingModeration(_) => "pending_moderation",
        }
    }
}

/// `{membre}`: a numeric id or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberRef {
    Id(MemberId),
    Email(EmailAddress),
}

impl MemberRef {
    pub fn parse(s: &str) -> Result<Self, MailingError> {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            let id = parse_positive_id(s).map_err(|e| MailingError::Invalid(e.to_string()))?;
            return Ok(MemberRef::Id(MemberId::from_stored(id)));
        }
        Ok(MemberRef::Email(EmailAddress::parse(s)?))
    }
}

impl MemberFilter {
    /// Parses the listing's (and the export's) filters. Every invalid value is refused with its
    /// reason, never ignored: a misspelt filter would otherwise list everyone.
    pub fn parse(
        status: Option<&str>,
        delivery_mode: Option<&str>,
        min_bounce_score: Option<&str>,
        email_contains: Option<&str>,
    ) -> Result<Self, MailingError> {
        let status = status
            .map(|s| {
                MemberStatus::parse(s).ok_or_else(|| {
                    MailingError::Invalid(format!("status {s:?} is not one of {}", MemberStatus::names().join(", ")))
                })
            })
            .transpose()?;
        let delivery_mode = delivery_mode.map(parse_delivery_mode).transpose()?;
        let min_bounce_score = min_bounce_score
            .map(|s| {
                s.parse::<u32>().map_err(|_| {
                    MailingError::Invalid(format!("min_bounce_score {s:?} must be a non-negative integer"))
                })
            })
            .transpose()?;
        let email_contains = email_contains
            .map(|s| {
                let n = s.chars().count();
                if n < MIN_EMAIL_CONTAINS {
                    Err(MailingError::Invalid(format!(
                        "email_contains must be at least {MIN_EMAIL_CONTAINS} characters"
                    )))
                } else if n > 254 || s.chars().any(char::is_control) {
                    Err(MailingError::Invalid(
                        "email_contains must be at most 254 characters, none of them control characters".into(),
                    ))
                } else {
                    Ok(s.to_lowercase())
                }
            })
            .transpose()?;
        Ok(Self { status, delivery_mode, min_bounce_score, email_contains })
    }
}

pub fn parse_delivery_mode(s: &str) -> Result<DeliveryMode, MailingError> {
    DeliveryMode::parse(s).ok_or_else(|| {
        MailingError::Invalid(format!("delivery_mode {s:?} is not one of {}", DeliveryMode::names().join(", ")))
    })
}

fn check_add(req: &AddMember) -> Result<(), MailingError> {
    if let Some(n) = &req.display_name {
        check_text("name", n, lists::MAX_DISPLAY_NAME, false)?;
    }
    if let Some(s) = &req.consent_source {
        check_text("consent_source", s, MAX_CONSENT_SOURCE, false)?;
    }
    if let Some(e) = &req.consent_evidence {
        check_text("consent_evidence", e, MAX_CONSENT_EVIDENCE, true)?;
    }
    let has_evidence = req.consent_evidence.as_deref().is_some_and(|e| !e.trim().is_empty());
    if req.force && !has_evidence {
        return Err(MailingError::ConsentEvidenceRequired(
            "force adds the member whatever the list's policy: consent_evidence is required",
        ));
    }
    Ok(())
}

/// The policy a subscription meets: an archived list takes none.
pub(super) fn effective_policy(list: &MailingList) -> SubscriptionPolicy {
    match list.status {
        ListStatus::Archived => SubscriptionPolicy::Closed,
        ListStatus::Active => list.policies.subscription_policy,
    }
}

/// Adds or subscribes an address under the list's policy, or with attested consent (`force`): in
/// one write transaction with the list's lookup and, under an Idempotency-Key, the key's check and
/// stored answer ([`idempotency::guarded`]). The confirmation mail of a pending subscription goes
/// out once that transaction is committed. A refusal's audit entry is committed; the addition's
/// own writes are in a nested unit, undone.
pub fn add(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    key: Option<&IdempotentRequest>,
    domain: &DomainName,
    name: &ListName,
    req: AddMember,
) -> Result<Keyed<AddOutcome>, MailingError> {
    let now = app.clock.now();
    let on = Some(lists::write_key(domain, name));
    let added = idempotency::guarded(app, on, key, |tx| add_unit(tx, p, ctx, domain, name, &req, now))?;
    Ok(added.map(|added| added.after_commit(app)))
}

/// [`add`] for a caller that must not block (an async frontend), its input owned: the addition
/// goes to the store's writer thread, and `answer` gets it from there once its commit is decided;
/// where the store has none, it comes back as `Some(run)`, to call on a thread that may block
/// ([`crate::storage::submit_write`]). The caller then sends the addition's mail, if any
/// ([`Added::after_commit`], which may block: not on the writer's thread).
#[allow(clippy::too_many_arguments)]
pub fn add_submitted<A>(
    app: &Service,
    p: std::sync::Arc<Principal>,
    ctx: RequestCtx,
    key: Option<IdempotentRequest>,
    domain: DomainName,
    name: ListName,
    req: AddMember,
    answer: A,
) -> Option<impl FnOnce() + Send + 'static>
where
    A: FnOnce(Result<Keyed<Added>, MailingError>) + Send + 'static,
{
    crate::storage::submit_write(app.store.clone(), add_job(app, p, ctx, key, domain, name, req, answer))
}

/// [`add`] as a write job, its input owned.
#[allow(clippy::too_many_arguments)]
fn add_job<A>(
    app: &Service,
    p: std::sync::Arc<Principal>,
    ctx: RequestCtx,
    key: Option<IdempotentRequest>,
    domain: DomainName,
    name: ListName,
    req: AddMember,
    answer: A,
) -> impl crate::storage::WriteJob<dyn Tx> + use<A>
where
    A: FnOnce(Result<Keyed<Added>, MailingError>) + Send + 'static,
{
    let now = app.clock.now();
    let on = Some(lists::write_key(&domain, &name));
    idempotency::guarded_job(app, on, key, move |tx| add_unit(tx, &p, &ctx, &domain, &name, &req, now), answer)
}

/// The unit of an addition: the list's lookup and permission, the state machine's decision and
/// its writes, in a nested unit undone on refusal (the refusal's audit entry stays).
fn add_unit(
    tx: &mut (dyn Tx + 'static),
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    req: &AddMember,
    now: Timestamp,
) -> Result<Added, MailingError> {
    let list = lists::authorized(InTx(&mut *tx, now), p, ctx, Perm::MembersWrite, domain, name, "member.add")?;
    check_add(req)?;
    let trigger = if req.force { Trigger::AddWithConsent } else { Trigger::Subscribe(effective_policy(&list)) };
    let (outcome, token, newly_held) = in_nested(tx, |tx| {
        // Read once: what it was decides both the notice below and the transition.
        let existing = tx.member_by_email(list.id, &req.email)?;
        let was = existing.as_ref().map(|m| MemberState::of(m.status, m.pending_reason));
        let outcome = apply_add_to(tx, &list, req, trigger, now, existing)?;
        // A request already waiting for a moderator was announced when it began to wait.
        let held = matches!(outcome, AddOutcome::PendingModeration(_))
            && was != Some(MemberState::Pending(PendingReason::Moderation));
        let token = if let AddOutcome::PendingConfirmation(id) = outcome {
            let token = crate::kernel::secrets::random_token(32);
            subscriptions::store_token(tx, id, &token, now)?;
            Some(token)
        } else {
            None
        };
        audit_done(tx, p, ctx, now, "member.add", &format!("member:{}:{}", list.address(), outcome.member_id()))?;
        Ok::<_, MailingError>((outcome, token, held))
    })?;
    let held = newly_held.then(|| (list.clone(), req.email.clone()));
    Ok(Added { outcome, confirmation: token.map(|t| (list, req.email.clone(), t, now)), held })
}

/// An addition written in a transaction, with the confirmation mail left to send once that is
/// committed.
pub struct Added {
    outcome: AddOutcome,
    confirmation: Option<(MailingList, EmailAddress, String, Timestamp)>,
    /// A subscription that began to wait for a moderator: its notice goes out after the commit.
    held: Option<(MailingList, EmailAddress)>,
}

impl Added {
    /// What the addition did.
    pub fn outcome(&self) -> AddOutcome {
        self.outcome
    }

    /// Whether [`Added::after_commit`] has mail to send (a confirmation, moderators' notice).
    pub fn sends_mail(&self) -> bool {
        self.confirmation.is_some() || self.held.is_some()
    }

    /// Sends the mail the committed addition owes, and says what it did.
    pub fn after_commit(self, app: &Service) -> AddOutcome {
        if let Some((list, to, token, now)) = &self.confirmation {
            subscriptions::send_confirmation(app, list, to, token, *now);
        }
        if let Some((list, email)) = &self.held {
            let item = moderation::HeldItem::Subscription { member: self.outcome.member_id(), email: email.clone() };
            moderation::notify_moderators(app, list, &item);
        }
        self.outcome
    }
}

impl idempotency::Replayable for Added {
    fn status(&self) -> u16 {
        self.outcome.status()
    }

    fn view(&self) -> serde_json::Value {
        self.outcome.view()
    }
}

/// The write of one addition, inside the caller's transaction: the state machine decides, the
/// member row and its consent record are written, and the event is recorded. (An import writes
/// its rows in bulk: `import::commit_batch`.)
pub(super) fn apply_add(
    tx: &mut dyn Tx,
    list: &MailingList,
    req: &AddMember,
    trigger: Trigger,
    now: Timestamp,
) -> Result<AddOutcome, MailingError> {
    let existing = tx.member_by_email(list.id, &req.email)?;
    apply_add_to(tx, list, req, trigger, now, existing)
}

/// [`apply_add`] with the address's member already read (in the same transaction).
fn apply_add_to(
    tx: &mut dyn Tx,
    list: &MailingList,
    req: &AddMember,
    trigger: Trigger,
    now: Timestamp,
    existing: Option<Member>,
) -> Result<AddOutcome, MailingError> {
    let from = existing.as_ref().map_or(MemberState::Absent, |m| MemberState::of(m.status, m.pending_reason));
    let to = state::next(from, trigger).map_err(|r| match r {
        Refusal::AlreadySubscribed => MailingError::AlreadySubscribed(req.email.to_string()),
        Refusal::Closed => MailingError::SubscriptionClosed,
        Refusal::NotApplicable => MailingError::Conflict("this subscription cannot change that way".into()),
    })?;
    let Some((status, pending_reason)) = to.stored() else {
        return Err(MailingError::Conflict("this subscription cannot change that way".into()));
    };
    let attested = req.consent_source.is_some() || req.consent_evidence.is_some();
    let consent_id = if attested {
        Some(tx.insert_consent(&Consent {
            source: req.consent_source.clone(),
            evidence: req.consent_evidence.clone(),
            ip: req.source_ip.clone(),
            at: now,
        })?)
    } else {
        None
    };
    let active = status == MemberStatus::Active;
    let id = match existing {
        Some(mut m) => {
            let was = MemberState::of(m.status, m.pending_reason);
            m.status = status;
            m.pending_reason = pending_reason;
            m.delivery_mode = req.delivery_mode;
            if req.display_name.is_some() {
                m.display_name.clone_from(&req.display_name);
            }
            if active {
                m.subscribed_at = Some(now);
            }
            if attested {
                m.consent_source.clone_from(&req.consent_source);
                m.consent_at = Some(now);
            }
            tx.update_member(&m, consent_id, now)?;
            if was == to {
                // A repeated pending request: nothing new to announce.
                return Ok(outcome_of(to, m.id));
            }
            m.id
        }
        None => {
            let new = NewMember {
                list_id: list.id,
                email: req.email.clone(),
                display_name: req.display_name.clone(),
                status,
                pending_reason,
                delivery_mode: req.delivery_mode,
                subscribed_at: active.then_some(now),
                consent_source: req.consent_source.clone(),
                consent_at: attested.then_some(now),
                consent_id,
            };
            tx.insert_member(&new, now).map_err(|e| match e {
                StoreError::Duplicate => MailingError::AlreadySubscribed(req.email.to_string()),
                other => other.into(),
            })?
        }
    };
    let event = if active { EventName::MemberAdded } else { EventName::SubscriptionPending };
    let mut data =
        json!({ "member_id": id.get(), "email": req.email.to_string(), "delivery_mode": req.delivery_mode.as_str() });
    if let Some(r) = pending_reason {
        data["pending_reason"] = json!(r.as_str());
    }
    lists::emit(tx, event, list, data, now)?;
    Ok(outcome_of(to, id))
}

fn outcome_of(state: MemberState, id: MemberId) -> AddOutcome {
    match state {
        MemberState::Pending(PendingReason::Confirmation) => AddOutcome::PendingConfirmation(id),
        MemberState::Pending(PendingReason::Moderation) => AddOutcome::PendingModeration(id),
        _ => AddOutcome::Active(id),
    }
}

pub fn get(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    member: &MemberRef,
) -> Result<Member, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Read, domain, name, "member.read")?;
    let found = in_read(&*app.store, |tx| match member {
        MemberRef::Id(id) => tx.member_by_id(list.id, *id),
        MemberRef::Email(e) => tx.member_by_email(list.id, e),
    })?;
    found.ok_or(MailingError::NotFound("member"))
}

/// An administrator removes a member (the state machine's `remove`: pending, active, disabled or
/// unsubscribed become `removed`), recording `member.removed`; removing a removed member is 409,
/// like any move the machine refuses. Answers the member as it now stands.
pub fn remove(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    member: &MemberRef,
) -> Result<Member, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::MembersWrite, domain, name, "member.remove")?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let found = match member {
            MemberRef::Id(id) => tx.member_by_id(list.id, *id)?,
            MemberRef::Email(e) => tx.member_by_email(list.id, e)?,
        };
        let mut m = found.ok_or(MailingError::NotFound("member"))?;
        if !leave(tx, &list, &mut m, Trigger::Remove, "removed", now)? {
            return Err(MailingError::Conflict(format!("{} is already removed from the list", m.email)));
        }
        audit_done(tx, p, ctx, now, "member.remove", &format!("member:{}:{}", list.address(), m.id))?;
        Ok(m)
    })
}

/// An administrator sets a member's status (`PATCH .../members/{member}`). Only `active` may be
/// set: a `disabled` member is re-enabled (score 0, the disabling cleared), audited; an active one
/// stays as it is; any other state is 409 (a pending or departed address needs its own consent,
/// not an administrator's switch). Answers the member as it now stands.
pub fn set_status(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    member: &MemberRef,
    status: &str,
) -> Result<Member, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::MembersWrite, domain, name, "member.update")?;
    if MemberStatus::parse(status) != Some(MemberStatus::Active) {
        return Err(MailingError::Invalid(format!(
            "status {status:?} cannot be set: only \"active\" (re-enable a disabled member)"
        )));
    }
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let found = match member {
            MemberRef::Id(id) => tx.member_by_id(list.id, *id)?,
            MemberRef::Email(e) => tx.member_by_email(list.id, e)?,
        };
        let mut m = found.ok_or(MailingError::NotFound("member"))?;
        match m.status {
            MemberStatus::Active => return Ok(m),
            MemberStatus::Disabled => {}
            other => {
                return Err(MailingError::Conflict(format!(
                    "{} is {}: only a disabled member can be re-enabled",
                    m.email,
                    other.as_str()
                )));
            }
        }
        super::bounces::apply_reenable(tx, &mut m, now)?;
        audit_done(tx, p, ctx, now, "member.reenable", &format!("member:{}:{}", list.address(), m.id))?;
        Ok(m)
    })
}

/// Takes a member off its list by `trigger` (an administrator's `Remove`, the subscriber's
/// `Unsubscribe`) in `tx`: the state machine's next state stored and `member.removed` emitted with
/// `reason`. `false`, with nothing written, when the state machine refuses (already gone).
pub(super) fn leave(
    tx: &mut dyn Tx,
    list: &MailingList,
    m: &mut Member,
    trigger: Trigger,
    reason: &str,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let next = state::next(MemberState::of(m.status, m.pending_reason), trigger).ok().and_then(MemberState::stored);
    let Some((status, pending_reason)) = next else { return Ok(false) };
    m.status = status;
    m.pending_reason = pending_reason;
    tx.update_member(m, None, now)?;
    let data = json!({ "member_id": m.id.get(), "email": m.email.to_string(), "reason": reason });
    lists::emit(tx, EventName::MemberRemoved, list, data, now)?;
    Ok(true)
}

pub fn list(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    filter: &MemberFilter,
    page: Page,
) -> Result<Paged<Member>, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Read, domain, name, "member.list")?;
    Ok(in_read(&*app.store, |tx| tx.list_members(list.id, filter, page))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_refuse_what_they_cannot_apply() {
        assert!(MemberFilter::parse(Some("gone"), None, None, None).is_err());
        assert!(MemberFilter::parse(None, Some("weekly"), None, None).is_err());
        assert!(MemberFilter::parse(None, None, Some("-1"), None).is_err());
        assert!(MemberFilter::parse(None, None, Some("x"), None).is_err());
        assert!(MemberFilter::parse(None, None, None, Some("a")).is_err());
        assert!(MemberFilter::parse(None, None, None, Some("é")).is_err(), "one character, two bytes");
        let f = MemberFilter::parse(Some("active"), Some("digest"), Some("3"), Some("Ab%_")).unwrap();
        assert_eq!(f.status, Some(MemberStatus::Active));
        assert_eq!(f.delivery_mode, Some(DeliveryMode::Digest));
        assert_eq!(f.min_bounce_score, Some(3));
        assert_eq!(f.email_contains.as_deref(), Some("ab%_"));
    }

    #[test]
    fn member_refs() {
        assert_eq!(MemberRef::parse("12").unwrap(), MemberRef::Id(MemberId::from_stored(12)));
        assert!(matches!(MemberRef::parse("a@example.org").unwrap(), MemberRef::Email(_)));
        assert!(MemberRef::parse("0").is_err());
        assert!(MemberRef::parse("nobody").is_err());
    }

    #[test]
    fn force_needs_evidence() {
        let req = |force, evidence: Option<&str>| AddMember {
            email: EmailAddress::parse("a@example.org").unwrap(),
            display_name: None,
            delivery_mode: DeliveryMode::Regular,
            force,
            consent_source: None,
            consent_evidence: evidence.map(str::to_owned),
            source_ip: None,
        };
        assert!(matches!(check_add(&req(true, None)), Err(MailingError::ConsentEvidenceRequired(_))));
        assert!(matches!(check_add(&req(true, Some("  "))), Err(MailingError::ConsentEvidenceRequired(_))));
        assert!(check_add(&req(true, Some("signed form 2026-11-02"))).is_ok());
        assert!(check_add(&req(false, None)).is_ok());
    }
}
