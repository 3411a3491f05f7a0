//! A stand-in for Prometheus over the simulated cluster: a node agent's error ratio per node,
//! derived from the pods the kubelets run, for demos and deterministic simulations of a
//! controller that judges a release by its metrics.
//!
//! A pod's error ratio is its [`ERROR_RATIO_ANNOTATION`] (default [`DEFAULT_ERROR_RATIO`]), as
//! if the agent exported it. A query is answered from its first `node=~"..."` matcher (the
//! nodes it lists, as a regex alternation of literal names inside a double-quoted string): the
//! highest error ratio of the running pods on those nodes. Nothing else of PromQL is read: this
//! is a stand-in, not a query engine.
//!
//! [`SimPrometheus::serve`] answers Prometheus' instant-query API over HTTP on a socket
//! (`/api/v1/query`, the query as a GET parameter or in a POST form, what the controller's
//! analysis sends): one sample per answer, `{"resultType":"vector","result":[...]}`, an empty
//! vector for no data, a 400 `bad_data` error for a query without the matcher, so that
//! `daemonset-canary run` can be tried with `spec.analysis` against `sim serve`.
//!
//! Invariant: no running pod on the listed nodes is no data, never a value.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::store::Store;

/// The largest query form read (a rendered analysis query of thousands of nodes fits).
const MAX_FORM_BYTES: usize = 4 << 20;

/// The pod annotation that sets the error ratio its agent reports (a decimal, `0.01`).
pub const ERROR_RATIO_ANNOTATION: &str = "sim.canary.daemonset.dev/error-ratio";

/// The error ratio of a pod without [`ERROR_RATIO_ANNOTATION`]: a healthy agent's.
pub const DEFAULT_ERROR_RATIO: f64 = 0.01;

/// Why the stand-in has no value for a query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimQueryError {
    /// The query has no `node=~"..."` matcher.
    #[error("the query has no node=~\"...\" matcher, the only one the simulated Prometheus reads")]
    NoNodeMatcher,
    /// No running pod on the listed nodes.
    #[error("no data (no running pod on the listed nodes)")]
    NoData,
}

/// The stand-in; see the module documentation.
#[derive(Debug, Clone)]
pub struct SimPrometheus {
    store: Store,
}

impl SimPrometheus {
    /// A stand-in answering from `store`'s pods.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The highest error ratio of the running pods on the nodes `promql` lists.
    pub fn query(&self, promql: &str) -> Result<f64, SimQueryError> {
        let nodes = listed_nodes(promql).ok_or(SimQueryError::NoNodeMatcher)?;
        self.store
            .list::<Pod>(None)
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| {
                pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_ref())
                        .is_some_and(|node| nodes.contains(node))
            })
            .map(error_ratio)
            .reduce(f64::max)
            .ok_or(SimQueryError::NoData)
    }
}

/// The stand-in served over HTTP. Dropping it stops the server and its connections.
#[derive(Debug)]
pub struct ServedPrometheus {
    /// The address it listens on.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl ServedPrometheus {
    /// Its base URL, `http://<addr>`: what `spec.analysis.prometheus.address` names.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for ServedPrometheus {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SimPrometheus {
    /// Serves the instant-query API on `addr` (port 0: any free port); connections are
    /// accepted once this returns.
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<ServedPrometheus> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let prometheus = self.clone();
        let task = tokio::spawn(async move {
            // Dropping the set (when this task is aborted) aborts every connection.
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let prometheus = prometheus.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let prometheus = prometheus.clone();
                        async move { Ok::<_, Infallible>(prometheus.answer(request).await) }
                    });
                    let connection = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "simulated Prometheus connection ended");
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(ServedPrometheus { addr, task })
    }

    /// One HTTP request to the instant-query API.
    async fn answer<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if request.uri().path() != "/api/v1/query" {
            return reply(
                StatusCode::NOT_FOUND,
                &json!({"status": "error", "errorType": "not_found", "error": "only /api/v1/query is served"}),
            );
        }
        let mut form = request.uri().query().unwrap_or("").as_bytes().to_vec();
        match *request.method() {
            Method::GET => {}
            Method::POST => match Limited::new(request.into_body(), MAX_FORM_BYTES)
                .collect()
                .await
            {
                Ok(body) => {
                    form.push(b'&');
                    form.extend_from_slice(&body.to_bytes());
                }
                Err(_) => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        &json!({"status": "error", "errorType": "bad_data", "error": "the form could not be read"}),
                    );
                }
            },
            _ => {
                return reply(
                    StatusCode::METHOD_NOT_ALLOWED,
                    &json!({"status": "error", "errorType": "bad_data", "error": "GET or POST"}),
                );
            }
        }
        let query = form_urlencoded::parse(&form)
            .find(|(key, _)| key == "query")
            .map(|(_, value)| value.into_owned());
        let Some(query) = query else {
            return reply(
                StatusCode::BAD_REQUEST,
                &json!({"status": "error", "errorType": "bad_data", "error": "invalid parameter \"query\": no query given"}),
            );
        };
        let time = self.store.clock().now().as_millisecond() as f64 / 1000.0;
        match self.query(&query) {
            Ok(value) => reply(
                StatusCode::OK,
                &json!({"status": "success", "data": {"resultType": "vector", "result": [
                    {"metric": {}, "value": [time, value.to_string()]},
                ]}}),
            ),
            Err(SimQueryError::NoData) => reply(
                StatusCode::OK,
                &json!({"status": "success", "data": {"resultType": "vector", "result": []}}),
            ),
            Err(error @ SimQueryError::NoNodeMatcher) => reply(
                StatusCode::BAD_REQUEST,
                &json!({"status": "error", "errorType": "bad_data", "error": error.to_string()}),
            ),
        }
    }
}

fn reply(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn error_ratio(pod: &Pod) -> f64 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ERROR_RATIO_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ERROR_RATIO)
}

/// The names the first `node=~"..."` matcher of `promql` lists: the string literal unescaped
/// (`\n` is a newline, any other escaped character itself), split on the alternation's
/// unescaped `|`, each name's regex escapes undone. `None` without such a matcher, or when it
/// is not well formed.
pub fn listed_nodes(promql: &str) -> Option<Vec<String>> {
    let start = promql.find("node=~\"")? + "node=~\"".len();
    let mut literal = String::new();
    let mut chars = promql[start..].chars();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => match chars.next()? {
                'n' => literal.push('\n'),
                other => literal.push(other),
            },
            c => literal.push(c),
        }
    }
    let mut names = vec![String::new()];
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => names.last_mut()?.push(chars.next()?),
            '|' => names.push(String::new()),
            c => names.last_mut()?.push(c),
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instant-query API over a socket, as the controller's analysis and curl ask it.
    #[tokio::test]
    async fn the_served_api_answers_get_and_post_queries_as_prometheus_does() {
        use http_body_util::BodyExt;
        // A store without the cluster model, whose kubelets would play the pod's life.
        let store = Store::new(crate::SimClock::new());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "agent-a", "namespace": "default",
                         "annotations": {ERROR_RATIO_ANNOTATION: "0.25"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "agent", "image": "a:1"}]},
        }))
        .unwrap();
        store.create(&pod).unwrap();
        store
            .modify::<Pod>(
                Some("default"),
                "agent-a",
                crate::UpdateScope::Status,
                |pod| {
                    pod.status.get_or_insert_with(Default::default).phase = Some("Running".into());
                },
            )
            .unwrap();
        let served = SimPrometheus::new(store)
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        assert!(served.url().starts_with("http://127.0.0.1:"));
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let ask = |method: Method, path: String, form: Option<&'static str>| {
            let client = client.clone();
            let uri = format!("{}{path}", served.url());
            async move {
                let mut request = Request::builder().method(method).uri(uri);
                if form.is_some() {
                    request =
                        request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
                }
                let request = request
                    .body(Full::new(Bytes::from(form.unwrap_or(""))))
                    .unwrap();
                let response = client.request(request).await.unwrap();
                let status = response.status().as_u16();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (
                    status,
                    serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
                )
            }
        };
        let (status, answer) = ask(
            Method::GET,
            "/api/v1/query?query=max(agent_error_ratio%7Bnode%3D~%22node-1%22%7D)".into(),
            None,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(answer["status"], "success");
        assert_eq!(answer["data"]["resultType"], "vector");
        assert_eq!(answer["data"]["result"][0]["value"][1], "0.25");
        // The controller's form: POST, the query in the body.
        let (status, answer) = ask(
            Method::POST,
            "/api/v1/query".into(),
            Some("query=max%28agent_error_ratio%7Bnode%3D~%22node-0%7Cnode-1%22%7D%29"),
        )
        .await;
        assert_eq!(
            (status, answer["data"]["result"][0]["value"][1].clone()),
            (200, "0.25".into())
        );
        let (status, answer) = ask(
            Method::GET,
            "/api/v1/query?query=max(agent_error_ratio%7Bnode%3D~%22node-0%22%7D)".into(),
            None,
        )
        .await;
        assert_eq!(
            (status, answer["data"]["result"].clone()),
            (200, serde_json::json!([])),
            "no data"
        );
        let (status, answer) = ask(Method::GET, "/api/v1/query?query=up".into(), None).await;
        assert_eq!(
            (status, answer["errorType"].clone()),
            (400, "bad_data".into())
        );
        let (status, _) = ask(Method::GET, "/api/v1/query_range?query=up".into(), None).await;
        assert_eq!(status, 404);
    }

    #[test]
    fn the_listed_nodes_are_read_as_analysis_templates_render_them() {
        assert_eq!(
            listed_nodes(r#"max(agent_error_ratio{node=~"node-1|ip-10\\.ec2"})"#),
            Some(vec!["node-1".to_owned(), "ip-10.ec2".to_owned()])
        );
        assert_eq!(listed_nodes(r#"up{job="x"}"#), None);
        assert_eq!(listed_nodes(r#"up{node=~"unclosed"#), None);
    }
}
