package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// HelmEnv names the helm binary the cluster tests install the chart with
// (make builds it into /var/cache/gpurun-tools (.tools/ when not root): make test-integration sets it).
const HelmEnv = "GPURUN_TEST_HELM"

// RequireHelm returns $GPURUN_TEST_HELM, or fails the test saying how to
// get it: a missing tool fails the test, it does not skip it.
func RequireHelm(t testing.TB) string {
	t.Helper()
	p := os.Getenv(HelmEnv)
	if p == "" {
		t.Fatalf("harness: prerequisite missing: $%s is not set: run the tests with `make test-integration` (it builds helm into /var/cache/gpurun-tools (.tools/ when not root) and sets it)", HelmEnv)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("harness: prerequisite missing: no executable helm at %s (%v)", p, err)
	}
	return p
}

// Helm runs helm against the cluster, as the admin, inside the cluster's
// namespaces, and returns its stdout; the error carries the command, its
// status and stderr. helm's cache, config and data are below Dir.
func (c *Cluster) Helm(helm string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout+time.Minute)
	defer cancel()
	home := filepath.Join(c.Dir, "helm")
	cmd := exec.CommandContext(ctx, helm, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(envWithout("KUBECONFIG", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"),
		"HOME="+c.Dir, "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := c.ns.Command(cmd); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// KubectlBinary is the cluster's kubectl (a helm post-renderer may run
// its kustomize).
func (c *Cluster) KubectlBinary() string { return filepath.Join(c.k8sBin, "kubectl") }
