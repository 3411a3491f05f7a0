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
//! Invariant: no running pod on the listed nodes is no data, never a value.

use k8s_openapi::api::core::v1::Pod;

use crate::store::Store;

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
