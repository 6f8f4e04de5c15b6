//! Lifecycle events, written to the transactional outbox in the same transaction as the change
//! that causes them; the webhook workers deliver them later, at least once.

use super::Timestamp;

/// The ten event names of the contract. Closed: a webhook subscribes to these and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventName {
    MemberAdded,
    MemberRemoved,
    MemberBounced,
    SubscriptionPending,
    SubscriptionConfirmed,
    SendSubmitted,
    SendCompleted,
    SendFailed,
    MessageHeld,
    ListSuspended,
}

impl EventName {
    pub const ALL: [EventName; 10] = [
        EventName::MemberAdded,
        EventName::MemberRemoved,
        EventName::MemberBounced,
        EventName::SubscriptionPending,
        EventName::SubscriptionConfirmed,
        EventName::SendSubmitted,
        EventName::SendCompleted,
        EventName::SendFailed,
        EventName::MessageHeld,
        EventName::ListSuspended,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventName::MemberAdded => "member.added",
            EventName::MemberRemoved => "member.removed",
            EventName::MemberBounced => "member.bounced",
            EventName::SubscriptionPending => "subscription.pending",
            EventName::SubscriptionConfirmed => "subscription.confirmed",
            EventName::SendSubmitted => "send.submitted",
            EventName::SendCompleted => "send.completed",
            EventName::SendFailed => "send.failed",
            EventName::MessageHeld => "message.held",
            EventName::ListSuspended => "list.suspended",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// An event to record. `data` is the document delivered as the body's `data` member; it is built
/// explicitly by the rule that emits the event (domain types carry no serde derives).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub name: EventName,
    pub at: Timestamp,
    /// Scope of the event, for webhook filters.
    pub domain_id: Option<i64>,
    pub list_id: Option<i64>,
    pub data: serde_json::Value,
}

/// A new event's public id: `evt_`, the time it is recorded (16 hex digits of microseconds), a
/// random number drawn once per process and a counter. Time first, so that the outbox's unique
/// index on it grows at its end (an import records an event per row; random ids scattered those
/// inserts over the whole index); no system call per id. Unique: two ids of one process differ
/// by the counter, two processes by their random number. Not a secret: receivers see it.
pub fn new_public_id(at: Timestamp) -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    static PROCESS: OnceLock<[u8; 4]> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let process = PROCESS.get_or_init(|| {
        let mut r = [0u8; 4];
        super::secrets::fill_random(&mut r);
        r
    });
    let mut out = String::with_capacity(36);
    out.push_str("evt_");
    super::secrets::push_hex(&mut out, &at.unix_micros().to_be_bytes());
    super::secrets::push_hex(&mut out, process);
    super::secrets::push_hex(&mut out, &COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    out
}

/// A recorded event. `public_id` (`evt_…`) is stable across delivery attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: super::EventId,
    pub public_id: String,
    pub name: EventName,
    pub at: Timestamp,
    pub domain_id: Option<i64>,
    pub list_id: Option<i64>,
    pub data: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_the_contracts_ten() {
        let mut names: Vec<&str> = EventName::ALL.iter().map(|e| e.as_str()).collect();
        for e in EventName::ALL {
            assert_eq!(EventName::parse(e.as_str()), Some(e));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 10);
        assert_eq!(EventName::parse("member.deleted"), None);
    }

    #[test]
    fn public_ids_are_unique_and_ordered_by_time() {
        let (a, b) =
            (Timestamp::from_unix_micros(1_700_000_000_000_000), Timestamp::from_unix_micros(1_700_000_000_000_001));
        let (x, y, z) = (new_public_id(a), new_public_id(a), new_public_id(b));
        for id in [&x, &y, &z] {
            assert_eq!(id.len(), 36, "{id}");
            assert!(id.starts_with("evt_") && id[4..].bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')), "{id}");
        }
        assert_ne!(x, y);
        assert!(x < z && y < z);
    }
}
