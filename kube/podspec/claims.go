package podspec

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/gpurun/gpurun/oci"
)

// Claims finds the objects a pod's DRA resource claims name, in the pod's
// namespace: the webhook's cache of the API server's, the files and the
// cluster gpurun plan --pod reads. An error says why an object cannot be
// had (not found, not readable); the claim is then handed over as
// unresolved, with that reason, and the policy's unresolved_claims judges
// it.
type Claims interface {
	ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, error)
	ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, error)
	DeviceClass(name string) (*resourcev1.DeviceClass, error)
}

// ErrNoClaimObjects is the reason of every claim when nothing resolves
// them (a nil Claims).
var ErrNoClaimObjects = errors.New("no claim objects given")

// claimOpts translates the resource claims a container uses (its
// resources.claims, by name, with request) into oci.Claims, resolved
// through claims (nil: none can be). A claim the pod does not define is
// handed over as unresolved.
func claimOpts(pod *corev1.Pod, c corev1.Container, claims Claims) []oci.Opt {
	var opts []oci.Opt
	for _, ref := range c.Resources.Claims {
		var pc *corev1.PodResourceClaim
		for i := range pod.Spec.ResourceClaims {
			if pod.Spec.ResourceClaims[i].Name == ref.Name {
				pc = &pod.Spec.ResourceClaims[i]
			}
		}
		cl := oci.Claim{Words: claimWords(ref, pc), Name: ref.Name}
		if pc == nil {
			cl.Unresolved = "the pod's spec.resourceClaims has no claim " + ref.Name
		} else {
			resolveClaim(pod, pc, ref.Request, claims, &cl)
		}
		opts = append(opts, oci.WithClaim(cl))
	}
	return opts
}

// claimWords names a container's claim as the pod spec does:
// "resources.claims gpu, request mig-1g (resourceClaimTemplateName: mig)".
func claimWords(ref corev1.ResourceClaim, pc *corev1.PodResourceClaim) string {
	w := "resources.claims " + ref.Name
	if ref.Request != "" {
		w += ", request " + ref.Request
	}
	switch {
	case pc == nil:
	case pc.ResourceClaimName != nil:
		w += " (resourceClaimName: " + *pc.ResourceClaimName + ")"
	case pc.ResourceClaimTemplateName != nil:
		w += " (resourceClaimTemplateName: " + *pc.ResourceClaimTemplateName + ")"
	}
	return w
}

// resolveClaim reads the object a pod's claim names — the ResourceClaim
// the pod's status says was made for it from its template where there is
// one (a pod that runs), else the ResourceClaim it names, else its
// ResourceClaimTemplate — and fills in cl's requests (those of request
// only, where the container names one) and the drivers allocated to
// them, or why it could not.
func resolveClaim(pod *corev1.Pod, pc *corev1.PodResourceClaim, request string, claims Claims, cl *oci.Claim) {
	if claims == nil {
		cl.Unresolved = ErrNoClaimObjects.Error()
		return
	}
	devices, status, err := claimDevices(pod, pc, claims)
	if err != nil {
		cl.Unresolved = err.Error()
		return
	}
	for _, r := range devices.Requests {
		if cr, ok := claimRequest(r, request, claims); ok {
			cl.Requests = append(cl.Requests, cr)
		}
	}
	if request != "" && len(cl.Requests) == 0 {
		cl.Unresolved = fmt.Sprintf("the claim has no request %s", request)
		return
	}
	if status != nil && status.Allocation != nil {
		for _, res := range status.Allocation.Devices.Results {
			if request == "" || res.Request == request || strings.HasPrefix(res.Request, request+"/") {
				cl.Drivers = append(cl.Drivers, res.Driver)
			}
		}
	}
}

// claimDevices reads a pod's claim's device requests and, for a
// ResourceClaim, its status: the claim made for the pod from its template
// (named in the pod's status, once it runs), else the ResourceClaim or
// the ResourceClaimTemplate the spec names.
func claimDevices(pod *corev1.Pod, pc *corev1.PodResourceClaim, claims Claims) (resourcev1.DeviceClaim, *resourcev1.ResourceClaimStatus, error) {
	ns := pod.Namespace
	if made := madeClaim(pod, pc.Name); made != "" {
		if rc, err := claims.ResourceClaim(ns, made); err == nil {
			return rc.Spec.Devices, &rc.Status, nil
		}
	}
	switch {
	case pc.ResourceClaimName != nil:
		rc, err := claims.ResourceClaim(ns, *pc.ResourceClaimName)
		if err != nil {
			return resourcev1.DeviceClaim{}, nil, err
		}
		return rc.Spec.Devices, &rc.Status, nil
	case pc.ResourceClaimTemplateName != nil:
		t, err := claims.ResourceClaimTemplate(ns, *pc.ResourceClaimTemplateName)
		if err != nil {
			return resourcev1.DeviceClaim{}, nil, err
		}
		return t.Spec.Spec.Devices, nil, nil
	}
	return resourcev1.DeviceClaim{}, nil, errors.New("it names neither resourceClaimName nor resourceClaimTemplateName")
}

// madeClaim is the ResourceClaim the pod's status says was made from its
// claim's template, "" when none (a pod being created has none).
func madeClaim(pod *corev1.Pod, name string) string {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == name && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

// claimRequest translates one device request of a claim, as far as the
// container's request (its resources.claims request: "", "req" or
// "req/subrequest") takes it; ok is false for a request the container
// does not get.
func claimRequest(r resourcev1.DeviceRequest, request string, claims Claims) (oci.ClaimRequest, bool) {
	want, sub, _ := strings.Cut(request, "/")
	if want != "" && r.Name != want {
		return oci.ClaimRequest{}, false
	}
	cr := oci.ClaimRequest{Name: r.Name}
	if e := r.Exactly; e != nil {
		cr.DeviceClass, cr.AllocationMode, cr.Count = e.DeviceClassName, string(e.AllocationMode), e.Count
		cr.ClassDrivers = classDrivers(claims, e.DeviceClassName)
	}
	for _, s := range r.FirstAvailable {
		if sub != "" && s.Name != sub {
			continue
		}
		cr.FirstAvailable = append(cr.FirstAvailable, oci.ClaimRequest{Name: r.Name + "/" + s.Name, DeviceClass: s.DeviceClassName,
			AllocationMode: string(s.AllocationMode), Count: s.Count, ClassDrivers: classDrivers(claims, s.DeviceClassName)})
	}
	return cr, true
}

// driverSelector finds the driver a DeviceClass's CEL selector names, as
// the GPU drivers' classes write it: device.driver == "gpu.intel.com"
// (or in single quotes).
var driverSelector = regexp.MustCompile(`device\.driver\s*==\s*(?:"([^"]+)"|'([^']+)')`)

// classDrivers returns the drivers a DeviceClass's selectors name, nil
// where the class cannot be read.
func classDrivers(claims Claims, class string) []string {
	if class == "" {
		return nil
	}
	dc, err := claims.DeviceClass(class)
	if err != nil || dc == nil {
		return nil
	}
	var drivers []string
	for _, s := range dc.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		for _, m := range driverSelector.FindAllStringSubmatch(s.CEL.Expression, -1) {
			if d := m[1] + m[2]; !slices.Contains(drivers, d) {
				drivers = append(drivers, d)
			}
		}
	}
	return drivers
}
