package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// fakeEnv makes the test binary act as a containerd that waits for
// SIGTERM.
const fakeEnv = "GPURUN_TEST_FAKE_CONTAINERD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	if os.Getenv(fakeEnv) == "1" {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		<-term
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const containerdTestdata = "../../engine/containerd/testdata/"

// node is a fake node: a host root with a containerd config, and an image
// directory with the two binaries.
type node struct {
	root, image, source string
	log                 bytes.Buffer
}

func newNode(t testing.TB, configFile string) *node {
	t.Helper()
	n := &node{root: t.TempDir(), image: t.TempDir()}
	cfg, err := os.ReadFile(containerdTestdata + configFile)
	if err != nil {
		t.Fatal(err)
	}
	n.write(t, install.DefaultContainerdConfig, string(cfg), 0o644)
	for _, b := range Binaries() {
		if err := os.WriteFile(filepath.Join(n.image, b), []byte("#!/bin/true "+b+" v1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.source = filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(n.source, []byte("# the DaemonSet's policy\nsize = \"40%\"\nmin = \"2g\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The node's /proc: the processes of this host that a test shows it
	// (startFake), so that containerd (none, or a fake) is looked for
	// among real processes, but not those of this host's own containerd.
	proc := filepath.Join(n.root, "proc")
	if err := os.Mkdir(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/uptime", filepath.Join(proc, "uptime")); err != nil {
		t.Fatal(err)
	}
	return n
}

// showProcess makes a process of this host one of the node's.
func (n *node) showProcess(t testing.TB, pid int) {
	t.Helper()
	if err := os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(n.root, "proc", strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
}

func (n *node) path(p string) string { return filepath.Join(n.root, p) }

func (n *node) write(t testing.TB, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(n.path(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.path(p), []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

func (n *node) read(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(n.path(p))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (n *node) agent(setDefault bool) *Agent {
	return &Agent{
		HostRoot:     n.root,
		SourceDir:    n.image,
		PolicySource: n.source,
		SetAsDefault: setDefault,
		Log:          slog.New(slog.NewTextHandler(&n.log, nil)),
		Now:          func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
	}
}

// snapshot maps every path under the host root (but /proc) to its mode and
// content.
func (n *node) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(n.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(n.root, p)
		if rel == "proc" {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(data)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffSnapshots(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "gone: "+k)
		} else if v != w {
			d = append(d, "changed: "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "added: "+k)
		}
	}
	return strings.Join(d, "\n")
}

// handler reads the runtime handler gpurun registered, as containerd
// reads the node's config.
func (n *node) handler(t *testing.T) (registered, isDefault bool) {
	t.Helper()
	c, err := containerd.Load(context.Background(), install.DefaultContainerdConfig, containerd.LoadOptions{Root: n.root})
	if err != nil {
		t.Fatal(err)
	}
	r, ok := c.Runtime(install.RuntimeName)
	return ok && r.BinaryName == filepath.Join(DefaultBinDir, RuntimeBinary), c.DefaultRuntime() == install.RuntimeName
}

func TestInstallUninstall(t *testing.T) {
	for _, tc := range []struct {
		file       string
		setDefault bool
		existing   bool // a gpurun binary and a policy file are on the node already
	}{
		{"containerd-1.6.20-config-default.toml", false, false},
		{"containerd-1.6.20-config-default.toml", true, false},
		{"debian-bookworm-containerd-1.6.20-etc-config.toml", false, true},
		{"containerd-2.2.9-config-default.toml", true, false},
		{"containerd-2.4.2-config-default.toml", false, true},
		{"nvidia-ctk-containerd-1.6.20-set-as-default.toml", true, false},
		{"empty.toml", true, true},
	} {
		name := strings.TrimSuffix(tc.file, ".toml")
		if tc.setDefault {
			name += "/default"
		}
		if tc.existing {
			name += "/existing-files"
		}
		t.Run(name, func(t *testing.T) {
			n := newNode(t, tc.file)
			if tc.existing {
				n.write(t, "/usr/local/bin/gpurun", "an older gpurun\n", 0o700)
				n.write(t, policy.DefaultConfigPath, "size = \"25%\"\n", 0o600)
			}
			before := n.snapshot(t)
			originalConfig := n.read(t, install.DefaultContainerdConfig)
			a := n.agent(tc.setDefault)
			if err := a.Install(context.Background()); err != nil {
				t.Fatalf("install: %v\n%s", err, n.log.String())
			}
			for _, b := range Binaries() {
				want, _ := os.ReadFile(filepath.Join(n.image, b))
				p := filepath.Join(DefaultBinDir, b)
				if got := n.read(t, p); got != string(want) {
					t.Errorf("%s = %q, want the image's %q", p, got, want)
				}
				if fi, _ := os.Stat(n.path(p)); fi.Mode().Perm() != 0o755 {
					t.Errorf("%s mode %v", p, fi.Mode())
				}
			}
			if h, d := n.handler(t); !h || d != tc.setDefault {
				t.Errorf("handler registered %v, default %v; want true, %v", h, d, tc.setDefault)
			}
			src, _ := os.ReadFile(n.source)
			pol := n.read(t, policy.DefaultConfigPath)
			if !strings.HasPrefix(tc.file, "nvidia") && pol != string(src) {
				t.Errorf("node policy %q, want the source %q", pol, src)
			}
			if strings.HasPrefix(tc.file, "nvidia") {
				// gpurun install chained nvidia's runtime into the policy.
				p, err := policy.Parse("node", []byte(pol))
				if err != nil || p.Runtime != "/usr/bin/nvidia-container-runtime" || !strings.Contains(pol, string(src[strings.Index(string(src), "size"):])) {
					t.Errorf("node policy %q (%v): want the source and the chained runtime", pol, err)
				}
			}
			// A second install changes nothing, also for the policy that
			// gpurun install chained a runtime into.
			installed := n.snapshot(t)
			if err := a.Install(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d := diffSnapshots(installed, n.snapshot(t)); d != "" {
				t.Errorf("second install changed:\n%s", d)
			}
			if err := a.Uninstall(context.Background()); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, n.log.String())
			}
			if got := n.read(t, install.DefaultContainerdConfig); got != originalConfig {
				t.Errorf("config not restored byte for byte")
			}
			if d := diffSnapshots(before, n.snapshot(t)); d != "" {
				t.Errorf("uninstall left the node different:\n%s\nlog:\n%s", d, n.log.String())
			}
		})
	}
}

func TestUpgradeReplacesBinaries(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(false)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	newer := "#!/bin/true gpurun-runtime v2\n"
	if err := os.WriteFile(filepath.Join(n.image, RuntimeBinary), []byte(newer), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.read(t, "/usr/local/bin/gpurun-runtime"); got != newer {
		t.Errorf("after the image changed: %q", got)
	}
	if st := a.Status(); len(st.Problems) != 0 {
		t.Errorf("problems after upgrade: %v", st.Problems)
	}
}

func TestSwitchFromDefaultToRuntimeClass(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	original := n.read(t, install.DefaultContainerdConfig)
	if err := n.agent(true).Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, d := n.handler(t); !d {
		t.Fatal("not the default")
	}
	a := n.agent(false)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h, d := n.handler(t); !h || d {
		t.Errorf("after switching: registered %v, default %v; want true, false", h, d)
	}
	if err := a.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n.read(t, install.DefaultContainerdConfig) != original {
		t.Error("config not restored")
	}
}

// TestDropInMoves: an agent whose drop-in setting differs from the
// record's (a node set up in place by a release whose default-runtime mode
// had no drop-in, upgraded to one that has) moves gpurun's registration:
// out of the place it was, into the new one; back again the same way; and
// the uninstall leaves containerd's config as it was.
func TestDropInMoves(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
	}{
		{"in place to a drop-in", "", "/etc/containerd/gpurun.d"},
		{"a drop-in to in place", "/etc/containerd/gpurun.d", ""},
		{"one drop-in to another", "/etc/containerd/gpurun.d", "/etc/containerd/gpu.d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "containerd-1.6.20-config-default.toml")
			original := n.read(t, install.DefaultContainerdConfig)
			a := n.agent(true)
			a.DropInDir = tc.from
			if err := a.Install(context.Background()); err != nil {
				t.Fatal(err)
			}
			b := n.agent(true)
			b.DropInDir = tc.to
			if err := b.Install(context.Background()); err != nil {
				t.Fatalf("install with --drop-in %q after %q: %v\n%s", tc.to, tc.from, err, n.log.String())
			}
			if h, d := n.handler(t); !h || !d {
				t.Errorf("after the move: registered %v, default %v; want both", h, d)
			}
			for _, dir := range []string{tc.from, tc.to} {
				if dir == "" {
					continue
				}
				_, err := os.Stat(n.path(filepath.Join(dir, install.DropInName)))
				if want := dir == tc.to; (err == nil) != want {
					t.Errorf("%s after the move: %v; want it there %v", filepath.Join(dir, install.DropInName), err, want)
				}
			}
			cfg := n.read(t, install.DefaultContainerdConfig)
			if tc.to == "" && strings.Contains(cfg, install.DropInName) {
				t.Errorf("in place, config.toml still imports a drop-in:\n%s", cfg)
			}
			if tc.to != "" && !strings.Contains(cfg, filepath.Join(tc.to, install.DropInName)) {
				t.Errorf("config.toml does not import %s:\n%s", tc.to, cfg)
			}
			if rec, err := loadRecord(n.path(DefaultStatePath)); err != nil || rec.Containerd.DropInDir != tc.to {
				t.Errorf("record %+v, %v; want drop-in %q", rec, err, tc.to)
			}
			if err := b.Uninstall(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n.read(t, install.DefaultContainerdConfig) != original {
				t.Errorf("config not restored:\n%s", n.read(t, install.DefaultContainerdConfig))
			}
		})
	}
}

func TestInstallRefuses(t *testing.T) {
	t.Run("a bad policy source, before changing anything", func(t *testing.T) {
		n := newNode(t, "containerd-1.6.20-config-default.toml")
		if err := os.WriteFile(n.source, []byte("size = \"40%\"\nmni = \"2g\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := n.snapshot(t)
		err := n.agent(false).Install(context.Background())
		if err == nil || !strings.Contains(err.Error(), n.source+":2") || !strings.Contains(err.Error(), "mni") {
			t.Errorf("got %v, want an error naming %s line 2 and the key", err, n.source)
		}
		if d := diffSnapshots(before, n.snapshot(t)); d != "" {
			t.Errorf("changed the node:\n%s", d)
		}
	})
	t.Run("another bin dir than the record's", func(t *testing.T) {
		n := newNode(t, "containerd-1.6.20-config-default.toml")
		if err := n.agent(false).Install(context.Background()); err != nil {
			t.Fatal(err)
		}
		a := n.agent(false)
		a.BinDir = "/opt/gpurun/bin"
		if err := a.Install(context.Background()); err == nil || !strings.Contains(err.Error(), "--bin-dir") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("a bad restart mode", func(t *testing.T) {
		n := newNode(t, "containerd-1.6.20-config-default.toml")
		a := n.agent(false)
		a.Restart = "sighup"
		if err := a.Install(context.Background()); err == nil || !strings.Contains(err.Error(), "restart mode") {
			t.Errorf("got %v", err)
		}
	})
}

func TestPolicySync(t *testing.T) {
	n := newNode(t, "nvidia-ctk-containerd-1.6.20-set-as-default.toml")
	a := n.agent(true)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	chained := chainedLine([]byte(n.read(t, policy.DefaultConfigPath)))
	if chained == "" {
		t.Fatalf("gpurun install chained no runtime into %q (its comment no longer says %q?)", n.read(t, policy.DefaultConfigPath), install.ChainMarker)
	}
	// The ConfigMap changes: the node follows, keeping the chained runtime.
	if err := os.WriteFile(n.source, []byte("size = \"30%\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, _ := loadRecord(n.path(DefaultStatePath))
	if wrote, err := a.syncPolicy(rec); err != nil || !wrote {
		t.Fatalf("sync: wrote %v, %v", wrote, err)
	}
	got := n.read(t, policy.DefaultConfigPath)
	if want := chained + "\nsize = \"30%\"\n"; got != want {
		t.Errorf("node policy %q, want %q", got, want)
	}
	// A source that sets its own runtime wins.
	if err := os.WriteFile(n.source, []byte("runtime = \"crun\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.syncPolicy(rec); err != nil {
		t.Fatal(err)
	}
	if got := n.read(t, policy.DefaultConfigPath); got != "runtime = \"crun\"\n" {
		t.Errorf("node policy %q", got)
	}
}

// startFake starts a fake containerd reading the node's config; it stops
// with the test.
func startFake(t *testing.T, n *node) *exec.Cmd {
	t.Helper()
	return startFakeWith(t, n, n.path(install.DefaultContainerdConfig))
}

// startFakeWith starts a fake containerd of the node reading config (a
// path here); it stops with the test.
func startFakeWith(t *testing.T, n *node, config string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "containerd")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "--config", config)
	cmd.Env = append(os.Environ(), fakeEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.showProcess(t, cmd.Process.Pid)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	for i := 0; i < 500; i++ {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if strings.TrimSpace(string(comm)) == "containerd" {
			return cmd
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("fake containerd did not start")
	return nil
}

// touch sets a file's modification time.
func touch(t *testing.T, p string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
}

func TestStatus(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(false)
	if st := a.Status(); st.Ready || !strings.Contains(st.Reason, "not installed") {
		t.Errorf("before install: %+v", st)
	}
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); st.Ready || st.Reason != "containerd is not running" {
		t.Errorf("no containerd: %+v", st)
	}
	ctd := startFake(t, n)
	config := n.path(install.DefaultContainerdConfig)
	// containerd started before the config changed: it runs without gpurun.
	touch(t, config, time.Now().Add(time.Minute))
	st := a.Status()
	if st.Ready || st.ContainerdPID != ctd.Process.Pid || !strings.Contains(st.Reason, "has not read the configuration") {
		t.Errorf("stale containerd: %+v", st)
	}
	// It started after: ready, as an extra handler.
	touch(t, config, time.Now().Add(-time.Minute))
	st = a.Status()
	if !st.Ready || st.Default || !strings.Contains(st.Reason, "RuntimeClass gpurun") {
		t.Errorf("fresh containerd: %+v", st)
	}
	// The run loop records that run; the same bytes written again later
	// (uninstalled and installed without a restart) are still known to be
	// loaded, other bytes are not.
	n.agent(false).check1("")
	touch(t, config, time.Now().Add(time.Minute))
	if st := a.Status(); !st.Ready {
		t.Errorf("recorded run, same bytes: %+v", st)
	}
	n.write(t, install.DefaultContainerdConfig, n.read(t, install.DefaultContainerdConfig)+"\n", 0o644)
	touch(t, config, time.Now().Add(time.Minute))
	if st := a.Status(); st.Ready {
		t.Errorf("recorded run, other bytes: %+v", st)
	}
	// A binary that is not the one copied.
	n.write(t, "/usr/local/bin/gpurun-runtime", "something else", 0o755)
	if st := a.Status(); st.Ready || !strings.Contains(st.Reason, "not the file gpurun copied") {
		t.Errorf("changed binary: %+v", st)
	}
}

func TestUninstallKeepsRuntimeInUse(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(false)
	before := n.snapshot(t)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A pod sandbox whose shim calls gpurun-runtime.
	bundle := "/run/containerd/io.containerd.runtime.v2.task/k8s.io/0123456789abcdef0123"
	n.write(t, bundle+"/runtime", "/usr/local/bin/gpurun-runtime", 0o600)
	if err := a.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.path("/usr/local/bin/gpurun-runtime")); err != nil {
		t.Errorf("gpurun-runtime removed while a container uses it: %v", err)
	}
	st := a.Status()
	if st.Ready || !strings.Contains(st.Reason, "1 running container(s) use it (0123456789ab)") {
		t.Errorf("status %+v", st)
	}
	// The container is gone: the next uninstall finishes.
	if err := os.RemoveAll(n.path("/run")); err != nil {
		t.Fatal(err)
	}
	if err := a.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := diffSnapshots(before, n.snapshot(t)); d != "" {
		t.Errorf("left:\n%s", d)
	}
}

func TestUninstallKeepsRuntimeWhileContainerdHasIt(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(false)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	startFake(t, n) // started after the install: it has gpurun registered
	if err := a.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.path("/usr/local/bin/gpurun-runtime")); err != nil {
		t.Errorf("gpurun-runtime removed while containerd still has it registered: %v", err)
	}
	rec, _ := loadRecord(n.path(DefaultStatePath))
	if rec == nil || !strings.Contains(rec.Pending, "still runs with gpurun registered") {
		t.Errorf("record %+v", rec)
	}
}

func TestRunUninstallsOnExit(t *testing.T) {
	n := newNode(t, "containerd-2.4.2-config-default.toml")
	before := n.snapshot(t)
	a := n.agent(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, RunOptions{Interval: 10 * time.Millisecond, UninstallOnExit: true}) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(n.log.String(), "not ready: containerd is not running") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if h, d := n.handler(t); !h || !d {
		t.Errorf("while running: registered %v, default %v", h, d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := diffSnapshots(before, n.snapshot(t)); d != "" {
		t.Errorf("left:\n%s\nlog:\n%s", d, n.log.String())
	}
}

func TestRecordIsJSON(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(true)
	a.Restart = restart.None
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal([]byte(n.read(t, DefaultStatePath)), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Containerd.RuntimePath != "/usr/local/bin/gpurun-runtime" || !rec.Containerd.SetAsDefault || len(rec.Binaries) != len(Binaries()) || rec.Policy == nil || !rec.Policy.Created {
		t.Errorf("record %+v", rec)
	}
	for _, b := range rec.Binaries {
		data, _ := os.ReadFile(filepath.Join(n.image, b.Name))
		if b.SHA256 != sha(data) {
			t.Errorf("%s sha %s", b.Name, b.SHA256)
		}
	}
}

func TestUninstallWithoutRecord(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	original := n.read(t, install.DefaultContainerdConfig)
	a := n.agent(true)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The record is lost: the registration still goes (gpurun's marker
	// shows it); files the agent cannot tell as its own stay.
	if err := os.Remove(n.path(DefaultStatePath)); err != nil {
		t.Fatal(err)
	}
	if err := a.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n.read(t, install.DefaultContainerdConfig) != original {
		t.Error("config not restored")
	}
	if _, err := os.Stat(n.path("/usr/local/bin/gpurun-runtime")); err != nil {
		t.Errorf("without a record, gpurun-runtime was removed: %v", err)
	}
}
