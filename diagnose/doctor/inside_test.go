package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/policy"
)

// TestInsideCaptures runs the in-container checks over what real Docker
// containers showed (testdata/containers, see capture.sh), with and
// without GPU evidence.
func TestInsideCaptures(t *testing.T) {
	gpu := map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}
	pol := policy.Default()
	target := func(limit int64) int64 {
		n, _ := pol.Target(policy.Request{MemoryLimit: limit, HostMemory: fakeHostMemory})
		return n
	}
	tests := []struct {
		name    string
		capture string
		env     map[string]string
		hostIPC bool
		// want: status per check name ("-" = the check must be absent).
		want     map[string]Status
		wantExit int
		// wantTarget is the shm.size target in bytes (0 = not checked).
		wantTarget int64
		wantKind   string
		wantAction string
	}{
		{"default 64MiB, GPU: the field failure", "docker-default", gpu, false,
			map[string]Status{"shm.mount": OK, "shm.size": Problem, "shm.usage": OK, "nccl": OK}, 1, target(0), "private-tmpfs", "set-size"},
		{"default 64MiB, no GPU: left alone", "docker-default", nil, false,
			map[string]Status{"shm.mount": OK, "shm.size": OK}, 0, target(0), "private-tmpfs", "none"},
		{"--shm-size 2g, GPU: below the target, above the minimum", "docker-shm-size-2g", gpu, false,
			map[string]Status{"shm.size": Warn}, 0, target(0), "private-tmpfs", "none"},
		{"--memory 2g, GPU: the cgroup limit sets the target", "docker-memory-2g", gpu, false,
			map[string]Status{"shm.size": Problem, "memory": OK}, 1, target(2 * policy.GiB), "private-tmpfs", "set-size"},
		{"--ipc host, GPU: the host's /dev/shm", "docker-ipc-host", gpu, true,
			map[string]Status{"shm.mount": Warn, "shm.size": OK}, 0, 0, "host", "none"},
		{"--ipc host, no GPU", "docker-ipc-host", nil, true,
			map[string]Status{"shm.mount": OK, "shm.size": OK}, 0, 0, "host", "none"},
		{"--ipc none, GPU: nothing at /dev/shm", "docker-ipc-none", gpu, false,
			map[string]Status{"shm.mount": Problem, "shm.size": "-", "shm.usage": "-"}, 1, 0, "none", "none"},
		{"--ipc none, no GPU", "docker-ipc-none", nil, false,
			map[string]Status{"shm.mount": Warn, "shm.size": "-"}, 0, 0, "none", "none"},
		{"--tmpfs /dev/shm:size=1g, GPU: the user's, at the minimum", "docker-tmpfs-devshm", gpu, false,
			map[string]Status{"shm.mount": OK, "shm.size": Warn}, 0, target(0), "user-mount", "none"},
		{"--ipc shareable, GPU", "docker-ipc-shareable", gpu, false,
			map[string]Status{"shm.size": Problem}, 1, target(0), "private-tmpfs", "set-size"},
		{"--ipc container:donor, GPU", "docker-ipc-container", gpu, false,
			map[string]Status{"shm.size": Problem}, 1, target(0), "private-tmpfs", "set-size"},
		{"NCCL_SHM_DISABLE=1 is pointed out", "docker-shm-size-2g", map[string]string{"NVIDIA_VISIBLE_DEVICES": "0", "NCCL_SHM_DISABLE": "1", "NCCL_DEBUG": "INFO"}, false,
			map[string]Status{"nccl": Warn, "shm.size": Warn}, 0, target(0), "private-tmpfs", "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.loadCapture(tt.capture)
			ipc := containerIPCNS
			if tt.hostIPC {
				ipc = hostIPCNS
			}
			f.namespaces(containerPIDNS, ipc)
			for k, v := range tt.env {
				f.env[k] = v
			}
			sys := f.system()
			where := Detect(sys)
			if !where.Container {
				t.Fatalf("Detect: not a container: %v", where.Evidence)
			}
			r := Inside(context.Background(), sys, ContainerOptions{Policy: PolicySource{Path: f.root + "/etc/gpurun/config.toml"}, Where: where})
			for name, want := range tt.want {
				c, ok := r.Find(name)
				switch {
				case want == "-" && ok:
					t.Errorf("%s: present: %+v", name, c)
				case want != "-" && !ok:
					t.Errorf("%s: missing", name)
				case ok && c.Status != want:
					t.Errorf("%s: %s (%s), want %s", name, c.Status, c.Detail, want)
				}
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit %d, want %d\n%s", r.ExitCode, tt.wantExit, text(r))
			}
			if got := check(t, r, "shm.mount").Data["kind"]; got != tt.wantKind {
				t.Errorf("kind %v, want %s", got, tt.wantKind)
			}
			if tt.wantTarget != 0 {
				if got := check(t, r, "shm.size").Data["target_bytes"]; got != tt.wantTarget {
					t.Errorf("target %v, want %d", got, tt.wantTarget)
				}
			}
			plan := check(t, r, "plan")
			if plan.Data["action"] != tt.wantAction {
				t.Errorf("plan %v, want %s: %s", plan.Data["action"], tt.wantAction, plan.Detail)
			}
			if tt.wantAction == "set-size" && plan.Data["size_bytes"] != tt.wantTarget {
				t.Errorf("plan size %v, want the target %d", plan.Data["size_bytes"], tt.wantTarget)
			}
			if c := check(t, r, "shm.mount"); c.Status == Problem && c.Fix == "" {
				t.Error("a problem without a fix")
			}
			if c, ok := r.Find("shm.size"); ok && c.Status != OK {
				want := policy.FormatDocker(tt.wantTarget)
				ways := []string{"--shm-size=" + want, "shm_size:", "sizeLimit: ", "gpurun resize"}
				if tt.wantKind == "user-mount" {
					ways = []string{"--tmpfs /dev/shm:size=" + want, "sizeLimit: "}
				}
				for _, s := range ways {
					if !strings.Contains(c.Fix, s) {
						t.Errorf("fix lacks %q:\n%s", s, c.Fix)
					}
				}
			}
		})
	}
}

func text(r *Report) string {
	var b strings.Builder
	_ = r.WriteText(&b, false)
	return b.String()
}

// TestInsideMemoryLimit: the cgroup limit read from a capture reaches the
// memory check and caps the target.
func TestInsideMemoryLimit(t *testing.T) {
	f := newFake(t)
	f.loadCapture("docker-memory-2g")
	f.namespaces(containerPIDNS, containerIPCNS)
	f.env["NVIDIA_VISIBLE_DEVICES"] = "all"
	r := Inside(context.Background(), f.system(), ContainerOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
	if got := check(t, r, "memory").Data["limit_bytes"]; got != 2*policy.GiB {
		t.Errorf("limit %v, want 2GiB", got)
	}
	// A /dev/shm larger than the limit is pointed out.
	f.fs["/dev/shm"] = FS{Tmpfs: true, Size: 4 * policy.GiB}
	r = Inside(context.Background(), f.system(), ContainerOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
	if c := check(t, r, "memory"); c.Status != Warn {
		t.Errorf("memory: %s %s, want warn", c.Status, c.Detail)
	}
}

// TestInsideUsage: a nearly full /dev/shm is a problem even in a
// container the policy leaves alone; statfs failing is "could not check".
func TestInsideUsage(t *testing.T) {
	tests := []struct {
		name     string
		fs       *FS
		want     Status
		wantExit int
		// suggest is the size doctor suggests from the use measured (0:
		// none: the policy's size holds it, or it is not near the ceiling).
		suggest int64
	}{
		{"empty", &FS{Tmpfs: true, Size: 64 * policy.MiB}, OK, 0, 0},
		{"80% used", &FS{Tmpfs: true, Size: 100 * policy.MiB, Used: 80 * policy.MiB}, Warn, 0, 0},
		{"95% used", &FS{Tmpfs: true, Size: 64 * policy.MiB, Used: 61 * policy.MiB}, Problem, 1, 0},
		{"95% of 24GiB used: beyond the policy's size", &FS{Tmpfs: true, Size: 24 * policy.GiB, Used: 23 * policy.GiB}, Problem, 1, 35328 * policy.MiB},
		{"statfs fails", nil, "-", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.loadCapture("docker-default")
			f.namespaces(containerPIDNS, containerIPCNS)
			delete(f.fs, "/dev/shm")
			if tt.fs != nil {
				f.fs["/dev/shm"] = *tt.fs
			}
			r := Inside(context.Background(), f.system(), ContainerOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
			c, ok := r.Find("shm.usage")
			switch {
			case tt.want == "-" && ok:
				t.Errorf("usage present: %+v", c)
			case tt.want != "-" && (!ok || c.Status != tt.want):
				t.Errorf("usage %+v, want %s", c, tt.want)
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit %d, want %d\n%s", r.ExitCode, tt.wantExit, text(r))
			}
			if got, _ := c.Data["suggested_bytes"].(int64); got != tt.suggest {
				t.Errorf("suggested %d, want %d\n%s", got, tt.suggest, text(r))
			}
			if tt.suggest > 0 && !strings.Contains(c.Fix, policy.FormatDocker(tt.suggest)) {
				t.Errorf("the fix does not give the suggested size %s:\n%s", policy.FormatDocker(tt.suggest), c.Fix)
			}
		})
	}
}

// TestInsideGPUCount: device nodes and nvidia-smi count GPUs, which a
// per_gpu policy multiplies.
func TestInsideGPUCount(t *testing.T) {
	const policyText = "per_gpu = \"4g\"\n"
	tests := []struct {
		name    string
		devices []string
		env     string
		smi     string
		want    int
	}{
		{"two device nodes", []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}, "", "", 2},
		{"env all, nvidia-smi lists three", nil, "all", "GPU 0: A (UUID: x)\nGPU 1: A (UUID: y)\nGPU 2: A (UUID: z)\n", 3},
		{"env lists one", nil, "GPU-abc", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.loadCapture("docker-default")
			f.namespaces(containerPIDNS, containerIPCNS)
			f.write("/etc/gpurun/config.toml", policyText)
			for _, d := range tt.devices {
				f.write(d, "")
			}
			if tt.env != "" {
				f.env["NVIDIA_VISIBLE_DEVICES"] = tt.env
			}
			sys := f.system()
			if tt.smi != "" {
				sys.LookPath = func(string) (string, error) { return "/usr/bin/nvidia-smi", nil }
				sys.Output = func(_ context.Context, name string, args ...string) ([]byte, error) {
					if name != "/usr/bin/nvidia-smi" || strings.Join(args, " ") != "-L" {
						t.Errorf("ran %s %v", name, args)
					}
					return []byte(tt.smi), nil
				}
			}
			pol, err := policy.Parse("config.toml", []byte(policyText))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := pol.Target(policy.Request{HostMemory: fakeHostMemory, GPUs: tt.want})
			r := Inside(context.Background(), sys, ContainerOptions{Policy: PolicySource{Path: f.root + "/etc/gpurun/config.toml", Explicit: true}})
			if got := check(t, r, "gpu").Data["gpus"]; got != tt.want {
				t.Errorf("gpus %v, want %d: %s", got, tt.want, check(t, r, "gpu").Detail)
			}
			if got := check(t, r, "shm.size").Data["target_bytes"]; got != want {
				t.Errorf("target %v, want %d", got, want)
			}
		})
	}
}

// TestInsidePolicy: a policy that cannot be read is a problem naming the
// file and line; match = "all" makes a non-GPU container the policy's.
func TestInsidePolicy(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		want     Status
		wantSize Status
		wantIn   string
	}{
		{"unknown key", "size = \"50%\"\nshm = 3\n", Problem, OK, "config.toml:2:1"},
		{"bad value", "min = \"lots\"\n", Problem, OK, `key "min"`},
		{"match all", "match = \"all\"\n", OK, Problem, "match all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.loadCapture("docker-default")
			f.namespaces(containerPIDNS, containerIPCNS)
			f.write("/etc/gpurun/config.toml", tt.text)
			r := Inside(context.Background(), f.system(), ContainerOptions{Policy: PolicySource{Path: f.root + "/etc/gpurun/config.toml", Explicit: true}})
			c := check(t, r, "policy")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) {
				t.Errorf("policy %s %q, want %s containing %q", c.Status, c.Detail, tt.want, tt.wantIn)
			}
			if s := check(t, r, "shm.size"); s.Status != tt.wantSize {
				t.Errorf("shm.size %s, want %s", s.Status, tt.wantSize)
			}
		})
	}
}

// TestInsideProbe: --probe reports what the probe could allocate.
func TestInsideProbe(t *testing.T) {
	tests := []struct {
		name     string
		result   shmprobe.Result
		want     Status
		wantExit int
	}{
		{"allocated", shmprobe.Result{}, OK, 0},
		{"ENOSPC", shmprobe.Result{Allocated: 60 * policy.MiB, Failure: shmprobe.FailureENOSPC, Err: "fallocate: no space left on device"}, Problem, 1},
		{"cannot start", shmprobe.Result{Failure: shmprobe.FailureSetup, Err: "create a file in /dev/shm: read-only file system"}, Error, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.loadCapture("docker-shm-size-2g") // a size the policy does not call a problem
			f.namespaces(containerPIDNS, containerIPCNS)
			f.probe = tt.result
			r := Inside(context.Background(), f.system(), ContainerOptions{Policy: PolicySource{Path: f.root + "/none.toml"}, Probe: policy.GiB})
			if len(f.probed) != 1 || f.probed[0] != policy.GiB {
				t.Fatalf("probed %v, want one probe of 1GiB", f.probed)
			}
			c := check(t, r, "probe")
			if c.Status != tt.want || r.ExitCode != tt.wantExit {
				t.Errorf("probe %s (%s), exit %d; want %s, exit %d", c.Status, c.Detail, r.ExitCode, tt.want, tt.wantExit)
			}
			if c.Data["requested_bytes"] != policy.GiB {
				t.Errorf("requested %v", c.Data["requested_bytes"])
			}
		})
	}
}
