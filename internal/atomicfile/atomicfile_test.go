package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name     string
		existing *os.FileMode // nil: no file yet
		mode     os.FileMode
		wantMode os.FileMode
	}{
		{"new file gets mode", nil, 0o640, 0o640},
		{"existing file keeps its mode", ptr(0o600), 0o644, 0o600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if tt.existing != nil {
				if err := os.WriteFile(path, []byte("old"), *tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			if err := Write(path, []byte("new"), tt.mode); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			fi, _ := os.Stat(path)
			if string(data) != "new" || fi.Mode().Perm() != tt.wantMode {
				t.Errorf("got %q mode %v, want \"new\" mode %v", data, fi.Mode().Perm(), tt.wantMode)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("temporary files left: %v", entries)
			}
		})
	}
	// A failure names the file and leaves the old one as it was.
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if os.Geteuid() == 0 {
		// root writes anywhere; use a missing directory instead.
		path = filepath.Join(dir, "missing", "f")
	}
	if err := Write(path, []byte("new"), 0o644); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v, want one naming %s", err, path)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "f")); string(data) != "old" {
		t.Errorf("old file changed: %q", data)
	}
}

func ptr(m os.FileMode) *os.FileMode { return &m }

// failingReader returns some bytes, then an error.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		r.n = 0
		return copy(p, "partial"), nil
	}
	return 0, errors.New("source broke")
}

func TestWriteFrom(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bin")
	if err := WriteFrom(path, strings.NewReader("streamed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "streamed" {
		t.Errorf("got %q", data)
	}
	// A source that fails leaves the old file and no temporary file.
	err := WriteFrom(path, &failingReader{n: 1}, 0o755)
	if err == nil || !strings.Contains(err.Error(), "source broke") {
		t.Errorf("got %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "streamed" {
		t.Errorf("after a failed write: %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// TestSyncDir: the fsync of the directory that makes a rename durable
// reports its failure instead of dropping it.
func TestSyncDir(t *testing.T) {
	if err := syncDir(t.TempDir()); err != nil {
		t.Errorf("syncDir of a directory: %v", err)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "gone"), "/dev/null"} {
		if err := syncDir(bad); err == nil {
			t.Errorf("syncDir(%s) = nil, want an error", bad)
		}
	}
}
