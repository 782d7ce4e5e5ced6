package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/node/install"
)

// TestInstallKubectlPluginCmd: install links kubectl-gpurun and
// kubectl_complete-gpurun to this executable (dry run first, changing
// nothing), again changes nothing, uninstall removes both; --dir and
// --system exclude each other.
func TestInstallKubectlPluginCmd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	links := []string{filepath.Join(dir, install.KubectlPluginFile), filepath.Join(dir, install.KubectlCompleteFile)}
	stdout, stderr, code := execute(t, "install", "kubectl-plugin", "--dir", dir, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would link "+links[0]) || !strings.Contains(stdout, "would link "+links[1]) {
		t.Fatalf("dry run: %d %q %q", code, stdout, stderr)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("dry run made %s", dir)
	}
	for i := 0; i < 2; i++ {
		if stdout, stderr, code := execute(t, "install", "kubectl-plugin", "--dir", dir); code != 0 || (i == 1 && !strings.Contains(stdout, "already installed")) {
			t.Fatalf("install #%d: %d %q %q", i+1, code, stdout, stderr)
		}
	}
	for _, l := range links {
		if got, err := os.Readlink(l); err != nil || got != self {
			t.Errorf("%s -> %q %v, want %q", l, got, err, self)
		}
	}
	if _, stderr, code := execute(t, "uninstall", "kubectl-plugin", "--dir", dir); code != 0 {
		t.Fatalf("uninstall: %d %s", code, stderr)
	}
	for _, l := range links {
		if _, err := os.Lstat(l); !os.IsNotExist(err) {
			t.Errorf("uninstall left %s", l)
		}
	}
	if _, stderr, code := execute(t, "install", "kubectl-plugin", "--dir", dir, "--system"); code != 2 || !strings.Contains(stderr, "choose one") {
		t.Errorf("--dir with --system: %d %q", code, stderr)
	}
}

// TestKubectlCompleteArgs: kubectl_complete-gpurun's words become gpurun's
// completion request; gpurun's and kubectl-gpurun's command lines stay.
func TestKubectlCompleteArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/usr/bin/kubectl_complete-gpurun", []string{"doctor", "pod/"}, []string{"__complete", "doctor", "pod/"}},
		{"kubectl_complete-gpurun", []string{""}, []string{"__complete", ""}},
		{"/usr/bin/kubectl-gpurun", []string{"doctor", "pod/x"}, []string{"doctor", "pod/x"}},
		{"/usr/bin/gpurun", []string{"doctor"}, []string{"doctor"}},
	} {
		if got := kubectlCompleteArgs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}
