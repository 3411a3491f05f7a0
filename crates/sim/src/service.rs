//! Ways to reach the API server: a tower `Service` (in process, for `kube::Client`) and an
//! HTTP/1.1 server on loopback with a kubeconfig (for kubectl and other processes).

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::api::{ApiServer, ResponseBody};
use crate::audit::{AuditLog, Audited};
use crate::store::{StoreError, status_body};
use std::sync::Arc;

/// The API server as a tower `Service`: what `kube::Client::new` takes. No sockets, so it works
/// under `tokio::time::pause()`.
#[derive(Clone, Debug)]
pub struct SimService {
    api: ApiServer,
}

impl SimService {
    /// A service answering with `api`.
    pub fn new(api: ApiServer) -> Self {
        Self { api }
    }
}

async fn answer<B>(api: ApiServer, request: Request<B>) -> Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Display,
{
    let (parts, body) = request.into_parts();
    match body.collect().await {
        Ok(collected) => {
            api.handle(Request::from_parts(parts, collected.to_bytes()))
                .await
        }
        Err(e) => {
            let error = StoreError::BadRequest {
                message: format!("cannot read the request body: {e}"),
            };
            let body = serde_json::to_vec(&status_body(400, "BadRequest", &error.to_string()))
                .unwrap_or_default();
            let mut response =
                Response::new(http_body_util::Full::new(Bytes::from(body)).boxed_unsync());
            *response.status_mut() = http::StatusCode::BAD_REQUEST;
            response
        }
    }
}

impl<B> tower::Service<Request<B>> for SimService
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Display + Send,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let api = self.api.clone();
        Box::pin(async move { Ok(answer(api, request).await) })
    }
}

/// A kubeconfig pointing at `http://<addr>` with namespace `default`.
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: canary-sim
  cluster:
    server: http://{addr}
contexts:
- name: canary-sim
  context:
    cluster: canary-sim
    user: canary-sim
    namespace: default
current-context: canary-sim
users:
- name: canary-sim
  user: {{}}
"
    )
}

/// The simulator served over HTTP/1.1. Dropping it stops the server and its connections.
#[derive(Debug)]
pub struct ServedSim {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// A kubeconfig pointing at it.
    pub kubeconfig: String,
    task: JoinHandle<()>,
}

impl ServedSim {
    /// Writes [`ServedSim::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, &self.kubeconfig)
    }

    /// Stops accepting and closes every connection.
    pub fn shutdown(self) {
        self.task.abort();
    }
}

impl Drop for ServedSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `api` on `addr` (use port 0 for any free port). Connections are accepted once this
/// returns.
pub async fn serve(api: ApiServer, addr: SocketAddr) -> std::io::Result<ServedSim> {
    serve_recording(api, addr, None).await
}

/// [`serve`], writing every request answered to `audit` (see [`crate::audit`]).
pub async fn serve_recording(
    api: ApiServer,
    addr: SocketAddr,
    audit: Option<Arc<AuditLog>>,
) -> std::io::Result<ServedSim> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        // Dropping the set (when this task is aborted) aborts every connection.
        let mut connections = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let api = api.clone();
            let audit = audit.clone();
            connections.spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<_>| {
                    let api = api.clone();
                    let audit = audit.clone();
                    async move {
                        let Some(audit) = audit else {
                            return Ok::<_, Infallible>(answer(api, request).await);
                        };
                        let received = k8s_openapi::jiff::Timestamp::now();
                        let (method, uri) = (request.method().clone(), request.uri().clone());
                        let user_agent = request
                            .headers()
                            .get(http::header::USER_AGENT)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let response = answer(api, request).await;
                        audit.record(&Audited {
                            method: &method,
                            uri: &uri,
                            user_agent: &user_agent,
                            code: response.status().as_u16(),
                            received,
                        });
                        Ok::<_, Infallible>(response)
                    }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "simulator connection ended");
                }
            });
            // Reap finished connections so the set does not grow without bound.
            while connections.try_join_next().is_some() {}
        }
    });
    Ok(ServedSim {
        kubeconfig: kubeconfig_yaml(addr),
        addr,
        task,
    })
}
