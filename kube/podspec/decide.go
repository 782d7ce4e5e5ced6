package podspec

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// PodAction is what the pod gets.
type PodAction string

// The values of Action.
const (
	// ActionNone leaves the pod as it is.
	ActionNone PodAction = "none"
	// ActionEmptyDir gives the pod one Memory emptyDir of Decision.Size,
	// mounted at /dev/shm in every container: all of them share the one
	// tmpfs, as they share the sandbox's.
	ActionEmptyDir PodAction = "emptydir"
	// ActionHostIPC puts the pod in the host's IPC namespace (the policy's
	// mode "ipc-host").
	ActionHostIPC PodAction = "host-ipc"
)

// Decision is what a pod's /dev/shm should be, and why.
type Decision struct {
	Action PodAction `json:"action"`
	// Size is the emptyDir's sizeLimit in bytes (ActionEmptyDir).
	Size int64 `json:"size_bytes,omitempty"`
	// GPU says a container of the pod has GPU evidence.
	GPU bool `json:"gpu"`
	// Applies says the policy applies to a container of the pod
	// (oci.Plan.Applies).
	Applies bool `json:"applies"`
	// Reason says why, naming the container whose plan decided.
	Reason string `json:"reason"`
	// Plans are oci.Decide's plans, one per container, in Translate's
	// order.
	Plans []ContainerPlan `json:"containers"`
	// Warnings are the containers' warnings (oci.Warning), one line each,
	// naming the containers they concern: what kubectl prints from the
	// admission webhook.
	Warnings []string `json:"warnings,omitempty"`
}

// ContainerPlan is one container's plan.
type ContainerPlan struct {
	Name     string        `json:"name"`
	Init     bool          `json:"init,omitempty"`
	Action   oci.Action    `json:"action"`
	Size     int64         `json:"size_bytes"`
	GPU      bool          `json:"gpu"`
	GPUs     int           `json:"gpus"`
	Evidence []string      `json:"evidence,omitempty"`
	Reason   string        `json:"reason"`
	Warnings []oci.Warning `json:"warnings,omitempty"`
}

// Decide translates the pod and asks oci.Decide about each container; the
// pod's decision combines them the way the node modes do (each container
// grows the pod's one tmpfs, never shrinking it): the largest size an
// acting plan asks for. A pod that is hostIPC, or where a container mounts
// its own /dev/shm, or that opts out, is left alone. Nothing resolves the
// pod's DRA resource claims (DecideWith resolves them).
func Decide(pod *corev1.Pod, pol *policy.Policy) (Decision, error) {
	return DecideWith(pod, pol, nil)
}

// DecideWith is Decide with the pod's DRA resource claims resolved
// through claims (nil: none can be; the policy's unresolved_claims judges
// them).
func DecideWith(pod *corev1.Pod, pol *policy.Policy, claims Claims) (Decision, error) {
	if pol == nil {
		pol = policy.Default()
	}
	members, err := TranslateWith(pod, claims)
	if err != nil {
		return Decision{}, err
	}
	limit, limitWhy := MemoryLimit(pod)
	d := Decision{Action: ActionNone}
	var (
		best     *ContainerPlan
		hostIPC  *ContainerPlan
		userShm  *ContainerPlan
		firstGPU *ContainerPlan
	)
	for _, m := range members {
		pl := oci.Decide(oci.Input{Container: m.Container, Policy: pol, Portable: limit == 0})
		cp := ContainerPlan{Name: m.Name, Init: m.Init, Action: pl.Action, Size: pl.Size, GPU: pl.GPU, GPUs: pl.GPUs, Evidence: pl.Evidence, Reason: pl.Reason, Warnings: pl.Warnings}
		d.Plans = append(d.Plans, cp)
		cur := &d.Plans[len(d.Plans)-1]
		d.GPU = d.GPU || pl.GPU
		d.Applies = d.Applies || pl.Applies
		if pl.GPU && firstGPU == nil {
			firstGPU = cur
		}
		switch {
		case m.ShmVolume != "" && userShm == nil:
			userShm = cur
		case pl.Action == oci.ActionIPCHost && hostIPC == nil:
			hostIPC = cur
		case pl.Action == oci.ActionSetSize && (best == nil || pl.Size > best.Size):
			best = cur
		}
	}
	name := func(cp *ContainerPlan) string {
		if cp.Init {
			return "init container " + cp.Name
		}
		return "container " + cp.Name
	}
	switch {
	case len(members) == 0:
		d.Reason = "the pod has no containers"
	case userShm != nil:
		d.Reason = fmt.Sprintf("%s: %s; the pod is left alone", name(userShm), userShm.Reason)
	case pod.Spec.HostIPC:
		d.Reason = "hostIPC: the pod shares the host's IPC namespace and /dev/shm, which is never resized"
	case hostIPC != nil:
		d.Action, d.Reason = ActionHostIPC, fmt.Sprintf("%s: %s", name(hostIPC), hostIPC.Reason)
	case best != nil:
		d.Action, d.Size = ActionEmptyDir, best.Size
		d.Reason = fmt.Sprintf("%s: %s", name(best), best.Reason)
		if limit == 0 {
			d.Reason += " (" + limitWhy + "; the node is not known at admission)"
		}
	case firstGPU != nil:
		d.Reason = fmt.Sprintf("%s: %s", name(firstGPU), firstGPU.Reason)
	default:
		d.Reason = d.Plans[0].Reason
	}
	d.Reason = strings.TrimSpace(d.Reason)
	d.Warnings = podWarnings(d.Plans)
	return d, nil
}

// podWarnings are the containers' warnings, each once, naming every
// container it concerns ("containers a, b: …"), in the containers' order.
func podWarnings(plans []ContainerPlan) []string {
	var msgs []string
	who := map[string][]string{}
	for _, cp := range plans {
		name := cp.Name
		if cp.Init {
			name = "init container " + name
		}
		for _, w := range cp.Warnings {
			if _, seen := who[w.Message]; !seen {
				msgs = append(msgs, w.Message)
			}
			who[w.Message] = append(who[w.Message], name)
		}
	}
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		names := who[m]
		head := "container "
		if len(names) > 1 {
			head = "containers "
		}
		out = append(out, head+strings.Join(names, ", ")+": "+m)
	}
	return out
}
