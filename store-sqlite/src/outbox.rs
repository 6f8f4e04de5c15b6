use super::{SqliteTx, map_err};
use courrier_core::kernel::{Event, EventId, EventName, NewEvent, Timestamp, new_public_id};
use courrier_core::storage::{OutboxRepo, StoreError};
use rusqlite::types::Value;

fn insert_event(
    tx: &SqliteTx,
    public_id: &str,
    name: EventName,
    at: Timestamp,
    (domain_id, list_id): (Option<i64>, Option<i64>),
    data: &str,
) -> Result<EventId, StoreError> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO outbox_events (public_id, name, at, domain_id, list_id, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut st| {
            st.execute(rusqlite::params![public_id, name.as_str(), at.unix_micros(), domain_id, list_id, data])
        })
        .map_err(map_err)?;
    Ok(EventId::from_stored(tx.conn().last_insert_rowid()))
}

impl OutboxRepo for SqliteTx {
    fn append_event(&mut self, e: &NewEvent) -> Result<Event, StoreError> {
        let public_id = new_public_id(e.at);
        let id = insert_event(self, &public_id, e.name, e.at, (e.domain_id, e.list_id), &e.data.to_string())?;
        Ok(Event {
            id,
            public_id,
            name: e.name,
            at: e.at,
            domain_id: e.domain_id,
            list_id: e.list_id,
            data: e.data.clone(),
        })
    }

    fn append_events_json(
        &mut self,
        name: EventName,
        at: Timestamp,
        (domain_id, list_id): (Option<i64>, Option<i64>),
        data: &[String],
    ) -> Result<(), StoreError> {
        // Many rows a statement, as an import inserts its members.
        const ROWS: usize = 256;
        let (name, at) = (name.as_str(), at.unix_micros());
        let sql = |rows: usize| {
            let mut sql =
                String::from("INSERT INTO outbox_events (public_id, name, at, domain_id, list_id, data) VALUES ");
            for i in 0..rows {
                let b = i * 2;
                sql.push_str(&format!("{}(?{}, ?1, ?2, ?3, ?4, ?{})", if i > 0 { ", " } else { "" }, b + 5, b + 6));
            }
            sql
        };
        // The full-size statement's text is made once (it is the key of the statement cache).
        static FULL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        for chunk in data.chunks(ROWS) {
            let sql: std::borrow::Cow<'_, str> = if chunk.len() == ROWS {
                FULL.get_or_init(|| sql(ROWS)).as_str().into()
            } else {
                sql(chunk.len()).into()
            };
            let ids: Vec<String> = chunk.iter().map(|_| new_public_id(Timestamp::from_unix_micros(at))).collect();
            let mut params: Vec<rusqlite::types::ToSqlOutput<'_>> = Vec::with_capacity(4 + chunk.len() * 2);
            params.push(name.into());
            params.push(at.into());
            let int = |v: Option<i64>| rusqlite::types::ToSqlOutput::Owned(v.map_or(Value::Null, Value::Integer));
            params.push(int(domain_id));
            params.push(int(list_id));
            for (id, d) in ids.iter().zip(chunk) {
                params.push(id.as_str().into());
                params.push(d.as_str().into());
            }
            self.conn()
                .prepare_cached(&sql)
                .and_then(|mut st| st.execute(rusqlite::params_from_iter(params)))
                .map_err(map_err)?;
        }
        Ok(())
    }

    fn last_event_id(&mut self) -> Result<Option<EventId>, StoreError> {
        let id: Option<i64> = self
            .conn()
            .prepare_cached("SELECT max(id) FROM outbox_events")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(map_err)?;
        Ok(id.map(EventId::from_stored))
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
