package nri

import (
	"strings"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/oci"
)

// CDIAnnotation is the annotation ToSpec writes the container's NRI CDI
// device names under (comma-separated), so that the planner sees them as it
// sees the CDI annotations of an OCI spec. Names an existing cdi.k8s.io/
// annotation already lists are left out, so no device counts twice.
const CDIAnnotation = oci.CDIAnnotationPrefix + "gpurun-nri"

// RuntimeCRIO is the runtime name CRI-O gives in NRI's Configure request.
const RuntimeCRIO = "cri-o"

// criInternal reports whether an annotation key is one the CRI runtimes set
// on a pod's sandbox spec to describe the sandbox itself (container type,
// sandbox id, name, ...): such keys of the pod must not describe its
// containers.
func criInternal(key string) bool {
	return strings.HasPrefix(key, "io.kubernetes.cri.") || strings.HasPrefix(key, "io.kubernetes.cri-o.")
}

// ToSpec builds the minimal runtime-spec Spec the planner (oci.Decide)
// needs from what NRI tells a plugin about a container being created:
//
//   - annotations: the pod's, less the CRI runtimes' own keys that describe
//     the sandbox, then the container's on top (a container's own key wins);
//   - the CRI container type and sandbox id, where the container's
//     annotations lack them (runtime names the engine: "cri-o" or else
//     containerd): NRI only asks about containers, never about sandboxes;
//   - process env and args, mounts, OCI hooks;
//   - linux namespaces, devices and the memory limit;
//   - the CDI device names, under CDIAnnotation.
//
// ToSpec does not change pod or ctr.
func ToSpec(runtime string, pod *api.PodSandbox, ctr *api.Container) *specs.Spec {
	s := &specs.Spec{
		Version:     specs.Version,
		Annotations: annotations(runtime, pod, ctr),
		Process: &specs.Process{
			Env:  api.DupStringSlice(ctr.GetEnv()),
			Args: api.DupStringSlice(ctr.GetArgs()),
		},
		Linux: &specs.Linux{},
	}
	for _, m := range ctr.GetMounts() {
		if m != nil {
			s.Mounts = append(s.Mounts, m.ToOCI(nil))
		}
	}
	if h := ctr.GetHooks(); h != nil {
		s.Hooks = &specs.Hooks{
			//lint:ignore SA1019 Prestart is deprecated, but it is where `docker run --gpus` and the NVIDIA runtime put their hook.
			Prestart:        ociHooks(h.GetPrestart()),
			CreateRuntime:   ociHooks(h.GetCreateRuntime()),
			CreateContainer: ociHooks(h.GetCreateContainer()),
			StartContainer:  ociHooks(h.GetStartContainer()),
			Poststart:       ociHooks(h.GetPoststart()),
			Poststop:        ociHooks(h.GetPoststop()),
		}
	}
	linux(s.Linux, ctr.GetLinux())
	return s
}

// annotations are the spec's annotations: the pod's (less the CRI's
// internal ones), the container's, the CRI annotations a runtime writes
// where NRI's do not carry them, and the CDI devices NRI names.
func annotations(runtime string, pod *api.PodSandbox, ctr *api.Container) map[string]string {
	s := &specs.Spec{Annotations: map[string]string{}}
	for k, v := range pod.GetAnnotations() {
		if !criInternal(k) {
			s.Annotations[k] = v
		}
	}
	for k, v := range ctr.GetAnnotations() {
		s.Annotations[k] = v
	}
	_, containerd := s.Annotations[oci.AnnotationCRIContainerType]
	_, crio := s.Annotations[oci.AnnotationCRIOContainerType]
	if !containerd && !crio {
		sandbox := ctr.GetPodSandboxId()
		if sandbox == "" {
			sandbox = pod.GetId()
		}
		if runtime == RuntimeCRIO {
			s.Annotations[oci.AnnotationCRIOContainerType] = "container"
			s.Annotations[oci.AnnotationCRIOSandboxID] = sandbox
		} else {
			s.Annotations[oci.AnnotationCRIContainerType] = "container"
			s.Annotations[oci.AnnotationCRISandboxID] = sandbox
		}
	}
	// The pod's identity (oci.CRIPod reads it back for records, metrics
	// and events), where the container's annotations lack it.
	keys := [4]string{oci.AnnotationCRISandboxNamespace, oci.AnnotationCRISandboxName, oci.AnnotationCRISandboxUID, oci.AnnotationCRIContainerName}
	if _, ok := s.Annotations[oci.AnnotationCRIOContainerType]; ok {
		keys = [4]string{oci.AnnotationCRIOPodNamespace, oci.AnnotationCRIOPodName, oci.AnnotationCRIOPodUID, oci.AnnotationCRIOContainerName}
	}
	for i, v := range [4]string{pod.GetNamespace(), pod.GetName(), pod.GetUid(), ctr.GetName()} {
		if _, ok := s.Annotations[keys[i]]; !ok && v != "" {
			s.Annotations[keys[i]] = v
		}
	}
	if names := cdiNames(s.Annotations, ctr.GetCDIDevices()); names != "" {
		s.Annotations[CDIAnnotation] = names
	}
	return s.Annotations
}

// linux fills the spec's Linux part from NRI's: the namespaces, devices,
// memory limit and cgroups path.
func linux(out *specs.Linux, l *api.LinuxContainer) {
	for _, ns := range l.GetNamespaces() {
		out.Namespaces = append(out.Namespaces, specs.LinuxNamespace{Type: specs.LinuxNamespaceType(ns.GetType()), Path: ns.GetPath()})
	}
	for _, d := range l.GetDevices() {
		if d != nil {
			out.Devices = append(out.Devices, d.ToOCI())
		}
	}
	if limit := l.GetResources().GetMemory().GetLimit(); limit != nil {
		v := limit.GetValue()
		out.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &v}}
	}
	// The restart sweep finds the pod's memory cgroup from it.
	out.CgroupsPath = l.GetCgroupsPath()
}

func ociHooks(hs []*api.Hook) []specs.Hook {
	var out []specs.Hook
	for _, h := range hs {
		if h != nil {
			out = append(out, h.ToOCI())
		}
	}
	return out
}

// cdiNames returns the CDI device names of devs that no cdi.k8s.io/
// annotation lists yet, comma-separated.
func cdiNames(annotations map[string]string, devs []*api.CDIDevice) string {
	listed := map[string]bool{}
	for k, v := range annotations {
		if strings.HasPrefix(k, oci.CDIAnnotationPrefix) {
			for _, name := range strings.Split(v, ",") {
				listed[strings.TrimSpace(name)] = true
			}
		}
	}
	var names []string
	for _, d := range devs {
		name := strings.TrimSpace(d.GetName())
		if name == "" || listed[name] {
			continue
		}
		listed[name] = true
		names = append(names, name)
	}
	return strings.Join(names, ",")
}
