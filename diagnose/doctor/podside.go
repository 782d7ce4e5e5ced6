package doctor

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/policy/remedy"
)

// gpurunEvent says an Event is one of gpurun's: posted by its node agent
// or NRI plugin.
func gpurunEvent(e corev1.Event) bool {
	return e.Source.Component == "gpurun" || e.ReportingController == events.Controller
}

// eventsCheck lists gpurun's Events on the pod: what its node doors did
// (ShmSized, ShmNotSized, ShmSwept) and saw (ShmNearMemoryLimit,
// ShmOOMKilled).
func (p *podDiag) eventsCheck() Check {
	c := Check{Name: "events", Status: OK}
	if p.f.eventsErr != nil {
		c.Status, c.Detail = Error, fmt.Sprintf("the pod's Events cannot be read: %v", p.f.eventsErr)
		return c
	}
	counts := map[string]int32{}
	var lines []string
	for _, e := range p.f.events {
		if !gpurunEvent(e) {
			continue
		}
		counts[e.Reason] += max(e.Count, 1)
		lines = append(lines, fmt.Sprintf("%s %s (x%d): %s", e.Type, e.Reason, max(e.Count, 1), e.Message))
		switch e.Reason {
		case events.ReasonNotSized, events.ReasonNearMemoryLimit, events.ReasonOOMKilled:
			c.Status = Warn
		}
	}
	if len(lines) == 0 {
		c.Detail = "no Event of gpurun's on the pod (the node modes post ShmSized or ShmNotSized for each GPU pod they size or cannot; the webhook posts none; Events expire after an hour)"
		return c
	}
	sort.Strings(lines)
	c.Detail = strings.Join(lines, "; ")
	c.Data = map[string]any{"reasons": counts}
	return c
}

// nodeCheck says what the pod's node is: ready, its memory, its runtime.
func (p *podDiag) nodeCheck() Check {
	c := Check{Name: "node", Status: OK}
	name := p.f.pod.Spec.NodeName
	switch {
	case name == "":
		c.Detail = "the pod is not scheduled on a node yet"
		return c
	case p.f.nodeErr != nil:
		c.Status, c.Detail = Error, fmt.Sprintf("node %s cannot be read: %v", name, p.f.nodeErr)
		return c
	}
	n := p.f.node
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	state := "Ready"
	if !ready {
		state, c.Status = "NotReady", Warn
	}
	c.Detail = fmt.Sprintf("node %s: %s, memory %s (allocatable %s), runtime %s", name, state, formatSize(p.nodeMemory()),
		formatSize(nodeAllocatable(n)), n.Status.NodeInfo.ContainerRuntimeVersion)
	c.Data = map[string]any{"name": name, "ready": ready, "memory_bytes": p.nodeMemory(), "allocatable_bytes": nodeAllocatable(n),
		"runtime": n.Status.NodeInfo.ContainerRuntimeVersion}
	return c
}

// agentCheck says whether gpurun's node agent runs on the pod's node, is
// ready (and why not), and whether its mode sizes the pod.
func (p *podDiag) agentCheck() Check {
	c := Check{Name: "node.agent", Status: OK}
	v := p.agentView()
	ns := p.f.gpurunNS
	switch {
	case v.err != nil:
		c.Status, c.Detail = Error, fmt.Sprintf("gpurun's node side in namespace %s cannot be read: %v", ns, v.err)
		return c
	case !v.present:
		c.Detail = fmt.Sprintf("no gpurun node agent in namespace %s (DaemonSets %s, %s: the runtime-class, default-runtime and nri modes)", ns, agentDaemonSet, nriDaemonSet)
		return c
	case p.f.pod.Spec.NodeName == "":
		c.Detail = "the pod is not on a node yet"
		return c
	case v.pod == nil:
		c.Status = Warn
		c.Detail = fmt.Sprintf("gpurun's DaemonSet runs no pod on node %s (its nodeSelector, affinity or tolerations leave the node out)", p.f.pod.Spec.NodeName)
		return c
	}
	c.Data = map[string]any{"daemonset": v.set, "pod": v.pod.Name, "ready": v.ready, "mode": v.mode, "covers": v.covers}
	if !v.ready {
		c.Status = Warn
		c.Detail = fmt.Sprintf("the %s pod %s on node %s is not ready: %s", v.set, v.pod.Name, p.f.pod.Spec.NodeName, v.reason)
		var steps []remedy.Step
		if strings.Contains(v.reason, "restart containerd") {
			steps = remedy.RestartContainerd(p.f.pod.Spec.NodeName, ns)
		}
		c.Fix = remedy.Text(append(steps, remedy.AgentLogs(ns, v.pod.Name)))
		return c
	}
	c.Detail = fmt.Sprintf("the %s pod %s on node %s is ready (since %s): mode %s", v.set, v.pod.Name, p.f.pod.Spec.NodeName, v.readySince.UTC().Format(timeLayout), v.mode)
	if v.covers {
		c.Detail += ", which sizes this pod"
	} else {
		c.Detail += ", which does not size this pod: " + v.coverWhy
	}
	if a := p.f.agent; a.eventsErr != nil {
		c.Detail += fmt.Sprintf("; its Events cannot be read: %v", a.eventsErr)
	}
	return c
}

// webhookCheck says whether gpurun's webhook takes the pod's namespace
// (its configuration's selectors) and how many replicas are ready. A GPU
// pod in a namespace it leaves out is warned of here: the webhook never
// sees such a pod, so it cannot warn at its creation.
func (p *podDiag) webhookCheck() Check {
	c := Check{Name: "webhook", Status: OK}
	v := p.webhookView()
	switch {
	case v.err != nil:
		c.Status, c.Detail = Error, fmt.Sprintf("gpurun's webhook configuration cannot be read: %v", v.err)
		return c
	case !v.present:
		c.Detail = fmt.Sprintf("no gpurun admission webhook (MutatingWebhookConfiguration %s)", webhookConfig)
		return c
	}
	c.Data = map[string]any{"entry": v.entry, "selected": v.selected}
	if v.selected {
		c.Detail = fmt.Sprintf("its entry %s takes this pod's namespace %s", v.entry, p.f.pod.Namespace)
		if !v.labelsKnown {
			c.Detail += fmt.Sprintf(" by its name (the namespace's labels cannot be read: %v)", p.f.nsErr)
		}
	} else {
		c.Detail = v.why + ": the API server never sends it these pods, so it neither sizes them nor warns of them"
		if p.d.GPU {
			c.Status = Warn
			c.Detail = "this GPU pod's namespace is left out of gpurun's webhook: " + c.Detail
			if v.optOut {
				c.Fix = remedy.Text([]remedy.Step{remedy.WebhookNamespace(p.f.pod.Namespace), remedy.Recreate(p.target)})
			}
		}
	}
	p.webhookReplicas(&c, v)
	return c
}

// webhookReplicas adds the webhook Deployment's readiness to its check.
func (p *podDiag) webhookReplicas(c *Check, v webhookView) {
	switch {
	case v.deployErr != nil:
		c.Detail += fmt.Sprintf("; its Deployment %s/%s cannot be read: %v", p.f.gpurunNS, webhookDeployment, v.deployErr)
	case !v.deployPresent:
		c.Detail += fmt.Sprintf("; no Deployment %s/%s serves it", p.f.gpurunNS, webhookDeployment)
	default:
		c.Data["ready_replicas"], c.Data["replicas"] = v.ready, v.replicas
		c.Detail += fmt.Sprintf("; %d of %d replicas ready", v.ready, v.replicas)
		if v.ready == 0 {
			c.Status = worse(c.Status, Warn)
			c.Detail += " (none: pods with a GPU resource are refused, others admitted unchanged)"
		}
	}
}
