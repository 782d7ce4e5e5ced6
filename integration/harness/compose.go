package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ComposeV2Env names the docker compose v2 CLI plugin binary (make builds
// it from the Go module proxy into /var/cache/gpurun-tools (.tools/ when not root): make test-integration sets it).
const ComposeV2Env = "GPURUN_TEST_COMPOSE_V2"

// ComposeV2 is the docker compose v2 CLI plugin, installed in a docker
// configuration directory of the test's own, so that the host's docker
// configuration and plugins are neither used nor touched.
type ComposeV2 struct {
	// ConfigDir is the DOCKER_CONFIG whose cli-plugins/docker-compose is
	// the plugin.
	ConfigDir string
	// Version is what `docker compose version --short` says.
	Version string
}

// RequireComposeV2 installs $GPURUN_TEST_COMPOSE_V2 as the docker CLI's
// compose plugin in a fresh DOCKER_CONFIG and checks that `docker compose`
// runs it, or fails the test saying how to get it: a missing tool fails the
// test, it does not skip it.
func RequireComposeV2(t testing.TB) *ComposeV2 {
	t.Helper()
	bin := os.Getenv(ComposeV2Env)
	if bin == "" {
		t.Fatalf("harness: prerequisite missing: $%s is not set: run the tests with `make test-integration` (it builds the docker compose v2 CLI plugin into /var/cache/gpurun-tools (.tools/ when not root) and sets it), or point it at a docker-compose v2 plugin binary", ComposeV2Env)
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("harness: prerequisite missing: no executable docker compose plugin at %s (%v): run `make test-integration`, which builds it", bin, err)
	}
	requireBinary(t, "docker", "docker.io")
	c := &ComposeV2{ConfigDir: filepath.Join(makeDir(t, "cfg"), "docker")}
	plugins := filepath.Join(c.ConfigDir, "cli-plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.Symlink(abs, filepath.Join(plugins, "docker-compose")); err != nil {
		t.Fatalf("harness: install the compose plugin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _, err := runCmd(ctx, c.Env(envWithout("DOCKER_HOST")), "docker", "compose", "version", "--short")
	if err != nil {
		t.Fatalf("harness: docker does not run the compose plugin %s: %v", bin, err)
	}
	c.Version = strings.TrimSpace(out)
	if !strings.HasPrefix(strings.TrimPrefix(c.Version, "v"), "2.") {
		t.Fatalf("harness: %s is docker compose %q, not v2", bin, c.Version)
	}
	return c
}

// Env returns env with DOCKER_CONFIG set to the plugin's configuration
// directory (a later entry wins over an earlier one).
func (c *ComposeV2) Env(env []string) []string {
	return append(append([]string{}, env...), "DOCKER_CONFIG="+c.ConfigDir)
}
