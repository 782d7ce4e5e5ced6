package shmsweep

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fixture is a pod on disk for the tests, no root needed: its /dev/shm (a
// plain temporary directory), a fake /proc, a fake cgroup tree and a state
// directory. The sandbox is "sbx1"; the starting container "main", id c2.
type fixture struct {
	t                        *testing.T
	shm, proc, cgroot, state string
	memRoot, podRel          string
	charges                  map[string]fakeCharge // by path below shm
	fds                      map[int]int           // the last descriptor of each fake process
	cgroupsPath, containerID string
	onCharge                 func(path string) // called by the fake Charge first
	podIno, sandboxIno       uint64
}

// fakeCharge is what the fake Charge says of a file.
type fakeCharge struct {
	memcg    uint64
	resident bool
	err      error
}

// newFixture makes a pod whose memory cgroups are v1's (or v2's), with
// the sandbox's cgroup holding the pause process (pid 1).
func newFixture(t *testing.T, v2 bool) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{
		t: t, shm: filepath.Join(base, "shm"), proc: filepath.Join(base, "proc"),
		cgroot: filepath.Join(base, "cgroup"), state: filepath.Join(base, "state"),
		podRel: "kubepods/burstable/poduid", charges: map[string]fakeCharge{}, fds: map[int]int{},
		cgroupsPath: "/kubepods/burstable/poduid/c2", containerID: "c2",
	}
	f.memRoot = filepath.Join(f.cgroot, "memory")
	if v2 {
		f.memRoot = f.cgroot
		f.writeFile(filepath.Join(f.cgroot, "cgroup.controllers"), "cpu memory pids\n")
	}
	for _, d := range []string{f.shm, f.proc, f.state} {
		f.mkdir(d)
	}
	f.podIno = f.cgroup("", 0)
	f.sandboxIno = f.cgroup("sbx1", 1)
	return f
}

// mkdir makes dir and its parents.
func (f *fixture) mkdir(dir string) {
	f.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// writeFile writes a file, making its directory.
func (f *fixture) writeFile(path, data string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(path))
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// ino is the inode of path.
func (f *fixture) ino(path string) uint64 {
	f.t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		f.t.Fatal(err)
	}
	return st.Ino
}

// cgroup makes the pod's child cgroup name ("" the pod's own, "a/b" one
// below a child) holding the processes pids (0: none), and returns its
// directory's inode.
func (f *fixture) cgroup(name string, pids ...int) uint64 {
	f.t.Helper()
	dir := filepath.Join(f.memRoot, f.podRel, name)
	var b strings.Builder
	for _, p := range pids {
		if p != 0 {
			fmt.Fprintf(&b, "%d\n", p)
		}
	}
	f.writeFile(filepath.Join(dir, "cgroup.procs"), b.String())
	return f.ino(dir)
}

// file writes size bytes at name below the shm dir.
func (f *fixture) file(name string, size int) {
	f.t.Helper()
	f.writeFile(filepath.Join(f.shm, name), strings.Repeat("x", size))
}

// charge sets what the fake Charge says of name.
func (f *fixture) charge(name string, memcg uint64, resident bool) {
	f.charges[name] = fakeCharge{memcg: memcg, resident: resident}
}

// hold gives the fake process pid a descriptor of name below the shm dir
// (a symbolic link, which stat follows as it follows the magic link).
func (f *fixture) hold(pid int, name string) {
	f.t.Helper()
	dir := filepath.Join(f.proc, strconv.Itoa(pid), "fd")
	f.mkdir(dir)
	f.fds[pid]++
	if err := os.Symlink(filepath.Join(f.shm, name), filepath.Join(dir, strconv.Itoa(f.fds[pid]))); err != nil {
		f.t.Fatal(err)
	}
}

// mapLine is a /proc/<pid>/maps line that maps path.
func mapLine(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("7f0000000000-7f0000001000 rw-s 00000000 %02x:%02x %d                  %s\n",
		unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, path)
}

// mapFile maps name below the shm dir into the fake process pid.
func (f *fixture) mapFile(pid int, name string) {
	f.t.Helper()
	path := filepath.Join(f.proc, strconv.Itoa(pid), "maps")
	f.mkdir(filepath.Dir(path))
	old, _ := os.ReadFile(path)
	lines := "55d0c0a00000-55d0c0a21000 r--p 00000000 00:00 0                          [heap]\n" + mapLine(f.t, filepath.Join(f.shm, name))
	if err := os.WriteFile(path, append(old, lines...), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// opts are the fixture's Options: its fake /proc and cgroups, the fake
// Charge, and the tmpfs check set to the temporary directory's type.
func (f *fixture) opts() Options {
	f.t.Helper()
	var sfs unix.Statfs_t
	if err := unix.Statfs(f.shm, &sfs); err != nil {
		f.t.Fatal(err)
	}
	return Options{Proc: f.proc, CgroupRoot: f.cgroot, StateDir: f.state, Charge: f.fakeCharge, TmpfsMagic: int64(sfs.Type)}
}

// fakeCharge is Options.Charge: what charges says, else charged to the
// pod's own cgroup (a dead container's pages, reparented).
func (f *fixture) fakeCharge(path string) (uint64, bool, error) {
	if f.onCharge != nil {
		f.onCharge(path)
	}
	rel, err := filepath.Rel(f.shm, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		f.t.Errorf("Charge asked of %s, outside the shm dir", path)
	}
	if c, ok := f.charges[rel]; ok {
		return c.memcg, c.resident, c.err
	}
	if _, err := os.Lstat(path); err != nil {
		return 0, false, err
	}
	return f.podIno, true, nil
}

// start is the starting container.
func (f *fixture) start() Start {
	return Start{ShmDir: f.shm, SandboxID: "sbx1", Container: "main", ContainerID: f.containerID, CgroupsPath: f.cgroupsPath}
}

// sweep runs Sweep for the starting container.
func (f *fixture) sweep() Result {
	f.t.Helper()
	res, err := Sweep(f.opts(), f.start())
	if err != nil {
		f.t.Fatalf("Sweep: %v", err)
	}
	return res
}

// left lists the regular files and symbolic links below the shm dir,
// relative to it, sorted.
func (f *fixture) left() []string {
	f.t.Helper()
	var out []string
	err := filepath.WalkDir(f.shm, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(f.shm, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// exists fails the test unless path exists.
func (f *fixture) exists(path string) {
	f.t.Helper()
	if _, err := os.Lstat(path); err != nil {
		f.t.Errorf("%s: %v, want it left alone", path, err)
	}
}

// names returns the files' names relative to /dev/shm.
func names(files []File) []string {
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimPrefix(f.Name, ShmPrefix))
	}
	return out
}

// kept returns the kept files' names relative to /dev/shm, with why.
func kept(ks []Kept) map[string]string {
	out := map[string]string{}
	for _, k := range ks {
		out[strings.TrimPrefix(k.Name, ShmPrefix)] = k.Why
	}
	return out
}
