//go:build integration

package integration

// The node agent on the mixed cluster, installed with the chart as an
// administrator of a GPU cluster would (the GPU nodes only, by their
// label), and a node lost while GPU pods start on it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// nodeSnapshot is what the test compares on a node before and after:
// containerd's config (for k3s, its templates and generated config) and
// how many times containerd restarted.
type nodeSnapshot struct {
	files    map[string][]byte // node path -> contents (nil: absent)
	restarts int
}

// k3sFiles are the files of a k3s node's containerd layout.
func k3sFiles(k *harness.K3sNode) []string {
	d := k.ContainerdDir()
	return []string{k.ConfigPath(), filepath.Join(d, "config.toml.tmpl"), filepath.Join(d, "config-v3.toml.tmpl")}
}

func snapshotNode(n *harness.ClusterNode) nodeSnapshot {
	s := nodeSnapshot{files: map[string][]byte{}, restarts: len(n.Containerd.Restarts())}
	paths := []string{"/etc/containerd/config.toml"}
	if n.K3s != nil {
		paths = k3sFiles(n.K3s)
	}
	for _, p := range append(paths, "/usr/local/bin/gpurun-runtime", "/etc/gpurun/config.toml") {
		data, err := n.ReadFile(p)
		if err == nil {
			s.files[p] = data
		}
	}
	return s
}

// multiHelmPostRenderer writes a helm post-renderer that adds what the
// harness's cluster needs to the chart's pods and nothing else: the API
// server's address (no kube-proxy).
func multiHelmPostRenderer(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	dir := c.WriteManifestDir(map[string]string{"kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - chart.yaml
patches:
  - target: {kind: DaemonSet}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: %q}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "6443"}}
`, c.APIServerIP)})
	script := filepath.Join(dir, "post-render")
	body := fmt.Sprintf("#!/bin/sh\nset -e\ncat > %q\nexec %q kustomize %q\n", filepath.Join(dir, "chart.yaml"), c.KubectlBinary(), dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// agentsByNode returns the node agent's pods by node.
func agentsByNode(t *testing.T, c *harness.Cluster) map[string]struct {
	Name, UID string
	Restarts  int
} {
	t.Helper()
	out := c.MustKubectl("get", "pods", "-n", "gpurun-system", "-l", "app.kubernetes.io/name=gpurun-node", "-o", "json")
	var list struct {
		Items []struct {
			Metadata struct{ Name, UID string } `json:"metadata"`
			Spec     struct{ NodeName string }  `json:"spec"`
			Status   struct {
				ContainerStatuses []struct{ RestartCount int } `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]struct {
		Name, UID string
		Restarts  int
	}{}
	for _, p := range list.Items {
		r := 0
		for _, cs := range p.Status.ContainerStatuses {
			r += cs.RestartCount
		}
		got[p.Spec.NodeName] = struct {
			Name, UID string
			Restarts  int
		}{p.Metadata.Name, p.Metadata.UID, r}
	}
	return got
}

// gpuPodOn renders a pod bound to node: a GPU container (one
// nvidia.com/gpu from the node's device plugin, memory limit 8 GiB) or a
// plain one, with runtimeClassName class when set.
func gpuPodOn(ns, name, node, class string, gpu bool) string {
	res := "{limits: {memory: 1Gi}}"
	if gpu {
		res = fmt.Sprintf("{limits: {memory: 8Gi, %s: 1}}", harness.GPUResource)
	}
	rc := ""
	if class != "" {
		rc = "\n  runtimeClassName: " + class
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  nodeName: %s%s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: %s, imagePullPolicy: Never, command: [sleep, "2147483647"], resources: %s}
`, name, ns, node, rc, harness.BusyboxRef, res)
}

// testChartRuntimeClass: helm install of the previous release's chart
// (harness.RequirePrevious) in runtime-class mode with the nodeSelector an
// administrator gives it on a GPU cluster (nvidia.com/gpu.present=true),
// everything else as shipped. The agent runs on each GPU node, whatever
// its engine (containerd 1.6, 2.x, k3s's layout: told apart by the agent
// itself), and on no other; with the shipped restart=none it installs and
// waits, not ready, until the administrator (the test) restarts
// containerd — k3s: its service, which renders the template — once per
// GPU node, none elsewhere. GPU pods then serve on every GPU node. A
// `helm upgrade` to this build's chart and image rolls the agents while
// GPU pods keep being created (e.rollout): none may miss the policy's
// size, no serving pod may restart or shrink, containerd restarts only
// where its config changed, once. On this build: GPU pods with the
// RuntimeClass on every GPU node get the shipped policy's size, plain ones
// keep containerd's; a node is lost (testNodeLoss). A `helm upgrade` back
// to the previous release (a downgrade) is measured the same way, and
// helm uninstall, with one more restart per GPU node, leaves each node's
// containerd config as it was before the first install. (restart=signal is
// refused on a k3s node: see testOverlayDefaultRuntime.)
func (e *multiEnv) testChartRuntimeClass(t *testing.T) {
	c := e.c.For(t)
	helm := harness.RequireHelm(t)
	chart, err := filepath.Abs(filepath.Join("..", "deploy", "helm", "gpurun"))
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]nodeSnapshot{}
	trees := map[string]map[string]string{}
	for _, n := range c.Nodes {
		before[n.Name] = snapshotNode(n)
		trees[n.Name] = nodeTree(t, n)
	}
	valuesFor := func(tag string) string {
		values := filepath.Join(c.WriteManifestDir(nil), "values.yaml")
		if err := os.WriteFile(values, []byte(fmt.Sprintf(`mode: runtime-class
image: {repository: %s, tag: %s}
nodeSelector: {nvidia.com/gpu.present: "true"}
`, agentImageName, tag)), 0o644); err != nil {
			t.Fatal(err)
		}
		return values
	}
	values, prevValues := valuesFor(agentImageTag), valuesFor(prevImageTag)
	postRenderer := multiHelmPostRenderer(t, c)
	uninstalled := false
	uninstall := func(t *testing.T) time.Duration {
		uninstalled = true
		begin := time.Now()
		if out, err := c.Helm(helm, "uninstall", "gpurun", "--namespace", "gpurun-system", "--wait", "--timeout", "4m"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		return time.Since(begin)
	}
	t.Cleanup(func() {
		if !uninstalled {
			uninstall(t)
		}
		if _, err := c.Kubectl("delete", "namespace", "gpurun-system", "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
			t.Errorf("delete namespace gpurun-system: %v", err)
		}
	})
	start := time.Now()
	if out, err := c.Helm(helm, "install", "gpurun", e.prev.Chart(), "--namespace", "gpurun-system", "--create-namespace",
		"--values", prevValues, "--post-renderer", postRenderer); err != nil {
		t.Fatalf("helm install of %s: %v\n%s", e.prev.Short(), err, out)
	}
	// Each agent installs, then waits for the administrator's restart.
	var agents map[string]struct {
		Name, UID string
		Restarts  int
	}
	if err := waitUntil(agentTimeout, func() (bool, string) {
		agents = agentsByNode(t, c)
		for _, n := range c.Nodes {
			if n.GPUs == 0 {
				continue
			}
			a, ok := agents[n.Name]
			if !ok {
				return false, "no agent on " + n.Name
			}
			logs, _ := c.Kubectl("logs", "-n", "gpurun-system", a.Name)
			if !strings.Contains(logs, "msg=installed") {
				return false, n.Name + ": " + logs
			}
		}
		return true, ""
	}); err != nil {
		t.Fatalf("agents installing: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	for _, n := range c.Nodes {
		_, has := agents[n.Name]
		if has != (n.GPUs > 0) {
			t.Errorf("node %s (%d GPUs): an agent there: %v", n.Name, n.GPUs, has)
		}
		if n.GPUs > 0 {
			// systemctl restart containerd (k3s: systemctl restart k3s,
			// which renders the template first).
			c.NodeContainerd(n).Restart()
		}
	}
	c.WaitRollout("gpurun-system", "gpurun-node", agentTimeout)
	t.Logf("helm install of %s: every agent ready %s after it", e.prev.Short(), time.Since(start).Round(100*time.Millisecond))
	var restarts []string
	for _, n := range c.Nodes {
		got := len(n.Containerd.Restarts()) - before[n.Name].restarts
		restarts = append(restarts, fmt.Sprintf("%s %d", n.Name, got))
		want := 0
		if n.GPUs > 0 {
			want = 1 // its config changed: the administrator's one restart
		}
		if got != want {
			t.Errorf("node %s: containerd restarted %d times during the install, want %d", n.Name, got, want)
		}
	}
	t.Logf("containerd restarts during the install: %s", strings.Join(restarts, ", "))

	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := e.pol.Target(policy.Request{MemoryLimit: 8 * policy.GiB, HostMemory: mem})
	// GPU pods serving on every GPU node, through the rollouts.
	serving := e.serving(t, testNamespace(t, c), want)
	var upgrade, downgrade rolloutResult
	var restartedUp, restartedDown int
	t.Run("upgrade", func(t *testing.T) {
		upgrade = e.rollout(t, "upgrade", helm, chart, values, postRenderer, want)
		checkRollout(t, c, "upgrade", upgrade, false)
		restartedUp = serving.check(t, c, "upgrade")
	})
	t.Run("pods", func(t *testing.T) {
		c := e.c.For(t)
		var probes []shmProbe
		for _, n := range c.Nodes {
			if n.GPUs > 0 {
				probes = append(probes, shmProbe{"gpu-" + n.Name, n.Name, "gpurun", true, want}, shmProbe{"plain-" + n.Name, n.Name, "gpurun", false, engineShm})
			}
		}
		checkShmProbes(t, c, testNamespace(t, c), probes)
	})
	t.Run("node loss", func(t *testing.T) { e.testNodeLoss(t, want) })
	t.Run("downgrade", func(t *testing.T) {
		downgrade = e.rollout(t, "downgrade", helm, e.prev.Chart(), prevValues, postRenderer, want)
		checkRollout(t, c, "downgrade", downgrade, true)
		restartedDown = serving.check(t, c, "downgrade")
	})
	if upgrade.took > 0 && downgrade.took > 0 {
		// make bench prints this line.
		fmt.Printf("bench: node-agent-rollout from=%s gpu_nodes=%d upgrade_s=%.1f upgrade_containerd_restarts=%d upgrade_gpu_pods=%d upgrade_unsized=%d upgrade_restarted_pods=%d downgrade_s=%.1f downgrade_containerd_restarts=%d downgrade_gpu_pods=%d downgrade_unsized=%d downgrade_restarted_pods=%d\n",
			e.prev.Short(), len(serving.pods), upgrade.took.Seconds(), sum(upgrade.restarts), upgrade.probes, len(upgrade.unsized), restartedUp,
			downgrade.took.Seconds(), sum(downgrade.restarts), downgrade.probes, len(downgrade.unsized), restartedDown)
	}

	t.Run("helm uninstall", func(t *testing.T) {
		mid := map[string]int{}
		for _, n := range c.Nodes {
			mid[n.Name] = len(n.Containerd.Restarts())
		}
		mark := time.Now()
		took := uninstall(t)
		// The agents take gpurun off their node as they stop.
		if err := waitUntil(agentTimeout, func() (bool, string) {
			out, err := c.Kubectl("get", "pods", "-n", "gpurun-system", "-l", "app.kubernetes.io/name=gpurun-node", "-o", "name")
			return err == nil && strings.TrimSpace(out) == "", out
		}); err != nil {
			t.Fatalf("agents still there after helm uninstall: %v", err)
		}
		t.Logf("helm uninstall took %s, the agents gone %s after it began", took.Round(100*time.Millisecond), time.Since(mark).Round(100*time.Millisecond))
		for _, n := range c.Nodes {
			if n.GPUs > 0 {
				c.NodeContainerd(n).Restart() // restart=none: the administrator's
			}
		}
		for _, n := range c.Nodes {
			now := snapshotNode(n)
			for p, was := range before[n.Name].files {
				if !bytes.Equal(now.files[p], was) {
					t.Errorf("node %s: %s after helm uninstall:\n%s\nwant it as before the install:\n%s", n.Name, p, now.files[p], was)
				}
			}
			for p := range now.files {
				if _, was := before[n.Name].files[p]; was {
					continue
				}
				if strings.HasPrefix(p, "/etc/gpurun/") || strings.HasPrefix(p, "/usr/local/bin/") {
					t.Logf("node %s: %s stays after helm uninstall (the agent leaves gpurun's binaries and policy)", n.Name, p)
				} else {
					t.Errorf("node %s: %s is there after helm uninstall, was not before the install", n.Name, p)
				}
			}
			if got := len(n.Containerd.Restarts()) - mid[n.Name]; n.GPUs > 0 && got != 1 || n.GPUs == 0 && got != 0 {
				t.Errorf("node %s: containerd restarted %d times during the uninstall", n.Name, got)
			}
		}
		// The rest, as docs/install-kubernetes.md says: once the pods
		// started with gpurun are gone and containerd has restarted,
		// `gpurun node uninstall` on the node. Then each node is as
		// before the first install, file for file.
		c.MustKubectl("delete", "pods", "--all", "-n", serving.ns, "--wait=true", "--timeout=2m")
		for _, n := range c.Nodes {
			if n.GPUs == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			stdout, stderr, err := n.NetNS().Run(ctx, nil, "/usr/local/bin/gpurun", "node", "uninstall")
			cancel()
			if err != nil {
				t.Errorf("node %s: gpurun node uninstall: %v\n%s%s", n.Name, err, stdout, stderr)
			}
		}
		for _, n := range c.Nodes {
			now := nodeTree(t, n)
			for p, was := range trees[n.Name] {
				if got, ok := now[p]; !ok {
					t.Errorf("node %s: %s is gone, was there before the first install", n.Name, p)
				} else if got != was {
					t.Errorf("node %s: %s is not as before the first install: %s, was %s", n.Name, p, got, was)
				}
			}
			for p := range now {
				if _, ok := trees[n.Name][p]; !ok {
					t.Errorf("node %s: %s is there, was not before the first install", n.Name, p)
				}
			}
		}
	})
}

// nodeTree maps what node n has of gpurun's and of containerd's
// configuration — every directory and file below /etc/gpurun,
// /var/lib/gpurun, /etc/containerd and, on a k3s node, its containerd
// directory, and gpurun's files in /usr/local/bin (the machine's own tools
// are there too) — to the file's mode and the SHA-256 of its content (a
// directory's mode).
func nodeTree(t *testing.T, n *harness.ClusterNode) map[string]string {
	t.Helper()
	dirs := []string{"/usr/local/bin", "/etc/gpurun", "/var/lib/gpurun", "/etc/containerd"}
	if n.K3s != nil {
		dirs = append(dirs, n.K3s.ContainerdDir())
	}
	out := map[string]string{}
	err := n.NetNS().Do(func() error {
		for _, d := range dirs {
			err := filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				if err != nil {
					return err
				}
				if filepath.Dir(p) == "/usr/local/bin" && !strings.Contains(de.Name(), "gpurun") {
					return nil
				}
				fi, err := de.Info()
				if err != nil {
					return err
				}
				v := fi.Mode().String()
				if de.Type().IsRegular() {
					data, err := os.ReadFile(p)
					if err != nil {
						return err
					}
					v += fmt.Sprintf(" sha256 %x", sha256.Sum256(data))
				}
				out[p] = v
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	return out
}

// testNodeLoss: GPU pods start on a GPU node and its kubelet and
// containerd are killed outright; once they are back, the agent there is
// ready again without having restarted, the pods run with the policy's
// /dev/shm, as does a pod created after; nothing of the other nodes
// changed (their containerd, their config, their agent).
func (e *multiEnv) testNodeLoss(t *testing.T, want int64) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	lost := c.Node("gpu-c2")
	others := map[string]nodeSnapshot{}
	for _, n := range c.Nodes {
		if n != lost {
			others[n.Name] = snapshotNode(n)
		}
	}
	agentsBefore := agentsByNode(t, c)
	// A GPU pod and a plain one start as the node goes; one more GPU pod
	// comes after (the node has two GPUs).
	const starting = 2
	for i := 0; i < starting; i++ {
		c.Apply(gpuPodOn(ns, fmt.Sprintf("starting-%d", i), lost.Name, "gpurun", i == 0))
	}
	began := time.Now()
	if err := c.LoseNode(lost); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := c.RestoreNode(lost); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeReadyOf(lost, 2*time.Minute)
	agent := agentsBefore[lost.Name]
	c.WaitPodReady("gpurun-system", agent.Name, agentTimeout)
	t.Logf("node %s lost for 5 s: Ready again, its agent ready, %s after the loss", lost.Name, time.Since(began).Round(100*time.Millisecond))
	c.Apply(gpuPodOn(ns, "after", lost.Name, "gpurun", true))
	for i := 0; i < starting; i++ {
		pod, size := fmt.Sprintf("starting-%d", i), want
		if i > 0 {
			size = engineShm
		}
		// A GPU pod the kubelet admits again before the device plugin
		// has registered again is rejected (UnexpectedAdmissionError, the
		// kubelet's, whatever the runtime): a controller makes it anew,
		// and so does the test.
		var phase, reason string
		if err := waitUntil(podTimeout, func() (bool, string) {
			out, _ := c.Get(harness.Pod(ns, pod), "{.status.phase} {.status.reason} {.status.conditions[?(@.type==\"Ready\")].status}")
			f := strings.Fields(out)
			if len(f) > 0 {
				phase = f[0]
			}
			if len(f) > 1 {
				reason = f[1]
			}
			return phase == "Failed" || strings.HasSuffix(out, "True"), out
		}); err != nil {
			t.Fatalf("pod %s: %v\n%s", pod, err, c.Dump(harness.Pod(ns, pod)))
		}
		if phase == "Failed" {
			if reason != "UnexpectedAdmissionError" {
				t.Errorf("pod %s, starting as the node was lost: failed (%s)\n%s", pod, reason, c.Dump(harness.Pod(ns, pod)))
				continue
			}
			t.Logf("pod %s, starting as the node was lost: rejected by the kubelet (%s); made anew", pod, reason)
			c.MustKubectl("delete", "pod", "-n", ns, pod, "--wait=true")
			c.Apply(gpuPodOn(ns, pod, lost.Name, "gpurun", i == 0))
		}
		c.WaitPodReady(ns, pod, podTimeout)
		if got := c.ShmOf(ns, pod, "app"); got.Bytes != size {
			t.Errorf("pod %s, starting as the node was lost: /dev/shm %s, want %s", pod, policy.FormatSize(got.Bytes), policy.FormatSize(size))
		}
	}
	c.WaitPodReady(ns, "after", podTimeout)
	if got := c.ShmOf(ns, "after", "app"); got.Bytes != want {
		t.Errorf("a GPU pod created after the node came back: /dev/shm %s, want %s", policy.FormatSize(got.Bytes), policy.FormatSize(want))
	}
	agentsAfter := agentsByNode(t, c)
	if a := agentsAfter[lost.Name]; a.UID != agent.UID {
		t.Errorf("the agent on %s was replaced: %+v, was %+v", lost.Name, a, agent)
	}
	for _, n := range c.Nodes {
		if n == lost {
			continue
		}
		now := snapshotNode(n)
		if now.restarts != others[n.Name].restarts {
			t.Errorf("node %s: containerd restarted while %s was lost", n.Name, lost.Name)
		}
		for p, was := range others[n.Name].files {
			if !bytes.Equal(now.files[p], was) {
				t.Errorf("node %s: %s changed while %s was lost", n.Name, p, lost.Name)
			}
		}
		if agentsAfter[n.Name] != agentsBefore[n.Name] {
			t.Errorf("node %s: agent %+v, was %+v", n.Name, agentsAfter[n.Name], agentsBefore[n.Name])
		}
	}
}

// sum adds a map's values.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
