// Package oci holds gpurun's pure functions over an OCI runtime spec
// (config.json): GPU detection, classification of /dev/shm, the plan that
// says what /dev/shm a container should get and why, and the spec change
// that carries a plan out while keeping every field gpurun does not model.
package oci

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// GPUInfo is what a spec says about a container's GPUs.
type GPUInfo struct {
	// GPU is true when any signal says the container uses an accelerator.
	GPU bool
	// Count is the number of GPUs where it can be told, else 0.
	Count int
	// Evidence lists the signals found, for people ("env NVIDIA_VISIBLE_DEVICES=all").
	Evidence []string
}

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
	// nvidiaDevicesDir is where the NVIDIA device plugin's volume-mounts
	// strategy lists a container's devices as mounts.
	nvidiaDevicesDir = "/var/run/nvidia-container-devices"
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

// lookupEnv returns the last value of key in an OCI env list, as execve's
// consumers see it.
func lookupEnv(env []string, key string) (string, bool) {
	val, ok := "", false
	for _, kv := range env {
		if k, v, found := strings.Cut(kv, "="); found && k == key {
			val, ok = v, true
		}
	}
	return val, ok
}

// DetectGPU reads a container's GPU signals: the GPU requests a front door
// recorded in the user's words (--gpus, compose's deploy devices, a pod's
// GPU resources); a request for every host device when the host has GPUs
// (hostGPUs, 0 when unknown); NVIDIA_VISIBLE_DEVICES and
// HABANA_VISIBLE_DEVICES in the process env; the spec's device nodes and
// CDI annotations (cdi.k8s.io/*), judged by ClassifyDevice; the NVIDIA
// device plugin's /var/run/nvidia-container-devices mounts; and the NVIDIA
// prestart hook that dockerd and the NVIDIA runtime write into a spec.
func DetectGPU(c *Container, hostGPUs int) GPUInfo {
	var g GPUInfo
	counts := map[string]int{}
	add := func(kind string, n int, evidence string) {
		g.GPU = true
		counts[kind] += n
		g.Evidence = append(g.Evidence, evidence)
	}
	if c == nil {
		return g
	}
	for _, r := range c.GPURequests {
		add("request", r.Count, r.Evidence)
	}
	if c.Privileged != "" && hostGPUs > 0 {
		add("privileged", hostGPUs, fmt.Sprintf("%s (every device of the host, its %d GPU(s))", c.Privileged, hostGPUs))
	}
	s := c.Spec
	if s == nil {
		s = &specs.Spec{}
	}
	if s.Process != nil {
		for _, key := range []string{"NVIDIA_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES"} {
			if v, ok := lookupEnv(s.Process.Env, key); ok {
				if use, n := VisibleDevices(v); use {
					add("env:"+key, n, "env "+key+"="+v)
				}
			}
		}
	}
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			if dev := ClassifyDevice(d.Path); dev.GPU {
				add("dev:"+dev.Family, dev.Count, "device "+d.Path)
			}
		}
	}
	for _, k := range sortedKeys(s.Annotations) {
		if !strings.HasPrefix(k, CDIAnnotationPrefix) {
			continue
		}
		v, n, gpu := s.Annotations[k], 0, false
		for _, name := range strings.Split(v, ",") {
			if dev := ClassifyDevice(strings.TrimSpace(name)); dev.GPU {
				gpu = true
				n += dev.Count
			}
		}
		if gpu {
			add("cdi", n, "annotation "+k+"="+v)
		}
	}
	for _, m := range s.Mounts {
		if path.Dir(path.Clean(m.Destination)) == nvidiaDevicesDir {
			n := 1
			if path.Base(m.Destination) == "all" {
				n = 0
			}
			add("mount:nvidia", n, "mount "+m.Destination)
		}
	}
	if s.Hooks != nil {
		//lint:ignore SA1019 Prestart is deprecated, but it is where dockerd (--gpus) and the NVIDIA runtime put the NVIDIA hook.
		for _, h := range s.Hooks.Prestart {
			base := path.Base(h.Path)
			if strings.HasPrefix(base, "nvidia-container-runtime-hook") || base == "nvidia-container-toolkit" {
				add("hook:nvidia", 0, "prestart hook "+h.Path)
			}
		}
	}
	// The count is the best-informed signal's: device nodes and CDI names
	// count exactly; the env may say "all".
	for _, n := range counts {
		if n > g.Count {
			g.Count = n
		}
	}
	return g
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
