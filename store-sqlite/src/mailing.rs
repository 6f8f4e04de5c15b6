use super::access::{corrupt, email_key, ts};
use super::{SqliteTx, map_err, paged};
use courrier_core::kernel::{DomainName, EmailAddress, ListName, Page, Paged, Timestamp};
use courrier_core::mailing::model::{
    Consent, DeliveryMode, DigestFrequency, DmarcMitigation, Domain, DomainId, DomainStatus, DomainVisibility, ListId,
    ListKind, ListPolicies, ListStatus, ListVisibility, MailingList, Member, MemberFilter, MemberId, MemberStatus,
    NewMember, PendingReason, PostingPolicy, ReplyTo, StatusCounts, SubscriptionPolicy,
};
use courrier_core::mailing::ports::{MailingRepo, NewDomain};
use courrier_core::storage::StoreError;
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, Row, params};
use std::collections::HashMap;

fn parsed<T>(what: &str, raw: &str, parse: impl Fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    parse(raw).ok_or_else(|| corrupt(what, raw))
}

const DOMAIN_COLUMNS: &str = "id, name, status, dkim_selector, default_subscription_policy, dns_ok, dns_checked_at, \
    created_at, updated_at, dkim_key_selector, dkim_public_key";

fn domain_row(r: &Row<'_>) -> rusqlite::Result<Domain> {
    let name: String = r.get(1)?;
    Ok(Domain {
        id: DomainId::from_stored(r.get(0)?),
        name: DomainName::parse(&name).map_err(|_| corrupt("domain name", &name))?,
        status: parsed("domain status", &r.get::<_, String>(2)?, DomainStatus::parse)?,
        dkim_selector: r.get(3)?,
        default_subscription_policy: parsed("policy", &r.get::<_, String>(4)?, SubscriptionPolicy::parse)?,
        dns_ok: r.get::<_, Option<bool>>(5)?,
        dns_checked_at: ts(r.get(6)?),
        created_at: Timestamp::from_unix_micros(r.get(7)?),
        updated_at: Timestamp::from_unix_micros(r.get(8)?),
        dkim_public_key: match (r.get::<_, Option<String>>(9)?, r.get::<_, Option<String>>(10)?) {
            (Some(selector), Some(key)) => Some((selector, key)),
            _ => None,
        },
    })
}

const LIST_COLUMNS: &str = "l.id, l.domain_id, d.name, l.name, l.display_name, l.kind, l.status, l.send_suspended,
    l.subscription_policy, l.posting_policy, l.subject_tag, l.footer_text, l.footer_html, l.reply_to,
    l.bounce_disable_score, l.digest_frequency, l.max_message_kb, l.created_at, l.updated_at, l.dmarc_mitigation,
    l.held_days";

fn list_row(r: &Row<'_>) -> rusqlite::Result<MailingList> {
    let domain: String = r.get(2)?;
    let name: String = r.get(3)?;
    Ok(MailingList {
        id: ListId::from_stored(r.get(0)?),
        domain_id: DomainId::from_stored(r.get(1)?),
        domain: DomainName::parse(&domain).map_err(|_| corrupt("domain name", &domain))?,
        name: ListName::parse(&name).map_err(|_| corrupt("list name", &name))?,
        display_name: r.get(4)?,
        kind: parsed("list kind", &r.get::<_, String>(5)?, ListKind::parse)?,
        status: parsed("list status", &r.get::<_, String>(6)?, ListStatus::parse)?,
        send_suspended: r.get(7)?,
        policies: ListPolicies {
            subscription_policy: parsed("policy", &r.get::<_, String>(8)?, SubscriptionPolicy::parse)?,
            posting_policy: parsed("posting policy", &r.get::<_, String>(9)?, PostingPolicy::parse)?,
            subject_tag: r.get(10)?,
            footer_text: r.get(11)?,
            footer_html: r.get(12)?,
            reply_to: parsed("reply_to", &r.get::<_, String>(13)?, ReplyTo::parse)?,
            bounce_disable_score: r.get(14)?,
            digest_frequency: parsed("digest frequency", &r.get::<_, String>(15)?, DigestFrequency::parse)?,
            max_message_kb: r.get(16)?,
            dmarc_mitigation: parsed("dmarc_mitigation", &r.get::<_, String>(19)?, DmarcMitigation::parse)?,
            held_days: r.get(20)?,
        },
        created_at: Timestamp::from_unix_micros(r.get(17)?),
        updated_at: Timestamp::from_unix_micros(r.get(18)?),
    })
}

pub(super) const MEMBER_COLUMNS: &str =
    "id, list_id, email, display_name, status, pending_reason, delivery_mode, bounce_score,
    subscribed_at, last_bounce_at, disabled_reason, disabled_at, consent_source, consent_at, created_at, updated_at";

pub(super) fn member_row(r: &Row<'_>) -> rusqlite::Result<Member> {
    let email: String = r.get(2)?;
    let reason: Option<String> = r.get(5)?;
    Ok(Member {
        id: MemberId::from_stored(r.get(0)?),
        list_id: ListId::from_stored(r.get(1)?),
        email: EmailAddress::parse(&email).map_err(|_| corrupt("email", &email))?,
        display_name: r.get(3)?,
        status: parsed("member status", &r.get::<_, String>(4)?, MemberStatus::parse)?,
        pending_reason: reason.map(|r| parsed("pending reason", &r, PendingReason::parse)).transpose()?,
        delivery_mode: parsed("delivery mode", &r.get::<_, String>(6)?, DeliveryMode::parse)?,
        bounce_score: r.get(7)?,
        subscribed_at: ts(r.get(8)?),
        last_bounce_at: ts(r.get(9)?),
        disabled_reason: r.get(10)?,
        disabled_at: ts(r.get(11)?),
        consent_source: r.get(12)?,
        consent_at: ts(r.get(13)?),
        created_at: Timestamp::from_unix_micros(r.get(14)?),
        updated_at: Timestamp::from_unix_micros(r.get(15)?),
    })
}

/// The columns a new member is inserted with; `new_member_params` gives their values.
const NEW_MEMBER_COLUMNS: &str = "list_id, email, email_key, display_name, status, pending_reason, delivery_mode,
     subscribed_at, consent_source, consent_at, consent_id, created_at, updated_at";
/// Values a new member binds (`updated_at` reuses `created_at`'s).
const NEW_MEMBER_PARAMS: usize = 12;
/// Rows in one INSERT of an import (12 values each, well under SQLite's 32,766 variables): each
/// statement's start and end cost as much as a row's insert.
const ROWS_PER_INSERT: usize = 256;

/// `VALUES (?1, .., ?12, ?12), (?13, ..)` for `rows` new members.
fn values_rows(rows: usize) -> String {
    let mut sql = String::from("VALUES ");
    for r in 0..rows {
        let b = r * NEW_MEMBER_PARAMS;
        if r > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for p in 1..=NEW_MEMBER_PARAMS {
            sql.push_str(&format!("?{}, ", b + p));
        }
        sql.push_str(&format!("?{})", b + NEW_MEMBER_PARAMS));
    }
    sql
}

/// Where a batch of new members waits, in the writer's memory (`temp_store = MEMORY`), for the
/// one `INSERT ... SELECT` that moves it into `members` (as the sqlite3 shell's import does). An
/// insert into `members` can abort half-way (its foreign keys and CHECKs), so SQLite keeps a
/// statement journal of every page it changes that existed before the statement: with one
/// statement per 256 rows that was each statement's index pages copied anew (a tenth of the
/// insert's CPU), with one per batch each page once. The staging table has no constraint: its
/// multi-row inserts keep no journal.
const STAGING_TABLE: &str = "CREATE TEMP TABLE IF NOT EXISTS member_staging (list_id, email, email_key, display_name,
     status, pending_reason, delivery_mode, subscribed_at, consent_source, consent_at, consent_id, created_at, updated_at)";

/// The staged rows into `members`, in the order they were staged; an address already on the list
/// (or twice in the batch: the first stays) is skipped.
const FROM_STAGING: &str = "INSERT INTO members (list_id, email, email_key, display_name, status, pending_reason,
     delivery_mode, subscribed_at, consent_source, consent_at, consent_id, created_at, updated_at)
     SELECT list_id, email, email_key, display_name, status, pending_reason, delivery_mode, subscribed_at,
       consent_source, consent_at, consent_id, created_at, updated_at
     FROM temp.member_staging WHERE true ORDER BY rowid
     ON CONFLICT (list_id, email_key) DO NOTHING RETURNING id, list_id, email_key";

fn multi_row_insert(rows: usize) -> std::borrow::Cow<'static, str> {
    let sql = |rows| format!("INSERT INTO temp.member_staging ({NEW_MEMBER_COLUMNS}) {}", values_rows(rows));
    // The full-size statement's text is made once (it is the key of the statement cache).
    static FULL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if rows == ROWS_PER_INSERT { FULL.get_or_init(|| sql(rows)).as_str().into() } else { sql(rows).into() }
}

fn new_member_params<'a>(
    m: &'a NewMember,
    (email, key): &'a (String, String),
    now: Timestamp,
) -> [rusqlite::types::ToSqlOutput<'a>; 12] {
    use rusqlite::types::{ToSqlOutput, ValueRef};
    let text = |s: Option<&'a str>| ToSqlOutput::Borrowed(s.map_or(ValueRef::Null, |s| ValueRef::Text(s.as_bytes())));
    let micros = |t: Option<Timestamp>| ToSqlOutput::Owned(t.map_or(Value::Null, |t| Value::Integer(t.unix_micros())));
    [
        ToSqlOutput::Owned(Value::Integer(m.list_id.get())),
        text(Some(email)),
        text(Some(key)),
        text(m.display_name.as_deref()),
        text(Some(m.status.as_str())),
        text(m.pending_reason.map(PendingReason::as_str)),
        text(Some(m.delivery_mode.as_str())),
        micros(m.subscribed_at),
        text(m.consent_source.as_deref()),
        micros(m.consent_at),
        ToSqlOutput::Owned(m.consent_id.map_or(Value::Null, Value::Integer)),
        ToSqlOutput::Owned(Value::Integer(now.unix_micros())),
    ]
}

/// Moves the member count of (list, status, mode) by `n`: inserts count here (migration 12);
/// updates and deletions through their triggers.
fn add_to_tally(
    conn: &rusqlite::Connection,
    list: ListId,
    status: MemberStatus,
    mode: DeliveryMode,
    n: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO member_tallies (list_id, status, delivery_mode, n) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (list_id, status, delivery_mode) DO UPDATE SET n = n + excluded.n",
    )
    .and_then(|mut st| st.execute(params![list.get(), status.as_str(), mode.as_str(), n]))
    .map_err(map_err)?;
    Ok(())
}

/// Placeholders `?n, ?n+1, ...` for `values`, appended to `args`.
fn marks(args: &mut Vec<Value>, values: impl IntoIterator<Item = String>) -> String {
    let mut out = Vec::new();
    for v in values {
        args.push(Value::Text(v));
        out.push(format!("?{}", args.len()));
    }
    out.join(", ")
}

/// The member filter as SQL over `members`, with its arguments (the list's id first).
fn member_where(list: ListId, f: &MemberFilter) -> (String, Vec<Value>) {
    let mut args = vec![Value::Integer(list.get())];
    let mut sql = String::from("list_id = ?1");
    if let Some(s) = f.status {
        args.push(Value::Text(s.as_str().into()));
        sql.push_str(&format!(" AND status = ?{}", args.len()));
    }
    if let Some(m) = f.delivery_mode {
        args.push(Value::Text(m.as_str().into()));
        sql.push_str(&format!(" AND delivery_mode = ?{}", args.len()));
    }
    if let Some(b) = f.min_bounce_score {
        args.push(Value::Integer(i64::from(b)));
        sql.push_str(&format!(" AND bounce_score >= ?{}", args.len()));
    }
    if let Some(needle) = &f.email_contains {
        // instr() on the lowercased address: no wildcards at all, `%` and `_` are plain.
        args.push(Value::Text(needle.clone()));
        sql.push_str(&format!(" AND instr(email_key, ?{}) > 0", args.len()));
    }
    (sql, args)
}

fn list_visibility_sql(visible: &ListVisibility, args: &mut Vec<Value>) -> Option<String> {
    match visible {
        ListVisibility::All => Some(String::new()),
        ListVisibility::Only(names) if names.is_empty() => None,
        ListVisibility::Only(names) => {
            Some(format!(" AND l.name IN ({})", marks(args, names.iter().map(|n| n.as_str().to_owned()))))
        }
    }
}

impl MailingRepo for SqliteTx {
    fn insert_domain(&mut self, d: &NewDomain<'_>, now: Timestamp) -> Result<DomainId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO domains (name, status, dkim_selector, default_subscription_policy, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    d.name.as_str(),
                    d.status.as_str(),
                    d.dkim_selector,
                    d.default_subscription_policy.as_str(),
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(DomainId::from_stored(self.conn().last_insert_rowid()))
    }

    fn domain_by_name(&mut self, name: &DomainName) -> Result<Option<Domain>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE name = ?1"))
            .and_then(|mut st| st.query_row([name.as_str()], domain_row).optional())
            .map_err(map_err)
    }

    fn domain_by_id(&mut self, id: DomainId) -> Result<Option<Domain>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.get()], domain_row).optional())
            .map_err(map_err)
    }

    fn list_domains(
        &mut self,
        visible: &DomainVisibility,
        status: Option<DomainStatus>,
        page: Page,
    ) -> Result<Paged<Domain>, StoreError> {
        let mut args: Vec<Value> = Vec::new();
        let mut clauses: Vec<String> = Vec::new();
        if let DomainVisibility::Only(names) = visible {
            if names.is_empty() {
                return Ok(Paged { items: Vec::new(), total: 0, page });
            }
            clauses.push(format!("name IN ({})", marks(&mut args, names.iter().map(|n| n.as_str().to_owned()))));
        }
        if let Some(s) = status {
            args.push(Value::Text(s.as_str().into()));
            clauses.push(format!("status = ?{}", args.len()));
        }
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        paged(
            self.conn(),
            &format!("SELECT COUNT(*) FROM domains {filter}"),
            &format!("SELECT {DOMAIN_COLUMNS} FROM domains {filter} ORDER BY name"),
            args,
            page,
            domain_row,
        )
    }

    fn set_domain_dkim_key(
        &mut self,
        id: DomainId,
        selector: &str,
        private_sealed: &str,
        public_key: &str,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE domains SET dkim_key_selector = ?2, dkim_private_sealed = ?3, dkim_public_key = ?4 WHERE id = ?1",
            )
            .and_then(|mut st| st.execute(params![id.get(), selector, private_sealed, public_key]))
            .map(drop)
            .map_err(map_err)
    }

    fn domain_dkim_private(&mut self, id: DomainId) -> Result<Option<(String, String)>, StoreError> {
        let row: Option<(Option<String>, Option<String>)> = self
            .conn()
            .prepare_cached("SELECT dkim_key_selector, dkim_private_sealed FROM domains WHERE id = ?1")
            .and_then(|mut st| st.query_row([id.get()], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(map_err)?;
        Ok(match row {
            Some((Some(selector), Some(sealed))) => Some((selector, sealed)),
            _ => None,
        })
    }

    fn update_domain(&mut self, d: &Domain) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE domains SET status = ?2, dkim_selector = ?3, default_subscription_policy = ?4, dns_ok = ?5,
                 dns_checked_at = ?6, updated_at = ?7 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    d.id.get(),
                    d.status.as_str(),
                    d.dkim_selector,
                    d.default_subscription_policy.as_str(),
                    d.dns_ok,
                    d.dns_checked_at.map(Timestamp::unix_micros),
                    d.updated_at.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn insert_list(&mut self, l: &MailingList) -> Result<ListId, StoreError> {
        let p = &l.policies;
        self.conn()
            .prepare_cached(
                "INSERT INTO lists (domain_id, name, display_name, kind, status, send_suspended, subscription_policy,
                   posting_policy, subject_tag, footer_text, footer_html, reply_to, bounce_disable_score,
                   digest_frequency, max_message_kb, created_at, updated_at, dmarc_mitigation)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    l.domain_id.get(),
                    l.name.as_str(),
                    l.display_name,
                    l.kind.as_str(),
                    l.status.as_str(),
                    l.send_suspended,
                    p.subscription_policy.as_str(),
                    p.posting_policy.as_str(),
                    p.subject_tag,
                    p.footer_text,
                    p.footer_html,
                    p.reply_to.as_str(),
                    p.bounce_disable_score,
                    p.digest_frequency.as_str(),
                    p.max_message_kb,
                    l.created_at.unix_micros(),
                    l.updated_at.unix_micros(),
                    p.dmarc_mitigation.as_str()
                ])
            })
            .map_err(map_err)?;
        Ok(ListId::from_stored(self.conn().last_insert_rowid()))
    }

    fn list_by_name(&mut self, domain: &DomainName, name: &ListName) -> Result<Option<MailingList>, StoreError> {
        self.conn()
            .prepare_cached(&format!(
                "SELECT {LIST_COLUMNS} FROM lists l JOIN domains d ON d.id = l.domain_id WHERE d.name = ?1 AND l.name = ?2"
            ))
            .and_then(|mut st| st.query_row([domain.as_str(), name.as_str()], list_row).optional())
            .map_err(map_err)
    }

    fn list_by_id(&mut self, id: ListId) -> Result<Option<MailingList>, StoreError> {
        self.conn()
            .prepare_cached(&format!(
                "SELECT {LIST_COLUMNS} FROM lists l JOIN domains d ON d.id = l.domain_id WHERE l.id = ?1"
            ))
            .and_then(|mut st| st.query_row([id.get()], list_row).optional())
            .map_err(map_err)
    }

    fn lists_of_domain(&mut self, domain: DomainId, visible: &ListVisibility) -> Result<Vec<MailingList>, StoreError> {
        let mut args = vec![Value::Integer(domain.get())];
        let Some(filter) = list_visibility_sql(visible, &mut args) else { return Ok(Vec::new()) };
        self.conn()
            .prepare_cached(&format!(
                "SELECT {LIST_COLUMNS} FROM lists l JOIN domains d ON d.id = l.domain_id
                 WHERE l.domain_id = ?1{filter} ORDER BY l.name"
            ))
            .and_then(|mut st| st.query_map(rusqlite::params_from_iter(&args), list_row)?.collect())
            .map_err(map_err)
    }

    fn update_list(&mut self, l: &MailingList) -> Result<(), StoreError> {
        let p = &l.policies;
        self.conn()
            .prepare_cached(
                "UPDATE lists SET display_name = ?2, kind = ?3, status = ?4, send_suspended = ?5,
                   subscription_policy = ?6, posting_policy = ?7, subject_tag = ?8, footer_text = ?9,
                   footer_html = ?10, reply_to = ?11, bounce_disable_score = ?12, digest_frequency = ?13,
                   max_message_kb = ?14, updated_at = ?15, dmarc_mitigation = ?16
                 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    l.id.get(),
                    l.display_name,
                    l.kind.as_str(),
                    l.status.as_str(),
                    l.send_suspended,
                    p.subscription_policy.as_str(),
                    p.posting_policy.as_str(),
                    p.subject_tag,
                    p.footer_text,
                    p.footer_html,
                    p.reply_to.as_str(),
                    p.bounce_disable_score,
                    p.digest_frequency.as_str(),
                    p.max_message_kb,
                    l.updated_at.unix_micros(),
                    p.dmarc_mitigation.as_str()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn insert_consent(&mut self, c: &Consent) -> Result<i64, StoreError> {
        self.conn()
            .prepare_cached("INSERT INTO consents (source, evidence, ip, at) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut st| st.execute(params![c.source, c.evidence, c.ip, c.at.unix_micros()]))
            .map_err(map_err)?;
        Ok(self.conn().last_insert_rowid())
    }

    fn insert_member(&mut self, m: &NewMember, now: Timestamp) -> Result<MemberId, StoreError> {
        self.conn()
            .prepare_cached({
                // Made once: the text is the statement cache's key, looked up per addition.
                static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
                SQL.get_or_init(|| format!("INSERT INTO members ({NEW_MEMBER_COLUMNS}) {}", values_rows(1)))
            })
            .and_then(|mut st| {
                let texts = (m.email.to_string(), email_key(&m.email));
                st.execute(rusqlite::params_from_iter(new_member_params(m, &texts, now)))
            })
            .map_err(map_err)?;
        let id = self.conn().last_insert_rowid();
        add_to_tally(self.conn(), m.list_id, m.status, m.delivery_mode, 1)?;
        Ok(MemberId::from_stored(id))
    }

    fn insert_members_if_absent(
        &mut self,
        members: &[NewMember],
        now: Timestamp,
    ) -> Result<Vec<Option<MemberId>>, StoreError> {
        let conn = self.conn();
        let mut ids: Vec<Option<MemberId>> = vec![None; members.len()];
        let mut tallies: Vec<((ListId, MemberStatus, DeliveryMode), i64)> = Vec::new();
        conn.execute_batch(STAGING_TABLE).map_err(map_err)?;
        let clear = || conn.prepare_cached("DELETE FROM temp.member_staging").and_then(|mut st| st.execute([]));
        clear().map_err(map_err)?;
        let keys: Vec<(String, String)> = members.iter().map(|m| (m.email.to_string(), email_key(&m.email))).collect();
        // Many rows a statement: each statement's start and end cost as much as a row's insert.
        for (chunk, keys) in members.chunks(ROWS_PER_INSERT).zip(keys.chunks(ROWS_PER_INSERT)) {
            let params = chunk.iter().zip(keys).flat_map(|(m, k)| new_member_params(m, k, now));
            conn.prepare_cached(&multi_row_insert(chunk.len()))
                .and_then(|mut st| st.execute(rusqlite::params_from_iter(params)))
                .map_err(map_err)?;
        }
        // RETURNING names the rows inserted (an address already there is not), in no promised
        // order: match them by list and address, to the first of equal ones (the rows go in in
        // the staging order, so a later equal one is the one refused).
        let mut first: HashMap<(i64, &str), usize> = HashMap::with_capacity(members.len());
        for (i, (m, (_, key))) in members.iter().zip(&keys).enumerate() {
            first.entry((m.list_id.get(), key.as_str())).or_insert(i);
        }
        let mut st = conn.prepare_cached(FROM_STAGING).map_err(map_err)?;
        let mut rows = st.query([]).map_err(map_err)?;
        while let Some(r) = rows.next().map_err(map_err)? {
            let (id, list): (i64, i64) = (r.get(0).map_err(map_err)?, r.get(1).map_err(map_err)?);
            let key = r.get_ref(2).and_then(|v| Ok(v.as_str()?)).map_err(map_err)?;
            let Some(&i) = first.get(&(list, key)) else {
                return Err(StoreError::Backend(format!("the insert returned {key:?}, an address it was not given")));
            };
            ids[i] = Some(MemberId::from_stored(id));
            let m = &members[i];
            let key = (m.list_id, m.status, m.delivery_mode);
            match tallies.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => tallies.push((key, 1)),
            }
        }
        drop(rows);
        drop(st);
        clear().map_err(map_err)?;
        for ((list, status, mode), n) in tallies {
            add_to_tally(conn, list, status, mode, n)?;
        }
        Ok(ids)
    }

    fn member_by_id(&mut self, list: ListId, id: MemberId) -> Result<Option<Member>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = ?1 AND list_id = ?2"))
            .and_then(|mut st| st.query_row([id.get(), list.get()], member_row).optional())
            .map_err(map_err)
    }

    fn find_member(&mut self, id: MemberId) -> Result<Option<Member>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.get()], member_row).optional())
            .map_err(map_err)
    }

    fn member_by_email(&mut self, list: ListId, email: &EmailAddress) -> Result<Option<Member>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = ?1 AND email_key = ?2"))
            .and_then(|mut st| st.query_row(params![list.get(), email_key(email)], member_row).optional())
            .map_err(map_err)
    }

    fn update_member(&mut self, m: &Member, consent_id: Option<i64>, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE members SET display_name = ?2, status = ?3, pending_reason = ?4, delivery_mode = ?5,
                   bounce_score = ?6, subscribed_at = ?7, last_bounce_at = ?8, disabled_reason = ?9,
                   disabled_at = ?10, consent_source = ?11, consent_at = ?12,
                   consent_id = COALESCE(?13, consent_id), updated_at = ?14
                 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    m.id.get(),
                    m.display_name,
                    m.status.as_str(),
                    m.pending_reason.map(PendingReason::as_str),
                    m.delivery_mode.as_str(),
                    m.bounce_score,
                    m.subscribed_at.map(Timestamp::unix_micros),
                    m.last_bounce_at.map(Timestamp::unix_micros),
                    m.disabled_reason,
                    m.disabled_at.map(Timestamp::unix_micros),
                    m.consent_source,
                    m.consent_at.map(Timestamp::unix_micros),
                    consent_id,
                    now.unix_micros()
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn list_members(&mut self, list: ListId, filter: &MemberFilter, page: Page) -> Result<Paged<Member>, StoreError> {
        // A search of a big list: its snapshot finds the page's ids and the total, SQLite the rows.
        if let Some(found) = super::search::search(self.conn(), list, filter, page)? {
            let mut st = self
                .conn()
                .prepare_cached(&format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = ?1"))
                .map_err(map_err)?;
            let items = found
                .ids
                .iter()
                .map(|id| st.query_row([id], member_row))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map_err)?;
            return Ok(Paged { items, total: found.total, page });
        }
        // A deep page of a big list: its snapshot finds where the page starts, SQL reads on from there.
        if let Some(start) = super::search::page_start(self.conn(), list, filter, page)? {
            let (clause, mut args) = member_where(list, filter);
            let total = match start.total {
                Some(n) => n,
                None => {
                    let n: i64 = self
                        .conn()
                        .prepare_cached(&format!("SELECT COALESCE(SUM(n), 0) FROM member_tallies WHERE {clause}"))
                        .and_then(|mut st| st.query_row(rusqlite::params_from_iter(&args), |r| r.get(0)))
                        .map_err(map_err)?;
                    u64::try_from(n).unwrap_or(0)
                }
            };
            let Some(first) = start.first else { return Ok(Paged { items: Vec::new(), total, page }) };
            args.push(Value::Integer(first));
            let first_mark = args.len();
            args.push(Value::Integer(i64::from(page.limit())));
            let items = self
                .conn()
                .prepare_cached(&format!(
                    "SELECT {MEMBER_COLUMNS} FROM members WHERE {clause} AND id >= ?{first_mark} ORDER BY id LIMIT ?{}",
                    first_mark + 1
                ))
                .and_then(|mut st| st.query_map(rusqlite::params_from_iter(&args), member_row)?.collect())
                .map_err(map_err)?;
            return Ok(Paged { items, total, page });
        }
        self.list_members_sql(list, filter, page)
    }
    fn members_after(
        &mut self,
        list: ListId,
        filter: &MemberFilter,
        after: Option<MemberId>,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError> {
        let (clause, mut args) = member_where(list, filter);
        args.push(Value::Integer(after.map_or(0, MemberId::get)));
        let after_mark = args.len();
        args.push(Value::Integer(i64::from(limit)));
        self.conn()
            .prepare_cached(&format!(
                "SELECT {MEMBER_COLUMNS} FROM members WHERE {clause} AND id > ?{after_mark} ORDER BY id LIMIT ?{}",
                after_mark + 1
            ))
            .and_then(|mut st| st.query_map(rusqlite::params_from_iter(&args), member_row)?.collect())
            .map_err(map_err)
    }

    fn member_counts(&mut self, lists: Option<&[ListId]>) -> Result<StatusCounts, StoreError> {
        let (filter, args): (String, Vec<Value>) = match lists {
            None => (String::new(), Vec::new()),
            Some(ids) => {
                let args: Vec<Value> = ids.iter().map(|i| Value::Integer(i.get())).collect();
                let marks: Vec<String> = (1..=args.len()).map(|i| format!("?{i}")).collect();
                (format!("WHERE list_id IN ({})", marks.join(", ")), args)
            }
        };
        let rows: Vec<(String, i64)> = self
            .conn()
            .prepare(&format!("SELECT status, SUM(n) FROM member_tallies {filter} GROUP BY status"))
            .and_then(|mut st| {
                st.query_map(rusqlite::params_from_iter(&args), |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
            })
            .map_err(map_err)?;
        let mut out = StatusCounts::default();
        for (status, n) in rows {
            let status = MemberStatus::parse(&status).ok_or_else(|| map_err(corrupt("member status", &status)))?;
            out.add(status, u64::try_from(n).unwrap_or(0));
        }
        Ok(out)
    }

    fn active_by_mode(&mut self, list: ListId) -> Result<Vec<(DeliveryMode, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = self
            .conn()
            .prepare_cached(
                "SELECT delivery_mode, SUM(n) FROM member_tallies WHERE list_id = ?1 AND status = 'active' GROUP BY delivery_mode",
            )
            .and_then(|mut st| st.query_map([list.get()], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(map_err)?;
        rows.into_iter()
            .map(|(m, n)| {
                let mode = DeliveryMode::parse(&m).ok_or_else(|| map_err(corrupt("delivery mode", &m)))?;
                Ok((mode, u64::try_from(n).unwrap_or(0)))
            })
            .collect()
    }

    fn count_status(&mut self, list: ListId, status: MemberStatus) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn()
            .prepare_cached("SELECT COALESCE(SUM(n), 0) FROM member_tallies WHERE list_id = ?1 AND status = ?2")
            .and_then(|mut st| st.query_row(params![list.get(), status.as_str()], |r| r.get(0)))
            .map_err(map_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

impl SqliteTx {
    /// The listing in SQL alone (`instr` for a search): small lists, and whenever the snapshot
    /// cannot answer for this transaction's view.
    pub(super) fn list_members_sql(
        &self,
        list: ListId,
        filter: &MemberFilter,
        page: Page,
    ) -> Result<Paged<Member>, StoreError> {
        let (clause, args) = member_where(list, filter);
        // Status and mode alone: the tallies answer (a few rows, not a count of a million).
        let counted_by_tally = filter.min_bounce_score.is_none() && filter.email_contains.is_none();
        let count_sql = if counted_by_tally {
            format!("SELECT COALESCE(SUM(n), 0) FROM member_tallies WHERE {clause}")
        } else {
            format!("SELECT COUNT(*) FROM members WHERE {clause}")
        };
        let select_sql = format!("SELECT {MEMBER_COLUMNS} FROM members WHERE {clause} ORDER BY id");
        paged(self.conn(), &count_sql, &select_sql, args, page, member_row)
    }
}
