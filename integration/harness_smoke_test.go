//go:build integration

package integration

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/integration/harness"
)

// dfKiB returns the 1K-blocks column of `df -k PATH` output.
func dfKiB(t *testing.T, out string) int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("unexpected df output: %q", out)
	}
	// busybox df may wrap a long filesystem name onto its own line.
	fields := strings.Fields(strings.Join(lines[1:], " "))
	if len(fields) < 2 {
		t.Fatalf("unexpected df output: %q", out)
	}
	n, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("df output %q: %v", out, err)
	}
	return n
}

// hostShmKiB is the size of the host's /dev/shm in KiB, as df reports it.
func hostShmKiB(t *testing.T) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		t.Fatalf("statfs /dev/shm: %v", err)
	}
	return int64(st.Blocks) * st.Bsize / 1024
}

// assertNoLeftovers checks that an engine's cleanup removed everything.
func assertNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	if dir == "" {
		t.Fatal("engine did not start")
	}
	if left := harness.Leftovers(dir); len(left) > 0 {
		t.Errorf("cleanup of %s incomplete:\n%s", dir, strings.Join(left, "\n"))
	}
}

func TestSmokeDockerd(t *testing.T) {
	var dir string
	t.Run("engine", func(t *testing.T) {
		d := harness.StartDockerd(t, harness.DockerdOptions{DaemonJSON: map[string]any{"debug": false}})
		dir = d.Dir
		img := harness.BusyboxImage(t, d)
		if again := harness.BusyboxImage(t, d); again != img {
			t.Errorf("second BusyboxImage = %q, want %q", again, img)
		}

		out, _, err := d.Docker("run", "--rm", "--network", "none", img, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatal(err)
		}
		if got := dfKiB(t, out); got != 65536 {
			t.Errorf("docker run: /dev/shm is %d KiB, want 65536\n%s", got, out)
		}

		gpu := harness.MknodGPU(t, t.TempDir())
		out, _, err = d.Docker("run", "--rm", "--network", "none", "--device", gpu+":/dev/nvidia0", img, "stat", "-c", "%F %t:%T", "/dev/nvidia0")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != "character special file c3:0" {
			t.Errorf("fake GPU in container: %q, want %q", got, "character special file c3:0")
		}

		// A shareable IPC container leaves a host tmpfs mount under the data
		// root while it runs: the cleanup must remove it.
		if _, _, err := d.Docker("run", "-d", "--network", "none", "--ipc", "shareable", img, "sleep", "1000"); err != nil {
			t.Fatal(err)
		}
		d.Reload()
		out, _, err = d.Docker("ps", "-q")
		if err != nil || len(strings.Fields(out)) != 1 {
			t.Errorf("after reload: docker ps = %q, %v; want one container", out, err)
		}
	})
	assertNoLeftovers(t, dir)
}

func TestSmokeContainerd(t *testing.T) {
	var dir string
	t.Run("engine", func(t *testing.T) {
		c := harness.StartContainerd(t, harness.ContainerdOptions{})
		dir = c.Dir
		const img = "gpurun-test/busybox:latest"
		c.ImportImage(harness.ImageTar(t, t.TempDir(), img, []string{"/bin/sh"}))

		gpu := harness.MknodGPU(t, t.TempDir())
		pod := c.RunPod(harness.PodOptions{Name: "smoke", Annotations: map[string]string{"example.com/a": "b"}})
		ctr := c.CreateContainer(pod, harness.ContainerOptions{
			Name:        "app",
			Image:       img,
			Command:     []string{"sleep", "1000"},
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=all"},
			Devices:     []harness.Device{{Host: gpu, Container: "/dev/nvidia0"}},
			MemoryLimit: 256 << 20,
		})
		c.StartContainer(ctr)
		out, err := c.Exec(ctr, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatal(err)
		}
		if got := dfKiB(t, out); got != 65536 {
			t.Errorf("pod container: /dev/shm is %d KiB, want 65536\n%s", got, out)
		}
		if out, err := c.Exec(ctr, "stat", "-c", "%t:%T", "/dev/nvidia0"); err != nil || strings.TrimSpace(out) != "c3:0" {
			t.Errorf("fake GPU in pod container: %q, %v", out, err)
		}
		if out, err := c.Exec(ctr, "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"); err != nil || strings.TrimSpace(out) != "all" {
			t.Errorf("env in pod container: %q, %v", out, err)
		}

		shm := c.SandboxShm(pod)
		var st unix.Statfs_t
		if err := unix.Statfs(shm, &st); err != nil {
			t.Fatalf("statfs %s: %v", shm, err)
		}
		if st.Type != unix.TMPFS_MAGIC {
			t.Errorf("%s: filesystem type %#x, want tmpfs", shm, st.Type)
		}
		if kib := int64(st.Blocks) * st.Bsize / 1024; kib != 65536 {
			t.Errorf("%s: %d KiB, want 65536", shm, kib)
		}

		t.Run("hostIPC", func(t *testing.T) {
			c := c.For(t)
			pod := c.RunPod(harness.PodOptions{Name: "smoke-hostipc", HostIPC: true})
			ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "app"})
			c.StartContainer(ctr)
			out, err := c.Exec(ctr, "df", "-k", "/dev/shm")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := dfKiB(t, out), hostShmKiB(t); got != want {
				t.Errorf("hostIPC pod container: /dev/shm is %d KiB, want the host's %d", got, want)
			}
		})

		// Pods survive a containerd restart.
		c.Restart()
		if _, err := c.Exec(ctr, "true"); err != nil {
			t.Errorf("exec after restart: %v", err)
		}
	})
	assertNoLeftovers(t, dir)
}
