package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/podspec"
)

// The resources the claims cache keeps, as RBAC and the metrics name
// them.
const (
	ResourceClaims         = "resourceclaims"
	ResourceClaimTemplates = "resourceclaimtemplates"
	DeviceClasses          = "deviceclasses"
)

// ClaimCache resolves pods' DRA resource claims (podspec.Claims) from
// caches of the API server's ResourceClaims, ResourceClaimTemplates and
// DeviceClasses (resource.k8s.io/v1), listed and watched (kube.Watched):
// a review looks them up in memory, never with an API call. The caches
// keep only what the decision reads (the requests' classes, counts and
// modes; the drivers a claim was allocated from; the classes' selectors),
// and leave out the claims the API server made for running pods from
// their templates, which no pod at its creation names.
type ClaimCache struct {
	Claims    *kube.Watched[resourcev1.ResourceClaim]
	Templates *kube.Watched[resourcev1.ResourceClaimTemplate]
	Classes   *kube.Watched[resourcev1.DeviceClass]
}

// NewClaimCache returns the caches of the API server k, logging to log
// and recording their state in m (both may be nil). Run starts them.
func NewClaimCache(k *kube.Kube, log *slog.Logger, m *Metrics) *ClaimCache {
	const base = "/apis/" + resourcev1.GroupName + "/v1/"
	onChange := func(resource string) func(int, bool) {
		return func(n int, synced bool) { m.claimsCache(resource, n, synced) }
	}
	return &ClaimCache{
		Claims: &kube.Watched[resourcev1.ResourceClaim]{Kube: k, Path: base + ResourceClaims, Keep: keepClaim, Skip: skipClaim,
			Logger: log, OnChange: onChange(ResourceClaims)},
		Templates: &kube.Watched[resourcev1.ResourceClaimTemplate]{Kube: k, Path: base + ResourceClaimTemplates, Keep: keepTemplate,
			Logger: log, OnChange: onChange(ResourceClaimTemplates)},
		Classes: &kube.Watched[resourcev1.DeviceClass]{Kube: k, Path: base + DeviceClasses, Keep: keepClass,
			Logger: log, OnChange: onChange(DeviceClasses)},
	}
}

// Run lists and watches the three until ctx ends.
func (c *ClaimCache) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, run := range []func(context.Context){c.Claims.Run, c.Templates.Run, c.Classes.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	wg.Wait()
}

// Ready is nil once each cache has tried its first list, whatever came
// of it: a claim the caches cannot resolve is judged by the policy, with
// a warning, so a cluster without DRA (or without the webhook's read
// access) never keeps the webhook from admitting.
func (c *ClaimCache) Ready() error {
	for _, tried := range []<-chan struct{}{c.Claims.Tried(), c.Templates.Tried(), c.Classes.Tried()} {
		select {
		case <-tried:
		default:
			return errors.New("the claims cache has not listed resource.k8s.io's objects yet")
		}
	}
	return nil
}

// notCached says why a cache does not hold namespace/name.
func notCached(kind, namespace, name string, err error) error {
	if namespace != "" {
		name = namespace + "/" + name
	}
	if err != nil {
		return fmt.Errorf("%s %s not in the webhook's cache, which is not current: %w", kind, name, err)
	}
	return fmt.Errorf("%s %s not found (not created yet? kubectl apply of a directory creates in any order)", kind, name)
}

// ResourceClaim implements podspec.Claims.
func (c *ClaimCache) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, error) {
	rc, ok, err := c.Claims.Get(namespace, name)
	if !ok {
		return nil, notCached("ResourceClaim", namespace, name, err)
	}
	return rc, nil
}

// ResourceClaimTemplate implements podspec.Claims.
func (c *ClaimCache) ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, error) {
	t, ok, err := c.Templates.Get(namespace, name)
	if !ok {
		return nil, notCached("ResourceClaimTemplate", namespace, name, err)
	}
	return t, nil
}

// DeviceClass implements podspec.Claims.
func (c *ClaimCache) DeviceClass(name string) (*resourcev1.DeviceClass, error) {
	dc, ok, err := c.Classes.Get("", name)
	if !ok {
		return nil, notCached("DeviceClass", "", name, err)
	}
	return dc, nil
}

var _ podspec.Claims = (*ClaimCache)(nil)

// keptMeta is the metadata the caches keep.
func keptMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion}
}

// keptDevices are a claim's requests as the decision reads them.
func keptDevices(d resourcev1.DeviceClaim) resourcev1.DeviceClaim {
	var out resourcev1.DeviceClaim
	for _, r := range d.Requests {
		k := resourcev1.DeviceRequest{Name: r.Name}
		if e := r.Exactly; e != nil {
			k.Exactly = &resourcev1.ExactDeviceRequest{DeviceClassName: e.DeviceClassName, AllocationMode: e.AllocationMode, Count: e.Count}
		}
		for _, s := range r.FirstAvailable {
			k.FirstAvailable = append(k.FirstAvailable, resourcev1.DeviceSubRequest{Name: s.Name, DeviceClassName: s.DeviceClassName, AllocationMode: s.AllocationMode, Count: s.Count})
		}
		out.Requests = append(out.Requests, k)
	}
	return out
}

// podMade says whether a claim's owners show that the API server made it
// for a pod from the pod's template: a Pod controls it. No pod names such
// a claim at its creation (its own is made after), so the cache leaves it
// out.
func podMade(owners []metav1.OwnerReference) bool {
	for _, o := range owners {
		if o.Kind == "Pod" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// skipClaim is the claims' watch's Skip: a claim made for a pod is not
// decoded past its metadata. A training cluster's claims are mostly these,
// each changed several times in its pod's life (made, allocated, reserved,
// released), and the watch's decoding shares the webhook's CPU with the
// reviews.
func skipClaim(h kube.Head) bool { return podMade(h.OwnerReferences) }

// keepClaim keeps a ResourceClaim's requests and the drivers allocated
// to them; a claim a Pod owns (made from its template) is left out.
func keepClaim(rc *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	if podMade(rc.OwnerReferences) {
		return nil
	}
	k := &resourcev1.ResourceClaim{ObjectMeta: keptMeta(rc.ObjectMeta), Spec: resourcev1.ResourceClaimSpec{Devices: keptDevices(rc.Spec.Devices)}}
	if a := rc.Status.Allocation; a != nil {
		var results []resourcev1.DeviceRequestAllocationResult
		for _, r := range a.Devices.Results {
			results = append(results, resourcev1.DeviceRequestAllocationResult{Request: r.Request, Driver: r.Driver})
		}
		k.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
	}
	return k
}

// keepTemplate keeps a ResourceClaimTemplate's requests.
func keepTemplate(t *resourcev1.ResourceClaimTemplate) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: keptMeta(t.ObjectMeta),
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: keptDevices(t.Spec.Spec.Devices)}}}
}

// keepClass keeps a DeviceClass's CEL selectors (they name its driver).
func keepClass(dc *resourcev1.DeviceClass) *resourcev1.DeviceClass {
	k := &resourcev1.DeviceClass{ObjectMeta: keptMeta(dc.ObjectMeta)}
	for _, s := range dc.Spec.Selectors {
		if s.CEL != nil {
			k.Spec.Selectors = append(k.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s.CEL.Expression}})
		}
	}
	return k
}
