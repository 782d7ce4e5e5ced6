// Package podspec translates a Kubernetes pod spec into gpurun's one
// intermediate form (oci.Container, one per container) and asks oci.Decide
// about each, for the front doors that see a pod before any node does: the
// admission webhook (gpurun webhook) and `gpurun plan --pod`.
//
// At the API server a pod's /dev/shm is what the runtime will give it: the
// pod sandbox's 64 MiB tmpfs, unless the pod is hostIPC or a container
// mounts a volume at /dev/shm. Its GPU signals are its containers'
// extended resources, their DRA resource claims (resolved through Claims:
// each claim's requests and their DeviceClasses), their literal
// environment, the pod's CDI annotations and its RuntimeClass, handed to
// oci.Decide as they are (its table, oci.Evidence, judges them). The
// memory a container may use is the pod's: the pod-level limit where set,
// else the sum of its containers' limits (or an init container's, if
// larger) when every container has one; with none, the node is not known
// yet, so the target is the policy's compose_default, as for a compose
// file.
package podspec

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Member is one container of a pod in the intermediate form.
type Member struct {
	// Name is the container's name; Init says it is an init container
	// (sidecars included).
	Name string
	Init bool
	// Container is the container as the node's runtime will see it, for
	// the parts Decide reads.
	Container *oci.Container
	// ShmVolume is the volume the container mounts at /dev/shm, "" if none.
	ShmVolume string
}

// MemoryLimit returns the memory the pod may use, in bytes, 0 when it has
// no limit, and how it was reached: the pod-level limit
// (spec.resources.limits.memory) where set, else the larger of the sum of
// its containers' limits and its largest init container limit — the pod's
// effective limit, as the kubelet sets it on the pod's cgroup — when every
// container has one.
func MemoryLimit(pod *corev1.Pod) (int64, string) {
	if r := pod.Spec.Resources; r != nil {
		if q, ok := r.Limits[corev1.ResourceMemory]; ok && q.Value() > 0 {
			return q.Value(), "the pod-level memory limit"
		}
	}
	var sum int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok || q.Value() <= 0 {
			return 0, fmt.Sprintf("container %s has no memory limit", c.Name)
		}
		sum += q.Value()
	}
	limit := sum
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok || q.Value() <= 0 {
			return 0, fmt.Sprintf("init container %s has no memory limit", c.Name)
		}
		if isSidecar(c) {
			limit += q.Value()
		} else {
			limit = max(limit, q.Value())
		}
	}
	if len(pod.Spec.Containers) == 0 {
		return 0, "no containers"
	}
	return limit, "the sum of the containers' memory limits"
}

// isSidecar reports whether an init container is a sidecar (restartPolicy
// Always): it runs beside the containers, and its memory adds to theirs.
func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// Translate returns the pod's containers in the intermediate form: init
// containers first, then containers. Ephemeral containers are left out:
// they are added later, never at a pod's creation. Nothing resolves the
// pod's DRA resource claims: each is handed over as unresolved
// (TranslateWith resolves them).
func Translate(pod *corev1.Pod) ([]Member, error) {
	return TranslateWith(pod, nil)
}

// TranslateWith is Translate with the pod's DRA resource claims resolved
// through claims (nil: none can be).
func TranslateWith(pod *corev1.Pod, claims Claims) ([]Member, error) {
	limit, _ := MemoryLimit(pod)
	var out []Member
	add := func(c corev1.Container, init bool) error {
		m, err := translate(pod, c, limit, claims)
		if err != nil {
			kind := "container"
			if init {
				kind = "init container"
			}
			return fmt.Errorf("%s %s: %w", kind, c.Name, err)
		}
		m.Init = init
		out = append(out, m)
		return nil
	}
	for _, c := range pod.Spec.InitContainers {
		if err := add(c, true); err != nil {
			return nil, err
		}
	}
	for _, c := range pod.Spec.Containers {
		if err := add(c, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// translate builds one container's form.
func translate(pod *corev1.Pod, c corev1.Container, limit int64, claims Claims) (Member, error) {
	m := Member{Name: c.Name}
	var opts []oci.Opt
	// The runtime sees the pod's annotations that matter here (the size
	// annotation, the opt-out, CDI requests) on every container's spec.
	annotations := map[string]string{}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	opts = append(opts, oci.WithAnnotations(annotations), oci.WithName(c.Name))
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	opts = append(opts, oci.WithEnv(env...))
	for _, name := range resourceNames(c) {
		if !strings.Contains(name, "/") {
			continue // cpu, memory, hugepages-*: no extended resource
		}
		where, q := "limits", c.Resources.Limits[corev1.ResourceName(name)]
		if _, ok := c.Resources.Limits[corev1.ResourceName(name)]; !ok {
			where, q = "requests", c.Resources.Requests[corev1.ResourceName(name)]
		}
		opts = append(opts, oci.WithResource(fmt.Sprintf("resources.%s %s: %s", where, name, q.String()), name, q.Value()))
	}
	opts = append(opts, claimOpts(pod, c, claims)...)
	if rc := pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		opts = append(opts, oci.WithRuntime("runtimeClassName: "+*rc, *rc))
	}
	if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		opts = append(opts, oci.WithPrivileged("securityContext.privileged: true"))
	}
	opts = append(opts, oci.WithMemoryLimit(limit))
	switch shm := shmMount(c); {
	case pod.Spec.HostIPC:
		opts = append(opts, oci.WithHostIPC("hostIPC: true"))
	case shm != nil:
		m.ShmVolume = shm.Name
		words, mount := volumeWords(pod, shm.Name)
		opts = append(opts, oci.WithUserShm(words, mount))
	default:
		opts = append(opts, oci.WithPrivateShm(policy.EngineDefaultShm))
	}
	ctr, err := oci.NewContainer(opts...)
	if err != nil {
		return m, err
	}
	m.Container = ctr
	return m, nil
}

// resourceNames returns the container's resource names, limits then
// requests, each once, in a stable order.
func resourceNames(c corev1.Container) []string {
	var names []string
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for n := range l {
			if !slices.Contains(names, string(n)) {
				names = append(names, string(n))
			}
		}
	}
	slices.Sort(names)
	return names
}

// shmMount returns the container's volume mount at /dev/shm, the last one
// where there are several (the last mount wins), or nil.
func shmMount(c corev1.Container) *corev1.VolumeMount {
	var found *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if path.Clean(c.VolumeMounts[i].MountPath) == oci.ShmPath {
			found = &c.VolumeMounts[i]
		}
	}
	return found
}

// volumeWords describes the volume mounted at /dev/shm in the pod spec's
// words, and as a mount: a tmpfs with its size for a Memory emptyDir, else
// a bind.
func volumeWords(pod *corev1.Pod, name string) (string, specs.Mount) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != name {
			continue
		}
		if ed := v.EmptyDir; ed != nil && ed.Medium == corev1.StorageMediumMemory {
			m := specs.Mount{Type: "tmpfs", Source: "tmpfs"}
			words := fmt.Sprintf("volume %s (emptyDir, medium Memory", name)
			if ed.SizeLimit != nil && ed.SizeLimit.Value() > 0 {
				m.Options = []string{fmt.Sprintf("size=%d", ed.SizeLimit.Value())}
				words += ", sizeLimit " + ed.SizeLimit.String()
			}
			return words + ")", m
		}
		return fmt.Sprintf("volume %s (%s)", name, volumeKind(v)), specs.Mount{Type: "bind", Source: "/" + name, Options: []string{"rbind"}}
	}
	return fmt.Sprintf("volume %s (not in the pod's volumes)", name), specs.Mount{Type: "bind", Source: "/" + name, Options: []string{"rbind"}}
}

// volumeKind names a volume's source kind.
func volumeKind(v corev1.Volume) string {
	switch {
	case v.EmptyDir != nil:
		return "emptyDir"
	case v.HostPath != nil:
		return "hostPath " + v.HostPath.Path
	case v.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim " + v.PersistentVolumeClaim.ClaimName
	case v.Ephemeral != nil:
		return "ephemeral"
	case v.ConfigMap != nil:
		return "configMap"
	case v.Secret != nil:
		return "secret"
	}
	return "volume"
}
