package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PauseRef is the sandbox ("pause") image every Containerd imports at start:
// the busybox image of ImageTar with `sleep 2147483647` as its command. It
// holds all busybox applets, so tests may also use it as a container image.
const PauseRef = "docker.io/gpurun-test/pause:latest"

// CRINamespace is the containerd namespace of the CRI plugin.
const CRINamespace = "k8s.io"

// ContainerdOptions configures [StartContainerd].
type ContainerdOptions struct {
	// ExtraConfig is TOML appended to the generated config. It must consist
	// of tables only (a bare key would land in the preceding table) and
	// must not repeat a table the harness writes (see ContainerdConfig).
	ExtraConfig string
	// Runtimes registers CRI runtime handlers: name -> options.BinaryName
	// (runtime_type io.containerd.runc.v2). The handler "runc" (plain runc)
	// always exists unless overridden here.
	Runtimes map[string]string
	// DefaultRuntime is default_runtime_name; empty means "runc".
	DefaultRuntime string
	// PodAnnotations is pod_annotations of every runtime: pod annotations
	// matching these patterns reach the OCI spec.
	PodAnnotations []string
	// ContainerAnnotations is container_annotations of every runtime.
	ContainerAnnotations []string
	// Env is added to containerd's environment (and so to its shims' and
	// runtimes'), for example GPURUN_* settings or a PATH.
	Env []string
	// CRI holds the settings a kubelet's containerd needs.
	CRI CRISettings
	// NVIDIA, when set, makes this containerd a GPU node's: it runs in
	// that node's mount namespace (see NVIDIA).
	NVIDIA *NVIDIA
}

// CRISettings are the CRI plugin settings of a containerd that a kubelet
// drives (see [StartCluster]), beyond those of a bare CRI test's.
type CRISettings struct {
	// PodNetwork keeps the pods' network namespaces under the state
	// directory (netns_mounts_under_state_dir) rather than in
	// /var/run/netns: pods get their own network through the CNI
	// configuration in Dir/cni.
	PodNetwork bool
	// CDISpecDirs are the directories containerd 2.x (whose CDI is
	// always on) reads CDI specs from, instead of /etc/cdi and
	// /var/run/cdi; containerd 1.6 has no CDI and ignores them.
	CDISpecDirs []string
}

// Containerd is a private containerd 1.6 with its CRI plugin, its own
// sockets, root and state under Dir, and host-network pods only (no CNI),
// in a network namespace of its own.
type Containerd struct {
	// Dir holds everything of this instance; it is removed by the cleanup.
	Dir string
	// Address is the gRPC socket (ctr -a, CRI endpoint).
	Address string
	// Root is containerd's root directory.
	Root string
	// StateDir is containerd's state directory.
	StateDir string
	// State is the CRI plugin's state directory, StateDir/io.containerd.grpc.v1.cri:
	// a pod's /dev/shm is the tmpfs State/sandboxes/<pod id>/shm.
	State string
	// RuncRoot is the runc --root of every runtime the harness registers
	// (runc is called with --root RuncRoot/k8s.io).
	RuncRoot string
	// ConfigPath is containerd's config.toml; tests may edit it (or run an
	// installer over it) and call Restart.
	ConfigPath string
	// CgroupParent is the cgroup_parent of the pods RunPod creates; the
	// cleanup removes it in every hierarchy.
	CgroupParent string
	// PauseImage is the sandbox image reference (PauseRef).
	PauseImage string
	// PID is containerd's process id (it changes on Restart).
	PID int
	// NetNS is the network namespace containerd runs in (across restarts),
	// and with it its shims and every host-network pod
	// (namespace_options.network NODE).
	NetNS *NetNS

	t       testing.TB
	bin     string
	ctr     string // the ctr that imports images (of the same release as bin)
	logPath string
	env     []string
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient
	shared  *containerdShared
}

// containerdShared is the mutable state shared by a Containerd and its views
// (For).
type containerdShared struct {
	mu   sync.Mutex
	proc *process
	pods map[string]*runtimeapi.PodSandboxConfig
	// supervise starts containerd again whenever it exits, as systemd's
	// Restart=always does, until stopping; restarts records each time.
	supervise bool
	// beforeRestart, when set, runs before the supervisor starts
	// containerd again (a k3s node renders its config).
	beforeRestart func(dir, configPath string) error
	stopping      bool
	// down is set while a node is lost (Kill): the supervisor does not
	// start containerd again until Revive.
	down     bool
	restarts []ContainerdRestart
}

// ContainerdRestart is one exit of a supervised containerd and the start
// that followed it.
type ContainerdRestart struct {
	// PID and Exit are the process that exited and how ("signal:
	// terminated", "exit status 1").
	PID  int
	Exit string
	// At is when the exit was seen.
	At time.Time
	// NewPID is the containerd started after it (0: the start failed,
	// StartErr says why).
	NewPID   int
	StartErr string
}

// supervisorRestartDelay is how long the supervisor waits after an exit
// before it starts containerd again (systemd: RestartSec).
const supervisorRestartDelay = 200 * time.Millisecond

// supervisorMaxRestarts stops a supervisor that would restart forever (a
// config containerd refuses), as systemd's start limit does.
const supervisorMaxRestarts = 20

// For returns a view of the same instance whose methods report failures to
// t, for use in a subtest (t.Fatal must be called from the test's
// goroutine). The cleanup stays with the test that started containerd. A
// Restart through one view updates the PID field of that view only.
func (c *Containerd) For(t testing.TB) *Containerd {
	v := *c
	v.t = t
	return &v
}

// currentProc returns the current containerd process.
func (c *Containerd) currentProc() *process {
	c.shared.mu.Lock()
	defer c.shared.mu.Unlock()
	return c.shared.proc
}

// CurrentPID returns the pid of the containerd running now (a supervisor
// may have restarted it since PID was set), 0 when none runs.
func (c *Containerd) CurrentPID() int {
	if p := c.currentProc(); p != nil && !p.exited() {
		return p.pid
	}
	return 0
}

// Restarts returns what the supervisor did so far (nil when containerd is
// not supervised or never exited).
func (c *Containerd) Restarts() []ContainerdRestart {
	c.shared.mu.Lock()
	defer c.shared.mu.Unlock()
	return append([]ContainerdRestart(nil), c.shared.restarts...)
}

// StartContainerd writes a config (version 2) for a private containerd,
// starts Debian's containerd with it, waits until the CRI plugin answers
// and imports the pause image. containerd runs in a network namespace of
// its own (NetNS), so its host-network pods never see the host's
// interfaces. The cleanup stops and removes all pods, stops containerd,
// kills leftover shims, unmounts everything below Dir (the sandbox
// /dev/shm tmpfs mounts, rootfs overlays), removes the pods' cgroups, Dir
// and the namespace.
func StartContainerd(t testing.TB, opts ContainerdOptions) *Containerd {
	t.Helper()
	bin, ctr := requireContainerd16(t)
	return launchContainerd(t, launchSpec{kind: "c", nvidia: opts.NVIDIA}, bin, ctr, opts.Env, func(dir string) (string, error) { return ContainerdConfig(dir, opts), nil })
}

// requireContainerd16 checks what Debian's containerd needs — root,
// containerd, ctr, its runc shim, runc, a static busybox — failing the test
// with the package to install, and returns the containerd and ctr paths.
func requireContainerd16(t testing.TB) (bin, ctr string) {
	t.Helper()
	requireRoot(t)
	bin = requireBinary(t, "containerd", "containerd")
	ctr = requireBinary(t, "ctr", "containerd")
	requireBinary(t, "containerd-shim-runc-v2", "containerd")
	requireBinary(t, "runc", "runc")
	staticBusybox(t)
	return bin, ctr
}

// launchSpec says where and how launchContainerd runs containerd.
type launchSpec struct {
	// kind names a fresh directory /tmp/<DirPrefix><kind>-NNNN; dir, when
	// set, is used instead (it must exist; the cleanup removes it).
	kind, dir string
	// ns is where containerd runs (nil: a network namespace of its own).
	ns *NetNS
	// supervise restarts containerd whenever it exits (systemd's
	// Restart=always).
	supervise bool
	// cgroupParent replaces CgroupParent ("/" + the directory's name).
	cgroupParent string
	// nvidia runs containerd in a GPU node's mount namespace (with a
	// network namespace of its own; ns must be nil).
	nvidia *NVIDIA
	// beforeRestart runs before each restart by the supervisor.
	beforeRestart func(dir, configPath string) error
	// configPath, address and stateDir, when set, replace the config's
	// path (dir/config.toml), the gRPC socket's (dir/containerd.sock) and
	// the state directory's (dir/state): a node's containerd whose config
	// puts them at a node's usual paths, bind-mounted from these.
	configPath, address, stateDir string
}

// launchContainerd starts the containerd binary bin, as StartContainerd
// describes, in the directory spec names with the config that setup
// returns (setup may also prepare files below the directory); env is added
// to its environment.
func launchContainerd(t testing.TB, spec launchSpec, bin, ctr string, env []string, setup func(dir string) (string, error)) *Containerd {
	t.Helper()
	dir := spec.dir
	if dir == "" {
		dir = makeDir(t, spec.kind)
	}
	ns := spec.ns
	if ns == nil {
		// Registered before containerd's cleanup, so removed after it.
		ns = NewNetNS(t, dir)
	}
	if spec.nvidia != nil {
		// The pods' mounts (their /dev/shm tmpfs, rootfs) are made below
		// the state directory in the node's mount namespace: shared, so
		// that the tests and the cleanup see them here.
		state := filepath.Join(dir, "state")
		if err := os.MkdirAll(state, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
		if err := makeRShared(state); err != nil {
			t.Fatalf("harness: %v", err)
		}
		var mnt *mountNS
		var err error
		mnt, err = newMountNS(spec.nvidia.nodeMounts(filepath.Join(dir, "scratch")))
		if err != nil {
			t.Fatalf("harness: GPU node mount namespace: %v", err)
		}
		ns.mnt = mnt
		t.Cleanup(mnt.close) // after containerd's cleanup, before the netns goes
		if env, err = spec.nvidia.nodeEnv(dir, env); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	cgroupParent := spec.cgroupParent
	if cgroupParent == "" {
		cgroupParent = "/" + filepath.Base(dir)
	}
	c := &Containerd{
		Dir:          dir,
		Address:      orPath(spec.address, filepath.Join(dir, "containerd.sock")),
		Root:         filepath.Join(dir, "root"),
		StateDir:     orPath(spec.stateDir, filepath.Join(dir, "state")),
		RuncRoot:     filepath.Join(dir, "runc"),
		ConfigPath:   orPath(spec.configPath, filepath.Join(dir, "config.toml")),
		CgroupParent: cgroupParent,
		PauseImage:   PauseRef,
		NetNS:        ns,
		t:            t,
		bin:          bin,
		ctr:          ctr,
		logPath:      filepath.Join(dir, "containerd.log"),
		env:          append(os.Environ(), env...),
		shared:       &containerdShared{pods: map[string]*runtimeapi.PodSandboxConfig{}, supervise: spec.supervise, beforeRestart: spec.beforeRestart},
	}
	c.State = filepath.Join(c.StateDir, "io.containerd.grpc.v1.cri")
	t.Cleanup(c.cleanup)

	for _, sub := range []string{"cni", "logs", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	config, err := setup(c.Dir)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.WriteFile(c.ConfigPath, []byte(config), 0o644); err != nil {
		t.Fatalf("harness: write containerd config: %v", err)
	}

	conn, err := grpc.NewClient("unix://"+c.Address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatalf("harness: CRI client for %s: %v", c.Address, err)
	}
	c.conn = conn
	c.rt = runtimeapi.NewRuntimeServiceClient(conn)
	c.img = runtimeapi.NewImageServiceClient(conn)

	begin := time.Now()
	if err := c.start(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Logf("harness: containerd pid %d on %s ready in %s", c.PID, c.Address, time.Since(begin).Round(time.Millisecond))
	c.ImportImage(ImageTar(t, filepath.Join(dir, "images"), PauseRef, []string{"/bin/sleep", "2147483647"}))
	return c
}

// orPath is p, or def when p is empty.
func orPath(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

// ContainerdConfig returns the config.toml StartContainerd writes for an
// instance living in dir. It is exported so that tests can see (and
// installers can be tested against) exactly what the harness generates.
func ContainerdConfig(dir string, opts ContainerdOptions) string {
	q := tomlString
	var b strings.Builder
	fmt.Fprintf(&b, "version = 2\n")
	fmt.Fprintf(&b, "root = %s\n", q(filepath.Join(dir, "root")))
	fmt.Fprintf(&b, "state = %s\n", q(filepath.Join(dir, "state")))
	fmt.Fprintf(&b, "disabled_plugins = [%s, %s, %s, %s]\n\n",
		q("io.containerd.snapshotter.v1.aufs"), q("io.containerd.snapshotter.v1.btrfs"),
		q("io.containerd.snapshotter.v1.zfs"), q("io.containerd.snapshotter.v1.devmapper"))
	fmt.Fprintf(&b, "[grpc]\n  address = %s\n\n", q(filepath.Join(dir, "containerd.sock")))
	fmt.Fprintf(&b, "[ttrpc]\n  address = %s\n\n", q(filepath.Join(dir, "containerd.sock.ttrpc")))
	fmt.Fprintf(&b, "[plugins]\n\n")
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = %s\n\n", q(filepath.Join(dir, "opt")))
	const cri = `plugins."io.containerd.grpc.v1.cri"`
	fmt.Fprintf(&b, "  [%s]\n", cri)
	fmt.Fprintf(&b, "    sandbox_image = %s\n", q(PauseRef))
	fmt.Fprintf(&b, "    restrict_oom_score_adj = true\n")
	fmt.Fprintf(&b, "    stream_server_address = \"127.0.0.1\"\n")
	fmt.Fprintf(&b, "    stream_server_port = \"0\"\n")
	fmt.Fprintf(&b, "    enable_selinux = false\n")
	if opts.CRI.PodNetwork {
		fmt.Fprintf(&b, "    netns_mounts_under_state_dir = true\n")
	}
	fmt.Fprintf(&b, "\n")
	fmt.Fprintf(&b, "    [%s.cni]\n      bin_dir = \"/usr/lib/cni\"\n      conf_dir = %s\n\n", cri, q(filepath.Join(dir, "cni")))
	def := opts.DefaultRuntime
	if def == "" {
		def = "runc"
	}
	fmt.Fprintf(&b, "    [%s.containerd]\n      default_runtime_name = %s\n      snapshotter = \"overlayfs\"\n\n", cri, q(def))
	runtimes := map[string]string{"runc": ""}
	for name, binary := range opts.Runtimes {
		runtimes[name] = binary
	}
	names := make([]string, 0, len(runtimes))
	for name := range runtimes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		table := fmt.Sprintf("%s.containerd.runtimes.%s", cri, tomlKey(name))
		fmt.Fprintf(&b, "      [%s]\n", table)
		fmt.Fprintf(&b, "        runtime_type = \"io.containerd.runc.v2\"\n")
		fmt.Fprintf(&b, "        pod_annotations = %s\n", tomlArray(opts.PodAnnotations))
		fmt.Fprintf(&b, "        container_annotations = %s\n", tomlArray(opts.ContainerAnnotations))
		fmt.Fprintf(&b, "        [%s.options]\n", table)
		if runtimes[name] != "" {
			fmt.Fprintf(&b, "          BinaryName = %s\n", q(runtimes[name]))
		}
		fmt.Fprintf(&b, "          Root = %s\n\n", q(filepath.Join(dir, "runc")))
	}
	if opts.ExtraConfig != "" {
		b.WriteString("\n# ExtraConfig\n")
		b.WriteString(opts.ExtraConfig)
		if !strings.HasSuffix(opts.ExtraConfig, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlKey returns name as a bare key when possible, else quoted.
func tomlKey(name string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(name) {
		return name
	}
	return tomlString(name)
}

// tomlArray renders a TOML array of strings.
func tomlArray(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = tomlString(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// start runs containerd with ConfigPath and waits until CRI answers.
func (c *Containerd) start() error {
	p, err := startProcess("containerd", c.logPath, []string{c.bin, "--config", c.ConfigPath}, c.env, c.NetNS)
	if err != nil {
		return err
	}
	c.shared.mu.Lock()
	c.shared.proc = p
	supervise := c.shared.supervise
	c.shared.mu.Unlock()
	c.PID = p.pid
	if supervise {
		go c.supervise(p)
	}
	if err := waitSocket(c.Address, p); err != nil {
		return fmt.Errorf("containerd did not come up: %w\n--- containerd log tail ---\n%s", err, c.LogTail(40))
	}
	// The client may have tried (and backed off) while the socket was missing.
	c.conn.ResetConnectBackoff()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("containerd exited (%v) before its CRI plugin answered\n--- containerd log tail ---\n%s", p.waitErr, c.LogTail(40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd CRI on %s did not answer within %s: %v\n--- containerd log tail ---\n%s", c.Address, startTimeout, err, c.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// supervise waits for p to exit and, unless the harness stopped it, starts
// containerd again, as systemd's Restart=always does for containerd.service.
func (c *Containerd) supervise(p *process) {
	<-p.done
	c.shared.mu.Lock()
	if c.shared.stopping || c.shared.down || c.shared.proc != p {
		c.shared.mu.Unlock()
		return
	}
	exit := "exited"
	if p.waitErr != nil {
		exit = p.waitErr.Error()
	}
	i := len(c.shared.restarts)
	c.shared.restarts = append(c.shared.restarts, ContainerdRestart{PID: p.pid, Exit: exit, At: time.Now()})
	if i >= supervisorMaxRestarts {
		c.shared.restarts[i].StartErr = fmt.Sprintf("not restarted: %d restarts already", i)
		c.shared.mu.Unlock()
		return
	}
	c.shared.mu.Unlock()
	time.Sleep(supervisorRestartDelay)
	c.shared.mu.Lock()
	stopping := c.shared.stopping
	c.shared.mu.Unlock()
	if stopping {
		return
	}
	// A view of its own: start sets PID, which belongs to the caller's view.
	v := *c
	var err error
	if before := c.shared.beforeRestart; before != nil {
		if err = before(c.Dir, c.ConfigPath); err != nil {
			err = fmt.Errorf("before the restart: %w", err)
		}
	}
	if err == nil {
		err = v.start()
	}
	c.shared.mu.Lock()
	defer c.shared.mu.Unlock()
	c.shared.restarts[i].NewPID = v.PID
	if err != nil {
		c.shared.restarts[i].StartErr = err.Error()
	}
}

// Kill kills containerd outright (SIGKILL), as a node that crashes takes
// it down, and keeps its supervisor from starting it again until Revive;
// the shims and the containers keep running.
func (c *Containerd) Kill() error {
	c.shared.mu.Lock()
	c.shared.down = true
	p := c.shared.proc
	c.shared.mu.Unlock()
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL containerd (pid %d): %w", p.pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd (pid %d) survived SIGKILL", p.pid)
	}
}

// Revive starts a containerd that Kill killed, as its supervisor would
// (what runs before a restart, a k3s node's rendering, included), and
// waits until its CRI plugin answers.
func (c *Containerd) Revive() error {
	c.shared.mu.Lock()
	c.shared.down = false
	before := c.shared.beforeRestart
	c.shared.mu.Unlock()
	if before != nil {
		if err := before(c.Dir, c.ConfigPath); err != nil {
			return fmt.Errorf("revive containerd: %w", err)
		}
	}
	if err := c.start(); err != nil {
		return fmt.Errorf("revive containerd: %w", err)
	}
	return nil
}

// LogTail returns the last n lines of containerd's log (all its runs).
func (c *Containerd) LogTail(n int) string {
	return logTail(c.logPath, n)
}

// Restart stops containerd (SIGTERM) and starts it again with the same
// directories and the current contents of ConfigPath. Running pods survive
// (their shims keep running). It fails the test if containerd does not come
// back.
func (c *Containerd) Restart() {
	c.t.Helper()
	if err := c.TryRestart(); err != nil {
		c.t.Fatalf("harness: %v", err)
	}
}

// TryRestart is Restart returning the error instead of failing the test.
// A supervised containerd gets SIGTERM and is started again by its
// supervisor (systemctl restart); TryRestart waits for that.
func (c *Containerd) TryRestart() error {
	c.shared.mu.Lock()
	supervised, n := c.shared.supervise, len(c.shared.restarts)
	c.shared.mu.Unlock()
	if supervised {
		return c.restartSupervised(n)
	}
	if err := c.currentProc().stop(15 * time.Second); err != nil {
		return fmt.Errorf("stop containerd: %w", err)
	}
	if err := c.start(); err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	return nil
}

// restartSupervised sends SIGTERM to the current containerd and waits
// until the supervisor has started the next one and its CRI plugin answers.
// Another restart may come meanwhile (a node agent with restart=signal
// SIGTERMs the containerd that is starting): as under systemd, the
// supervisor starts containerd again, and the restart is done when the
// latest one answers; it fails when the latest one fails to start and no
// other follows.
func (c *Containerd) restartSupervised(before int) error {
	p := c.currentProc()
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM containerd (pid %d): %w", p.pid, err)
	}
	deadline := time.Now().Add(2 * startTimeout)
	var failed string
	failedEntry, failedSeen := -1, time.Time{}
	for time.Now().Before(deadline) {
		rs := c.Restarts()
		if len(rs) > before {
			last := rs[len(rs)-1]
			switch {
			case last.StartErr != "":
				failed = last.StartErr
				// A containerd stopped while it started is started
				// again by its supervisor, which records that at once:
				// the failure is final when nothing follows it.
				if failedEntry != len(rs)-1 {
					failedEntry, failedSeen = len(rs)-1, time.Now()
				}
				if strings.HasPrefix(failed, "not restarted") || time.Since(failedSeen) > time.Second {
					return fmt.Errorf("restart containerd: %s", failed)
				}
			case last.NewPID != 0:
				c.PID = last.NewPID
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if failed != "" {
		return fmt.Errorf("restart containerd: %s", failed)
	}
	return fmt.Errorf("containerd (pid %d) was not restarted within %s\n--- containerd log tail ---\n%s", p.pid, 2*startTimeout, c.LogTail(30))
}

// importedNames returns the image names in ctr's "unpacking <name> (sha256:...)...done" lines.
func importedNames(out string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`unpacking (\S+) \(sha256:`).FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	return names
}

// ImportImage imports a docker-save or OCI archive into the CRI namespace
// with `ctr images import` (unpacked for overlayfs) and waits until the CRI
// plugin lists every imported image. Nothing is ever pulled.
func (c *Containerd) ImportImage(tarPath string) {
	c.t.Helper()
	if err := c.TryImportImage(tarPath); err != nil {
		c.t.Fatalf("harness: %v", err)
	}
}

// TryImportImage is ImportImage returning the error instead of failing the test.
func (c *Containerd) TryImportImage(tarPath string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, _, err := runCmd(ctx, c.env, c.ctr, "-a", c.Address, "-n", CRINamespace, "images", "import", tarPath)
	if err != nil {
		return fmt.Errorf("import %s: %w", tarPath, err)
	}
	names := importedNames(out)
	if len(names) == 0 {
		names = archiveTags(tarPath) // ctr 2.x reports its imports differently
	}
	if len(names) == 0 {
		return fmt.Errorf("import %s: ctr reported no image: %q", tarPath, out)
	}
	for _, name := range names {
		deadline := time.Now().Add(startTimeout)
		for {
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := c.img.ImageStatus(sctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
			scancel()
			if err == nil && resp.GetImage() != nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("import %s: CRI does not list %s after %s (err %v)", tarPath, name, startTimeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// cleanup removes all pods, stops containerd and removes Dir.
func (c *Containerd) cleanup() {
	var errs []error
	c.shared.mu.Lock()
	c.shared.stopping = true
	c.shared.mu.Unlock()
	proc := c.currentProc()
	if proc != nil && !proc.exited() {
		if err := c.removeAllPods(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.conn != nil {
		c.conn.Close()
	}
	if proc != nil {
		if err := proc.stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
		// A supervisor may have been starting the next one.
		if p := c.currentProc(); p != proc {
			if err := p.stop(15 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, killShims(c.t, c.Dir, c.Address)...)
	if err := removeCgroup(c.CgroupParent); err != nil {
		errs = append(errs, err)
	}
	if err := removeDir(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("harness: containerd cleanup of %s: %v\n--- containerd log tail ---\n%s", c.Dir, err, c.LogTail(30))
	}
}

// removeAllPods stops and removes every pod sandbox of this instance.
func (c *Containerd) removeAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var errs []error
	for _, p := range resp.GetItems() {
		if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod %s: %w", p.GetId(), err))
		}
		if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod %s: %w", p.GetId(), err))
		}
	}
	return errors.Join(errs...)
}
