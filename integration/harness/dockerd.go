package harness

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DockerdOptions configures [StartDockerd].
type DockerdOptions struct {
	// DaemonJSON is written to the daemon's --config-file (Dockerd.ConfigPath).
	// Keys that duplicate the harness's flags (hosts, data-root, exec-root,
	// pidfile, bridge, iptables, containerd) make dockerd refuse to start.
	// Unless set here, "deprecated-key-path" is pointed into the daemon's
	// directory so that dockerd 20.10 does not read or create
	// /etc/docker/key.json.
	DaemonJSON map[string]any
	// Args are extra dockerd flags.
	Args []string
	// Env is added to the environment of dockerd and of the containerd it
	// uses, so it reaches the runtimes their shims call (for example a
	// GPURUN_CONFIG for gpurun-runtime).
	Env []string
	// Bridge gives the daemon docker's default bridge network (docker0,
	// with iptables) inside its own network namespace, instead of
	// --bridge=none; the host's network is untouched either way.
	Bridge bool
}

// Dockerd is a private Docker daemon with its own containerd, sockets and
// directories under Dir.
type Dockerd struct {
	// Dir holds everything of this daemon; it is removed by the cleanup.
	Dir string
	// Socket is the path of the API socket.
	Socket string
	// Host is "unix://" + Socket, the value for DOCKER_HOST.
	Host string
	// ConfigPath is the daemon.json given to --config-file; tests may edit
	// it (or run an installer over it) and call Reload.
	ConfigPath string
	// DataRoot is --data-root (containers/<id>/mounts/shm live below it).
	DataRoot string
	// ExecRoot is --exec-root (runtime-runc/moby, the runc root, lives below it).
	ExecRoot string
	// ContainerdAddress is the socket of the containerd serving this daemon.
	ContainerdAddress string
	// PID is dockerd's process id.
	PID int
	// NetNS is the network namespace dockerd and its containerd run in, and
	// with them every container that has none of its own (--network host).
	NetNS *NetNS

	t       testing.TB
	logPath string
	proc    *process
	ctd     *process
	ctdLog  string
	shared  *dockerdShared
}

// dockerdShared is the mutable state shared by a Dockerd and its views (For).
type dockerdShared struct {
	mu      sync.Mutex
	busybox string
}

// For returns a view of the same daemon whose methods report failures to t,
// for use in a subtest (t.Fatal must be called from the test's goroutine).
// The cleanup stays with the test that started the daemon.
func (d *Dockerd) For(t testing.TB) *Dockerd {
	v := *d
	v.t = t
	return &v
}

// StartDockerd starts a private dockerd (--bridge=none, --iptables=false)
// listening on its own unix socket, backed by a containerd the harness
// starts for it (so that it never attaches to a system containerd at
// /run/containerd/containerd.sock), both in a network namespace of their
// own (NetNS: dockerd deletes any docker0 bridge it finds in its namespace
// when told --bridge=none, and the host's must stay), and waits until it
// answers /_ping. The cleanup removes its containers, stops both daemons,
// kills leftover shims, unmounts everything below Dir, removes Dir and the
// namespace.
func StartDockerd(t testing.TB, opts DockerdOptions) *Dockerd {
	t.Helper()
	requireRoot(t)
	dockerd := requireBinary(t, "dockerd", "docker.io")
	requireBinary(t, "docker", "docker.io")
	ctdBin := requireBinary(t, "containerd", "containerd")
	requireBinary(t, "containerd-shim-runc-v2", "containerd")
	requireBinary(t, "runc", "runc")

	dir := makeDir(t, "d")
	// Registered before the daemons' cleanup, so removed after it.
	ns := NewNetNS(t, dir)
	d := &Dockerd{
		Dir:               dir,
		Socket:            filepath.Join(dir, "docker.sock"),
		ConfigPath:        filepath.Join(dir, "daemon.json"),
		DataRoot:          filepath.Join(dir, "root"),
		ExecRoot:          filepath.Join(dir, "exec"),
		ContainerdAddress: filepath.Join(dir, "ctd", "ctd.sock"),
		t:                 t,
		logPath:           filepath.Join(dir, "dockerd.log"),
		ctdLog:            filepath.Join(dir, "ctd", "containerd.log"),
		NetNS:             ns,
		shared:            &dockerdShared{},
	}
	d.Host = "unix://" + d.Socket
	t.Cleanup(d.cleanup)

	cfg := map[string]any{}
	for k, v := range opts.DaemonJSON {
		cfg[k] = v
	}
	if _, ok := cfg["deprecated-key-path"]; !ok {
		cfg["deprecated-key-path"] = filepath.Join(dir, "key.json")
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatalf("harness: encode daemon.json: %v", err)
	}
	if err := os.WriteFile(d.ConfigPath, append(data, '\n'), 0o644); err != nil {
		t.Fatalf("harness: write daemon.json: %v", err)
	}

	// The containerd for this daemon.
	ctdDir := filepath.Join(dir, "ctd")
	if err := os.MkdirAll(ctdDir, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	ctdConf := filepath.Join(ctdDir, "config.toml")
	if err := os.WriteFile(ctdConf, []byte(dockerContainerdConfig(ctdDir, d.ContainerdAddress)), 0o644); err != nil {
		t.Fatalf("harness: write containerd config: %v", err)
	}
	begin := time.Now()
	d.ctd, err = startProcess("containerd (for dockerd)", d.ctdLog, []string{ctdBin, "--config", ctdConf}, append(os.Environ(), opts.Env...), ns)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := waitSocket(d.ContainerdAddress, d.ctd); err != nil {
		t.Fatalf("harness: containerd for dockerd did not come up: %v\n--- containerd log tail ---\n%s", err, logTail(d.ctdLog, 40))
	}

	argv := []string{dockerd,
		"-H", d.Host,
		"--data-root", d.DataRoot,
		"--exec-root", d.ExecRoot,
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"--config-file", d.ConfigPath,
		"--containerd", d.ContainerdAddress,
	}
	if !opts.Bridge {
		argv = append(argv, "--bridge=none", "--iptables=false", "--ip6tables=false")
	}
	argv = append(argv, opts.Args...)
	d.proc, err = startProcess("dockerd", d.logPath, argv, append(os.Environ(), opts.Env...), ns)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	d.PID = d.proc.pid
	if err := d.waitPing(startTimeout); err != nil {
		t.Fatalf("harness: dockerd did not answer: %v\n--- dockerd log tail ---\n%s", err, d.LogTail(40))
	}
	t.Logf("harness: dockerd pid %d on %s ready in %s", d.PID, d.Host, time.Since(begin).Round(time.Millisecond))
	return d
}

// dockerContainerdConfig is the config of the containerd serving a private
// dockerd: no CRI, its own root, state and sockets.
func dockerContainerdConfig(dir, addr string) string {
	return fmt.Sprintf(`version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %s

[ttrpc]
  address = %s

[plugins."io.containerd.internal.v1.opt"]
  path = %s
`, tomlString(filepath.Join(dir, "root")), tomlString(filepath.Join(dir, "state")),
		tomlString(addr), tomlString(addr+".ttrpc"), tomlString(filepath.Join(dir, "opt")))
}

// waitSocket waits until a unix socket accepts connections.
func waitSocket(path string, p *process) error {
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("process exited (%v) before %s accepted connections", p.waitErr, path)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w (after %s)", path, err, startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// httpClient returns an HTTP client that talks to the daemon's socket.
func (d *Dockerd) httpClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var nd net.Dialer
				return nd.DialContext(ctx, "unix", d.Socket)
			},
			DisableKeepAlives: true,
		},
	}
}

// ping does GET /_ping once.
func (d *Dockerd) ping() error {
	resp, err := d.httpClient().Get("http://docker/_ping")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/_ping: %s: %s", resp.Status, body)
	}
	return nil
}

// waitPing polls /_ping until it answers 200, the daemon exits or timeout.
func (d *Dockerd) waitPing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := d.ping()
		if err == nil {
			return nil
		}
		if d.proc.exited() {
			return fmt.Errorf("dockerd exited: %v", d.proc.waitErr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s after %s: %w", d.Socket, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Env returns the environment for a docker client of this daemon: the
// test's environment with DOCKER_HOST set and other DOCKER_* connection
// settings removed.
func (d *Dockerd) Env() []string {
	env := envWithout("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_TLS", "XDG_CACHE_HOME")
	// gpurun keeps what it learns of a daemon under $XDG_CACHE_HOME: in
	// the daemon's directory, not the user's.
	return append(env, "DOCKER_HOST="+d.Host, "XDG_CACHE_HOME="+filepath.Join(d.Dir, "cache"))
}

// DockerCmd returns an unstarted docker CLI command aimed at this daemon,
// for tests that need a pty, stdin or signals.
func (d *Dockerd) DockerCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("docker", args...)
	cmd.Env = d.Env()
	return cmd
}

// Docker runs the docker CLI against this daemon and returns its output;
// the error carries the arguments, the exit status and stderr.
func (d *Dockerd) Docker(args ...string) (stdout, stderr string, err error) {
	return runCmd(context.Background(), d.Env(), "docker", args...)
}

// LogTail returns the last n lines of dockerd's log.
func (d *Dockerd) LogTail(n int) string {
	return logTail(d.logPath, n)
}

// Reload sends SIGHUP so that dockerd rereads ConfigPath, waits until the
// reload is logged and the daemon answers again, and fails the test if the
// daemon rejected the configuration.
func (d *Dockerd) Reload() {
	d.t.Helper()
	if err := d.TryReload(); err != nil {
		d.t.Fatalf("harness: %v", err)
	}
}

// TryReload is Reload returning the error instead of failing the test (for
// tests that expect a configuration to be rejected).
func (d *Dockerd) TryReload() error {
	const okMsg = "Reloaded configuration"
	const errMsg = "level=error"
	okBefore := countLines(d.logPath, okMsg)
	errBefore := countLines(d.logPath, errMsg)
	if err := syscall.Kill(d.PID, syscall.SIGHUP); err != nil {
		return fmt.Errorf("SIGHUP dockerd (pid %d): %w", d.PID, err)
	}
	deadline := time.Now().Add(startTimeout)
	var sawErrAt time.Time
	for {
		if countLines(d.logPath, okMsg) > okBefore {
			break
		}
		if d.proc.exited() {
			return fmt.Errorf("dockerd exited during reload: %v\n--- dockerd log tail ---\n%s", d.proc.waitErr, d.LogTail(30))
		}
		if sawErrAt.IsZero() && countLines(d.logPath, errMsg) > errBefore {
			sawErrAt = time.Now()
		}
		if !sawErrAt.IsZero() && time.Since(sawErrAt) > 2*time.Second {
			return fmt.Errorf("dockerd rejected the reload of %s:\n--- dockerd log tail ---\n%s", d.ConfigPath, d.LogTail(15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dockerd did not log %q within %s after SIGHUP\n--- dockerd log tail ---\n%s", okMsg, startTimeout, d.LogTail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.waitPing(startTimeout); err != nil {
		return fmt.Errorf("dockerd after reload: %w", err)
	}
	return nil
}

// cleanup removes containers, stops the daemons and removes Dir.
func (d *Dockerd) cleanup() {
	var errs []error
	if d.proc != nil && !d.proc.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, _, err := runCmd(ctx, d.Env(), "docker", "ps", "-aq", "--no-trunc")
		if err != nil {
			errs = append(errs, fmt.Errorf("list containers: %w", err))
		} else if ids := strings.Fields(out); len(ids) > 0 {
			if _, _, err := runCmd(ctx, d.Env(), "docker", append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
				errs = append(errs, fmt.Errorf("remove containers: %w", err))
			}
		}
		cancel()
	}
	if d.proc != nil {
		if err := d.proc.stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if d.ctd != nil {
		if err := d.ctd.stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, killShims(d.t, d.Dir, d.ContainerdAddress)...)
	// Cgroups of containers that were not removed cleanly (a killed daemon).
	ents, _ := os.ReadDir(filepath.Join(d.DataRoot, "containers"))
	for _, e := range ents {
		if err := removeCgroup("docker/" + e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeDir(d.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		d.t.Errorf("harness: dockerd cleanup of %s: %v\n--- dockerd log tail ---\n%s", d.Dir, err, d.LogTail(20))
	}
}

// killShims kills every process whose command line mentions dir (shims and
// anything else this instance left behind) and removes the sockets of the
// containerd shims among them, which containerd keeps in
// /run/containerd/s/<sha256(address/namespace/id)>, whatever its state
// dir: those of shims whose -address is address, or, with address "" (a
// cluster's several containerds), a socket under dir — never another
// containerd's, the host's included.
func killShims(t testing.TB, dir, address string) []error {
	t.Helper()
	procs := procsReferencing(dir)
	if len(procs) == 0 {
		return nil
	}
	var pids []int
	var socks []string
	var desc []string
	for pid, argv := range procs {
		pids = append(pids, pid)
		desc = append(desc, fmt.Sprintf("%d %s", pid, strings.Join(argv, " ")))
		ns, id, addr := flagValue(argv, "-namespace"), flagValue(argv, "-id"), flagValue(argv, "-address")
		ours := addr == address || address == "" && strings.HasPrefix(addr, filepath.Clean(dir)+"/")
		if ns != "" && id != "" && addr != "" && ours {
			sum := sha256.Sum256([]byte(filepath.Join(addr, ns, id)))
			socks = append(socks, fmt.Sprintf("/run/containerd/s/%x", sum))
		}
	}
	var errs []error
	if err := killProcs(pids); err != nil {
		errs = append(errs, err)
	}
	for _, s := range socks {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	// Leftovers are a symptom (the engine did not stop its children), not
	// an error by themselves: report them in the test log.
	t.Logf("harness: killed leftover processes of %s:\n%s", dir, strings.Join(desc, "\n"))
	return errs
}

// flagValue returns the value following flag in argv, or "".
func flagValue(argv []string, flag string) string {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			return argv[i+1]
		}
	}
	return ""
}
