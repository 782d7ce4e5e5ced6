package webhook

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpurun/gpurun/oci"
)

// The MutatingWebhookConfiguration has two entries, the same server behind
// both, told apart by their matchConditions so that each pod is sent to
// exactly one:
//
//   - GPUWebhookName, for pods that ask for a GPU as an extended resource,
//     or that name DRA resource claims (GPURequestCondition), fails closed: when no replica answers, the API
//     server refuses the pod (its controller retries) instead of admitting
//     a GPU pod with the runtime's 64 MiB /dev/shm. A replica killed
//     outright takes the reviews it was answering with it; this is what
//     makes those refused and retried rather than lost.
//   - PodsWebhookName, for every other pod, fails open: a pod that asks for
//     no GPU resource and names no resource claim (a plain pod, or one
//     whose GPU evidence is only its environment, a CDI annotation or a
//     RuntimeClass, as the GPU Operator's own DaemonSets have) is never
//     held up by the webhook.
const (
	// GPUWebhookName is the entry for pods asking for a GPU resource
	// (failurePolicy Fail).
	GPUWebhookName = "gpu-pods.gpurun.io"
	// PodsWebhookName is the entry for every other pod (failurePolicy
	// Ignore).
	PodsWebhookName = "pods.gpurun.io"
	// GPURequestConditionName and NoGPURequestConditionName name the
	// two entries' matchConditions.
	GPURequestConditionName   = "asks-for-a-gpu-resource"
	NoGPURequestConditionName = "asks-for-no-gpu-resource"
)

// GPURequestCondition returns the CEL expression, for an admission
// webhook's matchConditions, that is true of a pod whose containers or init
// containers have in their limits an extended resource the table counts
// as a GPU (Evidence.Resource: its ResourceDomains, its Resources, exactly
// or as "domain/*", its DRAResources, and the DeviceClass resources of its
// DeviceClasses), or that names DRA resource claims (spec.resourceClaims:
// which of them are GPUs the webhook finds out from the claims' objects,
// so every such pod goes to the entry that fails closed). Limits only:
// the API server refuses an extended resource requested without its limit,
// and a limit alone is a request too. NoGPURequestCondition is its
// negation.
func GPURequestCondition(ev oci.Evidence) string {
	var terms, exact []string
	prefix := func(domain string) {
		if t := "r.startsWith(" + strconv.Quote(domain+"/") + ")"; !slices.Contains(terms, t) {
			terms = append(terms, t)
		}
	}
	name := func(n string) {
		if q := strconv.Quote(n); !slices.Contains(exact, q) {
			exact = append(exact, q)
		}
	}
	for _, d := range ev.ResourceDomains {
		prefix(d)
	}
	for _, r := range ev.Resources {
		if domain, ok := strings.CutSuffix(r, "/*"); ok {
			prefix(domain)
		} else {
			name(r)
		}
	}
	for _, r := range ev.DRAResources {
		name(r)
	}
	for _, c := range ev.DeviceClasses {
		name(oci.DeviceClassResourceDomain + "/" + c)
	}
	if len(exact) > 0 {
		terms = append(terms, "r in ["+strings.Join(exact, ", ")+"]")
	}
	asks := "has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, " + strings.Join(terms, " || ") + ")"
	if len(terms) == 0 {
		asks = "false"
	}
	return fmt.Sprintf("object.spec.containers.exists(c, %[1]s) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, %[1]s))"+
		" || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)", asks)
}

// NoGPURequestCondition is GPURequestCondition's negation: the other
// entry's condition, so that every pod goes to exactly one.
func NoGPURequestCondition(ev oci.Evidence) string {
	return "!(" + GPURequestCondition(ev) + ")"
}
