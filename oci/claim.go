package oci

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/policy"
)

// Claim is a Kubernetes DRA resource claim a container uses (a pod's
// spec.resourceClaims entry that the container names in its
// resources.claims), as the front door read it: the claim's requests as
// its ResourceClaim or ResourceClaimTemplate says them, or, where that
// object could not be read, why. Decide judges it (Evidence.Claim);
// the front door never does.
type Claim struct {
	// Words is the claim as the pod names it: "resources.claims gpu
	// (resourceClaimTemplateName: single-gpu)".
	Words string
	// Name is the claim's name in the pod (spec.resourceClaims[].name).
	Name string
	// Requests are the device requests the container gets: all of the
	// claim's, or the one its resources.claims entry names (request:).
	Requests []ClaimRequest
	// Drivers are the DRA drivers of the devices already allocated to
	// the claim (a shared ResourceClaim's status.allocation), for the
	// requests the container gets.
	Drivers []string
	// Unresolved says why the claim's object could not be read ("" when
	// it was): "ResourceClaimTemplate ml/single-gpu not found". The policy's
	// unresolved_claims judges such a claim.
	Unresolved string
}

// ClaimRequest is one device request of a claim
// (spec.devices.requests[]), as the object says it.
type ClaimRequest struct {
	// Name is the request's name in the claim.
	Name string
	// DeviceClass is the DeviceClass it asks for (exactly.deviceClassName);
	// "" for a request of FirstAvailable.
	DeviceClass string
	// ClassDrivers are the DRA drivers the DeviceClass's selectors name
	// (device.driver == "..."), where the front door read the class; nil
	// where it did not.
	ClassDrivers []string
	// AllocationMode is "ExactCount" ("" means it, the API's default) or
	// "All" (every matching device of the node).
	AllocationMode string
	// Count is the number of devices of ExactCount; 0 means the API's
	// default, 1.
	Count int64
	// FirstAvailable are the subrequests of which the scheduler allocates
	// the first that can be satisfied (firstAvailable).
	FirstAvailable []ClaimRequest
}

// AllocationAll is the allocation mode of a request for every matching
// device of the node.
const AllocationAll = "All"

// DeviceClassResourceDomain is the domain of the extended resources the
// API server maps to a DeviceClass of the same name (DRA extended
// resources, KEP-5004: limits deviceclass.resource.kubernetes.io/<class>).
const DeviceClassResourceDomain = "deviceclass.resource.kubernetes.io"

// WithClaim records a DRA resource claim the container uses, as the front
// door read it; Decide judges whether it gives GPUs.
func WithClaim(cl Claim) Opt {
	return func(c *Container) error {
		if cl.Words == "" || cl.Name == "" {
			return errors.New("a resource claim needs its name and the words it was asked with")
		}
		c.Claims = append(c.Claims, cl)
		return nil
	}
}

// DeviceClass reports whether a DRA DeviceClass's devices are GPUs: one
// of DeviceClasses, or a class whose selectors name a driver of
// DRADrivers.
func (ev Evidence) DeviceClass(name string, drivers []string) bool {
	if name != "" && slices.Contains(ev.DeviceClasses, name) {
		return true
	}
	return slices.ContainsFunc(drivers, ev.DRADriver)
}

// DRADriver reports whether a DRA driver's devices are GPUs.
func (ev Evidence) DRADriver(name string) bool {
	return name != "" && slices.Contains(ev.DRADrivers, name)
}

// ClaimRequest says whether a claim's device request asks for GPUs and
// how many (0: all of the node's, or not told), in words for people. A
// request of firstAvailable asks for GPUs when one of its subrequests
// does; its count is theirs where they agree.
func (ev Evidence) ClaimRequest(r ClaimRequest) (gpu bool, count int, words string) {
	if len(r.FirstAvailable) > 0 {
		var classes []string
		var counts []int
		for _, sub := range r.FirstAvailable {
			if g, n, _ := ev.ClaimRequest(sub); g {
				counts = append(counts, n)
				classes = append(classes, sub.DeviceClass)
			}
		}
		if len(counts) == 0 {
			return false, 0, ""
		}
		if slices.Min(counts) == slices.Max(counts) {
			count = counts[0]
		}
		return true, count, fmt.Sprintf("request %s: the first available of %s", r.Name, strings.Join(classes, ", "))
	}
	if !ev.DeviceClass(r.DeviceClass, r.ClassDrivers) {
		return false, 0, ""
	}
	class := "device class " + r.DeviceClass
	if !slices.Contains(ev.DeviceClasses, r.DeviceClass) {
		class += " (driver " + strings.Join(slices.DeleteFunc(slices.Clone(r.ClassDrivers), func(d string) bool { return !ev.DRADriver(d) }), ", ") + ")"
	}
	if r.AllocationMode == AllocationAll {
		return true, 0, fmt.Sprintf("request %s: every device of %s (allocationMode All)", r.Name, class)
	}
	n := max(int(r.Count), 1)
	return true, n, fmt.Sprintf("request %s: %d of %s", r.Name, n, class)
}

// Claim says whether a resource claim gives the container GPUs, how many
// (0: all of the node's, or not told), and the evidence in words: a GPU
// among its requests (ClaimRequest), or devices of a GPU driver allocated
// to it. A claim whose object could not be read counts as a GPU when the
// policy's unresolved_claims is "gpu" (UnresolvedGPU).
func (ev Evidence) Claim(cl Claim) (gpu bool, count int, evidence string) {
	if cl.Unresolved != "" {
		if !ev.UnresolvedGPU {
			return false, 0, ""
		}
		// Why is the warning's (claimWarnings): evidence stays short.
		return true, 0, fmt.Sprintf("%s, not resolved: counted as a GPU (unresolved_claims = %q)", cl.Words, policy.UnresolvedGPU)
	}
	var words []string
	all := false
	for _, r := range cl.Requests {
		g, n, w := ev.ClaimRequest(r)
		if !g {
			continue
		}
		gpu = true
		all = all || n == 0
		count += n
		words = append(words, w)
	}
	if drivers := slices.DeleteFunc(slices.Clone(cl.Drivers), func(d string) bool { return !ev.DRADriver(d) }); len(drivers) > 0 {
		gpu = true
		words = append(words, "allocated from driver "+strings.Join(slices.Compact(drivers), ", "))
	}
	if !gpu {
		return false, 0, ""
	}
	if all {
		count = 0
	}
	return true, count, cl.Words + ": " + strings.Join(words, "; ")
}

// claimWarnings are the warnings of a container's claims that could not
// be read, saying how the policy counted them.
func claimWarnings(c *Container, p *policy.Policy) []Warning {
	var out []Warning
	for _, cl := range c.Claims {
		if cl.Unresolved == "" {
			continue
		}
		then := fmt.Sprintf("counted as a GPU (policy unresolved_claims = %q)", policy.UnresolvedGPU)
		if p.UnresolvedClaims == policy.UnresolvedIgnore {
			then = fmt.Sprintf("not counted as a GPU (policy unresolved_claims = %q); if it is one, create its object before the pod", policy.UnresolvedIgnore)
		}
		out = append(out, Warning{Kind: WarnClaimUnresolved, Message: fmt.Sprintf("%s could not be read (%s): %s", cl.Words, cl.Unresolved, then)})
	}
	return out
}
