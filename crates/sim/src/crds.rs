//! CustomResourceDefinitions the simulator can register at start.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;

/// A minimal `kubevirt.io/v1` `KubeVirt` CRD (namespaced, status subresource, schema that
/// keeps unknown fields), enough to store and watch KubeVirt objects.
pub fn kubevirt() -> CustomResourceDefinition {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kubevirts.kubevirt.io"},
        "spec": {
            "group": "kubevirt.io",
            "scope": "Namespaced",
            "names": {
                "plural": "kubevirts",
                "singular": "kubevirt",
                "kind": "KubeVirt",
                "listKind": "KubeVirtList",
                "shortNames": ["kv", "kvs"],
                "categories": ["all"],
            },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    });
    // The literal above is a valid CRD; a failure here would be a bug caught by the tests.
    serde_json::from_value(crd).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn kubevirt_crd_decodes() {
        let crd = super::kubevirt();
        assert_eq!(crd.spec.names.kind, "KubeVirt");
        assert_eq!(crd.spec.versions.len(), 1);
    }
}
