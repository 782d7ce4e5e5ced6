package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultPaths(t *testing.T) {
	dir := t.TempDir()
	withRuntime, alone, real := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "real")
	for _, d := range []string{withRuntime, alone, real} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(withRuntime, "gpurun"), filepath.Join(withRuntime, "gpurun-runtime"), filepath.Join(real, "gpurun")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(alone, "gpurun")
	if err := os.Symlink(filepath.Join(real, "gpurun"), link); err != nil {
		t.Fatal(err)
	}
	self := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }
	lost := func() (string, error) { return "", errors.New("no /proc") }
	for _, tc := range []struct {
		name        string
		hostRoot    string
		executable  func() (string, error)
		runtime, hk string
	}{
		{"gpurun-runtime next to gpurun", "", self(filepath.Join(withRuntime, "gpurun")), filepath.Join(withRuntime, "gpurun-runtime"), filepath.Join(withRuntime, "gpurun")},
		{"host root /", "/", self(filepath.Join(withRuntime, "gpurun")), filepath.Join(withRuntime, "gpurun-runtime"), filepath.Join(withRuntime, "gpurun")},
		{"none next to it; a link resolved", "", self(link), InstalledRuntimePath, filepath.Join(real, "gpurun")},
		{"another host's root", "/host", self(filepath.Join(withRuntime, "gpurun")), InstalledRuntimePath, InstalledGPURunPath},
		{"no executable", "", lost, InstalledRuntimePath, InstalledGPURunPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultRuntimePath(tc.hostRoot, tc.executable); got != tc.runtime {
				t.Errorf("DefaultRuntimePath = %s, want %s", got, tc.runtime)
			}
			if got := DefaultHookPath(tc.hostRoot, tc.executable); got != tc.hk {
				t.Errorf("DefaultHookPath = %s, want %s", got, tc.hk)
			}
		})
	}
}

// TestRunningDockerRoot: no daemon at DOCKER_HOST is an error naming it.
func TestRunningDockerRoot(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	getenv := func(k string) string { return map[string]string{"DOCKER_HOST": "unix://" + sock}[k] }
	if root, err := RunningDockerRoot(context.Background(), getenv)(); err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("RunningDockerRoot = %+v, %v; want an error naming %s", root, err, sock)
	}
}
