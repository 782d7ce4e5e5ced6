package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
)

// DRA reads the resource.k8s.io/v1 objects a pod's resource claims name,
// one GET each, with the credentials of its client: gpurun plan --pod
// --from-cluster resolves claims so (podspec.Claims). The webhook, which
// answers every pod of a cluster, keeps caches instead (Watched).
type DRA struct {
	Kube *Kube
	// Context bounds every read (nil: context.Background); each read is
	// bounded by Timeout too (0: 15 s).
	Context context.Context
	Timeout time.Duration
}

const draBase = "/apis/" + resourcev1.GroupName + "/v1"

// ResourceClaim reads a ResourceClaim.
func (d DRA) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, error) {
	var rc resourcev1.ResourceClaim
	return &rc, d.get("ResourceClaim", "resourceclaims", namespace, name, &rc)
}

// ResourceClaimTemplate reads a ResourceClaimTemplate.
func (d DRA) ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, error) {
	var t resourcev1.ResourceClaimTemplate
	return &t, d.get("ResourceClaimTemplate", "resourceclaimtemplates", namespace, name, &t)
}

// DeviceClass reads a DeviceClass.
func (d DRA) DeviceClass(name string) (*resourcev1.DeviceClass, error) {
	var dc resourcev1.DeviceClass
	return &dc, d.get("DeviceClass", "deviceclasses", "", name, &dc)
}

// get reads one object, and says in a user's words why it cannot.
func (d DRA) get(kind, resource, namespace, name string, out any) error {
	ctx := d.Context
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path, what, where := draBase, kind+" "+name, ""
	if namespace != "" {
		path += "/namespaces/" + url.PathEscape(namespace)
		what = kind + " " + namespace + "/" + name
		where = " -n " + namespace
	}
	path += "/" + resource + "/" + url.PathEscape(name)
	err := d.Kube.Do(ctx, http.MethodGet, path, "", nil, out)
	switch Code(err) {
	case 0:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case http.StatusNotFound:
		var se *StatusError
		if errors.As(err, &se) && strings.Contains(se.Message, "could not find the requested resource") {
			return fmt.Errorf("%s: the cluster does not serve %s/v1 (Kubernetes 1.34 and later do)", what, resourcev1.GroupName)
		}
		return fmt.Errorf("%s not found in the cluster", what)
	case http.StatusForbidden:
		return fmt.Errorf("%s: forbidden: needs get on %s.%s (kubectl auth can-i get %s.%s%s)", what, resource, resourcev1.GroupName, resource, resourcev1.GroupName, where)
	}
	return fmt.Errorf("%s: %w", what, err)
}
