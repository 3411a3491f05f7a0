// Package virttemplate: the part of the generated clientset that virt-operator's dependency
// graph calls (pkg/controller/virtinformers.go: NewForConfig, TemplateV1beta1().RESTClient()),
// a REST client for template.kubevirt.io/v1beta1 like the generated one. virt-operator never
// calls it: the informer that does is virt-controller's.
package virttemplate

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// TemplateV1beta1Client reaches the template.kubevirt.io/v1beta1 API.
type TemplateV1beta1Client struct {
	restClient rest.Interface
}

// RESTClient returns the client's REST client.
func (c *TemplateV1beta1Client) RESTClient() rest.Interface {
	return c.restClient
}

// Clientset holds the group clients.
type Clientset struct {
	templateV1beta1 *TemplateV1beta1Client
}

// TemplateV1beta1 returns the template.kubevirt.io/v1beta1 client.
func (c *Clientset) TemplateV1beta1() *TemplateV1beta1Client {
	return c.templateV1beta1
}

// NewForConfig creates a Clientset for the given config.
func NewForConfig(c *rest.Config) (*Clientset, error) {
	config := *c
	config.GroupVersion = &schema.GroupVersion{Group: "template.kubevirt.io", Version: "v1beta1"}
	config.APIPath = "/apis"
	config.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(&config)
	if err != nil {
		return nil, err
	}
	return &Clientset{templateV1beta1: &TemplateV1beta1Client{restClient: client}}, nil
}
