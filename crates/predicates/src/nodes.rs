//! Nodes: whether a node may take a new pod now ([`node_health`]), which zone it is in, and
//! which nodes a `LabelSelector` picks ([`label_selector_matches`]), as Kubernetes decides.
//!
//! A selector reads labels through [`Labels`], a lookup by key: a `BTreeMap` as an object's
//! metadata holds them, or any compact form a cache keeps them in (the adapter's node cache
//! keeps each node's labels in one allocation, issue 20).

use std::collections::BTreeMap;

use canary_state_machine::NodeHealth;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A node's health for a rollout: `Cordoned` when `spec.unschedulable` is set, `NotReady` when
/// its `Ready` condition is not `True` (missing, `False` or `Unknown`), else `Healthy`. A
/// cordoned node is reported as such even when also NotReady: someone is working on it.
pub fn node_health(node: &Node) -> NodeHealth {
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return NodeHealth::Cordoned;
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if ready {
        NodeHealth::Healthy
    } else {
        NodeHealth::NotReady
    }
}

/// The value of the node's `key` label (for example `topology.kubernetes.io/zone`).
pub fn node_label<'n>(node: &'n Node, key: &str) -> Option<&'n str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A set of labels a selector can read: the value of a key, if the key is there.
pub trait Labels {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A `LabelSelector` Kubernetes would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSelector {
    /// An operator other than `In`, `NotIn`, `Exists` and `DoesNotExist`.
    #[error(
        "matchExpressions[{index}]: unknown operator {operator:?} (In, NotIn, Exists or DoesNotExist)"
    )]
    UnknownOperator {
        /// Index of the expression.
        index: usize,
        /// The operator given.
        operator: String,
    },
    /// `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with some.
    #[error("matchExpressions[{index}]: operator {operator} {rule}")]
    Values {
        /// Index of the expression.
        index: usize,
        /// The operator given.
        operator: String,
        /// What the operator needs.
        rule: &'static str,
    },
}

/// Whether `labels` satisfy `selector`, as `metav1.LabelSelectorAsSelector` does: every
/// `matchLabels` pair and every `matchExpressions` requirement must hold; an empty selector
/// matches everything.
///
/// # Errors
///
/// [`InvalidSelector`] for an expression Kubernetes would refuse.
pub fn label_selector_matches(
    selector: &LabelSelector,
    labels: &(impl Labels + ?Sized),
) -> Result<bool, InvalidSelector> {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.label(key) == Some(value.as_str()));
    let mut matches = pairs;
    for (index, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let values = expression.values.as_deref().unwrap_or_default();
        let value = labels.label(&expression.key);
        let operator = expression.operator.as_str();
        let needs = |rule: &'static str| InvalidSelector::Values {
            index,
            operator: operator.to_owned(),
            rule,
        };
        let holds = match operator {
            "In" | "NotIn" if values.is_empty() => return Err(needs("needs values")),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(needs("takes no values"));
            }
            "In" => value.is_some_and(|v| values.iter().any(|listed| listed == v)),
            "NotIn" => value.is_none_or(|v| values.iter().all(|listed| listed != v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => {
                return Err(InvalidSelector::UnknownOperator {
                    index,
                    operator: operator.to_owned(),
                });
            }
        };
        matches = matches && holds;
    }
    Ok(matches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn node(ready: Option<&str>, unschedulable: bool) -> Node {
        Node {
            spec: Some(NodeSpec {
                unschedulable: unschedulable.then_some(true),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: ready.map(|status| {
                    vec![NodeCondition {
                        type_: "Ready".into(),
                        status: status.into(),
                        ..NodeCondition::default()
                    }]
                }),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn health_reads_ready_and_cordon() {
        assert_eq!(node_health(&node(Some("True"), false)), NodeHealth::Healthy);
        assert_eq!(
            node_health(&node(Some("False"), false)),
            NodeHealth::NotReady
        );
        assert_eq!(
            node_health(&node(Some("Unknown"), false)),
            NodeHealth::NotReady
        );
        assert_eq!(node_health(&node(None, false)), NodeHealth::NotReady);
        assert_eq!(node_health(&node(Some("True"), true)), NodeHealth::Cordoned);
        assert_eq!(
            node_health(&node(Some("False"), true)),
            NodeHealth::Cordoned
        );
    }

    #[test]
    fn a_node_label_is_read_by_key() {
        let mut zoned = node(Some("True"), false);
        zoned.metadata.labels = Some(labels(&[("topology.kubernetes.io/zone", "eu-1a")]));
        assert_eq!(
            node_label(&zoned, "topology.kubernetes.io/zone"),
            Some("eu-1a")
        );
        assert_eq!(node_label(&zoned, "topology.kubernetes.io/region"), None);
        assert_eq!(node_label(&node(Some("True"), false), "anything"), None);
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        let node = labels(&[("canary", "true"), ("zone", "a")]);
        let everything = LabelSelector::default();
        assert_eq!(label_selector_matches(&everything, &node), Ok(true));
        let pair = LabelSelector {
            match_labels: Some(labels(&[("canary", "true")])),
            ..LabelSelector::default()
        };
        assert_eq!(label_selector_matches(&pair, &node), Ok(true));
        assert_eq!(label_selector_matches(&pair, &labels(&[])), Ok(false));
        for (operator, values, expected) in [
            ("In", &["a", "b"][..], true),
            ("In", &["c"][..], false),
            ("NotIn", &["c"][..], true),
            ("NotIn", &["a"][..], false),
            ("Exists", &[][..], true),
            ("DoesNotExist", &[][..], false),
        ] {
            let selector = LabelSelector {
                match_expressions: Some(vec![expression("zone", operator, values)]),
                ..LabelSelector::default()
            };
            assert_eq!(
                label_selector_matches(&selector, &node),
                Ok(expected),
                "{operator} {values:?}"
            );
        }
        let missing = LabelSelector {
            match_expressions: Some(vec![expression("rack", "NotIn", &["r1"])]),
            ..LabelSelector::default()
        };
        assert_eq!(label_selector_matches(&missing, &node), Ok(true));
    }

    #[test]
    fn selectors_kubernetes_refuses_are_errors() {
        for (operator, values) in [("Gt", &["1"][..]), ("In", &[][..]), ("Exists", &["x"][..])] {
            let selector = LabelSelector {
                match_expressions: Some(vec![expression("zone", operator, values)]),
                ..LabelSelector::default()
            };
            assert!(
                label_selector_matches(&selector, &labels(&[])).is_err(),
                "{operator} {values:?}"
            );
        }
    }
}
