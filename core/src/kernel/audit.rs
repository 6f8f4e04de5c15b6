//! The audit trail's entry: who did what to which target, and how it ended. Written in the same
//! transaction as the change it records (or alone, for a refusal).

use super::{RequestId, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The operation changed state.
    Done,
    /// Refused: in scope, without the permission (403).
    Forbidden,
    /// Refused: out of scope or unknown (404).
    NotFound,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Forbidden => "forbidden",
            Outcome::NotFound => "not_found",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Outcome::Done, Outcome::Forbidden, Outcome::NotFound].into_iter().find(|o| o.as_str() == s)
    }
}

/// Who acted: a user through a session, a user through one of its API keys, a subscriber through
/// the self-service session (the member of the list it acted on), or the operator at the command
/// line (none of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Actor {
    pub user_id: Option<i64>,
    pub key_id: Option<i64>,
    pub member_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEntry {
    pub at: Timestamp,
    pub request_id: RequestId,
    pub actor: Actor,
    /// A dotted verb, e.g. `domain.create`, `member.add`.
    pub action: String,
    /// What it acted on, e.g. `domain:example.org`, `list:news@example.org`.
    pub target: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub id: super::AuditId,
    pub at: Timestamp,
    pub request_id: String,
    pub actor: Actor,
    pub action: String,
    pub target: String,
    pub outcome: Outcome,
}

/// Filters of the audit listing (`decisions.md`): every one applied in the query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub actor_user_id: Option<i64>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
}
