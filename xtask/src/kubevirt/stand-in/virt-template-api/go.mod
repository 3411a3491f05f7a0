// Stand-in for kubevirt.io/virt-template-api v0.2.0, which KubeVirt v1.9.0 requires and the Go
// module proxy here does not serve (403 "This module version is not available"). Written by
// `cargo xtask kubevirt build` (xtask/src/kubevirt/build.rs); see docs/kubevirt.md.
module kubevirt.io/virt-template-api

go 1.24.0

require k8s.io/apimachinery v0.34.2
