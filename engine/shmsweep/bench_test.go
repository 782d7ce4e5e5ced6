package shmsweep

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// benchFiles is how many files the benchmark's /dev/shm holds.
const benchFiles = 10000

// benchPod is the benchmark's pod: as root a tmpfs, a real memory cgroup,
// the real /proc (less what root cannot read) and the real page
// attribution; else a temporary directory, a fake cgroup tree, an empty
// fake /proc and a fake Charge.
type benchPod struct {
	b    *testing.B
	o    Options
	s    Start
	real bool
}

// newBenchPod makes the benchmark's pod, its /dev/shm empty.
func newBenchPod(b *testing.B) *benchPod {
	b.Helper()
	base := b.TempDir()
	p := &benchPod{b: b, real: os.Geteuid() == 0}
	shm := filepath.Join(base, "shm")
	p.s = Start{ShmDir: shm, SandboxID: "sbx1", Container: "main", ContainerID: "c2"}
	p.o = Options{StateDir: filepath.Join(base, "state")}
	if p.real {
		mountTmpfs(b, shm)
		mountTmpfs(b, p.o.StateDir) // /run, on a node
		c := newCgroupTree(b)
		c.child("sbx1")
		p.s.CgroupsPath = c.rel() + "/c2"
		return p
	}
	os.Mkdir(shm, 0o755)
	p.o.Proc, p.o.CgroupRoot = filepath.Join(base, "proc"), filepath.Join(base, "cgroup")
	os.Mkdir(p.o.Proc, 0o755)
	os.MkdirAll(filepath.Join(p.o.CgroupRoot, "memory", "kubepods", "pod1", "sbx1"), 0o755)
	p.s.CgroupsPath = "/kubepods/pod1/c2"
	p.o.Charge = func(path string) (uint64, bool, error) { return 1, true, nil }
	p.o.TmpfsMagic = statfsType(b, shm)
	return p
}

// statfsType is the filesystem type of dir.
func statfsType(b *testing.B, dir string) int64 {
	b.Helper()
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		b.Fatal(err)
	}
	return int64(sfs.Type)
}

// fill writes benchFiles files of one page each.
func (p *benchPod) fill() {
	p.b.Helper()
	page := make([]byte, 4096)
	page[0] = 1
	for i := range benchFiles {
		if err := os.WriteFile(filepath.Join(p.s.ShmDir, "nccl-"+strconv.Itoa(i)), page, 0o600); err != nil {
			p.b.Fatal(err)
		}
	}
}

// view makes a fresh view of /proc when real: the caller stops the timer.
func (p *benchPod) view() {
	if p.real {
		p.o.Proc = "/proc"
	}
}

// sweep runs Sweep and checks what it did.
func (p *benchPod) sweep(wantRestart bool, wantSwept int) {
	res, err := Sweep(p.o, p.s)
	if err != nil || res.Restart != wantRestart || len(res.Swept) != wantSwept || res.NoAttribution != "" {
		p.b.Fatalf("Sweep = restart %v, %d swept, %d kept, %q, %v", res.Restart, len(res.Swept), len(res.Kept), res.NoAttribution, err)
	}
}

// BenchmarkSweep times the three sweeps a container start makes on a
// /dev/shm of 10,000 files: a first start (walk and snapshot), a restart
// with nothing new (walk and compare), and a restart where all 10,000 are
// the dead instance's (walk, a scan of every process, 10,000 page
// attributions and removals).
func BenchmarkSweep(b *testing.B) {
	b.Run("first-start", func(b *testing.B) {
		p := newBenchPod(b)
		p.fill()
		p.view()
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			Forget(p.o, p.s.SandboxID)
			b.StartTimer()
			p.sweep(false, 0)
		}
	})
	b.Run("restart-nothing-new", func(b *testing.B) {
		p := newBenchPod(b)
		p.fill()
		p.view()
		p.sweep(false, 0)
		b.ResetTimer()
		for range b.N {
			p.sweep(true, 0)
		}
	})
	b.Run("restart-all-removed", func(b *testing.B) {
		p := newBenchPod(b)
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			Forget(p.o, p.s.SandboxID)
			p.sweep(false, 0) // an empty /dev/shm at the first start
			p.fill()
			p.view()
			b.StartTimer()
			p.sweep(true, benchFiles)
		}
	})
}
