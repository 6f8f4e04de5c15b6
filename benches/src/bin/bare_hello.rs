//! The baseline of `bench-http`: the same stack as `courrier serve` (hyper 1 http1 connections on
//! a default multi-thread tokio runtime, keep-alive, TCP_NODELAY) minus the router, middleware
//! and handler. Every request gets 200 with a JSON body of the size and shape of courrier's
//! `GET /api/v1/system/health` answer.
//!
//! Usage: `bare-hello 127.0.0.1:PORT`

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;

/// Same length as courrier's answer: its request ids are `req_` + 24 hex digits.
const BODY: &str =
    r#"{"data":{"status":"ok"},"meta":{"request_id":"req_0123456789abcdef00000000","api_version":"v1"}}"#;

async fn hello(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut resp = Response::new(Full::new(Bytes::from_static(BODY.as_bytes())));
    resp.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    Ok(resp)
}

fn main() -> ExitCode {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: bare-hello ADDR (e.g. 127.0.0.1:8081)");
        return ExitCode::from(2);
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("bare-hello: {addr:?} is not a socket address: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bare-hello: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(addr)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-hello: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let mut http = http1::Builder::new();
    http.keep_alive(true);
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                eprintln!("bare-hello: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = http.serve_connection(TokioIo::new(stream), service_fn(hello));
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
