//! The mailing context's storage port: its transaction is the access context's plus the
//! repositories of domains, lists and members, the Idempotency-Key registry, sends and their
//! queue of copies, and webhooks with their queue of deliveries.

use super::model::{
    Consent, Copy, CopyCounts, CopyId, CopyState, CredentialKind, Delivery, DeliveryId, DeliveryMode, DeliveryState,
    Domain, DomainId, DomainStatus, DomainVisibility, HeldId, ListId, ListVisibility, MailCredential, MailingList,
    Member, MemberFilter, MemberId, MemberStatus, NewMember, SendId, SendRecord, SendState, StatusCounts, Webhook,
    WebhookId,
};
use crate::kernel::{DomainName, EmailAddress, Event, EventId, Timestamp};
use crate::kernel::{Page, Paged};
use crate::storage::StoreError;

/// One transaction of the mailing context. Dropped without `commit`, it rolls back.
pub trait Tx:
    crate::access::ports::Tx
    + MailingRepo
    + IdempotencyRepo
    + SendRepo
    + WebhookRepo
    + MeRepo
    + InboxRepo
    + ModerationRepo
    + CredentialRepo
    + BounceRepo
{
}

/// The database as the mailing context sees it.
pub type Store = dyn crate::storage::Store<dyn Tx>;

/// A new domain's fields.
#[derive(Debug, Clone)]
pub struct NewDomain<'a> {
    pub name: &'a DomainName,
    pub status: DomainStatus,
    pub dkim_selector: Option<&'a str>,
    pub default_subscription_policy: super::model::SubscriptionPolicy,
}

/// Domains, lists and members.
pub trait MailingRepo {
    /// [`StoreError::Duplicate`] when a domain with this name exists.
    fn insert_domain(&mut self, d: &NewDomain<'_>, now: Timestamp) -> Result<DomainId, StoreError>;
    fn domain_by_name(&mut self, name: &DomainName) -> Result<Option<Domain>, StoreError>;
    fn list_domains(
        &mut self,
        visible: &DomainVisibility,
        status: Option<DomainStatus>,
        page: Page,
    ) -> Result<Paged<Domain>, StoreError>;
    fn update_domain(&mut self, d: &Domain) -> Result<(), StoreError>;
    /// Stores the domain's DKIM key pair made for `selector` (the private key sealed).
    fn set_domain_dkim_key(
        &mut self,
        id: DomainId,
        selector: &str,
        private_sealed: &str,
        public_key: &str,
    ) -> Result<(), StoreError>;
    /// The domain's sealed DKIM private key and the selector it was made for.
    fn domain_dkim_private(&mut self, id: DomainId) -> Result<Option<(String, String)>, StoreError>;
    fn domain_by_id(&mut self, id: DomainId) -> Result<Option<Domain>, StoreError>;

    /// [`StoreError::Duplicate`] when the domain has a list with this name. `list.id` is ignored.
    fn insert_list(&mut self, list: &MailingList) -> Result<ListId, StoreError>;
    fn list_by_name(
        &mut self,
        domain: &DomainName,
        name: &crate::kernel::ListName,
    ) -> Result<Option<MailingList>, StoreError>;
    fn list_by_id(&mut self, id: ListId) -> Result<Option<MailingList>, StoreError>;
    /// The lists of a domain, ordered by name.
    fn lists_of_domain(&mut self, domain: DomainId, visible: &ListVisibility) -> Result<Vec<MailingList>, StoreError>;
    fn update_list(&mut self, list: &MailingList) -> Result<(), StoreError>;

    fn insert_consent(&mut self, consent: &Consent) -> Result<i64, StoreError>;
    /// [`StoreError::Duplicate`] when the list has a member with this address (compared lowercased).
    fn insert_member(&mut self, m: &NewMember, now: Timestamp) -> Result<MemberId, StoreError>;
    /// Inserts each member whose address is not on its list yet, in order; `None` for one that
    /// is (in whatever state, compared lowercased). For imports: one statement per row, the
    /// tallies moved once for the whole slice.
    fn insert_members_if_absent(
        &mut self,
        members: &[NewMember],
        now: Timestamp,
    ) -> Result<Vec<Option<MemberId>>, StoreError>;
    fn member_by_id(&mut self, list: ListId, id: MemberId) -> Result<Option<Member>, StoreError>;
    /// A member whatever its list (for links that name only the member).
    fn find_member(&mut self, id: MemberId) -> Result<Option<Member>, StoreError>;
    fn member_by_email(&mut self, list: ListId, email: &EmailAddress) -> Result<Option<Member>, StoreError>;
    /// Writes every field but the id, the list and the address; `consent_id` when given.
    fn update_member(&mut self, m: &Member, consent_id: Option<i64>, now: Timestamp) -> Result<(), StoreError>;
    /// Ordered by id; `total` counts every member the filter keeps.
    fn list_members(&mut self, list: ListId, filter: &MemberFilter, page: Page) -> Result<Paged<Member>, StoreError>;
    /// Up to `limit` members with an id above `after`, in id order (a cursor, for exports).
    fn members_after(
        &mut self,
        list: ListId,
        filter: &MemberFilter,
        after: Option<MemberId>,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError>;
    /// Member counts by status over the given lists (every list when `None`).
    fn member_counts(&mut self, lists: Option<&[ListId]>) -> Result<StatusCounts, StoreError>;
    /// Active members by delivery mode, for the send estimate and the dashboard.
    fn active_by_mode(&mut self, list: ListId) -> Result<Vec<(DeliveryMode, u64)>, StoreError>;
    fn count_status(&mut self, list: ListId, status: MemberStatus) -> Result<u64, StoreError>;
}

/// A reservation's state in the idempotency registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyRecord {
    Running { fingerprint: String, created_at: Timestamp, expires_at: Timestamp },
    Done { fingerprint: String, status: u16, body: String, expires_at: Timestamp },
}

/// The Idempotency-Key registry, keyed by API key.
pub trait IdempotencyRepo {
    fn idempotency_get(&mut self, api_key: i64, key: &str) -> Result<Option<IdempotencyRecord>, StoreError>;
    /// [`StoreError::Duplicate`] when the key is taken.
    fn idempotency_reserve(
        &mut self,
        api_key: i64,
        key: &str,
        fingerprint: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError>;
    fn idempotency_finish(&mut self, api_key: i64, key: &str, status: u16, body: &str) -> Result<(), StoreError>;
    fn idempotency_release(&mut self, api_key: i64, key: &str) -> Result<(), StoreError>;
    /// Deletes records expired before `now`; how many.
    fn idempotency_purge(&mut self, now: Timestamp) -> Result<u64, StoreError>;
}

/// A send to record; `recipients` is filled by the fan-out.
#[derive(Debug, Clone)]
pub struct NewSend<'a> {
    pub list_id: ListId,
    pub subject: &'a str,
    pub text: Option<&'a str>,
    pub html: Option<&'a str>,
    pub message_id: &'a str,
    pub created_by: Option<i64>,
    pub kind: super::model::SendKind,
    /// The post itself when the send was made from a message received by mail: its copies are
    /// built from it (MIME structure kept) instead of from `text` and `html`.
    pub raw: Option<&'a [u8]>,
}

/// Sends and the durable queue of their copies.
pub trait SendRepo {
    fn insert_send(&mut self, s: &NewSend<'_>, now: Timestamp) -> Result<SendId, StoreError>;
    /// One queued copy per active member of the list in `mode` delivery; how many.
    fn fan_out(&mut self, send: SendId, list: ListId, mode: DeliveryMode, now: Timestamp) -> Result<u64, StoreError>;
    /// The list's posts (not digests) created after `after` and at most at `until`, oldest first.
    fn posts_between(
        &mut self,
        list: ListId,
        after: Option<Timestamp>,
        until: Timestamp,
    ) -> Result<Vec<SendRecord>, StoreError>;
    /// Where the list's digest stands: what it covered, and when it last ran.
    fn digest_state(&mut self, list: ListId) -> Result<Option<(Timestamp, Timestamp)>, StoreError>;
    fn set_digest_state(&mut self, list: ListId, covered_until: Timestamp, now: Timestamp) -> Result<(), StoreError>;
    /// Lists with at least one active digest member.
    fn lists_with_digest_members(&mut self) -> Result<Vec<ListId>, StoreError>;
    fn send_by_id(&mut self, list: ListId, id: SendId) -> Result<Option<SendRecord>, StoreError>;
    /// The post a send was made from (`None` for a send of the API or a digest).
    fn send_raw(&mut self, id: SendId) -> Result<Option<Vec<u8>>, StoreError>;
    fn copy_counts(&mut self, send: SendId) -> Result<CopyCounts, StoreError>;
    /// Cancels the copies still waiting (queued or deferred); how many.
    fn cancel_waiting(&mut self, send: SendId, now: Timestamp) -> Result<u64, StoreError>;
    /// Leases up to `limit` due copies of lists not suspended until `lease_until`, skipping the
    /// destination domains that already have `per_domain` batches in flight.
    fn claim_copies(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
        per_domain: u32,
    ) -> Result<Vec<Copy>, StoreError>;
    /// Whether a copy is due or a lease ran out: what makes a delivery round worth the write
    /// lock (idle rounds only read).
    fn copies_due(&mut self, now: Timestamp) -> Result<bool, StoreError>;
    /// Copies whose lease ran out go back to the queue; how many.
    fn requeue_expired(&mut self, now: Timestamp) -> Result<u64, StoreError>;
    /// Records a leased copy's outcome; `false` when the copy was not leased any more (its lease
    /// expired and another worker took it, or it was cancelled).
    fn finish_copy(
        &mut self,
        id: CopyId,
        state: CopyState,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError>;
    /// Puts a leased copy back in the queue, due at `at`, the attempt not counted (its account
    /// was slowed down before it was tried).
    fn release_copy(&mut self, id: CopyId, at: Timestamp) -> Result<(), StoreError>;
    /// Open sends (queued or sending) none of whose copies still waits or is leased.
    fn settled_sends(&mut self, limit: u32) -> Result<Vec<SendId>, StoreError>;
    /// Moves a send from an open state to `state`; `false` when it was not open any more (so the
    /// caller emits its aggregate event only when this returns `true`: exactly once).
    fn close_send(&mut self, id: SendId, state: SendState, now: Timestamp) -> Result<bool, StoreError>;
    fn mark_sending(&mut self, id: SendId) -> Result<(), StoreError>;
    /// The list a send went to.
    fn send_list(&mut self, id: SendId) -> Result<Option<ListId>, StoreError>;
    /// Copies by state over every send, and the oldest waiting copy's creation.
    fn queue_stats(&mut self) -> Result<(CopyCounts, Option<Timestamp>), StoreError>;
    fn open_sends(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError>;
}

/// A new webhook's fields.
#[derive(Debug, Clone)]
pub struct NewWebhook<'a> {
    pub url: &'a str,
    pub events: &'a [crate::kernel::EventName],
    pub domain_id: Option<DomainId>,
    pub list_id: Option<ListId>,
    pub secret_sealed: &'a str,
    pub created_by: Option<i64>,
}

/// How a call to a webhook went, as shown on the webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallResult<'a> {
    Success,
    Error(&'a str),
    /// The receiver answered 410 Gone: no more deliveries.
    Gone(&'a str),
}

/// Webhooks, the outbox cursor of their fan-out, and the leased queue of their deliveries.
pub trait WebhookRepo {
    fn insert_webhook(&mut self, w: &NewWebhook<'_>, now: Timestamp) -> Result<WebhookId, StoreError>;
    fn webhook_by_id(&mut self, id: WebhookId) -> Result<Option<Webhook>, StoreError>;
    /// Every webhook, by id.
    fn all_webhooks(&mut self) -> Result<Vec<Webhook>, StoreError>;
    /// Deletes it and its deliveries; whether it existed.
    fn delete_webhook(&mut self, id: WebhookId) -> Result<bool, StoreError>;
    fn record_call(&mut self, id: WebhookId, result: CallResult<'_>, now: Timestamp) -> Result<(), StoreError>;
    /// The last outbox event fanned out to webhooks.
    fn webhook_cursor(&mut self) -> Result<Option<EventId>, StoreError>;
    fn set_webhook_cursor(&mut self, to: EventId) -> Result<(), StoreError>;
    /// Queues one event's delivery to one webhook (once: a second call changes nothing).
    fn enqueue_delivery(
        &mut self,
        webhook: WebhookId,
        event: &Event,
        body: &str,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Leases up to `limit` due deliveries of enabled webhooks until `lease_until`.
    fn claim_deliveries(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// Deliveries whose lease ran out go back to the queue; how many.
    fn requeue_expired_deliveries(&mut self, now: Timestamp) -> Result<u64, StoreError>;
    /// Records an attempt's outcome if the delivery is still leased (`false` otherwise: its lease
    /// expired and another worker holds it now).
    fn finish_delivery(
        &mut self,
        id: DeliveryId,
        state: DeliveryState,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError>;
    /// Whether any delivery is due or holds an expired lease (an idle worker's cheap look, on a
    /// read transaction, before it takes the write lock).
    fn deliveries_waiting(&mut self, now: Timestamp) -> Result<bool, StoreError>;
    /// Gives a leased delivery back to the queue, due at `now`, its claim not counted as an attempt.
    fn release_delivery(&mut self, id: DeliveryId, now: Timestamp) -> Result<(), StoreError>;
    /// Deliveries by state (for tests and the queue view).
    fn delivery_counts(&mut self, webhook: WebhookId) -> Result<Vec<(DeliveryState, u64)>, StoreError>;
}

/// A login link's record (`/p/me/login/{token}`), found by the SHA-256 of its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginLinkRecord {
    pub id: i64,
    pub email: EmailAddress,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
}

/// A subscriber session's record (cookie `svc_subscriber`), found by the SHA-256 of its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberSessionRecord {
    pub id: i64,
    pub email: EmailAddress,
    pub created_at: Timestamp,
    pub last_seen_at: Timestamp,
    /// The absolute ceiling.
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

/// One subscription of an address, with the list it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRecord {
    pub member: Member,
    pub list: MailingList,
}

/// Subscriber self-service: login links, sessions, and an address's subscriptions across lists.
pub trait MeRepo {
    fn insert_login_link(
        &mut self,
        token_hash: &str,
        email: &EmailAddress,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError>;
    fn login_link_by_hash(&mut self, token_hash: &str) -> Result<Option<LoginLinkRecord>, StoreError>;
    /// Marks the link used; `false` when it already was (two concurrent uses cannot both win).
    fn use_login_link(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError>;

    fn insert_subscriber_session(
        &mut self,
        token_hash: &str,
        email: &EmailAddress,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<i64, StoreError>;
    fn subscriber_session_by_hash(&mut self, token_hash: &str) -> Result<Option<SubscriberSessionRecord>, StoreError>;
    fn touch_subscriber_session(&mut self, id: i64, now: Timestamp) -> Result<(), StoreError>;
    fn revoke_subscriber_session(&mut self, id: i64, now: Timestamp) -> Result<(), StoreError>;

    /// The address's memberships in `statuses` (matched case-insensitively, as members are),
    /// ordered by list id; the scope is applied in the query.
    fn subscriptions_of(
        &mut self,
        email: &EmailAddress,
        statuses: &[MemberStatus],
        page: Page,
    ) -> Result<Paged<SubscriptionRecord>, StoreError>;
}

/// The moderation queues: subscriptions waiting for a moderator, and who moderates a list.
pub trait ModerationRepo {
    /// The list's members `pending` with reason `moderation`, ordered by id.
    fn pending_moderation(&mut self, list: ListId, page: Page) -> Result<Paged<Member>, StoreError>;
    /// Members pending a moderator's decision over the given lists (every list when `None`).
    fn count_pending_moderation(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError>;
    /// The addresses of the active accounts holding the `owner` or `moderator` role on the list,
    /// each once, ordered.
    fn list_moderators(
        &mut self,
        domain: &DomainName,
        list: &crate::kernel::ListName,
    ) -> Result<Vec<EmailAddress>, StoreError>;
    fn set_held_days(&mut self, list: ListId, days: u32) -> Result<(), StoreError>;
    /// Held posts over the given lists (every list when `None`).
    fn count_held(&mut self, lists: Option<&[ListId]>) -> Result<u64, StoreError>;
    /// Deletes the held posts received more than their list's `held_days` before `now`; which.
    fn expire_held(&mut self, now: Timestamp) -> Result<Vec<(ListId, HeldId)>, StoreError>;
    /// The addresses of the active accounts holding the `owner` role on the list, ordered.
    fn list_owners(
        &mut self,
        domain: &DomainName,
        list: &crate::kernel::ListName,
    ) -> Result<Vec<EmailAddress>, StoreError>;
}

/// Mail-account credentials of lists (one per list and kind).
pub trait CredentialRepo {
    fn credentials_of(&mut self, list: ListId) -> Result<Vec<MailCredential>, StoreError>;
    fn credential(&mut self, list: ListId, kind: CredentialKind) -> Result<Option<MailCredential>, StoreError>;
    /// Every credential of a kind, of every list (the ingest pollers).
    fn credentials_of_kind(&mut self, kind: CredentialKind) -> Result<Vec<MailCredential>, StoreError>;
    /// Inserts, or replaces the list's credential of that kind.
    fn upsert_credential(&mut self, c: &MailCredential) -> Result<(), StoreError>;
    fn delete_credential(&mut self, list: ListId, kind: CredentialKind) -> Result<bool, StoreError>;
    /// A session's outcome: `None` sets `last_ok_at`; an error sets `last_error` and `last_error_at`.
    fn record_credential_outcome(
        &mut self,
        list: ListId,
        kind: CredentialKind,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// No copy of the list is claimed before `until` (its submission account said "slow down").
    fn throttle_submission(&mut self, list: ListId, until: Timestamp) -> Result<(), StoreError>;
}

/// A message received for a list address, as stored before the sender was told it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInbound<'a> {
    pub list_id: ListId,
    pub role: &'a super::model::Role,
    pub recipient: &'a str,
    /// `None` for the null reverse-path `<>`.
    pub envelope_from: Option<&'a str>,
    pub raw: &'a [u8],
}

/// A message in the spool of accepted messages ([`Spool`]), waiting to be moved into the inbound
/// store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spooled {
    /// Unique over every spool file this installation has had (the file's random generation and
    /// the row's id): what the move records in the inbound store to be done once.
    pub key: String,
    pub list_id: ListId,
    pub role: super::model::Role,
    pub recipient: String,
    pub envelope_from: Option<String>,
    pub raw: Vec<u8>,
    pub received_at: Timestamp,
}

/// The spool of accepted messages: where a receiving frontend (LMTP) stores what it takes, so
/// that its `250` waits for this store's commit only, never for the main database's writer
/// (processing and delivery commit there). Processing moves the spooled messages into the
/// inbound store ([`InboxRepo::insert_spooled`], recording the key in the same transaction) and
/// then [`Spool::forget`]s them: a crash between the two repeats the move, which finds the key
/// and adds nothing. A spool is local to one server process's data directory.
pub trait Spool: Send + Sync + std::fmt::Debug {
    /// Stores the messages in one durable commit (`250` may be answered when this returns `Ok`);
    /// their keys, in order.
    fn put(&self, messages: &[NewInbound<'_>], now: Timestamp) -> Result<Vec<String>, StoreError>;
    /// Up to `limit` spooled messages, oldest first.
    fn oldest(&self, limit: u32) -> Result<Vec<Spooled>, StoreError>;
    /// Removes the messages moved (no fsync needed: a message forgotten by a crash is moved
    /// again, once).
    fn forget(&self, keys: &[String]) -> Result<(), StoreError>;
    /// How many messages are spooled.
    fn count(&self) -> Result<u64, StoreError>;
}

/// A post held for a moderator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHeldPost<'a> {
    pub list_id: ListId,
    pub inbound_id: Option<super::model::InboundId>,
    pub raw: &'a [u8],
    pub envelope_from: Option<&'a str>,
    pub from: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub message_id: Option<&'a str>,
    pub reason: super::model::HoldReason,
}

/// Messages received by mail (the inbound store) and the posts held for moderation.
pub trait InboxRepo {
    fn insert_inbound(&mut self, m: &NewInbound<'_>, now: Timestamp) -> Result<super::model::InboundId, StoreError>;
    fn inbound_by_id(
        &mut self,
        id: super::model::InboundId,
    ) -> Result<Option<super::model::InboundMessage>, StoreError>;
    /// Up to `limit` messages still `received` with an id above `after`, in id order.
    fn inbound_waiting(
        &mut self,
        after: Option<super::model::InboundId>,
        limit: u32,
    ) -> Result<Vec<super::model::InboundId>, StoreError>;
    /// Marks a `received` message `done` with its outcome; `false` when it was not `received`
    /// any more (another process handled it: the caller undoes what it did).
    fn finish_inbound(
        &mut self,
        id: super::model::InboundId,
        outcome: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError>;
    /// Stores a message moved from the spool, received at `received_at`, under its spool `key`:
    /// `None` (nothing added) when a message with this key is already stored (a move repeated
    /// after a crash).
    fn insert_spooled(
        &mut self,
        m: &NewInbound<'_>,
        key: &str,
        received_at: Timestamp,
    ) -> Result<Option<super::model::InboundId>, StoreError> {
        let _ = (m, key, received_at);
        Err(StoreError::Backend("this database keeps no spool keys: messages are stored here directly".into()))
    }
    /// The stored message moved from the spool under `key`, if any.
    fn inbound_by_spool_key(&mut self, key: &str) -> Result<Option<super::model::InboundId>, StoreError> {
        let _ = key;
        Err(StoreError::Backend("this database keeps no spool keys: messages are stored here directly".into()))
    }
    /// Whether a post with this Message-ID was posted to (or held for) the list after `since`.
    fn message_id_seen(&mut self, list: ListId, message_id: &str, since: Timestamp) -> Result<bool, StoreError>;

    fn insert_held(&mut self, h: &NewHeldPost<'_>, now: Timestamp) -> Result<super::model::HeldId, StoreError>;
    fn held_by_id(
        &mut self,
        list: ListId,
        id: super::model::HeldId,
    ) -> Result<Option<super::model::HeldPost>, StoreError>;
    /// The list's held posts, oldest first (the raw message left out: `raw` is empty).
    fn held_posts(&mut self, list: ListId, page: Page) -> Result<Paged<super::model::HeldPost>, StoreError>;
    /// Deletes a held post; `false` when it was already gone (decided by someone else).
    fn delete_held(&mut self, list: ListId, id: super::model::HeldId) -> Result<bool, StoreError>;
}

/// A bounce to record.
#[derive(Debug, Clone)]
pub struct NewBounce<'a> {
    pub list_id: ListId,
    pub member_id: MemberId,
    pub copy_id: Option<CopyId>,
    pub permanence: super::model::Permanence,
    pub source: super::model::BounceSource,
    pub status_code: Option<&'a str>,
    pub diagnostic: Option<&'a str>,
    pub scored: bool,
}

/// Bounces: the copies they name, their record, the decay of scores, and who hears of the
/// messages nobody recognised.
pub trait BounceRepo {
    fn copy_for_bounce(&mut self, id: CopyId) -> Result<Option<super::model::BouncedCopy>, StoreError>;
    /// A delivered (or failed) copy becomes `bounced`; `false` when it was in another state.
    fn mark_copy_bounced(&mut self, id: CopyId, error: &str, now: Timestamp) -> Result<bool, StoreError>;
    fn insert_bounce(&mut self, b: &NewBounce<'_>, now: Timestamp) -> Result<(), StoreError>;
    /// The member's bounces, newest first.
    fn member_bounces(&mut self, member: MemberId, limit: u32) -> Result<Vec<super::model::BounceRecord>, StoreError>;
    /// Active members whose last bounce is at or before `quiet_since` get their score back to 0;
    /// how many.
    fn decay_bounce_scores(&mut self, quiet_since: Timestamp, now: Timestamp) -> Result<u64, StoreError>;
    /// The addresses of the list's owners (active accounts).
    fn list_owner_emails(&mut self, list: &MailingList) -> Result<Vec<EmailAddress>, StoreError>;
    /// Bounces recorded since `since` over the given lists (every list when `None`): (permanent,
    /// temporary).
    fn bounce_counts(&mut self, lists: Option<&[ListId]>, since: Timestamp) -> Result<(u64, u64), StoreError>;
}
