//! TLS migration plans for a DaemonSet canary upgrade: keep a TLS flag once it is rolled out,
//! and detach an old certificate secret only after the flag is everywhere.
//!
//! This generalises the TLS phases KubeVirt's virt-operator ran for `virt-handler` between
//! PR #15949 and PR #18698 (reference spec section 6): the support label, the flag, the
//! certificate volume and the container are a [`TlsConfig`], whose default holds the reference
//! values. Everything here is a pure function over k8s-openapi `DaemonSet` values: no I/O, no
//! clock, no cluster.
//!
//! # How a caller uses it
//!
//! On every reconcile, with `live` the DaemonSet from the cluster and `desired` the one built
//! from the custom resource:
//!
//! 1. Create path (no live DaemonSet): [`prepare_for_create`] on desired, then create it.
//! 2. Otherwise [`apply_preamble`]`(live, &mut desired)` before comparing or patching anything.
//! 3. When the rollout of the current template is **complete and observed** (every desired pod
//!    updated and ready, status `observedGeneration` equal to the generation), [`observe`] and
//!    ask [`tls_step`]. `None`: finish normally. `Some(step)`: [`apply_step`] on
//!    desired and roll that template out as a new canary rollout (canary, widen, revert), then
//!    come back to 3 once it is complete.
//!
//! # Invariants
//!
//! - The functions never panic on a malformed DaemonSet: no containers, a missing named
//!   container or an index past the end is a [`TlsError`].
//! - The plan is stateless: it is recomputed from the live and desired DaemonSets, so a
//!   restarted controller resumes where it was.
//! - The flag is inserted before the secret is detached, each as its own template change; the
//!   secret is never detached in the same step that inserts the flag, except on create
//!   (no old pods exist).
//! - Once the live template has the flag, the desired one keeps it; once the live template has
//!   lost the volume, the desired one does not bring it back.
//! - In [`InsertMode::Idempotent`] (the default) every edit is idempotent: applying the
//!   preamble, a step or the create preparation twice equals applying it once, the flag is never
//!   duplicated, and detaching never leaves a mount without its volume.
//!   [`InsertMode::Reference`] reproduces the reference, quirk 16 (duplicated flag) included.
//!
//! # Example
//!
//! ```
//! use canary_tls_migration::{
//!     TlsConfig, TemplateEdit, apply_preamble, apply_step, has_cert_volume, has_tls_flag,
//!     tls_step, observe,
//! };
//! use k8s_openapi::api::apps::v1::DaemonSet;
//!
//! let handler: DaemonSet = serde_json::from_value(serde_json::json!({
//!     "metadata": {
//!         "name": "virt-handler",
//!         "labels": {"kubevirt.io/supports-migration-cn-types": "true"}
//!     },
//!     "spec": {
//!         "selector": {"matchLabels": {"kubevirt.io": "virt-handler"}},
//!         "template": {"spec": {
//!             "containers": [{
//!                 "name": "virt-handler",
//!                 "args": ["--port", "8443"],
//!                 "volumeMounts": [{
//!                     "name": "kubevirt-virt-handler-certs",
//!                     "mountPath": "/etc/virt-handler/clientcertificates"
//!                 }]
//!             }],
//!             "volumes": [{
//!                 "name": "kubevirt-virt-handler-certs",
//!                 "secret": {"secretName": "kubevirt-virt-handler-certs"}
//!             }]
//!         }}
//!     }
//! }))?;
//! let cfg = TlsConfig::default();
//!
//! // The rollout is complete; the live DaemonSet supports TLS but lacks the flag.
//! let mut live = handler.clone();
//! let mut desired = handler.clone();
//! apply_preamble(&live, &mut desired, &cfg)?;
//! let step = tls_step(observe(&live, &desired, &cfg)?);
//! assert_eq!(step, Some(TemplateEdit::InsertTlsFlag));
//! assert!(apply_step(&mut desired, TemplateEdit::InsertTlsFlag, &cfg)?);
//! assert!(has_tls_flag(&desired, &cfg)?);
//!
//! // That template is rolled out under canary supervision. Once complete: detach.
//! live = desired.clone();
//! let mut desired = handler.clone(); // rebuilt from the custom resource, flag-less
//! apply_preamble(&live, &mut desired, &cfg)?; // keeps the flag
//! let step = tls_step(observe(&live, &desired, &cfg)?);
//! assert_eq!(step, Some(TemplateEdit::DetachCertSecret));
//! apply_step(&mut desired, TemplateEdit::DetachCertSecret, &cfg)?;
//! assert!(!has_cert_volume(&desired, &cfg));
//!
//! // Rolled out too: from now on the preamble alone keeps both edits, nothing is left to do.
//! live = desired;
//! let mut desired = handler.clone();
//! apply_preamble(&live, &mut desired, &cfg)?;
//! assert_eq!(desired, live);
//! assert_eq!(tls_step(observe(&live, &desired, &cfg)?), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The k8s-openapi this crate is built against, so callers name the same `DaemonSet` type.
pub use k8s_openapi;

mod config;
mod error;
mod plan;
mod template;

/// The decision of which step comes next is the state machine's; re-exported so that this
/// crate's plans read on their own.
pub use canary_state_machine::{TemplateEdit, TlsFacts, tls_step};
pub use config::{
    ContainerSelector, InsertMode, REFERENCE_CERT_VOLUME, REFERENCE_FLAG, REFERENCE_FLAG_VALUE,
    REFERENCE_SUPPORT_LABEL, REFERENCE_SUPPORT_VALUE, TlsConfig,
};
pub use error::TlsError;
pub use plan::{
    PreambleOutcome, apply_preamble, apply_step, observe, prepare_for_create, remaining_steps,
};
pub use template::{
    detach_cert_secret, has_cert_volume, has_tls_flag, insert_tls_flag, supports_tls,
};

/// Compiles and runs the README's example as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
