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
}
