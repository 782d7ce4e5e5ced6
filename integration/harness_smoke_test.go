//go:build integration

package integration

import (
	"fmt"
	"os"
	"runtime"
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

// nsID identifies the namespace a namespace file (/proc/PID/ns/net, a
// bind-mounted nsfs file) refers to.
func nsID(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// assertInNetNS checks that process pid runs in the harness namespace ns,
// not in the test's (the host's) network namespace.
func assertInNetNS(t *testing.T, what string, pid int, ns *harness.NetNS) {
	t.Helper()
	if ns == nil {
		t.Fatalf("%s: the harness gave it no network namespace", what)
	}
	got := nsID(t, fmt.Sprintf("/proc/%d/ns/net", pid))
	// This thread's, not /proc/self's: that is the main thread's.
	runtime.LockOSThread()
	self := nsID(t, "/proc/thread-self/ns/net")
	runtime.UnlockOSThread()
	if got == self {
		t.Errorf("%s (pid %d) runs in the host's network namespace", what, pid)
	}
	if want := nsID(t, ns.Path); got != want {
		t.Errorf("%s (pid %d) runs in network namespace %s, want the harness's %s (%s)", what, pid, got, want, ns.Path)
	}
}

// assertLoopbackOnly checks that `ip -o link` output lists lo alone: what a
// host-network container of a harness engine must see, whatever the
// machine's own interfaces are.
func assertLoopbackOnly(t *testing.T, what, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], ": lo: ") {
		host, _ := os.ReadDir("/sys/class/net")
		var names []string
		for _, e := range host {
			names = append(names, e.Name())
		}
		t.Errorf("%s sees these links, want lo alone (the host has %v):\n%s", what, names, out)
	}
}

func TestSmokeDockerd(t *testing.T) {
	var dir string
	t.Run("engine", func(t *testing.T) {
		d := harness.StartDockerd(t, harness.DockerdOptions{DaemonJSON: map[string]any{"debug": false}})
		dir = d.Dir
		assertInNetNS(t, "dockerd", d.PID, d.NetNS)
		img := harness.BusyboxImage(t, d)
		if again := harness.BusyboxImage(t, d); again != img {
			t.Errorf("second BusyboxImage = %q, want %q", again, img)
		}
		// --network host is the daemon's namespace, not the machine's.
		out, _, err := d.Docker("run", "--rm", "--network", "host", img, "ip", "-o", "link")
		if err != nil {
			t.Fatal(err)
		}
		assertLoopbackOnly(t, "a --network host container", out)

		out, _, err = d.Docker("run", "--rm", "--network", "none", img, "df", "-k", "/dev/shm")
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
		assertInNetNS(t, "containerd", c.PID, c.NetNS)
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
		// Harness pods are host-network pods: of containerd's namespace.
		if out, err := c.Exec(ctr, "ip", "-o", "link"); err != nil {
			t.Error(err)
		} else {
			assertLoopbackOnly(t, "a host-network pod", out)
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

		// Pods survive a containerd restart, which stays in the namespace.
		c.Restart()
		if _, err := c.Exec(ctr, "true"); err != nil {
			t.Errorf("exec after restart: %v", err)
		}
		assertInNetNS(t, "containerd after a restart", c.PID, c.NetNS)
	})
	assertNoLeftovers(t, dir)
}

func TestSmokePodman(t *testing.T) {
	var dir string
	t.Run("engine", func(t *testing.T) {
		p := harness.NewPodman(t)
		dir = p.Dir
		img := p.BusyboxImage()
		out, stderr, err := p.Podman("run", "--rm", "--network", "host", "--cgroup-parent", p.CgroupParent, img, "ip", "-o", "link")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		assertLoopbackOnly(t, "a --network host podman container", out)
		out, stderr, err = p.Run(img, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		// containers.conf's default shm_size "65536k" is 65,536,000 bytes to Podman.
		if got := dfKiB(t, out); got != 65536000/1024 {
			t.Errorf("podman run: /dev/shm is %d KiB, want %d\n%s", got, 65536000/1024, out)
		}
	})
	assertNoLeftovers(t, dir)
}
