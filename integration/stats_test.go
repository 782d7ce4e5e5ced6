//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
)

// page is the slack allowed between bytes written and bytes a tmpfs reports.
const page = 4096

// statsRun runs `gpurun stats --json` with the given engine flags and a
// peaks file of the test's, and returns the containers.
type statsRun struct {
	args   []string
	peaks  string
	config string
}

func newStatsRun(t *testing.T, engineArgs ...string) *statsRun {
	dir := t.TempDir()
	return &statsRun{args: engineArgs, peaks: filepath.Join(dir, "peaks.json"), config: noLogConfig(t)}
}

// noLogConfig writes a policy file of the defaults that logs nowhere, and
// returns its path.
func noLogConfig(t *testing.T) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(config, []byte("log_file = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}

// dockerRun starts a detached container name (without a network) on d and
// removes it at the end of the test; it returns its id.
func dockerRun(t *testing.T, d *harness.Dockerd, name string, args ...string) string {
	t.Helper()
	full := append([]string{"run", "-d", "--name", name, "--network", "none"}, args...)
	out, stderr, err := d.Docker(full...)
	if err != nil {
		t.Fatalf("docker run %s: %v\n%s", name, err, stderr)
	}
	t.Cleanup(func() { _, _, _ = d.Docker("rm", "-f", name) })
	return strings.TrimSpace(out)
}

func (s *statsRun) collect(t *testing.T) []shmstats.Container {
	t.Helper()
	args := append([]string{"stats", "--json", "--peaks-file", s.peaks}, s.args...)
	cmd := exec.Command(bin(t, "gpurun"), args...)
	cmd.Env = append(cmd.Environ(), "GPURUN_CONFIG="+s.config)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("gpurun %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	var cs []shmstats.Container
	if err := json.Unmarshal(out, &cs); err != nil {
		t.Fatalf("gpurun stats --json: %v\n%s", err, out)
	}
	return cs
}

// withArgs returns the run with more arguments (a filter).
func (s *statsRun) withArgs(args ...string) *statsRun {
	c := *s
	c.args = append(slices.Clip(s.args), args...)
	return &c
}

// output runs `gpurun stats` (the table, unless the run's arguments say
// --json) and returns its output, for the log (docs/observe.md quotes it).
func (s *statsRun) output(t *testing.T) string {
	t.Helper()
	args := append([]string{"stats", "--peaks-file", s.peaks}, s.args...)
	cmd := exec.Command(bin(t, "gpurun"), args...)
	cmd.Env = append(cmd.Environ(), "GPURUN_CONFIG="+s.config)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpurun %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// find returns the container with id, or nil.
func find(cs []shmstats.Container, id string) *shmstats.Container {
	for i := range cs {
		if cs[i].ID == id {
			return &cs[i]
		}
	}
	return nil
}

func near(got, want int64) bool { return got >= want-page && got <= want+page }

// writeMiB is a shell command that writes n MiB into /dev/shm/name.
func writeMiB(name string, n int) string {
	return fmt.Sprintf("dd if=/dev/zero of=/dev/shm/%s bs=1048576 count=%d 2>/dev/null", name, n)
}

func TestStatsDocker(t *testing.T) {
	e := newRunEnv(t)
	s := newStatsRun(t, "--docker-host", e.d.Host, "--containerd-state", filepath.Join(e.d.Dir, "ctd", "state"),
		"--podman-root", filepath.Join(t.TempDir(), "no-podman"))
	run := func(t *testing.T, name string, args ...string) string { return dockerRun(t, e.d, name, args...) }
	sh := func(cmd string) []string { return []string{e.img, "sh", "-c", cmd + " && exec sleep 3600"} }
	// Each container writes first, then sleeps; a docker exec true after
	// the start makes sure the write is done: the shell runs it before sleep.
	plain := run(t, "plain", sh(writeMiB("a", 3))...)
	gpu := run(t, "gpu", append([]string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}, sh(writeMiB("g", 5))...)...)
	donor := run(t, "donor", append([]string{"--ipc", "shareable"}, sh(writeMiB("d", 2))...)...)
	peer := run(t, "peer", append([]string{"--ipc", "container:donor"}, sh(writeMiB("p", 1))...)...)
	own := run(t, "owntmpfs", append([]string{"--tmpfs", "/dev/shm:size=100m"}, sh(writeMiB("o", 4))...)...)
	// held keeps one file open (not orphaned) and leaves another closed
	// (orphaned: no process has it open or mapped).
	held := run(t, "held", e.img, "sh", "-c", writeMiB("held", 2)+" && "+writeMiB("left", 1)+" && exec sleep 3600 3</dev/shm/held")
	hostipc := run(t, "hostipc", "--ipc", "host", e.img, "sleep", "3600")
	waitWritten(t, e.d, map[string]string{"plain": "a", "gpu": "g", "donor": "d", "peer": "p", "owntmpfs": "o", "held": "left"})

	cs := s.collect(t)
	t.Logf("gpurun stats:\n%s", s.output(t))
	t.Logf("gpurun stats --json --container gpu:\n%s", s.withArgs("--json", "--container", "gpu").output(t))
	get := func(id string) *shmstats.Container {
		t.Helper()
		c := find(cs, id)
		if c == nil {
			t.Fatalf("container %s not in gpurun stats: %+v", id, cs)
		}
		return c
	}
	tests := []struct {
		name        string
		id          string
		used, size  int64
		kind        string
		gpu         bool
		sharedWith  []string
		orphaned    int64
		wantEngine  string
		wantNameTag string
	}{
		{"plain", plain, 3 << 20, 64 << 20, "private-tmpfs", false, nil, 3 << 20, "docker", "plain"},
		{"gpu", gpu, 5 << 20, 64 << 20, "private-tmpfs", true, nil, 5 << 20, "docker", "gpu"},
		{"donor", donor, 3 << 20, 64 << 20, "engine-host-tmpfs", false, []string{peer}, 3 << 20, "docker", "donor"},
		{"peer", peer, 3 << 20, 64 << 20, "engine-host-tmpfs", false, []string{donor}, 3 << 20, "docker", "peer"},
		{"own tmpfs", own, 4 << 20, 100 << 20, "user-mount", false, nil, 4 << 20, "docker", "owntmpfs"},
		{"held file", held, 3 << 20, 64 << 20, "private-tmpfs", false, nil, 1 << 20, "docker", "held"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := get(tc.id)
			if c.Engine != tc.wantEngine || c.Name != tc.wantNameTag {
				t.Errorf("engine %q name %q, want %q %q", c.Engine, c.Name, tc.wantEngine, tc.wantNameTag)
			}
			if !near(c.Shm.Used, tc.used) || c.Shm.Size != tc.size {
				t.Errorf("used %d size %d, want %d (± a page) and %d", c.Shm.Used, c.Shm.Size, tc.used, tc.size)
			}
			if c.Shm.Peak < c.Shm.Used {
				t.Errorf("peak %d below used %d", c.Shm.Peak, c.Shm.Used)
			}
			if c.Shm.Kind != tc.kind || !c.Shm.Tmpfs || c.Shm.HostIPC {
				t.Errorf("kind %q tmpfs %v host %v, want %q, a tmpfs, not the host's", c.Shm.Kind, c.Shm.Tmpfs, c.Shm.HostIPC, tc.kind)
			}
			if c.GPU != tc.gpu {
				t.Errorf("gpu %v, want %v", c.GPU, tc.gpu)
			}
			if !slices.Equal(c.SharedWith, tc.sharedWith) {
				t.Errorf("shared with %v, want %v", c.SharedWith, tc.sharedWith)
			}
			if !near(c.Shm.Orphaned, tc.orphaned) {
				t.Errorf("orphaned %d (%v), want %d ± a page", c.Shm.Orphaned, c.Shm.OrphanedFiles, tc.orphaned)
			}
			if c.Decision.Action == "" || c.Decision.Reason == "" {
				t.Errorf("no decision: %+v", c.Decision)
			}
		})
	}
	t.Run("the GPU container's decision is gpurun's and suggests nothing below its peak", func(t *testing.T) {
		c := get(gpu)
		if c.Decision.Action != "set-size" || c.Decision.Target < 1<<30 || c.Decision.InEffect {
			t.Errorf("decision %+v: want set-size to at least the 1 GiB minimum, not in effect (plain runc did not size it)", c.Decision)
		}
	})
	t.Run("an IPC pair shares one device", func(t *testing.T) {
		if d, p := get(donor), get(peer); d.Shm.Device != p.Shm.Device || d.Shm.Source == "" {
			t.Errorf("donor %q (%s), peer %q: want one tmpfs with its host path", d.Shm.Device, d.Shm.Source, p.Shm.Device)
		}
	})
	t.Run("--ipc host is the host's /dev/shm", func(t *testing.T) {
		c := get(hostipc)
		if !c.Shm.HostIPC || c.Shm.Kind != shmstats.KindHost || len(c.SharedWith) != 0 || c.Suggestion != nil {
			t.Errorf("host IPC container: %+v", c.Shm)
		}
	})
	t.Run("the peak survives the data being deleted", func(t *testing.T) {
		if _, stderr, err := e.d.Docker("exec", "plain", "rm", "/dev/shm/a"); err != nil {
			t.Fatalf("rm: %v\n%s", err, stderr)
		}
		c := find(s.collect(t), plain)
		if c == nil || c.Shm.Used > page || !near(c.Shm.Peak, 3<<20) {
			t.Errorf("after rm: %+v, want used 0 and peak 3 MiB", c)
		}
	})
	t.Run("removed containers vanish", func(t *testing.T) {
		if _, stderr, err := e.d.Docker("rm", "-f", "plain", "peer"); err != nil {
			t.Fatalf("docker rm: %v\n%s", err, stderr)
		}
		cs := s.collect(t)
		if find(cs, plain) != nil || find(cs, peer) != nil {
			t.Errorf("removed containers still listed: %+v", cs)
		}
		if d := find(cs, donor); d == nil || len(d.SharedWith) != 0 {
			t.Errorf("donor after its peer left: %+v", d)
		}
	})
	t.Run("a suggestion for a container near its ceiling", func(t *testing.T) {
		run(t, "full", sh(writeMiB("f", 60))...)
		waitWritten(t, e.d, map[string]string{"full": "f"})
		c := find(s.collect(t), idOf(t, e.d, "full"))
		if c == nil || c.Suggestion == nil {
			t.Fatalf("no suggestion for 60 of 64 MiB: %+v", c)
		}
		if c.Suggestion.Size < c.Shm.Peak || !strings.Contains(strings.Join(c.Suggestion.Settings, "\n"), "--shm-size=") {
			t.Errorf("suggestion %+v for peak %d", c.Suggestion, c.Shm.Peak)
		}
		t.Logf("gpurun stats --container full:\n%s", s.withArgs("--container", "full").output(t))
	})
}

// idOf returns a Docker container's full id.
func idOf(t *testing.T, d *harness.Dockerd, name string) string {
	t.Helper()
	out, stderr, err := d.Docker("inspect", "-f", "{{.Id}}", name)
	if err != nil {
		t.Fatalf("docker inspect %s: %v\n%s", name, err, stderr)
	}
	return strings.TrimSpace(out)
}

// waitWritten waits until each container's /dev/shm/<file> is complete:
// the container's shell wrote it before it went to sleep.
func waitWritten(t *testing.T, d *harness.Dockerd, files map[string]string) {
	t.Helper()
	for name := range files {
		// The writer execs sleep when done; wait for that.
		script := "for i in $(seq 1 100); do [ \"$(cat /proc/1/comm)\" = sleep ] && exit 0; sleep 0.1; done; exit 1"
		if _, stderr, err := d.Docker("exec", name, "sh", "-c", script); err != nil {
			t.Fatalf("container %s did not finish writing: %v\n%s", name, err, stderr)
		}
	}
}

func TestStatsCRI(t *testing.T) { onEachContainerd(t, testStatsCRI) }

// onEachContainerd runs test on a private containerd 1.6 (Debian's) and
// 2.x, each with its CRI plugin.
func onEachContainerd(t *testing.T, test func(*testing.T, *harness.Containerd)) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *harness.Containerd
	}{
		{"containerd 1.6", func(t *testing.T) *harness.Containerd { return harness.StartContainerd(t, harness.ContainerdOptions{}) }},
		{"containerd 2.x", func(t *testing.T) *harness.Containerd {
			return harness.StartContainerd2(t, harness.Containerd2Options{}).Containerd
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { test(t, tc.start(t)) })
	}
}

// criOnly are gpurun stats' engine arguments for containerd c alone.
func criOnly(t *testing.T, c *harness.Containerd) []string {
	return []string{"--docker-host", "none", "--containerd-state", c.StateDir, "--podman-root", filepath.Join(t.TempDir(), "no-podman")}
}

// writingPod runs the CRI pod ml/job on c: a GPU container trainer that
// writes 6 MiB to the pod's /dev/shm and a sidecar that writes 2 MiB. It
// returns the pod's and their ids once both wrote.
func writingPod(t *testing.T, c *harness.Containerd) (pod, trainer, side string) {
	t.Helper()
	pod = c.RunPod(harness.PodOptions{Name: "job", Namespace: "ml"})
	trainer = c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
	c.StartContainer(trainer)
	side = c.CreateContainer(pod, harness.ContainerOptions{Name: "sidecar"})
	c.StartContainer(side)
	for id, cmd := range map[string]string{trainer: writeMiB("t", 6), side: writeMiB("s", 2)} {
		if out, err := c.Exec(id, "sh", "-c", cmd); err != nil {
			t.Fatalf("write in %s: %v\n%s", id, err, out)
		}
	}
	return pod, trainer, side
}

// testStatsCRI checks a CRI pod of two containers on containerd c.
func testStatsCRI(t *testing.T, c *harness.Containerd) {
	s := newStatsRun(t, criOnly(t, c)...)
	pod, trainer, side := writingPod(t, c)
	cs := s.collect(t)
	for _, tc := range []struct {
		id, name string
		gpu      bool
		other    string
	}{{trainer, "trainer", true, side}, {side, "sidecar", false, trainer}} {
		t.Run(tc.name, func(t *testing.T) {
			got := find(cs, tc.id)
			if got == nil {
				t.Fatalf("not in gpurun stats: %+v", cs)
			}
			if got.Engine != "containerd" || got.Namespace != harness.CRINamespace || got.Pod == nil ||
				got.Pod.Name != "job" || got.Pod.Namespace != "ml" || got.Pod.Container != tc.name || got.Pod.SandboxID != pod || got.Pod.UID == "" {
				t.Errorf("identity %s %s %+v", got.Engine, got.Namespace, got.Pod)
			}
			if !near(got.Shm.Used, 8<<20) || got.Shm.Size != 64<<20 || got.Shm.Kind != "engine-host-tmpfs" || got.Shm.Source != c.SandboxShm(pod) {
				t.Errorf("shm %+v: want 8 MiB of the pod's 64 MiB tmpfs %s", got.Shm, c.SandboxShm(pod))
			}
			if !slices.Equal(got.SharedWith, []string{tc.other}) {
				t.Errorf("shared with %v, want [%s] (the pause container is not listed)", got.SharedWith, tc.other)
			}
			if got.GPU != tc.gpu || !near(got.Shm.Orphaned, 8<<20) {
				t.Errorf("gpu %v orphaned %d, want %v and 8 MiB", got.GPU, got.Shm.Orphaned, tc.gpu)
			}
		})
	}
	t.Run("the pod's peak survives a deletion and is one for the pod", func(t *testing.T) {
		if out, err := c.Exec(trainer, "rm", "/dev/shm/t"); err != nil {
			t.Fatalf("rm: %v\n%s", err, out)
		}
		cs := s.collect(t)
		for _, id := range []string{trainer, side} {
			got := find(cs, id)
			if got == nil || !near(got.Shm.Used, 2<<20) || !near(got.Shm.Peak, 8<<20) {
				t.Errorf("%s after rm: %+v, want used 2 MiB, peak 8 MiB", id, got)
			}
		}
	})
	t.Run("--pod and --namespace filter", func(t *testing.T) {
		cs := s.withArgs("--namespace", "ml", "--container", "sidecar").collect(t)
		if len(cs) != 1 || cs[0].ID != side {
			t.Errorf("filtered: %+v", cs)
		}
		if cs := s.withArgs("--pod", "other").collect(t); len(cs) != 0 {
			t.Errorf("--pod other: %+v", cs)
		}
	})
}

func TestStatsPodman(t *testing.T) {
	p := harness.NewPodman(t)
	img := p.BusyboxImage()
	s := newStatsRun(t, "--docker-host", "none", "--containerd-state", filepath.Join(t.TempDir(), "no-containerd"),
		"--podman-root", p.Root, "--podman-root", p.RunRoot)
	out, _, err := p.Podman("run", "-d", "--name", "pm", "--network", "none", "--cgroup-parent", p.CgroupParent,
		img, "sh", "-c", writeMiB("x", 3)+" && exec sleep 3600")
	if err != nil {
		t.Fatalf("podman run: %v", err)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { _, _, _ = p.Podman("rm", "-f", "-t", "0", id) })
	var got *shmstats.Container
	for range 50 {
		if got = find(s.collect(t), id); got != nil && got.Shm.Used >= 3<<20 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the container is still writing
	}
	if got == nil {
		t.Fatalf("podman container %s not in gpurun stats", id)
	}
	if got.Engine != "podman" || got.Name != "pm" || !near(got.Shm.Used, 3<<20) || got.Shm.Size != policy.PodmanDefaultShm || !got.Shm.Tmpfs {
		t.Errorf("podman container: %+v", got)
	}
}
