//go:build integration

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/node/nodeagent"
	"github.com/gpurun/gpurun/policy"
)

// containerd2Binary is containerd 2.x for `containerd config default`:
// $GPURUN_TEST_CONTAINERD2, else containerd in $GPURUN_TEST_CONTAINERD2_BIN
// (make sets both).
func containerd2Binary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("GPURUN_TEST_CONTAINERD2")
	if p == "" && os.Getenv(harness.Containerd2BinEnv) != "" {
		p = filepath.Join(os.Getenv(harness.Containerd2BinEnv), "containerd")
	}
	if p == "" {
		t.Fatalf("neither GPURUN_TEST_CONTAINERD2 nor %s is set: run the tests with make (it builds containerd 2.x into /var/cache/gpurun-tools (.tools/ when not root))", harness.Containerd2BinEnv)
	}
	return p
}

// configDefault runs `containerd config default` of a containerd binary.
func configDefault(t *testing.T, bin string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "config", "default")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s config default: %v\n%s", bin, err, stderr.String())
	}
	return out
}

// fakeNode is a host root holding a node's containerd config, as the
// DaemonSet sees the node at /host.
type fakeNode struct {
	root string
}

func (n fakeNode) path(p string) string { return filepath.Join(n.root, p) }

// snapshot maps every path under the host root to its mode and content;
// the links the test makes (proc, run) are left out.
func (n fakeNode) snapshot(t *testing.T) map[string]string {
	t.Helper()
	return snapshotRoot(t, n.root, "proc", "run")
}

// registeredHandler reads a containerd config's gpurun handler: its
// BinaryName and whether it is the default.
func registeredHandler(t *testing.T, data []byte) (binary string, isDefault bool) {
	t.Helper()
	var cfg map[string]any
	if err := toml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	plugin := "io.containerd.grpc.v1.cri"
	if v, _ := cfg["version"].(int64); v >= 3 {
		plugin = "io.containerd.cri.v1.runtime"
	}
	get := func(path ...string) any {
		var cur any = cfg
		for _, p := range path {
			m, _ := cur.(map[string]any)
			cur = m[p]
		}
		return cur
	}
	binary, _ = get("plugins", plugin, "containerd", "runtimes", install.RuntimeName, "options", "BinaryName").(string)
	def, _ := get("plugins", plugin, "containerd", "default_runtime_name").(string)
	return binary, def == install.RuntimeName
}

// nodeCmd runs gpurun node ... and returns its combined output and error.
func nodeCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(bin(t, "gpurun"), append([]string{"node"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestDaemonSetEntrypoint runs the node agent as the DaemonSet runs it,
// against a host root holding a real containerd config, then has a real
// containerd run on the result: a pod with runtime handler gpurun gets the
// policy's /dev/shm from the gpurun-runtime the agent copied. Uninstalling
// while the pod runs restores the config byte for byte but keeps
// gpurun-runtime; once the pod is gone a second uninstall leaves the host
// root as it was.
func TestDaemonSetEntrypoint(t *testing.T) {
	debianEtc, err := os.ReadFile("../engine/containerd/testdata/debian-bookworm-containerd-1.6.20-etc-config.toml")
	if err != nil {
		t.Fatal(err)
	}
	v3, err := os.ReadFile("../engine/containerd/testdata/containerd-2.2.9-config-default.toml")
	if err != nil {
		t.Fatal(err)
	}
	ctd16, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("containerd not found (apt-get install containerd): %v", err)
	}
	for _, tc := range []struct {
		name        string
		config      func(t *testing.T) []byte
		containerd2 bool
		setDefault  bool
	}{
		{"containerd 1.6 config default", func(t *testing.T) []byte { return configDefault(t, ctd16) }, false, false},
		{"containerd 1.6 config default, default runtime", func(t *testing.T) []byte { return configDefault(t, ctd16) }, false, true},
		{"Debian's /etc/containerd/config.toml", func(*testing.T) []byte { return debianEtc }, false, false},
		{"containerd 2.x config default (version 4)", func(t *testing.T) []byte { return configDefault(t, containerd2Binary(t)) }, true, true},
		{"containerd 2.2 config default (version 3)", func(*testing.T) []byte { return v3 }, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testDaemonSetEntrypoint(t, tc.config(t), tc.containerd2, tc.setDefault)
		})
	}
}

func testDaemonSetEntrypoint(t *testing.T, original []byte, containerd2, setDefault bool) {
	// After uninstall the pod's shims still call gpurun-runtime, whose
	// policy file is gone: it logs that to the default log file.
	keepHostFile(t, policy.Default().LogFile)
	n := fakeNode{root: t.TempDir()}
	configPath := n.path(install.DefaultContainerdConfig)
	if err := os.MkdirAll(filepath.Dir(configPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configPath, original, 0o644); err != nil {
		t.Fatal(err)
	}
	// The node's processes are this machine's (hostPID).
	if err := os.Symlink("/proc", n.path("/proc")); err != nil {
		t.Fatal(err)
	}
	before := n.snapshot(t)
	image := filepath.Dir(bin(t, "gpurun")) // gpurun and gpurun-runtime, as in the image
	logFile := filepath.Join(t.TempDir(), "gpurun.log")
	source := filepath.Join(t.TempDir(), "config.toml")
	sourceText := "# the DaemonSet's policy\nsize = \"40%\"\nmin = \"1g\"\nlog_file = \"" + logFile + "\"\n"
	if err := os.WriteFile(source, []byte(sourceText), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--host-root", n.root, "--from", image, "--policy-source", source}
	if setDefault {
		args = append(args, "--set-as-default")
	}

	out, err := nodeCmd(t, append([]string{"install"}, args...)...)
	if err != nil {
		t.Fatalf("gpurun node install: %v\n%s", err, out)
	}
	installed, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	runtimePath := filepath.Join(nodeagent.DefaultBinDir, nodeagent.RuntimeBinary)
	if b, d := registeredHandler(t, installed); b != runtimePath || d != setDefault {
		t.Errorf("config registers gpurun with BinaryName %q, default %v; want %q, %v\n%s", b, d, runtimePath, setDefault, installed)
	}
	for _, name := range []string{nodeagent.RuntimeBinary, nodeagent.CLIBinary} {
		want, _ := os.ReadFile(filepath.Join(image, name))
		got, err := os.ReadFile(n.path(filepath.Join(nodeagent.DefaultBinDir, name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s on the node: %v, same as the image's: %v", name, err, bytes.Equal(got, want))
		}
	}
	if got, _ := os.ReadFile(n.path(policy.DefaultConfigPath)); string(got) != sourceText {
		t.Errorf("node policy %q, want the source", got)
	}
	// No containerd reads the node's config yet; this machine's own (the
	// one dockerd runs, say) may run with another config, and status says
	// so rather than that none runs.
	if out, err := nodeCmd(t, "status", "--host-root", n.root); err == nil ||
		!strings.Contains(out, "not ready: containerd is not running") && !strings.Contains(out, "not ready: containerd is running, but not with "+install.DefaultContainerdConfig) {
		t.Errorf("status before containerd runs: %v\n%s", err, out)
	}
	// The agent restarts: nothing changes.
	if out, err := nodeCmd(t, append([]string{"install"}, args...)...); err != nil {
		t.Fatalf("second install: %v\n%s", err, out)
	}
	if again, _ := os.ReadFile(configPath); !bytes.Equal(again, installed) {
		t.Error("second install changed the config")
	}

	// A real containerd on the installed config; gpurun-runtime reads the
	// node's policy.
	opts := harness.NodeConfigOptions{Config: installed, HostRoot: n.root, Env: []string{policy.ConfigEnv + "=" + n.path(policy.DefaultConfigPath)}}
	var c *harness.Containerd
	if containerd2 {
		c = harness.StartContainerd2OnNodeConfig(t, opts)
	} else {
		c = harness.StartContainerdOnNodeConfig(t, opts)
	}
	// The node's containerd state, where the agent looks for bundles.
	if err := os.MkdirAll(n.path("/run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(c.StateDir, n.path("/run/containerd")); err != nil {
		t.Fatal(err)
	}
	pod := runGPUPod(t, c, source, sourceText, setDefault, logFile)

	// Uninstall while the pod runs: the config is restored, gpurun-runtime
	// stays for the pod's shim.
	out, err = nodeCmd(t, "uninstall", "--host-root", n.root)
	if err != nil {
		t.Fatalf("gpurun node uninstall: %v\n%s", err, out)
	}
	if now, _ := os.ReadFile(configPath); !bytes.Equal(now, original) {
		t.Errorf("uninstall left\n%s\nwant\n%s", now, original)
	}
	// The pod's sandbox and its container: two shims call it.
	if _, err := os.Stat(n.path(runtimePath)); err != nil || !strings.Contains(out, "2 running container(s) use it") {
		t.Errorf("gpurun-runtime while the pod runs: %v\n%s", err, out)
	}
	if _, err := os.Stat(n.path(policy.DefaultConfigPath)); err == nil {
		t.Error("the policy file the agent created is still there")
	}
	if out, err := nodeCmd(t, "status", "--host-root", n.root); err == nil || !strings.Contains(out, "uninstalled, but") {
		t.Errorf("status after a partial uninstall: %v\n%s", err, out)
	}
	// The pod still stops (its shim calls gpurun-runtime).
	c.StopPod(pod)
	c.RemovePod(pod)

	// containerd restarted on the restored config knows no gpurun.
	restored, err := harness.NodeConfig(c.Dir, original, n.root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ConfigPath, []byte(restored), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Restart()
	if _, err := c.TryRunPod(harness.PodOptions{Name: "gone", RuntimeHandler: install.RuntimeName}); err == nil {
		t.Error("runtime handler gpurun still accepted after uninstall")
	}

	// The second uninstall finishes: the node is as it was.
	if out, err := nodeCmd(t, "uninstall", "--host-root", n.root); err != nil {
		t.Fatalf("second uninstall: %v\n%s", err, out)
	}
	after := n.snapshot(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed or is gone", k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s was left on the node", k)
		}
	}
}

// staticHelper builds a small static program from source (a main package
// using the standard library only).
func staticHelper(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "helper")
	cmd := exec.Command("go", "build", "-o", out, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build helper: %v\n%s", err, b)
	}
	return out
}

// fakeNsenter records its arguments and whether it runs chrooted into the
// host root (which holds /gpurun-host-root), then succeeds.
const fakeNsenter = `package main

import (
	"os"
	"strings"
)

func main() {
	_, err := os.Stat("/gpurun-host-root")
	wd, _ := os.Getwd()
	rec := strings.Join(os.Args[1:], " ") + "\nchrooted=" + map[bool]string{true: "yes", false: "no"}[err == nil] + "\ncwd=" + wd + "\nPATH=" + os.Getenv("PATH") + "\n"
	if err := os.WriteFile("/nsenter-args", []byte(rec), 0o644); err != nil {
		os.Exit(3)
	}
}
`

// TestRestartSystemdThroughHostRoot checks `gpurun install containerd
// --host-root DIR --restart=systemd`: it runs the node's own nsenter,
// chrooted into the host root, to have PID 1's systemd restart containerd.
// The host root's /proc says PID 1 is systemd and this process shares its
// PID namespace (hostPID); nsenter is a recording fake.
func TestRestartSystemdThroughHostRoot(t *testing.T) {
	n := fakeNode{root: t.TempDir()}
	for p, data := range map[string]string{
		"/gpurun-host-root":             "",
		"/proc/1/comm":                  "systemd\n",
		install.DefaultContainerdConfig: "version = 2\n",
	} {
		if err := os.MkdirAll(filepath.Dir(n.path(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.path(p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(n.path("/usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	helper, err := os.ReadFile(staticHelper(t, fakeNsenter))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.path("/usr/bin/nsenter"), helper, 0o755); err != nil {
		t.Fatal(err)
	}
	// gpurun checks that the host root's /proc/self is itself: a launcher
	// points it at its own pid, then execs gpurun (same pid).
	launcher := staticHelper(t, selfLauncher)
	run := func(t *testing.T, self string) (string, error) {
		t.Helper()
		args := []string{n.path("/proc/self"), self, bin(t, "gpurun"), "install", "containerd", "--host-root", n.root,
			"--runtime-path", "/usr/local/bin/gpurun-runtime", "--restart=systemd"}
		out, err := exec.Command(launcher, args...).CombinedOutput()
		return string(out), err
	}
	t.Run("another PID namespace is refused", func(t *testing.T) {
		out, err := run(t, "4242424")
		if err == nil || !strings.Contains(out, "hostPID") {
			t.Errorf("got %v\n%s", err, out)
		}
		if _, err := os.Stat(n.path("/nsenter-args")); err == nil {
			t.Error("nsenter ran")
		}
	})
	t.Run("restart through PID 1's systemd", func(t *testing.T) {
		out, err := run(t, "")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		rec, err := os.ReadFile(n.path("/nsenter-args"))
		if err != nil {
			t.Fatalf("nsenter did not run (or not chrooted into the host root): %v\n%s", err, out)
		}
		want := "--target 1 --mount -- systemctl restart containerd.service\nchrooted=yes\ncwd=/\n"
		if !strings.HasPrefix(string(rec), want) {
			t.Errorf("nsenter ran as\n%s\nwant\n%s", rec, want)
		}
		if !strings.Contains(out, "restarted containerd through the node's systemd") {
			t.Errorf("output: %s", out)
		}
	})
}

// selfLauncher makes the symlink os.Args[1] point at os.Args[2], or at its
// own pid when that is empty, then execs os.Args[3:] (keeping its pid).
const selfLauncher = `package main

import (
	"os"
	"strconv"
	"syscall"
)

func main() {
	target := os.Args[2]
	if target == "" {
		target = strconv.Itoa(os.Getpid())
	}
	_ = os.Remove(os.Args[1])
	if err := os.Symlink(target, os.Args[1]); err != nil {
		os.Exit(3)
	}
	if err := syscall.Exec(os.Args[3], os.Args[3:], os.Environ()); err != nil {
		os.Exit(4)
	}
}
`

// TestContainerdSIGHUPDoesNotReload is the fact restart mode "signal"
// rests on: containerd handles no SIGHUP (no reload), so the signal kills
// it; gpurun sends SIGTERM instead, on which it stops cleanly.
func TestContainerdSIGHUPDoesNotReload(t *testing.T) {
	c := harness.StartContainerd(t, harness.ContainerdOptions{})
	pid := c.PID
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatal("containerd survived SIGHUP: it may reload on it now; revisit restart mode signal")
	}
	c.Restart() // for the cleanup
}

// TestRestartSignal has `gpurun install containerd --restart=signal` make a
// real containerd read its new config: SIGTERM, then (the test acting as
// systemd's Restart=always) a new containerd on the same config. The pod
// that ran before keeps running, and the new handler works.
func TestRestartSignal(t *testing.T) {
	config, logFile := shimConfig(t, "")
	c := harness.StartContainerd(t, harness.ContainerdOptions{Env: []string{policy.ConfigEnv + "=" + config}})
	before := c.RunPod(harness.PodOptions{Name: "before"})
	ctr := c.CreateContainer(before, harness.ContainerOptions{Name: "app"})
	c.StartContainer(ctr)
	oldPID := c.PID

	supervised := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for syscall.Kill(oldPID, 0) == nil {
			select {
			case <-ctx.Done():
				supervised <- ctx.Err()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		supervised <- c.TryRestart()
	}()
	out, err := exec.Command(bin(t, "gpurun"), "install", "containerd", "--config", c.ConfigPath,
		"--runtime-path", bin(t, "gpurun-runtime"), "--state", filepath.Join(t.TempDir(), "state.json"),
		"--policy", config, "--restart=signal").CombinedOutput()
	if err != nil {
		cancel()
		t.Fatalf("gpurun install --restart=signal: %v\n%s\ncontainerd: %s", err, out, c.LogTail(20))
	}
	if err := <-supervised; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "sent SIGTERM to containerd (pid "+strconv.Itoa(oldPID)+")") || !strings.Contains(string(out), "containerd restarted (pid ") {
		t.Errorf("output:\n%s", out)
	}
	if _, err := c.Exec(ctr, "true"); err != nil {
		t.Errorf("the pod that ran before the restart: %v", err)
	}
	pod := c.RunPod(harness.PodOptions{Name: "after", RuntimeHandler: install.RuntimeName})
	gpu := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
	c.StartContainer(gpu)
	shm, err := c.Exec(gpu, "df", "-k", "/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	if got := dfKiB(t, shm); got != hostTarget(t)/1024 {
		t.Errorf("/dev/shm %d KiB after the restart, want %d\n%s", got, hostTarget(t)/1024, readFile(logFile))
	}
}

// runGPUPod runs a GPU pod through the CRI — with the runtime handler
// gpurun, or the default one when setDefault — and checks that its
// /dev/shm is the source policy's target for this host. It returns the
// pod, still running.
func runGPUPod(t *testing.T, c *harness.Containerd, source, sourceText string, setDefault bool, logFile string) string {
	t.Helper()
	pol, err := policy.Parse(source, []byte(sourceText))
	if err != nil {
		t.Fatal(err)
	}
	target := policyHostTarget(t, pol)
	handler := install.RuntimeName
	if setDefault {
		handler = "" // no RuntimeClass: the default handler
	}
	pod := c.RunPod(harness.PodOptions{Name: "trainer", RuntimeHandler: handler})
	ctr := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
	c.StartContainer(ctr)
	shm, err := c.Exec(ctr, "df", "-k", "/dev/shm")
	if err != nil {
		t.Fatalf("exec: %v\ngpurun-runtime log: %s\ncontainerd: %s", err, readFile(logFile), c.LogTail(20))
	}
	if got := dfKiB(t, shm); got != target/1024 {
		t.Errorf("/dev/shm of a GPU container with handler %q: %d KiB, want %d (the source policy's target)\ngpurun-runtime log: %s", handler, got, target/1024, readFile(logFile))
	}
	return pod
}
