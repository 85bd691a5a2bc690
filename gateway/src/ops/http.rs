//! The operations endpoint: `/metrics` (Prometheus text), `/healthz` (the process is alive) and
//! `/readyz` (accepting calls: 503 when draining or full). hyper directly, because the exporter's
//! own listener serves only metrics and a framework would be more than three routes need.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What the endpoint needs from the gateway.
pub trait OpsState: Send + Sync + 'static {
    /// The Prometheus text exposition, if the host gave the gateway a way to render it.
    fn render_metrics(&self) -> Option<String>;
    /// Whether new calls are accepted now; if not, why (the `/readyz` body).
    fn readiness(&self) -> Result<(), &'static str>;
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn route<S: OpsState>(state: &S, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => match state.render_metrics() {
            Some(text) => reply(StatusCode::OK, "text/plain; version=0.0.4", text),
            None => reply(
                StatusCode::NOT_FOUND,
                "text/plain",
                "no metrics renderer configured
"
                .into(),
            ),
        },
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match state.readiness() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ready\n".into()),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not accepting calls: {why}\n"),
            ),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Bind the endpoint; returns the bound address and the task serving it.
pub async fn serve<S: OpsState>(
    addr: SocketAddr,
    state: Arc<S>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let resp = route(&*state, &req);
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok((local, task))
}
