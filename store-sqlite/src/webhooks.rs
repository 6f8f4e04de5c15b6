use super::access::{corrupt, ts};
use super::lease::LeasedQueue;
use super::{SqliteTx, map_err};
use courrier_core::kernel::{Event, EventId, Timestamp};
use courrier_core::mailing::model::{Delivery, DeliveryId, DeliveryState, DomainId, ListId, Webhook, WebhookId};
use courrier_core::mailing::ports::{CallResult, NewWebhook, WebhookRepo};
use courrier_core::storage::StoreError;
use courrier_store_sql::mailing_columns;
use rusqlite::{OptionalExtension, params};
use std::sync::LazyLock;

const COLUMNS: &str = "id, url, events, domain_id, list_id, secret_sealed, created_by, created_at, disabled_at, \
                       last_success_at, last_error, last_error_at";

/// Deliveries waiting to be POSTed, leased to the webhook workers. A claim takes the due
/// deliveries of enabled webhooks, oldest due first.
pub(super) static DELIVERIES: LazyLock<LeasedQueue> = LazyLock::new(|| {
    LeasedQueue::new(
        "webhook_deliveries",
        "state = 'queued'",
        "SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
         WHERE d.state = 'queued' AND d.next_attempt_at <= ?1 AND w.disabled_at IS NULL
         ORDER BY d.next_attempt_at, d.id LIMIT ?3",
        "id, webhook_id, event_public_id, event_name, body, attempts, created_at",
    )
});

fn webhook_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Webhook> {
    let events = mailing_columns::events(&r.get::<_, String>(2)?).map_err(|c| corrupt(c.what, &c.value))?;
    Ok(Webhook {
        id: WebhookId::from_stored(r.get(0)?),
        url: r.get(1)?,
        events,
        domain_id: r.get::<_, Option<i64>>(3)?.map(DomainId::from_stored),
        list_id: r.get::<_, Option<i64>>(4)?.map(ListId::from_stored),
        secret_sealed: r.get(5)?,
        created_by: r.get(6)?,
        created_at: Timestamp::from_unix_micros(r.get(7)?),
        disabled_at: ts(r.get(8)?),
        last_success_at: ts(r.get(9)?),
        last_error: r.get(10)?,
        last_error_at: ts(r.get(11)?),
    })
}

impl WebhookRepo for SqliteTx {
    fn insert_webhook(&mut self, w: &NewWebhook<'_>, now: Timestamp) -> Result<WebhookId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO webhooks (url, events, domain_id, list_id, secret_sealed, created_by, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    w.url,
                    mailing_columns::events_column(w.events),
                    w.domain_id.map(DomainId::get),
                    w.list_id.map(ListId::get),
                    w.secret_sealed,
                    w.created_by,
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(WebhookId::from_stored(self.conn().last_insert_rowid()))
    }

    fn webhook_by_id(&mut self, id: WebhookId) -> Result<Option<Webhook>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM webhooks WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.get()], webhook_row).optional())
            .map_err(map_err)
    }

    fn all_webhooks(&mut self) -> Result<Vec<Webhook>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM webhooks ORDER BY id"))
            .and_then(|mut st| st.query_map([], webhook_row)?.collect())
            .map_err(map_err)
    }

    fn delete_webhook(&mut self, id: WebhookId) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM webhooks WHERE id = ?1")
            .and_then(|mut st| st.execute([id.get()]))
            .map_err(map_err)?;
        Ok(n > 0)
    }

    fn record_call(&mut self, id: WebhookId, result: CallResult<'_>, now: Timestamp) -> Result<(), StoreError> {
        let (sql, error) = match result {
            CallResult::Success => ("UPDATE webhooks SET last_success_at = ?2 WHERE id = ?1", None),
            CallResult::Error(e) => ("UPDATE webhooks SET last_error = ?3, last_error_at = ?2 WHERE id = ?1", Some(e)),
            CallResult::Gone(e) => (
                "UPDATE webhooks SET last_error = ?3, last_error_at = ?2, disabled_at = COALESCE(disabled_at, ?2)
                 WHERE id = ?1",
                Some(e),
            ),
        };
        self.conn()
            .prepare_cached(sql)
            .and_then(|mut st| match error {
                None => st.execute(params![id.get(), now.unix_micros()]),
                Some(e) => st.execute(params![id.get(), now.unix_micros(), e]),
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn webhook_cursor(&mut self) -> Result<Option<EventId>, StoreError> {
        let at: Option<i64> = self
            .conn()
            .prepare_cached("SELECT event_id FROM webhook_cursor WHERE id = 1")
            .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
            .map_err(map_err)?;
        Ok(at.filter(|n| *n > 0).map(EventId::from_stored))
    }

    fn set_webhook_cursor(&mut self, to: EventId) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO webhook_cursor (id, event_id) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET event_id = MAX(event_id, ?1)",
            )
            .and_then(|mut st| st.execute([to.get()]))
            .map_err(map_err)?;
        Ok(())
    }

    fn enqueue_delivery(
        &mut self,
        webhook: WebhookId,
        event: &Event,
        body: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO webhook_deliveries (webhook_id, event_id, event_public_id, event_name, body, state,
                     next_attempt_at, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?6, ?6)
                 ON CONFLICT (webhook_id, event_id) DO NOTHING",
            )
            .and_then(|mut st| {
                st.execute(params![
                    webhook.get(),
                    event.id.get(),
                    event.public_id,
                    event.name.as_str(),
                    body,
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn claim_deliveries(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let args = params![now.unix_micros(), lease_until.unix_micros(), i64::from(limit)];
        DELIVERIES.claim(self.conn(), args, |r| {
            Ok(Delivery {
                id: DeliveryId::from_stored(r.get(0)?),
                webhook_id: WebhookId::from_stored(r.get(1)?),
                event_public_id: r.get(2)?,
                event_name: r.get(3)?,
                body: r.get(4)?,
                attempts: u32::try_from(r.get::<_, i64>(5)?).unwrap_or(u32::MAX),
                created_at: Timestamp::from_unix_micros(r.get(6)?),
            })
        })
    }

    fn requeue_expired_deliveries(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        DELIVERIES.requeue_expired(self.conn(), now)
    }

    fn finish_delivery(
        &mut self,
        id: DeliveryId,
        state: DeliveryState,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        DELIVERIES.finish(self.conn(), id.get(), state.as_str(), next_attempt_at, error, now)
    }

    fn deliveries_waiting(&mut self, now: Timestamp) -> Result<bool, StoreError> {
        DELIVERIES.due(self.conn(), now)
    }

    fn release_delivery(&mut self, id: DeliveryId, now: Timestamp) -> Result<(), StoreError> {
        DELIVERIES.release(self.conn(), id.get(), now)
    }

    fn delivery_counts(&mut self, webhook: WebhookId) -> Result<Vec<(DeliveryState, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = self
            .conn()
            .prepare_cached("SELECT state, COUNT(*) FROM webhook_deliveries WHERE webhook_id = ?1 GROUP BY state")
            .and_then(|mut st| st.query_map([webhook.get()], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(map_err)?;
        rows.into_iter()
            .map(|(s, n)| {
                let state = DeliveryState::parse(&s).ok_or_else(|| map_err(corrupt("delivery state", &s)))?;
                Ok((state, u64::try_from(n).unwrap_or(0)))
            })
            .collect()
    }
}
