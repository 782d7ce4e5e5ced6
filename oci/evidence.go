package oci

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// Evidence is the one table of what makes a container a GPU container.
// Front doors hand Decide raw facts — a device request's driver,
// capabilities and ids, the runtime handler's or RuntimeClass's name, an
// extended resource, a DRA resource claim's requests and classes, a CDI
// name, a device node, the environment — and never judge them; this
// table does, for every door alike. EvidenceOf builds it from the
// policy's lists.
type Evidence struct {
	// Drivers are device-request drivers that give GPUs (docker --gpus
	// driver=, compose's deploy devices' driver). A request with driver
	// DriverCDI asks for the CDI devices its ids name.
	Drivers []string
	// Capabilities are device-request capabilities that ask for GPUs
	// (the docker CLI adds "gpu" to every --gpus request).
	Capabilities []string
	// Runtimes are runtime handler names that give a container GPUs:
	// docker's --runtime, compose's runtime:, a pod's RuntimeClass (the
	// NVIDIA Container Toolkit registers nvidia, nvidia-cdi and
	// nvidia-legacy under the same names in dockerd and containerd, and
	// the GPU Operator's RuntimeClasses carry them). The policy's
	// gpu_runtime_classes.
	Runtimes []string
	// ResourceDomains are the extended-resource domains of GPU device
	// plugins: NVIDIA's (gpu, mig-*, gpu.shared), AMD's, Intel's
	// (gpu.intel.com/i915, xe) and Habana's (habana.ai/gaudi).
	ResourceDomains []string
	// Resources are more extended resources that mean a GPU: exact names,
	// or a domain as "example.com/*". The policy's gpu_resources.
	Resources []string
	// Env are the environment variables whose value lists the devices a
	// runtime gives the container (CUDA images set NVIDIA_VISIBLE_DEVICES).
	Env []string
	// Hooks start the base names of prestart hooks that inject GPUs
	// (dockerd --gpus and NVIDIA's runtime write them into the spec).
	Hooks []string
	// DevicesDir is where the NVIDIA device plugin's volume-mounts
	// strategy lists a container's devices as mounts.
	DevicesDir string
	// CDIAnnotationDomains are the pod annotation domains whose value names
	// CDI devices for a container, the way NRI plugins read them (NRI's
	// GetEffectiveAnnotation: <domain>/container.<name>, else <domain>/pod,
	// else <domain>): NVIDIA's NRI plugin (GPU Operator 26.3+) injects the
	// devices nvidia.cdi.k8s.io names.
	CDIAnnotationDomains []string
	// DeviceClasses are the Kubernetes DRA DeviceClasses whose devices are
	// GPUs, as the GPU vendors' DRA drivers install them (their charts'
	// and manifests' DeviceClass objects), and the policy's
	// gpu_device_classes. A container that uses a resource claim with a
	// request for one is a GPU container (Claim).
	DeviceClasses []string
	// DRADrivers are the DRA drivers whose devices are GPUs (the driver
	// names they publish ResourceSlices under), and the policy's
	// gpu_dra_drivers: a DeviceClass whose selectors name one, and a
	// claim allocated from one, are GPUs.
	DRADrivers []string
	// DRAResources are extended resources, outside ResourceDomains, that
	// GPU DeviceClasses map to (DeviceClass extendedResourceName,
	// KEP-5004): the scheduler allocates such a limit through DRA. Exact
	// names. DeviceClassResourceDomain/<class> is one too where the class
	// is a GPU's.
	DRAResources []string
	// UnresolvedGPU counts a resource claim whose object could not be
	// read as a GPU: the policy's unresolved_claims is "gpu".
	UnresolvedGPU bool
	// DeviceNodes are the device nodes that are GPUs (see DeviceNodes),
	// and CDIKinds the CDI devices (GPUCDIKinds): Device judges both.
	DeviceNodes []DeviceNode
	CDIKinds    CDIKinds
}

// DriverCDI is the device-request driver of CDI devices (docker 25+
// turns --device vendor/class=name into one).
const DriverCDI = "cdi"

// EvidenceOf returns the table for a policy (the defaults' when nil).
func EvidenceOf(p *policy.Policy) Evidence {
	if p == nil {
		p = policy.Default()
	}
	return Evidence{
		Drivers:              []string{"nvidia"},
		Capabilities:         []string{"gpu"},
		Runtimes:             p.GPURuntimeClasses,
		ResourceDomains:      []string{"nvidia.com", "amd.com", "gpu.intel.com", "habana.ai"},
		Resources:            p.GPUResources,
		Env:                  []string{"NVIDIA_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES"},
		Hooks:                []string{"nvidia-container-runtime-hook", "nvidia-container-toolkit"},
		DevicesDir:           "/var/run/nvidia-container-devices",
		CDIAnnotationDomains: []string{"nvidia.cdi.k8s.io"},
		DeviceClasses:        append(slices.Clone(gpuDeviceClasses), p.GPUDeviceClasses...),
		DRADrivers:           append(slices.Clone(gpuDRADrivers), p.GPUDRADrivers...),
		DRAResources:         []string{"intel.com/gpu", "intel.com/gaudi"},
		UnresolvedGPU:        p.UnresolvedClaims != policy.UnresolvedIgnore,
		DeviceNodes:          DeviceNodes(),
		CDIKinds:             GPUCDIKinds(),
	}
}

// gpuDeviceClasses are the DeviceClasses the GPU vendors' DRA drivers
// install, each a GPU (or a part of one):
//   - NVIDIA, kubernetes-sigs/dra-driver-nvidia-gpu,
//     deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml,
//     deviceclass-mig.yaml and deviceclass-vfio-gpu.yaml (all three select
//     driver gpu.nvidia.com; its compute-domain classes are IMEX channels,
//     not GPUs);
//   - AMD, ROCm/k8s-gpu-dra-driver, helm-charts-k8s/templates/deviceclass.yaml;
//   - Intel, intel/intel-resource-drivers-for-kubernetes,
//     deployments/gpu/base/device-class.yaml (gpu.intel.com,
//     gpu-vfio.intel.com) and deployments/gaudi/base/device-class.yaml.
var gpuDeviceClasses = []string{
	"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com",
	"gpu.amd.com",
	"gpu.intel.com", "gpu-vfio.intel.com", "gaudi.intel.com",
}

// gpuDRADrivers are those drivers' names: NVIDIA's gpu.nvidia.com
// (cmd/gpu-kubelet-plugin/main.go, DriverName), AMD's gpu.amd.com
// (pkg/consts/consts.go, DriverName), Intel's gpu.intel.com and
// gaudi.intel.com (pkg/gpu/device/device.go and pkg/gaudi/device/device.go:
// DriverName is the CDI class and vendor, "gpu" or "gaudi" and "intel.com").
var gpuDRADrivers = []string{"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com", "gaudi.intel.com"}

// Runtime reports whether a runtime handler name gives a container GPUs.
func (ev Evidence) Runtime(name string) bool {
	return name != "" && slices.Contains(ev.Runtimes, name)
}

// Resource reports whether an extended resource name asks for a GPU: one
// of ResourceDomains, a name Resources lists (exactly, or its domain as
// "domain/*"), one of DRAResources, or a GPU DeviceClass's own
// (deviceclass.resource.kubernetes.io/<class>).
func (ev Evidence) Resource(name string) bool {
	domain, rest, ok := strings.Cut(name, "/")
	if !ok {
		return false
	}
	if slices.Contains(ev.ResourceDomains, domain) || slices.Contains(ev.DRAResources, name) {
		return true
	}
	if domain == DeviceClassResourceDomain && ev.DeviceClass(rest, nil) {
		return true
	}
	for _, r := range ev.Resources {
		if r == name || r == domain+"/*" {
			return true
		}
	}
	return false
}

// DeviceRequest says whether a device request asks for GPUs and how many
// (0: all, or not told): a GPU driver, a GPU capability, or a GPU among
// the CDI names of a "cdi" request. The count is the request's count, else
// its CDI names' own, else one per device id (unless it names "all").
func (ev Evidence) DeviceRequest(r DeviceRequest) (gpu bool, count int) {
	gpu = slices.Contains(ev.Drivers, r.Driver)
	for _, c := range r.Capabilities {
		gpu = gpu || slices.Contains(ev.Capabilities, c)
	}
	cdiCount, cdiAll := 0, false
	if r.Driver == DriverCDI {
		for _, id := range r.DeviceIDs {
			if d := ev.Device(id); d.GPU && IsCDIName(id) {
				gpu = true
				cdiCount += d.Count
				cdiAll = cdiAll || d.Count == 0
			}
		}
	}
	switch {
	case !gpu:
		return false, 0
	case r.Count > 0:
		return true, r.Count
	case r.Count < 0 || cdiAll:
		return true, 0
	case cdiCount > 0:
		return true, cdiCount
	case r.Driver != DriverCDI && !slices.Contains(r.DeviceIDs, "all"):
		return true, len(r.DeviceIDs)
	}
	return true, 0
}

// GPUInfo is what a container's facts say about its GPUs.
type GPUInfo struct {
	// GPU is true when any signal says the container uses an accelerator.
	GPU bool
	// Count is the number of GPUs where it can be told, else 0.
	Count int
	// Evidence lists the signals found, for people ("env NVIDIA_VISIBLE_DEVICES=all").
	Evidence []string
}

// DetectGPU judges a container's facts with the table: the device
// requests, runtime, extended resources and DRA resource claims a front
// door recorded in the user's words; a request for every host device when
// the host has GPUs (hostGPUs, 0 when unknown); the environment variables
// of Env; the spec's device nodes and CDI annotations (cdi.k8s.io/*),
// judged by ClassifyDevice; the device plugin's DevicesDir mounts; and the
// prestart hooks of Hooks.
func (ev Evidence) DetectGPU(c *Container, hostGPUs int) GPUInfo {
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
	for _, r := range c.DeviceRequests {
		if gpu, n := ev.DeviceRequest(r); gpu {
			add("request", n, r.Words)
		}
	}
	if ev.Runtime(c.Runtime.Name) {
		add("request", 0, c.Runtime.Words)
	}
	for _, r := range c.Resources {
		if r.Count > 0 && ev.Resource(r.Name) {
			add("request", int(r.Count), r.Words)
		}
	}
	claimAll := false
	for _, cl := range c.Claims {
		if gpu, n, words := ev.Claim(cl); gpu {
			claimAll = claimAll || n == 0
			add("claim", n, words)
		}
	}
	if claimAll {
		// A claim for every GPU of the node, or of a count not told.
		counts["claim"] = 0
	}
	if c.Privileged != "" && hostGPUs > 0 {
		add("privileged", hostGPUs, fmt.Sprintf("%s (every device of the host, its %d GPU(s))", c.Privileged, hostGPUs))
	}
	s := c.Spec
	if s == nil {
		s = &specs.Spec{}
	}
	ev.specEvidence(s, containerName(c), add)
	// The count is the best-informed signal's: device nodes and CDI names
	// count exactly; the env may say "all".
	for _, n := range counts {
		if n > g.Count {
			g.Count = n
		}
	}
	return g
}

// specEvidence judges what the spec says of a container's GPUs: the
// environment variables of Env, device nodes, CDI annotations and the
// NRI annotations of CDIAnnotationDomains for the container name, the
// device plugin's DevicesDir mounts and the prestart hooks of Hooks; add
// records each signal found.
func (ev Evidence) specEvidence(s *specs.Spec, name string, add func(kind string, n int, evidence string)) {
	if s.Process != nil {
		for _, key := range ev.Env {
			if v, ok := LookupEnv(s.Process.Env, key); ok {
				if use, n := VisibleDevices(v); use {
					add("env:"+key, n, "env "+key+"="+v)
				}
			}
		}
	}
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			if dev := ev.Device(d.Path); dev.GPU {
				add("dev:"+dev.Family, dev.Count, "device "+d.Path)
			}
		}
	}
	for _, k := range sortedKeys(s.Annotations) {
		if strings.HasPrefix(k, CDIAnnotationPrefix) {
			if n, gpu := ev.cdiNames(s.Annotations[k], false); gpu {
				add("cdi", n, "annotation "+k+"="+s.Annotations[k])
			}
		}
	}
	if name != "" {
		for _, domain := range ev.CDIAnnotationDomains {
			if k, v, ok := effectiveAnnotation(s.Annotations, domain, name); ok {
				if n, gpu := ev.cdiNames(v, true); gpu {
					add("cdi", n, "annotation "+k+"="+v)
				}
			}
		}
	}
	for _, m := range s.Mounts {
		if path.Dir(path.Clean(m.Destination)) == ev.DevicesDir {
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
			if slices.ContainsFunc(ev.Hooks, func(name string) bool { return strings.HasPrefix(base, name) }) {
				add("hook:nvidia", 0, "prestart hook "+h.Path)
			}
		}
	}
}

// cdiNames judges a comma-separated list of CDI names (or, unless
// cdiOnly, device paths): whether one is a GPU, and how many GPUs they
// count.
func (ev Evidence) cdiNames(v string, cdiOnly bool) (n int, gpu bool) {
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if dev := ev.Device(name); dev.GPU && (!cdiOnly || IsCDIName(name)) {
			gpu = true
			n += dev.Count
		}
	}
	return n, gpu
}

// containerName is the container's name in its pod: the front door's
// (Container.Name), else the one the engine's CRI annotations give.
func containerName(c *Container) string {
	if c.Name != "" {
		return c.Name
	}
	if c.Spec == nil {
		return ""
	}
	return CRIPod(c.Spec).Container
}

// effectiveAnnotation finds the annotation that applies to container name
// under domain, as NRI's GetEffectiveAnnotation does:
// <domain>/container.<name>, else <domain>/pod, else <domain>.
func effectiveAnnotation(a map[string]string, domain, name string) (key, value string, ok bool) {
	for _, k := range []string{domain + "/container." + name, domain + "/pod", domain} {
		if v, ok := a[k]; ok {
			return k, v, true
		}
	}
	return "", "", false
}
