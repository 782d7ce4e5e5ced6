//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builtBinaries builds bin/gpurun and bin/gpurun-runtime from this checkout
// once per test run, into a temporary directory.
var builtBinaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gpurun-bin-")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"gpurun", "gpurun-runtime"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "../cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", &buildError{name, string(out), err}
		}
	}
	return dir, nil
})

type buildError struct {
	name, out string
	err       error
}

func (e *buildError) Error() string {
	return "go build " + e.name + ": " + e.err.Error() + "\n" + e.out
}

// bin returns the path of a freshly built gpurun binary.
func bin(t testing.TB, name string) string {
	t.Helper()
	dir, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}
