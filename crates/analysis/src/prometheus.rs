//! A small typed client of Prometheus' instant-query API (`POST /api/v1/query`, the query
//! form-encoded in the body, so that a query listing thousands of nodes fits no URL limit), on
//! the hyper and rustls stack kube already brings: one number per query, or why there is none.
//!
//! No Prometheus client crate fits: the maintained one (`prometheus-http-query`) is built on
//! reqwest and its TLS stacks, a second HTTP client beside kube's hyper for one POST. This one
//! reads only what a measurement needs.
//!
//! # Invariants
//!
//! - Every request has a deadline ([`Provider::query`]'s `timeout`): a Prometheus that does not
//!   answer is an error after it, never a hang.
//! - A query that does not give exactly one number is an error that says why (no series,
//!   several series, a range vector, a string): the caller counts it inconclusive.
//! - A bearer token never appears in a log or a `Debug` output ([`Endpoint`]'s `Debug` hides
//!   it), and is only sent over https (the CRD and [`query_uri`]'s caller refuse it over http).
//! - An `https://` address is verified against the CA of the endpoint, or the system's roots:
//!   there is no way to skip the verification.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;

use canary_state_machine::{OUTSIDE_TEXT_BYTES, cut};

use crate::provider::{Endpoint, Provider, QueryError};

/// Outside text (an answer's error, a connection error), cut for a status, an event or a log.
fn outside(text: &str) -> String {
    cut(text, OUTSIDE_TEXT_BYTES).into_owned()
}

/// The largest answer read: one sample is a few hundred bytes; an aggregation forgotten over
/// a few hundred nodes is more, and is refused as several series anyway. The cap bounds what
/// one query can make the controller hold (issue 47: 1 MiB answers from 10 objects took it to
/// 1 GB).
pub const MAX_ANSWER_BYTES: usize = 64 << 10;

/// The https clients kept, one per CA: a CA that rotates leaves an old one behind, so the map
/// starts over past this many.
const MAX_TLS_CLIENTS: usize = 8;

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The [`Provider`] of Prometheus' instant-query API, over HTTP or HTTPS.
#[derive(Debug, Clone)]
pub struct HttpPrometheus {
    pub(crate) http: Client<HttpConnector, Full<Bytes>>,
    /// By CA (`None`: the system's roots), built at first use.
    https: Arc<Mutex<HashMap<Option<Vec<u8>>, HttpsClient>>>,
}

/// The TCP connector; under TLS (`https`), it must let `https://` URIs through.
fn connector(https: bool) -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    connector.enforce_http(!https);
    connector
}

impl Default for HttpPrometheus {
    fn default() -> Self {
        Self {
            http: Client::builder(TokioExecutor::new()).build(connector(false)),
            https: Arc::default(),
        }
    }
}

impl Provider for HttpPrometheus {
    fn query<'a>(
        &'a self,
        endpoint: &'a Endpoint,
        promql: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, self.post(endpoint, promql)).await {
                Ok(answer) => answer,
                Err(_) => Err(QueryError::Timeout(timeout)),
            }
        })
    }
}

impl HttpPrometheus {
    async fn post(&self, endpoint: &Endpoint, promql: &str) -> Result<f64, QueryError> {
        let uri = query_uri(&endpoint.address)?;
        let mut request = hyper::Request::post(uri.clone()).header(
            hyper::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        );
        if let Some(token) = &endpoint.bearer_token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(form_body(promql))))
            .map_err(|e| QueryError::BadAddress(e.to_string()))?;
        let sent = if uri.scheme() == Some(&hyper::http::uri::Scheme::HTTPS) {
            self.https_client(endpoint.ca_pem.as_deref())?
                .request(request)
                .await
        } else {
            self.http.request(request).await
        };
        let response =
            sent.map_err(|e| QueryError::Unreachable(outside(&crate::provider::error_chain(&e))))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    QueryError::Undecodable(format!(
                        "an answer larger than {} KiB (aggregate the query to one series)",
                        MAX_ANSWER_BYTES >> 10
                    ))
                } else {
                    QueryError::Unreachable(outside(&e.to_string()))
                }
            })?
            .to_bytes();
        parse_answer(status, &body)
    }

    /// The https client that trusts `ca_pem` (or the system's roots), built once per CA.
    pub(crate) fn https_client(&self, ca_pem: Option<&[u8]>) -> Result<HttpsClient, QueryError> {
        let key = ca_pem.map(<[u8]>::to_vec);
        let mut clients = self
            .https
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(ca_pem)?)
            .https_only()
            .enable_http1()
            .wrap_connector(connector(true));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        if clients.len() >= MAX_TLS_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// A TLS client configuration that trusts the certificates of `ca_pem`, or the system's roots.
pub fn tls_config(ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, QueryError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| QueryError::Tls(e.to_string()))?;
    let config = match ca_pem {
        None => builder
            .with_native_roots()
            .map_err(|e| QueryError::Tls(format!("the system's root certificates: {e}")))?
            .with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate =
                    certificate.map_err(|e| QueryError::Tls(format!("the CA's PEM: {e}")))?;
                roots
                    .add(certificate)
                    .map_err(|e| QueryError::Tls(format!("a CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(QueryError::Tls(
                    "the CA holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(config)
}

/// `<address>/api/v1/query`, for an `http://` or `https://` address, built from the parsed
/// address the allow-list judges ([`AnalysisAddress`](crate::AnalysisAddress)): a URL that
/// prefix cannot judge (`user@host`, `?`, `#`) is refused here too.
pub fn query_uri(address: &str) -> Result<hyper::Uri, QueryError> {
    crate::AnalysisAddress::parse(address)
        .and_then(|parsed| parsed.query_uri())
        .map_err(|e| QueryError::BadAddress(cut(&e.to_string(), OUTSIDE_TEXT_BYTES).into_owned()))
}

/// The form body of an instant query: `query=<promql>`, form-encoded.
pub fn form_body(promql: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("query", promql)
        .finish()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Series {
    value: (serde_json::Value, String),
}

/// The number in a Prometheus answer (HTTP `status`, JSON `body`), or why there is none.
pub fn parse_answer(status: u16, body: &[u8]) -> Result<f64, QueryError> {
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(error) if (200..300).contains(&status) => {
            return Err(QueryError::Undecodable(outside(&error.to_string())));
        }
        Err(_) => {
            // The start of the page only: cut before it is decoded as a whole.
            let start = body.get(..OUTSIDE_TEXT_BYTES).unwrap_or(body);
            return Err(QueryError::Refused {
                status,
                error: outside(&String::from_utf8_lossy(start)),
            });
        }
    };
    if answer.status != "success" {
        // Prometheus' error is as long as whoever answers wants (issue 47): cut each part
        // before they are joined, so that no copy of the whole is made.
        let error_type = answer.error_type.unwrap_or_default();
        let error = answer.error.unwrap_or_default();
        return Err(QueryError::Refused {
            status,
            error: format!("{}: {}", cut(&error_type, 64), outside(&error)),
        });
    }
    let data = answer
        .data
        .ok_or_else(|| QueryError::Undecodable("no data field".to_owned()))?;
    let sample = match data.result_type.as_str() {
        "vector" => {
            let series: Vec<Series> = serde_json::from_value(data.result)
                .map_err(|e| QueryError::Undecodable(outside(&e.to_string())))?;
            match series.as_slice() {
                [] => return Err(QueryError::NoData),
                [one] => one.value.1.clone(),
                several => return Err(QueryError::SeveralSeries(several.len())),
            }
        }
        "scalar" => {
            let (_, value): (serde_json::Value, String) = serde_json::from_value(data.result)
                .map_err(|e| QueryError::Undecodable(outside(&e.to_string())))?;
            value
        }
        "matrix" => return Err(QueryError::NotANumber("range vector".to_owned())),
        other => return Err(QueryError::NotANumber(cut(other, 64).into_owned())),
    };
    parse_sample(&sample)
}

/// A sample value as Prometheus writes it: a decimal, `NaN`, `+Inf` or `-Inf`.
fn parse_sample(text: &str) -> Result<f64, QueryError> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => text
            .parse()
            .map_err(|_| QueryError::Undecodable(format!("sample value {:?}", cut(text, 64)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderKind;

    #[test]
    fn one_series_or_a_scalar_is_a_number() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"node":"a"},"value":[1700000000.5,"0.25"]}]}}"#;
        assert_eq!(parse_answer(200, vector), Ok(0.25));
        let scalar =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}}"#;
        assert_eq!(parse_answer(200, scalar), Ok(3.0));
        let infinite =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1,"+Inf"]}}"#;
        assert_eq!(parse_answer(200, infinite), Ok(f64::INFINITY));
        let nan = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#;
        assert!(parse_answer(200, nan).is_ok_and(f64::is_nan));
    }

    #[test]
    fn anything_else_says_why_there_is_no_number() {
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse_answer(200, empty), Err(QueryError::NoData));
        let two = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]},{"metric":{},"value":[1,"2"]}]}}"#;
        assert_eq!(parse_answer(200, two), Err(QueryError::SeveralSeries(2)));
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(matches!(
            parse_answer(200, matrix),
            Err(QueryError::NotANumber(_))
        ));
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        let error = parse_answer(400, refused).unwrap_err().to_string();
        assert_eq!(
            error,
            "Prometheus answered 400: bad_data: parse error at char 4"
        );
        assert!(matches!(
            parse_answer(502, b"Bad Gateway"),
            Err(QueryError::Refused { status: 502, .. })
        ));
        assert!(matches!(
            parse_answer(200, b"<html>"),
            Err(QueryError::Undecodable(_))
        ));
    }

    #[test]
    fn a_huge_error_or_page_is_cut_to_a_few_hundred_bytes() {
        let huge = "x".repeat(MAX_ANSWER_BYTES - 100);
        let json = format!(r#"{{"status":"error","errorType":"{huge}","error":"{huge}"}}"#);
        let error = parse_answer(422, json.as_bytes()).unwrap_err().to_string();
        assert!(error.len() < 2 * OUTSIDE_TEXT_BYTES, "{}", error.len());
        assert!(error.contains("[cut from"), "{error}");
        let page = parse_answer(502, huge.as_bytes()).unwrap_err().to_string();
        assert!(page.len() < 2 * OUTSIDE_TEXT_BYTES, "{}", page.len());
        let undecodable = format!(
            r#"{{"status":"success","data":{{"resultType":"scalar","result":[1,"{huge}"]}}}}"#
        );
        let error = parse_answer(200, undecodable.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(error.len() < OUTSIDE_TEXT_BYTES, "{}", error.len());
    }

    /// One request to a loopback server that keeps what it received and answers one sample.
    #[tokio::test]
    async fn the_token_goes_in_the_authorization_header_and_never_in_debug() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 8192];
            let read = stream.read(&mut request).await.unwrap();
            let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0.5"]}}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&request[..read]).into_owned()
        });
        let endpoint = Endpoint {
            provider: ProviderKind::Prometheus,
            address: format!("http://127.0.0.1:{port}"),
            bearer_token: Some("s3cret".into()),
            ca_pem: None,
        };
        let value = HttpPrometheus::default()
            .query(&endpoint, "up", Duration::from_secs(5))
            .await;
        assert_eq!(value, Ok(0.5));
        let request = server.await.unwrap().to_ascii_lowercase();
        assert!(request.starts_with("post /api/v1/query "), "{request}");
        assert!(
            request.contains("authorization: bearer s3cret"),
            "{request}"
        );
        assert!(!format!("{endpoint:?}").contains("s3cret"));
    }

    #[test]
    fn a_ca_without_a_certificate_is_refused() {
        let error = tls_config(Some(b"not a certificate")).unwrap_err();
        assert!(error.to_string().contains("no PEM certificate"), "{error}");
        let ca = include_bytes!("../../../testdata/tls/ca.crt");
        assert!(tls_config(Some(ca)).is_ok());
    }

    #[test]
    fn the_query_is_form_encoded_in_the_body() {
        let uri = query_uri("http://prom:9090/").unwrap();
        assert_eq!(uri.to_string(), "http://prom:9090/api/v1/query");
        assert_eq!(
            form_body(r#"sum(x{node=~"a\\.b|c"})"#),
            "query=sum%28x%7Bnode%3D%7E%22a%5C%5C.b%7Cc%22%7D%29"
        );
        assert_eq!(
            query_uri("https://prom").map(|uri| uri.to_string()),
            Ok("https://prom/api/v1/query".to_owned())
        );
        assert_eq!(
            query_uri("ftp://prom").map_err(|e| e.to_string()),
            Err(r#"address "ftp://prom" is not an http:// or https:// URL"#.to_owned())
        );
        // The request goes where the allow-list looked: never past a `#` or to a `user@host`.
        assert!(query_uri("http://prom:9090/admin#").is_err());
        assert!(query_uri("http://prom:9090@evil").is_err());
    }
}
