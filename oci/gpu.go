// Package oci is gpurun's one decision: "this container, on this host,
// under this policy: what /dev/shm should it get, and why?" (Decide). Every
// front door translates what it sees — docker run's arguments, docker
// inspect, a compose service, a pod spec, an NRI request, a bundle's
// config.json — into the one form, Container, with the Opts, handing over
// raw facts; Decide judges them with the one evidence table (Evidence),
// classifies /dev/shm against the engines' layouts (ShmLayouts) and
// returns a Plan that says whether the policy applies, the action, the size
// and the reason. The package is pure: no I/O, no clock, no environment;
// the host's facts come in Facts.
package oci

import (
	"slices"
	"strings"
)

// Annotation keys the engines set on the specs they hand to a runtime.
const (
	// AnnotationCRIContainerType is containerd CRI's "sandbox" or "container".
	AnnotationCRIContainerType = "io.kubernetes.cri.container-type"
	// AnnotationCRISandboxID is containerd CRI's pod sandbox id.
	AnnotationCRISandboxID = "io.kubernetes.cri.sandbox-id"
	// AnnotationCRIOContainerType is CRI-O's "sandbox" or "container".
	AnnotationCRIOContainerType = "io.kubernetes.cri-o.ContainerType"
	// AnnotationCRIOSandboxID is CRI-O's pod sandbox id.
	AnnotationCRIOSandboxID = "io.kubernetes.cri-o.SandboxID"
	// AnnotationCRISandboxNamespace, AnnotationCRISandboxName and
	// AnnotationCRISandboxUID name containerd CRI's pod; AnnotationCRIContainerName
	// is the container's name in the pod spec.
	AnnotationCRISandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	AnnotationCRISandboxName      = "io.kubernetes.cri.sandbox-name"
	AnnotationCRISandboxUID       = "io.kubernetes.cri.sandbox-uid"
	AnnotationCRIContainerName    = "io.kubernetes.cri.container-name"
	// AnnotationCRIOPodNamespace, AnnotationCRIOPodName, AnnotationCRIOPodUID
	// and AnnotationCRIOContainerName are CRI-O's (the kubelet's labels).
	AnnotationCRIOPodNamespace  = "io.kubernetes.pod.namespace"
	AnnotationCRIOPodName       = "io.kubernetes.pod.name"
	AnnotationCRIOPodUID        = "io.kubernetes.pod.uid"
	AnnotationCRIOContainerName = "io.kubernetes.container.name"
	// CDIAnnotationPrefix starts the annotations that request CDI devices.
	CDIAnnotationPrefix = "cdi.k8s.io/"
)

// VisibleDevices interprets an NVIDIA_VISIBLE_DEVICES-style value: whether
// it asks for devices and how many, 0 for "all" or unknown.
func VisibleDevices(v string) (bool, int) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "void", "none":
		return false, 0
	case "all":
		return true, 0
	}
	n := 0
	for _, f := range strings.Split(v, ",") {
		if strings.TrimSpace(f) != "" {
			n++
		}
	}
	return n > 0, n
}

// LookupEnv returns the last value of key in an OCI env list (KEY=VALUE
// entries), as execve's consumers see it.
func LookupEnv(env []string, key string) (string, bool) {
	val, ok := "", false
	for _, kv := range env {
		if k, v, found := strings.Cut(kv, "="); found && k == key {
			val, ok = v, true
		}
	}
	return val, ok
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
