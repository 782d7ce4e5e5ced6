package doctor

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const fixtures = "../../oci/testdata/fixtures"

func inspected(name string, pid int, hc container.HostConfig, env ...string) container.InspectResponse {
	id := strings.Repeat(name[:1], 64)
	st := &container.State{Status: "exited"}
	if pid > 0 {
		st = &container.State{Status: "running", Running: true, Pid: pid}
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: id, Name: "/" + name, State: st, HostConfig: &hc},
		Config:            &container.Config{Image: "gpurun-test/busybox", Env: env},
	}
}

func TestDockerContainer(t *testing.T) {
	pol := policy.Default()
	target := func(limit int64) int64 {
		n, _ := pol.Target(policy.Request{MemoryLimit: limit, HostMemory: fakeHostMemory})
		return n
	}
	gpu := "NVIDIA_VISIBLE_DEVICES=all"
	donor := inspected("donor", 300, container.HostConfig{IpcMode: "shareable", ShmSize: policy.EngineDefaultShm})
	tests := []struct {
		name     string
		c        container.InspectResponse
		shm      *FS // statfs through /proc/<pid>/root
		bundle   string
		want     map[string]Status
		wantExit int
		// wantKind is shm.mount's kind, wantAction the plan's.
		wantKind, wantAction string
		// wantFix must be in shm.size's fix.
		wantFix string
	}{
		{"default 64MiB, GPU env", inspected("trainer", 4242, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm, Runtime: "runc"}, gpu),
			&FS{Tmpfs: true, Size: policy.EngineDefaultShm}, "",
			map[string]Status{"container": OK, "shm.size": Problem}, 1, "private-tmpfs", "set-size", "gpurun resize trainer " + policy.FormatDocker(target(0))},
		{"the runtime's config.json is read", inspected("bundled", 4243, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm, Runtime: "runc"}, gpu),
			&FS{Tmpfs: true, Size: policy.EngineDefaultShm}, "docker-20.10-env-nvidia-all.json",
			map[string]Status{"shm.size": Problem}, 1, "private-tmpfs", "set-size", "--shm-size=" + policy.FormatDocker(target(0))},
		{"--gpus all, --memory 2g", inspected("gpus", 4244, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm,
			Resources: container.Resources{Memory: 2 * policy.GiB, DeviceRequests: []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}}}}}),
			&FS{Tmpfs: true, Size: policy.EngineDefaultShm}, "",
			map[string]Status{"shm.size": Problem, "memory": OK}, 1, "private-tmpfs", "set-size", policy.FormatDocker(target(2 * policy.GiB))},
		{"sized by gpurun-runtime: healthy across restarts", inspected("shimmed", 4245, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm, Runtime: "gpurun"}, gpu),
			&FS{Tmpfs: true, Size: target(0)}, "",
			map[string]Status{"shm.size": OK}, 0, "private-tmpfs", "set-size", ""},
		{"resized live under runc: a restart undoes it", inspected("resized", 4246, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm, Runtime: "runc"}, gpu),
			&FS{Tmpfs: true, Size: target(0)}, "",
			map[string]Status{"shm.size": Warn}, 0, "private-tmpfs", "set-size", "--shm-size=" + policy.FormatDocker(target(0))},
		{"joins a donor's IPC", inspected("peer", 4247, container.HostConfig{IpcMode: "container:donor", ShmSize: policy.EngineDefaultShm}, gpu),
			&FS{Tmpfs: true, Size: policy.EngineDefaultShm}, "",
			map[string]Status{"shm.size": Problem}, 1, "engine-host-tmpfs", "remount", "gpurun resize donor " + policy.FormatDocker(target(0))},
		{"not running: the size it starts with", inspected("stopped", 0, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm}, gpu),
			nil, "", map[string]Status{"shm.size": Problem}, 1, "private-tmpfs", "set-size", "gpurun resize stopped"},
		{"--ipc host", inspected("hostipc", 4248, container.HostConfig{IpcMode: "host"}, gpu),
			&FS{Tmpfs: true, Size: fakeHostMemory / 2}, "",
			map[string]Status{"shm.mount": Warn, "shm.size": OK}, 0, "host", "none", ""},
		{"no GPU", inspected("plain", 4249, container.HostConfig{IpcMode: "private", ShmSize: policy.EngineDefaultShm}),
			&FS{Tmpfs: true, Size: policy.EngineDefaultShm}, "",
			map[string]Status{"shm.size": OK}, 0, "private-tmpfs", "none", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			d := &fakeDocker{info: system.Info{MemTotal: fakeHostMemory, DockerRootDir: "/var/lib/docker", NCPU: 16,
				Runtimes: map[string]system.RuntimeWithStatus{"gpurun": {Runtime: system.Runtime{Path: goldenRuntime}}}},
				containers: map[string]container.InspectResponse{"donor": donor, tt.c.Name[1:]: tt.c}}
			pid := 0
			if tt.c.State.Running {
				pid = tt.c.State.Pid
			}
			if tt.shm != nil {
				f.fs["/proc/"+itoa(pid)+"/root/dev/shm"] = *tt.shm
				f.fs["/var/lib/docker/containers/"+donor.ID+"/mounts/shm"] = *tt.shm
			}
			if tt.bundle != "" {
				f.write("/proc/"+itoa(pid)+"/status", "Name:\tsh\nPid:\t"+itoa(pid)+"\nPPid:\t4100\n")
				f.write("/proc/4100/comm", "containerd-shim-runc-v2\n")
				f.link("/proc/4100/cwd", "/run/containerd/io.containerd.runtime.v2.task/moby/"+tt.c.ID)
				f.copyFile(fixtures+"/"+tt.bundle, "/run/containerd/io.containerd.runtime.v2.task/moby/"+tt.c.ID+"/config.json")
			}
			r := DockerContainer(context.Background(), f.system(), d, tt.c.Name[1:], TargetOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
			for name, want := range tt.want {
				if c := check(t, r, name); c.Status != want {
					t.Errorf("%s: %s (%s), want %s", name, c.Status, c.Detail, want)
				}
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit %d, want %d\n%s", r.ExitCode, tt.wantExit, text(r))
			}
			if k := check(t, r, "shm.mount").Data["kind"]; k != tt.wantKind {
				t.Errorf("kind %v, want %s", k, tt.wantKind)
			}
			plan := check(t, r, "plan")
			if plan.Data["action"] != tt.wantAction {
				t.Errorf("plan %v, want %s: %s", plan.Data["action"], tt.wantAction, plan.Detail)
			}
			if tt.bundle != "" && !strings.Contains(plan.Detail, "config.json") {
				t.Errorf("plan not made over the runtime's config.json: %s", plan.Detail)
			}
			if fix := check(t, r, "shm.size").Fix; !strings.Contains(fix, tt.wantFix) {
				t.Errorf("fix %q lacks %q", fix, tt.wantFix)
			}
		})
	}
	t.Run("no such container", func(t *testing.T) {
		r := DockerContainer(context.Background(), hostFake(t).system(), &fakeDocker{}, "nope", TargetOptions{Policy: PolicySource{Path: "/nonexistent"}})
		if c := check(t, r, "container"); c.Status != Error || r.ExitCode != 2 {
			t.Errorf("container %s (%s), exit %d; want error, exit 2", c.Status, c.Detail, r.ExitCode)
		}
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestDockerSpecMatchesLauncher: the spec doctor builds from docker
// inspect plans like the one gpurun run builds from the same docker run
// arguments — one decision for one container.
func TestDockerSpecMatchesLauncher(t *testing.T) {
	tests := []struct {
		name string
		args []string
		hc   container.HostConfig
		env  []string
	}{
		{"--gpus all --memory 2g", []string{"--gpus", "all", "--memory", "2g", "img"},
			container.HostConfig{ShmSize: policy.EngineDefaultShm, Resources: container.Resources{Memory: 2 * policy.GiB, DeviceRequests: []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}}}}}, nil},
		{"env, --shm-size 2g", []string{"-e", "NVIDIA_VISIBLE_DEVICES=0,1", "--shm-size", "2g", "img"},
			container.HostConfig{ShmSize: 2 * policy.GiB}, []string{"NVIDIA_VISIBLE_DEVICES=0,1"}},
		{"--ipc host", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all", "--ipc", "host", "img"},
			container.HostConfig{IpcMode: "host"}, []string{"NVIDIA_VISIBLE_DEVICES=all"}},
		{"--device nvidia0", []string{"--device", "/dev/nvidia0", "img"},
			container.HostConfig{ShmSize: policy.EngineDefaultShm, Resources: container.Resources{Devices: []container.DeviceMapping{{PathOnHost: "/dev/nvidia0", PathInContainer: "/dev/nvidia0", CgroupPermissions: "rwm"}}}}, nil},
		{"--tmpfs /dev/shm", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all", "--tmpfs", "/dev/shm:size=1g", "img"},
			container.HostConfig{ShmSize: policy.EngineDefaultShm, Tmpfs: map[string]string{"/dev/shm": "size=1g"}}, []string{"NVIDIA_VISIBLE_DEVICES=all"}},
		{"no GPU", []string{"img"}, container.HostConfig{ShmSize: policy.EngineDefaultShm}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, err := runargs.Parse(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			env, err := run.Environment(func(string) (string, bool) { return "", false }, os.ReadFile)
			if err != nil {
				t.Fatal(err)
			}
			ls, err := translate.FromRun(run, env, policy.EngineDefaultShm)
			if err != nil {
				t.Fatal(err)
			}
			c := inspected("x", 1, tt.hc, tt.env...)
			ds, err := translate.FromInspect(c, "/var/lib/docker", nil)
			if err != nil {
				t.Fatal(err)
			}
			in := func(c *oci.Container) oci.Plan {
				return oci.Decide(oci.Input{Container: c, Policy: policy.Default(), Facts: oci.Facts{HostMemory: fakeHostMemory}})
			}
			want, got := in(ls), in(ds)
			if !slices.Equal(got.Evidence, want.Evidence) {
				t.Errorf("doctor names the GPU evidence %q, gpurun run %q", got.Evidence, want.Evidence)
			}
			// The size of a plan that acts must agree; a plan that leaves
			// /dev/shm alone reports its current size, which inspect knows
			// better than a command line (a --tmpfs size).
			if got.Action != want.Action || (want.Action != oci.ActionNone && got.Size != want.Size) || got.GPU != want.GPU || got.GPUs != want.GPUs || got.Shm.Kind != want.Shm.Kind {
				t.Errorf("doctor's spec plans %s %d gpu %v/%d %s; gpurun run's %s %d gpu %v/%d %s", got.Action, got.Size, got.GPU, got.GPUs, got.Shm.Kind, want.Action, want.Size, want.GPU, want.GPUs, want.Shm.Kind)
			}
		})
	}
}

func TestCRIContainer(t *testing.T) {
	pol := policy.Default()
	target, _ := pol.Target(policy.Request{HostMemory: fakeHostMemory})
	statusOf := func(t *testing.T, fixture string, pid int, state runtimeapi.ContainerState) *runtimeapi.ContainerStatusResponse {
		cfg, err := specfile.Load(fixtures + "/" + fixture)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := json.Marshal(map[string]any{"pid": pid, "sandboxID": cfg.Spec.Annotations[oci.AnnotationCRISandboxID], "runtimeSpec": cfg.Spec})
		return &runtimeapi.ContainerStatusResponse{
			Status: &runtimeapi.ContainerStatus{Id: strings.Repeat("c", 64), Metadata: &runtimeapi.ContainerMetadata{Name: "trainer"}, State: state, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
			Info:   map[string]string{"info": string(info)},
		}
	}
	sandboxShm := func(t *testing.T, fixture string) string {
		cfg, err := specfile.Load(fixtures + "/" + fixture)
		if err != nil {
			t.Fatal(err)
		}
		return oci.ClassifyShm(cfg.Spec, 0).Source
	}
	tests := []struct {
		name       string
		fixture    string
		pid        int
		state      runtimeapi.ContainerState
		procShm    bool // statfs answers through /proc/<pid>/root
		hostShm    bool // statfs answers at the sandbox's host path
		want       map[string]Status
		wantExit   int
		wantKind   string
		wantAction string
	}{
		{"GPU container of a pod, 64MiB", "containerd-1.6-cri-container-env-nvidia-all.json", 777, runtimeapi.ContainerState_CONTAINER_RUNNING, true, false,
			map[string]Status{"shm.size": Problem}, 1, "engine-host-tmpfs", "remount"},
		{"exited: the pod's tmpfs read on the host", "containerd-1.6-cri-container-env-nvidia-all.json", 0, runtimeapi.ContainerState_CONTAINER_EXITED, false, true,
			map[string]Status{"shm.size": Problem}, 1, "engine-host-tmpfs", "remount"},
		{"hostIPC pod", "containerd-1.6-cri-hostipc-container.json", 778, runtimeapi.ContainerState_CONTAINER_RUNNING, true, false,
			map[string]Status{"shm.size": OK}, 0, "host", "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			fs := FS{Tmpfs: true, Size: policy.EngineDefaultShm}
			if tt.wantKind == "host" {
				fs.Size = fakeHostMemory / 2
			}
			if tt.procShm {
				f.fs["/proc/"+itoa(tt.pid)+"/root/dev/shm"] = fs
			}
			if tt.hostShm {
				f.fs[sandboxShm(t, tt.fixture)] = fs
			}
			cri := &fakeCRI{status: map[string]*runtimeapi.ContainerStatusResponse{"c1": statusOf(t, tt.fixture, tt.pid, tt.state)}}
			r := CRIContainer(context.Background(), f.system(), cri, "c1", TargetOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
			for name, want := range tt.want {
				if c := check(t, r, name); c.Status != want {
					t.Errorf("%s: %s (%s), want %s", name, c.Status, c.Detail, want)
				}
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit %d, want %d\n%s", r.ExitCode, tt.wantExit, text(r))
			}
			if k := check(t, r, "shm.mount").Data["kind"]; k != tt.wantKind {
				t.Errorf("kind %v, want %s", k, tt.wantKind)
			}
			plan := check(t, r, "plan")
			if plan.Data["action"] != tt.wantAction {
				t.Errorf("plan %v, want %s", plan.Data["action"], tt.wantAction)
			}
			if tt.wantAction == "remount" && plan.Data["size_bytes"] != target {
				t.Errorf("plan size %v, want %d", plan.Data["size_bytes"], target)
			}
			if c := check(t, r, "shm.size"); c.Status == Problem && !strings.Contains(c.Fix, "gpurun resize --cri c1 "+policy.FormatDocker(target)) {
				t.Errorf("fix %q", c.Fix)
			}
		})
	}
	t.Run("unknown container", func(t *testing.T) {
		r := CRIContainer(context.Background(), hostFake(t).system(), &fakeCRI{}, "nope", TargetOptions{Policy: PolicySource{Path: "/nonexistent"}})
		if c := check(t, r, "container"); c.Status != Error || r.ExitCode != 2 {
			t.Errorf("container %s (%s), exit %d", c.Status, c.Detail, r.ExitCode)
		}
	})
	t.Run("no runtime spec in the verbose status", func(t *testing.T) {
		cri := &fakeCRI{status: map[string]*runtimeapi.ContainerStatusResponse{"c1": {Status: &runtimeapi.ContainerStatus{Id: "c1"}, Info: map[string]string{}}}}
		r := CRIContainer(context.Background(), hostFake(t).system(), cri, "c1", TargetOptions{Policy: PolicySource{Path: "/nonexistent"}})
		if c := check(t, r, "container"); c.Status != Error || r.ExitCode != 2 {
			t.Errorf("container %s (%s), exit %d", c.Status, c.Detail, r.ExitCode)
		}
	})
}
