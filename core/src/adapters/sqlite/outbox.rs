use super::{SqliteTx, map_err};
use crate::kernel::{Event, EventId, EventName, NewEvent, Timestamp, secrets};
use crate::storage::{OutboxRepo, StoreError};

impl OutboxRepo for SqliteTx {
    fn append_event(&mut self, e: &NewEvent) -> Result<Event, StoreError> {
        let public_id = format!("evt_{}", secrets::random_hex(16));
        let data = e.data.to_string();
        self.conn()
            .prepare_cached(
                "INSERT INTO outbox_events (public_id, name, at, domain_id, list_id, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(rusqlite::params![
                    public_id,
                    e.name.as_str(),
                    e.at.unix_micros(),
                    e.domain_id,
                    e.list_id,
                    data
                ])
            })
            .map_err(map_err)?;
        Ok(Event {
            id: EventId::from_stored(self.conn().last_insert_rowid()),
            public_id,
            name: e.name,
            at: e.at,
            domain_id: e.domain_id,
            list_id: e.list_id,
            data: e.data.clone(),
        })
    }

    fn events_after(&mut self, after: Option<EventId>, limit: u32) -> Result<Vec<Event>, StoreError> {
        let mut st = self
            .conn()
            .prepare_cached(
                "SELECT id, public_id, name, at, domain_id, list_id, data FROM outbox_events
                 WHERE id > ?1 ORDER BY id LIMIT ?2",
            )
            .map_err(map_err)?;
        let rows = st
            .query_map(rusqlite::params![after.map_or(0, EventId::get), i64::from(limit)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(map_err)?;
        rows.into_iter()
            .map(|(id, public_id, name, at, domain_id, list_id, data)| {
                let name = EventName::parse(&name)
                    .ok_or_else(|| StoreError::Backend(format!("unknown event name {name:?} in the outbox")))?;
                let data = serde_json::from_str(&data)
                    .map_err(|e| StoreError::Backend(format!("event {public_id} holds invalid JSON: {e}")))?;
                Ok(Event {
                    id: EventId::from_stored(id),
                    public_id,
                    name,
                    at: Timestamp::from_unix_micros(at),
                    domain_id,
                    list_id,
                    data,
                })
            })
            .collect()
    }
}
