package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// named is a CRI container's spec, named name in its pod, with annotations.
func named(name string, annotations map[string]string) *specs.Spec {
	a := map[string]string{AnnotationCRIContainerType: "container", AnnotationCRIContainerName: name}
	for k, v := range annotations {
		a[k] = v
	}
	return &specs.Spec{Annotations: a}
}

func TestDetectGPU(t *testing.T) {
	env := func(kv ...string) *specs.Spec { return &specs.Spec{Process: &specs.Process{Env: kv}} }
	devs := func(paths ...string) *specs.Spec {
		s := &specs.Spec{Linux: &specs.Linux{}}
		for _, p := range paths {
			s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: p, Type: "c", Major: 195})
		}
		return s
	}
	tests := []struct {
		name      string
		spec      *specs.Spec
		gpu       bool
		count     int
		evidence0 string
	}{
		{"nothing", &specs.Spec{}, false, 0, ""},
		{"env all", env("PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"), true, 0, "env NVIDIA_VISIBLE_DEVICES=all"},
		{"env list", env("NVIDIA_VISIBLE_DEVICES=0,1,3"), true, 3, ""},
		{"env uuid", env("NVIDIA_VISIBLE_DEVICES=GPU-8a7b6c5d-1234-5678-9abc-def012345678"), true, 1, ""},
		{"env void", env("NVIDIA_VISIBLE_DEVICES=void"), false, 0, ""},
		{"env none", env("NVIDIA_VISIBLE_DEVICES=none"), false, 0, ""},
		{"env empty", env("NVIDIA_VISIBLE_DEVICES="), false, 0, ""},
		{"env last wins", env("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"), false, 0, ""},
		{"env other var", env("NVIDIA_DRIVER_CAPABILITIES=all"), false, 0, ""},
		{"habana", env("HABANA_VISIBLE_DEVICES=0,1"), true, 2, "env HABANA_VISIBLE_DEVICES=0,1"},
		{"nvidia devices", devs("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"), true, 2, "device /dev/nvidia0"},
		{"control nodes alone are no GPU", devs("/dev/nvidiactl", "/dev/nvidia-uvm"), false, 0, ""},
		{"rocm", devs("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"), true, 2, "device /dev/kfd"},
		{"dri card alone is no GPU", devs("/dev/dri/card0"), false, 0, ""},
		{"accel", devs("/dev/accel/accel0"), true, 1, ""},
		{"cdi annotation", &specs.Spec{Annotations: map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=0,nvidia.com/gpu=1"}}, true, 2, "annotation cdi.k8s.io/gpu=nvidia.com/gpu=0,nvidia.com/gpu=1"},
		{"NVIDIA's NRI annotation for this container", named("app", map[string]string{"nvidia.cdi.k8s.io/container.app": "nvidia.com/gpu=0,nvidia.com/gpu=1"}), true, 2, "annotation nvidia.cdi.k8s.io/container.app=nvidia.com/gpu=0,nvidia.com/gpu=1"},
		{"NVIDIA's NRI annotation for another container", named("app", map[string]string{"nvidia.cdi.k8s.io/container.sidecar": "nvidia.com/gpu=0"}), false, 0, ""},
		{"NVIDIA's NRI annotation for the pod", named("app", map[string]string{"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"}), true, 0, "annotation nvidia.cdi.k8s.io/pod=nvidia.com/gpu=all"},
		{"the container's NRI annotation wins over the pod's", named("app", map[string]string{"nvidia.cdi.k8s.io/container.app": "example.com/net=eth0", "nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"}), false, 0, ""},
		{"the GPU Operator's management devices are GPUs", named("app", map[string]string{"nvidia.cdi.k8s.io/container.app": "management.nvidia.com/gpu=all"}), true, 0, ""},
		{"cdi annotation without a device", &specs.Spec{Annotations: map[string]string{"cdi.k8s.io/x": ""}}, false, 0, ""},
		{"device plugin mounts", &specs.Spec{Mounts: []specs.Mount{
			{Destination: "/var/run/nvidia-container-devices/GPU-1", Source: "/dev/null", Type: "bind"},
			{Destination: "/var/run/nvidia-container-devices/GPU-2", Source: "/dev/null", Type: "bind"},
		}}, true, 2, "mount /var/run/nvidia-container-devices/GPU-1"},
		//lint:ignore SA1019 docker run --gpus still writes a prestart hook.
		{"docker --gpus hook", &specs.Spec{Hooks: &specs.Hooks{Prestart: []specs.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}}}}}, true, 0, "prestart hook /usr/bin/nvidia-container-runtime-hook"},
		{"env all and devices count", func() *specs.Spec {
			s := devs("/dev/nvidia0", "/dev/nvidia1")
			s.Process = &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}
			return s
		}(), true, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := EvidenceOf(nil).DetectGPU(FromSpec(tt.spec), 0)
			if g.GPU != tt.gpu || g.Count != tt.count {
				t.Errorf("DetectGPU = %+v, want gpu=%v count=%d", g, tt.gpu, tt.count)
			}
			if tt.evidence0 != "" && !slices.Contains(g.Evidence, tt.evidence0) {
				t.Errorf("evidence %q lacks %q", g.Evidence, tt.evidence0)
			}
			if !g.GPU && len(g.Evidence) > 0 {
				t.Errorf("no GPU but evidence %q", g.Evidence)
			}
		})
	}
}

// TestClassifyDevice is the one documented answer for every device path
// and CDI name, whichever front door it came through.
func TestClassifyDevice(t *testing.T) {
	tests := []struct {
		dev    string
		gpu    bool
		count  int
		family string
	}{
		{"/dev/nvidia0", true, 1, "nvidia"},
		{"/dev/nvidia15", true, 1, "nvidia"},
		{"/dev/nvidia0/", true, 1, "nvidia"},
		{"/dev/../dev/nvidia3", true, 1, "nvidia"},
		{"/dev/nvidiactl", false, 0, ""},
		{"/dev/nvidia-uvm", false, 0, ""},
		{"/dev/nvidia-uvm-tools", false, 0, ""},
		{"/dev/nvidia-modeset", false, 0, ""},
		{"/dev/nvidia-caps/nvidia-cap1", false, 0, ""},
		{"/dev/nvidia", false, 0, ""},
		{"/dev/dri", true, 0, "render"},
		{"/dev/dri/", true, 0, "render"},
		{"/dev/dri/renderD128", true, 1, "render"},
		{"/dev/dri/card0", false, 0, ""},
		{"/dev/dri/by-path", false, 0, ""},
		{"/dev/kfd", true, 0, "kfd"},
		{"/dev/accel", true, 0, "accel"},
		{"/dev/accel/accel0", true, 1, "accel"},
		{"/dev/accel0", true, 1, "accel"},
		{"/dev/accelerometer", false, 0, ""},
		{"/dev/fuse", false, 0, ""},
		{"nvidia.com/gpu=0", true, 1, "cdi"},
		{"nvidia.com/gpu=all", true, 0, "cdi"},
		{"amd.com/gpu=1", true, 1, "cdi"},
		{"intel.com/accel=npu0", true, 1, "cdi"},
		{"habana.ai/gaudi=0", true, 1, "cdi"},
		{"vendor.com/net=eth0", false, 0, ""},
		{"nvidia.com/gpu", false, 0, ""},
		{"dev/nvidia0", false, 0, ""},
		{"", false, 0, ""},
	}
	for _, tt := range tests {
		got := ClassifyDevice(tt.dev)
		if got.GPU != tt.gpu || got.Count != tt.count || got.Family != tt.family {
			t.Errorf("ClassifyDevice(%q) = %+v, want gpu=%v count=%d family=%q", tt.dev, got, tt.gpu, tt.count, tt.family)
		}
	}
}

// gpusAll is what docker run --gpus all asks dockerd for.
var gpusAll = DeviceRequest{Words: "--gpus all", Capabilities: []string{"gpu"}, Count: -1}

// TestDetectGPUFromFrontDoors: what only a front door knows — GPU requests
// in the user's words, --privileged — is evidence named as the user gave it.
func TestDetectGPUFromFrontDoors(t *testing.T) {
	tests := []struct {
		name     string
		opts     []Opt
		hostGPUs int
		gpu      bool
		count    int
		evidence []string
	}{
		{"gpus all", []Opt{WithDeviceRequest(gpusAll)}, 0, true, 0, []string{"--gpus all"}},
		{"two requests add up", []Opt{WithDeviceRequest(DeviceRequest{Words: "--gpus device=0", Capabilities: []string{"gpu"}, DeviceIDs: []string{"0"}}), WithDeviceRequest(DeviceRequest{Words: "--gpus device=1", Capabilities: []string{"gpu"}, DeviceIDs: []string{"1"}})}, 0, true, 2, []string{"--gpus device=0", "--gpus device=1"}},
		{"a request for another device", []Opt{WithDeviceRequest(DeviceRequest{Words: "--device-request x", Driver: "infiniband", Count: -1})}, 0, false, 0, nil},
		{"a GPU runtime", []Opt{WithRuntime("--runtime nvidia", "nvidia")}, 0, true, 0, []string{"--runtime nvidia"}},
		{"another runtime", []Opt{WithRuntime("--runtime runsc", "runsc")}, 0, false, 0, nil},
		{"a GPU resource", []Opt{WithResource("resources.limits nvidia.com/gpu: 2", "nvidia.com/gpu", 2)}, 0, true, 2, []string{"resources.limits nvidia.com/gpu: 2"}},
		{"a GPU resource of none", []Opt{WithResource("resources.limits nvidia.com/gpu: 0", "nvidia.com/gpu", 0)}, 0, false, 0, nil},
		{"another resource", []Opt{WithResource("resources.limits example.com/foo: 1", "example.com/foo", 1)}, 0, false, 0, nil},
		{"privileged on a GPU host", []Opt{WithPrivileged("--privileged")}, 4, true, 4, []string{"--privileged (every device of the host, its 4 GPU(s))"}},
		{"privileged on a host without GPUs", []Opt{WithPrivileged("--privileged")}, 0, false, 0, nil},
		{"dri directory", []Opt{WithDevices("/dev/dri")}, 0, true, 0, []string{"device /dev/dri"}},
		{"nvidiactl alone", []Opt{WithDevices("/dev/nvidiactl")}, 0, false, 0, nil},
		{"cdi name among devices", []Opt{WithDevices("nvidia.com/gpu=0", "nvidia.com/gpu=1", "intel.com/sgx=epc")}, 0, true, 2, []string{"device nvidia.com/gpu=0", "device nvidia.com/gpu=1"}},
		{"request and devices: the best-informed count", []Opt{WithDeviceRequest(gpusAll), WithDevices("/dev/nvidia0", "/dev/nvidia1")}, 8, true, 2, []string{"--gpus all", "device /dev/nvidia0", "device /dev/nvidia1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewContainer(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			g := EvidenceOf(nil).DetectGPU(c, tt.hostGPUs)
			if g.GPU != tt.gpu || g.Count != tt.count || !slices.Equal(g.Evidence, tt.evidence) {
				t.Errorf("DetectGPU = %+v, want gpu=%v count=%d evidence=%q", g, tt.gpu, tt.count, tt.evidence)
			}
		})
	}
}

// TestCDIName: fully qualified CDI names, with the character rules the
// docker CLI uses to tell them from device paths.
func TestCDIName(t *testing.T) {
	tests := []struct {
		in            string
		vendor, class string
		ok            bool
	}{
		{"nvidia.com/gpu=all", "nvidia.com", "gpu", true},
		{"nvidia.com/gpu=GPU-0d3e:1", "nvidia.com", "gpu", true},
		{"vendor.com/class=a", "vendor.com", "class", true},
		{"/dev/nvidia0", "", "", false},
		{"nvidia.com/gpu", "", "", false},
		{"gpu=all", "", "", false},
		{"nvidia.com/gpu=", "", "", false},
		{"nvidia.com/gpu=all:", "", "", false},
		{"nvidia.com/gp u=all", "", "", false},
		{"1nvidia.com/gpu=all", "", "", false},
		{"nvidia.com-/gpu=all", "", "", false},
		{"nvidia.com/gpu/x=all", "", "", false},
		{"a/b=c", "a", "b", true},
	}
	for _, tt := range tests {
		v, c, _, ok := cdiName(tt.in)
		if v != tt.vendor || c != tt.class || ok != tt.ok || IsCDIName(tt.in) != tt.ok {
			t.Errorf("cdiName(%q) = %q, %q, %v; want %q, %q, %v", tt.in, v, c, ok, tt.vendor, tt.class, tt.ok)
		}
	}
}

// TestEvidence is the table's answer for each kind of fact a front door
// hands over raw: device requests, runtimes and extended resources, under
// the default policy and one that lists more.
func TestEvidence(t *testing.T) {
	pol, err := policy.Parse("t.toml", []byte(`gpu_resources = ["example.com/tpu", "acme.io/*"]
gpu_runtime_classes = ["nvidia", "kata-nvidia-gpu"]`))
	if err != nil {
		t.Fatal(err)
	}
	def, more := EvidenceOf(nil), EvidenceOf(pol)
	for name, want := range map[string]bool{
		"nvidia.com/gpu": true, "nvidia.com/mig-1g.10gb": true, "nvidia.com/gpu.shared": true, "amd.com/gpu": true,
		"gpu.intel.com/i915": true, "gpu.intel.com/xe": true, "habana.ai/gaudi": true,
		"example.com/tpu": true, "example.com/other": false, "acme.io/npu": true,
		"memory": false, "cpu": false, "ephemeral-storage": false, "hugepages-2Mi": false, "intel.com/sriov": false,
	} {
		if got := more.Resource(name); got != want {
			t.Errorf("Resource(%q) = %v, want %v", name, got, want)
		}
	}
	if def.Resource("example.com/tpu") {
		t.Errorf("the default table takes example.com/tpu for a GPU")
	}
	for _, tt := range []struct {
		ev   Evidence
		name string
		want bool
	}{
		{def, "nvidia", true}, {def, "nvidia-cdi", true}, {def, "nvidia-legacy", true},
		{def, "runc", false}, {def, "", false}, {def, "kata-nvidia-gpu", false},
		{more, "kata-nvidia-gpu", true}, {more, "nvidia-cdi", false},
	} {
		if got := tt.ev.Runtime(tt.name); got != tt.want {
			t.Errorf("Runtime(%q) under %q = %v, want %v", tt.name, tt.ev.Runtimes, got, tt.want)
		}
	}
	for _, tt := range []struct {
		name  string
		r     DeviceRequest
		gpu   bool
		count int
	}{
		{"--gpus all", gpusAll, true, 0},
		{"--gpus 2", DeviceRequest{Capabilities: []string{"gpu"}, Count: 2}, true, 2},
		{"--gpus device=0,2", DeviceRequest{Capabilities: []string{"gpu"}, DeviceIDs: []string{"0", "2"}}, true, 2},
		{"driver nvidia, other capabilities", DeviceRequest{Driver: "nvidia", Capabilities: []string{"compute", "utility"}}, true, 0},
		{"device_ids all", DeviceRequest{Capabilities: []string{"gpu"}, DeviceIDs: []string{"all"}}, true, 0},
		{"cdi names", DeviceRequest{Driver: DriverCDI, DeviceIDs: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}}, true, 2},
		{"cdi all", DeviceRequest{Driver: DriverCDI, DeviceIDs: []string{"nvidia.com/gpu=all"}}, true, 0},
		{"cdi, not a GPU", DeviceRequest{Driver: DriverCDI, DeviceIDs: []string{"vendor.com/net=eth0"}}, false, 0},
		{"another driver", DeviceRequest{Driver: "infiniband", Count: -1}, false, 0},
		{"a driver named like nvidia is not nvidia", DeviceRequest{Driver: "nvidia-fake", Count: 1}, false, 0},
	} {
		gpu, n := def.DeviceRequest(tt.r)
		if gpu != tt.gpu || n != tt.count {
			t.Errorf("%s: DeviceRequest = %v, %d; want %v, %d", tt.name, gpu, n, tt.gpu, tt.count)
		}
	}
}
