use super::{PgTx, get};
use courrier_core::kernel::{Event, EventId, EventName, NewEvent, Timestamp, new_public_id};
use courrier_core::storage::{OutboxRepo, StoreError};

/// The outbox's horizon `h`: the oldest transaction that may still commit an event here (an
/// event it writes sorts at its id), or, with none, the next transaction id; events are read only
/// below it. Not `pg_snapshot_xmin`: transaction ids are the cluster's, and a transaction of another
/// database that stays open (another installation's, a test's) would hold every reader back, as
/// would this database's autovacuum and analyze, which write no events. So the snapshot's running
/// transactions are left out when found running in another database or in a backend that is not
/// a client's; one that ended since the snapshot was taken (it is no longer found) counts, so the
/// horizon is never past a transaction whose events the snapshot does not show. The reader's own
/// transaction counts too (its events are not committed).
macro_rules! horizon {
    () => {
        "WITH horizon AS (
             SELECT LEAST(COALESCE(min(x), pg_snapshot_xmax(pg_current_snapshot())), pg_current_xact_id_if_assigned()) AS h
             FROM pg_snapshot_xip(pg_current_snapshot()) AS x
             WHERE NOT EXISTS (
                 SELECT 1 FROM pg_stat_activity a
                 WHERE a.backend_xid::text::bigint = x::text::bigint % 4294967296
                 AND (a.datname IS DISTINCT FROM current_database() OR a.backend_type <> 'client backend'))) "
    };
}

impl OutboxRepo for PgTx {
    fn append_event(&mut self, e: &NewEvent) -> Result<Event, StoreError> {
        let public_id = new_public_id(e.at);
        let data = e.data.to_string();
        let row = self.query_one(
            "INSERT INTO outbox_events (public_id, name, at, domain_id, list_id, data)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            &[&public_id, &e.name.as_str(), &e.at.unix_micros(), &e.domain_id, &e.list_id, &data],
        )?;
        Ok(Event {
            id: EventId::from_stored(get(&row, 0)?),
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
        // One statement for all of them: the ids and documents as two arrays, unnested in order.
        let ids: Vec<String> = data.iter().map(|_| new_public_id(at)).collect();
        self.execute(
            "INSERT INTO outbox_events (public_id, name, at, domain_id, list_id, data)
             SELECT p, $1, $2, $3, $4, d FROM unnest($5::TEXT[], $6::TEXT[]) WITH ORDINALITY AS t (p, d, n)
             ORDER BY n",
            &[&name.as_str(), &at.unix_micros(), &domain_id, &list_id, &ids, &data],
        )?;
        Ok(())
    }

    /// The last event in reading order (`events_after`'s) among those below the horizon.
    fn last_event_id(&mut self) -> Result<Option<EventId>, StoreError> {
        let row = self.query_opt(
            concat!(
                horizon!(),
                "SELECT id FROM outbox_events, horizon WHERE xid < horizon.h ORDER BY xid DESC, id DESC LIMIT 1"
            ),
            &[],
        )?;
        Ok(row.map(|r| get(&r, 0)).transpose()?.map(EventId::from_stored))
    }

    /// In the writing transactions' order (migration 9), only below the horizon: an event that
    /// commits later sorts after every event read now, whatever its id.
    fn events_after(&mut self, after: Option<EventId>, limit: u32) -> Result<Vec<Event>, StoreError> {
        let rows = match after {
            None => self.query(
                concat!(
                    horizon!(),
                    "SELECT id, public_id, name, at, domain_id, list_id, data FROM outbox_events, horizon
                     WHERE xid < horizon.h ORDER BY xid, id LIMIT $1"
                ),
                &[&i64::from(limit)],
            )?,
            Some(after) => self.query(
                concat!(
                    horizon!(),
                    "SELECT id, public_id, name, at, domain_id, list_id, data FROM outbox_events, horizon
                     WHERE xid < horizon.h AND (xid, id) > (SELECT xid, id FROM outbox_events WHERE id = $1)
                     ORDER BY xid, id LIMIT $2"
                ),
                &[&after.get(), &i64::from(limit)],
            )?,
        };
        rows.iter()
            .map(|r| {
                let (public_id, name, data): (String, String, String) = (get(r, 1)?, get(r, 2)?, get(r, 6)?);
                let name = EventName::parse(&name)
                    .ok_or_else(|| StoreError::Backend(format!("unknown event name {name:?} in the outbox")))?;
                let data = serde_json::from_str(&data)
                    .map_err(|e| StoreError::Backend(format!("event {public_id} holds invalid JSON: {e}")))?;
                Ok(Event {
                    id: EventId::from_stored(get(r, 0)?),
                    public_id,
                    name,
                    at: Timestamp::from_unix_micros(get(r, 3)?),
                    domain_id: get(r, 4)?,
                    list_id: get(r, 5)?,
                    data,
                })
            })
            .collect()
    }
}
