use super::{PgTx, get};
use courrier_core::kernel::{Actor, AuditEntry, AuditFilter, AuditId, NewAuditEntry, Outcome, Page, Paged, Timestamp};
use courrier_core::storage::{AuditRepo, StoreError};
use postgres::types::ToSql;

impl AuditRepo for PgTx {
    fn append_audit(&mut self, e: &NewAuditEntry) -> Result<AuditId, StoreError> {
        let row = self.query_one(
            "INSERT INTO audit_log (at, request_id, actor_user_id, actor_key_id, actor_member_id, action, target, outcome)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            &[
                &e.at.unix_micros(),
                &e.request_id.as_str(),
                &e.actor.user_id,
                &e.actor.key_id,
                &e.actor.member_id,
                &e.action,
                &e.target,
                &e.outcome.as_str(),
            ],
        )?;
        Ok(AuditId::from_stored(get(&row, 0)?))
    }

    fn list_audit(&mut self, f: &AuditFilter, page: Page) -> Result<Paged<AuditEntry>, StoreError> {
        let since = f.since.map(Timestamp::unix_micros);
        let until = f.until.map(Timestamp::unix_micros);
        let mut clauses = Vec::new();
        let mut args: Vec<&(dyn ToSql + Sync)> = Vec::new();
        if let Some(action) = &f.action {
            args.push(action);
            clauses.push(format!("action = ${}", args.len()));
        }
        if let Some(user) = &f.actor_user_id {
            args.push(user);
            clauses.push(format!("actor_user_id = ${}", args.len()));
        }
        if let Some(since) = &since {
            args.push(since);
            clauses.push(format!("at >= ${}", args.len()));
        }
        if let Some(until) = &until {
            args.push(until);
            clauses.push(format!("at <= ${}", args.len()));
        }
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        super::paged(
            self,
            &format!("SELECT COUNT(*) FROM audit_log {filter}"),
            &format!(
                "SELECT id, at, request_id, actor_user_id, actor_key_id, action, target, outcome, actor_member_id
                 FROM audit_log {filter} ORDER BY at DESC, id DESC"
            ),
            &args,
            page,
            |r| {
                let outcome: String = get(r, 7)?;
                Ok(AuditEntry {
                    id: AuditId::from_stored(get(r, 0)?),
                    at: Timestamp::from_unix_micros(get(r, 1)?),
                    request_id: get(r, 2)?,
                    actor: Actor { user_id: get(r, 3)?, key_id: get(r, 4)?, member_id: get(r, 8)? },
                    action: get(r, 5)?,
                    target: get(r, 6)?,
                    outcome: Outcome::parse(&outcome).ok_or_else(|| super::corrupt("audit outcome", &outcome))?,
                })
            },
        )
    }
}
