//! The Table form of get, list and watch responses (`meta.k8s.io/v1` `Table`), which kubectl
//! asks for with `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` and prints as it comes:
//! as `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go` (`asTable`) builds it,
//! with the columns and cells of [`super::printers`].
//!
//! Each row carries its object as `includeObject` asks: `Metadata` (the default: a
//! `PartialObjectMetadata`, which kubectl reads for the namespace and labels), `Object` (the
//! whole object, for `--sort-by`) or `None`. In a watch, every event's object is a one-row
//! Table and only the first carries the column definitions.
//!
//! Invariant: a client that does not ask for a Table gets exactly the plain JSON it got before.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::printers::Printer;
use super::query::Query;
use crate::registry::ResourceInfo;
use crate::store::StoreError;

/// `includeObject`: what each row's `object` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// A request for the Table form of one resource: whom to print with, and how.
#[derive(Clone, Debug)]
pub struct TableView {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`, as asked.
    api_version: &'static str,
    include: IncludeObject,
    printer: Printer,
}

impl TableView {
    /// The Table form the request asks for, if any: the first media type of `accept` the
    /// server can produce decides (JSON Tables of `meta.k8s.io` v1 or v1beta1, else plain
    /// JSON). Fails on an `includeObject` Kubernetes does not know.
    pub(super) fn negotiate(
        accept: Option<&str>,
        query: &Query,
        info: &ResourceInfo,
    ) -> Result<Option<Self>, StoreError> {
        let Some(api_version) = accept.and_then(table_version) else {
            return Ok(None);
        };
        let include = match query.get("includeObject").unwrap_or("") {
            "" | "Metadata" => IncludeObject::Metadata,
            "Object" => IncludeObject::Object,
            "None" => IncludeObject::None,
            other => {
                return Err(StoreError::BadRequest {
                    message: format!("unrecognized includeObject value: {other:?}"),
                });
            }
        };
        Ok(Some(Self {
            api_version,
            include,
            printer: Printer::for_resource(info),
        }))
    }

    /// A Table of `objects` at `resource_version`; `headers: false` leaves the column
    /// definitions out (`null`), as every watch event after the first does.
    pub fn table<'a>(
        &self,
        objects: impl IntoIterator<Item = &'a Value>,
        resource_version: &str,
        headers: bool,
        now: Timestamp,
    ) -> Value {
        let rows: Vec<Value> = objects
            .into_iter()
            .map(|object| {
                json!({
                    "cells": self.printer.cells(object, now),
                    "object": self.row_object(object),
                })
            })
            .collect();
        json!({
            "kind": "Table",
            "apiVersion": self.api_version,
            "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": if headers { json!(self.printer.columns()) } else { Value::Null },
            "rows": rows,
        })
    }

    fn row_object(&self, object: &Value) -> Value {
        match self.include {
            IncludeObject::None => Value::Null,
            IncludeObject::Object => object.clone(),
            IncludeObject::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": self.api_version,
                "metadata": object["metadata"],
            }),
        }
    }
}

/// The `meta.k8s.io` version of the first acceptable media type, if it is a JSON Table.
fn table_version(accept: &str) -> Option<&'static str> {
    for media_type in accept.split(',') {
        let mut parts = media_type.split(';').map(str::trim);
        let essence = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        let json = matches!(essence, "application/json" | "application/*" | "*/*");
        match (json, param("as"), param("g"), param("v")) {
            (true, Some("Table"), Some("meta.k8s.io"), Some("v1")) => {
                return Some("meta.k8s.io/v1");
            }
            (true, Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) => {
                return Some("meta.k8s.io/v1beta1");
            }
            // A conversion this server does not make (PartialObjectMetadata, another group):
            // try the next media type.
            (true, Some(_), _, _) => {}
            (true, None, _, _) => return None,
            // Protobuf, CBOR, YAML: not produced here, the client lists JSON after them.
            (false, _, _, _) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiServer;
    use crate::clock::SimClock;
    use crate::faults::Faults;
    use crate::store::Store;
    use bytes::Bytes;
    use http::Request;
    use http_body_util::BodyExt;

    const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

    async fn get_table(api: &ApiServer, uri: &str) -> (u16, Value) {
        let request = Request::get(uri)
            .header("accept", TABLE)
            .body(Bytes::new())
            .unwrap();
        let response = api.handle(request).await;
        let code = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn lists_and_gets_come_as_tables_with_the_asked_row_objects() {
        let store = Store::new(SimClock::new());
        store
            .create_value(
                &crate::registry::ResourceKey::new("", "v1", "configmaps"),
                json!({"metadata": {"name": "c", "namespace": "default", "labels": {"a": "b"}},
                       "data": {"x": "1", "y": "2"}}),
            )
            .unwrap();
        let api = ApiServer::new(store, Faults::new(0));
        let (code, table) = get_table(&api, "/api/v1/namespaces/default/configmaps").await;
        assert_eq!(code, 200);
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        let names: Vec<&Value> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(names, ["Name", "Data", "Age"]);
        assert_eq!(table["rows"][0]["cells"], json!(["c", 2, "0s"]));
        let object = &table["rows"][0]["object"];
        assert_eq!(object["kind"], "PartialObjectMetadata");
        assert_eq!(object["metadata"]["labels"]["a"], "b");
        assert!(object.get("data").is_none(), "metadata only by default");

        let (_, whole) = get_table(
            &api,
            "/api/v1/namespaces/default/configmaps/c?includeObject=Object",
        )
        .await;
        assert_eq!(whole["rows"][0]["object"]["data"]["y"], "2");
        assert_eq!(whole["rows"].as_array().map(Vec::len), Some(1));
        let (_, bare) = get_table(
            &api,
            "/api/v1/namespaces/default/configmaps?includeObject=None",
        )
        .await;
        assert!(bare["rows"][0]["object"].is_null());
        let (code, error) = get_table(
            &api,
            "/api/v1/namespaces/default/configmaps?includeObject=All",
        )
        .await;
        assert_eq!((code, error["reason"].as_str()), (400, Some("BadRequest")));
    }

    #[test]
    fn the_first_producible_media_type_wins() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(table_version(kubectl), Some("meta.k8s.io/v1"));
        assert_eq!(
            table_version("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Some("meta.k8s.io/v1beta1")
        );
        assert_eq!(table_version("application/json"), None);
        assert_eq!(
            table_version("application/vnd.kubernetes.protobuf,application/json"),
            None
        );
        assert_eq!(
            table_version(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            ),
            None
        );
    }
}
