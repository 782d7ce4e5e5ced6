//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// gpurunInstall runs the gpurun CLI (install/uninstall) and fails the test
// on an error; it returns the output.
func gpurunInstall(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin(t, "gpurun"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gpurun %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// installDocker runs `gpurun install|uninstall docker ARGS` for the private
// daemon d, at whose socket install asks dockerd for its data-root; it
// fails the test on an error and returns the output.
func installDocker(t *testing.T, d *harness.Dockerd, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin(t, "gpurun"), args...)
	cmd.Env = d.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpurun %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// registerDocker registers runtime (a gpurun-runtime build) in the private
// daemon d with gpurun install docker, as the default runtime when
// setDefault, under the policy file config, and reloads d.
func registerDocker(t *testing.T, d *harness.Dockerd, runtime, config string, setDefault bool) string {
	t.Helper()
	args := []string{"install", "docker", "--config", d.ConfigPath, "--runtime-path", runtime,
		"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", config,
		"--reload", "--pid-file", filepath.Join(d.Dir, "dockerd.pid")}
	if setDefault {
		args = append(args, "--set-as-default")
	}
	out := installDocker(t, d, args...)
	d.Reload()
	return out
}

func TestInstallDocker(t *testing.T) {
	config, logFile := shimConfig(t, "")
	d := harness.StartDockerd(t, harness.DockerdOptions{Env: []string{"GPURUN_CONFIG=" + config}})
	img := harness.BusyboxImage(t, d)
	original, err := os.ReadFile(d.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"docker", "--config", d.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
		"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", config,
		"--reload", "--pid-file", filepath.Join(d.Dir, "dockerd.pid")}
	want := hostTarget(t) / 1024
	shm := func(t *testing.T, args ...string) int64 {
		t.Helper()
		out, stderr, err := d.Docker(append(append([]string{"run", "--rm", "--network", "none"}, args...), img, "df", "-k", "/dev/shm")...)
		if err != nil {
			t.Fatalf("docker run: %v\n%s\nshim log: %s\ndockerd: %s", err, stderr, readFile(logFile), d.LogTail(20))
		}
		return dfKiB(t, out)
	}

	out := installDocker(t, d, append([]string{"install"}, common...)...)
	if !strings.Contains(out, "sent SIGHUP to dockerd") {
		t.Errorf("install did not reload: %s", out)
	}
	// The data-root is a flag of the private daemon, not in daemon.json:
	// only the running dockerd names it.
	if want := "dockerd data-root " + d.DataRoot + " (from the running dockerd)"; !strings.Contains(out, want) || strings.Contains(out, "warning:") {
		t.Errorf("install output lacks %q, or warns:\n%s", want, out)
	}
	d.Reload() // waits until the daemon answers again
	if got := shm(t, "--runtime", "gpurun", "-e", "NVIDIA_VISIBLE_DEVICES=all"); got != want {
		t.Errorf("--runtime gpurun GPU container: %d KiB, want %d", got, want)
	}
	if got := shm(t, "--runtime", "gpurun"); got != 65536 {
		t.Errorf("--runtime gpurun non-GPU container: %d KiB, want 65536", got)
	}
	if got := shm(t, "-e", "NVIDIA_VISIBLE_DEVICES=all"); got != 65536 {
		t.Errorf("not the default yet, but plain docker run got %d KiB", got)
	}
	t.Run("shareable donor and container: peer share one grown tmpfs", func(t *testing.T) {
		for _, args := range [][]string{
			{"run", "-d", "--name", "donor", "--runtime", "gpurun", "--network", "none", "--ipc", "shareable", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "sleep", "600"},
		} {
			if _, stderr, err := d.Docker(args...); err != nil {
				t.Fatalf("%v: %s", err, stderr)
			}
		}
		peer, stderr, err := d.Docker("run", "--rm", "--runtime", "gpurun", "--network", "none", "--ipc", "container:donor", img, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		donor, stderr, err := d.Docker("exec", "donor", "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		if dfKiB(t, donor) != want || dfKiB(t, peer) != want || lastLine(donor) != lastLine(peer) {
			t.Errorf("donor %d KiB dev %s, peer %d KiB dev %s; want %d KiB, one st_dev", dfKiB(t, donor), lastLine(donor), dfKiB(t, peer), lastLine(peer), want)
		}
		_, _, _ = d.Docker("rm", "-f", "donor")
	})
	t.Run("--ipc host leaves the host's /dev/shm alone", func(t *testing.T) {
		before := hostShmKiB(t)
		if got := shm(t, "--runtime", "gpurun", "--ipc", "host", "-e", "NVIDIA_VISIBLE_DEVICES=all"); got != before {
			t.Errorf("/dev/shm %d KiB, want the host's %d", got, before)
		}
		if after := hostShmKiB(t); after != before {
			t.Errorf("host /dev/shm %d -> %d KiB", before, after)
		}
	})
	// Idempotent.
	configured, _ := os.ReadFile(d.ConfigPath)
	if out := installDocker(t, d, append([]string{"install"}, common...)...); !strings.Contains(out, "nothing to do") {
		t.Errorf("second install: %s", out)
	}
	if again, _ := os.ReadFile(d.ConfigPath); string(again) != string(configured) {
		t.Error("second install changed daemon.json")
	}
	// As the default runtime, plain docker run is covered.
	installDocker(t, d, append(append([]string{"install"}, common...), "--set-as-default")...)
	d.Reload()
	if got := shm(t, "-e", "NVIDIA_VISIBLE_DEVICES=all"); got != want {
		t.Errorf("default runtime: plain docker run GPU container %d KiB, want %d", got, want)
	}
	// Uninstall restores daemon.json byte for byte. dockerd's reload keeps
	// keys that are gone from the file, so uninstall says a restart is needed,
	// and a daemon started on the restored file no longer knows gpurun.
	out = installDocker(t, d, append([]string{"uninstall"}, common...)...)
	now, _ := os.ReadFile(d.ConfigPath)
	if string(now) != string(original) {
		t.Errorf("uninstall left\n%s\nwant\n%s", now, original)
	}
	if !strings.Contains(out, "until it restarts") {
		t.Errorf("uninstall did not say dockerd must restart: %s", out)
	}
	var restored map[string]any
	if err := json.Unmarshal(now, &restored); err != nil {
		t.Fatal(err)
	}
	delete(restored, "deprecated-key-path") // the harness sets its own
	fresh := harness.StartDockerd(t, harness.DockerdOptions{DaemonJSON: restored, Env: []string{"GPURUN_CONFIG=" + config}})
	freshImg := harness.BusyboxImage(t, fresh)
	if _, stderr, err := fresh.Docker("run", "--rm", "--runtime", "gpurun", freshImg, "true"); err == nil || !strings.Contains(stderr, "gpurun") {
		t.Errorf("runtime gpurun known to a daemon started on the restored file: %v %s", err, stderr)
	}
}

func TestInstallContainerd(t *testing.T) {
	config, logFile := shimConfig(t, "")
	c := harness.StartContainerd(t, harness.ContainerdOptions{Env: []string{"GPURUN_CONFIG=" + config}})
	original, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"containerd", "--config", c.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
		"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", config}
	want := hostTarget(t) / 1024
	shmOf := func(t *testing.T, id string) (int64, string) {
		t.Helper()
		out, err := c.Exec(id, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		if err != nil {
			t.Fatalf("exec: %v\nshim log: %s", err, readFile(logFile))
		}
		return dfKiB(t, out), lastLine(out)
	}
	start := func(pod string, name string, env ...string) string {
		id := c.CreateContainer(pod, harness.ContainerOptions{Name: name, Env: env})
		c.StartContainer(id)
		return id
	}

	gpurunInstall(t, append([]string{"install"}, common...)...)
	c.Restart()
	t.Run("RuntimeClass gpurun: the pod's tmpfs grows for all its containers", func(t *testing.T) {
		pod := c.RunPod(harness.PodOptions{Name: "gpu", RuntimeHandler: "gpurun"})
		gpu := start(pod, "trainer", "NVIDIA_VISIBLE_DEVICES=all")
		side := start(pod, "sidecar")
		gs, gd := shmOf(t, gpu)
		ss, sd := shmOf(t, side)
		if gs != want || ss != want || gd != sd {
			t.Errorf("trainer %d KiB (dev %s), sidecar %d KiB (dev %s); want %d KiB, one st_dev", gs, gd, ss, sd, want)
		}
	})
	t.Run("a pod annotation asks for a size", func(t *testing.T) {
		pod := c.RunPod(harness.PodOptions{Name: "asks", RuntimeHandler: "gpurun", Annotations: map[string]string{"gpurun.io/shm-size": "3Gi"}})
		ctr := start(pod, "app")
		if got, _ := shmOf(t, ctr); got != 3*policy.GiB/1024 {
			t.Errorf("/dev/shm %d KiB, want 3Gi", got)
		}
	})
	t.Run("non-GPU pod keeps 64 MiB", func(t *testing.T) {
		pod := c.RunPod(harness.PodOptions{Name: "plain", RuntimeHandler: "gpurun"})
		if got, _ := shmOf(t, start(pod, "app")); got != 65536 {
			t.Errorf("/dev/shm %d KiB", got)
		}
	})
	t.Run("hostIPC pod untouched", func(t *testing.T) {
		before := hostShmKiB(t)
		pod := c.RunPod(harness.PodOptions{Name: "hostipc", HostIPC: true, RuntimeHandler: "gpurun"})
		if got, _ := shmOf(t, start(pod, "app", "NVIDIA_VISIBLE_DEVICES=all")); got != before {
			t.Errorf("/dev/shm %d KiB, want the host's %d", got, before)
		}
		if after := hostShmKiB(t); after != before {
			t.Errorf("host /dev/shm %d -> %d KiB", before, after)
		}
	})
	t.Run("as the default handler, pods without a RuntimeClass", func(t *testing.T) {
		gpurunInstall(t, append(append([]string{"install"}, common...), "--set-as-default")...)
		c.Restart()
		pod := c.RunPod(harness.PodOptions{Name: "default"})
		if got, _ := shmOf(t, start(pod, "trainer", "NVIDIA_VISIBLE_DEVICES=all")); got != want {
			t.Errorf("/dev/shm %d KiB, want %d", got, want)
		}
	})
	t.Run("uninstall restores the config byte for byte", func(t *testing.T) {
		gpurunInstall(t, append([]string{"uninstall"}, common...)...)
		if now, _ := os.ReadFile(c.ConfigPath); string(now) != string(original) {
			t.Errorf("uninstall left\n%s\nwant\n%s", now, original)
		}
		c.Restart()
		if _, err := c.TryRunPod(harness.PodOptions{Name: "gone", RuntimeHandler: "gpurun"}); err == nil {
			t.Error("runtime handler gpurun still accepted after uninstall")
		}
	})
}

// TestInstallContainerd2: containerd 2.x, its state under the harness's
// /tmp directory (not /run/containerd), set up by gpurun install
// containerd, with the default policy: gpurun-runtime learns the state dir
// from the bundle path containerd hands it and grows the GPU pod's tmpfs,
// shared with its sidecar.
func TestInstallContainerd2(t *testing.T) {
	config, logFile := shimConfig(t, "")
	c2 := harness.StartContainerd2(t, harness.Containerd2Options{Env: []string{"GPURUN_CONFIG=" + config}})
	c := c2.Containerd
	gpurunInstall(t, "install", "containerd", "--config", c.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
		"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", config, "--set-as-default")
	c.Restart()
	want := hostTarget(t) / 1024
	pod := c.RunPod(harness.PodOptions{Name: "gpu"})
	gpu := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
	c.StartContainer(gpu)
	side := c.CreateContainer(pod, harness.ContainerOptions{Name: "sidecar"})
	c.StartContainer(side)
	gs, gd := shmOf(t, c, gpu)
	ss, sd := shmOf(t, c, side)
	if gs != want || ss != want || gd != sd {
		t.Errorf("trainer %d KiB (dev %s), sidecar %d KiB (dev %s); want %d KiB, one st_dev\nshim log:\n%s", gs, gd, ss, sd, want, readFile(logFile))
	}
	if !strings.HasPrefix(c.StateDir, "/tmp/") || !strings.Contains(readFile(logFile), `"path":"`+c.SandboxShm(pod)+`"`) {
		t.Errorf("the shim's record lacks the remount of %s (state %s):\n%s", c.SandboxShm(pod), c.StateDir, readFile(logFile))
	}
}
