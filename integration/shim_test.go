//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// shimConfig writes a gpurun policy for gpurun-runtime: the default policy
// but for its log file, and extra. No engine_roots: the private engines
// keep their dirs under /tmp, which the defaults do not list, and the shim
// learns them from the engine (the bundle path, dockerd's runtimeArgs).
func shimConfig(t *testing.T, extra string) (config, logFile string) {
	t.Helper()
	dir := t.TempDir()
	config = filepath.Join(dir, "config.toml")
	logFile = filepath.Join(dir, "gpurun.log")
	body := "log_file = \"" + logFile + "\"\n" + extra
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return config, logFile
}

// hostTarget is the default policy's size for a container without a
// memory limit on this host, which the shim computes from /proc/meminfo.
func hostTarget(t *testing.T) int64 {
	t.Helper()
	return policyHostTarget(t, policy.Default())
}

// policyHostTarget is pol's size in bytes for a container without a memory
// limit on this host.
func policyHostTarget(t *testing.T, pol *policy.Policy) int64 {
	t.Helper()
	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := pol.Target(policy.Request{HostMemory: mem})
	return n
}

// logLines returns the shim's JSON log records.
func logLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("shim log: %v", err)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestShimDocker(t *testing.T) {
	config, logFile := shimConfig(t, "")
	d := harness.StartDockerd(t, harness.DockerdOptions{Env: []string{"GPURUN_CONFIG=" + config}})
	registerDocker(t, d, bin(t, "gpurun-runtime"), config, false)
	img := harness.BusyboxImage(t, d)
	gpu := harness.MknodGPU(t, t.TempDir())
	want := hostTarget(t) / 1024
	docker := func(t *testing.T, args ...string) string {
		t.Helper()
		out, stderr, err := d.Docker(args...)
		if err != nil {
			t.Fatalf("docker %q: %v\n%s\nshim log: %s", args, err, stderr, readFile(logFile))
		}
		return out
	}
	tests := []struct {
		name string
		args []string
		kib  int64
	}{
		{"GPU by env", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}, want},
		{"GPU by device", []string{"--device", gpu + ":/dev/nvidia0"}, want},
		{"non-GPU", nil, 65536},
		{"explicit --shm-size", []string{"--shm-size", "256m", "-e", "NVIDIA_VISIBLE_DEVICES=all"}, 262144},
		{"memory limit", []string{"--memory", "2g", "-e", "NVIDIA_VISIBLE_DEVICES=all"}, policy.GiB / 1024},
		{"ipc host", []string{"--ipc", "host", "-e", "NVIDIA_VISIBLE_DEVICES=all"}, hostShmKiB(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--rm", "--runtime", "gpurun", "--network", "none"}, tt.args...)
			out := docker(t, append(args, img, "df", "-k", "/dev/shm")...)
			if got := dfKiB(t, out); got != tt.kib {
				t.Errorf("/dev/shm %d KiB, want %d", got, tt.kib)
			}
		})
	}
	t.Run("shareable donor and container: peer share one grown tmpfs", func(t *testing.T) {
		docker(t, "run", "-d", "--name", "donor", "--runtime", "gpurun", "--network", "none", "--ipc", "shareable", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "sleep", "600")
		peer := docker(t, "run", "--rm", "--runtime", "gpurun", "--network", "none", "--ipc", "container:donor", img, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		donor := docker(t, "exec", "donor", "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		if dfKiB(t, donor) != want || dfKiB(t, peer) != want {
			t.Errorf("donor %d KiB, peer %d KiB, want %d", dfKiB(t, donor), dfKiB(t, peer), want)
		}
		if lastLine(donor) != lastLine(peer) {
			t.Errorf("st_dev differs: donor %s, peer %s", lastLine(donor), lastLine(peer))
		}
		docker(t, "rm", "-f", "donor")
	})
	t.Run("host /dev/shm never resized", func(t *testing.T) {
		before := hostShmKiB(t)
		docker(t, "run", "--rm", "--runtime", "gpurun", "--network", "none", "--ipc", "host", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "true")
		if after := hostShmKiB(t); after != before {
			t.Errorf("host /dev/shm %d -> %d KiB", before, after)
		}
	})
	t.Run("the log says what was done", func(t *testing.T) {
		var acted bool
		for _, r := range logLines(t, logFile) {
			if r["msg"] == "planned /dev/shm" && r["action"] == "set-size" && r["gpu"] == true {
				acted = true
			}
		}
		if !acted {
			t.Errorf("no set-size record in %s", readFile(logFile))
		}
	})
}

// TestShimDockerFailures: a panic while planning (in a gpurun-runtime built
// with the test-only tag gpurunfault) still starts the container (fail-open)
// and is logged; with fail_closed the create fails clearly.
func TestShimDockerFailures(t *testing.T) {
	rt := bin(t, "gpurun-runtime-fault")
	for _, tt := range []struct {
		name       string
		extra      string
		wantFail   bool
		wantKiB    int64
		wantStderr string
	}{
		{"fail-open", "", false, 65536, ""},
		{"fail_closed", "fail_closed = true\n", true, 0, "gpurun-runtime: /dev/shm of container "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config, logFile := shimConfig(t, tt.extra)
			d := harness.StartDockerd(t, harness.DockerdOptions{Env: []string{"GPURUN_CONFIG=" + config}})
			registerDocker(t, d, rt, config, false)
			img := harness.BusyboxImage(t, d)
			out, stderr, err := d.Docker("run", "--rm", "--runtime", "gpurun", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "df", "-k", "/dev/shm")
			if tt.wantFail {
				if err == nil || !strings.Contains(stderr, tt.wantStderr) || !strings.Contains(stderr, "panic: injected fault") {
					t.Errorf("err %v, stderr %q; want a failure naming %q and the panic", err, stderr, tt.wantStderr)
				}
			} else {
				if err != nil {
					t.Fatalf("container did not start: %v %s", err, stderr)
				}
				if got := dfKiB(t, out); got != tt.wantKiB {
					t.Errorf("/dev/shm %d KiB, want %d", got, tt.wantKiB)
				}
			}
			if log := readFile(logFile); !strings.Contains(log, "panic: injected fault") {
				t.Errorf("log lacks the panic: %s", log)
			}
		})
	}
}

func TestShimContainerdCRI(t *testing.T) {
	config, logFile := shimConfig(t, "")
	rt := bin(t, "gpurun-runtime")
	c := harness.StartContainerd(t, harness.ContainerdOptions{
		Runtimes:       map[string]string{"gpurun": rt},
		DefaultRuntime: "gpurun",
		Env:            []string{"GPURUN_CONFIG=" + config},
	})
	want := hostTarget(t) / 1024
	exec := func(t *testing.T, id string, cmd ...string) string {
		t.Helper()
		out, err := c.Exec(id, cmd...)
		if err != nil {
			t.Fatalf("exec %q: %v\nshim log: %s", cmd, err, readFile(logFile))
		}
		return out
	}
	shmOf := func(t *testing.T, id string) (int64, string) {
		out := exec(t, id, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		return dfKiB(t, out), lastLine(out)
	}
	t.Run("GPU pod: one grown tmpfs for every container", func(t *testing.T) {
		pod := c.RunPod(harness.PodOptions{Name: "gpu"})
		gpuCtr := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
		c.StartContainer(gpuCtr)
		side := c.CreateContainer(pod, harness.ContainerOptions{Name: "sidecar"})
		c.StartContainer(side)
		gSize, gDev := shmOf(t, gpuCtr)
		sSize, sDev := shmOf(t, side)
		if gSize != want || sSize != want {
			t.Errorf("GPU container %d KiB, sidecar %d KiB, want %d", gSize, sSize, want)
		}
		if gDev != sDev {
			t.Errorf("st_dev differs: %s vs %s (the pod's tmpfs was split)", gDev, sDev)
		}
		if host, err := sysinfo.TmpfsSize(c.SandboxShm(pod)); err != nil || host/1024 != want {
			t.Errorf("host side %s: %d, %v", c.SandboxShm(pod), host, err)
		}
	})
	t.Run("non-GPU pod keeps 64 MiB", func(t *testing.T) {
		pod := c.RunPod(harness.PodOptions{Name: "plain"})
		ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "app"})
		c.StartContainer(ctr)
		if got, _ := shmOf(t, ctr); got != 65536 {
			t.Errorf("/dev/shm %d KiB, want 65536", got)
		}
	})
	t.Run("hostIPC pod is untouched", func(t *testing.T) {
		before := hostShmKiB(t)
		pod := c.RunPod(harness.PodOptions{Name: "hostipc", HostIPC: true})
		ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
		c.StartContainer(ctr)
		if got, _ := shmOf(t, ctr); got != before {
			t.Errorf("/dev/shm %d KiB, want the host's %d", got, before)
		}
		if after := hostShmKiB(t); after != before {
			t.Errorf("host /dev/shm %d -> %d KiB", before, after)
		}
	})
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
