//! The HTTP endpoints of the binary: `/metrics`, `/healthz` and `/readyz`, served by hyper.
//!
//! `/readyz` answers 200 while [`Health::not_ready`] has nothing to say (the process started,
//! no watcher keeps failing, a leader's caches listed; a standby is ready, it only waits for the
//! lease); `/healthz` answers 200 while the reconcile loop is not wedged and no watcher has
//! failed for minutes ([`Health::not_alive`]).
//! Otherwise both answer 503 with the reason.
//!
//! The health endpoints can have a listener of their own ([`Server::bind_health`], `run
//! --health-addr`), with its own connections: then no number of metrics clients, slow or idle,
//! can keep the kubelet's probes waiting and get a healthy controller restarted. The metrics
//! listener answers them too, for the clients that read them there.
//!
//! # Invariants
//!
//! The server cannot be made to hold the process or its memory: at most [`MAX_CONNECTIONS`]
//! connections are served at once (more wait in the kernel's backlog), a client has
//! [`HEADER_READ_TIMEOUT`] to send its request headers and a connection lives at most
//! [`CONNECTION_LIFETIME`], a failing `accept` (file descriptors exhausted) backs off instead of
//! spinning, and a graceful stop waits at most [`SHUTDOWN_GRACE`] for open connections.

use crate::metrics::{CONTENT_TYPE, Metrics};
use bytes::Bytes;
use canary_kube_adapter::Health;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may stay open (scrapers reconnect after it).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// How long a graceful stop waits for open connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The longest pause after a failed `accept`.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What the endpoints read: the metrics and the health.
#[derive(Clone)]
pub struct ServerState {
    /// Metrics encoded on every scrape.
    pub metrics: Arc<Metrics>,
    /// Readiness and liveness (see the module docs).
    pub health: Health,
}

/// A bound listener, so callers learn the port before serving (useful with port 0).
pub struct Server {
    listener: TcpListener,
    state: ServerState,
    serves: Serves,
}

/// Which endpoints a listener answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Serves {
    /// `/metrics`, `/healthz` and `/readyz`.
    All,
    /// `/healthz` and `/readyz` only: the probes' own listener.
    Health,
}

impl Server {
    /// Binds `addr`.
    pub async fn bind(addr: SocketAddr, state: ServerState) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            state,
            serves: Serves::All,
        })
    }

    /// Binds `addr` for `/healthz` and `/readyz` only, with connections of its own.
    pub async fn bind_health(addr: SocketAddr, state: ServerState) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            state,
            serves: Serves::Health,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets open connections finish (at most
    /// [`SHUTDOWN_GRACE`]).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let graceful = GracefulShutdown::new();
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let mut backoff = Duration::from_millis(10);
        tokio::pin!(shutdown);
        loop {
            // A free slot first: beyond the cap, connections wait in the listen backlog.
            let slot = tokio::select! {
                slot = slots.clone().acquire_owned() => slot,
                () = &mut shutdown => break,
            };
            let Ok(slot) = slot else { break };
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let stream = match accepted {
                Ok((stream, _peer)) => {
                    backoff = Duration::from_millis(10);
                    stream
                }
                Err(error) => {
                    // EMFILE and friends: retrying at once would spin a core.
                    tracing::warn!(%error, ?backoff, "accepting a metrics connection failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            };
            let state = self.state.clone();
            let serves = self.serves;
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, serves, &request)) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                match tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "metrics connection ended with an error");
                    }
                    Err(_) => tracing::debug!("metrics connection closed after its lifetime"),
                    Ok(Ok(())) => {}
                }
                drop(slot);
            });
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::debug!("metrics connections still open at the stop: closed");
        }
    }
}

fn route(
    state: &ServerState,
    serves: Serves,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match request.uri().path() {
        "/metrics" if serves == Serves::Health => text(
            StatusCode::NOT_FOUND,
            "not found: this listener serves /healthz and /readyz; /metrics is on --metrics-addr\n",
        ),
        "/metrics" => match state.metrics.encode() {
            Ok(body) => respond(StatusCode::OK, CONTENT_TYPE, body),
            Err(error) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot encode metrics: {error}\n"),
            ),
        },
        "/healthz" => match state.health.not_alive() {
            None => text(StatusCode::OK, "ok\n"),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("{why}\n")),
        },
        "/readyz" => match state.health.not_ready() {
            None => text(StatusCode::OK, "ready\n"),
            Some(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("not ready: {why}\n"),
            ),
        },
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

/// Fresh metrics served in the background on a bound address (and the probes on one of their
/// own when asked), not ready until the caller says [`Health::set_started`]: what `run` and
/// `observe-kubevirt` both start with.
pub struct BackgroundServer {
    /// The metrics the server encodes.
    pub metrics: Arc<Metrics>,
    /// What `/readyz` and `/healthz` answer from; hand it to the controller.
    pub health: Health,
    /// The metrics address actually bound.
    pub addr: SocketAddr,
    /// The probes' own address actually bound, when asked for.
    pub health_addr: Option<SocketAddr>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl BackgroundServer {
    /// Binds `addr` (and `health_addr`, when given, for the probes alone) and serves `metrics`
    /// until [`BackgroundServer::stop`].
    pub async fn start(
        addr: SocketAddr,
        health_addr: Option<SocketAddr>,
        metrics: Metrics,
    ) -> anyhow::Result<Self> {
        let metrics = Arc::new(metrics);
        let health = Health::default();
        let state = ServerState {
            metrics: metrics.clone(),
            health: health.clone(),
        };
        let bind_error = |addr, error| anyhow::anyhow!(crate::listen::bind_error(addr, &error));
        let server = Server::bind(addr, state.clone())
            .await
            .map_err(|error| bind_error(addr, error))?;
        let probes = match health_addr {
            Some(health_addr) => Some(
                Server::bind_health(health_addr, state)
                    .await
                    .map_err(|error| bind_error(health_addr, error))?,
            ),
            None => None,
        };
        let bound = server.local_addr().unwrap_or(addr);
        let health_bound = probes
            .as_ref()
            .zip(health_addr)
            .map(|(probes, asked)| probes.local_addr().unwrap_or(asked));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let tasks = std::iter::once(server)
            .chain(probes)
            .map(|server| {
                let mut stopped = stopped.clone();
                tokio::spawn(server.serve(async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                }))
            })
            .collect();
        Ok(Self {
            metrics,
            health,
            addr: bound,
            health_addr: health_bound,
            stop,
            tasks,
        })
    }

    /// Stops accepting, lets open connections finish (at most [`SHUTDOWN_GRACE`]), and waits
    /// for the server tasks.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
