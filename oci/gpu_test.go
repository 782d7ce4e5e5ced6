package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

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
			g := DetectGPU(tt.spec)
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
