//! A small typed client of Prometheus' instant-query API (`POST /api/v1/query`, the query
//! form-encoded in the body, so that a query listing thousands of nodes fits no URL limit), on
//! the hyper client kube already brings: one number per query, or why there is none.
//!
//! No Prometheus client crate fits: the maintained one (`prometheus-http-query`) is built on
//! reqwest and its TLS stacks, a second HTTP client beside kube's hyper for one GET. This one
//! reads only what a measurement needs.
//!
//! # Invariants
//!
//! - Every request has a deadline ([`QueryApi::query`]'s `timeout`): a Prometheus that does not
//!   answer is an error after it, never a hang.
//! - A query that does not give exactly one number is an error that says why (no series,
//!   several series, a range vector, a string): the caller counts it inconclusive.

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// The largest answer read: one sample is a few hundred bytes; an aggregation forgotten over
/// 5,000 nodes is far more, and is refused as several series anyway.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Why a query gave no number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The address is not an `http://` URL.
    #[error("address {0:?} is not an http:// URL")]
    BadAddress(String),
    /// No connection, or it broke.
    #[error("Prometheus unreachable: {0}")]
    Unreachable(String),
    /// No answer within the timeout.
    #[error("no answer from Prometheus within {0:?}")]
    Timeout(Duration),
    /// Prometheus refused the query (a PromQL error, a bad request).
    #[error("Prometheus answered {status}: {error}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Prometheus' `errorType: error`, or the start of the body.
        error: String,
    },
    /// The answer is not Prometheus' JSON.
    #[error("undecodable answer: {0}")]
    Undecodable(String),
    /// An empty vector: no series matched.
    #[error("no data (the query matched no series)")]
    NoData,
    /// More than one series: the query needs an aggregation (`sum`, `max`, `avg`).
    #[error("{0} series instead of one; aggregate them (sum, max or avg)")]
    SeveralSeries(usize),
    /// A range vector or a string instead of a number.
    #[error("a {0} instead of a number; use an instant query")]
    NotANumber(String),
}

/// Asks Prometheus one instant query. A trait so that tests and the deterministic simulation
/// can answer without a server.
pub trait QueryApi: std::fmt::Debug + Send + Sync + 'static {
    /// The value of `promql` at Prometheus' now, from the server at `address`, within `timeout`.
    fn query<'a>(
        &'a self,
        address: &'a str,
        promql: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>>;
}

/// [`QueryApi`] over HTTP.
#[derive(Debug, Clone)]
pub struct HttpPrometheus {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HttpPrometheus {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }
}

impl QueryApi for HttpPrometheus {
    fn query<'a>(
        &'a self,
        address: &'a str,
        promql: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, self.get(address, promql)).await {
                Ok(answer) => answer,
                Err(_) => Err(QueryError::Timeout(timeout)),
            }
        })
    }
}

impl HttpPrometheus {
    async fn get(&self, address: &str, promql: &str) -> Result<f64, QueryError> {
        let request = hyper::Request::post(query_uri(address)?)
            .header(
                hyper::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(Full::new(Bytes::from(form_body(promql))))
            .map_err(|e| QueryError::BadAddress(e.to_string()))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| QueryError::Unreachable(crate::error::chain(&e)))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    QueryError::Undecodable(format!(
                        "an answer larger than {} MiB (aggregate the query to one series)",
                        MAX_ANSWER_BYTES >> 20
                    ))
                } else {
                    QueryError::Unreachable(e.to_string())
                }
            })?
            .to_bytes();
        parse_answer(status, &body)
    }
}

/// `<address>/api/v1/query`, for an `http://` address.
pub fn query_uri(address: &str) -> Result<hyper::Uri, QueryError> {
    if !address.starts_with("http://") {
        return Err(QueryError::BadAddress(address.to_owned()));
    }
    format!("{}/api/v1/query", address.trim_end_matches('/'))
        .parse()
        .map_err(|_| QueryError::BadAddress(address.to_owned()))
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
            return Err(QueryError::Undecodable(error.to_string()));
        }
        Err(_) => {
            let start: String = String::from_utf8_lossy(body).chars().take(200).collect();
            return Err(QueryError::Refused {
                status,
                error: start,
            });
        }
    };
    if answer.status != "success" {
        return Err(QueryError::Refused {
            status,
            error: format!(
                "{}: {}",
                answer.error_type.unwrap_or_default(),
                answer.error.unwrap_or_default()
            ),
        });
    }
    let data = answer
        .data
        .ok_or_else(|| QueryError::Undecodable("no data field".to_owned()))?;
    let sample = match data.result_type.as_str() {
        "vector" => {
            let series: Vec<Series> = serde_json::from_value(data.result)
                .map_err(|e| QueryError::Undecodable(e.to_string()))?;
            match series.as_slice() {
                [] => return Err(QueryError::NoData),
                [one] => one.value.1.clone(),
                several => return Err(QueryError::SeveralSeries(several.len())),
            }
        }
        "scalar" => {
            let (_, value): (serde_json::Value, String) = serde_json::from_value(data.result)
                .map_err(|e| QueryError::Undecodable(e.to_string()))?;
            value
        }
        "matrix" => return Err(QueryError::NotANumber("range vector".to_owned())),
        other => return Err(QueryError::NotANumber(other.to_owned())),
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
            .map_err(|_| QueryError::Undecodable(format!("sample value {text:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_query_is_form_encoded_in_the_body() {
        let uri = query_uri("http://prom:9090/").unwrap();
        assert_eq!(uri.to_string(), "http://prom:9090/api/v1/query");
        assert_eq!(
            form_body(r#"sum(x{node=~"a\\.b|c"})"#),
            "query=sum%28x%7Bnode%3D%7E%22a%5C%5C.b%7Cc%22%7D%29"
        );
        assert_eq!(
            query_uri("https://prom"),
            Err(QueryError::BadAddress("https://prom".to_owned()))
        );
    }
}
