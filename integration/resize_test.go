//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// fill500MB writes 500 MB into /dev/shm, as a job that outgrew it would.
const fill500MB = "rm -f /dev/shm/fill; dd if=/dev/zero of=/dev/shm/fill bs=1000000 count=500 2>&1; s=$?; rm -f /dev/shm/fill; exit $s"

// resizeTo is a size that holds fill500MB, within the default policy max.
const resizeTo = "1g"

func TestResizeDocker(t *testing.T) {
	e := newRunEnv(t)
	want := mustSize(t, resizeTo)
	inspect := func(t *testing.T, name, format string) string {
		t.Helper()
		out, stderr, err := e.d.Docker("inspect", "-f", format, name)
		if err != nil {
			t.Fatalf("docker inspect %s: %v\n%s", name, err, stderr)
		}
		return strings.TrimSpace(out)
	}
	fill := func(t *testing.T, name string) error {
		t.Helper()
		out, stderr, err := e.d.Docker("exec", name, "sh", "-c", fill500MB)
		if err != nil {
			return fmt.Errorf("%v: %s%s", err, out, stderr)
		}
		return nil
	}
	shmKiB := func(t *testing.T, name string) int64 {
		t.Helper()
		out, stderr, err := e.d.Docker("exec", name, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatalf("df in %s: %v\n%s", name, err, stderr)
		}
		return dfKiB(t, out)
	}
	tests := []struct {
		name   string
		ipc    []string
		joiner bool // a second container joins its IPC namespace
	}{
		{name: "private IPC: remount in the container's mount namespace", ipc: []string{"--ipc", "private"}},
		{name: "shareable IPC: host-side remount seen by the joined container", ipc: []string{"--ipc", "shareable"}, joiner: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("resize%d", i)
			args := append([]string{"run", "-d", "--name", name, "--network", "none"}, tc.ipc...)
			if _, stderr, err := e.d.Docker(append(args, e.img, "sleep", "3600")...); err != nil {
				t.Fatalf("docker run: %v\n%s", err, stderr)
			}
			t.Cleanup(func() { _, _, _ = e.d.Docker("rm", "-f", name, name+"-joined") })
			if tc.joiner {
				if _, stderr, err := e.d.Docker("run", "-d", "--name", name+"-joined", "--network", "none", "--ipc", "container:"+name, e.img, "sleep", "3600"); err != nil {
					t.Fatalf("docker run joined: %v\n%s", err, stderr)
				}
			}
			started := inspect(t, name, "{{.State.StartedAt}}")
			shmRecord := inspect(t, name, "{{.HostConfig.ShmSize}}")
			if err := fill(t, name); err == nil {
				t.Fatal("500 MB fit into the default /dev/shm before the resize; the test proves nothing")
			}
			stdout, stderr, code := e.gpurun(t, "resize", name, resizeTo)
			if code != 0 {
				t.Fatalf("gpurun resize: exit %d\n%s%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, "HostConfig.ShmSize") {
				t.Errorf("resize output does not say Docker's record is unchanged:\n%s", stdout)
			}
			if err := fill(t, name); err != nil {
				t.Errorf("500 MB still does not fit after the resize: %v", err)
			}
			if got := shmKiB(t, name); got != want/1024 {
				t.Errorf("/dev/shm %d KiB after resize, want %d", got, want/1024)
			}
			if tc.joiner {
				if got := shmKiB(t, name+"-joined"); got != want/1024 {
					t.Errorf("joined container's /dev/shm %d KiB, want %d (one tmpfs for both)", got, want/1024)
				}
			}
			if got := inspect(t, name, "{{.State.StartedAt}}"); got != started {
				t.Errorf("container restarted: StartedAt %s -> %s", started, got)
			}
			if got := inspect(t, name, "{{.HostConfig.ShmSize}}"); got != shmRecord {
				t.Errorf("HostConfig.ShmSize changed %s -> %s; resize must update nothing else", shmRecord, got)
			}
		})
	}
	t.Run("refuses --ipc host and leaves the host's /dev/shm alone", func(t *testing.T) {
		before := hostShmKiB(t)
		if _, stderr, err := e.d.Docker("run", "-d", "--name", "hostipc", "--network", "none", "--ipc", "host", e.img, "sleep", "3600"); err != nil {
			t.Fatalf("docker run: %v\n%s", err, stderr)
		}
		t.Cleanup(func() { _, _, _ = e.d.Docker("rm", "-f", "hostipc") })
		stdout, stderr, code := e.gpurun(t, "resize", "hostipc", "2g")
		if code == 0 || !strings.Contains(stderr, "--ipc host") {
			t.Errorf("gpurun resize of an --ipc host container: exit %d\n%s%s", code, stdout, stderr)
		}
		if after := hostShmKiB(t); after != before {
			t.Errorf("host /dev/shm %d -> %d KiB", before, after)
		}
	})
	t.Run("refuses to shrink below what /dev/shm holds", func(t *testing.T) {
		if _, stderr, err := e.d.Docker("run", "-d", "--name", "held", "--network", "none", "--shm-size", "256m", e.img, "sleep", "3600"); err != nil {
			t.Fatalf("docker run: %v\n%s", err, stderr)
		}
		t.Cleanup(func() { _, _, _ = e.d.Docker("rm", "-f", "held") })
		if _, stderr, err := e.d.Docker("exec", "held", "dd", "if=/dev/zero", "of=/dev/shm/data", "bs=1M", "count=100"); err != nil {
			t.Fatalf("fill: %v\n%s", err, stderr)
		}
		stdout, stderr, code := e.gpurun(t, "resize", "held", "64m")
		if code == 0 || !strings.Contains(stderr, "holds") {
			t.Errorf("shrink below use: exit %d\n%s%s", code, stdout, stderr)
		}
		if got := shmKiB(t, "held"); got != 256*1024 {
			t.Errorf("/dev/shm %d KiB after a refused shrink, want 262144", got)
		}
	})
	t.Run("above the policy max needs --force", func(t *testing.T) {
		capped := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(capped, []byte("log_file = \"\"\nmin = \"256m\"\nmax = \"512m\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := e.d.Docker("run", "-d", "--name", "capped", "--network", "none", e.img, "sleep", "3600"); err != nil {
			t.Fatalf("docker run: %v\n%s", err, stderr)
		}
		t.Cleanup(func() { _, _, _ = e.d.Docker("rm", "-f", "capped") })
		stdout, stderr, code := e.gpurun(t, "--config", capped, "resize", "capped", "1g")
		if code != 2 || !strings.Contains(stderr, "--force") {
			t.Errorf("resize above max: exit %d\n%s%s", code, stdout, stderr)
		}
		if got := shmKiB(t, "capped"); got != 65536 {
			t.Errorf("/dev/shm %d KiB after a refused resize, want 65536", got)
		}
		stdout, stderr, code = e.gpurun(t, "--config", capped, "resize", "--force", "capped", "1g")
		if code != 0 {
			t.Fatalf("resize --force: exit %d\n%s%s", code, stdout, stderr)
		}
		if got := shmKiB(t, "capped"); got != want/1024 {
			t.Errorf("/dev/shm %d KiB after resize --force, want %d", got, want/1024)
		}
	})
}

func TestResizeCRI(t *testing.T) {
	c := harness.StartContainerd(t, harness.ContainerdOptions{})
	config := filepath.Join(t.TempDir(), "config.toml")
	// No engine_roots: containerd's verbose status names its CRI state dir,
	// under /tmp here, where the pod's tmpfs is.
	if err := os.WriteFile(config, []byte("log_file = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := mustSize(t, resizeTo)
	pod := c.RunPod(harness.PodOptions{Name: "job"})
	ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer"})
	c.StartContainer(ctr)
	side := c.CreateContainer(pod, harness.ContainerOptions{Name: "sidecar"})
	c.StartContainer(side)
	pidBefore := c.ContainerStatus(ctr).GetStatus().GetStartedAt()
	if out, err := c.Exec(ctr, "sh", "-c", fill500MB); err == nil {
		t.Fatalf("500 MB fit into the pod's default /dev/shm before the resize: %s", out)
	}
	cmd := exec.Command(bin(t, "gpurun"), "--config", config, "resize", "--cri", "--runtime-endpoint", "unix://"+c.Address, ctr, resizeTo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpurun resize --cri: %v\n%s", err, out)
	}
	if out, err := c.Exec(ctr, "sh", "-c", fill500MB); err != nil {
		t.Errorf("500 MB does not fit after the resize: %v\n%s", err, out)
	}
	for _, id := range []string{ctr, side} {
		out, err := c.Exec(id, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatal(err)
		}
		if got := dfKiB(t, out); got != want/1024 {
			t.Errorf("container %s: /dev/shm %d KiB, want %d (the pod's one tmpfs)", id, got, want/1024)
		}
	}
	if got := c.ContainerStatus(ctr).GetStatus().GetStartedAt(); got != pidBefore {
		t.Errorf("container restarted: StartedAt %d -> %d", pidBefore, got)
	}
}

func mustSize(t *testing.T, s string) int64 {
	t.Helper()
	n, err := policy.ParseSize(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
