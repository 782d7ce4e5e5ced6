package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// PodmanImage is the busybox image Podman.BusyboxImage loads.
const PodmanImage = "localhost/gpurun-test/busybox:latest"

// Podman runs Debian's podman (4.3) as root with everything it keeps —
// images, containers and their userdata/shm tmpfs, state, events, locks,
// network configuration — under one private directory, and every podman
// command (and so conmon and each container it starts) in a network
// namespace of its own, so that tests never touch the host's
// /var/lib/containers, /etc/cni/net.d or networks and clean up completely.
type Podman struct {
	// Dir holds everything; Root is the graph root (where podman mounts each
	// container's /dev/shm tmpfs, <Root>/overlay-containers/<id>/userdata/shm)
	// and RunRoot the run root.
	Dir, Root, RunRoot string
	// CgroupParent is the cgroup every container of Run goes under.
	CgroupParent string
	// NetNS is the network namespace podman commands run in.
	NetNS *NetNS

	t      testing.TB
	env    []string
	global []string
	once   sync.Once
}

// podmanTimeout bounds one podman command.
const podmanTimeout = 2 * time.Minute

// NewPodman prepares a private podman: storage.conf and containers.conf
// (cgroupfs, file events and locks, ulimits this process may set: without
// CAP_SYS_RESOURCE, runc cannot raise the ones podman asks for by default)
// under a fresh directory, and a network namespace for its commands. Its
// cleanup removes every container, unmounts everything below the
// directory, removes the cgroups, the directory and the namespace.
func NewPodman(t testing.TB) *Podman {
	t.Helper()
	requireRoot(t)
	requireBinary(t, "podman", "podman")
	requireBinary(t, "conmon", "conmon")
	requireBinary(t, "runc", "runc")
	requireBinary(t, "unshare", "util-linux")
	dir := makeDir(t, "p")
	// Registered before podman's cleanup, so removed after it.
	ns := NewNetNS(t, dir)
	p := &Podman{Dir: dir, Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "runroot"), CgroupParent: "/" + filepath.Base(dir), NetNS: ns, t: t}
	for _, d := range []string{"tmp", "net", "volumes"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\nrunroot = %q\ngraphroot = %q\n", p.RunRoot, p.Root)
	var lim unix.Rlimit
	nofile := "1024"
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		nofile = strconv.FormatUint(lim.Max, 10)
	}
	nproc := "4096"
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err == nil {
		nproc = strconv.FormatUint(min(lim.Max, 32768), 10)
	}
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=%[2]s:%[2]s", "nproc=%[3]s:%[3]s"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %[1]q
tmp_dir = %[4]q
image_copy_tmp_dir = %[4]q
lock_type = "file"
volume_path = %[5]q
static_dir = %[6]q
runtime = "runc"
[network]
network_config_dir = %[7]q
`, filepath.Join(dir, "events.log"), nofile, nproc, filepath.Join(dir, "tmp"), filepath.Join(dir, "volumes"),
		filepath.Join(p.Root, "libpod"), filepath.Join(dir, "net"))
	for name, body := range map[string]string{"storage.conf": storage, "containers.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	p.env = append(envWithout("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINER_HOST", "XDG_RUNTIME_DIR"),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"))
	p.global = []string{"--root", p.Root, "--runroot", p.RunRoot, "--cgroup-manager", "cgroupfs", "--events-backend", "file"}
	t.Cleanup(p.cleanup)
	return p
}

// Podman runs `podman GLOBAL-FLAGS args...` in NetNS and returns its
// stdout, stderr and error (which names the command and quotes stderr).
func (p *Podman) Podman(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), podmanTimeout)
	defer cancel()
	return p.NetNS.Run(ctx, p.env, "podman", append(append([]string{}, p.global...), args...)...)
}

// Run runs `podman run --rm --network none --cgroup-parent P args...` (the
// image and command are in args) and returns the container's output.
func (p *Podman) Run(args ...string) (string, string, error) {
	return p.Podman(append([]string{"run", "--rm", "--network", "none", "--cgroup-parent", p.CgroupParent}, args...)...)
}

// BusyboxImage loads PodmanImage (harness.ImageTar: static busybox, CMD
// /bin/sh) once and returns its reference. podman 4.3 load writes a
// blob-info cache under /var/lib/containers and a lock under
// /var/cache/containers whatever --root says, so it runs in a private
// mount namespace where those directories are empty tmpfs.
func (p *Podman) BusyboxImage() string {
	p.t.Helper()
	p.once.Do(func() {
		tar := ImageTar(p.t, p.Dir, PodmanImage, []string{"/bin/sh"})
		ctx, cancel := context.WithTimeout(context.Background(), podmanTimeout)
		defer cancel()
		script := `set -e
mkdir -p /var/lib/containers /var/cache/containers
mount -t tmpfs -o size=16m tmpfs /var/lib/containers
mount -t tmpfs -o size=16m tmpfs /var/cache/containers
exec "$@"`
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", "podman"}, p.global...)
		args = append(args, "load", "-q", "-i", tar)
		if _, _, err := p.NetNS.Run(ctx, p.env, "unshare", args...); err != nil {
			p.t.Fatalf("harness: podman load: %v", err)
		}
	})
	return PodmanImage
}

// AsOnANode runs script (sh -c; "$@" is podman with this Podman's global
// flags) in NetNS and in a private mount namespace where /etc/containers
// is a tmpfs holding a copy of the host's and containersConf as its
// containers.conf (its [engine] table gets this Podman's settings), and
// CONTAINERS_CONF is unset: podman, and gpurun run by the script, read
// /usr/share/containers/containers.conf and /etc/containers/containers.conf
// as on a node, and nothing of the host's /etc changes.
func (p *Podman) AsOnANode(containersConf, script string) (string, string, error) {
	p.t.Helper()
	own, err := os.ReadFile(filepath.Join(p.Dir, "containers.conf"))
	if err != nil {
		return "", "", fmt.Errorf("harness: %w", err)
	}
	// One [engine] table: the caller's keys go into this Podman's.
	conf := string(own)
	if rest, ok := strings.CutPrefix(strings.TrimSpace(containersConf), "[engine]"); ok {
		conf = strings.Replace(conf, "[engine]\n", "[engine]\n"+strings.TrimSpace(rest)+"\n", 1)
	} else if containersConf != "" {
		return "", "", fmt.Errorf("harness: AsOnANode's containers.conf must be an [engine] table, got %q", containersConf)
	}
	etc := filepath.Join(p.Dir, "etc-containers")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return "", "", fmt.Errorf("harness: %w", err)
	}
	if err := os.WriteFile(filepath.Join(etc, "containers.conf"), []byte(conf), 0o644); err != nil {
		return "", "", fmt.Errorf("harness: %w", err)
	}
	if fi, err := os.Stat("/etc/containers"); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("harness: /etc/containers (Debian's podman package makes it) is not a directory: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*podmanTimeout)
	defer cancel()
	wrapped := `set -e
mkdir -p "$GPURUN_ETC_COPY/host"
cp -a /etc/containers/. "$GPURUN_ETC_COPY/host/"
mount -t tmpfs -o size=16m tmpfs /etc/containers
cp -a "$GPURUN_ETC_COPY/host/." /etc/containers/
cp "$GPURUN_ETC_COPY/containers.conf" /etc/containers/containers.conf
rm -rf "$GPURUN_ETC_COPY/host"
` + script
	env := []string{"GPURUN_ETC_COPY=" + etc}
	for _, kv := range p.env {
		if !strings.HasPrefix(kv, "CONTAINERS_CONF=") {
			env = append(env, kv)
		}
	}
	args := append([]string{"--mount", "--propagation", "private", "sh", "-c", wrapped, "sh", "podman"}, p.global...)
	return p.NetNS.Run(ctx, env, "unshare", args...)
}

func (p *Podman) cleanup() {
	t := p.t
	if _, _, err := p.Podman("rm", "--all", "--force", "--time", "0"); err != nil {
		t.Logf("harness: %v", err)
	}
	var errs []string
	pids := []int{}
	for pid := range procsReferencing(p.Dir) {
		pids = append(pids, pid)
	}
	if err := killProcs(pids); err != nil {
		errs = append(errs, err.Error())
	}
	if err := removeCgroup(p.CgroupParent); err != nil {
		errs = append(errs, err.Error())
	}
	if err := removeDir(p.Dir); err != nil {
		errs = append(errs, err.Error())
	}
	if left := Leftovers(p.Dir); len(left) > 0 {
		errs = append(errs, "left behind: "+strings.Join(left, "; "))
	}
	if len(errs) > 0 {
		t.Errorf("harness: podman cleanup: %s", strings.Join(errs, "; "))
	}
}
