//! How the mailing context's composite values are spelled in their tables, the same in every SQL
//! adapter: a webhook's events as one comma-separated text, an idempotency record as its state,
//! status and body columns. Each adapter turns a [`Corrupt`] value into its own error once.

use crate::access_columns::Corrupt;
use courrier_core::kernel::{EventName, Timestamp};
use courrier_core::mailing::ports::IdempotencyRecord;

/// `webhooks.events`: the event names, comma-separated.
pub fn events_column(events: &[EventName]) -> String {
    events.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(",")
}

/// The events a `webhooks.events` value names.
pub fn events(raw: &str) -> Result<Vec<EventName>, Corrupt> {
    raw.split(',')
        .filter(|e| !e.is_empty())
        .map(|e| EventName::parse(e).ok_or_else(|| Corrupt { what: "event name", value: e.to_owned() }))
        .collect()
}

/// An `idempotency_keys` row's columns.
pub struct IdempotencyColumns {
    pub fingerprint: String,
    pub state: String,
    pub status: Option<i64>,
    pub body: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// The record a row holds: `done` with its answer, else still running.
pub fn idempotency_record(c: IdempotencyColumns) -> IdempotencyRecord {
    let expires_at = Timestamp::from_unix_micros(c.expires_at);
    match (c.state.as_str(), c.status, c.body) {
        ("done", Some(status), Some(body)) => IdempotencyRecord::Done {
            fingerprint: c.fingerprint,
            status: u16::try_from(status).unwrap_or(500),
            body,
            expires_at,
        },
        _ => IdempotencyRecord::Running {
            fingerprint: c.fingerprint,
            created_at: Timestamp::from_unix_micros(c.created_at),
            expires_at,
        },
    }
}
