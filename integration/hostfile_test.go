//go:build integration

package integration

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"testing"
)

// keepHostFile puts a file of the machine back as it was when the test
// ends: removed if it did not exist, else its content and mode restored.
// It is for a file the code under test writes by design and the test
// cannot point elsewhere, such as gpurun's default log, which a shim
// whose policy file is gone still writes; `make check-host` fails on any
// other change.
func keepHostFile(t *testing.T, path string) {
	t.Helper()
	saved, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("save %s: %v", path, err)
	}
	var mode fs.FileMode
	if existed {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("save %s: %v", path, err)
		}
		mode = fi.Mode().Perm()
	}
	t.Cleanup(func() {
		if !existed {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("restore %s: %v", path, err)
			}
			return
		}
		if now, err := os.ReadFile(path); err == nil && bytes.Equal(now, saved) {
			return
		}
		if err := os.WriteFile(path, saved, mode); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
	})
}
