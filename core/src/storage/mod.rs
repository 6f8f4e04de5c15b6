//! The storage port: transactions over narrow repositories, one per context.
//!
//! A rule opens a transaction, calls repository methods on it, and commits: the state change,
//! its audit entry and its outbox event land together or not at all. The port is object-safe and
//! dialect-neutral (integer ids, integer microsecond timestamps, no SQLite-only semantics in
//! core), so a PostgreSQL adapter can implement it and run the same [`suite`].

use crate::access::model::{ApiKey, KeyId, Profile, Role, RoleGrant, Session, SessionId, User, UserId, UserWithSecret};
use crate::kernel::{
    AuditEntry, AuditFilter, AuditId, Code, CoreError, DomainName, EmailAddress, Event, EventId, NewAuditEntry,
    NewEvent, Page, Paged, Timestamp,
};
use crate::mailing::model::{
    Consent, Copy, CopyCounts, CopyId, CopyState, Delivery, DeliveryId, DeliveryMode, DeliveryState, Domain, DomainId,
    DomainStatus, DomainVisibility, ListId, ListVisibility, MailingList, Member, MemberFilter, MemberId, MemberStatus,
    NewMember, SendId, SendRecord, SendState, StatusCounts, Webhook, WebhookId,
};

#[cfg(any(test, feature = "testing"))]
pub mod suite;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another writer held the database for longer than the busy time-out, or the pool had no
    /// free connection in time. The caller may retry.
    #[error("the database is busy, try again")]
    Busy,
    /// A uniqueness rule of the schema refused the write. Rules that expect it check first and
    /// return their own error; reaching the caller as this means a race they lost.
    #[error("a record with the same identity already exists")]
    Duplicate,
    #[error("the database schema is at version {found}, newer than this binary knows ({known}): run a newer courrier")]
    SchemaTooNew { found: i64, known: i64 },
    #[error("cannot open the database {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("storage failed: {0}")]
    Backend(String),
}

impl CoreError for StoreError {
    fn code(&self) -> Code {
        match self {
            StoreError::Busy | StoreError::SchemaTooNew { .. } | StoreError::Open { .. } => Code::StorageUnavailable,
            StoreError::Duplicate => Code::Conflict,
            StoreError::Backend(_) => Code::Internal,
        }
    }
}

/// The audit trail.
pub trait AuditRepo {
    fn append_audit(&mut self, entry: &NewAuditEntry) -> Result<AuditId, StoreError>;
    /// Newest first; `total` counts every entry the filter keeps.
    fn list_audit(&mut self, filter: &AuditFilter, page: Page) -> Result<Paged<AuditEntry>, StoreError>;
}

/// The transactional outbox of lifecycle events.
pub trait OutboxRepo {
    fn append_event(&mut self, event: &NewEvent) -> Result<Event, StoreError>;
    /// Records events of one name, time and scope whose `data` are already JSON objects: an
    /// import records one per row, built without a `serde_json::Value`.
    fn append_events_json(
        &mut self,
        name: crate::kernel::EventName,
        at: crate::kernel::Timestamp,
        scope: (Option<i64>, Option<i64>),
        data: &[String],
    ) -> Result<(), StoreError>;
    /// The newest event's id.
    fn last_event_id(&mut self) -> Result<Option<EventId>, StoreError>;
    /// Events in the order they were recorded, after `after` (exclusive).
    fn events_after(&mut self, after: Option<EventId>, limit: u32) -> Result<Vec<Event>, StoreError>;
}

/// Which accounts a listing shows: every one, or the caller's own and those holding a role in
/// the given domains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserVisibility {
    All,
    Own { user: UserId, domains: Vec<DomainName> },
}

/// A one-time token's record (set-password, confirmation, login links).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneTimeToken {
    pub id: i64,
    pub user_id: Option<UserId>,
    pub subject_id: Option<i64>,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
}

/// Users, roles, API keys, sessions and one-time tokens.
pub trait AccessRepo {
    /// [`StoreError::Duplicate`] when an account with this address exists.
    fn insert_user(
        &mut self,
        email: &EmailAddress,
        profile: &Profile,
        password_hash: Option<&str>,
        now: Timestamp,
    ) -> Result<UserId, StoreError>;
    fn user_by_id(&mut self, id: UserId) -> Result<Option<UserWithSecret>, StoreError>;
    fn user_by_email(&mut self, email: &EmailAddress) -> Result<Option<UserWithSecret>, StoreError>;
    fn list_users(&mut self, visible: &UserVisibility, page: Page) -> Result<Paged<User>, StoreError>;
    fn update_user(&mut self, user: &User, now: Timestamp) -> Result<(), StoreError>;
    fn set_password_hash(&mut self, id: UserId, hash: &str, now: Timestamp) -> Result<(), StoreError>;

    fn roles_of(&mut self, user: UserId) -> Result<Vec<RoleGrant>, StoreError>;
    /// [`StoreError::Duplicate`] when the user holds the role already.
    fn grant_role(&mut self, user: UserId, role: &Role, now: Timestamp) -> Result<RoleGrant, StoreError>;
    /// Whether the user held it.
    fn revoke_role(&mut self, user: UserId, role: &Role) -> Result<bool, StoreError>;
    /// Active accounts holding `site_admin`.
    fn count_active_site_admins(&mut self) -> Result<u64, StoreError>;

    fn insert_key(&mut self, key: &ApiKey, secret_hash: &str) -> Result<KeyId, StoreError>;
    /// The key and the SHA-256 of its secret.
    fn key_by_prefix(&mut self, prefix: &str) -> Result<Option<(ApiKey, String)>, StoreError>;
    fn key_by_id(&mut self, id: KeyId) -> Result<Option<ApiKey>, StoreError>;
    /// Keys of one user, or of everyone; newest first.
    fn list_keys(&mut self, user: Option<UserId>, page: Page) -> Result<Paged<ApiKey>, StoreError>;
    fn revoke_key(&mut self, id: KeyId, now: Timestamp) -> Result<(), StoreError>;

    fn insert_session(
        &mut self,
        token_hash: &str,
        user: UserId,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<SessionId, StoreError>;
    fn session_by_token_hash(&mut self, token_hash: &str) -> Result<Option<Session>, StoreError>;
    fn touch_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError>;
    fn revoke_session(&mut self, id: SessionId, now: Timestamp) -> Result<(), StoreError>;

    fn insert_token(
        &mut self,
        purpose: &str,
        token_hash: &str,
        user: Option<UserId>,
        subject: Option<i64>,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError>;
    fn token_by_hash(&mut self, purpose: &str, token_hash: &str) -> Result<Option<OneTimeToken>, StoreError>;
    /// Marks the token used; `false` when it already was (so two concurrent uses cannot both win).
    fn use_token(&mut self, id: i64, now: Timestamp) -> Result<bool, StoreError>;
}

/// A new domain's fields.
#[derive(Debug, Clone)]
pub struct NewDomain<'a> {
    pub name: &'a DomainName,
    pub status: DomainStatus,
    pub dkim_selector: Option<&'a str>,
    pub default_subscription_policy: crate::mailing::model::SubscriptionPolicy,
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
    pub kind: crate::mailing::model::SendKind,
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

/// OCR documents' records and the maintenance switch.
pub trait OcrRepo {
    /// [`StoreError::Duplicate`] when the ocrID exists (128 random bits: never in practice).
    fn insert_ocr_document(&mut self, document: &crate::ocr::documents::Document) -> Result<(), StoreError>;
    fn ocr_document(
        &mut self,
        id: &crate::ocr::documents::OcrId,
    ) -> Result<Option<crate::ocr::documents::Document>, StoreError>;
    /// Newest first.
    fn ocr_documents_in_state(
        &mut self,
        state: crate::ocr::documents::DocumentState,
        page: Page,
    ) -> Result<Paged<crate::ocr::documents::Document>, StoreError>;
    fn ocr_maintenance(&mut self) -> Result<crate::ocr::maintenance::Maintenance, StoreError>;
    fn set_ocr_maintenance(&mut self, state: crate::ocr::maintenance::Maintenance) -> Result<(), StoreError>;
}

/// Invoices (issue 7): the supplier directory, zones learned per supplier, usage and plans,
/// client software records.
pub trait InvoiceRepo {
    fn supplier_by_id(
        &mut self,
        id: crate::ocr::suppliers::SupplierId,
    ) -> Result<Option<crate::ocr::suppliers::Supplier>, StoreError>;
    fn supplier_by_vat(
        &mut self,
        vat: &crate::ocr::suppliers::VatNumber,
    ) -> Result<Option<crate::ocr::suppliers::Supplier>, StoreError>;
    /// By folded name; the most recently updated when several share it.
    fn supplier_by_name(&mut self, name_key: &str) -> Result<Option<crate::ocr::suppliers::Supplier>, StoreError>;
    fn insert_supplier(
        &mut self,
        supplier: &crate::ocr::suppliers::Supplier,
    ) -> Result<crate::ocr::suppliers::SupplierId, StoreError>;
    fn update_supplier(&mut self, supplier: &crate::ocr::suppliers::Supplier) -> Result<(), StoreError>;
    /// Adds one confirmation of a zone: a new zone, or the known one moved to this rect with its
    /// count increased.
    fn confirm_supplier_zone(
        &mut self,
        supplier: crate::ocr::suppliers::SupplierId,
        zone: &crate::ocr::cuts::LearnedZone,
    ) -> Result<(), StoreError>;
    /// Most confirmed first, then by name.
    fn supplier_zones(
        &mut self,
        supplier: crate::ocr::suppliers::SupplierId,
    ) -> Result<Vec<crate::ocr::cuts::LearnedZone>, StoreError>;
    fn add_ocr_usage(
        &mut self,
        user: UserId,
        month: &str,
        delta: &crate::ocr::usage::MonthUsage,
    ) -> Result<(), StoreError>;
    /// Newest month first.
    fn ocr_usage_of(&mut self, user: UserId) -> Result<Vec<crate::ocr::usage::MonthUsage>, StoreError>;
    fn ocr_plan(&mut self, user: UserId) -> Result<Option<u32>, StoreError>;
    fn set_ocr_plan(&mut self, user: UserId, pages_per_month: Option<u32>) -> Result<(), StoreError>;
    /// By id.
    fn software_list(&mut self) -> Result<Vec<crate::ocr::software::Software>, StoreError>;
    fn software(
        &mut self,
        id: &crate::ocr::software::SoftwareId,
    ) -> Result<Option<crate::ocr::software::Software>, StoreError>;
    fn insert_software(&mut self, record: &crate::ocr::software::Software) -> Result<(), StoreError>;
    fn update_software(&mut self, record: &crate::ocr::software::Software) -> Result<(), StoreError>;
    /// Whether a record was deleted.
    fn delete_software(&mut self, id: &crate::ocr::software::SoftwareId) -> Result<bool, StoreError>;
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

/// One transaction. Dropped without [`Tx::commit`], it rolls back.
///
/// A write transaction is a *unit of work*: an adapter may run several units of concurrent callers
/// in one database transaction (group commit: one flush to disk for all of them), each unit in its
/// own savepoint. What a caller sees does not change: its unit's writes land together or not at
/// all, a failing unit takes only its own writes back, and `commit` returns `Ok` only once the
/// writes are durable.
pub trait Tx:
    AuditRepo + OutboxRepo + AccessRepo + MailingRepo + IdempotencyRepo + SendRepo + OcrRepo + InvoiceRepo + WebhookRepo
{
    /// Makes the unit's writes durable; `Ok` only once they are.
    fn commit(self: Box<Self>) -> Result<(), StoreError>;
    /// Takes the unit's writes back, like dropping it, and says whether the unit saw only durable
    /// data: `Err` when it ran after other units of the same group commit, read their writes, and
    /// their commit then failed (so a refusal it decided on may rest on writes that never were).
    fn rollback(self: Box<Self>) -> Result<(), StoreError> {
        drop(self);
        Ok(())
    }
    /// Opens a nested unit inside this transaction (SQL `SAVEPOINT`); end it with
    /// [`Tx::keep_nested`] or [`Tx::undo_nested`]. Nested units nest.
    fn begin_nested(&mut self) -> Result<(), StoreError>;
    /// Ends the innermost nested unit, keeping its writes in the transaction.
    fn keep_nested(&mut self) -> Result<(), StoreError>;
    /// Ends the innermost nested unit, taking its writes back; the transaction goes on.
    fn undo_nested(&mut self) -> Result<(), StoreError>;
}

/// A database. Shared by every thread of the process (and, for a server backend, by processes).
pub trait Store: Send + Sync {
    /// A transaction that will write: it takes the write lock at once, so two writers queue
    /// instead of failing half-way when one tries to upgrade a read lock.
    fn write(&self) -> Result<Box<dyn Tx + '_>, StoreError>;
    /// A transaction that only reads: one consistent snapshot, no write lock.
    fn read(&self) -> Result<Box<dyn Tx + '_>, StoreError>;
    /// A short description for the version object, e.g. `sqlite 3.50.4 (WAL, synchronous=FULL)`.
    fn backend(&self) -> String;
    /// A number that changes whenever anything is committed to the database, by this process or
    /// another (the `courrier` CLI next to a running server): what in-memory caches of stored state
    /// check before trusting an entry. Cheap: it reads no table.
    fn change_marker(&self) -> Result<u64, StoreError>;
}

/// Runs `f` in a write transaction: commits when it returns `Ok`, rolls back when it returns
/// `Err` (the transaction is dropped uncommitted).
pub fn in_write<T, E: From<StoreError>>(
    store: &dyn Store,
    f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = store.write()?;
    match f(&mut *tx) {
        Ok(out) => {
            tx.commit()?;
            Ok(out)
        }
        Err(e) => {
            tx.rollback()?;
            Err(e)
        }
    }
}

/// Runs `f` in a write transaction that is committed whatever `f` returns. On `Err`, `f` must
/// have left in it only what is to be kept with the refusal (its audit entry): rules undo their
/// own writes with [`in_nested`]. A refusal whose audit entry cannot be committed is still the
/// answer (logged), as [`crate::access::principal::audited_refusal`] does.
pub fn in_write_keeping_refusals<T, E: From<StoreError>>(
    store: &dyn Store,
    f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = store.write()?;
    match f(&mut *tx) {
        Ok(out) => {
            tx.commit()?;
            Ok(out)
        }
        Err(e) => {
            if let Err(store) = tx.commit() {
                tracing::error!(error = %store, "cannot commit a refusal's audit entry");
            }
            Err(e)
        }
    }
}

/// Runs `f` in a nested unit of `tx`: its writes stay when it returns `Ok` and are taken back
/// when it returns `Err`, while the transaction goes on either way.
pub fn in_nested<T, E: From<StoreError>>(tx: &mut dyn Tx, f: impl FnOnce(&mut dyn Tx) -> Result<T, E>) -> Result<T, E> {
    tx.begin_nested()?;
    match f(tx) {
        Ok(out) => {
            tx.keep_nested()?;
            Ok(out)
        }
        Err(e) => {
            tx.undo_nested()?;
            Err(e)
        }
    }
}

/// Runs `f` in a read transaction (its snapshot ends when `f` returns).
pub fn in_read<T, E: From<StoreError>>(store: &dyn Store, f: impl FnOnce(&mut dyn Tx) -> Result<T, E>) -> Result<T, E> {
    let mut tx = store.read()?;
    f(&mut *tx)
}
