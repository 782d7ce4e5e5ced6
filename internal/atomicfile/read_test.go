package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile reads what os.ReadFile reads, and fails where it fails.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		wantErr error // nil: the content os.ReadFile gives
	}{
		{"small file", write("small", []byte("runtime = \"runc\"\n")), nil},
		{"empty file", write("empty", nil), nil},
		{"larger than a page", write("large", bytes.Repeat([]byte("0123456789abcdef"), 5000)), nil},
		{"511 bytes", write("511", bytes.Repeat([]byte("x"), 511)), nil},
		{"512 bytes, the smallest buffer", write("512", bytes.Repeat([]byte("x"), 512)), nil},
		{"513 bytes", write("513", bytes.Repeat([]byte("x"), 513)), nil},
		{"size 0 in stat, more than 512 bytes to read", "/proc/self/limits", nil},
		{"missing", filepath.Join(dir, "nope"), fs.ErrNotExist},
		{"a directory", dir, errors.New("is a directory")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadFile(tt.path)
			if tt.wantErr != nil {
				if err == nil || !strings.Contains(err.Error(), tt.path) ||
					!errors.Is(err, tt.wantErr) && !strings.Contains(err.Error(), tt.wantErr.Error()) {
					t.Fatalf("ReadFile(%s) = %d bytes, %v; want an error naming it: %v", tt.path, len(got), err, tt.wantErr)
				}
				return
			}
			want, err2 := os.ReadFile(tt.path)
			if err != nil || err2 != nil {
				t.Fatalf("ReadFile: %v; os.ReadFile: %v", err, err2)
			}
			// /proc/self/limits is the same for both: the same process.
			if !bytes.Equal(got, want) {
				t.Errorf("ReadFile = %d bytes, os.ReadFile %d bytes", len(got), len(want))
			}
		})
	}
}
