package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy/remedy"
)

// agentView is gpurun's node side on the pod's node, judged for the pod.
type agentView struct {
	// err says why it could not be read (nil: read).
	err error
	// present says a DaemonSet of gpurun's node side exists.
	present bool
	// set is the DaemonSet whose pod runs on the node ("" none).
	set string
	pod *corev1.Pod
	// ready and readySince: the agent pod's Ready condition.
	ready      bool
	readySince time.Time
	// reason says why it is not ready.
	reason string
	// mode is runtime-class, default-runtime or nri ("runtime-class or
	// default-runtime" when the setting could not be read).
	mode string
	// covers says the mode sizes this pod; coverWhy why not.
	covers   bool
	coverWhy string
}

// agentView judges the node agent on the pod's node.
func (p *podDiag) agentView() agentView {
	a := p.f.agent
	v := agentView{present: len(a.sets) > 0}
	switch {
	case a.setsErr != nil:
		v.err = a.setsErr
		return v
	case !v.present || p.f.pod.Spec.NodeName == "":
		return v
	case a.podsErr != nil:
		v.err = a.podsErr
		return v
	}
	for i := range a.pods {
		if a.pods[i].DeletionTimestamp == nil {
			v.pod = &a.pods[i]
			break
		}
	}
	if v.pod == nil {
		return v
	}
	v.set = v.pod.Labels["app.kubernetes.io/name"]
	v.ready, v.readySince = podReady(v.pod)
	if !v.ready {
		v.reason = notReadyReason(v.pod, a.events)
	}
	v.mode, v.covers, v.coverWhy = agentMode(v.set, a, p.f.pod)
	return v
}

// podReady reads a pod's Ready condition and since when it holds.
func podReady(pod *corev1.Pod) (bool, time.Time) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// notReadyReason says why an agent pod is not ready: its container's
// waiting reason, else its readiness probe's last failure (the agent's
// `gpurun node status`, the NRI plugin's /readyz), else its phase.
func notReadyReason(pod *corev1.Pod, evs []corev1.Event) string {
	for _, st := range pod.Status.ContainerStatuses {
		if w := st.State.Waiting; w != nil {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
	}
	var last *corev1.Event
	for i := range evs {
		e := &evs[i]
		if e.InvolvedObject.UID == pod.UID && e.Reason == "Unhealthy" && strings.Contains(e.Message, "Readiness probe") &&
			(last == nil || last.LastTimestamp.Before(&e.LastTimestamp)) {
			last = e
		}
	}
	if last != nil {
		// The probe's output, after the kubelet's words: its first line
		// says why (the next, "gpurun: not ready", is its exit).
		first, _, _ := strings.Cut(strings.TrimSpace(last.Message), "\n")
		return first
	}
	return "pod " + string(pod.Status.Phase) + ", not ready (its readiness probe's message is not among its Events)"
}

// agentMode is the node side's mode, and whether it sizes pod.
func agentMode(set string, a agentFacts, pod *corev1.Pod) (mode string, covers bool, why string) {
	rc := ""
	if pod.Spec.RuntimeClassName != nil {
		rc = *pod.Spec.RuntimeClassName
	}
	switch {
	case set == nriDaemonSet:
		return "nri", true, ""
	case rc == "gpurun":
		return runtimeMode(a.setAsDefault), true, ""
	case a.setAsDefault == "true" && rc == "":
		return "default-runtime", true, ""
	case a.setAsDefault == "true":
		return "default-runtime", false, fmt.Sprintf("the pod's runtimeClassName %s runs another runtime handler, not gpurun's", rc)
	case a.setAsDefault == "false":
		return "runtime-class", false, "pods opt in with runtimeClassName: gpurun, and this pod has none"
	}
	return "runtime-class or default-runtime", false, fmt.Sprintf("in runtime-class mode pods opt in with runtimeClassName: gpurun, which this pod lacks (the agent's mode cannot be read: %v)", a.modeErr)
}

func runtimeMode(setAsDefault string) string {
	switch setAsDefault {
	case "true":
		return "default-runtime"
	case "false":
		return "runtime-class"
	}
	return "runtime-class or default-runtime"
}

// webhookView is gpurun's webhook, judged for the pod.
type webhookView struct {
	err     error
	present bool
	// entry is the configuration's entry the pod goes to.
	entry string
	// selected says the entry's selectors take the pod; labelsKnown that
	// the namespace's labels were read (else only its name is known).
	selected, labelsKnown bool
	// optOut says the namespace carries gpurun.io/webhook=disabled.
	optOut bool
	// why says why the pod is not selected.
	why     string
	created time.Time
	// ready and replicas are the Deployment's; deployErr why unknown.
	ready, replicas int32
	deployErr       error
	deployPresent   bool
}

// webhookView judges the webhook's configuration for the pod.
func (p *podDiag) webhookView() webhookView {
	w := p.f.webhook
	v := webhookView{err: w.configErr, present: w.config != nil, deployErr: w.deployErr, deployPresent: w.deploy != nil}
	if w.deploy != nil {
		v.ready = w.deploy.Status.ReadyReplicas
		if w.deploy.Spec.Replicas != nil {
			v.replicas = *w.deploy.Spec.Replicas
		}
	}
	if w.config == nil {
		return v
	}
	v.created = w.config.CreationTimestamp.Time
	v.entry = webhook.PodsWebhookName
	if asksForGPU(p.f.pod) {
		v.entry = webhook.GPUWebhookName
	}
	i := slices.IndexFunc(w.config.Webhooks, func(h admissionregistrationv1.MutatingWebhook) bool { return h.Name == v.entry })
	if i < 0 {
		v.why = fmt.Sprintf("its configuration %s has no entry %s", webhookConfig, v.entry)
		return v
	}
	p.selectNamespace(&v, w.config.Webhooks[i])
	return v
}

// selectNamespace evaluates an entry's namespaceSelector and
// objectSelector for the pod.
func (p *podDiag) selectNamespace(v *webhookView, h admissionregistrationv1.MutatingWebhook) {
	ns := p.f.pod.Namespace
	nsLabels := labels.Set{corev1.LabelMetadataName: ns}
	if p.f.ns != nil {
		nsLabels, v.labelsKnown = labels.Set(p.f.ns.Labels), true
		v.optOut = p.f.ns.Labels[remedy.WebhookOptOutLabel] == "disabled"
	}
	sel, err := selectorOf(h.NamespaceSelector)
	if err != nil {
		v.why = fmt.Sprintf("its namespaceSelector cannot be read: %v", err)
		return
	}
	if !sel.Matches(nsLabels) {
		switch {
		case v.optOut:
			v.why = fmt.Sprintf("its namespaceSelector leaves namespace %s out: the namespace is labelled %s=disabled", ns, remedy.WebhookOptOutLabel)
		default:
			v.why = fmt.Sprintf("its namespaceSelector (%s) leaves namespace %s out", sel.String(), ns)
		}
		return
	}
	obj, err := selectorOf(h.ObjectSelector)
	if err != nil || !obj.Matches(labels.Set(p.f.pod.Labels)) {
		v.why = fmt.Sprintf("its objectSelector (%s) leaves the pod out", obj)
		return
	}
	v.selected = true
}

func selectorOf(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// asksForGPU says a container or init container has a GPU resource in
// its limits: what sends a pod to the webhook's entry that fails closed
// (webhook.GPURequestCondition over the default evidence table).
func asksForGPU(pod *corev1.Pod) bool {
	ev := oci.EvidenceOf(nil)
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for name := range c.Resources.Limits {
			if ev.Resource(string(name)) {
				return true
			}
		}
	}
	return false
}
