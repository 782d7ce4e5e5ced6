//go:build integration

package integration

// gpurun on a cluster of many nodes of mixed engines
// (harness.StartMultiNodeCluster with harness.MixedNodes): a GPU node on
// containerd 1.6, one on containerd 2.x with NRI, one laid out as k3s lays
// out its containerd, and a node without GPUs. One cluster is shared by
// the subtests, in order.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/internal/k3stest"
	"github.com/gpurun/gpurun/policy"
)

// multiEnv is the multi-node cluster the subtests share.
type multiEnv struct {
	c *harness.Cluster
	// pol is the shipped policy.
	pol *policy.Policy
	// prev is the previous release, installed first and upgraded from.
	prev harness.Previous
	// dra are the harness's DRA drivers on gpu-c2 (its GPUs for claims,
	// the classes the webhook resolves claims to).
	dra *draDrivers
}

// TestClusterMultiNode starts the mixed cluster once and runs on it: the
// nodes are what they should be, pods reach each other and the API server
// across nodes, the webhook under load, the chart from the previous
// release upgraded to this build and back, the default-runtime and nri
// overlays; then checks that the cluster's cleanup leaves nothing behind.
func TestClusterMultiNode(t *testing.T) {
	begin := time.Now()
	var c *harness.Cluster
	t.Run("cluster", func(t *testing.T) {
		rel := k3stest.V3Imports()
		k3s := harness.K3sNode{DataDir: "/var/lib/rancher/k3s", Program: "k3s", Release: rel, Base: string(readTestdata(t, k3sTestdata+rel.Base))}
		prev := harness.RequirePrevious(t)
		images := []string{gpurunImageTar(t), prev.ImageTar(t, t.TempDir(), agentImageName+":"+prevImageTag), nullWebhookImageTar(t)}
		c = harness.StartMultiNodeCluster(t, harness.MultiNodeOptions{Nodes: harness.MixedNodes(k3s), Images: images})
		e := &multiEnv{c: c, pol: shippedPolicy(t), prev: prev, dra: startDRA(t, c, c.Node("gpu-c2"))}
		t.Run("nodes", e.testNodes)
		t.Run("network", e.testNetwork)
		t.Run("webhook-load", e.testWebhookLoad)
		t.Run("chart runtime-class", e.testChartRuntimeClass)
		t.Run("overlay default-runtime", e.testOverlayDefaultRuntime)
		t.Run("overlay nri", e.testOverlayNRI)
	})
	t.Logf("TestClusterMultiNode took %s", time.Since(begin).Round(100*time.Millisecond))
	if c == nil {
		return
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("the cluster's cleanup left:\n%s", strings.Join(left, "\n"))
	}
}

// shippedPolicy is deploy/kubernetes/base/config.toml.
func shippedPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p := "../deploy/kubernetes/base/config.toml"
	pol, err := policy.Parse(p, readTestdata(t, p))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// pinnedPod renders a busybox pod bound to a node (no scheduler) that
// runs cmd (sleeps when empty).
func pinnedPod(ns, name, node string, cmd ...string) string {
	if len(cmd) == 0 {
		cmd = []string{"sleep", "2147483647"}
	}
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, labels: {app: %s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: [%s]
`, name, ns, name, node, harness.BusyboxRef, strings.Join(q, ", "))
}

// testNodes: every node registered with its kind's containerd, its labels
// (the GPU nodes the GPU Operator's and NFD's, the CPU node none of them)
// and its GPUs; a pod runs on each with containerd's 64 MiB /dev/shm; each
// node sees its containerd's config and the pod's bundle where its kind
// keeps them (/etc/containerd and /run/containerd; k3s's generated config,
// k3s's rendering of its template, and /run/k3s/containerd).
func (e *multiEnv) testNodes(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	for _, n := range c.Nodes {
		c.Apply(pinnedPod(ns, "on-"+n.Name, n.Name))
	}
	for _, n := range c.Nodes {
		t.Run(n.Name, func(t *testing.T) {
			c := e.c.For(t)
			version := c.NodeContainerdVersion(n)
			want := map[harness.NodeKind]string{harness.NodeContainerd16: "containerd://1.6.", harness.NodeContainerd2: "containerd://2."}[n.Kind]
			if n.Kind == harness.NodeK3s {
				want = map[bool]string{true: "containerd://2.", false: "containerd://1.6."}[n.K3s.Release.Version >= 3]
			}
			if !strings.HasPrefix(version, want) {
				t.Errorf("runtime %q, want %s*", version, want)
			}
			labels := c.MustKubectl("get", "node", n.Name, "-o", "jsonpath={.metadata.labels}")
			for k, v := range harness.GPULabels() {
				has := strings.Contains(labels, fmt.Sprintf("%q:%q", k, v))
				if has != (n.GPUs > 0) {
					t.Errorf("label %s=%s: %v with %d GPUs (labels %s)", k, v, has, n.GPUs, labels)
				}
			}
			gpus, _ := c.Get(harness.Object{Kind: "node", Name: n.Name}, `{.status.allocatable.nvidia\.com/gpu}`)
			if want := fmt.Sprint(n.GPUs); n.GPUs > 0 && gpus != want || n.GPUs == 0 && gpus != "" {
				t.Errorf("allocatable %s %q, want %d", harness.GPUResource, gpus, n.GPUs)
			}
			c.WaitPodReady(ns, "on-"+n.Name, podTimeout)
			if got := c.ShmOf(ns, "on-"+n.Name, "app"); got.Bytes != engineShm {
				t.Errorf("/dev/shm of a plain pod: %d bytes, want containerd's %d", got.Bytes, engineShm)
			}
			// Where the node's containerd keeps the pod: its state as the
			// node sees it, and the config it reads.
			id := strings.TrimPrefix(c.MustKubectl("get", "pod", "-n", ns, "on-"+n.Name, "-o", "jsonpath={.status.containerStatuses[0].containerID}"), "containerd://")
			stateDir, config := "/run/containerd", "/etc/containerd/config.toml"
			if n.Kind == harness.NodeK3s {
				stateDir, config = n.K3s.StateDir(), n.K3s.ConfigPath()
			}
			bundle := filepath.Join(stateDir, "io.containerd.runtime.v2.task", "k8s.io", id, "config.json")
			if _, err := n.ReadFile(bundle); err != nil {
				t.Errorf("the pod's bundle at the node's %s: %v", bundle, err)
			}
			seen, err := n.ReadFile(config)
			if want, rerr := os.ReadFile(n.Containerd.ConfigPath); err != nil || rerr != nil || !bytes.Equal(seen, want) {
				t.Errorf("the node's %s is not its containerd's config %s (%v, %v)", config, n.Containerd.ConfigPath, err, rerr)
			}
			if n.Kind != harness.NodeK3s {
				return
			}
			k := n.K3s
			rendered, err := k.Release.Render(k.Base, k.Base, k.Data())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(seen, []byte(rendered)) {
				t.Errorf("the node's %s is not k3s's rendering of its template:\n%s", k.ConfigPath(), seen)
			}
		})
	}
}

// testNetwork: a pod on each node serves HTTP; from every node, a pod
// reaches every other node's server and the API server.
func (e *multiEnv) testNetwork(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	for _, n := range c.Nodes {
		c.Apply(pinnedPod(ns, "srv-"+n.Name, n.Name, "sh", "-c", "mkdir -p /www && echo "+n.Name+" > /www/who && exec httpd -f -p 8080 -h /www"))
	}
	ips := map[string]string{}
	for _, n := range c.Nodes {
		c.WaitPodReady(ns, "srv-"+n.Name, podTimeout)
		ips[n.Name] = c.MustKubectl("get", "pod", "-n", ns, "srv-"+n.Name, "-o", "jsonpath={.status.podIP}")
	}
	start := time.Now()
	for _, from := range c.Nodes {
		for _, to := range c.Nodes {
			if from == to {
				continue
			}
			// busybox's static wget crashes; nc speaks HTTP/1.0 as well.
			out, err := c.Exec(ns, "srv-"+from.Name, "app", "sh", "-c", `printf 'GET /who HTTP/1.0\r\n\r\n' | nc -w 5 `+ips[to.Name]+` 8080`)
			if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "\n"+to.Name) {
				t.Errorf("from %s to %s's pod (%s): %q, %v", from.Name, to.Name, ips[to.Name], out, err)
			}
		}
		if out, err := c.Exec(ns, "srv-"+from.Name, "app", "sh", "-c", "nc -w 5 "+c.APIServerIP+" 6443 </dev/null"); err != nil {
			t.Errorf("from %s to the API server at %s:6443: %v %s", from.Name, c.APIServerIP, err, out)
		}
	}
	t.Logf("%d pods reached each other and the API server in %s", len(c.Nodes), time.Since(start).Round(100*time.Millisecond))
}
