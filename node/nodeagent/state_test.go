package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFileStatVouches(t *testing.T) {
	base := FileStat{Dev: 1, Ino: 2, Size: 3, MtimeNS: 4e9, CtimeNS: 5e9, Seen: time.Unix(10, 0)}
	for _, tc := range []struct {
		name   string
		change func(cur *FileStat)
		seen   time.Time
		want   bool
	}{
		{"unchanged and settled", func(*FileStat) {}, time.Unix(10, 0), true},
		{"seen within the settle time of its change", func(*FileStat) {}, time.Unix(5, 5e8), false},
		{"another inode (a file renamed over it)", func(c *FileStat) { c.Ino++ }, time.Unix(10, 0), false},
		{"another size", func(c *FileStat) { c.Size++ }, time.Unix(10, 0), false},
		{"written since (ctime)", func(c *FileStat) { c.CtimeNS++ }, time.Unix(10, 0), false},
		{"mtime set back", func(c *FileStat) { c.MtimeNS-- }, time.Unix(10, 0), false},
	} {
		rec := base
		rec.Seen = tc.seen
		cur := base
		cur.Seen = time.Time{}
		tc.change(&cur)
		if got := rec.vouches(cur); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if (*FileStat)(nil).vouches(base) {
		t.Error("no record vouches")
	}
}

// TestCheckBinaryDoesNotReadVouchedFiles has checkBinary look at a path it
// cannot read (a directory): with a FileStat that vouches for it, it must
// not try.
func TestCheckBinaryDoesNotReadVouchedFiles(t *testing.T) {
	dir := t.TempDir()
	st, err := statFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Seen = time.Unix(0, st.CtimeNS).Add(2 * settleTime)
	b := &Binary{SHA256: "x", Stat: &st}
	if ok, missing, err := checkBinary(dir, b); !ok || missing || err != nil {
		t.Errorf("vouched: ok %v, missing %v, err %v", ok, missing, err)
	}
	b.Stat = nil
	if _, _, err := checkBinary(dir, b); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("not vouched: %v; want it to read the file", err)
	}
}

// TestStatusSeesChangesUnderARecordedStat rewrites a settled binary in
// place, same size and mtime: its ctime tells.
func TestStatusSeesChangesUnderARecordedStat(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(false)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settleTime + 100*time.Millisecond)
	rec, _ := loadRecord(n.path(DefaultStatePath))
	if !a.noteBinaries(rec) {
		t.Fatal("no FileStat recorded for settled binaries")
	}
	if err := rec.save(n.path(DefaultStatePath)); err != nil {
		t.Fatal(err)
	}
	if a.noteBinaries(rec) {
		t.Error("recorded again, unchanged")
	}
	if st := a.Status(); len(st.Problems) != 0 {
		t.Fatalf("settled: %+v", st)
	}
	p := n.path(filepath.Join(DefaultBinDir, RuntimeBinary))
	fi, _ := os.Stat(p)
	data, _ := os.ReadFile(p)
	data[len(data)-2] ^= 1
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); !strings.Contains(st.Reason, "/usr/local/bin/gpurun-runtime is not the file gpurun copied") {
		t.Errorf("rewritten in place: %+v", st)
	}
}
