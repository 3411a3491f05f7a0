// Package v1beta1: the one type virt-operator's dependency graph names, as an opaque object.
// pkg/controller/virtinformers.go builds a VirtualMachineTemplate informer from it for
// virt-controller; virt-operator never starts that informer, so no object of this type is ever
// decoded by the binaries built here.
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// VirtualMachineTemplate keeps the object's metadata; its spec and status stay raw JSON.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   runtime.RawExtension `json:"spec,omitempty"`
	Status runtime.RawExtension `json:"status,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (in *VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	out := new(VirtualMachineTemplate)
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
	return out
}
