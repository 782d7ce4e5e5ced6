package agreement_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/docker/docker/api/types/container"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpurun/gpurun/compose"
	"github.com/gpurun/gpurun/docker/launch"
	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/node/nri"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// evidenceForm is one form of GPU evidence, written in the words of every
// front door that can express it. A door with no input for the form (an
// empty field) cannot express it. Every door that can must reach the same
// judgement: whether the container is a GPU container, how many GPUs
// (where the door can count them), whether the policy applies, and — for
// a door that plans before the container exists — the same action.
type evidenceForm struct {
	name string
	pol  string // a policy file's text, "" for the defaults

	run     []string                   // docker run's arguments, before the image
	inspect *container.InspectResponse // docker inspect (doctor, resize, stats)
	compose string                     // the service's body in a compose file
	pod     *corev1.Pod                // a pod of one container named "app" (webhook, plan --pod)
	nri     *api.Container             // the container as containerd describes it to NRI
	// podAnnotations are the NRI pod\'s annotations.
	podAnnotations map[string]string
	bundle         *specs.Spec // a bundle's config.json (gpurun-runtime, the hook, plan --spec)

	gpu  bool
	gpus int // where the door can count them (compose cannot: it reports the GPU only)
	// action is what a door that plans before the container exists plans
	// (docker run, docker inspect without the donor's, compose), "" for
	// any acting plan.
	action oci.Action
}

func inspected(hc container.HostConfig, env ...string) *container.InspectResponse {
	if hc.IpcMode == "" {
		hc.IpcMode = "private"
	}
	if hc.ShmSize == 0 {
		hc.ShmSize = policy.EngineDefaultShm
	}
	return &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: strings.Repeat("ab", 32), HostConfig: &hc},
		Config:            &container.Config{Env: env},
	}
}

func podOf(mutate func(p *corev1.Pod, c *corev1.Container)) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	p.Name, p.Namespace = "p", "default"
	mutate(p, &p.Spec.Containers[0])
	return p
}

func bundleOf(mutate func(s *specs.Spec)) *specs.Spec {
	s := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace}}},
		Mounts: []specs.Mount{oci.ShmMount(policy.EngineDefaultShm)}, Annotations: map[string]string{}}
	mutate(s)
	return s
}

func devices(paths ...string) []*api.LinuxDevice {
	var out []*api.LinuxDevice
	for _, p := range paths {
		out = append(out, &api.LinuxDevice{Path: p, Type: "c", Major: 195})
	}
	return out
}

func specDevices(paths ...string) []specs.LinuxDevice {
	var out []specs.LinuxDevice
	for _, p := range paths {
		out = append(out, specs.LinuxDevice{Path: p, Type: "c", Major: 195})
	}
	return out
}

func evidenceForms() []evidenceForm {
	gpusAll := container.DeviceRequest{Count: -1, Capabilities: [][]string{{"gpu"}}}
	return []evidenceForm{
		{
			name:    "driver nvidia, capabilities without gpu",
			run:     []string{"--gpus", "driver=nvidia,capabilities=compute"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{Driver: "nvidia", Capabilities: [][]string{{"compute"}}}}}}),
			compose: "deploy: {resources: {reservations: {devices: [{driver: nvidia, capabilities: [compute]}]}}}",
			gpu:     true,
		},
		{
			name:    "another driver, capabilities without gpu",
			run:     []string{"--gpus", "driver=example,capabilities=compute"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{Driver: "example", Capabilities: [][]string{{"compute"}}}}}}),
			compose: "deploy: {resources: {reservations: {devices: [{driver: example, capabilities: [compute]}]}}}",
		},
		{
			name:    "the gpu capability, two device ids",
			run:     []string{"--gpus", `"device=0,1"`},
			inspect: inspected(container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{DeviceIDs: []string{"0", "1"}, Capabilities: [][]string{{"gpu"}}}}}}),
			compose: "deploy: {resources: {reservations: {devices: [{capabilities: [gpu], device_ids: ['0', '1']}]}}}",
			gpu:     true, gpus: 2,
		},
		{
			name:    "runtime nvidia (a RuntimeClass of the same name)",
			run:     []string{"--runtime", "nvidia"},
			inspect: inspected(container.HostConfig{Runtime: "nvidia"}),
			compose: "runtime: nvidia",
			pod:     podOf(func(p *corev1.Pod, _ *corev1.Container) { rc := "nvidia"; p.Spec.RuntimeClassName = &rc }),
			gpu:     true,
		},
		{
			name:    "a runtime named like nvidia's, not one of them",
			run:     []string{"--runtime", "nvidia-sandboxed"},
			inspect: inspected(container.HostConfig{Runtime: "nvidia-sandboxed"}),
			compose: "runtime: nvidia-sandboxed",
			pod:     podOf(func(p *corev1.Pod, _ *corev1.Container) { rc := "nvidia-sandboxed"; p.Spec.RuntimeClassName = &rc }),
		},
		{
			name:    "a runtime the policy lists",
			pol:     `gpu_runtime_classes = ["kata-gpu"]`,
			run:     []string{"--runtime", "kata-gpu"},
			inspect: inspected(container.HostConfig{Runtime: "kata-gpu"}),
			compose: "runtime: kata-gpu",
			pod:     podOf(func(p *corev1.Pod, _ *corev1.Container) { rc := "kata-gpu"; p.Spec.RuntimeClassName = &rc }),
			gpu:     true,
		},
		{
			name:    "a CDI name of a GPU",
			run:     []string{"--device", "nvidia.com/gpu=1"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=1"}}}}}),
			compose: "devices: [nvidia.com/gpu=1]",
			pod: podOf(func(p *corev1.Pod, _ *corev1.Container) {
				p.Annotations = map[string]string{"cdi.k8s.io/app": "nvidia.com/gpu=1"}
			}),
			nri:    &api.Container{Id: "c", Name: "app", CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=1"}}},
			bundle: bundleOf(func(s *specs.Spec) { s.Annotations["cdi.k8s.io/app"] = "nvidia.com/gpu=1" }),
			gpu:    true, gpus: 1,
		},
		{
			name: "NVIDIA's NRI annotation names GPUs for the container (GPU Operator 26.3+)",
			pod: podOf(func(p *corev1.Pod, _ *corev1.Container) {
				p.Annotations = map[string]string{"nvidia.cdi.k8s.io/container.app": "nvidia.com/gpu=0,nvidia.com/gpu=1"}
			}),
			nri: &api.Container{Id: "c", Name: "app"},
			bundle: bundleOf(func(s *specs.Spec) {
				s.Annotations[oci.AnnotationCRIContainerType] = "container"
				s.Annotations[oci.AnnotationCRIContainerName] = "app"
				s.Annotations["nvidia.cdi.k8s.io/container.app"] = "nvidia.com/gpu=0,nvidia.com/gpu=1"
			}),
			podAnnotations: map[string]string{"nvidia.cdi.k8s.io/container.app": "nvidia.com/gpu=0,nvidia.com/gpu=1"},
			gpu:            true, gpus: 2,
		},
		{
			// At admission the pod asks the device plugin for a GPU; on the
			// node, containerd (enable_cdi) has applied the CDI spec the
			// plugin named: the device nodes, the driver's mounts, the
			// toolkit's createContainer hooks and the plugin's
			// NVIDIA_VISIBLE_DEVICES=void.
			name: "a GPU pod in the GPU Operator's native CDI mode (25.10+)",
			pod: podOf(func(_ *corev1.Pod, c *corev1.Container) {
				c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
			}),
			nri: &api.Container{Id: "c", Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=void"},
				Linux:  &api.LinuxContainer{Devices: devices("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")},
				Mounts: []*api.Mount{{Destination: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", Source: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}}},
				Hooks:  &api.Hooks{CreateContainer: []*api.Hook{{Path: "/usr/local/nvidia/toolkit/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}}}},
			bundle: bundleOf(func(s *specs.Spec) {
				s.Process.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}
				s.Linux.Devices = specDevices("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")
				s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/usr/local/nvidia/toolkit/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}}}
			}),
			gpu: true, gpus: 1,
		},
		{
			name:    "a CDI name of another device",
			run:     []string{"--device", "example.com/net=eth0"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{Driver: "cdi", DeviceIDs: []string{"example.com/net=eth0"}}}}}),
			compose: "devices: [example.com/net=eth0]",
			pod: podOf(func(p *corev1.Pod, _ *corev1.Container) {
				p.Annotations = map[string]string{"cdi.k8s.io/app": "example.com/net=eth0"}
			}),
			nri:    &api.Container{Id: "c", Name: "app", CDIDevices: []*api.CDIDevice{{Name: "example.com/net=eth0"}}},
			bundle: bundleOf(func(s *specs.Spec) { s.Annotations["cdi.k8s.io/app"] = "example.com/net=eth0" }),
		},
		{
			name:    "a GPU device node and the driver's control nodes",
			run:     []string{"--device", "/dev/nvidia0", "--device", "/dev/nvidiactl", "--device", "/dev/nvidia-uvm"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{Devices: []container.DeviceMapping{{PathOnHost: "/dev/nvidia0", PathInContainer: "/dev/nvidia0"}, {PathOnHost: "/dev/nvidiactl", PathInContainer: "/dev/nvidiactl"}, {PathOnHost: "/dev/nvidia-uvm", PathInContainer: "/dev/nvidia-uvm"}}}}),
			compose: "devices: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm]",
			nri:     &api.Container{Id: "c", Name: "app", Linux: &api.LinuxContainer{Devices: devices("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")}},
			bundle: bundleOf(func(s *specs.Spec) {
				s.Linux.Devices = specDevices("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")
			}),
			gpu: true, gpus: 1,
		},
		{
			name:    "the driver's control node alone",
			run:     []string{"--device", "/dev/nvidiactl"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{Devices: []container.DeviceMapping{{PathOnHost: "/dev/nvidiactl", PathInContainer: "/dev/nvidiactl"}}}}),
			compose: "devices: [/dev/nvidiactl]",
			nri:     &api.Container{Id: "c", Name: "app", Linux: &api.LinuxContainer{Devices: devices("/dev/nvidiactl")}},
			bundle:  bundleOf(func(s *specs.Spec) { s.Linux.Devices = specDevices("/dev/nvidiactl") }),
		},
		{
			name:    "render nodes and AMD's compute interface",
			run:     []string{"--device", "/dev/kfd", "--device", "/dev/dri/renderD128", "--device", "/dev/dri/renderD129"},
			inspect: inspected(container.HostConfig{Resources: container.Resources{Devices: []container.DeviceMapping{{PathOnHost: "/dev/kfd", PathInContainer: "/dev/kfd"}, {PathOnHost: "/dev/dri/renderD128", PathInContainer: "/dev/dri/renderD128"}, {PathOnHost: "/dev/dri/renderD129", PathInContainer: "/dev/dri/renderD129"}}}}),
			compose: "devices: [/dev/kfd, /dev/dri/renderD128, /dev/dri/renderD129]",
			nri:     &api.Container{Id: "c", Name: "app", Linux: &api.LinuxContainer{Devices: devices("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129")}},
			bundle: bundleOf(func(s *specs.Spec) {
				s.Linux.Devices = specDevices("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129")
			}),
			gpu: true, gpus: 2,
		},
		{
			name:    "NVIDIA_VISIBLE_DEVICES lists two GPUs",
			run:     []string{"-e", "NVIDIA_VISIBLE_DEVICES=0,1"},
			inspect: inspected(container.HostConfig{}, "NVIDIA_VISIBLE_DEVICES=0,1"),
			compose: "environment: {NVIDIA_VISIBLE_DEVICES: '0,1'}",
			pod: podOf(func(_ *corev1.Pod, c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0,1"}}
			}),
			nri:    &api.Container{Id: "c", Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=0,1"}},
			bundle: bundleOf(func(s *specs.Spec) { s.Process.Env = []string{"NVIDIA_VISIBLE_DEVICES=0,1"} }),
			gpu:    true, gpus: 2,
		},
		{
			name:    "NVIDIA_VISIBLE_DEVICES=void (the device plugin's, in CDI mode)",
			run:     []string{"-e", "NVIDIA_VISIBLE_DEVICES=void"},
			inspect: inspected(container.HostConfig{}, "NVIDIA_VISIBLE_DEVICES=void"),
			compose: "environment: {NVIDIA_VISIBLE_DEVICES: void}",
			pod: podOf(func(_ *corev1.Pod, c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"}}
			}),
			nri:    &api.Container{Id: "c", Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}},
			bundle: bundleOf(func(s *specs.Spec) { s.Process.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"} }),
		},
		{
			name: "an extended resource of a GPU vendor",
			pod: podOf(func(_ *corev1.Pod, c *corev1.Container) {
				c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
			}),
			gpu: true, gpus: 2,
		},
		{
			name: "an extended resource the policy lists",
			pol:  `gpu_resources = ["example.com/*"]`,
			pod: podOf(func(_ *corev1.Pod, c *corev1.Container) {
				c.Resources.Limits = corev1.ResourceList{"example.com/tpu": resource.MustParse("4")}
			}),
			gpu: true, gpus: 4,
		},
		{
			name: "an extended resource of another kind",
			pod: podOf(func(_ *corev1.Pod, c *corev1.Container) {
				c.Resources.Limits = corev1.ResourceList{"example.com/tpu": resource.MustParse("4")}
			}),
		},
		{
			name:    "a GPU container that joins another's IPC namespace",
			run:     []string{"--gpus", "all", "--ipc", "container:trainer"},
			inspect: inspected(container.HostConfig{IpcMode: "container:trainer", Resources: container.Resources{DeviceRequests: []container.DeviceRequest{gpusAll}}}),
			compose: "gpus: all\n    ipc: service:trainer",
			gpu:     true, action: oci.ActionRemount,
		},
	}
}

// judgement is what a door says of a form.
type judgement struct {
	gpu, applies bool
	// unsaid says the door's output does not say whether the policy
	// applies (compose's report names GPU services and their action).
	unsaid bool
	gpus   int // -1: the door does not count
	action oci.Action
}

// TestEvidenceAgrees: every form of GPU evidence that two or more front
// doors can express reaches the same judgement through each of them.
func TestEvidenceAgrees(t *testing.T) {
	const mem = 64 * policy.GiB
	for _, f := range evidenceForms() {
		t.Run(f.name, func(t *testing.T) {
			pol := policy.Default()
			if f.pol != "" {
				var err error
				if pol, err = policy.Parse("agreement.toml", []byte(f.pol)); err != nil {
					t.Fatal(err)
				}
			}
			facts := oci.Facts{HostMemory: mem}
			got := map[string]judgement{}
			fromPlan := func(pl oci.Plan) judgement {
				return judgement{gpu: pl.GPU, applies: pl.Applies, gpus: pl.GPUs, action: pl.Action}
			}
			if f.run != nil {
				res := launch.Prepare(context.Background(), launch.Request{
					Args:        append(append([]string{}, f.run...), "img"),
					Policy:      pol,
					Daemon:      fakeDaemon{memory: mem, defaultShm: policy.EngineDefaultShm},
					LookupEnv:   func(string) (string, bool) { return "", false },
					ReadFile:    func(p string) ([]byte, error) { return nil, errors.New(p + ": no files here") },
					LocalFacts:  func() (oci.Facts, error) { return facts, nil },
					DaemonLocal: true,
				})
				if strings.Contains(res.Plan.Reason, "not understood") {
					t.Fatalf("gpurun run: %v", res.Notes)
				}
				got[string(doorLauncher)] = fromPlan(res.Plan)
			}
			if f.inspect != nil {
				c, err := translate.FromInspect(*f.inspect, "", nil)
				if err != nil {
					t.Fatalf("docker inspect: %v", err)
				}
				got[string(doorDoctor)] = fromPlan(oci.Decide(oci.Input{Container: c, Policy: pol, Facts: facts}))
			}
			if f.compose != "" {
				got[string(doorCompose)] = composeJudgement(t, pol, f.compose)
			}
			if f.pod != nil {
				d, err := podspec.Decide(f.pod, pol)
				if err != nil {
					t.Fatalf("pod: %v", err)
				}
				got["gpurun plan --pod"] = judgement{gpu: d.Plans[0].GPU, applies: d.Applies, gpus: d.Plans[0].GPUs, action: d.Plans[0].Action}
				m, err := webhook.Mutate(f.pod, pol)
				if err != nil {
					t.Fatalf("webhook: %v", err)
				}
				got["gpurun webhook"] = judgement{gpu: m.Decision.GPU, applies: m.Decision.Applies, gpus: m.Decision.Plans[0].GPUs, action: m.Decision.Plans[0].Action}
			}
			if f.nri != nil {
				ctr := f.nri
				ctr.PodSandboxId = "pod"
				s := nri.ToSpec("containerd", &api.PodSandbox{Id: "pod", Name: "p", Namespace: "default", Annotations: f.podAnnotations}, ctr)
				s.Mounts = append(s.Mounts, oci.ShmMount(policy.EngineDefaultShm))
				got[string(doorNRI)] = fromPlan(oci.Decide(oci.Input{Container: oci.FromSpec(s), Policy: pol, Facts: facts}))
			}
			if f.bundle != nil {
				got[string(doorPlan)] = fromPlan(oci.Decide(oci.Input{Container: oci.FromSpec(f.bundle), Policy: pol, Facts: facts}))
			}
			if len(got) < 2 {
				t.Fatalf("only %d door(s) express this form: it is not one to agree on", len(got))
			}
			for door, j := range got {
				if j.gpu != f.gpu || (!j.unsaid && j.applies != f.gpu) {
					t.Errorf("%s: gpu %v, applies %v; want %v", door, j.gpu, j.applies, f.gpu)
				}
				if j.gpus >= 0 && j.gpus != f.gpus {
					t.Errorf("%s: %d GPU(s), want %d", door, j.gpus, f.gpus)
				}
				if f.action != "" && j.action != "" && j.action != f.action {
					t.Errorf("%s: %s, want %s", door, j.action, f.action)
				}
			}
		})
	}
}

// composeJudgement migrates a compose file holding the service (and a
// trainer it may join) and reads the service's report: compose says
// whether it is a GPU service, not how many GPUs.
func composeJudgement(t *testing.T, pol *policy.Policy, body string) judgement {
	t.Helper()
	dir := t.TempDir()
	file := "services:\n  s:\n    image: x\n    " + body + "\n  trainer:\n    image: x\n"
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := compose.Migrate(context.Background(), compose.Options{Files: []string{"compose.yaml"}, WorkDir: dir, Policy: pol})
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	for _, s := range res.Services {
		if s.Service == "s" {
			return judgement{gpu: s.GPU, unsaid: true, gpus: -1}
		}
	}
	t.Fatalf("compose: no report of service s in %+v", res.Services)
	return judgement{}
}
