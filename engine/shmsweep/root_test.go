package shmsweep

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file run only as root: they mount tmpfs filesystems in
// temporary directories and make memory cgroups below the test's own, and
// undo both in t.Cleanup, leaving the machine as they found it.

// requireRoot skips t unless it runs as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs and makes memory cgroups (run the package's tests as root to check the real tmpfs check and page attribution)")
	}
}

// mountTmpfs mounts a tmpfs at dir (made) until the test ends.
func mountTmpfs(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=256m,mode=1777"); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v; detaching it", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
}

// TestRootTmpfsChecks: the real refusals (not a tmpfs, the host's
// /dev/shm) and a walk that does not enter a tmpfs mounted below.
func TestRootTmpfsChecks(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	shm := filepath.Join(base, "shm")
	mountTmpfs(t, shm)
	state := filepath.Join(base, "state")
	o := Options{StateDir: state, Charge: func(string) (uint64, bool, error) { return 1, true, nil }}
	s := Start{ShmDir: shm, SandboxID: "sbx", Container: "main", CgroupsPath: "/kubepods/pod1/c2"}
	if _, err := Sweep(o, s); err != nil {
		t.Fatalf("Sweep of a tmpfs: %v", err)
	}
	for _, dir := range []string{"/dev/shm", base} {
		s2 := s
		s2.ShmDir, s2.SandboxID = dir, "other"
		if isTmpfs(dir) != (dir == "/dev/shm") {
			continue // the host's is no tmpfs, or the temporary directory is one
		}
		if _, err := Sweep(o, s2); !errors.Is(err, ErrRefused) {
			t.Errorf("Sweep of %s = %v, want ErrRefused", dir, err)
		}
	}
	inner := filepath.Join(shm, "inner")
	mountTmpfs(t, inner)
	os.WriteFile(filepath.Join(inner, "other-fs"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(shm, "mine"), []byte("x"), 0o644)
	if _, files, err := Walk(shm); err != nil || len(files) != 1 {
		t.Errorf("Walk = %v, %v; want only mine, not the file of the tmpfs below", files, err)
	}
	if _, err := os.Stat(filepath.Join(state, "other")); err == nil {
		t.Errorf("a refused sweep made records")
	}
}

// cgroupTree is a pod's memory cgroup made for a test below the test's
// own memory cgroup (v1) or the root (v2).
type cgroupTree struct {
	t       testing.TB
	memRoot string // the memory hierarchy's root
	pod     string // the pod's cgroup directory
}

// newCgroupTree makes the pod's memory cgroup, removed at the end.
func newCgroupTree(t testing.TB) *cgroupTree {
	t.Helper()
	root := "/sys/fs/cgroup"
	memRoot, parent := memoryRoot(root), ""
	if memRoot == root {
		ctl, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if err != nil || !slices.Contains(strings.Fields(string(ctl)), "memory") {
			t.Skip("cgroup v2 without the memory controller enabled at the root")
		}
	} else {
		parent = ownMemcg(t, false)
	}
	c := &cgroupTree{t: t, memRoot: memRoot}
	c.pod = c.mkdir(filepath.Join(memRoot, parent, "gpurun-shmsweep-test-"+strconv.Itoa(os.Getpid())))
	if memRoot == root {
		if err := os.WriteFile(filepath.Join(c.pod, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// ownMemcg is the test's own memory cgroup relative to the hierarchy's
// root, from /proc/self/cgroup: v1's memory line, or v2's "0::" one.
func ownMemcg(t testing.TB, v2 bool) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 && parts[0] == "0" || !v2 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2]
		}
	}
	t.Skip("no memory cgroup in /proc/self/cgroup")
	return ""
}

// mkdir makes the cgroup dir, removed at the end of the test (after the
// processes in it have been killed).
func (c *cgroupTree) mkdir(dir string) string {
	c.t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		c.t.Fatalf("make cgroup: %v", err)
	}
	c.t.Cleanup(func() { c.rmdir(dir) })
	return dir
}

// rmdir removes the cgroup dir if it is still there, waiting for its
// processes' exit to be accounted.
func (c *cgroupTree) rmdir(dir string) {
	for i := 0; ; i++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if i == 50 {
			c.t.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// child makes the pod's child cgroup name and returns its directory.
func (c *cgroupTree) child(name string) string {
	return c.mkdir(filepath.Join(c.pod, name))
}

// rel is the pod's cgroup relative to the memory hierarchy's root, as a
// cgroupfs cgroupsPath names it.
func (c *cgroupTree) rel() string {
	r, _ := filepath.Rel(c.memRoot, c.pod)
	return "/" + r
}

// run runs script in sh moved into the cgroup dir first, and waits for it.
func (c *cgroupTree) run(dir, script string) {
	c.t.Helper()
	out, err := exec.Command("sh", "-c", "echo $$ > "+dir+"/cgroup.procs && "+script).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s in %s: %v: %s", script, dir, err, out)
	}
}

// live runs script in sh moved into the cgroup dir first, then leaves a
// process there until the test ends.
func (c *cgroupTree) live(dir, script string) *exec.Cmd {
	c.t.Helper()
	cmd := exec.Command("sh", "-c", "echo $$ > "+dir+"/cgroup.procs && "+script+" && echo ready && exec sleep 600")
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		c.t.Fatalf("%s in %s: %q, %v", script, dir, line, err)
	}
	return cmd
}

// inode is the inode of path.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestRootCharge: the real attribution: a page written from a child
// cgroup is charged to it; one written by a cgroup since removed to it or
// its parent; holes are never faulted in.
func TestRootCharge(t *testing.T) {
	requireRoot(t)
	shm := filepath.Join(t.TempDir(), "shm")
	mountTmpfs(t, shm)
	c := newCgroupTree(t)
	sib, old := c.child("sib"), c.child("old")
	c.live(sib, "dd if=/dev/urandom of="+shm+"/sib bs=4096 count=4 status=none")
	c.run(old, "dd if=/dev/urandom of="+shm+"/old bs=4096 count=4 status=none")
	oldIno := inode(t, old)
	c.rmdir(old)
	os.WriteFile(filepath.Join(shm, "empty"), nil, 0o644)
	sparse(t, filepath.Join(shm, "hole"), -1)
	sparse(t, filepath.Join(shm, "late"), 64<<10)

	pg, err := openPager("/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.close()
	own := inode(t, filepath.Join(c.memRoot, ownMemcg(t, c.memRoot == "/sys/fs/cgroup")))
	tests := []struct {
		file     string
		resident bool
		memcg    []uint64 // any of
	}{
		{"sib", true, []uint64{inode(t, sib)}},
		{"old", true, []uint64{oldIno, inode(t, c.pod)}},
		{"late", true, []uint64{own}},
		{"empty", false, []uint64{0}},
		{"hole", false, []uint64{0}},
	}
	for _, tt := range tests {
		path := filepath.Join(shm, tt.file)
		before := blocks(t, path)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		memcg, resident, err := pg.charge(fd)
		unix.Close(fd)
		if tt.file == "old" {
			t.Logf("a page of a removed cgroup (inode %d, the pod's %d) reads as charged to %d", oldIno, inode(t, c.pod), memcg)
		}
		if err != nil || resident != tt.resident || !slices.Contains(tt.memcg, memcg) {
			t.Errorf("charge(%s) = %d, %v, %v; want one of %v, %v", tt.file, memcg, resident, err, tt.memcg, tt.resident)
		}
		if after := blocks(t, path); after != before {
			t.Errorf("%s: %d blocks before, %d after: a page was faulted in", tt.file, before, after)
		}
	}
}

// sparse makes a 1 MiB file at path, empty but for one page written at off
// (none when off < 0).
func sparse(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	if off >= 0 {
		if _, err := f.WriteAt(make([]byte, 4096), off); err != nil {
			t.Fatal(err)
		}
	}
}

// blocks is path's st_blocks.
func blocks(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// TestRootSweep: a restart on a real tmpfs, with the node's real
// processes, real memory cgroups and real page attribution.
func TestRootSweep(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	shm := filepath.Join(base, "shm")
	mountTmpfs(t, shm)
	c := newCgroupTree(t)
	c.child("sbx1")
	o := Options{StateDir: filepath.Join(base, "state"), Proc: "/proc"}
	s := Start{ShmDir: shm, SandboxID: "sbx1", Container: "main", ContainerID: "c2", CgroupsPath: c.rel() + "/c2"}
	os.WriteFile(filepath.Join(shm, "init-file"), []byte("from an init container"), 0o644)
	if res, err := Sweep(o, s); err != nil || res.Restart {
		t.Fatalf("first start: %+v, %v", res, err)
	}

	// The earlier instance (c1) runs, writes and dies; a sibling writes and
	// lives; a file is held open; one is empty.
	c.run(c.child("c1"), "mkdir -p "+shm+"/nccl && dd if=/dev/urandom of="+shm+"/nccl/nccl-dead bs=4096 count=8 status=none")
	c.rmdir(filepath.Join(c.pod, "c1"))
	sibling := c.live(c.child("c9"), "dd if=/dev/urandom of="+shm+"/sib-closed bs=4096 count=2 status=none")
	os.WriteFile(filepath.Join(shm, "held"), []byte("x"), 0o644)
	held, err := os.Open(filepath.Join(shm, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	os.WriteFile(filepath.Join(shm, "empty"), nil, 0o644)

	o.Proc = "/proc"
	res, err := Sweep(o, s)
	if err != nil || res.NoAttribution != "" {
		t.Fatalf("restart: %+v, %v", res, err)
	}
	wantKept := map[string]string{"sib-closed": KeptSibling, "held": KeptHeld, "empty": KeptUnknownWriter}
	if !slices.Equal(names(res.Swept), []string{"nccl/nccl-dead"}) || !reflect.DeepEqual(kept(res.Kept), wantKept) || res.SweptBytes != 8*4096 {
		t.Errorf("restart: %+v, want nccl-dead swept, %v kept", res, wantKept)
	}

	// The sibling exits (its cgroup stays, empty); the next instance leaves
	// an empty file and a written one.
	sibling.Process.Kill()
	sibling.Wait()
	os.WriteFile(filepath.Join(shm, "empty2"), nil, 0o644)
	os.WriteFile(filepath.Join(shm, "torch_1"), []byte("x"), 0o644)
	o.Proc = "/proc"
	res, err = Sweep(o, s)
	if err != nil || !slices.Equal(names(res.Swept), []string{"empty2", "torch_1"}) || len(res.Kept) != 0 {
		t.Errorf("second restart: %+v, %v; want empty2 and torch_1 swept", res, err)
	}
	for _, f := range []string{"init-file", "sib-closed", "held", "empty"} {
		if _, err := os.Stat(filepath.Join(shm, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
