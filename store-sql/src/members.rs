//! How a member row is read, once for both databases: its columns and its decoder.

use crate::sql::{SqlRow, corrupt, ts};
use courrier_core::kernel::{EmailAddress, Timestamp};
use courrier_core::mailing::model::{DeliveryMode, ListId, Member, MemberId, MemberStatus, PendingReason};
use courrier_core::storage::StoreError;

pub const MEMBER_COLUMNS: &str = "id, list_id, email, display_name, status, pending_reason, delivery_mode, bounce_score, \
     subscribed_at, last_bounce_at, disabled_reason, disabled_at, consent_source, consent_at, created_at, updated_at";

/// An address as stored: what uniqueness and lookups compare (lowercased).
pub fn email_key(e: &EmailAddress) -> String {
    e.to_string().to_lowercase()
}

/// A stored address, parsed again.
pub fn address(raw: &str) -> Result<EmailAddress, StoreError> {
    EmailAddress::parse(raw).map_err(|_| corrupt("email", raw))
}

/// A text column naming one of an enum's values.
pub fn parsed<T>(what: &str, raw: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, StoreError> {
    parse(raw).ok_or_else(|| corrupt(what, raw))
}

/// A row of [`MEMBER_COLUMNS`].
pub fn member_row(r: &dyn SqlRow) -> Result<Member, StoreError> {
    let score = r.i64(7)?;
    Ok(Member {
        id: MemberId::from_stored(r.i64(0)?),
        list_id: ListId::from_stored(r.i64(1)?),
        email: address(&r.text(2)?)?,
        display_name: r.opt_text(3)?,
        status: parsed("member status", &r.text(4)?, MemberStatus::parse)?,
        pending_reason: r.opt_text(5)?.map(|raw| parsed("pending reason", &raw, PendingReason::parse)).transpose()?,
        delivery_mode: parsed("delivery mode", &r.text(6)?, DeliveryMode::parse)?,
        bounce_score: u32::try_from(score).map_err(|_| corrupt("bounce score", &score.to_string()))?,
        subscribed_at: ts(r.opt_i64(8)?),
        last_bounce_at: ts(r.opt_i64(9)?),
        disabled_reason: r.opt_text(10)?,
        disabled_at: ts(r.opt_i64(11)?),
        consent_source: r.opt_text(12)?,
        consent_at: ts(r.opt_i64(13)?),
        created_at: Timestamp::from_unix_micros(r.i64(14)?),
        updated_at: Timestamp::from_unix_micros(r.i64(15)?),
    })
}
