use super::{SqliteTx, map_err, paged};
use courrier_core::access::model::UserId;
use courrier_core::kernel::{Page, Paged, Timestamp};
use courrier_core::ocr::blobs::BlobId;
use courrier_core::ocr::engine::Language;
use courrier_core::ocr::intake::DocumentKind;
use courrier_core::ocr::model::Maintenance;
use courrier_core::ocr::model::{Document, DocumentState, OcrId, Profile};
use courrier_core::ocr::ports::OcrRepo;
use courrier_core::storage::StoreError;
use rusqlite::{OptionalExtension, Row};

const COLUMNS: &str = "ocr_id, user_id, blob, kind, size_bytes, pages, lang, profile, state, text, created_at, meta";

/// The stored kind (XML documents have their own since migration 10; before it they were kept
/// as 'text', which still reads back).
fn kind_column(kind: DocumentKind) -> &'static str {
    kind.as_str()
}

/// A stored value that does not parse means the database was edited by hand or is corrupt.
fn corrupt(what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, format!("{what} {value:?}").into())
}

fn document_row(r: &Row<'_>) -> rusqlite::Result<Document> {
    let text = |i: usize| r.get::<_, String>(i);
    let (ocr_id, blob, kind, lang, profile, state) = (text(0)?, text(2)?, text(3)?, text(6)?, text(7)?, text(8)?);
    Ok(Document {
        ocr_id: OcrId::parse(&ocr_id).ok_or_else(|| corrupt("ocr id", &ocr_id))?,
        owner: UserId::from_stored(r.get(1)?),
        blob: BlobId::parse(&blob).ok_or_else(|| corrupt("blob", &blob))?,
        kind: DocumentKind::parse(&kind).ok_or_else(|| corrupt("document kind", &kind))?,
        size_bytes: r.get::<_, i64>(4)?.try_into().map_err(|_| corrupt("size", "negative"))?,
        pages: r.get::<_, i64>(5)?.try_into().map_err(|_| corrupt("pages", "out of range"))?,
        lang: Language::parse(&lang).ok_or_else(|| corrupt("language", &lang))?,
        profile: Profile::parse(&profile),
        state: DocumentState::parse(&state).ok_or_else(|| corrupt("document state", &state))?,
        text: text(9)?,
        created_at: Timestamp::from_unix_micros(r.get(10)?),
        meta: {
            let meta = text(11)?;
            if meta.is_empty() {
                serde_json::Value::String(String::new())
            } else {
                serde_json::from_str(&meta).map_err(|_| corrupt("meta", &meta))?
            }
        },
    })
}

/// Stored file names, one per deleted row; a malformed one (a hand-edited row) names no file of ours.
fn blob_ids(names: Vec<String>) -> Vec<BlobId> {
    names.iter().filter_map(|n| BlobId::parse(n)).collect()
}

impl OcrRepo for SqliteTx {
    fn insert_ocr_document(&mut self, d: &Document) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(&format!(
                "INSERT INTO ocr_documents ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
            ))
            .and_then(|mut st| {
                st.execute(rusqlite::params![
                    d.ocr_id.as_str(),
                    d.owner.get(),
                    d.blob.as_str(),
                    kind_column(d.kind),
                    i64::try_from(d.size_bytes).unwrap_or(i64::MAX),
                    i64::from(d.pages),
                    d.lang.iso(),
                    d.profile.as_str(),
                    d.state.as_str(),
                    d.text,
                    d.created_at.unix_micros(),
                    match &d.meta {
                        serde_json::Value::String(s) if s.is_empty() => String::new(),
                        meta => meta.to_string(),
                    },
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn ocr_document(&mut self, id: &OcrId) -> Result<Option<Document>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM ocr_documents WHERE ocr_id = ?1"))
            .and_then(|mut st| st.query_row([id.as_str()], document_row).optional())
            .map_err(map_err)
    }

    fn ocr_documents_in_state(&mut self, state: DocumentState, page: Page) -> Result<Paged<Document>, StoreError> {
        paged(
            self.conn(),
            "SELECT COUNT(*) FROM ocr_documents WHERE state = ?1",
            &format!("SELECT {COLUMNS} FROM ocr_documents WHERE state = ?1 ORDER BY created_at DESC, id DESC"),
            vec![rusqlite::types::Value::Text(state.as_str().to_owned())],
            page,
            document_row,
        )
    }

    fn delete_ocr_documents_before(&mut self, cutoff: Timestamp, limit: u32) -> Result<Vec<BlobId>, StoreError> {
        self.conn()
            .prepare_cached(
                "DELETE FROM ocr_documents WHERE id IN \
                 (SELECT id FROM ocr_documents WHERE created_at < ?1 ORDER BY created_at LIMIT ?2) RETURNING blob",
            )
            .and_then(|mut st| st.query_map(rusqlite::params![cutoff.unix_micros(), limit], |r| r.get(0))?.collect())
            .map(blob_ids)
            .map_err(map_err)
    }

    fn delete_ocr_user_records(&mut self, user: UserId) -> Result<Vec<BlobId>, StoreError> {
        let blobs: Vec<String> = self
            .conn()
            .prepare_cached("DELETE FROM ocr_documents WHERE user_id = ?1 RETURNING blob")
            .and_then(|mut st| st.query_map([user.get()], |r| r.get(0))?.collect())
            .map_err(map_err)?;
        for table in ["ocr_usage", "ocr_plans"] {
            self.conn().execute(&format!("DELETE FROM {table} WHERE user_id = ?1"), [user.get()]).map_err(map_err)?;
        }
        Ok(blob_ids(blobs))
    }

    fn ocr_blob_in_use(&mut self, blob: &BlobId) -> Result<bool, StoreError> {
        self.conn()
            .prepare_cached("SELECT 1 FROM ocr_documents WHERE blob = ?1")
            .and_then(|mut st| st.exists([blob.as_str()]))
            .map_err(map_err)
    }

    fn ocr_maintenance(&mut self) -> Result<Maintenance, StoreError> {
        let since: Option<i64> = self
            .conn()
            .prepare_cached("SELECT since FROM ocr_maintenance WHERE id = 1")
            .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
            .map_err(map_err)?;
        Ok(since.map_or(Maintenance::Off, |s| Maintenance::On { since: Timestamp::from_unix_micros(s) }))
    }

    fn set_ocr_maintenance(&mut self, state: Maintenance) -> Result<(), StoreError> {
        let result = match state {
            Maintenance::Off => self.conn().execute("DELETE FROM ocr_maintenance", []),
            Maintenance::On { since } => self
                .conn()
                .execute("INSERT OR REPLACE INTO ocr_maintenance (id, since) VALUES (1, ?1)", [since.unix_micros()]),
        };
        result.map(drop).map_err(map_err)
    }
}
