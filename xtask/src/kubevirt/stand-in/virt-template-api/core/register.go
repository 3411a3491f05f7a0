// Package api: the names of the template.kubevirt.io API group, as virt-template-api v0.1.7
// (served by the proxy) and v0.2.0 spell them. virt-operator's dependency graph reads them in
// pkg/controller/virtinformers.go (a VirtualMachineExport indexer and the VirtualMachineTemplate
// informer, which virt-operator never starts).
package api

const (
	GroupName            = "template.kubevirt.io"
	SubresourceGroupName = "subresources.template.kubevirt.io"

	SingularResourceName        = "virtualmachinetemplate"
	PluralResourceName          = SingularResourceName + "s"
	SingularRequestResourceName = "virtualmachinetemplaterequest"
	PluralRequestResourceName   = SingularRequestResourceName + "s"
)
