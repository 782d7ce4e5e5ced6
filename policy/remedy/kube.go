package remedy

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gpurun/gpurun/policy"
)

// The Kubernetes words of a fix, for a pod as the API shows it (doctor
// --pod): the pod spec to write, the kubectl command that patches its
// controller's template, the Helm value or kustomize overlay that changes
// gpurun's mode, the namespace label that opts a namespace in to the
// webhook, the pod to recreate. Each step is what the user runs or
// writes.

// ShmVolume is the volume name the pod spec fixes use for /dev/shm, the
// name Kubernetes users give it (dshm), unless the pod has its own.
const ShmVolume = "dshm"

// WebhookOptOutLabel is the namespace label that keeps gpurun's webhook
// away from a namespace's pods (its configuration's namespaceSelector).
const WebhookOptOutLabel = "gpurun.io/webhook"

// PodTarget is a Kubernetes pod a remedy is for.
type PodTarget struct {
	Namespace, Name string
	// Containers are the containers to mount /dev/shm in (init
	// containers first, as the pod lists them).
	Containers []string
	// OwnerKind and OwnerName name the controller whose pod template
	// makes the pod (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
	// CronJob); OwnerKind "" for a pod of its own.
	OwnerKind, OwnerName string
	// Volume is the volume the pod already mounts at /dev/shm ("" none):
	// its sizeLimit is what to change.
	Volume string
	// GPURunNamespace is where gpurun runs (gpurun-system).
	GPURunNamespace string
}

func (t PodTarget) kubectl() string { return "kubectl -n " + t.Namespace }

func (t PodTarget) volume() string {
	if t.Volume != "" {
		return t.Volume
	}
	return ShmVolume
}

// patchable says the owner's pod template can be patched in place (a Job's
// cannot: its template is immutable).
func (t PodTarget) patchable() bool {
	switch t.OwnerKind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "CronJob":
		return true
	}
	return false
}

// templatePatch wraps a pod spec patch into the owner's pod template, as
// a strategic merge patch (kubectl patch's default for built-in kinds:
// lists of volumes, containers and mounts merge by name).
func (t PodTarget) templatePatch(spec map[string]any) string {
	tmpl := map[string]any{"template": map[string]any{"spec": spec}}
	var doc map[string]any
	if t.OwnerKind == "CronJob" {
		doc = map[string]any{"spec": map[string]any{"jobTemplate": map[string]any{"spec": tmpl}}}
	} else {
		doc = map[string]any{"spec": tmpl}
	}
	b, _ := json.Marshal(doc) // maps of strings: cannot fail
	return fmt.Sprintf("%s patch %s %s -p '%s'", t.kubectl(), strings.ToLower(t.OwnerKind), t.OwnerName, b)
}

// Recreate is the step that makes the pod anew, so that a changed spec,
// namespace or node setting applies: a pod's spec does not change while
// it runs.
func Recreate(t PodTarget) Step {
	switch {
	case t.OwnerKind == "Job":
		return Step{"recreate", fmt.Sprintf("%s delete job %s, then create it again from its manifest (a Job's pod template cannot change)", t.kubectl(), t.OwnerName)}
	case t.OwnerKind != "":
		return Step{"recreate", fmt.Sprintf("%s delete pod %s  (its %s makes a new one)", t.kubectl(), t.Name, t.OwnerKind)}
	}
	return Step{"recreate", fmt.Sprintf("%s delete pod %s, then create it again from its manifest", t.kubectl(), t.Name)}
}

// PodShm returns the ways to give the pod a Memory emptyDir of size bytes
// at /dev/shm: the pod spec, and the kubectl command that patches its
// controller's template (or the recreate a Job or a bare pod needs).
func PodShm(t PodTarget, size int64) []Step {
	q := policy.FormatQuantity(size)
	vol := map[string]any{"name": t.volume(), "emptyDir": map[string]any{"medium": "Memory", "sizeLimit": q}}
	spec := map[string]any{"volumes": []any{vol}}
	var write string
	if t.Volume != "" {
		write = fmt.Sprintf("the volume %s mounted at /dev/shm: emptyDir: {medium: Memory, sizeLimit: %s}", t.Volume, q)
	} else {
		write = fmt.Sprintf("volumes: [{name: %s, emptyDir: {medium: Memory, sizeLimit: %s}}], and in every container (%s) volumeMounts: [{name: %s, mountPath: /dev/shm}]",
			ShmVolume, q, strings.Join(t.Containers, ", "), ShmVolume)
		var cs []any
		for _, c := range t.Containers {
			cs = append(cs, map[string]any{"name": c, "volumeMounts": []any{map[string]any{"name": ShmVolume, "mountPath": "/dev/shm"}}})
		}
		spec["containers"] = cs
	}
	steps := []Step{{"pod spec", write}}
	if t.patchable() {
		return append(steps, Step{"kubectl", t.templatePatch(spec) + "  (new pods get it)"})
	}
	return append(steps, Recreate(t))
}

// RuntimeClass returns the ways to have gpurun's runtime-class mode size
// the pod: the RuntimeClass in its spec, or a mode that sizes every GPU
// pod of the nodes.
func RuntimeClass(t PodTarget) []Step {
	steps := []Step{{"pod spec", "runtimeClassName: gpurun"}}
	if t.patchable() {
		steps = append(steps, Step{"kubectl", t.templatePatch(map[string]any{"runtimeClassName": "gpurun"})})
	} else {
		steps = append(steps, Recreate(t))
	}
	return append(steps, Mode(t.GPURunNamespace, "default-runtime", "every GPU pod of the nodes, no pod spec change")...)
}

// Mode returns the ways to switch gpurun's node side to a mode: the Helm
// value and the overlay.
func Mode(gpurunNS, mode, what string) []Step {
	return []Step{
		{"helm", fmt.Sprintf("helm upgrade gpurun deploy/helm/gpurun -n %s --reuse-values --set mode=%s  (%s)", gpurunNS, mode, what)},
		{"kustomize", fmt.Sprintf("kubectl apply -k deploy/kubernetes/overlays/%s", mode)},
	}
}

// WebhookNamespace is the step that lets the webhook see a namespace's
// pods again: the label its configuration leaves out, taken off.
func WebhookNamespace(ns string) Step {
	return Step{"namespace", fmt.Sprintf("kubectl label namespace %s %s-  (takes %s=disabled off: the webhook sizes the GPU pods created there from then on)", ns, WebhookOptOutLabel, WebhookOptOutLabel)}
}

// Install returns the ways to put gpurun on a cluster that has none of
// its doors for the pod.
func Install(gpurunNS string) []Step {
	return []Step{
		{"install", fmt.Sprintf("kubectl apply -k deploy/kubernetes/overlays/webhook  (or helm install gpurun deploy/helm/gpurun -n %s --create-namespace --set mode=webhook; on nodes you manage: default-runtime)", gpurunNS)},
	}
}

// RestartContainerd returns the ways to make a node agent that waits for
// containerd's restart ready: the restart, and the restart mode that lets
// the agent do it.
func RestartContainerd(node, gpurunNS string) []Step {
	return []Step{
		{"node", fmt.Sprintf("restart containerd on node %s (systemctl restart containerd): the agent's restart mode none waits for it", node)},
		{"helm", fmt.Sprintf("helm upgrade gpurun deploy/helm/gpurun -n %s --reuse-values --set nodeAgent.restart=systemd  (the agent restarts containerd itself)", gpurunNS)},
		{"kustomize", "restart=systemd in the gpurun-node ConfigMap (configMapGenerator behavior: merge)"},
	}
}

// AgentLogs is the step that shows why a node agent is not ready.
func AgentLogs(gpurunNS, pod string) Step {
	return Step{"why", fmt.Sprintf("kubectl -n %s logs %s  (and kubectl -n %s describe pod %s)", gpurunNS, pod, gpurunNS, pod)}
}

// Leftovers returns the ways out of a crashloop on what a container's
// earlier instances left in the pod's /dev/shm, which outlives them.
func Leftovers(t PodTarget) []Step {
	now := Step{"now", fmt.Sprintf("%s delete pod %s  (a new pod gets an empty /dev/shm; its %s makes it)", t.kubectl(), t.Name, t.OwnerKind)}
	if t.OwnerKind == "" {
		now.How = fmt.Sprintf("%s delete pod %s, then create it again: a new pod gets an empty /dev/shm", t.kubectl(), t.Name)
	}
	return []Step{now,
		{"gpurun", `gpurun's node modes remove what a restarted GPU container's earlier instance left (policy sweep = "restart", the default): kubectl apply -k deploy/kubernetes/overlays/default-runtime (or nri; the webhook has no node access and sweeps nothing)`},
		{"job", "remove its segments when it ends (NCCL and PyTorch do on a clean exit; a killed process cannot)"},
	}
}

// MemoryLimit returns the ways out of OOM kills for which /dev/shm held
// much of the memory limit: more memory (limit is what the container
// needs: its limit and what /dev/shm held), fewer files kept there.
func MemoryLimit(t PodTarget, container string, limit int64) []Step {
	q := policy.FormatQuantity(limit)
	steps := []Step{{"pod spec", fmt.Sprintf("resources.limits.memory: %s in container %s (tmpfs pages count against it as long as their files exist)", q, container)}}
	if t.patchable() {
		spec := map[string]any{"containers": []any{map[string]any{"name": container, "resources": map[string]any{"limits": map[string]any{"memory": q}}}}}
		steps = append(steps, Step{"kubectl", t.templatePatch(spec)})
	} else {
		steps = append(steps, Recreate(t))
	}
	return append(steps, Step{"job", "delete the files it no longer needs in /dev/shm; a smaller /dev/shm only turns the OOM kill into \"No space left on device\""})
}
