//! The mailing context's types: domains, lists with their policies, members and their states.

use crate::id_type;
use crate::kernel::{DomainName, EmailAddress, ListName, Timestamp};

id_type!(
    /// A sending domain.
    DomainId
);
id_type!(
    /// A mailing list.
    ListId
);
id_type!(
    /// A member of one list (the same address on two lists is two members).
    MemberId
);

/// Declares a closed enum with its wire names, `as_str`, `parse` and `ALL`: states and policies
/// are stored and shown by these names and nothing else.
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }

            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }

            /// The wire names, for error messages and schemas.
            pub fn names() -> Vec<&'static str> {
                Self::ALL.iter().map(|v| v.as_str()).collect()
            }
        }
    };
}

wire_enum!(
    /// A domain starts `pending_mta` (its MTA is not yet known to route mail for it).
    DomainStatus { PendingMta = "pending_mta", Active = "active", Disabled = "disabled" }
);
wire_enum!(
    /// What happens to a new subscription: `open` activates at once, `confirm` mails a
    /// confirmation link, `moderate` holds it for a moderator, `closed` refuses it (403).
    SubscriptionPolicy { Open = "open", Confirm = "confirm", Moderate = "moderate", Closed = "closed" }
);
wire_enum!(
    /// Who may post to the list (enforced by the send pipeline).
    PostingPolicy { Members = "members", Moderated = "moderated", Owners = "owners", Open = "open" }
);
wire_enum!(ListKind { Announce = "announce", Discussion = "discussion" });
wire_enum!(ListStatus { Active = "active", Archived = "archived" });
wire_enum!(ReplyTo { List = "list", Poster = "poster" });
wire_enum!(DigestFrequency { Daily = "daily", Weekly = "weekly" });
wire_enum!(
    /// What a post's copies do when the poster's domain publishes DMARC `p=reject` or
    /// `p=quarantine`: `munge_from` (From becomes the list, the poster in Reply-To) or `none`.
    DmarcMitigation { MungeFrom = "munge_from", None = "none" }
);
wire_enum!(
    MemberStatus { Pending = "pending", Active = "active", Disabled = "disabled", Unsubscribed = "unsubscribed", Removed = "removed" }
);
wire_enum!(
    /// Why a member is `pending`.
    PendingReason { Confirmation = "confirmation", Moderation = "moderation" }
);
wire_enum!(DeliveryMode { Regular = "regular", Digest = "digest", Nomail = "nomail" });

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    pub id: DomainId,
    pub name: DomainName,
    pub status: DomainStatus,
    pub dkim_selector: Option<String>,
    pub default_subscription_policy: SubscriptionPolicy,
    pub dns_ok: Option<bool>,
    pub dns_checked_at: Option<Timestamp>,
    /// The public half of the domain's DKIM key (SubjectPublicKeyInfo, base64) and the selector
    /// it was made for; `None` until a selector is set.
    pub dkim_public_key: Option<(String, String)>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The settable policies of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPolicies {
    pub subscription_policy: SubscriptionPolicy,
    pub posting_policy: PostingPolicy,
    pub subject_tag: Option<String>,
    pub footer_text: Option<String>,
    pub footer_html: Option<String>,
    pub reply_to: ReplyTo,
    pub bounce_disable_score: u32,
    /// A held post not decided within this many days is discarded.
    pub held_days: u32,
    pub digest_frequency: DigestFrequency,
    pub max_message_kb: u32,
    pub dmarc_mitigation: DmarcMitigation,
}

impl ListPolicies {
    /// A new list's policies; the subscription policy comes from its domain's default unless given.
    pub fn defaults(subscription_policy: SubscriptionPolicy, kind: ListKind) -> Self {
        Self {
            subscription_policy,
            // An announcement list takes posts from its owners only; a discussion list from members.
            posting_policy: match kind {
                ListKind::Announce => PostingPolicy::Owners,
                ListKind::Discussion => PostingPolicy::Members,
            },
            subject_tag: None,
            footer_text: None,
            footer_html: None,
            reply_to: ReplyTo::List,
            bounce_disable_score: 5,
            held_days: 14,
            digest_frequency: DigestFrequency::Daily,
            max_message_kb: 1024,
            dmarc_mitigation: DmarcMitigation::MungeFrom,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailingList {
    pub id: ListId,
    pub domain_id: DomainId,
    pub domain: DomainName,
    pub name: ListName,
    pub display_name: String,
    pub kind: ListKind,
    pub status: ListStatus,
    pub send_suspended: bool,
    pub policies: ListPolicies,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl MailingList {
    /// `news@example.org`.
    pub fn address(&self) -> String {
        format!("{}@{}", self.name, self.domain)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: MemberId,
    pub list_id: ListId,
    pub email: EmailAddress,
    pub display_name: Option<String>,
    pub status: MemberStatus,
    pub pending_reason: Option<PendingReason>,
    pub delivery_mode: DeliveryMode,
    pub bounce_score: u32,
    pub subscribed_at: Option<Timestamp>,
    pub last_bounce_at: Option<Timestamp>,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<Timestamp>,
    pub consent_source: Option<String>,
    pub consent_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A member about to be stored (no id yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMember {
    pub list_id: ListId,
    pub email: EmailAddress,
    pub display_name: Option<String>,
    pub status: MemberStatus,
    pub pending_reason: Option<PendingReason>,
    pub delivery_mode: DeliveryMode,
    pub subscribed_at: Option<Timestamp>,
    pub consent_source: Option<String>,
    pub consent_at: Option<Timestamp>,
    pub consent_id: Option<i64>,
}

/// An act of consent, stored for the record and never shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consent {
    pub source: Option<String>,
    pub evidence: Option<String>,
    pub ip: Option<String>,
    pub at: Timestamp,
}

/// The member listing's filters, all applied in the query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberFilter {
    pub status: Option<MemberStatus>,
    pub delivery_mode: Option<DeliveryMode>,
    pub min_bounce_score: Option<u32>,
    /// Lowercased; at least two characters; `%` and `_` are plain characters.
    pub email_contains: Option<String>,
}

/// Which lists of a domain a listing shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListVisibility {
    All,
    Only(Vec<ListName>),
}

/// Which domains a listing shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainVisibility {
    All,
    Only(Vec<DomainName>),
}

/// Member counts by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    pub pending: u64,
    pub active: u64,
    pub disabled: u64,
    pub unsubscribed: u64,
    pub removed: u64,
}

impl StatusCounts {
    pub fn add(&mut self, status: MemberStatus, n: u64) {
        let slot = match status {
            MemberStatus::Pending => &mut self.pending,
            MemberStatus::Active => &mut self.active,
            MemberStatus::Disabled => &mut self.disabled,
            MemberStatus::Unsubscribed => &mut self.unsubscribed,
            MemberStatus::Removed => &mut self.removed,
        };
        *slot += n;
    }
}

id_type!(
    /// A message submitted to a list.
    SendId
);
id_type!(
    /// One recipient's copy of a send: the unit of the delivery queue.
    CopyId
);

wire_enum!(
    /// A send's aggregate state: `completed` or `failed` (no copy delivered) once every copy is
    /// terminal, recorded exactly once.
    SendState { Queued = "queued", Sending = "sending", Completed = "completed", Failed = "failed", Cancelled = "cancelled" }
);
wire_enum!(
    /// A copy's state. `queued` and `deferred` wait for a worker; `sending` is leased to one;
    /// the rest are terminal.
    CopyState {
        Queued = "queued", Sending = "sending", Sent = "sent", Deferred = "deferred", Failed = "failed",
        Bounced = "bounced", Cancelled = "cancelled"
    }
);

impl CopyState {
    pub fn is_terminal(self) -> bool {
        matches!(self, CopyState::Sent | CopyState::Failed | CopyState::Bounced | CopyState::Cancelled)
    }
}

wire_enum!(
    /// A post to the regular members, or a digest of posts to the digest members.
    SendKind { Post = "post", Digest = "digest" }
);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRecord {
    pub id: SendId,
    pub list_id: ListId,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    /// The Message-ID every copy carries (without angle brackets).
    pub message_id: String,
    pub state: SendState,
    pub recipients: u64,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

/// Copies of a send by state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyCounts(pub Vec<(CopyState, u64)>);

impl CopyCounts {
    pub fn get(&self, s: CopyState) -> u64 {
        self.0.iter().find(|(k, _)| *k == s).map_or(0, |(_, n)| *n)
    }
}

/// A copy claimed by a worker, with what composing it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub id: CopyId,
    pub send_id: SendId,
    pub list_id: ListId,
    pub member_id: MemberId,
    pub recipient: EmailAddress,
    pub attempts: u32,
    /// When the copy was queued: the retry horizon counts from here.
    pub created_at: Timestamp,
}

id_type!(
    /// A webhook.
    WebhookId
);
id_type!(
    /// One event's delivery to one webhook (all its attempts).
    DeliveryId
);

/// A webhook: where events go, which ones, and how its last calls went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: WebhookId,
    pub url: String,
    pub events: Vec<crate::kernel::EventName>,
    pub domain_id: Option<DomainId>,
    pub list_id: Option<ListId>,
    /// The signing secret, sealed with the data key (`kernel::sealed`), bound to the URL.
    pub secret_sealed: String,
    pub created_by: Option<i64>,
    pub created_at: Timestamp,
    pub disabled_at: Option<Timestamp>,
    pub last_success_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub last_error_at: Option<Timestamp>,
}

impl Webhook {
    /// Whether an event of this name and scope is for this webhook.
    pub fn wants(&self, name: crate::kernel::EventName, domain_id: Option<i64>, list_id: Option<i64>) -> bool {
        self.disabled_at.is_none()
            && self.events.contains(&name)
            && self.domain_id.is_none_or(|d| Some(d.get()) == domain_id)
            && self.list_id.is_none_or(|l| Some(l.get()) == list_id)
    }
}

wire_enum!(
    /// A delivery: `queued` (due at its next attempt), `sending` (leased to a worker), then
    /// `delivered` or `failed` (410, or abandoned after 24 h).
    DeliveryState { Queued = "queued", Sending = "sending", Delivered = "delivered", Failed = "failed" }
);

/// A delivery leased to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub webhook_id: WebhookId,
    pub event_public_id: String,
    pub event_name: String,
    pub body: String,
    /// Attempts so far, this one included.
    pub attempts: u32,
    pub created_at: Timestamp,
}

wire_enum!(
    /// How serious a bounce is: `permanent` scores, `temporary` (a delay, a 4.x.x, a full mailbox)
    /// is recorded only.
    Permanence { Temporary = "temporary", Permanent = "permanent" }
);

impl Permanence {
    /// Permanent before temporary, to pick the most serious of several failures.
    pub fn rank(self) -> u8 {
        match self {
            Permanence::Temporary => 0,
            Permanence::Permanent => 1,
        }
    }
}

// Mail in (`inbound.rs`, `posts.rs`): the inbound store's and the held posts' records.

crate::id_type!(
    /// A message in the inbound store.
    InboundId
);

/// What a list address stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// `L@D`: a post to the list.
    Post,
    /// `L-request@D`: commands (`subscribe`, `unsubscribe`, `help`).
    Request,
    /// `L-join@D` (and `L-subscribe@D`).
    Join,
    /// `L-leave@D` (and `L-unsubscribe@D`, which the copies' `List-Unsubscribe` names).
    Leave,
    /// `L-owner@D`: forwarded to the list's owners.
    Owner,
    /// `L-bounces+<token>@D`: the copies' VERP return path.
    Bounces { token: Option<String> },
}

impl Role {
    /// The stored name (the token of a bounce address is stored beside it).
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Post => "post",
            Role::Request => "request",
            Role::Join => "join",
            Role::Leave => "leave",
            Role::Owner => "owner",
            Role::Bounces { .. } => "bounces",
        }
    }

    /// The role a stored name and bounce token stand for.
    pub fn from_stored(name: &str, token: Option<String>) -> Option<Self> {
        Some(match name {
            "post" => Role::Post,
            "request" => Role::Request,
            "join" => Role::Join,
            "leave" => Role::Leave,
            "owner" => Role::Owner,
            "bounces" => Role::Bounces { token },
            _ => return None,
        })
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    pub id: InboundId,
    pub list_id: ListId,
    pub role: Role,
    pub recipient: String,
    pub envelope_from: Option<String>,
    pub raw: Vec<u8>,
    pub received_at: Timestamp,
    pub state: InboundState,
    pub outcome: Option<String>,
}

/// `Received` until processed; then `Done` with its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundState {
    Received,
    Done,
}

impl InboundState {
    pub fn as_str(self) -> &'static str {
        match self {
            InboundState::Received => "received",
            InboundState::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "received" => Some(InboundState::Received),
            "done" => Some(InboundState::Done),
            _ => None,
        }
    }
}

wire_enum!(
    /// Where a bounce came from: a DSN or a recognised report at the copy's VERP address, the
    /// receiving server's 5xx during delivery, or a copy deferred past the retry horizon.
    BounceSource { Dsn = "dsn", Report = "report", Smtp = "smtp", Expired = "expired" }
);

/// A copy a bounce names (by its VERP token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BouncedCopy {
    pub id: CopyId,
    pub send_id: SendId,
    pub list_id: ListId,
    pub member_id: MemberId,
    pub state: CopyState,
}

/// A bounce as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BounceRecord {
    pub member_id: MemberId,
    pub copy_id: Option<CopyId>,
    pub permanence: Permanence,
    pub source: BounceSource,
    pub status_code: Option<String>,
    pub diagnostic: Option<String>,
    /// Whether it added to the member's score.
    pub scored: bool,
    pub at: Timestamp,
}

crate::id_type!(
    /// A post held for moderation.
    HeldId
);

/// Why a post waits for a moderator (the wire names of `decisions.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldReason {
    /// `members` policy, and the poster is not an active member.
    NotMember,
    /// `moderated` policy: every post.
    Moderated,
    /// `owners` policy, and the poster is neither owner nor moderator.
    OwnersOnly,
    /// The list's sending is suspended.
    Suspended,
    /// The list is archived.
    Archived,
    /// Over `max_message_kb`, fetched from a mailbox (LMTP refuses it instead).
    TooLarge,
}

impl HoldReason {
    pub const ALL: &'static [HoldReason] = &[
        HoldReason::NotMember,
        HoldReason::Moderated,
        HoldReason::OwnersOnly,
        HoldReason::Suspended,
        HoldReason::Archived,
        HoldReason::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::NotMember => "not_member",
            HoldReason::Moderated => "moderated",
            HoldReason::OwnersOnly => "owners_only",
            HoldReason::Suspended => "suspended",
            HoldReason::Archived => "archived",
            HoldReason::TooLarge => "too_large",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.as_str() == s)
    }
}

/// A held post as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPost {
    pub id: HeldId,
    pub list_id: ListId,
    pub inbound_id: Option<InboundId>,
    /// The whole message (empty in listings).
    pub raw: Vec<u8>,
    pub envelope_from: Option<String>,
    pub from: Option<String>,
    pub subject: Option<String>,
    pub message_id: Option<String>,
    pub received_at: Timestamp,
    pub reason: HoldReason,
    pub size: u64,
}

/// How the session is protected: TLS from the first byte, or STARTTLS (refused when the server
/// does not offer it: never a downgrade to plain text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    Tls,
    StartTls,
}

impl Security {
    pub fn as_str(self) -> &'static str {
        match self {
            Security::Tls => "tls",
            Security::StartTls => "starttls",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "tls" => Some(Security::Tls),
            "starttls" => Some(Security::StartTls),
            _ => None,
        }
    }
}

/// The two kinds of account a list may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialKind {
    Ingest,
    Submission,
}

impl CredentialKind {
    pub const ALL: [CredentialKind; 2] = [CredentialKind::Ingest, CredentialKind::Submission];

    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Ingest => "ingest",
            CredentialKind::Submission => "submission",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A stored credential. `password_sealed` is the keyring's sealed text, never the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailCredential {
    pub list_id: ListId,
    pub kind: CredentialKind,
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub username: String,
    pub password_sealed: String,
    /// The IMAP folder (`ingest` only).
    pub folder: Option<String>,
    pub last_ok_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub last_error_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// One header field of a received message: its name (mail-parser's spelling for the fields it
/// knows) and its value as written (folded, not decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderField {
    pub name: String,
    pub value: String,
}

/// A received message as the mailing rules read it, decoded by the MIME port
/// (`bounces::MimeReader`, mail-parser in `adapters/mime.rs`): nothing cleaned or bounded yet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadMail {
    /// The first `From` mailbox: its address and display name, decoded.
    pub from_address: Option<String>,
    pub from_name: Option<String>,
    /// The decoded subject.
    pub subject: Option<String>,
    /// Without angle brackets.
    pub message_id: Option<String>,
    /// The first text body (an HTML-only message's made text).
    pub text: Option<String>,
    /// The first HTML body, when the message has a `text/html` part.
    pub html: Option<String>,
    /// The top-level header fields, in order.
    pub headers: Vec<HeaderField>,
    /// The first `Auto-Submitted` and `Precedence` values as written (`None` when absent or not
    /// UTF-8).
    pub auto_submitted: Option<String>,
    pub precedence: Option<String>,
}

/// What happens to a post's `From` (DMARC mitigation, decided by the delivery worker from the
/// poster's `_dmarc` policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromHandling {
    /// The poster's `From` goes out as it came.
    Keep,
    /// `"Poster via List" <list address>`, the poster in `Reply-To`: the poster's domain publishes
    /// `p=reject` or `p=quarantine`, so a copy signed by the list's domain would fail its DMARC.
    Munge,
}

/// What the rules decided for the copies of a post; the MIME port rebuilds the post with it.
#[derive(Debug, Clone, Copy)]
pub struct PostCopySpec<'a> {
    /// The list's address (`From` when the post has none or it is munged, `To` when the post has
    /// none, `Reply-To` for `reply_to: list`) and display name.
    pub list_address: &'a str,
    pub list_display_name: &'a str,
    /// The subject, tagged.
    pub subject: &'a str,
    pub message_id: &'a str,
    /// `Date` when the post has none.
    pub date: &'a str,
    /// `Reply-To` is the list (else the post's own `Reply-To`).
    pub reply_to_list: bool,
    pub from: FromHandling,
    pub footer_text: Option<&'a str>,
    pub footer_html: Option<&'a str>,
    pub list: ListFields<'a>,
}

/// The list header fields every copy carries (RFC 2369, RFC 2919) but the member's own
/// `List-Unsubscribe`, which each copy adds.
#[derive(Debug, Clone, Copy)]
pub struct ListFields<'a> {
    /// `List-Id`: the list's display name and its id (`news.example.org`).
    pub id_name: &'a str,
    pub id: &'a str,
    /// `List-Post`: `<mailto:news@example.org>`, or `NO` for an announcement list.
    pub post: &'a str,
    /// `List-Help`: `<mailto:news-request@example.org?subject=help>`.
    pub help: &'a str,
}

/// What the rules decided for the copies of an API send (`POST .../sends`); the MIME port
/// builds them with it.
#[derive(Debug, Clone, Copy)]
pub struct SendCopySpec<'a> {
    /// `From` (with the display name) and, for `reply_to: list`, `Reply-To`.
    pub list_address: &'a str,
    pub list_display_name: &'a str,
    /// The subject, tagged, without control characters.
    pub subject: &'a str,
    pub message_id: &'a str,
    pub date: &'a str,
    pub reply_to_list: bool,
    /// The bodies, footers included: both make a `multipart/alternative`; neither, an empty
    /// text part.
    pub text: Option<&'a str>,
    pub html: Option<&'a str>,
    pub list: ListFields<'a>,
}

/// A post rebuilt, or a send built, for its copies: the header fields every copy shares
/// (CRLF-ended; `To` among them for a post) and the body (the MIME tree with the footer, its own
/// `Content-Type` first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuiltPost {
    pub head: Vec<u8>,
    pub body: Vec<u8>,
}
