package doctor

import (
	"context"
	"fmt"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// PodLookup returns this pod's namespace, name and annotations from the
// API server, with the pod's own service account; an error when they
// cannot be read (no token, or no permission to get pods).
type PodLookup func(ctx context.Context) (namespace, name string, annotations map[string]string, err error)

// inPod reports whether doctor runs in a Kubernetes pod: the kubelet sets
// KUBERNETES_SERVICE_HOST in every container (unless enableServiceLinks is
// off, which leaves the one for the API server in).
func inPod(sys *System) bool {
	return sys.getenv("KUBERNETES_SERVICE_HOST") != ""
}

// webhookCheck says, for a GPU container of a Kubernetes pod whose
// /dev/shm is still the runtime's 64 MiB, that gpurun's admission webhook
// (where a cluster runs it) did not size it, and why as far as can be
// told: the decision the webhook wrote on the pod, or — when the pod has
// none — the reasons it would not have seen the pod.
func webhookCheck(ctx context.Context, sys *System, sub subject, pl oci.Plan, lookup PodLookup) (Check, bool) {
	if !inPod(sys) || !pl.Applies || !sub.shm.known || !policy.IsEngineDefaultShm(sub.shm.fs.Size) {
		return Check{}, false
	}
	c := Check{Name: "webhook", Status: Warn}
	const head = "this GPU pod's /dev/shm is the runtime's 64 MiB: gpurun's admission webhook, where the cluster runs it, did not size it"
	howTo := "kubectl get pod POD -n NAMESPACE -o jsonpath='{.metadata.annotations.gpurun\\.io/shm-decision}'"
	var ns, name string
	var ann map[string]string
	var err error
	if lookup != nil {
		ns, name, ann, err = lookup(ctx)
	} else {
		err = fmt.Errorf("no API access")
	}
	causes := "the webhook was down or too slow when the pod was created (" + webhook.PodsWebhookName + ", which gets pods without a GPU in their limits, admits them unchanged then and the API server logs \"failed calling webhook\"; a pod with one is refused instead unless webhook.gpuFailurePolicy is Ignore), the pod's namespace is excluded (kube-system, gpurun's own, or labelled gpurun.io/webhook=disabled), or the pod was created before the webhook was installed"
	switch d, ok := ann[webhook.DecisionAnnotation]; {
	case err != nil:
		c.Detail = fmt.Sprintf("%s; the pod's annotations cannot be read from here (%v): if %s says nothing, %s", head, err, howTo, causes)
	case ok:
		c.Detail = fmt.Sprintf("%s; it saw pod %s/%s and decided %q", head, ns, name, d)
		if webhook.DecisionAction(d) == podspec.ActionEmptyDir {
			c.Status = Problem
			c.Detail = fmt.Sprintf("pod %s/%s: the webhook decided %q, but /dev/shm is the runtime's 64 MiB: another webhook or controller removed the volume or its mount at /dev/shm", ns, name, d)
		}
	default:
		c.Detail = fmt.Sprintf("%s; pod %s/%s has no %s annotation, so the webhook never saw it: %s", head, ns, name, webhook.DecisionAnnotation, causes)
	}
	c.Fix = "recreate the pod once the webhook runs (kubectl -n gpurun-system get deploy gpurun-webhook), or give the pod a Memory emptyDir at /dev/shm; `gpurun plan --pod pod.yaml` shows what the webhook decides"
	return c, true
}
