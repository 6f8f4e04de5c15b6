//! CSV import: a document streamed row by row (never whole in memory), each row validated on
//! its own, committed in batches so that a cut-off upload keeps the rows before the cut.

use super::MailingError;
use super::Service;
use super::lists;
use super::model::{Consent, DeliveryMode, MailingList, NewMember};
use super::state::{MemberState, Trigger};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::kernel::{DomainName, EmailAddress, EventName, ListName, Timestamp};
use crate::storage::in_write;
use std::io::Read;
use std::time::{Duration, Instant};

/// The contract's cap on an imported document.
pub const MAX_IMPORT_BYTES: u64 = 25 * 1024 * 1024;
/// Rows per write transaction: large enough that the fsync of a commit is spread thin, small
/// enough that the write lock is never held long (other writers wait at most one batch).
const BATCH_ROWS: usize = 20_000;
const MAX_SAMPLES: usize = 10;

/// Raised by the reader handed to [`import`] when the document passes its size cap; the rows
/// read before it stay imported.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the document passed the size limit")]
pub struct SizeLimitExceeded;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// The record's number, the header being 1 (its line too, unless quoted fields span lines).
    pub row: u64,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub total: u64,
    pub added: u64,
    pub skipped: u64,
    pub errors: u64,
    pub mode_coerced: u64,
    pub error_samples: Vec<RowError>,
}

impl ImportReport {
    fn error(&mut self, row: u64, reason: String) {
        self.errors += 1;
        if self.error_samples.len() < MAX_SAMPLES {
            self.error_samples.push(RowError { row, reason });
        }
    }
}

/// The consent that covers every row of an import.
#[derive(Debug, Clone)]
pub struct ImportConsent {
    pub evidence: String,
    pub source_ip: Option<String>,
}

impl ImportConsent {
    pub fn new(evidence: Option<&str>, source_ip: Option<String>) -> Result<Self, MailingError> {
        match evidence.map(str::trim) {
            Some(e) if !e.is_empty() => {
                super::check_text("consent_evidence", e, super::members::MAX_CONSENT_EVIDENCE, true)?;
                Ok(Self { evidence: e.to_owned(), source_ip })
            }
            _ => Err(MailingError::ConsentEvidenceRequired(
                "consent_evidence is required (query parameter, or a form field before the file part)",
            )),
        }
    }
}

/// Checks that the caller may import into the list, before any byte of the document is read.
pub fn authorize(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
) -> Result<MailingList, MailingError> {
    lists::authorized(app, p, ctx, Perm::MembersWrite, domain, name, "member.import")
}

/// Where the columns the import reads are.
struct Columns {
    email: usize,
    display_name: Option<usize>,
    delivery_mode: Option<usize>,
}

fn columns(header: &csv::ByteRecord) -> Result<Columns, MailingError> {
    let find = |name: &str| {
        header.iter().position(|h| {
            let h = h.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(h); // a spreadsheet's byte-order mark
            h.trim_ascii().eq_ignore_ascii_case(name.as_bytes())
        })
    };
    let email = find("email").ok_or_else(|| {
        MailingError::Invalid("the first row must be the header email,display_name,delivery_mode".into())
    })?;
    Ok(Columns { email, display_name: find("display_name"), delivery_mode: find("delivery_mode") })
}

/// Undoes the export's neutralisation of spreadsheet formulas (`'=x` -> `=x`), so that an
/// export re-imports as it was.
fn cell(record: &csv::ByteRecord, i: Option<usize>) -> Result<Option<String>, String> {
    let Some(raw) = i.and_then(|i| record.get(i)) else { return Ok(None) };
    let s = std::str::from_utf8(raw).map_err(|_| "not UTF-8".to_owned())?.trim();
    let s = match s.strip_prefix('\'') {
        Some(rest) if rest.starts_with(super::export::FORMULA_STARTS) => rest,
        _ => s,
    };
    Ok((!s.is_empty()).then(|| s.to_owned()))
}

/// Where an import's time went, logged at `debug` when it ends (`bench-members` prints it). The
/// reading thread's steps (`read`, `validate`, `report`, `wait`: blocked on a full hand-over) and
/// the writing thread's (`members`, `events`, `commit`, `idle`: waiting for a batch) overlap.
#[derive(Debug, Default)]
struct Timings {
    read: Duration,
    validate: Duration,
    report: Duration,
    wait: Duration,
    members: Duration,
    events: Duration,
    commit: Duration,
    idle: Duration,
}

impl Timings {
    fn log(&self, rows: u64, started: Instant) {
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        tracing::debug!(
            "import timings rows={rows} read_ms={} validate_ms={} report_ms={} wait_ms={} members_ms={} events_ms={} commit_ms={} idle_ms={} total_ms={}",
            ms(self.read),
            ms(self.validate),
            ms(self.report),
            ms(self.wait),
            ms(self.members),
            ms(self.events),
            ms(self.commit),
            ms(self.idle),
            ms(started.elapsed())
        );
    }
}

/// Validated rows handed from the reading thread to the writing one: the members, the end of each
/// one's `member.added` document (all but its id), and whether its mode was coerced.
struct Batch {
    members: Vec<NewMember>,
    tails: Vec<String>,
    coerced: Vec<bool>,
}

/// What the writing thread did: per batch, in order, its added, skipped and coerced rows.
#[derive(Default)]
struct Written {
    batches: Vec<(u64, u64, u64)>,
    timings: Timings,
}

/// Imports the document into the list the caller was authorised for. Rows become `active` (the
/// consent evidence covers them) and emit `member.added`; an address already on the list, in
/// whatever state, is skipped (an import never re-subscribes someone who left).
pub fn import(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    list: &MailingList,
    consent: &ImportConsent,
    document: impl Read,
) -> Result<ImportReport, MailingError> {
    let started = Instant::now();
    let mut timings = Timings::default();
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(document);
    let mut report = ImportReport::default();
    let mut record = csv::ByteRecord::new();
    let cols = match reader.read_byte_record(&mut record) {
        Ok(true) => columns(&record)?,
        Ok(false) => return Err(MailingError::Invalid("the document is empty: it needs a header row".into())),
        Err(e) => return Err(read_error(e, 0)),
    };
    let consent_id = in_write(&*app.store, |tx| {
        tx.insert_consent(&Consent {
            source: Some("import".into()),
            evidence: Some(consent.evidence.clone()),
            ip: consent.source_ip.clone(),
            at: app.clock.now(),
        })
    })?;
    // Every imported row takes the same transition: from absent to active, the import's
    // consent covering it. An address already on the list, in whatever state, is skipped.
    let (status, pending_reason) = super::state::next(MemberState::Absent, Trigger::AddWithConsent)
        .ok()
        .and_then(MemberState::stored)
        .ok_or_else(|| MailingError::Conflict("an import cannot add members to this list".into()))?;
    let list_part = list_json_part(list);
    // Two threads: this one reads and validates the document while the other writes the batch
    // before (the writer is the slower; a hand-over of one batch keeps memory to about three).
    let (send, receive) = std::sync::mpsc::sync_channel::<Batch>(1);
    let (cut_at, written) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || write_batches(app, list, receive));
        let mut batch: Vec<(u64, Result<Row, String>, bool)> = Vec::with_capacity(BATCH_ROWS);
        let mut sent = 0usize;
        // A cut document: the error, the batches handed over before it, the rows read after them.
        let mut cut_at: Option<(csv::Error, usize, u64)> = None;
        loop {
            let t = Instant::now();
            let read = reader.read_byte_record(&mut record);
            timings.read += t.elapsed();
            let more = match read {
                Ok(more) => more,
                Err(e) if is_csv_row_error(&e) => {
                    report.total += 1;
                    report.error(report.total + 1, format!("unreadable row: {e}"));
                    continue;
                }
                Err(e) => {
                    cut_at = Some((e, sent, batch.len() as u64));
                    false
                }
            };
            if more {
                report.total += 1;
                let line = report.total + 1;
                let t = Instant::now();
                let (row, coerced) = parse_row(&record, &cols);
                batch.push((line, row, coerced));
                timings.validate += t.elapsed();
            }
            if batch.len() >= BATCH_ROWS || (!more && !batch.is_empty()) {
                let t = Instant::now();
                let rows =
                    to_batch(list, &mut batch, &mut report, (status, pending_reason), consent_id, &list_part, app);
                timings.report += t.elapsed();
                let t = Instant::now();
                let stopped = send.send(rows).is_err(); // the writer failed: its error is the answer
                timings.wait += t.elapsed();
                sent += 1;
                if stopped {
                    break;
                }
            }
            if !more {
                break;
            }
        }
        drop(send);
        (cut_at, writer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    });
    let (written, failed) = written;
    for (added, skipped, coerced) in &written.batches {
        report.added += added;
        report.skipped += skipped;
        report.mode_coerced += coerced;
    }
    timings.members = written.timings.members;
    timings.events = written.timings.events;
    timings.commit = written.timings.commit;
    timings.idle = written.timings.idle;
    if let Some(e) = failed {
        return Err(e);
    }
    let cut = cut_at.map(|(e, before, pending)| {
        let added: u64 = written.batches.iter().take(before).map(|b| b.0).sum();
        read_error(e, added + pending)
    });
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        audit_done(tx, p, ctx, now, "member.import", &format!("list:{}:added={}", list.address(), report.added))
    })?;
    timings.log(report.total, started);
    match cut {
        Some(MailingError::DocumentTooLarge { limit_mib, .. }) => {
            Err(MailingError::DocumentTooLarge { limit_mib, imported: report.added })
        }
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// A row-level CSV fault (the document goes on) rather than a failure to read at all.
fn is_csv_row_error(e: &csv::Error) -> bool {
    !matches!(e.kind(), csv::ErrorKind::Io(_))
}

fn read_error(e: csv::Error, imported: u64) -> MailingError {
    if let csv::ErrorKind::Io(io) = e.kind()
        && io.get_ref().is_some_and(|inner| inner.is::<SizeLimitExceeded>())
    {
        return MailingError::DocumentTooLarge { limit_mib: MAX_IMPORT_BYTES / (1024 * 1024), imported };
    }
    MailingError::Invalid(format!(
        "the document could not be read to its end ({e}); the {imported} rows read before were imported"
    ))
}

/// A row that passed validation.
struct Row {
    email: EmailAddress,
    display_name: Option<String>,
    delivery_mode: DeliveryMode,
}

fn parse_row(record: &csv::ByteRecord, cols: &Columns) -> (Result<Row, String>, bool) {
    let mut coerced = false;
    let row = (|| {
        let email = cell(record, Some(cols.email))?.ok_or("email is empty")?;
        let email = EmailAddress::parse(&email).map_err(|e| e.to_string())?;
        let display_name = cell(record, cols.display_name)?;
        if let Some(n) = &display_name {
            super::check_text("display_name", n, lists::MAX_DISPLAY_NAME, false).map_err(|e| e.to_string())?;
        }
        let delivery_mode = match cell(record, cols.delivery_mode)? {
            None => DeliveryMode::Regular,
            Some(m) => DeliveryMode::parse(&m.to_ascii_lowercase()).unwrap_or_else(|| {
                coerced = true;
                DeliveryMode::Regular
            }),
        };
        Ok(Row { email, display_name, delivery_mode })
    })();
    (row, coerced)
}

/// The `member.added` document of an imported member, as `lists::emit` writes it for any other
/// addition: its id, then `tail` (an import writes one per row; the tail is made by the reader).
fn member_added_json(id: i64, tail: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(tail.len() + 24);
    let _ = write!(out, "{{\"member_id\":{id}");
    out.push_str(tail);
    out
}

/// All of a `member.added` document after its id: `,"email":..,"delivery_mode":..<list_part>}`.
fn member_added_tail(m: &NewMember, list_part: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(list_part.len() + 96);
    out.push_str(",\"email\":");
    push_json_string(&mut out, &m.email.to_string());
    let _ = write!(out, ",\"delivery_mode\":\"{}\"{list_part}}}", m.delivery_mode.as_str());
    out
}

/// The list's members of every `member.added` document: `,"list_id":..,"list_address":..,"domain":..`.
fn list_json_part(list: &MailingList) -> String {
    let mut out = format!(",\"list_id\":{},\"list_address\":", list.id.get());
    push_json_string(&mut out, &list.address());
    out.push_str(",\"domain\":");
    push_json_string(&mut out, list.domain.as_str());
    out
}

fn push_json_string(out: &mut String, s: &str) {
    // serde_json escapes exactly as every other event's document is escaped.
    out.push_str(&serde_json::Value::from(s).to_string());
}

/// The rows of `batch` that passed validation, as members to write; the others go to the report
/// (in the order of the document, as before any row is written).
fn to_batch(
    list: &MailingList,
    batch: &mut Vec<(u64, Result<Row, String>, bool)>,
    report: &mut ImportReport,
    (status, pending_reason): (super::model::MemberStatus, Option<super::model::PendingReason>),
    consent_id: i64,
    list_part: &str,
    app: &Service,
) -> Batch {
    let now = app.clock.now();
    let mut out =
        Batch { members: Vec::with_capacity(batch.len()), tails: Vec::with_capacity(batch.len()), coerced: Vec::new() };
    out.coerced.reserve(batch.len());
    for (line, row, c) in batch.drain(..) {
        match row {
            Ok(r) => {
                let m = new_member(list, r, status, pending_reason, consent_id, now);
                out.tails.push(member_added_tail(&m, list_part));
                out.members.push(m);
                out.coerced.push(c);
            }
            Err(reason) => report.error(line, reason),
        }
    }
    out
}

/// The writing thread: each batch in its own write transaction, until the reader is done or a
/// batch fails (its error is returned; the batches before stay).
fn write_batches(
    app: &Service,
    list: &MailingList,
    batches: std::sync::mpsc::Receiver<Batch>,
) -> (Written, Option<MailingError>) {
    let mut written = Written::default();
    let scope = (Some(list.domain_id.get()), Some(list.id.get()));
    loop {
        let t = Instant::now();
        let Ok(batch) = batches.recv() else { return (written, None) };
        written.timings.idle += t.elapsed();
        let now = app.clock.now();
        let (mut in_members, mut in_events) = (Duration::ZERO, Duration::ZERO);
        let t = Instant::now();
        let done = in_write(&*app.store, |tx| {
            let t = Instant::now();
            let ids = tx.insert_members_if_absent(&batch.members, now)?;
            in_members = t.elapsed();
            let t = Instant::now();
            let (mut skipped, mut mode_coerced) = (0, 0);
            let mut events = Vec::with_capacity(batch.members.len());
            for ((tail, id), c) in batch.tails.iter().zip(ids).zip(&batch.coerced) {
                let Some(id) = id else {
                    skipped += 1;
                    continue;
                };
                events.push(member_added_json(id.get(), tail));
                mode_coerced += u64::from(*c);
            }
            tx.append_events_json(EventName::MemberAdded, now, scope, &events)?;
            in_events = t.elapsed();
            Ok::<_, MailingError>((events.len() as u64, skipped, mode_coerced))
        });
        written.timings.members += in_members;
        written.timings.events += in_events;
        written.timings.commit += t.elapsed().saturating_sub(in_members + in_events);
        match done {
            Ok(counts) => written.batches.push(counts),
            Err(e) => return (written, Some(e)),
        }
    }
}

fn new_member(
    list: &MailingList,
    row: Row,
    status: super::model::MemberStatus,
    pending_reason: Option<super::model::PendingReason>,
    consent_id: i64,
    now: Timestamp,
) -> NewMember {
    let active = status == super::model::MemberStatus::Active;
    NewMember {
        list_id: list.id,
        email: row.email,
        display_name: row.display_name,
        status,
        pending_reason,
        delivery_mode: row.delivery_mode,
        subscribed_at: active.then_some(now),
        consent_source: Some("import".into()),
        consent_at: Some(now),
        consent_id: Some(consent_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::DomainName;
    use crate::mailing::model::*;
    use serde_json::json;

    #[test]
    fn the_member_added_document_is_the_one_any_addition_records() {
        let t = Timestamp::from_unix_secs(1_795_425_649);
        let list = MailingList {
            id: ListId::from_stored(3),
            domain_id: DomainId::from_stored(1),
            domain: DomainName::parse("example.org").unwrap(),
            name: ListName::parse("news").unwrap(),
            display_name: "News".into(),
            kind: ListKind::Discussion,
            status: ListStatus::Active,
            send_suspended: false,
            policies: ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Discussion),
            created_at: t,
            updated_at: t,
        };
        let row = Row {
            email: EmailAddress::parse("O'Brien+x@Example.NET").unwrap(),
            display_name: None,
            delivery_mode: DeliveryMode::Digest,
        };
        let m = new_member(&list, row, MemberStatus::Active, None, 9, t);
        let out = member_added_json(42, &member_added_tail(&m, &list_json_part(&list)));
        // What `members::apply_add` and `lists::emit` write for an addition.
        let expected = json!({
            "member_id": 42, "email": m.email.to_string(), "delivery_mode": "digest",
            "list_id": 3, "list_address": list.address(), "domain": "example.org",
        });
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), expected, "{out}");
    }
}
