// Package harness starts real container engines (dockerd, containerd with its
// CRI plugin) for gpurun's integration tests, each on its own sockets and
// state directories, and removes everything they created when the test ends.
//
// Every entry point takes a testing.TB, registers its cleanup with t.Cleanup
// and fails the test with t.Fatal when a prerequisite is missing: integration
// tests never skip, because a skipped integration test is not a pass.
//
// Directories live under /tmp with the prefix [DirPrefix] so that unix socket
// paths stay well below the 108-byte limit and leftovers are easy to find
// (`mount | grep /tmp/gpurun-h`).
//
// Every engine runs in a network namespace of its own ([NetNS]), so that
// nothing an engine does to networks — dockerd deleting a docker0 it was
// told not to use (--bridge=none), CNI bridges, veths, host-network
// containers and pods — reaches the machine's own. Clients reach the engines
// through unix sockets, which do not depend on the network namespace.
// `make check-host` (integration/checkhost) compares the machine before and after
// the tests.
//
// Methods that take no testing.TB report failures through the TB that created
// the engine, so they must be called from the test's own goroutine (the rules
// of t.Fatal); the Try* variants return errors instead and may be used from
// any goroutine.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// DirPrefix starts the name of every directory the harness creates under /tmp.
const DirPrefix = "gpurun-h"

// startTimeout bounds how long an engine may take to answer after it starts.
const startTimeout = 30 * time.Second

// requireRoot fails the test unless it runs as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("harness: integration tests must run as root (euid %d); run `sudo go test -tags integration ./integration/...`", os.Geteuid())
	}
}

// requireBinary returns the path of name in PATH or fails the test with a
// hint about the Debian package that provides it.
func requireBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("harness: prerequisite missing: %s not found in PATH (install it: apt-get install -y %s): %v", name, pkg, err)
	}
	return p
}

// makeDir creates a fresh, short directory /tmp/<DirPrefix><kind>-NNNN.
// Its removal is registered at once, so it runs after every cleanup
// registered later (the engine's, its network namespace's): a starter that
// fails before it registers its engine's cleanup leaves nothing in /tmp.
func makeDir(t testing.TB, kind string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", DirPrefix+kind+"-")
	if err != nil {
		t.Fatalf("harness: create work dir: %v", err)
	}
	t.Cleanup(func() {
		if err := removeDir(dir); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	// MkdirTemp makes it 0700; containers running as other users may need
	// to traverse it (bind mounts, devices).
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("harness: chmod %s: %v", dir, err)
	}
	return dir
}

// process is a daemon started by the harness.
type process struct {
	name    string
	logPath string
	pid     int
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// startProcess starts argv with stdout and stderr appended to logPath, in
// the network namespace ns (nil: the test's own). The child gets SIGTERM if
// the test binary dies without running its cleanups (PR_SET_PDEATHSIG; the
// launching OS thread stays locked and alive until the child has been
// reaped, so the signal only fires when the process dies).
func startProcess(name, logPath string, argv, env []string, ns *NetNS) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p := &process{name: name, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	onDisposableThread(func() {
		// Never unlocked: the thread dies with this goroutine, after the
		// child has exited.
		var err error
		if ns != nil {
			err = ns.enter()
		}
		if err == nil {
			err = cmd.Start()
		}
		logf.Close()
		started <- err
		if err != nil {
			close(p.done)
			return
		}
		p.waitErr = cmd.Wait()
		close(p.done)
	})
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p.pid = cmd.Process.Pid
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs and waits again.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", p.name, p.pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.name, p.pid, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.name, p.pid)
	}
}

// logTail returns the last n lines of a log file, or a note why it cannot.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// countLines returns how many lines of path contain substr.
func countLines(path, substr string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	return n
}

// runCmd runs a short command and returns stdout, stderr and an error that
// carries the command line, the exit status and stderr.
func runCmd(ctx context.Context, env []string, name string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), stderr.String(), err
}

// mountPoints returns the mount points at or below dir, deepest first.
func mountPoints(dir string) ([]string, error) {
	ms, err := selfMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != dir && !strings.HasPrefix(m.Mountpoint, dir+"/"), false
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i], "/") > strings.Count(out[j], "/")
	})
	return out, nil
}

// selfMounts returns the mounts of the process's mount namespace
// (/proc/self/mountinfo, whichever thread asks) that filter keeps, read
// with moby's mountinfo, as gpurun's own code reads a mount table.
func selfMounts(filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, filter)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return ms, nil
}

// unmountAll lazily unmounts everything at or below dir, deepest first,
// repeating while new mount points show up (stacked mounts).
func unmountAll(dir string) error {
	var errs []error
	for round := 0; round < 10; round++ {
		mps, err := mountPoints(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("umount %s: %w", mp, err))
			}
		}
	}
	mps, _ := mountPoints(dir)
	if len(mps) > 0 {
		errs = append(errs, fmt.Errorf("still mounted after 10 rounds: %s", strings.Join(mps, ", ")))
	}
	return errors.Join(errs...)
}

// procsReferencing returns the pids (other than ours) whose command line
// mentions dir: daemons and shims started for one harness instance.
func procsReferencing(dir string) map[int][]string {
	out := map[int][]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(raw, []byte(dir)) {
			continue
		}
		out[pid] = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	}
	return out
}

// killProcs SIGKILLs pids and waits (up to 10 s) until they are gone.
func killProcs(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) || isZombie(pid) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d survived SIGKILL", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// isZombie reports whether pid has exited and waits to be reaped.
func isZombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// cgroupMounts returns the mount points of all cgroup (v1) and cgroup2
// hierarchies.
func cgroupMounts() []string {
	ms, err := selfMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}

// removeCgroup kills every process in the cgroup rel (a path such as
// "/gpurun-hc-123" relative to each hierarchy's root) and its descendants in
// every hierarchy, then removes the directories bottom-up. Missing cgroups
// are not an error.
func removeCgroup(rel string) error {
	rel = strings.Trim(rel, "/")
	if rel == "" || strings.Contains(rel, "..") {
		return fmt.Errorf("refusing to remove cgroup %q", rel)
	}
	var errs []error
	for _, mnt := range cgroupMounts() {
		top := filepath.Join(mnt, rel)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		var pids []int
		for _, d := range dirs {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) > 0 {
			if err := killProcs(pids); err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", top, err))
			}
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for try := 0; try < 50; try++ {
				// Killed tasks leave the cgroup asynchronously: EBUSY for a moment.
				if err = unix.Rmdir(dirs[i]); err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveCgroup is removeCgroup for tests that run containers with runc
// directly under a cgroup parent of their own: it kills what is left in
// the cgroup rel and its descendants, in every hierarchy, and removes them.
func RemoveCgroup(rel string) error { return removeCgroup(rel) }

// MountPoints returns the mount points at or below dir in this process's
// mount namespace, deepest first.
func MountPoints(dir string) ([]string, error) { return mountPoints(dir) }

// UnmountAll lazily unmounts everything at or below dir, deepest first,
// for tests that mount under directories of their own.
func UnmountAll(dir string) error { return unmountAll(dir) }

// removeDir unmounts everything below dir and removes it.
func removeDir(dir string) error {
	var errs []error
	if err := unmountAll(dir); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// envWithout returns os.Environ() without the variables named in drop.
func envWithout(drop ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		skip := false
		for _, d := range drop {
			if name == d {
				skip = true
				break
			}
		}
		if !skip {
			out = append(out, kv)
		}
	}
	return out
}

// Leftovers describes what an engine of the harness left behind in dir
// after its cleanup: mounts at or below dir, processes whose command line
// mentions dir, a cgroup named after dir, and dir itself. An empty result
// means the cleanup was complete; tests of the harness assert exactly that.
func Leftovers(dir string) []string {
	var out []string
	mps, err := mountPoints(dir)
	if err != nil {
		out = append(out, err.Error())
	}
	for _, mp := range mps {
		out = append(out, "mount "+mp)
	}
	for pid, argv := range procsReferencing(dir) {
		if !isZombie(pid) {
			out = append(out, fmt.Sprintf("process %d %s", pid, strings.Join(argv, " ")))
		}
	}
	for _, mnt := range cgroupMounts() {
		cg := filepath.Join(mnt, filepath.Base(dir))
		if _, err := os.Stat(cg); err == nil {
			out = append(out, "cgroup "+cg)
		}
	}
	if _, err := os.Lstat(dir); err == nil {
		out = append(out, "directory "+dir)
	}
	sort.Strings(out)
	return out
}

// StartWaited starts cmd and waits for it on an OS thread of its own,
// locked until cmd exits, and calls exited with Wait's result then. A
// child's PR_SET_PDEATHSIG (SysProcAttr.Pdeathsig) fires when the thread
// that started it ends, and Go ends threads: a long-running child started
// from a test's goroutine may be killed at any moment; started here, only
// when the test binary dies.
func StartWaited(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	onDisposableThread(func() {
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	})
	return <-started
}
