//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// engineDefaultKiB is the /dev/shm containerd gives every pod: 64 MiB.
const engineDefaultKiB = 65536

// nriPolicy is the test's gpurun policy for the NRI plugin: a size that
// is not the default (so that the plugin visibly uses this file) and a log
// file under the test's directory; extra is appended. No engine_roots: the
// private containerd keeps its state under /tmp, and the plugin grows the
// pod's tmpfs containerd names in the container's mounts.
func nriPolicy(t *testing.T, extra string) (text string, logFile string) {
	t.Helper()
	logFile = filepath.Join(t.TempDir(), "gpurun.log")
	text = fmt.Sprintf("size = \"25%%\"\nlog_file = %q\n%s", logFile, extra)
	return text, logFile
}

// nriTarget is the size the policy text gives a container without a memory
// limit on this host, in KiB.
func nriTarget(t *testing.T, text string) int64 {
	t.Helper()
	pol, err := policy.Parse("test policy", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	n := policyHostTarget(t, pol)
	if n/1024 == engineDefaultKiB {
		t.Fatalf("the test policy gives %d bytes, the engine's default: the test could not tell them apart", n)
	}
	return n / 1024
}

// nriPlugin is a long-running `gpurun nri` process.
type nriPlugin struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startNRIPlugin runs `gpurun --config CONFIG nri --socket SOCKET` with its
// stderr in a log file; the cleanup kills it.
func startNRIPlugin(t *testing.T, policyText, socket string, args ...string) *nriPlugin {
	t.Helper()
	return startNRIPluginHiding(t, policyText, socket, "", args...)
}

// startNRIPluginHiding is startNRIPlugin in a mount namespace of its own
// where an empty tmpfs covers the directory hide ("" for none): a plugin
// that cannot see the engine's directories, as in a pod without their
// hostPath volume.
func startNRIPluginHiding(t *testing.T, policyText, socket, hide string, args ...string) *nriPlugin {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &nriPlugin{log: filepath.Join(dir, "nri.log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	argv := append([]string{"--config", config, "nri", "--socket", socket}, args...)
	p.cmd = exec.Command(bin(t, "gpurun"), argv...)
	if hide != "" {
		// unshare and sh exec in place: the plugin keeps the process.
		p.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-ec",
			`mount -t tmpfs hidden "$0"; exec "$@"`, hide, bin(t, "gpurun")}, argv...)...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := harness.StartWaited(p.cmd, func(error) { close(p.done) }); err != nil {
		t.Fatalf("start gpurun nri: %v", err)
	}
	t.Cleanup(p.kill)
	return p
}

// kill SIGKILLs the plugin (if it still runs) and waits for it.
func (p *nriPlugin) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// count returns how many times substr is in the plugin's log so far.
func (p *nriPlugin) count(substr string) int {
	return strings.Count(readFile(p.log), substr)
}

// waitLog waits until the plugin's log holds n lines containing substr.
func (p *nriPlugin) waitLog(t *testing.T, substr string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(readFile(p.log), substr) < n {
		select {
		case <-p.done:
			t.Fatalf("gpurun nri exited (%v):\n%s", p.cmd.ProcessState, readFile(p.log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpurun nri: no %d× %q in its log:\n%s", n, substr, readFile(p.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shmOf returns the size of a container's /dev/shm in KiB and its st_dev.
func shmOf(t *testing.T, c *harness.Containerd, id string) (int64, string) {
	t.Helper()
	out, err := c.Exec(id, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	return dfKiB(t, out), lastLine(out)
}

// gpuPod runs a pod with one GPU container (env NVIDIA_VISIBLE_DEVICES=all)
// and returns the pod and container ids.
func gpuPod(t *testing.T, c *harness.Containerd, name string) (pod, ctr string) {
	t.Helper()
	pod = c.RunPod(harness.PodOptions{Name: name})
	ctr = c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
	c.StartContainer(ctr)
	return pod, ctr
}

// TestNRIPluginContainerd2 runs `gpurun nri` as a long-running plugin of
// containerd 2.x and drives pods through CRI.
func TestNRIPluginContainerd2(t *testing.T) {
	var dir string
	t.Run("engine", func(t *testing.T) {
		et := t // plugins outlive the subtest that starts them
		c2 := harness.StartContainerd2(t, harness.Containerd2Options{})
		c := c2.Containerd
		dir = c.Dir
		text, _ := nriPolicy(t, "")
		want := nriTarget(t, text)
		plugin := startNRIPlugin(t, text, c2.NRISocket)
		plugin.waitLog(t, "registered with the runtime", 1)

		t.Run("GPU pod: the pod's tmpfs grows, one st_dev for all its containers", func(t *testing.T) {
			pod := c.RunPod(harness.PodOptions{Name: "gpu"})
			early := c.CreateContainer(pod, harness.ContainerOptions{Name: "early"})
			c.StartContainer(early)
			if got, _ := shmOf(t, c, early); got != engineDefaultKiB {
				t.Fatalf("before the GPU container: /dev/shm %d KiB, want %d", got, engineDefaultKiB)
			}
			trainer := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
			c.StartContainer(trainer)
			late := c.CreateContainer(pod, harness.ContainerOptions{Name: "late"})
			c.StartContainer(late)
			tSize, tDev := shmOf(t, c, trainer)
			for name, id := range map[string]string{"early (running before)": early, "late": late} {
				size, dev := shmOf(t, c, id)
				if size != tSize || dev != tDev {
					t.Errorf("%s container: %d KiB st_dev %s; the GPU container: %d KiB st_dev %s (the pod's tmpfs must stay one)", name, size, dev, tSize, tDev)
				}
			}
			if tSize != want {
				t.Errorf("GPU container /dev/shm %d KiB, want %d from the policy\nplugin log:\n%s", tSize, want, readFile(plugin.log))
			}
			if host, err := sysinfo.TmpfsSize(c.SandboxShm(pod)); err != nil || host/1024 != want {
				t.Errorf("host side %s: %d bytes, %v; want %d KiB", c.SandboxShm(pod), host, err, want)
			}
		})
		t.Run("non-GPU pod keeps 64 MiB", func(t *testing.T) {
			pod := c.RunPod(harness.PodOptions{Name: "plain"})
			ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "app"})
			c.StartContainer(ctr)
			if got, _ := shmOf(t, c, ctr); got != engineDefaultKiB {
				t.Errorf("/dev/shm %d KiB, want %d", got, engineDefaultKiB)
			}
		})
		t.Run("hostIPC pod: the host's /dev/shm is not touched", func(t *testing.T) {
			before := hostShmKiB(t)
			pod := c.RunPod(harness.PodOptions{Name: "hostipc", HostIPC: true})
			ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
			c.StartContainer(ctr)
			if got, _ := shmOf(t, c, ctr); got != before {
				t.Errorf("/dev/shm %d KiB, want the host's %d", got, before)
			}
			if after := hostShmKiB(t); after != before {
				t.Errorf("host /dev/shm %d -> %d KiB", before, after)
			}
		})
		var whileDown string
		t.Run("plugin killed: pods still start, with the default", func(t *testing.T) {
			plugin.kill()
			_, whileDown = gpuPod(t, c, "while-down")
			if got, _ := shmOf(t, c, whileDown); got != engineDefaultKiB {
				t.Errorf("/dev/shm %d KiB with no plugin, want %d", got, engineDefaultKiB)
			}
		})
		t.Run("plugin restarted: GPU containers get the size again, the one created meanwhile too", func(t *testing.T) {
			plugin = startNRIPlugin(et, text, c2.NRISocket)
			plugin.waitLog(t, "registered with the runtime", 1)
			// Synchronize comes with the registration: the pod created while
			// the plugin was down is grown live.
			plugin.waitLog(t, "synchronized with the runtime", 1)
			if got, _ := shmOf(t, c, whileDown); got != want {
				t.Errorf("the container created while the plugin was down: /dev/shm %d KiB after the restart, want %d\nplugin log:\n%s", got, want, readFile(plugin.log))
			}
			_, ctr := gpuPod(t, c, "after-restart")
			if got, _ := shmOf(t, c, ctr); got != want {
				t.Errorf("/dev/shm %d KiB, want %d\nplugin log:\n%s", got, want, readFile(plugin.log))
			}
		})
		t.Run("containerd restarted: the plugin reconnects", func(t *testing.T) {
			c.Restart()
			plugin.waitLog(t, "the runtime closed the connection; reconnecting", 1)
			plugin.waitLog(t, "registered with the runtime", 2)
			_, ctr := gpuPod(t, c, "after-containerd-restart")
			if got, _ := shmOf(t, c, ctr); got != want {
				t.Errorf("/dev/shm %d KiB, want %d\nplugin log:\n%s", got, want, readFile(plugin.log))
			}
		})
		t.Run("a failed remount: fail-open starts the pod, fail_closed fails the container", func(t *testing.T) {
			plugin.kill()
			// The plugin cannot see containerd's CRI state dir, where the
			// pod's tmpfs is: the remount fails.
			open, _ := nriPolicy(t, "")
			plugin = startNRIPluginHiding(et, open, c2.NRISocket, c.State)
			plugin.waitLog(t, "registered with the runtime", 1)
			_, ctr := gpuPod(t, c, "fail-open")
			if got, _ := shmOf(t, c, ctr); got != engineDefaultKiB {
				t.Errorf("fail-open: /dev/shm %d KiB, want the default %d", got, engineDefaultKiB)
			}
			plugin.waitLog(t, "could not size /dev/shm", 1)

			plugin.kill()
			closed, _ := nriPolicy(t, "fail_closed = true\n")
			plugin = startNRIPluginHiding(et, closed, c2.NRISocket, c.State)
			plugin.waitLog(t, "registered with the runtime", 1)
			pod := c.RunPod(harness.PodOptions{Name: "fail-closed"})
			_, err := c.TryCreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
			if err == nil || !strings.Contains(err.Error(), "fail_closed") || !strings.Contains(err.Error(), "grow "+c.SandboxShm(pod)) || !strings.Contains(err.Error(), "no such file") {
				t.Errorf("fail_closed: CreateContainer error %v, want the plugin's failed remount of %s", err, c.SandboxShm(pod))
			}
			if log := readFile(plugin.log); !strings.Contains(log, "hostPath") {
				t.Errorf("the plugin's log does not say how to fix it:\n%s", log)
			}
			plain, err := c.TryCreateContainer(pod, harness.ContainerOptions{Name: "plain"})
			if err != nil {
				t.Errorf("fail_closed: a container without GPU failed too: %v", err)
			} else {
				c.StartContainer(plain)
			}
		})
	})
	assertNoLeftovers(t, dir)
}

// TestNRIPluginPreinstalled installs the gpurun binary itself as
// containerd's pre-installed plugin 10-gpurun, with its policy in the
// plugin's configuration file: containerd launches it at start, and again
// after a restart.
func TestNRIPluginPreinstalled(t *testing.T) {
	var dir string
	t.Run("engine", func(t *testing.T) {
		var logFile string
		var text string
		c2 := harness.StartContainerd2(t, harness.Containerd2Options{
			Plugins: map[string]string{"10-gpurun": bin(t, "gpurun-full")},
			PluginConfigs: map[string]func(string) string{"10-gpurun.conf": func(dir string) string {
				text, logFile = nriPolicy(t, "")
				return text
			}},
		})
		c := c2.Containerd
		dir = c.Dir
		want := nriTarget(t, text)
		waitFile := func(t *testing.T, substr string, n int) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for strings.Count(readFile(logFile), substr) < n {
				if time.Now().After(deadline) {
					t.Fatalf("no %d× %q in %s:\n%s\n--- containerd log tail ---\n%s", n, substr, logFile, readFile(logFile), c.LogTail(30))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		check := func(t *testing.T, name string) {
			t.Helper()
			pod, ctr := gpuPod(t, c, name)
			side := c.CreateContainer(pod, harness.ContainerOptions{Name: "side"})
			c.StartContainer(side)
			gSize, gDev := shmOf(t, c, ctr)
			sSize, sDev := shmOf(t, c, side)
			if gSize != want || sSize != want || gDev != sDev {
				t.Errorf("GPU container %d KiB st_dev %s, sidecar %d KiB st_dev %s; want both %d KiB on one tmpfs\nplugin log:\n%s",
					gSize, gDev, sSize, sDev, want, readFile(logFile))
			}
		}
		t.Run("launched by containerd with its configuration", func(t *testing.T) {
			waitFile(t, `"msg":"registered with the runtime"`, 1)
			if !strings.Contains(readFile(logFile), `"policy_from_runtime":true`) {
				t.Errorf("the plugin did not take its policy from the runtime:\n%s", readFile(logFile))
			}
			check(t, "preinstalled")
			plain := c.RunPod(harness.PodOptions{Name: "plain"})
			ctr := c.CreateContainer(plain, harness.ContainerOptions{Name: "app"})
			c.StartContainer(ctr)
			if got, _ := shmOf(t, c, ctr); got != engineDefaultKiB {
				t.Errorf("non-GPU pod: /dev/shm %d KiB, want %d", got, engineDefaultKiB)
			}
		})
		t.Run("containerd restarted: launched again", func(t *testing.T) {
			c.Restart()
			waitFile(t, `"msg":"registered with the runtime"`, 2)
			check(t, "preinstalled-after-restart")
		})
	})
	assertNoLeftovers(t, dir)
}
