//! `POST .../members/import`: the CSV document streamed from the body (plain or multipart) to
//! core's importer on a thread of its own at a lower priority, cut at the contract's 25 MiB.

use super::{invalid, names};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::{run_blocking, run_bulk};
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use bytes::Bytes;
use courrier_core::kernel::Code;
use courrier_core::mailing::import::{self, ImportConsent, MAX_IMPORT_BYTES, SizeLimitExceeded};
use futures_util::StreamExt;
use http::{HeaderMap, header};

/// The document's bytes handed to the importer's blocking thread: a bounded channel, so a fast
/// client cannot queue more than a few chunks ahead of the database.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    current: Bytes,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Where the CSV document is in the body.
enum Upload {
    Csv(Body),
    Multipart(multer::Multipart<'static>),
}

fn upload_of(headers: &HeaderMap, body: Body) -> Result<Upload, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match mime.as_str() {
        "text/csv" | "application/csv" | "text/plain" => Ok(Upload::Csv(body)),
        "multipart/form-data" => {
            let boundary = multer::parse_boundary(ct)
                .map_err(|e| ApiError::new(Code::MalformedBody, format!("multipart boundary: {e}")))?;
            Ok(Upload::Multipart(multer::Multipart::new(body.into_data_stream(), boundary)))
        }
        _ => Err(ApiError::new(
            Code::MalformedBody,
            "the body must be the CSV document (Content-Type: text/csv) or multipart/form-data with a file part",
        )),
    }
}

const FORM_FIELD_LIMIT: usize = 8 * 1024;

pub(super) async fn import_members(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["consent_evidence"])?;
    let mut evidence = q.get("consent_evidence").map(str::to_owned);
    let (d, l) = names(&domain, &list)?;
    let upload = upload_of(&headers, body)?;
    // Authorised before any byte of the document is read.
    let (app, pp, c) = (state.mailing.clone(), p.clone(), ctx.clone());
    let target = run_blocking(move || Ok(import::authorize(&app, &pp, &c, &d, &l)?)).await?;
    let timeout = state.body_read_timeout;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let feed: futures_util::stream::BoxStream<'static, Result<Bytes, String>> = match upload {
        Upload::Csv(body) => body.into_data_stream().map(|r| r.map_err(|e| e.to_string())).boxed(),
        Upload::Multipart(mut form) => {
            let file = loop {
                let field = tokio::time::timeout(timeout, form.next_field())
                    .await
                    .map_err(|_| ApiError::new(Code::MalformedBody, "the form did not arrive in time"))?
                    .map_err(|e| ApiError::new(Code::MalformedBody, format!("the form could not be read: {e}")))?;
                let Some(mut field) = field else {
                    return Err(invalid("the form has no part named file"));
                };
                match field.name() {
                    Some("file") => break field,
                    Some("consent_evidence") => {
                        let mut value = Vec::new();
                        while let Some(chunk) =
                            field.chunk().await.map_err(|e| ApiError::new(Code::MalformedBody, e.to_string()))?
                        {
                            value.extend_from_slice(&chunk);
                            if value.len() > FORM_FIELD_LIMIT {
                                return Err(invalid("consent_evidence is longer than 8 KiB"));
                            }
                        }
                        evidence =
                            Some(String::from_utf8(value).map_err(|_| invalid("consent_evidence is not UTF-8"))?);
                    }
                    // Other fields are ignored, read past in order.
                    _ => {
                        while field
                            .chunk()
                            .await
                            .map_err(|e| ApiError::new(Code::MalformedBody, e.to_string()))?
                            .is_some()
                        {}
                    }
                }
            };
            futures_util::stream::unfold(file, |mut f| async move {
                match f.chunk().await {
                    Ok(Some(b)) => Some((Ok(b), f)),
                    Ok(None) => None,
                    Err(e) => Some((Err(e.to_string()), f)),
                }
            })
            .boxed()
        }
    };
    let consent = ImportConsent::new(evidence.as_deref(), ctx.source.clone())?;
    let app = state.mailing.clone();
    // At a lower CPU priority than requests: readers of the lists are served first (issue 18).
    let importer = run_bulk(state.import_niceness, move || {
        let reader = ChannelReader { rx, current: Bytes::new() };
        Ok(import::import(&app, &p, &ctx, &target, &consent, std::io::BufReader::with_capacity(64 * 1024, reader))?)
    });
    let forward = forward_document(feed, tx, timeout);
    let (report, ()) = tokio::join!(importer, forward);
    Ok(Reply::ok(courrier_core::mailing::views::import_report(&report?)))
}

/// Feeds the document to the importer, cutting it at the contract's 25 MiB: the importer then
/// sees [`SizeLimitExceeded`] after the last byte within the limit.
pub(super) async fn forward_document(
    mut feed: futures_util::stream::BoxStream<'static, Result<Bytes, String>>,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    timeout: std::time::Duration,
) {
    let mut seen: u64 = 0;
    loop {
        let next = match tokio::time::timeout(timeout, feed.next()).await {
            Err(_) => Some(Err(format!("no data for {} seconds", timeout.as_secs()))),
            Ok(n) => n,
        };
        let item = match next {
            None => return,
            Some(Err(e)) => Err(std::io::Error::other(format!("the upload was interrupted: {e}"))),
            Some(Ok(mut chunk)) => {
                let room = MAX_IMPORT_BYTES - seen;
                if chunk.len() as u64 > room {
                    let kept = chunk.split_to(room as usize);
                    if !kept.is_empty() && tx.send(Ok(kept)).await.is_err() {
                        return;
                    }
                    let _ = tx.send(Err(std::io::Error::other(SizeLimitExceeded))).await;
                    return;
                }
                seen += chunk.len() as u64;
                Ok(chunk)
            }
        };
        let stop = item.is_err();
        // The importer stopped (a bad header row): nothing more to hand it.
        if tx.send(item).await.is_err() || stop {
            return;
        }
    }
}
