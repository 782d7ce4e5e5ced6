package fullcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNodeAndRestartFlags(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(config, []byte("version = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"a bad restart mode", []string{"install", "containerd", "--config", config, "--restart=sighup"}, 2, `restart mode "sighup"`},
		{"--restart alone parses (as systemd; --dry-run restarts nothing)", []string{"--dry-run", "install", "containerd", "--config", config, "--runtime-path", "/usr/local/bin/gpurun-runtime", "--restart"}, 0, "+[plugins"},
		{"node: a bad restart mode", []string{"node", "install", "--host-root", host, "--restart=reload"}, 2, "want one of none|signal|systemd"},
		{"node: no --dry-run", []string{"--dry-run", "node", "install", "--host-root", host}, 2, "no --dry-run"},
		{"node status: nothing installed", []string{"node", "status", "--host-root", host}, 1, "not ready: gpurun is not installed on this node"},
		{"node uninstall: nothing installed", []string{"node", "uninstall", "--host-root", host, "--containerd-config", "/nonexistent.toml"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := execute(t, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.contains) {
				t.Errorf("exit %d, want %d; output does not contain %q:\n%s%s", code, tc.code, tc.contains, stdout, stderr)
			}
		})
	}
}
