//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// binDir is where this test process builds the binaries under test:
// named after the process, so that TestMain removes it without being told.
func binDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("gpurun-bin-%d", os.Getpid()))
}

// TestMain runs the tests, then removes the binaries they built. A copy of
// this binary that runInSandbox started runs its sandbox job instead.
func TestMain(m *testing.M) {
	if job := os.Getenv(sandboxEnv); job != "" {
		os.Exit(sandboxMain(job))
	}
	// Engines start with SIGHUP at its default (terminate), as systemd
	// starts them, even when this run inherited it ignored (nohup, some CI
	// runners): exec keeps an ignored signal ignored, but resets a handled
	// one. TestContainerdSIGHUPDoesNotReload depends on it.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	code := m.Run()
	if err := os.RemoveAll(binDir()); err != nil {
		fmt.Fprintf(os.Stderr, "remove the built binaries: %v\n", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// testBuilds are the binaries the tests run: gpurun (the lean launcher,
// which hands compose, plan, node, nri, ... to gpurun-full next to it),
// gpurun-full and gpurun-runtime as released, and gpurun-runtime-fault,
// gpurun-runtime built with the test-only tag gpurunfault, whose enforcer
// panics while planning (see cmd/gpurun-runtime/fault.go).
var testBuilds = []struct{ name, pkg, tags string }{
	{"gpurun", "gpurun", ""},
	{"gpurun-full", "gpurun-full", ""},
	{"gpurun-runtime", "gpurun-runtime", ""},
	{"gpurun-runtime-fault", "gpurun-runtime", "gpurunfault"},
}

// builtBinaries builds testBuilds from this checkout once per test run,
// into binDir.
var builtBinaries = sync.OnceValues(func() (string, error) {
	dir := binDir()
	// A directory of a crashed run whose pid this process reuses.
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
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
