//go:build integration

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// cgroupHierarchy returns a cgroup hierarchy of this machine to make a
// test cgroup in: v1's pids hierarchy, else the unified one.
func cgroupHierarchy(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && (st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC) {
			return p
		}
	}
	t.Fatal("no cgroup hierarchy at /sys/fs/cgroup/pids or /sys/fs/cgroup")
	return ""
}

// TestCatchesChanges makes, in a private network and mount namespace and a
// cgroup of its own, the changes the tests must never leave behind — the
// host's docker0 deleted, a tmpfs and a namespace left mounted, a cgroup
// and a harness directory left, an engine-like process left running — and
// checks that the comparison names each of them, and nothing else.
func TestCatchesChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestCatchesChanges needs root (namespaces, mounts, cgroups)")
	}
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	cgRoot, err := os.MkdirTemp(cgroupHierarchy(t), "gpurun-checkhost-")
	if err != nil {
		t.Fatal(err)
	}
	leftCgroup := filepath.Join(cgRoot, "leftover")
	t.Cleanup(func() {
		for _, d := range []string{leftCgroup, cgRoot} {
			if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
				t.Errorf("rmdir %s: %v", d, err)
			}
		}
	})
	fake := filepath.Join(dir, "gpurun-leftover")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, data, 0o755); err != nil {
		t.Fatal(err)
	}

	type result struct {
		changes []Change
		pid     int
		nsRoot  string // how mountinfo names the bind of the namespace file
		err     error
	}
	done := make(chan result, 1)
	go func() {
		// This thread alone enters the namespaces; it is never unlocked,
		// so it ends with the goroutine and the namespaces with it.
		runtime.LockOSThread()
		var res result
		defer func() { done <- res }()
		step := func(what string, err error) bool {
			if err != nil && res.err == nil {
				res.err = fmt.Errorf("%s: %w", what, err)
			}
			return err == nil
		}
		run := func(name string, args ...string) error {
			if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
			}
			return nil
		}
		if !step("unshare", unix.Unshare(unix.CLONE_NEWNS|unix.CLONE_NEWNET)) ||
			!step("make mounts private", unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")) ||
			!step("add docker0", run("ip", "link", "add", "docker0", "type", "bridge")) ||
			!step("address docker0", run("ip", "addr", "add", "172.17.0.1/16", "dev", "docker0")) ||
			!step("docker0 up", run("ip", "link", "set", "docker0", "up")) ||
			!step("mkdir", os.MkdirAll(filepath.Join(tmp, "shm"), 0o755)) ||
			!step("mkdir", os.WriteFile(filepath.Join(tmp, "netns"), nil, 0o644)) {
			return
		}
		src := Sources{
			Interfaces:  systemInterfaces,
			Mountinfo:   "/proc/thread-self/mountinfo",
			CgroupRoot:  cgRoot,
			Proc:        "/proc",
			TmpDir:      tmp,
			TmpPrefixes: []string{HarnessPrefix},
		}
		before, err := Take(src)
		if !step("snapshot before", err) {
			return
		}

		proc := exec.Command(fake, "600")
		if !step("start "+fake, proc.Start()) {
			return
		}
		res.pid = proc.Process.Pid
		defer func() { _ = proc.Process.Kill(); _ = proc.Wait() }()
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		var st unix.Stat_t
		if !step("stat "+self, unix.Stat(self, &st)) {
			return
		}
		res.nsRoot = fmt.Sprintf("net:[%d]", st.Ino)
		if !step("delete docker0", run("ip", "link", "del", "docker0")) ||
			!step("mount tmpfs", unix.Mount("shm", filepath.Join(tmp, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=65536k")) ||
			!step("bind the network namespace", unix.Mount(self, filepath.Join(tmp, "netns"), "", unix.MS_BIND, "")) ||
			!step("mkdir cgroup", os.Mkdir(leftCgroup, 0o755)) ||
			!step("mkdir harness dir", os.Mkdir(filepath.Join(tmp, "gpurun-hd-1"), 0o700)) {
			return
		}
		after, err := Take(src)
		if !step("snapshot after", err) {
			return
		}
		res.changes = Compare(before, after)
	}()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}

	var got, procs []string
	for _, c := range res.changes {
		if c.Kind == "process" {
			// Other work on this machine starts engines too: only ours counts.
			if c.Subject == fmt.Sprint(res.pid) {
				procs = append(procs, c.String())
			}
			continue
		}
		got = append(got, c.String())
	}
	want := []string{
		"interface docker0: gone (it had 172.17.0.1/16)" + docker0Gone,
		"mount " + filepath.Join(tmp, "netns") + ": new nsfs from nsfs (bind of " + res.nsRoot + ") (a namespace held open), left mounted",
		"mount " + filepath.Join(tmp, "shm") + ": new tmpfs from shm, left mounted",
		"cgroup leftover: new, left behind",
		"tmp " + filepath.Join(tmp, "gpurun-hd-1") + ": left behind",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	wantProc := fmt.Sprintf("process %d: gpurun-leftover started during the tests and still runs: %s 600", res.pid, fake)
	if len(procs) != 1 || procs[0] != wantProc {
		t.Errorf("process changes %q, want %q", procs, wantProc)
	}
}
