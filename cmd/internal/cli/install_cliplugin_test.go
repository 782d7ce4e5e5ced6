package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/docker/cliplugin"
	"github.com/gpurun/gpurun/docker/launch"
)

// pluginEnv isolates the variables docker-gpurun reads and sets; t.Setenv
// puts them back when the test ends.
func pluginEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{launch.DockerEnv, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", "DOCKER_CLI_PLUGIN_SOCKET",
		"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "GPURUN_CONFIG", "GPURUN_DRY_RUN", "GPURUN_VERBOSE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

func TestInstallDockerCLIPluginCmd(t *testing.T) {
	pluginEnv(t)
	dir := filepath.Join(t.TempDir(), "plugins")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, cliplugin.CLIPluginFile)

	stdout, stderr, code := execute(t, "install", "docker-cli-plugin", "--dir", dir, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would link "+link) {
		t.Fatalf("dry run: %d %q %q", code, stdout, stderr)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("dry run made %s", link)
	}
	if _, stderr, code := execute(t, "install", "docker-cli-plugin", "--dir", dir); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	if got, err := os.Readlink(link); err != nil || got != self {
		t.Fatalf("link -> %q %v, want %q", got, err, self)
	}
	if _, stderr, code := execute(t, "uninstall", "docker-cli-plugin", "--dir", dir); code != 0 {
		t.Fatalf("uninstall: %d %s", code, stderr)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("uninstall left %s", link)
	}

	// DOCKER_CONFIG decides the directory, as it does for the docker CLI.
	cfg := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfg)
	if _, stderr, code := execute(t, "install", "docker-cli-plugin"); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	if _, err := os.Readlink(filepath.Join(cfg, "cli-plugins", cliplugin.CLIPluginFile)); err != nil {
		t.Error(err)
	}

	if _, stderr, code := execute(t, "install", "docker-cli-plugin", "--dir", dir, "--system"); code != 2 || !strings.Contains(stderr, "choose one") {
		t.Errorf("--dir with --system: %d %q", code, stderr)
	}
}
