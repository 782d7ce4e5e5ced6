package doctor

import (
	"fmt"
	"strings"

	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy/remedy"
)

// doorGap is what one of gpurun's doors did not do for a pod, and what
// makes it do it.
type doorGap struct {
	// words say why the door did not size the pod.
	words string
	fix   []remedy.Step
	// likely says the door probably sized the pod all the same (only its
	// Event is missing).
	likely bool
}

// missingDoor is shm.door for a GPU pod at the runtime's 64 MiB: which
// door is missing on its node or namespace, and what to run.
func (p *podDiag) missingDoor(c *Check, want int64) {
	node, hook := p.nodeGap(), p.webhookGap()
	c.Data["node_door"], c.Data["webhook_door"] = node.words, hook.words
	head := fmt.Sprintf("/dev/shm is %s; the policy gives this GPU pod %s", p.shm.words, formatSize(want))
	if p.f.pod.Status.StartTime == nil {
		head = fmt.Sprintf("the pod has not started; its /dev/shm will be %s; the policy gives this GPU pod %s", p.shm.words, formatSize(want))
	}
	if node.likely || hook.likely {
		c.Status = Warn
		c.Detail = fmt.Sprintf("%s, and a gpurun door should have given it — but no ShmSized Event says so (node: %s; webhook: %s)", head, node.words, hook.words)
		c.Fix = remedy.Text([]remedy.Step{{Where: "look", How: fmt.Sprintf("kubectl -n %s exec %s -- df -h /dev/shm  (its size now)", p.target.Namespace, p.target.Name)}})
		return
	}
	c.Status = Problem
	c.Detail = fmt.Sprintf("%s, and no gpurun door sized it: node: %s; webhook: %s", head, node.words, hook.words)
	var steps []remedy.Step
	steps = append(steps, hook.fix...)
	steps = append(steps, node.fix...)
	steps = append(steps, remedy.PodShm(p.target, want)...)
	if len(hook.fix) > 0 || len(node.fix) > 0 {
		steps = append(steps, remedy.Recreate(p.target))
	}
	p.doorFix = dedupe(steps)
	c.Fix = remedy.Text(p.doorFix)
}

// nodeGap says why no node door sized the pod.
func (p *podDiag) nodeGap() doorGap {
	v := p.agentView()
	node := p.f.pod.Spec.NodeName
	ns := p.f.gpurunNS
	switch {
	case v.err != nil:
		return doorGap{words: fmt.Sprintf("gpurun's node agents cannot be looked at (%v)", v.err)}
	case !v.present:
		return doorGap{words: fmt.Sprintf("no gpurun node agent in namespace %s (the runtime-class, default-runtime and nri modes)", ns)}
	case node == "":
		return doorGap{words: "the pod is on no node yet: whether gpurun's node agent will size it depends on the node it gets"}
	case v.pod == nil:
		return doorGap{words: fmt.Sprintf("gpurun's DaemonSet runs no pod on node %s (its nodeSelector, affinity or tolerations leave the node out)", node),
			fix: []remedy.Step{{Where: "node agent", How: fmt.Sprintf("kubectl -n %s get ds -o wide, then patch its nodeSelector or tolerations to take node %s in", ns, node)}}}
	case !v.ready:
		words := fmt.Sprintf("the %s pod %s on node %s is not ready: %s", v.set, v.pod.Name, node, v.reason)
		var fix []remedy.Step
		if strings.Contains(v.reason, "restart containerd") {
			fix = remedy.RestartContainerd(node, ns)
		}
		return doorGap{words: words, fix: append(fix, remedy.AgentLogs(ns, v.pod.Name))}
	case !v.covers:
		return doorGap{words: fmt.Sprintf("node %s runs gpurun in %s mode: %s", node, v.mode, v.coverWhy), fix: remedy.RuntimeClass(p.target)}
	}
	start := p.f.pod.Status.StartTime
	if start != nil && start.Time.Before(v.readySince) {
		return doorGap{words: fmt.Sprintf("the pod started (%s) before the %s pod %s on node %s was ready (%s): gpurun was not in effect there yet",
			start.UTC().Format(timeLayout), v.set, v.pod.Name, node, v.readySince.UTC().Format(timeLayout)), fix: []remedy.Step{remedy.Recreate(p.target)}}
	}
	return doorGap{words: fmt.Sprintf("node %s runs gpurun in %s mode, which sizes this pod (agent %s ready since %s)", node, v.mode, v.pod.Name, v.readySince.UTC().Format(timeLayout)), likely: true}
}

// timeLayout is how reports write times.
const timeLayout = "2006-01-02T15:04:05Z"

// webhookGap says why the webhook did not size the pod.
func (p *podDiag) webhookGap() doorGap {
	v := p.webhookView()
	ns := p.f.pod.Namespace
	switch {
	case v.err != nil:
		return doorGap{words: fmt.Sprintf("its configuration cannot be looked at (%v)", v.err)}
	case !v.present:
		gap := doorGap{words: fmt.Sprintf("none in the cluster (no MutatingWebhookConfiguration %s)", webhookConfig)}
		if !p.agentView().present && p.agentView().err == nil {
			gap.fix = remedy.Install(p.f.gpurunNS)
		}
		return gap
	case !v.selected && v.optOut:
		return doorGap{words: v.why + " (the API server never sends it these pods)", fix: []remedy.Step{remedy.WebhookNamespace(ns)}}
	case !v.selected:
		return doorGap{words: v.why + " (the API server never sends it these pods)"}
	}
	created := p.f.pod.CreationTimestamp.Time
	if created.Before(v.created) {
		return doorGap{words: fmt.Sprintf("the pod was created (%s) before the webhook's configuration (%s)", created.UTC().Format(timeLayout), v.created.UTC().Format(timeLayout))}
	}
	words := fmt.Sprintf("its entry %s takes namespace %s", v.entry, ns)
	if !v.labelsKnown {
		words += " unless the namespace carries a label it leaves out (the namespace cannot be read)"
	}
	words += fmt.Sprintf(", yet the pod has no %s volume: the webhook was down or too slow when the pod was created, and %s %s", webhook.VolumeName, v.entry, entryFailure(v.entry))
	if v.deployPresent {
		words += fmt.Sprintf("; %d of %d replicas ready now", v.ready, v.replicas)
	}
	return doorGap{words: words}
}

// entryFailure says what an entry does with a pod when no replica
// answers.
func entryFailure(entry string) string {
	if entry == webhook.PodsWebhookName {
		return "admits pods unchanged then (failurePolicy Ignore)"
	}
	return "refuses them then unless its failurePolicy is Ignore (webhook.gpuFailurePolicy)"
}

// dedupe drops steps that repeat an earlier one.
func dedupe(steps []remedy.Step) []remedy.Step {
	var out []remedy.Step
	seen := map[remedy.Step]bool{}
	for _, s := range steps {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
