//! `GET .../members/export`: the members as CSV, streamed a chunk at a time from core's cursor.

use super::names;
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::envelope::{self};
use crate::error::ApiError;
use crate::query::QueryParams;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use courrier_core::mailing::export;
use courrier_core::mailing::model::MemberFilter;
use futures_util::StreamExt;
use http::{HeaderValue, header};

pub(super) async fn export_members(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    csv(state, p, ctx, domain, list, raw).await
}

/// The export's answer, for the API route and the administration page alike.
pub(crate) async fn csv(
    state: AppState,
    p: std::sync::Arc<courrier_core::access::Principal>,
    ctx: courrier_core::access::principal::RequestCtx,
    domain: String,
    list: String,
    raw: Option<String>,
) -> Result<Response, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["status", "delivery_mode"])?;
    let filter = MemberFilter::parse(q.get("status"), q.get("delivery_mode"), None, None)?;
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let exp = run_blocking(move || Ok(export::open(&app, &p, &ctx, &d, &l, filter)?)).await?;
    let filename = format!("{}-members.csv", exp.list().address());
    let first = futures_util::stream::once(async {
        Ok::<Bytes, std::io::Error>(Bytes::from_static(export::HEADER.as_bytes()))
    });
    let app = state.mailing.clone();
    let request_id = envelope::request_id();
    let rows = futures_util::stream::unfold(Some(exp), move |cursor| {
        let app = app.clone();
        let request_id = request_id.clone();
        async move {
            let mut exp = cursor?;
            let next = tokio::task::spawn_blocking(move || {
                let chunk = exp.next_chunk(&app);
                (exp, chunk)
            })
            .await;
            match next {
                Ok((_, Ok(None))) => None,
                Ok((exp, Ok(Some(text)))) => Some((Ok(Bytes::from(text)), Some(exp))),
                Ok((_, Err(e))) => {
                    // The status line is gone already: end the body short and say why in the log.
                    tracing::error!(request_id = %request_id, error = %e, "export stopped part-way");
                    Some((Err(std::io::Error::other(e.to_string())), None))
                }
                Err(join) => {
                    tracing::error!(request_id = %request_id, error = %join, "export task failed");
                    Some((Err(std::io::Error::other("export failed")), None))
                }
            }
        }
    });
    let mut resp = Body::from_stream(first.chain(rows)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}
