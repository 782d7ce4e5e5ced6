package restart

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
)

// fakeEnv makes the test binary act as a containerd: it listens on the
// [grpc] address of its --config and exits 0 on SIGTERM.
const fakeEnv = "GPURUN_TEST_FAKE_CONTAINERD"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeContainerd(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeContainerd(args []string) int {
	cfg, _ := configArg(append([]string{"containerd"}, args...))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	sock, err := socketOf(context.Background(), "", cfg)
	if err != nil {
		return 4
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return 3
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	<-term
	l.Close()
	return 0
}

// startFake starts a fake containerd named name (the process's comm) with
// args, and stops it when the test ends.
func startFake(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, args...)
	cmd.Env = append(os.Environ(), fakeEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
	// Wait until it runs as itself (comm set by exec).
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		comm, _ := os.ReadFile(filepath.Join("/proc", itoa(cmd.Process.Pid), "comm"))
		if strings.TrimSpace(string(comm)) == name {
			return cmd
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fake %s did not start", name)
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// writeConfig writes a containerd config naming a socket; both live in a
// fresh directory with a short path (unix socket paths are limited).
func writeConfig(t *testing.T) (config, sock string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gpurun-rst-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	config = filepath.Join(dir, "config.toml")
	sock = filepath.Join(dir, "c.sock")
	if err := os.WriteFile(config, []byte("version = 2\n[grpc]\n  address = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return config, sock
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", None, false},
		{"none", None, false},
		{"systemd", Systemd, false},
		{"signal", Signal, false},
		{"SIGHUP", "", true},
		{"true", "", true},
	} {
		got, err := ParseMode(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseMode(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), Modes) {
			t.Errorf("ParseMode(%q) error %q does not list the modes", tc.in, err)
		}
	}
}

func TestConfigArg(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		want   string
		daemon bool
	}{
		{[]string{"/usr/bin/containerd"}, DefaultContainerdConfig, true},
		{[]string{"containerd", "--config", "/a.toml"}, "/a.toml", true},
		{[]string{"containerd", "-c", "/b.toml", "--log-level", "debug"}, "/b.toml", true},
		{[]string{"containerd", "--log-level", "debug", "--config=/c.toml"}, "/c.toml", true},
		{[]string{"containerd", "--address", "/run/x.sock"}, DefaultContainerdConfig, true},
		{[]string{"containerd", "config", "dump"}, "", false},
		{[]string{"containerd", "--config", "/a.toml", "config", "default"}, "", false},
		{[]string{"containerd", "publish", "--topic", "/x"}, "", false},
	} {
		got, ok := configArg(tc.args)
		if got != tc.want || ok != tc.daemon {
			t.Errorf("configArg(%q) = %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.daemon)
		}
	}
}

func TestFindContainerd(t *testing.T) {
	config, _ := writeConfig(t)
	other, _ := writeConfig(t)
	ours := startFake(t, "containerd", "--config", config)
	startFake(t, "containerd", "--config", other)
	startFake(t, "not-containerd", "--config", config)
	procs, err := FindContainerd("", config)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].PID != ours.Process.Pid {
		t.Fatalf("found %+v, want only pid %d", procs, ours.Process.Pid)
	}
	if d := time.Since(procs[0].Started); d < -time.Second || d > time.Minute {
		t.Errorf("started %s ago", d)
	}
	// Through a host root whose /proc is this host's: the same process.
	host := t.TempDir()
	if err := os.Symlink("/proc", filepath.Join(host, "proc")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(host, filepath.Dir(config)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(config, filepath.Join(host, config)); err != nil {
		t.Fatal(err)
	}
	procs, err = FindContainerd(host, config)
	if err != nil || len(procs) != 1 || procs[0].PID != ours.Process.Pid {
		t.Errorf("through host root: %+v, %v", procs, err)
	}
	// A containerd whose config imports ours reads it too.
	importer, _ := writeConfig(t)
	if err := os.WriteFile(importer, []byte("version = 2\nimports = [\""+config+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	viaImport := startFake(t, "containerd", "--config", importer)
	procs, err = FindContainerd("", config)
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.PID)
	}
	slices.Sort(pids)
	want := []int{ours.Process.Pid, viaImport.Process.Pid}
	slices.Sort(want)
	if err != nil || !slices.Equal(pids, want) {
		t.Errorf("with an importing containerd: pids %v, %v; want %v", pids, err, want)
	}
	all, err := ListContainerd("")
	if err != nil {
		t.Fatal(err)
	}
	configs := map[int]string{}
	for _, p := range all {
		configs[p.PID] = p.Config
	}
	if configs[ours.Process.Pid] != config || configs[viaImport.Process.Pid] != importer || len(configs) < 3 {
		t.Errorf("ListContainerd: %v", configs)
	}
}

func TestSignalRestart(t *testing.T) {
	config, sock := writeConfig(t)
	first := startFake(t, "containerd", "--config", config)
	// The supervisor: start a new one once the first has exited.
	restarted := make(chan *exec.Cmd, 1)
	go func() {
		for !exited(first.Process.Pid) {
			time.Sleep(20 * time.Millisecond)
		}
		self, _ := os.Executable()
		link := filepath.Join(filepath.Dir(config), "containerd")
		_ = os.Symlink(self, link)
		cmd := exec.Command(link, "--config", config)
		cmd.Env = append(os.Environ(), fakeEnv+"=1")
		if cmd.Start() != nil {
			cmd = nil
		}
		restarted <- cmd
	}()
	var out bytes.Buffer
	err := Containerd{Mode: Signal, ConfigPath: config, Timeout: 20 * time.Second, Out: &out}.Restart(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	cmd := <-restarted
	if cmd == nil {
		t.Fatal("the supervisor could not start a new containerd")
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	if !strings.Contains(out.String(), "restarted (pid "+itoa(pid)+")") || !strings.Contains(out.String(), sock) {
		t.Errorf("output does not name the new pid %d and socket %s:\n%s", pid, sock, out.String())
	}
}

func exited(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	data, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i > 0 && i+2 < len(data) && data[i+2] == 'Z'
}

func TestSignalRestartWithoutSupervisor(t *testing.T) {
	config, _ := writeConfig(t)
	startFake(t, "containerd", "--config", config)
	err := Containerd{Mode: Signal, ConfigPath: config, Timeout: 2 * time.Second}.Restart(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no new containerd started") {
		t.Errorf("got %v, want an error saying no containerd came back", err)
	}
}

func TestSignalRestartFindsNone(t *testing.T) {
	config, _ := writeConfig(t)
	err := Containerd{Mode: Signal, ConfigPath: config, Timeout: time.Second}.Restart(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no running containerd reads "+config) {
		t.Errorf("got %v", err)
	}
}

func TestHostChecks(t *testing.T) {
	noProc := t.TempDir()
	foreign := t.TempDir()
	if err := os.MkdirAll(filepath.Join(foreign, "proc", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("4242424", filepath.Join(foreign, "proc", "self")); err != nil {
		t.Fatal(err)
	}
	same := t.TempDir()
	if err := os.Symlink("/proc", filepath.Join(same, "proc")); err != nil {
		t.Fatal(err)
	}
	pid1, _ := os.ReadFile("/proc/1/comm")
	for _, tc := range []struct {
		name, root string
		mode       Mode
		want       string
	}{
		{"no /proc under the host root", noProc, Systemd, "mount the node's root"},
		{"another PID namespace", foreign, Systemd, "hostPID"},
		{"another PID namespace, signal", foreign, Signal, "hostPID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Containerd{HostRoot: tc.root, Mode: tc.mode, Timeout: time.Second}.Restart(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if strings.TrimSpace(string(pid1)) != "systemd" {
		t.Run("PID 1 is not systemd", func(t *testing.T) {
			err := Containerd{HostRoot: same, Mode: Systemd, Timeout: time.Second}.Restart(context.Background())
			if err == nil || !strings.Contains(err.Error(), "not systemd") {
				t.Errorf("got %v", err)
			}
		})
	}
}

func TestNoneSaysHow(t *testing.T) {
	var out bytes.Buffer
	if err := (Containerd{Out: &out}).Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "systemctl restart containerd") {
		t.Errorf("none printed %q", out.String())
	}
}

func TestSocketOf(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, config, want, err string }{
		{"version 2", "version = 2\n[grpc]\n  address = \"/run/a.sock\"\n", "/run/a.sock", ""},
		{"version 4", "version = 4\n[plugins]\n  [plugins.'io.containerd.server.v1.grpc']\n    address = '/run/b.sock'\n", "/run/b.sock", ""},
		{"version 3, from a drop-in", "version = 3\nimports = [\"drop-in.toml\"]\n[grpc]\n  address = \"/run/main.sock\"\n", "/run/drop-in.sock", ""},
		{"none", "version = 2\n", containerd.DefaultAddress, ""},
		{"not TOML", "version = \n", "", "not-TOML.toml:1:11: toml:"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
		p = strings.ReplaceAll(strings.ReplaceAll(p, ",", ""), "-from-a-drop-in", "")
		if err := os.WriteFile(p, []byte(tc.config), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "drop-in.toml"), []byte("version = 3\n[grpc]\n  address = \"/run/drop-in.sock\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := socketOf(context.Background(), "", p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %q, %v; want an error with %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	// Through a host root, a path here.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/containerd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, DefaultContainerdConfig), []byte("version = 2\n[grpc]\n  address = \"/run/k3s/containerd.sock\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := socketOf(context.Background(), root, DefaultContainerdConfig); err != nil || got != filepath.Join(root, "/run/k3s/containerd.sock") {
		t.Errorf("host root: %q, %v", got, err)
	}
}
