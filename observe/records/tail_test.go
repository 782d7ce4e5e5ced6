package records_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpurun/gpurun/observe/records"
)

func rec(id string) string {
	return fmt.Sprintf(`{"msg":"planned /dev/shm","component":"gpurun-runtime","id":%q,"action":"none"}`+"\n", id)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// read returns the ids of the records a Read hands over.
func read(t *testing.T, tl *records.Tail) []string {
	t.Helper()
	var ids []string
	if err := tl.Read(func(r records.Record) { ids = append(ids, r.ID) }); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestTail(t *testing.T) {
	type step struct {
		do   func(t *testing.T, path string)
		want []string
	}
	app := func(s string) func(*testing.T, string) { return func(t *testing.T, p string) { appendTo(t, p, s) } }
	tests := []struct {
		name  string
		setup string // the file's content before the Tail starts ("" no file)
		steps []step
	}{
		{"starts at the end", rec("old"), []step{{app(""), nil}, {app(rec("a") + rec("b")), []string{"a", "b"}}, {app(""), nil}}},
		{"no file yet", "", []step{{app(""), nil}, {app(rec("a")), []string{"a"}}}},
		{"partial line waits for its end", rec("old"), []step{
			{app(rec("a")[:20]), nil},
			{app(rec("a")[20:] + rec("b")[:5]), []string{"a"}},
			{app(rec("b")[5:]), []string{"b"}},
		}},
		{"other messages and noise", rec("old"), []step{{app(`{"msg":"host facts incomplete"}` + "\n\n" + rec("a")), []string{"a"}}}},
		{"rotation: rename and create", rec("old"), []step{
			{app(rec("a")), []string{"a"}},
			{func(t *testing.T, p string) {
				appendTo(t, p, rec("b"))
				if err := os.Rename(p, p+".1"); err != nil {
					t.Fatal(err)
				}
				appendTo(t, p, rec("c"))
			}, []string{"b", "c"}},
			{app(rec("d")), []string{"d"}},
		}},
		{"rotation: renamed, new file later", rec("old"), []step{
			{func(t *testing.T, p string) {
				if err := os.Rename(p, p+".1"); err != nil {
					t.Fatal(err)
				}
				appendTo(t, p+".1", rec("a"))
			}, []string{"a"}},
			{app(rec("b")), []string{"b"}},
		}},
		{"copytruncate", rec("old") + rec("old2"), []step{
			{app(rec("a")), []string{"a"}},
			{func(t *testing.T, p string) {
				if err := os.Truncate(p, 0); err != nil {
					t.Fatal(err)
				}
				appendTo(t, p, rec("b"))
			}, []string{"b"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gpurun.log")
			if tt.setup != "" {
				appendTo(t, path, tt.setup)
			}
			tl := records.NewTail(path, nil)
			defer tl.Close()
			for i, s := range tt.steps {
				s.do(t, path)
				if got := read(t, tl); !slices.Equal(got, s.want) {
					t.Fatalf("step %d: read %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

// TestTailResumes: a Tail started at a saved Pos reads what was written
// since, once; a Pos of another file (rotated since) is not used.
func TestTailResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpurun.log")
	appendTo(t, path, rec("a"))
	tl := records.NewTail(path, nil)
	appendTo(t, path, rec("b")+rec("c")[:10])
	if got := read(t, tl); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("read %v", got)
	}
	pos := tl.Pos()
	tl.Close()
	appendTo(t, path, rec("c")[10:]+rec("d"))
	tl = records.NewTail(path, &pos)
	if got := read(t, tl); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("resumed: read %v, want [c d]", got)
	}
	tl.Close()
	stale := records.Pos{Inode: pos.Inode + 1, Offset: 0}
	tl = records.NewTail(path, &stale)
	defer tl.Close()
	appendTo(t, path, rec("e"))
	if got := read(t, tl); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("stale pos: read %v, want [e]", got)
	}
}
