use super::{SqliteTx, map_err};
use courrier_core::kernel::{Actor, AuditEntry, AuditFilter, AuditId, NewAuditEntry, Outcome, Page, Paged, Timestamp};
use courrier_core::storage::{AuditRepo, StoreError};
use rusqlite::types::Value;

impl AuditRepo for SqliteTx {
    fn append_audit(&mut self, e: &NewAuditEntry) -> Result<AuditId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO audit_log (at, request_id, actor_user_id, actor_key_id, actor_member_id, action, target, outcome)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut st| {
                st.execute(rusqlite::params![
                    e.at.unix_micros(),
                    e.request_id.as_str(),
                    e.actor.user_id,
                    e.actor.key_id,
                    e.actor.member_id,
                    e.action,
                    e.target,
                    e.outcome.as_str(),
                ])
            })
            .map_err(map_err)?;
        Ok(AuditId::from_stored(self.conn().last_insert_rowid()))
    }

    fn list_audit(&mut self, f: &AuditFilter, page: Page) -> Result<Paged<AuditEntry>, StoreError> {
        let mut clauses = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        if let Some(action) = &f.action {
            args.push(Value::Text(action.clone()));
            clauses.push(format!("action = ?{}", args.len()));
        }
        if let Some(user) = f.actor_user_id {
            args.push(Value::Integer(user));
            clauses.push(format!("actor_user_id = ?{}", args.len()));
        }
        if let Some(since) = f.since {
            args.push(Value::Integer(since.unix_micros()));
            clauses.push(format!("at >= ?{}", args.len()));
        }
        if let Some(until) = f.until {
            args.push(Value::Integer(until.unix_micros()));
            clauses.push(format!("at <= ?{}", args.len()));
        }
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let conn = self.conn();
        let total: i64 = conn
            .prepare_cached(&format!("SELECT COUNT(*) FROM audit_log {filter}"))
            .and_then(|mut st| st.query_row(rusqlite::params_from_iter(&args), |r| r.get(0)))
            .map_err(map_err)?;
        let mut window = args.clone();
        window.push(Value::Integer(i64::from(page.limit())));
        window.push(Value::Integer(i64::try_from(page.offset()).unwrap_or(i64::MAX)));
        let n = args.len();
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT id, at, request_id, actor_user_id, actor_key_id, action, target, outcome, actor_member_id
                 FROM audit_log {filter} ORDER BY at DESC, id DESC LIMIT ?{} OFFSET ?{}",
                n + 1,
                n + 2
            ))
            .map_err(map_err)?;
        let items = st
            .query_map(rusqlite::params_from_iter(&window), |r| {
                let outcome: String = r.get(7)?;
                Ok(AuditEntry {
                    id: AuditId::from_stored(r.get(0)?),
                    at: Timestamp::from_unix_micros(r.get(1)?),
                    request_id: r.get(2)?,
                    actor: Actor { user_id: r.get(3)?, key_id: r.get(4)?, member_id: r.get(8)? },
                    action: r.get(5)?,
                    target: r.get(6)?,
                    // The CHECK constraint admits only the three spellings.
                    outcome: Outcome::parse(&outcome).unwrap_or(Outcome::Done),
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(map_err)?;
        Ok(Paged { items, total: u64::try_from(total).unwrap_or(0), page })
    }
}
