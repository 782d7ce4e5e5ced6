package shmsweep

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSweepRules runs each rule: files made before the container's first
// start (by init containers, siblings), files made during its earlier
// instance's run, then the restart's sweep.
func TestSweepRules(t *testing.T) {
	tests := []struct {
		name   string
		before func(f *fixture) // before the first start
		during func(f *fixture) // while the earlier instance ran
		swept  []string
		kept   map[string]string
		noAttr string // a part of NoAttribution; "" none
		left   []string
		check  func(f *fixture) // more to check after the restart
	}{{
		name: "restart removes the earlier instance's unheld files",
		during: func(f *fixture) {
			f.file("nccl-abc", 4096)
			f.file("torch_123", 100)
		},
		swept: []string{"nccl-abc", "torch_123"},
	}, {
		name:   "files present before the earlier start survive",
		before: func(f *fixture) { f.file("init-data", 10) },
		during: func(f *fixture) {
			f.hold(200, "init-data") // the main container opened it later
			f.file("sgl_shm_1", 10)
		},
		swept: []string{"sgl_shm_1"},
		left:  []string{"init-data"},
	}, {
		name:   "files present before survive unheld too",
		before: func(f *fixture) { f.file("sidecar-ring", 10) },
		during: func(f *fixture) { f.file("torch_1", 10) },
		swept:  []string{"torch_1"},
		left:   []string{"sidecar-ring"},
	}, {
		name: "a sibling's live file survives: open",
		during: func(f *fixture) {
			f.cgroup("sib", 300)
			f.file("sib-open", 10)
			f.hold(300, "sib-open")
			f.file("dead", 10)
		},
		swept: []string{"dead"},
		kept:  map[string]string{"sib-open": KeptHeld},
		left:  []string{"sib-open"},
	}, {
		name: "a sibling's live file survives: mapped",
		during: func(f *fixture) {
			f.file("sib-mapped", 10)
			f.mapFile(301, "sib-mapped")
		},
		kept: map[string]string{"sib-mapped": KeptHeld},
		left: []string{"sib-mapped"},
	}, {
		name: "a sibling's closed file survives: charged to its live cgroup",
		during: func(f *fixture) {
			f.file("sib-closed", 10)
			f.charge("sib-closed", f.cgroup("sib", 300), true)
			f.file("dead", 10)
		},
		swept: []string{"dead"},
		kept:  map[string]string{"sib-closed": KeptSibling},
		left:  []string{"sib-closed"},
	}, {
		name: "a file charged below a live sibling's cgroup survives",
		during: func(f *fixture) {
			f.cgroup("sib", 0)
			f.file("nested-charge", 10)
			f.charge("nested-charge", f.cgroup("sib/inner", 301), true)
		},
		kept: map[string]string{"nested-charge": KeptSibling},
		left: []string{"nested-charge"},
	}, {
		name: "a file charged to a sibling cgroup without processes is removed",
		during: func(f *fixture) {
			f.file("exited", 10)
			f.charge("exited", f.cgroup("c1"), true) // the dead instance's, not deleted yet
		},
		swept: []string{"exited"},
	}, {
		name: "files charged to the sandbox's, the starting container's own, a removed cgroup or elsewhere are removed",
		during: func(f *fixture) {
			f.cgroup("sib", 300)
			for _, n := range []string{"pause", "own", "removed", "elsewhere"} {
				f.file(n, 10)
			}
			f.charge("pause", f.sandboxIno, true)
			f.charge("own", f.cgroup("c2", 400), true) // an OCI hook: the container's cgroup exists
			f.charge("removed", 999999999, true)
			f.charge("elsewhere", f.ino(f.cgroot), true)
		},
		swept: []string{"elsewhere", "own", "pause", "removed"},
	}, {
		name: "a file with no pages survives while a sibling lives",
		during: func(f *fixture) {
			f.cgroup("sib", 300)
			f.file("empty", 0)
			f.charge("empty", 0, false)
		},
		kept: map[string]string{"empty": KeptUnknownWriter},
		left: []string{"empty"},
	}, {
		name: "a file with no pages is removed when no sibling lives",
		during: func(f *fixture) {
			f.cgroup("c2", 400) // the starting container's own does not count
			f.cgroup("crio-conmon-c2.scope", 401)
			f.cgroup("gone-sib") // no process
			f.file("empty", 0)
			f.charge("empty", 0, false)
		},
		swept: []string{"empty"},
	}, {
		name: "no attribution: the pod's memory cgroup is not there",
		during: func(f *fixture) {
			f.cgroupsPath = "/kubepods/burstable/pod-other/c2"
			f.file("a", 10)
			f.file("held", 10)
			f.hold(300, "held")
		},
		kept:   map[string]string{"a": KeptUnattributed, "held": KeptHeld},
		noAttr: "the pod's memory cgroup",
		left:   []string{"a", "held"},
	}, {
		name: "no attribution: a charge cannot be read",
		during: func(f *fixture) {
			f.file("a", 10)
			f.file("b", 10)
			f.charges["b"] = fakeCharge{err: errors.New("kpagecgroup: permission denied")}
		},
		kept:   map[string]string{"a": KeptUnattributed, "b": KeptUnattributed},
		noAttr: "permission denied",
		left:   []string{"a", "b"},
	}, {
		name: "no attribution: a process of the pod cannot be read",
		during: func(f *fixture) {
			f.file("a", 10)
			f.writeFile(filepath.Join(f.proc, "77", "fd"), "not a directory")
			f.writeFile(filepath.Join(f.proc, "77", "cgroup"), "5:pids:/kubepods\n4:cpu,memory:/kubepods/burstable/poduid/c1\n")
		},
		kept:   map[string]string{"a": KeptUnattributed},
		noAttr: "77/fd",
		left:   []string{"a"},
	}, {
		name: "a process of the node that cannot be read is ruled out (some sandboxes keep root from their init)",
		during: func(f *fixture) {
			f.file("a", 10)
			f.writeFile(filepath.Join(f.proc, "1", "fd"), "not a directory")
			f.writeFile(filepath.Join(f.proc, "1", "cgroup"), "4:memory:/\n0::/init.scope\n")
		},
		swept: []string{"a"},
	}, {
		name: "no attribution: a process that cannot be read, nor its cgroup",
		during: func(f *fixture) {
			f.file("a", 10)
			f.writeFile(filepath.Join(f.proc, "78", "fd"), "not a directory")
			f.writeFile(filepath.Join(f.proc, "78", "cgroup"), "garbage\n")
		},
		kept:   map[string]string{"a": KeptUnattributed},
		noAttr: "no memory cgroup",
		left:   []string{"a"},
	}, {
		name: "no attribution: the cgroupsPath is not understood",
		during: func(f *fixture) {
			f.cgroupsPath = "c2"
			f.file("a", 10)
		},
		kept:   map[string]string{"a": KeptUnattributed},
		noAttr: "cgroupsPath",
		left:   []string{"a"},
	}, {
		name: "symlinks, directories, fifos and sockets are left; a link's target outside too",
		during: func(f *fixture) {
			outside := filepath.Join(filepath.Dir(f.shm), "host-file")
			f.writeFile(outside, "keep me")
			if err := os.Symlink(outside, filepath.Join(f.shm, "link")); err != nil {
				f.t.Fatal(err)
			}
			f.mkdir(filepath.Join(f.shm, "emptydir"))
			if err := unix.Mkfifo(filepath.Join(f.shm, "fifo"), 0o600); err != nil {
				f.t.Fatal(err)
			}
			if err := unix.Mknod(filepath.Join(f.shm, "sock"), unix.S_IFSOCK|0o600, 0); err != nil {
				f.t.Fatal(err)
			}
		},
		left:  []string{"fifo", "link", "sock"},
		check: func(f *fixture) { f.exists(filepath.Join(filepath.Dir(f.shm), "host-file")) },
	}, {
		name: "a nested file in a subdirectory is swept, the directory left",
		before: func(f *fixture) {
			f.file("ray/session_1/old", 10)
		},
		during: func(f *fixture) {
			f.file("ray/session_1/plasma", 4096)
			f.file("a/b/c/d", 1)
		},
		swept: []string{"a/b/c/d", "ray/session_1/plasma"},
		left:  []string{"ray/session_1/old"},
	}, {
		name: "a file gone meanwhile is neither swept nor kept",
		during: func(f *fixture) {
			f.file("vanishing", 10)
			f.file("dead", 10)
			f.onCharge = func(p string) {
				if filepath.Base(p) == "vanishing" {
					os.Remove(p)
				}
			}
		},
		swept: []string{"dead"},
	}, {
		name: "a file replaced after the walk is not removed",
		during: func(f *fixture) {
			f.file("swapped", 10)
			f.onCharge = func(p string) {
				// The judged inode lives on elsewhere, so that the new
				// file cannot reuse its number.
				if err := os.Rename(p, filepath.Join(filepath.Dir(f.shm), "judged")); err != nil {
					f.t.Fatal(err)
				}
				f.file("swapped", 20)
			}
		},
		left: []string{"swapped"},
	}, {
		name: "a directory replaced by a link after the walk is not followed",
		during: func(f *fixture) {
			f.file("dir/victim", 10)
			f.onCharge = func(p string) {
				outside := filepath.Join(filepath.Dir(f.shm), "outside")
				f.writeFile(filepath.Join(outside, "victim"), "host")
				os.RemoveAll(filepath.Join(f.shm, "dir"))
				if err := os.Symlink(outside, filepath.Join(f.shm, "dir")); err != nil {
					f.t.Fatal(err)
				}
			}
		},
		left:  []string{"dir"},
		check: func(f *fixture) { f.exists(filepath.Join(filepath.Dir(f.shm), "outside", "victim")) },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			if tt.before != nil {
				tt.before(f)
			}
			if res := f.sweep(); res.Restart || len(res.Swept) != 0 || len(res.Kept) != 0 {
				t.Fatalf("first start: %+v, want nothing removed", res)
			}
			tt.during(f)
			res := f.sweep()
			if !res.Restart {
				t.Errorf("Restart = false, want true")
			}
			if got := names(res.Swept); !slices.Equal(got, tt.swept) {
				t.Errorf("Swept = %q, want %q", got, tt.swept)
			}
			if got := kept(res.Kept); !(len(got) == 0 && len(tt.kept) == 0) && !reflect.DeepEqual(got, tt.kept) {
				t.Errorf("Kept = %v, want %v", got, tt.kept)
			}
			if tt.noAttr == "" && res.NoAttribution != "" || !strings.Contains(res.NoAttribution, tt.noAttr) {
				t.Errorf("NoAttribution = %q, want it to say %q", res.NoAttribution, tt.noAttr)
			}
			if got := f.left(); !slices.Equal(got, tt.left) {
				t.Errorf("left in /dev/shm: %q, want %q", got, tt.left)
			}
			if tt.check != nil {
				tt.check(f)
			}
		})
	}
}

// TestSweepFirstStart: a first start removes nothing, whatever is there,
// and records it; the sandbox's first record says so.
func TestSweepFirstStart(t *testing.T) {
	f := newFixture(t, false)
	f.file("a", 10)
	f.file("sub/b", 10)
	res := f.sweep()
	if res.Restart || !res.NewSandbox || len(res.Swept) != 0 || res.NoAttribution != "" {
		t.Errorf("first start: %+v, want no restart, a new sandbox, nothing swept", res)
	}
	if got := f.left(); !slices.Equal(got, []string{"a", "sub/b"}) {
		t.Errorf("left: %q", got)
	}
	st := store{dir: f.state, sandbox: "sbx1", container: "main"}
	rec, found, err := st.read()
	if err != nil || !found || len(rec.inodes) != 2 {
		t.Errorf("record: %+v %v %v, want the two files' inodes", rec, found, err)
	}
	if b, err := os.ReadFile(filepath.Join(f.state, "sbx1", shmDirFile)); err != nil || string(b) != f.shm {
		t.Errorf(".shmdir = %q, %v; want %q", b, err, f.shm)
	}
	// A second container of the same pod: its own first start, not a new sandbox.
	s := f.start()
	s.Container = "sidecar"
	if res, err := Sweep(f.opts(), s); err != nil || res.Restart || res.NewSandbox {
		t.Errorf("sidecar's first start: %+v, %v", res, err)
	}
}

// TestSweepSnapshotFollowsInstances: each restart compares against its
// earlier instance's start, so a file kept once is no candidate again, a
// file the instance made is, and a restart with nothing new writes
// nothing.
func TestSweepSnapshotFollowsInstances(t *testing.T) {
	f := newFixture(t, false)
	f.sweep()
	f.file("sib-closed", 10)
	f.charge("sib-closed", f.cgroup("sib", 300), true)
	f.file("first-instance", 10)
	if res := f.sweep(); !slices.Equal(names(res.Swept), []string{"first-instance"}) || len(res.Kept) != 1 {
		t.Fatalf("first restart: %+v", res)
	}
	f.file("second-instance", 10)
	res := f.sweep()
	if !slices.Equal(names(res.Swept), []string{"second-instance"}) || len(res.Kept) != 0 {
		t.Errorf("second restart: %+v, want only second-instance swept", res)
	}
	rec := filepath.Join(f.state, "sbx1", "main")
	before, _ := os.Stat(rec)
	// Nothing may be asked when there is no candidate: neither the
	// processes (one cannot be read) nor the cgroups (gone).
	f.writeFile(filepath.Join(f.proc, "77", "fd"), "not a directory")
	os.RemoveAll(f.memRoot)
	res = f.sweep()
	after, _ := os.Stat(rec)
	if len(res.Swept)+len(res.Kept) != 0 || !res.Restart || res.NoAttribution != "" {
		t.Errorf("third restart: %+v, want a restart with nothing", res)
	}
	if !os.SameFile(before, after) {
		t.Errorf("a restart with nothing new rewrote the record")
	}
}

// TestSwept: the records add up what each container's restarts swept,
// for gpurun stats; a sandbox with none swept nothing.
func TestSwept(t *testing.T) {
	f := newFixture(t, false)
	if got, err := Swept(f.opts(), "sbx1"); err != nil || got != (Totals{}) {
		t.Fatalf("before any record: %+v, %v", got, err)
	}
	f.sweep()
	var want Totals
	for i := range 3 {
		name := fmt.Sprintf("leftover-%d", i)
		f.file(name, 10)
		res := f.sweep()
		if len(res.Swept) != 1 {
			t.Fatalf("restart %d: %+v", i, res)
		}
		want.Bytes += res.SweptBytes
		want.Files++
	}
	if got, err := Swept(f.opts(), "sbx1"); err != nil || got != want || want.Bytes == 0 {
		t.Errorf("Swept = %+v, %v; want %+v", got, err, want)
	}
	if _, err := Swept(f.opts(), "../x"); err == nil {
		t.Error("a sandbox id that is no name: no error")
	}
}

// TestSweepUnattributedJudgedLater: a file kept because attribution could
// not be made stays out of the snapshot: the next restart, where it can,
// judges it.
func TestSweepUnattributedJudgedLater(t *testing.T) {
	f := newFixture(t, false)
	f.sweep()
	f.file("dead", 10)
	good := f.cgroupsPath
	f.cgroupsPath = "/kubepods/burstable/pod-missing/c2"
	if res := f.sweep(); res.NoAttribution == "" || kept(res.Kept)["dead"] != KeptUnattributed {
		t.Fatalf("restart without attribution: %+v", res)
	}
	f.cgroupsPath = good
	if res := f.sweep(); !slices.Equal(names(res.Swept), []string{"dead"}) {
		t.Errorf("next restart: %+v, want dead swept", res)
	}
}

// TestSweepHardLinks: a file with two names is one inode, once in the
// record; a restart removes one name, the next the other.
func TestSweepHardLinks(t *testing.T) {
	f := newFixture(t, false)
	f.file("before", 10)
	if err := os.Link(filepath.Join(f.shm, "before"), filepath.Join(f.shm, "before-2")); err != nil {
		t.Fatal(err)
	}
	f.sweep()
	f.file("dead", 10)
	os.Link(filepath.Join(f.shm, "dead"), filepath.Join(f.shm, "dead-2"))
	if res := f.sweep(); len(res.Swept) != 1 {
		t.Fatalf("restart: %+v, want one name of dead swept", res)
	}
	if res := f.sweep(); len(res.Swept) != 1 {
		t.Errorf("next restart: %+v, want the other name swept", res)
	}
	if got := f.left(); !slices.Equal(got, []string{"before", "before-2"}) {
		t.Errorf("left: %q", got)
	}
}

// TestSweepFailedRemovalRetried: a file the sweep could not remove stays
// out of the next snapshot, so that the next restart tries again.
func TestSweepFailedRemovalRetried(t *testing.T) {
	f := newFixture(t, false)
	f.sweep()
	f.file("locked/x", 10)
	unlock := lock(t, filepath.Join(f.shm, "locked"))
	if _, err := Sweep(f.opts(), f.start()); err == nil || !strings.Contains(err.Error(), "locked/x") {
		t.Fatalf("Sweep error = %v, want the failed removal", err)
	}
	unlock()
	if res := f.sweep(); !slices.Equal(names(res.Swept), []string{"locked/x"}) {
		t.Errorf("next restart: %+v, want locked/x swept", res)
	}
}

// lock makes the files of dir impossible to remove until the returned
// function is called: a directory without write permission, or for root
// the immutable flag (FS_IMMUTABLE_FL, 0x10) on each file in it.
func lock(t *testing.T, dir string) (unlock func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		unlock = func() { os.Chmod(dir, 0o755) }
		t.Cleanup(unlock)
		return unlock
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	unlock = func() {
		for _, fd := range fds {
			unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0)
			unix.Close(fd)
		}
		fds = nil
	}
	t.Cleanup(unlock)
	for _, e := range ents {
		fd, err := unix.Open(filepath.Join(dir, e.Name()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0x10); err != nil {
			t.Skipf("the immutable flag cannot be set here: %v", err)
		}
	}
	return unlock
}

// TestSweepRecords: a record made for another device, or unreadable,
// counts as none (an unreadable one is an error too), and is replaced.
func TestSweepRecords(t *testing.T) {
	tests := []struct {
		name    string
		record  func(f *fixture) []byte
		wantErr bool
	}{
		{"another device", func(f *fixture) []byte {
			var st unix.Stat_t
			unix.Stat(f.shm, &st)
			return record{dev: st.Dev + 1}.encode()
		}, false},
		{"garbage", func(*fixture) []byte { return []byte("garbage") }, true},
		{"truncated", func(*fixture) []byte { return record{dev: 1, inodes: []uint64{5, 9}}.encode()[:len(recordMagic)+2] }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			f.sweep()
			if err := os.WriteFile(filepath.Join(f.state, "sbx1", "main"), tt.record(f), 0o600); err != nil {
				t.Fatal(err)
			}
			f.file("a", 10)
			res, err := Sweep(f.opts(), f.start())
			if res.Restart || len(res.Swept) != 0 || (err != nil) != tt.wantErr {
				t.Errorf("Sweep = %+v, %v; want a first start, error %v", res, err, tt.wantErr)
			}
			if res := f.sweep(); !res.Restart || len(res.Swept) != 0 {
				t.Errorf("next: %+v, want a restart with nothing new", res)
			}
		})
	}
}

// TestSweepRefusals: names that cannot be records, and ShmDirs that are
// not a pod's tmpfs, are refused before anything is read or written.
func TestSweepRefusals(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *fixture, o *Options, s *Start)
		want   error // nil: any error
	}{
		{"empty sandbox id", func(_ *fixture, _ *Options, s *Start) { s.SandboxID = "" }, ErrBadName},
		{"sandbox id ..", func(_ *fixture, _ *Options, s *Start) { s.SandboxID = ".." }, ErrBadName},
		{"sandbox id with a slash", func(_ *fixture, _ *Options, s *Start) { s.SandboxID = "a/../../etc" }, ErrBadName},
		{"container name .", func(_ *fixture, _ *Options, s *Start) { s.Container = "." }, ErrBadName},
		{"container name hidden", func(_ *fixture, _ *Options, s *Start) { s.Container = ".shmdir" }, ErrBadName},
		{"container name with NUL", func(_ *fixture, _ *Options, s *Start) { s.Container = "a\x00b" }, ErrBadName},
		{"container name too long", func(_ *fixture, _ *Options, s *Start) { s.Container = strings.Repeat("a", 256) }, ErrBadName},
		{"relative shm dir", func(_ *fixture, _ *Options, s *Start) { s.ShmDir = "shm" }, nil},
		{"not a tmpfs", func(_ *fixture, o *Options, _ *Start) {
			o.TmpfsMagic = 0 // the real check: the temporary directory is no tmpfs
			if isTmpfs(t.TempDir()) {
				o.TmpfsMagic = 0x1234
			}
		}, ErrRefused},
		{"the host's /dev/shm", func(f *fixture, _ *Options, s *Start) {
			f.mkdir(filepath.Join(f.proc, "1", "root", "dev"))
			if err := os.Symlink(s.ShmDir, filepath.Join(f.proc, "1", "root", "dev", "shm")); err != nil {
				t.Fatal(err)
			}
		}, ErrRefused},
		{"a symbolic link", func(f *fixture, _ *Options, s *Start) {
			link := filepath.Join(t.TempDir(), "shm")
			if err := os.Symlink(f.shm, link); err != nil {
				t.Fatal(err)
			}
			s.ShmDir = link
		}, unix.ENOTDIR}, // O_NOFOLLOW|O_DIRECTORY on a link
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			o, s := f.opts(), f.start()
			tt.change(f, &o, &s)
			_, err := Sweep(o, s)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("Sweep error = %v, want %v", err, tt.want)
			}
			if ents, _ := os.ReadDir(f.state); len(ents) != 0 {
				t.Errorf("a refused sweep wrote %d records", len(ents))
			}
		})
	}
}

// isTmpfs tells whether dir is on a tmpfs.
func isTmpfs(dir string) bool {
	var sfs unix.Statfs_t
	return unix.Statfs(dir, &sfs) == nil && sfs.Type == unix.TMPFS_MAGIC
}

// TestSweepCgroupForms: the pod's cgroup is found from both forms of
// cgroupsPath, on v1's and v2's memory hierarchies: a sibling's closed file
// is told apart from a dead instance's.
func TestSweepCgroupForms(t *testing.T) {
	tests := []struct {
		name        string
		v2          bool
		podRel      string
		cgroupsPath string
		sandbox     string // the sandbox's cgroup's name
		sibling     string
	}{
		{"cgroupfs v1", false, "kubepods/burstable/poduid", "/kubepods/burstable/poduid/c2", "sbx1", "c9"},
		{"cgroupfs v2", true, "kubepods/burstable/poduid", "/kubepods/burstable/poduid/c2", "sbx1", "c9"},
		{"cgroupfs besteffort, CRI-O names", false, "kubepods/besteffort/poduid", "/kubepods/besteffort/poduid/crio-c2", "crio-sbx1", "crio-c9"},
		{"systemd v1", false, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid.slice",
			"kubepods-burstable-poduid.slice:cri-containerd:c2", "cri-containerd-sbx1.scope", "cri-containerd-c9.scope"},
		{"systemd v2", true, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid.slice",
			"kubepods-burstable-poduid.slice:cri-containerd:c2", "cri-containerd-sbx1.scope", "cri-containerd-c9.scope"},
		{"systemd guaranteed v2, CRI-O", true, "kubepods.slice/kubepods-poduid.slice",
			"kubepods-poduid.slice:crio:c2", "crio-sbx1.scope", "crio-c9.scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.v2)
			f.podRel, f.cgroupsPath = tt.podRel, tt.cgroupsPath
			f.podIno = f.cgroup("", 0)
			sandbox := f.cgroup(tt.sandbox, 1)
			f.sweep()
			f.file("sib", 10)
			f.file("dead", 10)
			f.file("empty", 0)
			f.charge("sib", f.cgroup(tt.sibling, 300), true)
			f.charge("dead", sandbox, true)
			f.charge("empty", 0, false)
			res := f.sweep()
			want := map[string]string{"sib": KeptSibling, "empty": KeptUnknownWriter}
			if !slices.Equal(names(res.Swept), []string{"dead"}) || !reflect.DeepEqual(kept(res.Kept), want) || res.NoAttribution != "" {
				t.Errorf("Sweep = %+v, want dead swept, sib and empty kept", res)
			}
		})
	}
}

// TestSweepRealChargeUnreadable: without Options.Charge the pages are read
// through <Proc>/self/pagemap and <Proc>/kpagecgroup; a /proc without them
// is rule 6.
func TestSweepRealChargeUnreadable(t *testing.T) {
	f := newFixture(t, false)
	f.sweep()
	f.file("a", 10)
	o := f.opts()
	o.Charge = nil
	res, err := Sweep(o, f.start())
	if err != nil || !strings.Contains(res.NoAttribution, "pagemap") || len(res.Swept) != 0 {
		t.Errorf("Sweep = %+v, %v; want nothing removed, pagemap named", res, err)
	}
	if _, err := os.Stat(filepath.Join(f.shm, "a")); err != nil {
		t.Errorf("a: %v", err)
	}
}

// TestSweepBytes: the result counts the bytes swept and kept.
func TestSweepBytes(t *testing.T) {
	f := newFixture(t, false)
	f.sweep()
	f.file("dead", 5000)
	f.file("held", 10)
	f.hold(9, "held")
	res := f.sweep()
	var st unix.Stat_t
	unix.Stat(filepath.Join(f.shm, "held"), &st)
	if res.SweptBytes < 5000 || res.KeptBytes != st.Blocks*512 || res.Swept[0].Bytes != res.SweptBytes {
		t.Errorf("bytes: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(f.shm, "dead")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dead: %v, want removed", err)
	}
}
