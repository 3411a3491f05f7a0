//! Response bodies: JSON documents with their status code, plain text for the health
//! endpoints, and errors as Kubernetes `Status` objects
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/`).

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use super::ResponseBody;
use crate::store::{StoreError, status_body};

pub(super) fn not_found_path() -> StoreError {
    StoreError::NotFound {
        resource: String::new(),
        name: String::new(),
    }
}

pub(super) fn unsupported_media_type(content_type: &str) -> StoreError {
    StoreError::BadRequest {
        message: format!("the body of the request was in an unknown format: {content_type}"),
    }
}

pub(super) fn bytes_response(code: u16, body: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(body).boxed_unsync());
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

pub(super) fn json_response(code: u16, body: &Value) -> Response<ResponseBody> {
    bytes_response(
        code,
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

pub(super) fn text_response(code: u16, body: &'static str) -> Response<ResponseBody> {
    let mut response = bytes_response(code, Bytes::from_static(body.as_bytes()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    response
}

pub(super) fn error_response(error: &StoreError) -> Response<ResponseBody> {
    let body = match error {
        StoreError::NotFound { resource, .. } if resource.is_empty() => status_body(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
        StoreError::BadRequest { message }
            if message.starts_with("the body of the request was in an unknown format") =>
        {
            return json_response(415, &status_body(415, "UnsupportedMediaType", message));
        }
        other => other.to_status(),
    };
    let response = json_response(error.code(), &body);
    match error {
        // A refused write is answered with the warnings of the same validation.
        StoreError::InvalidFields { warnings, .. } => {
            super::validation::Warnings::from(warnings.clone()).attach(response)
        }
        _ => response,
    }
}
