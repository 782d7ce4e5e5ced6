package shmsweep

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestParseCgroupsPath: runc's two forms of linux.cgroupsPath.
func TestParseCgroupsPath(t *testing.T) {
	tests := []struct {
		in      string
		want    podCgroup
		wantErr bool
	}{
		{in: "/kubepods/burstable/pod1234/abcd", want: podCgroup{"kubepods/burstable/pod1234", "abcd"}},
		{in: "/kubepods/pod1234/abcd/", want: podCgroup{"kubepods/pod1234", "abcd"}},
		{in: "/custom/prefix/kubepods/besteffort/pod1/crio-abcd", want: podCgroup{"custom/prefix/kubepods/besteffort/pod1", "crio-abcd"}},
		{in: "kubepods-burstable-pod1234.slice:cri-containerd:abcd", want: podCgroup{
			"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice", "cri-containerd-abcd.scope"}},
		{in: "kubepods-pod1.slice:crio:abcd", want: podCgroup{"kubepods.slice/kubepods-pod1.slice", "crio-abcd.scope"}},
		{in: "machine.slice:libpod:abcd", want: podCgroup{"machine.slice", "libpod-abcd.scope"}},
		{in: "kubepods-pod1.slice:x:inner.slice", want: podCgroup{"kubepods.slice/kubepods-pod1.slice", "inner.slice"}},
		{in: ":cri-containerd:abcd", want: podCgroup{"system.slice", "cri-containerd-abcd.scope"}},
		{in: "", wantErr: true},
		{in: "relative/pod/ctr", wantErr: true},
		{in: "/abcd", wantErr: true},
		{in: "/", wantErr: true},
		{in: "-.slice:cri-containerd:abcd", wantErr: true},
		{in: "kubepods--pod1.slice:p:abcd", wantErr: true},
		{in: "-kubepods.slice:p:abcd", wantErr: true},
		{in: "kubepods:p:abcd", wantErr: true},
		{in: ".slice:p:abcd", wantErr: true},
		{in: "kubepods.slice:p:", wantErr: true},
		{in: "kubepods.slice:p:a/b", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseCgroupsPath(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseCgroupsPath(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestMemoryRoot: v2 when the root has cgroup.controllers, else v1's
// memory hierarchy.
func TestMemoryRoot(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("memory\n"), 0o644)
	if got := memoryRoot(v1); got != filepath.Join(v1, "memory") {
		t.Errorf("v1: %s", got)
	}
	if got := memoryRoot(v2); got != v2 {
		t.Errorf("v2: %s", got)
	}
}

// TestLoadPod: the siblings' directories and those below them are known
// only while one of them holds a process; the sandbox's and the starting
// container's own never count.
func TestLoadPod(t *testing.T) {
	f := newFixture(t, true)
	live := f.cgroup("c7", 0)
	inner := f.cgroup("c7/nested", 55)
	dead := f.cgroup("c8")
	f.cgroup("c2", 400)
	f.cgroup("crio-conmon-c2.scope", 401)
	p, err := loadPod(f.opts(), f.start())
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]bool{live: true, inner: true}
	if !reflect.DeepEqual(p.sibling, want) || !p.anyLive || p.sibling[dead] || p.sibling[f.sandboxIno] {
		t.Errorf("loadPod = %+v, want siblings %v", p, want)
	}
	f.cgroup("c7/nested", 0)
	if p, err := loadPod(f.opts(), f.start()); err != nil || p.anyLive || len(p.sibling) != 0 {
		t.Errorf("loadPod with no process = %+v, %v; want none live", p, err)
	}
}

// TestRecordEncoding: a record reads back as written; a damaged one is
// refused.
func TestRecordEncoding(t *testing.T) {
	for _, r := range []record{
		{dev: 53, inodes: []uint64{}},
		{dev: 1<<40 + 7, inodes: []uint64{2, 3, 4, 1000, 1 << 62, 1<<64 - 1}},
		{dev: 9, inodes: []uint64{5}, swept: Totals{Bytes: 700 << 20, Files: 7}},
	} {
		got, err := decodeRecord(r.encode())
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("decode(encode(%v)) = %v, %v", r, got, err)
		}
	}
	many := record{dev: 1}
	for i := range 10000 {
		many.inodes = append(many.inodes, uint64(5000+i))
	}
	if b := many.encode(); len(b) > 10100 {
		t.Errorf("10,000 consecutive inodes take %d bytes, want about one each", len(b))
	}
	good := record{dev: 1, inodes: []uint64{7, 9}}.encode()
	for _, bad := range [][]byte{
		nil, []byte(recordMagic), []byte("gpurun-shmsweep 1\n\x01\x02\x05\x06"), good[:len(good)-1], append(slices.Clone(good), 0),
		[]byte(recordMagic + "\x00\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),
		[]byte(recordMagic + "\x00\x00\x01\x02\x05\x00"), // a repeated inode
	} {
		if r, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%q) = %v, want an error", bad, r)
		}
	}
}

// sandbox makes the records of a sandbox of that id whose ShmDir is a
// directory of its own, with a first start, and returns the ShmDir.
func (f *fixture) sandbox(t *testing.T, o Options, id string) string {
	t.Helper()
	shm := filepath.Join(t.TempDir(), id)
	if err := os.Mkdir(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	s := f.start()
	s.ShmDir, s.SandboxID = shm, id
	if _, err := Sweep(o, s); err != nil {
		t.Fatal(err)
	}
	return shm
}

// TestForgetAndGC: Forget drops one sandbox's records; GC drops those whose
// ShmDir is gone and leaves the rest.
func TestForgetAndGC(t *testing.T) {
	f := newFixture(t, false)
	o := f.opts()
	mk := func(sandbox string) string { return f.sandbox(t, o, sandbox) }
	mk("alive")
	gone1, gone2 := mk("gone1"), mk("gone2")
	mk("forgotten")
	os.Remove(gone1)
	os.Remove(gone2)
	os.MkdirAll(filepath.Join(f.state, "making"), 0o700) // no .shmdir yet
	os.WriteFile(filepath.Join(f.state, "stray-file"), nil, 0o600)

	if err := Forget(o, "forgotten"); err != nil {
		t.Fatal(err)
	}
	if err := Forget(o, "never-was"); err != nil {
		t.Errorf("Forget of a sandbox without records: %v", err)
	}
	if err := Forget(o, "../state"); !errors.Is(err, ErrBadName) {
		t.Errorf("Forget(../state) = %v, want ErrBadName", err)
	}
	n, err := GC(o)
	if err != nil || n != 2 {
		t.Errorf("GC = %d, %v; want 2", n, err)
	}
	var left []string
	ents, _ := os.ReadDir(f.state)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"alive", "making", "stray-file"}; !slices.Equal(left, want) {
		t.Errorf("state dir holds %q, want %q", left, want)
	}
	o.StateDir = filepath.Join(t.TempDir(), "none")
	if n, err := GC(o); n != 0 || err != nil {
		t.Errorf("GC of no state dir = %d, %v", n, err)
	}
}

// TestGCDue: GCDue runs GC the first time, not again within the interval
// (a gone pod's records stay until then), and again once it has passed.
func TestGCDue(t *testing.T) {
	f := newFixture(t, false)
	o := f.opts()
	gone := func(sandbox string) { os.Remove(f.sandbox(t, o, sandbox)) }
	now := time.Now()
	gone("a")
	for _, tc := range []struct {
		at      time.Duration
		sandbox string // made and gone before the call ("" none)
		ran     bool
		removed int
	}{
		{0, "", true, 1},
		{time.Second, "b", false, 0},
		{GCInterval - time.Second, "c", false, 0},
		{GCInterval + time.Second, "", true, 2},
		{GCInterval + 2*time.Second, "", false, 0},
	} {
		if tc.sandbox != "" {
			gone(tc.sandbox)
		}
		removed, ran, err := GCDue(o, GCInterval, now.Add(tc.at))
		if err != nil || ran != tc.ran || removed != tc.removed {
			t.Errorf("at +%s: GCDue = %d, %v, %v; want %d, %v", tc.at, removed, ran, err, tc.removed, tc.ran)
		}
	}
}
