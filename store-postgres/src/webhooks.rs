//! Webhooks and the leased queue of their deliveries on PostgreSQL (the SQLite adapter's
//! `webhooks.rs`).

use super::lease::LeasedQueue;
use super::mailing::{parsed, ts};
use super::{PgTx, corrupt, get};
use courrier_core::kernel::{Event, EventId, Timestamp};
use courrier_core::mailing::model::{Delivery, DeliveryId, DeliveryState, DomainId, ListId, Webhook, WebhookId};
use courrier_core::mailing::ports::{CallResult, NewWebhook, WebhookRepo};
use courrier_core::storage::StoreError;
use courrier_store_sql::mailing_columns;
use postgres::Row;
use std::sync::LazyLock;

const COLUMNS: &str = "id, url, events, domain_id, list_id, secret_sealed, created_by, created_at, disabled_at, \
                       last_success_at, last_error, last_error_at";

/// Deliveries waiting to be POSTed: a claim takes the due deliveries of enabled webhooks, oldest
/// due first, skipping the rows another claim holds.
pub(super) static DELIVERIES: LazyLock<LeasedQueue> = LazyLock::new(|| {
    LeasedQueue::new(
        "webhook_deliveries",
        "state = 'queued'",
        "SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
         WHERE d.state = 'queued' AND d.next_attempt_at <= $1 AND w.disabled_at IS NULL
         ORDER BY d.next_attempt_at, d.id LIMIT $3
         FOR UPDATE OF d SKIP LOCKED",
        "id, webhook_id, event_public_id, event_name, body, attempts, created_at",
    )
});

fn webhook_row(r: &Row) -> Result<Webhook, StoreError> {
    let events = mailing_columns::events(&get::<String>(r, 2)?).map_err(|c| corrupt(c.what, &c.value))?;
    Ok(Webhook {
        id: WebhookId::from_stored(get(r, 0)?),
        url: get(r, 1)?,
        events,
        domain_id: get::<Option<i64>>(r, 3)?.map(DomainId::from_stored),
        list_id: get::<Option<i64>>(r, 4)?.map(ListId::from_stored),
        secret_sealed: get(r, 5)?,
        created_by: get(r, 6)?,
        created_at: Timestamp::from_unix_micros(get(r, 7)?),
        disabled_at: ts(get(r, 8)?),
        last_success_at: ts(get(r, 9)?),
        last_error: get(r, 10)?,
        last_error_at: ts(get(r, 11)?),
    })
}

impl WebhookRepo for PgTx {
    fn insert_webhook(&mut self, w: &NewWebhook<'_>, now: Timestamp) -> Result<WebhookId, StoreError> {
        let row = self.query_one(
            "INSERT INTO webhooks (url, events, domain_id, list_id, secret_sealed, created_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[
                &w.url,
                &mailing_columns::events_column(w.events),
                &w.domain_id.map(DomainId::get),
                &w.list_id.map(ListId::get),
                &w.secret_sealed,
                &w.created_by,
                &now.unix_micros(),
            ],
        )?;
        Ok(WebhookId::from_stored(get(&row, 0)?))
    }

    fn webhook_by_id(&mut self, id: WebhookId) -> Result<Option<Webhook>, StoreError> {
        let row = self.query_opt(&format!("SELECT {COLUMNS} FROM webhooks WHERE id = $1"), &[&id.get()])?;
        row.as_ref().map(webhook_row).transpose()
    }

    fn all_webhooks(&mut self) -> Result<Vec<Webhook>, StoreError> {
        let rows = self.query(&format!("SELECT {COLUMNS} FROM webhooks ORDER BY id"), &[])?;
        rows.iter().map(webhook_row).collect()
    }

    fn delete_webhook(&mut self, id: WebhookId) -> Result<bool, StoreError> {
        Ok(self.execute("DELETE FROM webhooks WHERE id = $1", &[&id.get()])? > 0)
    }

    fn record_call(&mut self, id: WebhookId, result: CallResult<'_>, now: Timestamp) -> Result<(), StoreError> {
        let (id, now) = (id.get(), now.unix_micros());
        match result {
            CallResult::Success => {
                self.execute("UPDATE webhooks SET last_success_at = $2 WHERE id = $1", &[&id, &now])?
            }
            CallResult::Error(e) => {
                self.execute("UPDATE webhooks SET last_error = $3, last_error_at = $2 WHERE id = $1", &[&id, &now, &e])?
            }
            CallResult::Gone(e) => self.execute(
                "UPDATE webhooks SET last_error = $3, last_error_at = $2, disabled_at = COALESCE(disabled_at, $2)
                 WHERE id = $1",
                &[&id, &now, &e],
            )?,
        };
        Ok(())
    }

    fn webhook_cursor(&mut self) -> Result<Option<EventId>, StoreError> {
        let row = self.query_opt("SELECT event_id FROM webhook_cursor WHERE id = 1", &[])?;
        let at: Option<i64> = row.map(|r| get(&r, 0)).transpose()?;
        Ok(at.filter(|n| *n > 0).map(EventId::from_stored))
    }

    /// Forward in the outbox's reading order (`outbox.rs`: by writing transaction, then id), not
    /// by id: an event read after another may have the smaller id. Positions of events the outbox
    /// does not hold (removed by hand) are compared by id.
    fn set_webhook_cursor(&mut self, to: EventId) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO webhook_cursor (id, event_id) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET event_id = excluded.event_id
             WHERE COALESCE(
                 (SELECT (n.xid, n.id) > (c.xid, c.id) FROM outbox_events c, outbox_events n
                  WHERE c.id = webhook_cursor.event_id AND n.id = excluded.event_id),
                 excluded.event_id > webhook_cursor.event_id)",
            &[&to.get()],
        )?;
        Ok(())
    }

    fn enqueue_delivery(
        &mut self,
        webhook: WebhookId,
        event: &Event,
        body: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO webhook_deliveries (webhook_id, event_id, event_public_id, event_name, body, state,
                 next_attempt_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'queued', $6, $6, $6)
             ON CONFLICT (webhook_id, event_id) DO NOTHING",
            &[&webhook.get(), &event.id.get(), &event.public_id, &event.name.as_str(), &body, &now.unix_micros()],
        )?;
        Ok(())
    }

    fn claim_deliveries(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let rows = DELIVERIES.claim(self, &[&now.unix_micros(), &lease_until.unix_micros(), &i64::from(limit)])?;
        rows.iter()
            .map(|r| {
                Ok(Delivery {
                    id: DeliveryId::from_stored(get(r, 0)?),
                    webhook_id: WebhookId::from_stored(get(r, 1)?),
                    event_public_id: get(r, 2)?,
                    event_name: get(r, 3)?,
                    body: get(r, 4)?,
                    attempts: u32::try_from(get::<i64>(r, 5)?).unwrap_or(u32::MAX),
                    created_at: Timestamp::from_unix_micros(get(r, 6)?),
                })
            })
            .collect()
    }

    fn requeue_expired_deliveries(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        DELIVERIES.requeue_expired(self, now)
    }

    fn finish_delivery(
        &mut self,
        id: DeliveryId,
        state: DeliveryState,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        DELIVERIES.finish(self, id.get(), state.as_str(), next_attempt_at, error, now)
    }

    fn deliveries_waiting(&mut self, now: Timestamp) -> Result<bool, StoreError> {
        DELIVERIES.due(self, now)
    }

    fn release_delivery(&mut self, id: DeliveryId, now: Timestamp) -> Result<(), StoreError> {
        DELIVERIES.release(self, id.get(), now)
    }

    fn delivery_counts(&mut self, webhook: WebhookId) -> Result<Vec<(DeliveryState, u64)>, StoreError> {
        let rows = self.query(
            "SELECT state, COUNT(*) FROM webhook_deliveries WHERE webhook_id = $1 GROUP BY state ORDER BY state",
            &[&webhook.get()],
        )?;
        rows.iter()
            .map(|r| {
                Ok((
                    parsed(r, 0, "delivery state", DeliveryState::parse)?,
                    u64::try_from(get::<i64>(r, 1)?).unwrap_or(0),
                ))
            })
            .collect()
    }
}
