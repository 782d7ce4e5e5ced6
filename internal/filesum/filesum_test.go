package filesum

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestSHA256 hashes a file's content as sha256sum does, and a missing file
// is fs.ErrNotExist.
func TestSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := SHA256(p)
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; err != nil || got != want {
		t.Errorf("SHA256 = %q, %v; want %q", got, err, want)
	}
	if _, err := SHA256(p + ".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SHA256 of a missing file: %v, want fs.ErrNotExist", err)
	}
}
