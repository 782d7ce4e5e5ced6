package nri

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// nriContainer describes an OCI spec the way containerd's CRI plugin
// describes the container it is creating to NRI plugins (its criContainer
// fills the request from the generated spec with these same helpers).
func nriContainer(s *specs.Spec, podID string) *api.Container {
	c := &api.Container{
		Id:           "c0ffee",
		PodSandboxId: podID,
		Name:         "app",
		Annotations:  s.Annotations,
		Mounts:       api.FromOCIMounts(s.Mounts),
		Hooks:        api.FromOCIHooks(s.Hooks),
	}
	if s.Process != nil {
		c.Env = s.Process.Env
		c.Args = s.Process.Args
	}
	if s.Linux != nil {
		c.Linux = &api.LinuxContainer{
			Namespaces: api.FromOCILinuxNamespaces(s.Linux.Namespaces),
			Devices:    api.FromOCILinuxDevices(s.Linux.Devices),
			Resources:  api.FromOCILinuxResources(s.Linux.Resources, s.Annotations),
		}
	}
	return c
}

func TestToSpec(t *testing.T) {
	limit := int64(8 << 30)
	pod := &api.PodSandbox{
		Id: "pod1", Namespace: "ml", Name: "job-0", Uid: "u1",
		Annotations: map[string]string{
			"io.kubernetes.cri.container-type":  "sandbox", // describes the sandbox: dropped
			"io.kubernetes.cri.sandbox-id":      "pod1",
			"io.kubernetes.cri-o.ContainerType": "sandbox",
			"gpurun.io/shm-size":                "4Gi",
			"team":                              "pod",
		},
	}
	ctr := &api.Container{
		Id:           "c1",
		Name:         "train",
		PodSandboxId: "pod1",
		Annotations:  map[string]string{"team": "container", "cdi.k8s.io/a": "nvidia.com/gpu=0"},
		Args:         []string{"python", "train.py"},
		Env:          []string{"A=1", "NVIDIA_VISIBLE_DEVICES=all"},
		Mounts: []*api.Mount{
			{Destination: "/dev/shm", Type: "bind", Source: "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/pod1/shm", Options: []string{"rbind", "rprivate", "rw"}},
		},
		Hooks: &api.Hooks{Prestart: []*api.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"prestart"}}}},
		Linux: &api.LinuxContainer{
			Namespaces: []*api.LinuxNamespace{{Type: "ipc", Path: "/proc/1/ns/ipc"}, {Type: "mount"}},
			Devices:    []*api.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 195}},
			Resources:  &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(limit)}},
		},
		CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=0"}, {Name: "nvidia.com/gpu=1"}, {Name: "nvidia.com/gpu=1"}},
	}

	tests := []struct {
		name    string
		runtime string
		ctrAnn  map[string]string
		check   func(t *testing.T, s *specs.Spec)
	}{
		{
			name:    "containerd",
			runtime: "containerd",
			check: func(t *testing.T, s *specs.Spec) {
				want := map[string]string{
					"gpurun.io/shm-size":           "4Gi",
					"team":                         "container", // the container's own key wins
					"cdi.k8s.io/a":                 "nvidia.com/gpu=0",
					oci.AnnotationCRIContainerType: "container",
					oci.AnnotationCRISandboxID:     "pod1",
					CDIAnnotation:                  "nvidia.com/gpu=1", // gpu=0 is already in cdi.k8s.io/a
					// The pod's identity, from NRI's pod and container.
					oci.AnnotationCRISandboxNamespace: "ml",
					oci.AnnotationCRISandboxName:      "job-0",
					oci.AnnotationCRISandboxUID:       "u1",
					oci.AnnotationCRIContainerName:    "train",
				}
				if !mapsEqual(s.Annotations, want) {
					t.Errorf("annotations = %v, want %v", s.Annotations, want)
				}
				if !slices.Equal(s.Process.Env, ctr.Env) || !slices.Equal(s.Process.Args, ctr.Args) {
					t.Errorf("process = %+v", s.Process)
				}
				if len(s.Mounts) != 1 || s.Mounts[0].Source != ctr.Mounts[0].Source || s.Mounts[0].Type != "bind" || !slices.Equal(s.Mounts[0].Options, ctr.Mounts[0].Options) {
					t.Errorf("mounts = %+v", s.Mounts)
				}
				//lint:ignore SA1019 Prestart is where the NVIDIA hook lives.
				if s.Hooks == nil || len(s.Hooks.Prestart) != 1 || s.Hooks.Prestart[0].Path != ctr.Hooks.Prestart[0].Path {
					t.Errorf("hooks = %+v", s.Hooks)
				}
				if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/nvidia0" || s.Linux.Devices[0].Major != 195 {
					t.Errorf("devices = %+v", s.Linux.Devices)
				}
				if got := oci.MemoryLimit(s); got != limit {
					t.Errorf("memory limit = %d, want %d", got, limit)
				}
				if len(s.Linux.Namespaces) != 2 || s.Linux.Namespaces[0] != (specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "/proc/1/ns/ipc"}) {
					t.Errorf("namespaces = %+v", s.Linux.Namespaces)
				}
			},
		},
		{
			name:    "cri-o without type annotations",
			runtime: RuntimeCRIO,
			check: func(t *testing.T, s *specs.Spec) {
				if got := oci.CRIPod(s); got != (oci.Pod{SandboxID: "pod1", Engine: "cri-o", Namespace: "ml", Name: "job-0", UID: "u1", Container: "train"}) {
					t.Errorf("CRIPod = %+v, want the pod's identity under CRI-O's keys", got)
				}
				if s.Annotations[oci.AnnotationCRIOContainerType] != "container" || s.Annotations[oci.AnnotationCRIOSandboxID] != "pod1" {
					t.Errorf("annotations = %v, want CRI-O's container type and sandbox id", s.Annotations)
				}
				if _, ok := s.Annotations[oci.AnnotationCRIContainerType]; ok {
					t.Errorf("annotations = %v: containerd's type set for CRI-O", s.Annotations)
				}
			},
		},
		{
			name:    "the container's own type annotations are kept",
			runtime: "containerd",
			ctrAnn:  map[string]string{oci.AnnotationCRIOContainerType: "container", oci.AnnotationCRIOSandboxID: "other"},
			check: func(t *testing.T, s *specs.Spec) {
				if s.Annotations[oci.AnnotationCRIOSandboxID] != "other" {
					t.Errorf("annotations = %v", s.Annotations)
				}
				if _, ok := s.Annotations[oci.AnnotationCRIContainerType]; ok {
					t.Errorf("annotations = %v: containerd's type added next to CRI-O's", s.Annotations)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ctr
			if tt.ctrAnn != nil {
				c = &api.Container{Id: ctr.Id, PodSandboxId: ctr.PodSandboxId, Annotations: tt.ctrAnn}
			}
			before := len(pod.Annotations)
			s := ToSpec(tt.runtime, pod, c)
			tt.check(t, s)
			if len(pod.Annotations) != before {
				t.Errorf("ToSpec changed the pod's annotations")
			}
		})
	}
}

func TestToSpecNil(t *testing.T) {
	s := ToSpec("", nil, &api.Container{})
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(s), Policy: policy.Default(), Facts: oci.Facts{HostMemory: 1 << 36}})
	if pl.Action != oci.ActionNone || pl.GPU {
		t.Errorf("empty container: plan %+v, want none without GPU", pl)
	}
}

// TestGPUEvidence: every GPU signal the planner knows reaches it through
// NRI's fields, and the plan sizes the pod's /dev/shm from the policy.
func TestGPUEvidence(t *testing.T) {
	const host = int64(64 << 30)
	pol := policy.Default()
	shm := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/p/shm", Options: []string{"rbind", "rprivate", "rw"}}
	tests := []struct {
		name string
		pod  map[string]string
		ctr  *api.Container
		gpu  bool
	}{
		{"nothing", nil, &api.Container{}, false},
		{"env NVIDIA_VISIBLE_DEVICES=all", nil, &api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}, true},
		{"env NVIDIA_VISIBLE_DEVICES=void", nil, &api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}, false},
		{"env HABANA_VISIBLE_DEVICES", nil, &api.Container{Env: []string{"HABANA_VISIBLE_DEVICES=0,1"}}, true},
		{"device /dev/nvidia0", nil, &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 195}}}}, true},
		{"device /dev/kfd", nil, &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/kfd", Type: "c"}}}}, true},
		{"device /dev/null only", nil, &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/null", Type: "c"}}}}, false},
		{"NRI CDI device", nil, &api.Container{CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=all"}}}, true},
		{"container CDI annotation", nil, &api.Container{Annotations: map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}}, true},
		{"pod CDI annotation", map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}, &api.Container{}, true},
		{"NVIDIA prestart hook", nil, &api.Container{Hooks: &api.Hooks{Prestart: []*api.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook"}}}}, true},
		{"device plugin volume mount", nil, &api.Container{Mounts: []*api.Mount{{Destination: "/var/run/nvidia-container-devices/GPU-1", Type: "bind", Source: "/dev/null"}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.ctr.Mounts = append(tt.ctr.Mounts, shm)
			tt.ctr.PodSandboxId = "p"
			var grown []int64
			p := New(Config{Policy: pol, Facts: testFacts(host, func(string) (int64, error) { return 64 << 20, nil }),
				Grow: func(_ string, size int64, _ remount.Scope) (remount.Result, error) {
					grown = append(grown, size)
					return remount.Result{Before: 64 << 20, After: size, Changed: true}, nil
				}})
			out, err := p.Handle(&api.PodSandbox{Id: "p", Annotations: tt.pod}, tt.ctr)
			if err != nil {
				t.Fatal(err)
			}
			if out.Plan.GPU != tt.gpu {
				t.Fatalf("GPU = %v, want %v (evidence %v, reason %s)", out.Plan.GPU, tt.gpu, out.Plan.Evidence, out.Plan.Reason)
			}
			if !tt.gpu {
				if out.Plan.Action != oci.ActionNone || len(grown) != 0 {
					t.Errorf("no GPU: action %s, grown %v; want none", out.Plan.Action, grown)
				}
				return
			}
			want, _ := pol.Target(policy.Request{HostMemory: host, GPUs: out.Plan.GPUs})
			if out.Plan.Action != oci.ActionRemount || !slices.Equal(grown, []int64{want}) {
				t.Errorf("action %s, grown %v; want remount to %d", out.Plan.Action, grown, want)
			}
		})
	}
}

// TestFixturesPlanLikeTheShim: for every container spec captured from a
// real engine, the plugin, which sees the container through NRI, plans
// exactly what the shim plans from config.json.
func TestFixturesPlanLikeTheShim(t *testing.T) {
	files, err := filepath.Glob("../../oci/testdata/fixtures/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	const host = int64(64 << 30)
	sizes := func(string) (int64, error) { return 64 << 20, nil }
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := specfile.Parse(f, data)
		if err != nil {
			t.Fatal(err)
		}
		s := cfg.Spec
		c := oci.CRIPod(s)
		if c.Sandbox {
			continue // NRI never asks about a pod's sandbox
		}
		n++
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			for _, pol := range []*policy.Policy{policy.Default(), mustParse(t, `match = "all"`), mustParse(t, `mode = "mount"`), mustParse(t, "enforce_min = true\nmin = \"4g\"")} {
				want := oci.Decide(oci.Input{Container: oci.FromSpec(s), Policy: pol, Facts: oci.Facts{HostMemory: host, TmpfsSize: sizes}})
				p := New(Config{Policy: pol, Facts: testFacts(host, sizes),
					Grow: func(string, int64, remount.Scope) (remount.Result, error) { return remount.Result{}, nil }})
				podID := c.SandboxID
				// The fixtures' engines ran under a temporary dir, outside the
				// default engine_roots: the pod's pid (NRI's) vouches for it.
				out, err := p.Handle(&api.PodSandbox{Id: podID, Pid: 4242}, nriContainer(s, podID))
				if err != nil {
					t.Fatal(err)
				}
				got := out.Plan
				if got.Action != want.Action || got.Size != want.Size || got.Current != want.Current ||
					got.GPU != want.GPU || got.GPUs != want.GPUs || got.Reason != want.Reason ||
					got.Shm != want.Shm || !slices.Equal(got.Evidence, want.Evidence) {
					t.Errorf("policy %+v:\n NRI plan %+v\nshim plan %+v", pol, got, want)
				}
				if c.Engine != "" && got.Pod != want.Pod {
					t.Errorf("container %+v, want %+v", got.Pod, want.Pod)
				}
			}
		})
	}
	if n == 0 {
		t.Fatal("no container fixtures")
	}
}

func mustParse(t *testing.T, toml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestToSpecCgroupsPath: the container's cgroups path reaches the spec, so
// that the restart sweep finds the pod's memory cgroup.
func TestToSpecCgroupsPath(t *testing.T) {
	const p = "/kubepods/burstable/pod7e4a1f7c/3f2a"
	s := ToSpec("containerd", &api.PodSandbox{Id: "pod"}, &api.Container{Id: "c", Linux: &api.LinuxContainer{CgroupsPath: p}})
	if s.Linux.CgroupsPath != p {
		t.Errorf("cgroupsPath %q, want %q", s.Linux.CgroupsPath, p)
	}
}
