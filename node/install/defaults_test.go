package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/node/hook"
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
	hookMode := func(p string) bool { return p == filepath.Join(withRuntime, "gpurun-runtime") }
	older := func(string) bool { return false }
	for _, tc := range []struct {
		name        string
		hostRoot    string
		executable  func() (string, error)
		runsHook    func(string) bool
		runtime, hk string
	}{
		{"gpurun-runtime next to gpurun", "", self(filepath.Join(withRuntime, "gpurun")), hookMode, filepath.Join(withRuntime, "gpurun-runtime"), filepath.Join(withRuntime, "gpurun-runtime")},
		{"an older gpurun-runtime next to gpurun", "", self(filepath.Join(withRuntime, "gpurun")), older, filepath.Join(withRuntime, "gpurun-runtime"), filepath.Join(withRuntime, "gpurun")},
		{"host root /", "/", self(filepath.Join(withRuntime, "gpurun")), hookMode, filepath.Join(withRuntime, "gpurun-runtime"), filepath.Join(withRuntime, "gpurun-runtime")},
		{"none next to it; a link resolved", "", self(link), hookMode, InstalledRuntimePath, filepath.Join(real, "gpurun")},
		{"another host's root", "/host", self(filepath.Join(withRuntime, "gpurun")), hookMode, InstalledRuntimePath, InstalledGPURunPath},
		{"no executable", "", lost, hookMode, InstalledRuntimePath, InstalledGPURunPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultRuntimePath(tc.hostRoot, tc.executable); got != tc.runtime {
				t.Errorf("DefaultRuntimePath = %s, want %s", got, tc.runtime)
			}
			if got := DefaultHookPath(tc.hostRoot, tc.executable, tc.runsHook); got != tc.hk {
				t.Errorf("DefaultHookPath = %s, want %s", got, tc.hk)
			}
		})
	}
}

// TestRunsHook: a program whose `hook --help` exits 0 with gpurun-runtime's
// hook usage has the hook mode; one that answers as runc does (a
// gpurun-runtime from before the hook mode hands the command to runc), or
// succeeds without the usage, or is missing, has not.
func TestRunsHook(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, script string
		want         bool
	}{
		{"hook mode", "#!/bin/sh\n[ \"$1 $2\" = \"hook --help\" ] || exit 9\necho 'Usage of " + hook.RuntimeUsage + ":'\n", true},
		{"runc's answer", "#!/bin/sh\necho \"No help topic for 'hook'\" >&2\nexit 3\n", false},
		{"exit 0 without the usage", "#!/bin/sh\nexit 0\n", false},
		{"missing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.script != "" {
				if err := os.WriteFile(path, []byte(tc.script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got := RunsHook(path); got != tc.want {
				t.Errorf("RunsHook(%s) = %v, want %v", tc.name, got, tc.want)
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
