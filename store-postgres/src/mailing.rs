//! Domains, lists and members on PostgreSQL (the SQLite adapter's `mailing.rs`). Member counts
//! come from `member_tallies`, kept by statement triggers (migration 4); a substring search of
//! addresses is a `LIKE` served by the trigram index.

use super::{PgTx, corrupt, get, paged};
use courrier_core::kernel::{DomainName, EmailAddress, ListName, Page, Paged, Timestamp};
use courrier_core::mailing::model::{
    Consent, DeliveryMode, DigestFrequency, DmarcMitigation, Domain, DomainId, DomainStatus, DomainVisibility, ListId,
    ListKind, ListPolicies, ListStatus, ListVisibility, MailingList, Member, MemberFilter, MemberId, MemberStatus,
    NewMember, PendingReason, PostingPolicy, ReplyTo, StatusCounts, SubscriptionPolicy,
};
use courrier_core::mailing::ports::{MailingRepo, NewDomain};
use courrier_core::storage::StoreError;
pub(super) use courrier_store_sql::members::{address, email_key};
pub(super) use courrier_store_sql::sql::ts;
use postgres::Row;
use postgres::types::ToSql;
use std::collections::HashMap;

/// A text column read through a wire enum's `parse`.
pub(super) fn parsed<T>(r: &Row, i: usize, what: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, StoreError> {
    let raw: String = get(r, i)?;
    parse(&raw).ok_or_else(|| corrupt(what, &raw))
}

/// A BIGINT column that holds a `u32` of the model.
pub(super) fn small(r: &Row, i: usize, what: &str) -> Result<u32, StoreError> {
    let v: i64 = get(r, i)?;
    u32::try_from(v).map_err(|_| corrupt(what, &v.to_string()))
}

pub(super) fn count(r: &Row) -> Result<u64, StoreError> {
    Ok(u64::try_from(get::<i64>(r, 0)?).unwrap_or(0))
}

/// The ids of `lists` as one array parameter.
pub(super) fn ids(lists: &[ListId]) -> Vec<i64> {
    lists.iter().map(|l| l.get()).collect()
}

/// The id an `INSERT ... ON CONFLICT DO NOTHING RETURNING id` gave back; no row is a uniqueness
/// rule it would have broken ([`StoreError::Duplicate`]), and the transaction goes on: no
/// savepoint (two round trips) is needed to survive a conflict that is not raised.
pub(super) fn insert_id(tx: &mut PgTx, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<i64, StoreError> {
    debug_assert!(sql.contains("ON CONFLICT DO NOTHING"), "{sql}");
    match tx.query_opt(sql, params)? {
        Some(row) => get(&row, 0),
        None => Err(StoreError::Duplicate),
    }
}

const DOMAIN_COLUMNS: &str = "id, name, status, dkim_selector, default_subscription_policy, dns_ok, dns_checked_at, \
    created_at, updated_at, dkim_key_selector, dkim_public_key";

fn domain_row(r: &Row) -> Result<Domain, StoreError> {
    let name: String = get(r, 1)?;
    Ok(Domain {
        id: DomainId::from_stored(get(r, 0)?),
        name: DomainName::parse(&name).map_err(|_| corrupt("domain name", &name))?,
        status: parsed(r, 2, "domain status", DomainStatus::parse)?,
        dkim_selector: get(r, 3)?,
        default_subscription_policy: parsed(r, 4, "policy", SubscriptionPolicy::parse)?,
        dns_ok: get(r, 5)?,
        dns_checked_at: ts(get(r, 6)?),
        created_at: Timestamp::from_unix_micros(get(r, 7)?),
        updated_at: Timestamp::from_unix_micros(get(r, 8)?),
        dkim_public_key: match (get::<Option<String>>(r, 9)?, get::<Option<String>>(r, 10)?) {
            (Some(selector), Some(key)) => Some((selector, key)),
            _ => None,
        },
    })
}

pub(super) const LIST_COLUMNS: &str = "l.id, l.domain_id, d.name, l.name, l.display_name, l.kind, l.status, \
    l.send_suspended, l.subscription_policy, l.posting_policy, l.subject_tag, l.footer_text, l.footer_html, \
    l.reply_to, l.bounce_disable_score, l.digest_frequency, l.max_message_kb, l.created_at, l.updated_at, \
    l.dmarc_mitigation, l.held_days";

pub(super) fn list_row(r: &Row) -> Result<MailingList, StoreError> {
    let domain: String = get(r, 2)?;
    let name: String = get(r, 3)?;
    Ok(MailingList {
        id: ListId::from_stored(get(r, 0)?),
        domain_id: DomainId::from_stored(get(r, 1)?),
        domain: DomainName::parse(&domain).map_err(|_| corrupt("domain name", &domain))?,
        name: ListName::parse(&name).map_err(|_| corrupt("list name", &name))?,
        display_name: get(r, 4)?,
        kind: parsed(r, 5, "list kind", ListKind::parse)?,
        status: parsed(r, 6, "list status", ListStatus::parse)?,
        send_suspended: get(r, 7)?,
        policies: ListPolicies {
            subscription_policy: parsed(r, 8, "policy", SubscriptionPolicy::parse)?,
            posting_policy: parsed(r, 9, "posting policy", PostingPolicy::parse)?,
            subject_tag: get(r, 10)?,
            footer_text: get(r, 11)?,
            footer_html: get(r, 12)?,
            reply_to: parsed(r, 13, "reply_to", ReplyTo::parse)?,
            bounce_disable_score: small(r, 14, "bounce_disable_score")?,
            digest_frequency: parsed(r, 15, "digest frequency", DigestFrequency::parse)?,
            max_message_kb: small(r, 16, "max_message_kb")?,
            dmarc_mitigation: parsed(r, 19, "dmarc_mitigation", DmarcMitigation::parse)?,
            held_days: small(r, 20, "held_days")?,
        },
        created_at: Timestamp::from_unix_micros(get(r, 17)?),
        updated_at: Timestamp::from_unix_micros(get(r, 18)?),
    })
}

pub(super) const MEMBER_COLUMNS: &str = "id, list_id, email, display_name, status, pending_reason, delivery_mode, \
    bounce_score, subscribed_at, last_bounce_at, disabled_reason, disabled_at, consent_source, consent_at, \
    created_at, updated_at";

pub(super) fn member_row(r: &Row) -> Result<Member, StoreError> {
    let email: String = get(r, 2)?;
    let reason: Option<String> = get(r, 5)?;
    Ok(Member {
        id: MemberId::from_stored(get(r, 0)?),
        list_id: ListId::from_stored(get(r, 1)?),
        email: address(&email)?,
        display_name: get(r, 3)?,
        status: parsed(r, 4, "member status", MemberStatus::parse)?,
        pending_reason: reason
            .map(|raw| PendingReason::parse(&raw).ok_or_else(|| corrupt("pending reason", &raw)))
            .transpose()?,
        delivery_mode: parsed(r, 6, "delivery mode", DeliveryMode::parse)?,
        bounce_score: small(r, 7, "bounce score")?,
        subscribed_at: ts(get(r, 8)?),
        last_bounce_at: ts(get(r, 9)?),
        disabled_reason: get(r, 10)?,
        disabled_at: ts(get(r, 11)?),
        consent_source: get(r, 12)?,
        consent_at: ts(get(r, 13)?),
        created_at: Timestamp::from_unix_micros(get(r, 14)?),
        updated_at: Timestamp::from_unix_micros(get(r, 15)?),
    })
}

/// The columns of a list its owners may change, in the order of [`list_fields`].
const LIST_FIELDS: &str = "display_name, kind, status, send_suspended, subscription_policy, posting_policy, \
    subject_tag, footer_text, footer_html, reply_to, bounce_disable_score, digest_frequency, max_message_kb, \
    dmarc_mitigation";

/// The values of [`LIST_FIELDS`] for `l`.
fn list_fields(l: &MailingList) -> [Box<dyn ToSql + Sync>; 14] {
    let p = &l.policies;
    [
        Box::new(l.display_name.clone()),
        Box::new(l.kind.as_str()),
        Box::new(l.status.as_str()),
        Box::new(l.send_suspended),
        Box::new(p.subscription_policy.as_str()),
        Box::new(p.posting_policy.as_str()),
        Box::new(p.subject_tag.clone()),
        Box::new(p.footer_text.clone()),
        Box::new(p.footer_html.clone()),
        Box::new(p.reply_to.as_str()),
        Box::new(i64::from(p.bounce_disable_score)),
        Box::new(p.digest_frequency.as_str()),
        Box::new(i64::from(p.max_message_kb)),
        Box::new(p.dmarc_mitigation.as_str()),
    ]
}

/// Rows one import statement inserts (its arrays unnested): the statement's round trip and
/// planning are paid once per this many members.
const ROWS_PER_INSERT: usize = 1024;

/// An import's rows as one array per column (`unnest`ed by the statement, in order).
#[derive(Default)]
struct Columns<'a> {
    list_id: Vec<i64>,
    email: Vec<String>,
    email_key: Vec<String>,
    display_name: Vec<Option<&'a str>>,
    status: Vec<&'static str>,
    pending_reason: Vec<Option<&'static str>>,
    delivery_mode: Vec<&'static str>,
    subscribed_at: Vec<Option<i64>>,
    consent_source: Vec<Option<&'a str>>,
    consent_at: Vec<Option<i64>>,
    consent_id: Vec<Option<i64>>,
}

impl<'a> Columns<'a> {
    fn push(&mut self, m: &'a NewMember) {
        self.list_id.push(m.list_id.get());
        self.email.push(m.email.to_string());
        self.email_key.push(email_key(&m.email));
        self.display_name.push(m.display_name.as_deref());
        self.status.push(m.status.as_str());
        self.pending_reason.push(m.pending_reason.map(PendingReason::as_str));
        self.delivery_mode.push(m.delivery_mode.as_str());
        self.subscribed_at.push(m.subscribed_at.map(Timestamp::unix_micros));
        self.consent_source.push(m.consent_source.as_deref());
        self.consent_at.push(m.consent_at.map(Timestamp::unix_micros));
        self.consent_id.push(m.consent_id);
    }
}

const NEW_MEMBER_COLUMNS: &str = "list_id, email, email_key, display_name, status, pending_reason, delivery_mode, \
    subscribed_at, consent_source, consent_at, consent_id, created_at, updated_at";

/// The member filter as SQL over `members`, with its arguments after the list's id (`$1`).
fn member_where(f: &MemberFilter) -> (String, Vec<Box<dyn ToSql + Sync>>) {
    let mut args: Vec<Box<dyn ToSql + Sync>> = Vec::new();
    let mut sql = String::from("list_id = $1");
    if let Some(s) = f.status {
        args.push(Box::new(s.as_str()));
        sql.push_str(&format!(" AND status = ${}", args.len() + 1));
    }
    if let Some(m) = f.delivery_mode {
        args.push(Box::new(m.as_str()));
        sql.push_str(&format!(" AND delivery_mode = ${}", args.len() + 1));
    }
    if let Some(b) = f.min_bounce_score {
        args.push(Box::new(i64::from(b)));
        sql.push_str(&format!(" AND bounce_score >= ${}", args.len() + 1));
    }
    if let Some(needle) = &f.email_contains {
        // `%`, `_` and the escape character itself are plain characters of the needle.
        let escaped = needle.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
        args.push(Box::new(format!("%{escaped}%")));
        sql.push_str(&format!(" AND email_key LIKE ${}", args.len() + 1));
    }
    (sql, args)
}

impl MailingRepo for PgTx {
    fn insert_domain(&mut self, d: &NewDomain<'_>, now: Timestamp) -> Result<DomainId, StoreError> {
        let id = insert_id(
            self,
            "INSERT INTO domains (name, status, dkim_selector, default_subscription_policy, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT DO NOTHING RETURNING id",
            &[
                &d.name.as_str(),
                &d.status.as_str(),
                &d.dkim_selector,
                &d.default_subscription_policy.as_str(),
                &now.unix_micros(),
            ],
        )?;
        Ok(DomainId::from_stored(id))
    }

    fn domain_by_name(&mut self, name: &DomainName) -> Result<Option<Domain>, StoreError> {
        let row =
            self.query_opt(&format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE name = $1"), &[&name.as_str()])?;
        row.as_ref().map(domain_row).transpose()
    }

    fn domain_by_id(&mut self, id: DomainId) -> Result<Option<Domain>, StoreError> {
        let row = self.query_opt(&format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE id = $1"), &[&id.get()])?;
        row.as_ref().map(domain_row).transpose()
    }

    fn list_domains(
        &mut self,
        visible: &DomainVisibility,
        status: Option<DomainStatus>,
        page: Page,
    ) -> Result<Paged<Domain>, StoreError> {
        let names: Option<Vec<&str>> = match visible {
            DomainVisibility::All => None,
            DomainVisibility::Only(names) if names.is_empty() => {
                return Ok(Paged { items: Vec::new(), total: 0, page });
            }
            DomainVisibility::Only(names) => Some(names.iter().map(|n| n.as_str()).collect()),
        };
        let status = status.map(DomainStatus::as_str);
        let filter = "WHERE ($1::TEXT[] IS NULL OR name = ANY($1)) AND ($2::TEXT IS NULL OR status = $2)";
        paged(
            self,
            &format!("SELECT COUNT(*) FROM domains {filter}"),
            &format!("SELECT {DOMAIN_COLUMNS} FROM domains {filter} ORDER BY name"),
            &[&names, &status],
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
        self.execute(
            "UPDATE domains SET dkim_key_selector = $2, dkim_private_sealed = $3, dkim_public_key = $4 WHERE id = $1",
            &[&id.get(), &selector, &private_sealed, &public_key],
        )?;
        Ok(())
    }

    fn domain_dkim_private(&mut self, id: DomainId) -> Result<Option<(String, String)>, StoreError> {
        let row =
            self.query_opt("SELECT dkim_key_selector, dkim_private_sealed FROM domains WHERE id = $1", &[&id.get()])?;
        let Some(row) = row else { return Ok(None) };
        Ok(match (get::<Option<String>>(&row, 0)?, get::<Option<String>>(&row, 1)?) {
            (Some(selector), Some(sealed)) => Some((selector, sealed)),
            _ => None,
        })
    }

    fn update_domain(&mut self, d: &Domain) -> Result<(), StoreError> {
        self.execute(
            "UPDATE domains SET status = $2, dkim_selector = $3, default_subscription_policy = $4, dns_ok = $5,
             dns_checked_at = $6, updated_at = $7 WHERE id = $1",
            &[
                &d.id.get(),
                &d.status.as_str(),
                &d.dkim_selector,
                &d.default_subscription_policy.as_str(),
                &d.dns_ok,
                &d.dns_checked_at.map(Timestamp::unix_micros),
                &d.updated_at.unix_micros(),
            ],
        )?;
        Ok(())
    }

    fn insert_list(&mut self, l: &MailingList) -> Result<ListId, StoreError> {
        let (domain_id, name, created_at, updated_at) =
            (l.domain_id.get(), l.name.as_str(), l.created_at.unix_micros(), l.updated_at.unix_micros());
        let fields = list_fields(l);
        let mut args: Vec<&(dyn ToSql + Sync)> = vec![&domain_id, &name];
        args.extend(fields.iter().map(|f| f.as_ref() as &(dyn ToSql + Sync)));
        args.extend([&created_at as &(dyn ToSql + Sync), &updated_at]);
        let id = insert_id(
            self,
            &format!(
                "INSERT INTO lists (domain_id, name, {LIST_FIELDS}, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) ON CONFLICT DO NOTHING RETURNING id"
            ),
            &args,
        )?;
        Ok(ListId::from_stored(id))
    }

    fn list_by_name(&mut self, domain: &DomainName, name: &ListName) -> Result<Option<MailingList>, StoreError> {
        let row = self.query_opt(
            &format!(
                "SELECT {LIST_COLUMNS} FROM lists l JOIN domains d ON d.id = l.domain_id WHERE d.name = $1 AND l.name = $2"
            ),
            &[&domain.as_str(), &name.as_str()],
        )?;
        row.as_ref().map(list_row).transpose()
    }

    fn list_by_id(&mut self, id: ListId) -> Result<Option<MailingList>, StoreError> {
        let row = self.query_opt(
            &format!("SELECT {LIST_COLUMNS} FROM lists l JOIN domains d ON d.id = l.domain_id WHERE l.id = $1"),
            &[&id.get()],
        )?;
        row.as_ref().map(list_row).transpose()
    }

    fn lists_of_domain(&mut self, domain: DomainId, visible: &ListVisibility) -> Result<Vec<MailingList>, StoreError> {
        let names: Option<Vec<&str>> = match visible {
            ListVisibility::All => None,
            ListVisibility::Only(names) if names.is_empty() => return Ok(Vec::new()),
            ListVisibility::Only(names) => Some(names.iter().map(|n| n.as_str()).collect()),
        };
        let rows = self.query(
            &format!(
                "SELECT {LIST_COLUMNS} FROM lists l JOIN domains d ON d.id = l.domain_id
                 WHERE l.domain_id = $1 AND ($2::TEXT[] IS NULL OR l.name = ANY($2)) ORDER BY l.name"
            ),
            &[&domain.get(), &names],
        )?;
        rows.iter().map(list_row).collect()
    }

    fn update_list(&mut self, l: &MailingList) -> Result<(), StoreError> {
        let (id, updated_at) = (l.id.get(), l.updated_at.unix_micros());
        let fields = list_fields(l);
        let mut args: Vec<&(dyn ToSql + Sync)> = vec![&id];
        args.extend(fields.iter().map(|f| f.as_ref() as &(dyn ToSql + Sync)));
        args.push(&updated_at);
        let sets: Vec<String> = LIST_FIELDS.split(", ").enumerate().map(|(i, c)| format!("{c} = ${}", i + 2)).collect();
        self.execute(&format!("UPDATE lists SET {}, updated_at = $16 WHERE id = $1", sets.join(", ")), &args)?;
        Ok(())
    }

    fn insert_consent(&mut self, c: &Consent) -> Result<i64, StoreError> {
        let row = self.query_one(
            "INSERT INTO consents (source, evidence, ip, at) VALUES ($1, $2, $3, $4) RETURNING id",
            &[&c.source, &c.evidence, &c.ip, &c.at.unix_micros()],
        )?;
        get(&row, 0)
    }

    fn insert_member(&mut self, m: &NewMember, now: Timestamp) -> Result<MemberId, StoreError> {
        let id = insert_id(
            self,
            &format!(
                "INSERT INTO members ({NEW_MEMBER_COLUMNS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) ON CONFLICT DO NOTHING RETURNING id"
            ),
            &[
                &m.list_id.get(),
                &m.email.to_string(),
                &email_key(&m.email),
                &m.display_name,
                &m.status.as_str(),
                &m.pending_reason.map(PendingReason::as_str),
                &m.delivery_mode.as_str(),
                &m.subscribed_at.map(Timestamp::unix_micros),
                &m.consent_source,
                &m.consent_at.map(Timestamp::unix_micros),
                &m.consent_id,
                &now.unix_micros(),
            ],
        )?;
        Ok(MemberId::from_stored(id))
    }

    fn insert_members_if_absent(
        &mut self,
        members: &[NewMember],
        now: Timestamp,
    ) -> Result<Vec<Option<MemberId>>, StoreError> {
        let sql = format!(
            "INSERT INTO members ({NEW_MEMBER_COLUMNS})
             SELECT *, $12::BIGINT, $12::BIGINT FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[],
                                            $7::TEXT[], $8::BIGINT[], $9::TEXT[], $10::BIGINT[], $11::BIGINT[])
             ON CONFLICT (list_id, email_key) DO NOTHING RETURNING id, list_id, email_key"
        );
        let mut ids: Vec<Option<MemberId>> = vec![None; members.len()];
        for (c, chunk) in members.chunks(ROWS_PER_INSERT).enumerate() {
            let mut cols = Columns::default();
            chunk.iter().for_each(|m| cols.push(m));
            let rows = self.query(
                &sql,
                &[
                    &cols.list_id,
                    &cols.email,
                    &cols.email_key,
                    &cols.display_name,
                    &cols.status,
                    &cols.pending_reason,
                    &cols.delivery_mode,
                    &cols.subscribed_at,
                    &cols.consent_source,
                    &cols.consent_at,
                    &cols.consent_id,
                    &now.unix_micros(),
                ],
            )?;
            // RETURNING names the rows inserted (an address already there is not), in no promised
            // order: match them by list and address, to the first of equal ones (the rows are
            // inserted in order, so a later equal one is the one refused).
            let mut first: HashMap<(i64, &str), usize> = HashMap::with_capacity(chunk.len());
            for (i, key) in cols.email_key.iter().enumerate() {
                first.entry((cols.list_id[i], key.as_str())).or_insert(i);
            }
            for r in &rows {
                let (id, list, key): (i64, i64, String) = (get(r, 0)?, get(r, 1)?, get(r, 2)?);
                let Some(&i) = first.get(&(list, key.as_str())) else {
                    return Err(StoreError::Backend(format!(
                        "the insert returned {key:?}, an address it was not given"
                    )));
                };
                ids[c * ROWS_PER_INSERT + i] = Some(MemberId::from_stored(id));
            }
        }
        Ok(ids)
    }

    fn member_by_id(&mut self, list: ListId, id: MemberId) -> Result<Option<Member>, StoreError> {
        let row = self.query_opt(
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = $1 AND list_id = $2"),
            &[&id.get(), &list.get()],
        )?;
        row.as_ref().map(member_row).transpose()
    }

    fn find_member(&mut self, id: MemberId) -> Result<Option<Member>, StoreError> {
        let row = self.query_opt(&format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = $1"), &[&id.get()])?;
        row.as_ref().map(member_row).transpose()
    }

    fn member_by_email(&mut self, list: ListId, email: &EmailAddress) -> Result<Option<Member>, StoreError> {
        let row = self.query_opt(
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = $1 AND email_key = $2"),
            &[&list.get(), &email_key(email)],
        )?;
        row.as_ref().map(member_row).transpose()
    }

    fn update_member(&mut self, m: &Member, consent_id: Option<i64>, now: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "UPDATE members SET display_name = $2, status = $3, pending_reason = $4, delivery_mode = $5,
               bounce_score = $6, subscribed_at = $7, last_bounce_at = $8, disabled_reason = $9,
               disabled_at = $10, consent_source = $11, consent_at = $12,
               consent_id = COALESCE($13, consent_id), updated_at = $14
             WHERE id = $1",
            &[
                &m.id.get(),
                &m.display_name,
                &m.status.as_str(),
                &m.pending_reason.map(PendingReason::as_str),
                &m.delivery_mode.as_str(),
                &i64::from(m.bounce_score),
                &m.subscribed_at.map(Timestamp::unix_micros),
                &m.last_bounce_at.map(Timestamp::unix_micros),
                &m.disabled_reason,
                &m.disabled_at.map(Timestamp::unix_micros),
                &m.consent_source,
                &m.consent_at.map(Timestamp::unix_micros),
                &consent_id,
                &now.unix_micros(),
            ],
        )?;
        Ok(())
    }

    fn list_members(&mut self, list: ListId, filter: &MemberFilter, page: Page) -> Result<Paged<Member>, StoreError> {
        let (clause, extra) = member_where(filter);
        let list_id = list.get();
        let mut args: Vec<&(dyn ToSql + Sync)> = vec![&list_id];
        args.extend(extra.iter().map(|a| a.as_ref() as &(dyn ToSql + Sync)));
        // Status and mode alone: the tallies answer (a few rows, not a count of a million).
        let counted_by_tally = filter.min_bounce_score.is_none() && filter.email_contains.is_none();
        let count_sql = if counted_by_tally {
            format!("SELECT COALESCE(SUM(n), 0)::BIGINT FROM member_tallies WHERE {clause}")
        } else {
            format!("SELECT COUNT(*) FROM members WHERE {clause}")
        };
        let select_sql = format!("SELECT {MEMBER_COLUMNS} FROM members WHERE {clause} ORDER BY id");
        if filter.email_contains.is_some() {
            // Planned for this needle, not once for any: a rare substring is found through the
            // trigram index then sorted, a common one by walking the ids until the page is full
            // (a plan made for any needle walks the ids, all of them when the needle is rare).
            self.execute("SET LOCAL plan_cache_mode = force_custom_plan", &[])?;
        }
        paged(self, &count_sql, &select_sql, &args, page, member_row)
    }

    fn members_after(
        &mut self,
        list: ListId,
        filter: &MemberFilter,
        after: Option<MemberId>,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError> {
        let (clause, extra) = member_where(filter);
        let (list_id, after, limit) = (list.get(), after.map_or(0, MemberId::get), i64::from(limit));
        let mut args: Vec<&(dyn ToSql + Sync)> = vec![&list_id];
        args.extend(extra.iter().map(|a| a.as_ref() as &(dyn ToSql + Sync)));
        let n = args.len();
        args.push(&after);
        args.push(&limit);
        let rows = self.query(
            &format!(
                "SELECT {MEMBER_COLUMNS} FROM members WHERE {clause} AND id > ${} ORDER BY id LIMIT ${}",
                n + 1,
                n + 2
            ),
            &args,
        )?;
        rows.iter().map(member_row).collect()
    }

    fn member_counts(&mut self, lists: Option<&[ListId]>) -> Result<StatusCounts, StoreError> {
        let lists = lists.map(ids);
        let rows = self.query(
            "SELECT status, SUM(n)::BIGINT FROM member_tallies
             WHERE $1::BIGINT[] IS NULL OR list_id = ANY($1) GROUP BY status",
            &[&lists],
        )?;
        let mut out = StatusCounts::default();
        for r in &rows {
            let status = parsed(r, 0, "member status", MemberStatus::parse)?;
            out.add(status, u64::try_from(get::<i64>(r, 1)?).unwrap_or(0));
        }
        Ok(out)
    }

    fn active_by_mode(&mut self, list: ListId) -> Result<Vec<(DeliveryMode, u64)>, StoreError> {
        let rows = self.query(
            "SELECT delivery_mode, SUM(n)::BIGINT FROM member_tallies WHERE list_id = $1 AND status = 'active'
             GROUP BY delivery_mode ORDER BY delivery_mode",
            &[&list.get()],
        )?;
        rows.iter()
            .map(|r| {
                Ok((parsed(r, 0, "delivery mode", DeliveryMode::parse)?, u64::try_from(get::<i64>(r, 1)?).unwrap_or(0)))
            })
            .collect()
    }

    fn count_status(&mut self, list: ListId, status: MemberStatus) -> Result<u64, StoreError> {
        let row = self.query_one(
            "SELECT COALESCE(SUM(n), 0)::BIGINT FROM member_tallies WHERE list_id = $1 AND status = $2",
            &[&list.get(), &status.as_str()],
        )?;
        count(&row)
    }
}
