//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// testBuilds are the binaries the tests run: gpurun and gpurun-runtime as
// released, and gpurun-runtime-fault, gpurun-runtime built with the
// test-only tag gpurunfault, whose enforcer panics while planning (see
// cmd/gpurun-runtime/fault.go).
var testBuilds = []struct{ name, pkg, tags string }{
	{"gpurun", "gpurun", ""},
	{"gpurun-runtime", "gpurun-runtime", ""},
	{"gpurun-runtime-fault", "gpurun-runtime", "gpurunfault"},
}

// builtBinaries builds testBuilds from this checkout once per test run,
// into a temporary directory.
var builtBinaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gpurun-bin-")
	if err != nil {
		return "", err
	}
	for _, b := range testBuilds {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", filepath.Join(dir, b.name), "../cmd/"+b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", &buildError{b.name, string(out), err}
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
