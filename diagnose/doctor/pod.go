package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/policy/remedy"
)

// podDiag is one pod's diagnosis in the making: what was read, what the
// policy decides for it, and what it got.
type podDiag struct {
	f *podFacts
	// d is the decision for the pod as created (podFacts.decision);
	// dErr why there is none.
	d    podspec.Decision
	dErr error
	// memLimit is the pod's memory limit (0: none).
	memLimit int64
	// shm is where the pod's /dev/shm came from, in fact.
	shm shmSource
	// findings are the log's (explain's), by container.
	findings []logFinding
	target   remedy.PodTarget
	// doorFix is shm.door's fix, where it found the pod's /dev/shm too
	// small: the other checks give it for a size failure.
	doorFix []remedy.Step
}

// podChecks diagnoses a pod from what was read about it.
func podChecks(f *podFacts) []Check {
	if f.pod == nil {
		return []Check{podMissing(f)}
	}
	p := &podDiag{f: f}
	p.memLimit, _ = podspec.MemoryLimit(f.pod)
	p.d, p.dErr = f.decision, f.decisionErr
	p.shm = shmSourceOf(f)
	p.target = podTarget(f)
	if p.shm.door == doorUser {
		p.target.Volume = p.shm.volume
	}
	// shm.door's fix, then the log's findings: the log and restarts
	// checks read them.
	door := p.doorCheck()
	logCheck := p.logCheck()
	restarts := p.restartsCheck()
	return []Check{
		p.podCheck(), p.policyCheck(), p.decisionCheck(), door, restarts, logCheck,
		p.eventsCheck(), p.nodeCheck(), p.agentCheck(), p.webhookCheck(),
	}
}

// podMissing is the pod check of a pod that could not be read.
func podMissing(f *podFacts) Check {
	c := Check{Name: "pod", Status: Error, Data: map[string]any{"namespace": f.namespace, "name": f.name}}
	switch {
	case isNotFound(f.podErr):
		c.Detail = fmt.Sprintf("pod %s/%s does not exist (not found)", f.namespace, f.name)
		c.Fix = remedy.Text([]remedy.Step{
			{Where: "list", How: fmt.Sprintf("kubectl -n %s get pods  (the pods there; another namespace: -n, or NAMESPACE/NAME)", f.namespace)},
			{Where: "owner", How: "gpurun doctor job/NAME (or deployment/NAME, statefulset/NAME): the pods it owns, the worst first"},
		})
	default:
		c.Detail = fmt.Sprintf("pod %s/%s cannot be read: %v", f.namespace, f.name, f.podErr)
	}
	return c
}

// podCheck says which pod this is: its node, phase, containers, owner.
func (p *podDiag) podCheck() Check {
	pod := p.f.pod
	var names []string
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		names = append(names, c.Name)
	}
	node := pod.Spec.NodeName
	if node == "" {
		node = "(not scheduled)"
	}
	detail := fmt.Sprintf("pod %s/%s on node %s: %s, containers %s", pod.Namespace, pod.Name, node, pod.Status.Phase, strings.Join(names, ", "))
	if p.target.OwnerKind != "" {
		detail += fmt.Sprintf(", made by %s %s", p.target.OwnerKind, p.target.OwnerName)
	}
	detail += ", created " + pod.CreationTimestamp.UTC().Format(time.RFC3339)
	c := Check{Name: "pod", Status: OK, Detail: detail, Data: map[string]any{
		"namespace": pod.Namespace, "name": pod.Name, "uid": string(pod.UID), "node": pod.Spec.NodeName, "phase": string(pod.Status.Phase),
	}}
	if p.target.OwnerKind != "" {
		c.Data["owner"] = p.target.OwnerKind + "/" + p.target.OwnerName
	}
	if p.f.container != "" && !slices.Contains(names, p.f.container) {
		c.Status = Error
		c.Detail += fmt.Sprintf("; it has no container %s (--container)", p.f.container)
	}
	return c
}

// policyCheck says which policy the pod was decided with.
func (p *podDiag) policyCheck() Check {
	c := Check{Name: "policy", Status: OK, Detail: p.f.policyFrom + ": " + describePolicy(p.f.pol)}
	switch {
	case p.f.policyErr == nil:
	case isNotFound(p.f.policyErr):
		c.Detail += fmt.Sprintf(" (no ConfigMap %s/%s: gpurun's node modes and webhook are not installed there)", p.f.gpurunNS, policyConfigMap)
	default:
		c.Detail += fmt.Sprintf(" (the cluster's policy cannot be read: %v)", p.f.policyErr)
	}
	return c
}

// asCreated returns the pod as it was created: without the webhook's
// volume, its mounts, its decision annotation and the hostIPC it sets.
func asCreated(pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	decision, ok := out.Annotations[webhook.DecisionAnnotation]
	if !ok {
		return out
	}
	delete(out.Annotations, webhook.DecisionAnnotation)
	if webhook.DecisionAction(decision) == podspec.ActionHostIPC {
		out.Spec.HostIPC = false
	}
	out.Spec.Volumes = slices.DeleteFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == webhook.VolumeName })
	strip := func(cs []corev1.Container) {
		for i := range cs {
			cs[i].VolumeMounts = slices.DeleteFunc(cs[i].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == webhook.VolumeName })
		}
	}
	strip(out.Spec.InitContainers)
	strip(out.Spec.Containers)
	return out
}

// decisionCheck says what gpurun decides for the pod as created, as the
// webhook decides (podspec.DecideWith, its claims read), with the
// warnings the webhook gives.
func (p *podDiag) decisionCheck() Check {
	c := Check{Name: "decision", Status: OK}
	if p.dErr != nil {
		c.Status, c.Detail = Error, fmt.Sprintf("the pod spec cannot be decided: %v", p.dErr)
		return c
	}
	d := p.d
	c.Data = map[string]any{"action": string(d.Action), "gpu": d.GPU, "applies": d.Applies, "reason": d.Reason}
	switch {
	case !d.Applies:
		c.Detail = "not a GPU pod: gpurun leaves its /dev/shm as it is (" + d.Reason + ")"
	case d.Action == podspec.ActionEmptyDir:
		c.Data["size_bytes"] = d.Size
		c.Detail = fmt.Sprintf("gpurun gives this pod a /dev/shm of %s: %s", formatSize(d.Size), d.Reason)
	default:
		c.Detail = fmt.Sprintf("gpurun leaves this pod's /dev/shm as it is (%s): %s", d.Action, d.Reason)
	}
	if ann, ok := p.f.pod.Annotations[webhook.DecisionAnnotation]; ok {
		c.Data["annotation"] = ann
		c.Detail += fmt.Sprintf("; the webhook wrote %s: %q", webhook.DecisionAnnotation, ann)
	}
	if len(d.Warnings) > 0 {
		c.Status = Warn
		c.Detail += "; " + strings.Join(d.Warnings, "; ")
		c.Data["warnings"] = d.Warnings
	}
	return c
}

// podTarget is the pod as remedy's fixes name it: its containers and the
// controller that makes it.
func podTarget(f *podFacts) remedy.PodTarget {
	pod := f.pod
	t := remedy.PodTarget{Namespace: pod.Namespace, Name: pod.Name, GPURunNamespace: f.gpurunNS}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		t.Containers = append(t.Containers, c.Name)
	}
	t.OwnerKind, t.OwnerName = ownerOf(pod)
	return t
}

// ownerOf names the controller whose template makes the pod: a
// ReplicaSet's Deployment where the pod's pod-template-hash says so (the
// ReplicaSet is named <deployment>-<hash>), else the pod's controller.
func ownerOf(pod *corev1.Pod) (kind, name string) {
	for _, o := range pod.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		if o.Kind == "ReplicaSet" {
			if hash := pod.Labels["pod-template-hash"]; hash != "" {
				if d, ok := strings.CutSuffix(o.Name, "-"+hash); ok {
					return "Deployment", d
				}
			}
		}
		return o.Kind, o.Name
	}
	return "", ""
}

// formatSize writes a size for people ("11.77GiB").
func formatSize(n int64) string {
	if n <= 0 {
		return "0B"
	}
	return policy.FormatSize(n)
}

// nodeMemory is the memory of the pod's node, 0 when not known.
func (p *podDiag) nodeMemory() int64 {
	if p.f.node == nil {
		return 0
	}
	if q, ok := p.f.node.Status.Capacity[corev1.ResourceMemory]; ok {
		return q.Value()
	}
	return 0
}

// wantSize is the /dev/shm the policy gives the pod: the decision's, or
// (where the decision leaves the pod alone: its own /dev/shm) the
// policy's target for its memory.
func (p *podDiag) wantSize() int64 {
	if p.d.Action == podspec.ActionEmptyDir && p.d.Size > 0 {
		return p.d.Size
	}
	gpus := 0
	for _, cp := range p.d.Plans {
		gpus = max(gpus, cp.GPUs)
	}
	n, _ := p.f.pol.Target(policy.Request{MemoryLimit: p.memLimit, HostMemory: p.nodeMemory(), GPUs: gpus, Portable: p.memLimit == 0 && p.nodeMemory() == 0})
	return n
}
