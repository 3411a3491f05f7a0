//! The HTTP endpoints of the binary: `/metrics`, `/healthz` and `/readyz`, served by hyper.
//!
//! `/healthz` answers 200 while the process serves at all; `/readyz` answers 200 once the
//! [`ServerState::ready`] flag is set. `run` sets it when the API server has answered and the CRD
//! is installed, on the leader and on a standby replica alike: a standby is healthy, it only waits
//! for the lease.

use crate::metrics::{CONTENT_TYPE, Metrics};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;

/// What the endpoints read: the metrics and the readiness flag.
#[derive(Clone)]
pub struct ServerState {
    /// Metrics encoded on every scrape.
    pub metrics: Arc<Metrics>,
    /// Set once the process can do its job (see the module docs).
    pub ready: Arc<AtomicBool>,
}

/// A bound listener, so callers learn the port before serving (useful with port 0).
pub struct Server {
    listener: TcpListener,
    state: ServerState,
}

impl Server {
    /// Binds `addr`.
    pub async fn bind(addr: SocketAddr, state: ServerState) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self { listener, state })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets open connections finish.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let Ok((stream, _peer)) = accepted else { continue };
                    let state = self.state.clone();
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(route(&state, &request)) }
                    });
                    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%error, "metrics connection ended with an error");
                        }
                    });
                }
                () = &mut shutdown => break,
            }
        }
        graceful.shutdown().await;
    }
}

fn route(state: &ServerState, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match request.uri().path() {
        "/metrics" => match state.metrics.encode() {
            Ok(body) => respond(StatusCode::OK, CONTENT_TYPE, body),
            Err(error) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot encode metrics: {error}\n"),
            ),
        },
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready yet\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz or /readyz\n",
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    respond(status, "text/plain; charset=utf-8", body.to_owned())
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}

/// Fresh metrics served in the background on a bound address, with readiness initially false:
/// what `run` and `observe-kubevirt` both start with.
pub struct BackgroundServer {
    /// The metrics the server encodes.
    pub metrics: Arc<Metrics>,
    /// The `/readyz` flag; set it once the caller is ready.
    pub ready: Arc<AtomicBool>,
    /// The address actually bound.
    pub addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl BackgroundServer {
    /// Binds `addr` and serves `metrics` until [`BackgroundServer::stop`].
    pub async fn start(addr: SocketAddr, metrics: Metrics) -> anyhow::Result<Self> {
        let metrics = Arc::new(metrics);
        let ready = Arc::new(AtomicBool::new(false));
        let state = ServerState {
            metrics: metrics.clone(),
            ready: ready.clone(),
        };
        let server = Server::bind(addr, state)
            .await
            .map_err(|error| anyhow::anyhow!(crate::listen::bind_error(addr, &error)))?;
        let bound = server.local_addr().unwrap_or(addr);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Ok(Self {
            metrics,
            ready,
            addr: bound,
            stop,
            task,
        })
    }

    /// Stops accepting, lets open connections finish, and waits for the server task.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
