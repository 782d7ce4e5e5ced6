package kube

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigOptions say which cluster and namespace a command reaches
// from where kubectl works, as kubectl's flags of the same names do: the
// kubeconfig files of $KUBECONFIG (else ~/.kube/config, else the pod's
// service account when the command runs in one), --kubeconfig instead,
// --context, -n.
type KubeconfigOptions struct {
	Kubeconfig string
	Context    string
	// Namespace is -n; "" is the context's namespace, else "default".
	Namespace string
	// Timeout bounds each request (0: the kubeconfig's, else none).
	Timeout time.Duration
}

// ErrNoKubeconfig is FromKubeconfig's answer where there is no
// kubeconfig to load.
var ErrNoKubeconfig = errors.New("no kubeconfig: none at --kubeconfig, $KUBECONFIG or ~/.kube/config, and not in a pod with a service account")

// FromKubeconfig loads the kubeconfig with client-go's loading rules, as
// kubectl does, and returns a client whose HTTP client carries its
// credentials (tokens, client certificates, exec plugins), and the
// namespace -n or the context names.
func FromKubeconfig(o KubeconfigOptions) (*Kube, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	overrides.Context.Namespace = o.Namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, "", ErrNoKubeconfig
	}
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: namespace: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = o.Timeout
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	return &Kube{Base: BaseURL(cfg.Host), Client: hc}, ns, nil
}

// BaseURL is an API server's host as a kubeconfig gives it ("host:6443",
// "https://host:6443/"), as a URL without a trailing slash.
func BaseURL(host string) string {
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	return strings.TrimRight(host, "/")
}
