// Stand-in for kubevirt.io/virt-template-client-go v0.2.0, which KubeVirt v1.9.0 requires and
// the Go module proxy here does not serve. Written by `cargo xtask kubevirt build`
// (xtask/src/kubevirt/build.rs); see docs/kubevirt.md.
module kubevirt.io/virt-template-client-go

go 1.24.0

require k8s.io/client-go v0.34.2
