//go:build integration

package integration

// The Helm chart (deploy/helm/gpurun) on the harness's single-node
// cluster: helm install in runtime-class mode, GPU pods get the policy
// given as values, helm uninstall takes gpurun off the node again.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// helmPolicy is the policy the test gives the chart as values: not the
// shipped one, so that a pod sized by the chart's default would fail.
const helmPolicy = `size = "25%"
min = "1g"
allowed_annotations = ["gpurun.io/shm-size"]
log_file = "/var/log/gpurun.log"
`

// TestClusterHelm installs the chart with helm on a cluster with
// containerd 1.6, checks GPU pods' /dev/shm, uninstalls it with helm and
// checks the node is as it was; then that the cluster's cleanup leaves
// nothing behind.
func TestClusterHelm(t *testing.T) {
	helm := harness.RequireHelm(t)
	begin := time.Now()
	var c *harness.Cluster
	t.Run("cluster", func(t *testing.T) {
		c = harness.StartCluster(t, harness.ClusterOptions{})
		e := newClusterEnv(t, c, false)
		pol, err := policy.Parse("helm values policy", []byte(helmPolicy))
		if err != nil {
			t.Fatal(err)
		}
		e.pol = pol
		e.testHelm(t, helm)
	})
	t.Logf("TestClusterHelm took %s", time.Since(begin).Round(100*time.Millisecond))
	if c == nil {
		return
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("the cluster's cleanup left:\n%s", strings.Join(left, "\n"))
	}
}

// helmPostRenderer writes a helm post-renderer: kubectl kustomize over
// what the chart rendered, with the same test-only patches agentOverlay
// adds to the overlays (the agent's records at the cluster's paths); the
// chart's own values set everything else.
func (e *clusterEnv) helmPostRenderer(t *testing.T) string {
	t.Helper()
	c := e.c
	dir := c.WriteManifestDir(map[string]string{"kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - chart.yaml
patches:
  - target: {kind: DaemonSet, name: gpurun-node}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--policy=%s"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--state=%s"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--install-state=%s"}
      - {op: add, path: /spec/template/spec/containers/0/readinessProbe/exec/command/-, value: "--state=%s"}
`, c.PolicyPath, c.AgentState, c.InstallState, c.AgentState)})
	script := filepath.Join(dir, "post-render")
	body := fmt.Sprintf("#!/bin/sh\nset -e\ncat > %q\nexec %q kustomize %q\n", filepath.Join(dir, "chart.yaml"), c.KubectlBinary(), dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// helmValues writes the values file: runtime-class mode, the locally
// imported image, the cluster's node paths and helmPolicy.
func (e *clusterEnv) helmValues(t *testing.T) string {
	t.Helper()
	c := e.c
	var pol strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(helmPolicy, "\n"), "\n") {
		pol.WriteString("  " + l + "\n")
	}
	values := fmt.Sprintf(`mode: runtime-class
distribution: containerd
image:
  repository: %s
  tag: %s
nodeAgent:
  binDir: %s
  containerdConfig: %s
policy: |
%s`, agentImageName, agentImageTag, c.BinDir, c.Containerd.ConfigPath, pol.String())
	file := filepath.Join(c.WriteManifestDir(nil), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// testHelm: helm install (restart=none: the test restarts containerd, as
// the administrator would), GPU pods with runtimeClassName gpurun get
// helmPolicy's size, others containerd's; helm uninstall restores
// containerd's config byte for byte, running pods keep running, and a new
// GPU pod gets containerd's 64 MiB.
func (e *clusterEnv) testHelm(t *testing.T, helm string) {
	c := e.c.For(t)
	chart, err := filepath.Abs(filepath.Join("..", "deploy", "helm", "gpurun"))
	if err != nil {
		t.Fatal(err)
	}
	ns := testNamespace(t, c)
	c.Apply(podManifest(ns, podSpec{name: "before", containers: []containerSpec{{name: "app"}}}))
	c.WaitPodReady(ns, "before", podTimeout)

	start := time.Now()
	uninstalled := false
	uninstall := func(t *testing.T) {
		uninstalled = true
		begin := time.Now()
		if out, err := c.Helm(helm, "uninstall", "gpurun", "--namespace", "gpurun-system", "--wait", "--timeout", "3m"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		t.Logf("helm uninstall took %s", time.Since(begin).Round(100*time.Millisecond))
	}
	t.Cleanup(func() {
		if !uninstalled {
			uninstall(t)
		}
		if _, err := c.Kubectl("delete", "namespace", "gpurun-system", "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
			t.Errorf("delete namespace gpurun-system: %v", err)
		}
	})
	out, err := c.Helm(helm, "install", "gpurun", chart, "--namespace", "gpurun-system", "--create-namespace",
		"--values", e.helmValues(t), "--post-renderer", e.helmPostRenderer(t))
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Logf("helm install took %s", time.Since(start).Round(100*time.Millisecond))
	pod := agentPod(t, c, "gpurun-node")
	if err := waitUntil(agentTimeout, func() (bool, string) {
		logs, err := c.Kubectl("logs", "-n", "gpurun-system", pod)
		return err == nil && strings.Contains(logs, "msg=installed"), logs
	}); err != nil {
		t.Fatalf("agent install: %v\n%s", err, c.Dump(harness.Pod("gpurun-system", pod)))
	}
	if installed, err := os.ReadFile(c.Containerd.ConfigPath); err != nil || bytes.Equal(installed, e.original) {
		t.Fatalf("the agent did not change containerd's config (%v)", err)
	}
	if got, err := os.ReadFile(c.PolicyPath); err != nil || string(got) != helmPolicy {
		t.Errorf("the node's policy (%v):\n%s\nwant the values' policy:\n%s", err, got, helmPolicy)
	}
	c.Containerd.Restart()
	c.WaitPodReady("gpurun-system", pod, agentTimeout)
	t.Logf("agent ready %s after helm install", time.Since(start).Round(100*time.Millisecond))

	const gib = 1024 * policy.MiB
	t.Run("pods", func(t *testing.T) {
		e.runShmCases(t, ns, []shmCase{
			{podSpec{name: "gpu-env", runtimeClass: "gpurun", containers: []containerSpec{
				{name: "trainer", env: []string{gpuEnv}}, {name: "sidecar"}}}, wantTarget(0)},
			{podSpec{name: "gpu-device", runtimeClass: "gpurun", containers: []containerSpec{
				{name: "trainer", gpus: 1}}}, wantTarget(0)},
			{podSpec{name: "gpu-limit", runtimeClass: "gpurun", containers: []containerSpec{
				{name: "trainer", env: []string{gpuEnv}, memoryLimit: "8Gi"}}}, wantTarget(8 * gib)},
			{podSpec{name: "no-class", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}}}}, wantEngine},
			{podSpec{name: "not-gpu", runtimeClass: "gpurun", containers: []containerSpec{{name: "app"}}}, wantEngine},
		})
	})

	t.Run("helm uninstall", func(t *testing.T) {
		running := map[string]string{}
		for _, p := range []string{"before", "gpu-env", "not-gpu"} {
			running[p] = containersRunning(t, c, ns, p)
		}
		uninstall(t)
		c.WaitGone(harness.Pod("gpurun-system", pod), agentTimeout)
		if now, err := os.ReadFile(c.Containerd.ConfigPath); err != nil || !bytes.Equal(now, e.original) {
			t.Errorf("containerd's config after helm uninstall: %v\n%s\nwant\n%s", err, now, e.original)
		}
		if out, err := c.Kubectl("get", "runtimeclass,daemonset,configmap", "-A", "-l", "app.kubernetes.io/part-of=gpurun", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("gpurun's objects after helm uninstall (%v):\n%s", err, out)
		}
		// restart=none: the administrator restarts containerd.
		c.Containerd.Restart()
		for p, before := range running {
			if now := containersRunning(t, c, ns, p); now != before {
				t.Errorf("pod %s: containers %s after helm uninstall, were %s", p, now, before)
			}
		}
		e.runShmCases(t, ns, []shmCase{{podSpec{name: "after", containers: []containerSpec{
			{name: "trainer", env: []string{gpuEnv}}}}, wantEngine}})
	})
}
