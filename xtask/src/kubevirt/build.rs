//! The pinned KubeVirt release and how virt-operator is built from it.
//!
//! Job: one [`GoBuild`] entry, built like the control plane (`xtask/src/cluster/build.rs`): a
//! generated Go module under `target/cluster/src/kubevirt/` that requires `kubevirt.io/kubevirt`
//! at [`VERSION`] with the replace directives of that release's own go.mod (its `replace` block
//! line for line, the staging modules `kubevirt.io/api` and `kubevirt.io/client-go` at the same
//! tag), one `go build` of `cmd/virt-operator` into `target/cluster/bin/`, and the release's
//! manifests (the KubeVirt CRD, the operator's RBAC and install manifest) copied next to it.
//!
//! Invariants: the version is pinned here and nowhere else; the stand-ins replace exactly the
//! modules the Go proxy refuses (and say so in their go.mod), nothing of KubeVirt itself.

use crate::cluster::build::{GoBuild, Replaces, StandIn};

/// The pinned KubeVirt release: the first with the canary table of
/// `kubevirt-canary-spec.md` sections 3 and 4 (kubevirt#16759) and its TLS steps (section 6).
pub const VERSION: &str = "v1.9.0";

/// The release's manifests, copied from the module's source to `bin/kubevirt-source/`.
pub const KV_CRD: &str = "kv-resource.yaml";
/// The operator's ServiceAccount, Roles and bindings (a template on `{{.Namespace}}`).
pub const OPERATOR_RBAC: &str = "rbac-operator.authorization.k8s.yaml.in";
/// The install manifest's template: Namespace, CRD, PriorityClass, the operator ClusterRole,
/// the RBAC above and the operator's Deployment.
pub const OPERATOR_MANIFEST: &str = "kubevirt-operator.yaml.in";

/// Modules KubeVirt v1.9.0 requires that the Go module proxy does not serve: at v0.2.0 both
/// answer 403 "This module version is not available" (v0.1.7 is served but has no
/// `core/v1beta1`). virt-operator's dependency graph imports them from one file,
/// `pkg/controller/virtinformers.go`, for a VirtualMachineTemplate informer that only
/// virt-controller starts; the stand-ins hold the names and the one type it needs.
const STAND_INS: &[StandIn] = &[
    StandIn {
        module: "kubevirt.io/virt-template-api",
        files: &[
            ("go.mod", include_str!("stand-in/virt-template-api/go.mod")),
            (
                "core/register.go",
                include_str!("stand-in/virt-template-api/core/register.go"),
            ),
            (
                "core/v1beta1/types.go",
                include_str!("stand-in/virt-template-api/core/v1beta1/types.go"),
            ),
        ],
    },
    StandIn {
        module: "kubevirt.io/virt-template-client-go",
        files: &[
            (
                "go.mod",
                include_str!("stand-in/virt-template-client-go/go.mod"),
            ),
            (
                "virttemplate/clientset.go",
                include_str!("stand-in/virt-template-client-go/virttemplate/clientset.go"),
            ),
        ],
    },
];

/// virt-operator at [`VERSION`].
pub const BUILDS: &[GoBuild] = &[GoBuild {
    name: "kubevirt",
    module: "kubevirt.io/kubevirt",
    version: VERSION,
    siblings: &[],
    replaces: Replaces::ReleaseBlock {
        stand_ins: STAND_INS,
    },
    binaries: &[("kubevirt.io/kubevirt/cmd/virt-operator", "virt-operator")],
    // What KubeVirt's build (hack/version.sh) stamps; the operator writes it to the KubeVirt
    // status (`operatorVersion`).
    control_plane: false,
    version_ldflags: &[
        "kubevirt.io/client-go/version.gitVersion=v1.9.0",
        "kubevirt.io/client-go/version.gitCommit=79d34c1762169e5b0370ec491cef5ca12e6b504c",
        "kubevirt.io/client-go/version.gitTreeState=clean",
        "kubevirt.io/client-go/version.buildDate=2026-07-27T15:21:17Z",
    ],
    source_files: &[
        "manifests/generated/kv-resource.yaml",
        "manifests/generated/rbac-operator.authorization.k8s.yaml.in",
        "manifests/release/kubevirt-operator.yaml.in",
    ],
}];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_is_stamped_into_the_binary() {
        let build = &BUILDS[0];
        assert_eq!(build.version, VERSION);
        assert!(
            build
                .version_ldflags
                .iter()
                .any(|flag| flag.ends_with(&format!("gitVersion={VERSION}")))
        );
        // The release's commit (the module's origin in `go mod download -json`).
        let commit = build
            .version_ldflags
            .iter()
            .find_map(|flag| flag.split_once("gitCommit=").map(|(_, c)| c))
            .unwrap_or_default();
        assert_eq!(commit.len(), 40);
        assert!(commit.chars().all(|c| c.is_ascii_hexdigit()));
        for name in [KV_CRD, OPERATOR_RBAC, OPERATOR_MANIFEST] {
            assert!(
                build
                    .source_files
                    .iter()
                    .any(|path| path.ends_with(&format!("/{name}"))),
                "{name}"
            );
        }
    }

    #[test]
    fn stand_ins_are_modules_of_their_own_name() {
        for stand_in in STAND_INS {
            let go_mod = stand_in
                .files
                .iter()
                .find(|(path, _)| *path == "go.mod")
                .map(|(_, text)| *text)
                .unwrap_or_default();
            assert!(
                go_mod.contains(&format!("module {}\n", stand_in.module)),
                "{go_mod}"
            );
        }
    }
}
