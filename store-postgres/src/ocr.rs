//! The OCR context's documents' records and maintenance switch (`ocr::ports::OcrRepo`), and the
//! documents' bytes kept in the database ([`PgBlobs`]) when no shared directory is configured.

use super::{PgTx, Pool, corrupt, get, map_err, paged};
use courrier_core::access::model::UserId;
use courrier_core::kernel::{Page, Paged, Timestamp};
use courrier_core::ocr::blobs::{BlobError, BlobHold, BlobId, BlobStore, Hold};
use courrier_core::ocr::engine::Language;
use courrier_core::ocr::intake::DocumentKind;
use courrier_core::ocr::model::{Document, DocumentState, Maintenance, OcrId, Profile};
use courrier_core::ocr::ports::OcrRepo;
use courrier_core::storage::StoreError;
use postgres::Row;

const COLUMNS: &str = "ocr_id, user_id, blob, kind, size_bytes, pages, lang, profile, state, text, created_at, meta";

fn document_row(r: &Row) -> Result<Document, StoreError> {
    let text = |i: usize| get::<String>(r, i);
    let (ocr_id, blob, kind, lang, profile, state) = (text(0)?, text(2)?, text(3)?, text(6)?, text(7)?, text(8)?);
    let meta = text(11)?;
    Ok(Document {
        ocr_id: OcrId::parse(&ocr_id).ok_or_else(|| corrupt("ocr id", &ocr_id))?,
        owner: UserId::from_stored(get(r, 1)?),
        blob: BlobId::parse(&blob).ok_or_else(|| corrupt("blob", &blob))?,
        kind: DocumentKind::parse(&kind).ok_or_else(|| corrupt("document kind", &kind))?,
        size_bytes: get::<i64>(r, 4)?.try_into().map_err(|_| corrupt("size", "negative"))?,
        pages: get::<i64>(r, 5)?.try_into().map_err(|_| corrupt("pages", "out of range"))?,
        lang: Language::parse(&lang).ok_or_else(|| corrupt("language", &lang))?,
        profile: Profile::parse(&profile),
        state: DocumentState::parse(&state).ok_or_else(|| corrupt("document state", &state))?,
        text: text(9)?,
        created_at: Timestamp::from_unix_micros(get(r, 10)?),
        meta: if meta.is_empty() {
            serde_json::Value::String(String::new())
        } else {
            serde_json::from_str(&meta).map_err(|_| corrupt("meta", &meta))?
        },
    })
}

/// Stored file names, one per deleted row; a malformed one (a hand-edited row) names no file of ours.
fn blob_ids(rows: &[Row]) -> Result<Vec<BlobId>, StoreError> {
    let names = rows.iter().map(|r| get::<String>(r, 0)).collect::<Result<Vec<_>, _>>()?;
    Ok(names.iter().filter_map(|n| BlobId::parse(n)).collect())
}

impl OcrRepo for PgTx {
    fn insert_ocr_document(&mut self, d: &Document) -> Result<(), StoreError> {
        let meta = match &d.meta {
            serde_json::Value::String(s) if s.is_empty() => String::new(),
            meta => meta.to_string(),
        };
        let (size, pages) = (i64::try_from(d.size_bytes).unwrap_or(i64::MAX), i64::from(d.pages));
        self.guarded(|tx| {
            tx.execute(
                &format!(
                    "INSERT INTO ocr_documents ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
                ),
                &[
                    &d.ocr_id.as_str(),
                    &d.owner.get(),
                    &d.blob.as_str(),
                    &d.kind.as_str(),
                    &size,
                    &pages,
                    &d.lang.iso(),
                    &d.profile.as_str(),
                    &d.state.as_str(),
                    &d.text,
                    &d.created_at.unix_micros(),
                    &meta,
                ],
            )
        })
        .map(drop)
    }

    fn ocr_document(&mut self, id: &OcrId) -> Result<Option<Document>, StoreError> {
        self.query_opt(&format!("SELECT {COLUMNS} FROM ocr_documents WHERE ocr_id = $1"), &[&id.as_str()])?
            .as_ref()
            .map(document_row)
            .transpose()
    }

    fn ocr_documents_in_state(&mut self, state: DocumentState, page: Page) -> Result<Paged<Document>, StoreError> {
        paged(
            self,
            "SELECT COUNT(*) FROM ocr_documents WHERE state = $1",
            &format!("SELECT {COLUMNS} FROM ocr_documents WHERE state = $1 ORDER BY created_at DESC, id DESC"),
            &[&state.as_str()],
            page,
            document_row,
        )
    }

    fn delete_ocr_documents_before(&mut self, cutoff: Timestamp, limit: u32) -> Result<Vec<BlobId>, StoreError> {
        let rows = self.query(
            "DELETE FROM ocr_documents WHERE id IN \
             (SELECT id FROM ocr_documents WHERE created_at < $1 ORDER BY created_at LIMIT $2) RETURNING blob",
            &[&cutoff.unix_micros(), &i64::from(limit)],
        )?;
        blob_ids(&rows)
    }

    fn delete_ocr_user_records(&mut self, user: UserId) -> Result<Vec<BlobId>, StoreError> {
        let rows = self.query("DELETE FROM ocr_documents WHERE user_id = $1 RETURNING blob", &[&user.get()])?;
        self.execute("DELETE FROM ocr_usage WHERE user_id = $1", &[&user.get()])?;
        self.execute("DELETE FROM ocr_plans WHERE user_id = $1", &[&user.get()])?;
        blob_ids(&rows)
    }

    fn ocr_blob_in_use(&mut self, blob: &BlobId) -> Result<bool, StoreError> {
        Ok(self.query_opt("SELECT 1 FROM ocr_documents WHERE blob = $1 LIMIT 1", &[&blob.as_str()])?.is_some())
    }

    fn ocr_maintenance(&mut self) -> Result<Maintenance, StoreError> {
        let since: Option<i64> =
            self.query_opt("SELECT since FROM ocr_maintenance WHERE id = 1", &[])?.map(|r| get(&r, 0)).transpose()?;
        Ok(since.map_or(Maintenance::Off, |s| Maintenance::On { since: Timestamp::from_unix_micros(s) }))
    }

    fn set_ocr_maintenance(&mut self, state: Maintenance) -> Result<(), StoreError> {
        match state {
            Maintenance::Off => self.execute("DELETE FROM ocr_maintenance", &[]),
            Maintenance::On { since } => self.execute(
                "INSERT INTO ocr_maintenance (id, since) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET since = EXCLUDED.since",
                &[&since.unix_micros()],
            ),
        }
        .map(drop)
    }
}

/// The documents' bytes in the database (`ocr_blobs`), for servers that share no directory: every
/// server of the installation reads what any of them stored. Each call is one autocommitted
/// statement on a pooled connection, durable when it returns (`synchronous_commit` on).
pub struct PgBlobs {
    pool: Pool,
}

impl PgBlobs {
    pub(super) fn new(pool: Pool) -> Self {
        Self { pool }
    }

    fn run<T>(&self, f: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error>) -> Result<T, BlobError> {
        let failed = |e: StoreError| BlobError::Io(std::io::Error::other(e.to_string()));
        let mut conn = self.pool.get().map_err(|_| failed(StoreError::Busy))?;
        f(&mut conn.client).map_err(|e| failed(map_err(e)))
    }
}

/// The advisory lock ordering uploads and removals of `ocr_blobs` across servers.
pub(super) const BLOB_GATE: i64 = 0x636f_7572_7269_6504;

/// A session advisory lock held on a pooled connection of its own; released, and the connection
/// given back, when dropped (or by the server, if the connection dies).
struct PgHold {
    conn: Option<super::Conn>,
    shared: bool,
}

impl Drop for PgHold {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        let unlock = if self.shared { "SELECT pg_advisory_unlock_shared($1)" } else { "SELECT pg_advisory_unlock($1)" };
        if let Err(e) = conn.client.execute(unlock, &[&BLOB_GATE]) {
            // The session may still hold it: the connection must not go back to the pool.
            tracing::warn!(error = %e, "cannot release the document store's lock: connection dropped");
            let _ = conn.client.batch_execute("SELECT pg_advisory_unlock_all()");
        }
    }
}

impl BlobStore for PgBlobs {
    fn hold(&self, hold: Hold) -> Result<BlobHold, BlobError> {
        let failed = |e: StoreError| BlobError::Io(std::io::Error::other(e.to_string()));
        let mut conn = self.pool.get().map_err(|_| failed(StoreError::Busy))?;
        let shared = hold == Hold::Store;
        let lock = if shared { "SELECT pg_advisory_lock_shared($1)" } else { "SELECT pg_advisory_lock($1)" };
        conn.client.execute(lock, &[&BLOB_GATE]).map_err(|e| failed(map_err(e)))?;
        Ok(BlobHold::new(PgHold { conn: Some(conn), shared }))
    }

    fn put(&self, bytes: &[u8]) -> Result<BlobId, BlobError> {
        let id = BlobId::of(bytes);
        // The same content stored twice (or by two servers at once) is one row.
        self.run(|c| {
            c.execute(
                "INSERT INTO ocr_blobs (id, bytes) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                &[&id.as_str(), &bytes],
            )
        })?;
        Ok(id)
    }

    fn get(&self, id: &BlobId) -> Result<Vec<u8>, BlobError> {
        let row = self.run(|c| c.query_opt("SELECT bytes FROM ocr_blobs WHERE id = $1", &[&id.as_str()]))?;
        let row = row.ok_or_else(|| BlobError::Missing(id.as_str().to_owned()))?;
        row.try_get(0).map_err(|e| BlobError::Io(std::io::Error::other(e.to_string())))
    }

    fn delete(&self, id: &BlobId) -> Result<(), BlobError> {
        self.run(|c| c.execute("DELETE FROM ocr_blobs WHERE id = $1", &[&id.as_str()])).map(drop)
    }

    fn ready(&self) -> Result<(), BlobError> {
        self.run(|c| c.batch_execute("SELECT 1 FROM ocr_blobs LIMIT 0"))
    }
}
