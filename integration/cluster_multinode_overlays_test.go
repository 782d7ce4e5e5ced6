//go:build integration

package integration

// The shipped kustomize overlays on the mixed cluster, applied with
// `kubectl apply -k` as an administrator does: each node gets the mode
// that fits it, or a Warning Event and a pod that is not ready where the
// mode cannot work there.

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/policy"
)

// multiOverlay writes the test-local kustomization over a shipped
// overlay for the multi-node cluster: the image, the API server's address
// for the node-side pods' Events (no kube-proxy: the kubernetes Service's
// ClusterIP answers nowhere), and extra (more kustomization fields, "" for
// none). The nodes keep gpurun's files at their usual paths, so nothing
// else changes.
func multiOverlay(t *testing.T, c *harness.Cluster, mode, extra string) string {
	t.Helper()
	return overShipped(t, c, mode, fmt.Sprintf(`patches:
  - target: {kind: DaemonSet}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: %q}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "6443"}}
%s`, c.APIServerIP, extra))
}

// nodeWarning returns the message of the Warning Event gpurun posted on
// node with reason, "" when there is none.
func nodeWarning(c *harness.Cluster, node, reason string) string {
	var list struct {
		Items []struct {
			Type, Message string
			Source        struct{ Component string }
		} `json:"items"`
	}
	sel := url.QueryEscape("involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason)
	if err := apiGet(c.APIClient(), "/api/v1/namespaces/default/events?fieldSelector="+sel, &list); err != nil {
		return ""
	}
	for _, ev := range list.Items {
		if ev.Type == "Warning" && ev.Source.Component == "gpurun" {
			return ev.Message
		}
	}
	return ""
}

// podWarnings returns the messages of the Warning Events on a pod.
func podWarnings(c *harness.Cluster, ns, pod string) []string {
	var list struct {
		Items []struct{ Reason, Message string } `json:"items"`
	}
	sel := url.QueryEscape("involvedObject.name=" + pod + ",type=Warning")
	if err := apiGet(c.APIClient(), "/api/v1/namespaces/"+ns+"/events?fieldSelector="+sel, &list); err != nil {
		return nil
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

// nodePods returns the pods of a DaemonSet (by its name label) by node.
func nodePods(t *testing.T, c *harness.Cluster, name string) map[string]struct {
	Name, UID, Phase string
	Ready            bool
} {
	t.Helper()
	var pods podList
	if err := apiGet(c.APIClient(), "/api/v1/namespaces/gpurun-system/pods?labelSelector=app.kubernetes.io%2Fname%3D"+name, &pods); err != nil {
		t.Fatal(err)
	}
	out := map[string]struct {
		Name, UID, Phase string
		Ready            bool
	}{}
	for _, p := range pods.Items {
		out[p.Spec.NodeName] = struct {
			Name, UID, Phase string
			Ready            bool
		}{p.Metadata.Name, p.Metadata.UID, p.Status.Phase, podReady(p.Status.Conditions)}
	}
	return out
}

// deleteOverlay runs kubectl delete -k and waits until its objects (the
// namespace, and so the node-side pods) are gone.
func deleteOverlay(t *testing.T, c *harness.Cluster, overlay string) time.Duration {
	t.Helper()
	begin := time.Now()
	if out, err := c.Kubectl("delete", "-k", overlay, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
		t.Errorf("kubectl delete -k: %v\n%s", err, out)
	}
	return time.Since(begin)
}

// testOverlayDefaultRuntime: kubectl apply -k of the default-runtime
// overlay, as shipped but for restart=signal, on every node (the shipped
// nodeSelector). On the containerd nodes the agent restarts containerd
// itself (SIGTERM; the node's supervisor starts it again) and is ready;
// on the k3s node it refuses restart=signal (k3s writes containerd's
// config from its template only when it starts itself): a Warning Event
// on the node says so and its pod is not ready. The administrator does
// what the Event says (restart=none in the agent's ConfigMap, the pod
// made anew, k3s restarted once the agent asks). GPU pods without any
// RuntimeClass on every GPU node then get the policy's size, plain pods
// on every node keep containerd's; kubectl delete -k takes gpurun off
// again: containerd restarted by the agents (k3s: by the administrator),
// twice per node in all, and every node's containerd config as before.
func (e *multiEnv) testOverlayDefaultRuntime(t *testing.T) {
	c := e.c.For(t)
	before := map[string]nodeSnapshot{}
	for _, n := range c.Nodes {
		before[n.Name] = snapshotNode(n)
	}
	k3s := c.Node("gpu-k3s")
	overlay := multiOverlay(t, c, "default-runtime", `configMapGenerator:
  - name: gpurun-node
    behavior: merge
    literals: [restart=signal]
`)
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			deleteOverlay(t, c, overlay)
		}
	})
	start := time.Now()
	c.ApplyKustomize(overlay)
	var refusal string
	if err := waitUntil(agentTimeout, func() (bool, string) {
		agents := nodePods(t, c, "gpurun-node")
		var waiting []string
		for _, n := range c.Nodes {
			a, ok := agents[n.Name]
			switch {
			case !ok:
				waiting = append(waiting, n.Name+": no agent")
			case n == k3s:
				if refusal = nodeWarning(c, n.Name, events.ReasonAgentFailed); refusal == "" {
					waiting = append(waiting, n.Name+": no Warning Event yet")
				}
			case !a.Ready:
				waiting = append(waiting, n.Name+": not ready")
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	}); err != nil {
		t.Fatalf("default-runtime with restart=signal: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	t.Logf("restart=signal: the containerd nodes' agents ready, the k3s node's refused, %s after kubectl apply -k; its Warning Event: %s", time.Since(start).Round(100*time.Millisecond), refusal)
	if !strings.Contains(refusal, "--restart=signal") || !strings.Contains(refusal, "k3s") {
		t.Errorf("the k3s node's Warning Event does not say why: %q", refusal)
	}
	if a := nodePods(t, c, "gpurun-node")[k3s.Name]; a.Ready {
		t.Errorf("the k3s node's agent refused restart=signal, and its pod is ready: %+v", a)
	}
	for _, n := range c.Nodes {
		got, want := len(n.Containerd.Restarts())-before[n.Name].restarts, 1
		if n == k3s {
			want = 0
		}
		if got != want {
			t.Errorf("node %s: containerd restarted %d times during the install with restart=signal, want %d", n.Name, got, want)
		}
	}

	// The administrator follows the Event.
	refused := nodePods(t, c, "gpurun-node")[k3s.Name]
	cm := c.MustKubectl("get", "daemonset", "-n", "gpurun-system", "gpurun-node", "-o",
		`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="GPURUN_RESTART")].valueFrom.configMapKeyRef.name}`)
	c.MustKubectl("patch", "configmap", "-n", "gpurun-system", cm, "--type", "merge", "-p", `{"data":{"restart":"none"}}`)
	c.MustKubectl("delete", "pod", "-n", "gpurun-system", refused.Name, "--wait=false")
	asked := false
	if err := waitUntil(agentTimeout, func() (bool, string) {
		a, ok := nodePods(t, c, "gpurun-node")[k3s.Name]
		if !ok || a.UID == refused.UID || a.Phase != "Running" {
			return false, fmt.Sprintf("the k3s node's new agent: %+v", a)
		}
		if !asked {
			var logs string
			if err := apiGet(c.APIClient(), "/api/v1/namespaces/gpurun-system/pods/"+a.Name+"/log", &logs); err == nil && strings.Contains(logs, "has not read the new configuration") {
				asked = true
				c.NodeContainerd(k3s).Restart() // systemctl restart k3s
			}
			return false, "the k3s node's agent has not asked for a restart"
		}
		return a.Ready, fmt.Sprintf("the k3s node's agent: %+v", a)
	}); err != nil {
		t.Fatalf("the k3s node with restart=none: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	t.Logf("every agent ready %s after kubectl apply -k", time.Since(start).Round(100*time.Millisecond))

	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := e.pol.Target(policy.Request{MemoryLimit: 8 * policy.GiB, HostMemory: mem})
	t.Run("pods", func(t *testing.T) {
		c := e.c.For(t)
		var probes []shmProbe
		for _, n := range c.Nodes {
			if n.GPUs > 0 {
				probes = append(probes, shmProbe{"gpu-" + n.Name, n.Name, "", true, want})
			}
			probes = append(probes, shmProbe{"plain-" + n.Name, n.Name, "", false, engineShm})
		}
		checkShmProbes(t, c, testNamespace(t, c), probes)
	})

	t.Run("kubectl delete -k", func(t *testing.T) {
		c := e.c.For(t)
		took := deleteOverlay(t, c, overlay)
		deleted = true
		c.NodeContainerd(k3s).Restart() // restart=none there: the administrator's
		t.Logf("kubectl delete -k took %s", took.Round(100*time.Millisecond))
		for _, n := range c.Nodes {
			now := snapshotNode(n)
			for p, was := range before[n.Name].files {
				switch {
				case bytes.Equal(now.files[p], was):
				case isGPURunFile(p):
					// An uninstall left by an earlier mode (gpurun-runtime
					// kept while containerd ran with it) finished now.
					t.Logf("node %s: %s, there before, is %s after kubectl delete -k", n.Name, p, map[bool]string{true: "gone", false: "another file"}[now.files[p] == nil])
				default:
					t.Errorf("node %s: %s after kubectl delete -k:\n%s\nwant it as before:\n%s", n.Name, p, now.files[p], was)
				}
			}
			for p := range now.files {
				if _, was := before[n.Name].files[p]; !was {
					// The k3s node's containerd ran with gpurun until
					// the administrator's restart: its binaries stay.
					t.Logf("node %s: %s stays after kubectl delete -k", n.Name, p)
				}
			}
			if got := now.restarts - before[n.Name].restarts; got != 2 {
				t.Errorf("node %s: containerd restarted %d times in all, want 2 (install and uninstall)", n.Name, got)
			}
		}
	})
}

// isGPURunFile reports whether a node path is one of gpurun's own files
// (binaries, policy), which an uninstall may leave while containerd runs
// with gpurun and a later one removes.
func isGPURunFile(p string) bool {
	return strings.HasPrefix(p, "/usr/local/bin/gpurun") || strings.HasPrefix(p, "/etc/gpurun/")
}

// testOverlayNRI: kubectl apply -k of the nri overlay, as shipped, on
// every node. On the containerd 2.x node the plugin registers, is ready,
// and a GPU pod there gets the policy's size; on the nodes whose runtime
// serves no NRI (containerd 1.6; k3s, which turns it off in a user
// namespace) the plugin is not ready and a Warning Event says why
// (gpurun's on the node; or, where the plugin cannot even start, the
// kubelet's on its pod), and their GPU pods keep containerd's size.
// kubectl delete -k leaves every node as it was: no config touched, no
// restart.
func (e *multiEnv) testOverlayNRI(t *testing.T) {
	c := e.c.For(t)
	before := map[string]nodeSnapshot{}
	for _, n := range c.Nodes {
		before[n.Name] = snapshotNode(n)
	}
	overlay := multiOverlay(t, c, "nri", "")
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			deleteOverlay(t, c, overlay)
		}
	})
	start := time.Now()
	c.ApplyKustomize(overlay)
	works := func(n *harness.ClusterNode) bool { return n.Kind == harness.NodeContainerd2 }
	if err := waitUntil(agentTimeout, func() (bool, string) {
		plugins := nodePods(t, c, "gpurun-nri")
		var waiting []string
		for _, n := range c.Nodes {
			if p, ok := plugins[n.Name]; !ok || works(n) && !p.Ready {
				waiting = append(waiting, fmt.Sprintf("%s: %+v", n.Name, p))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	}); err != nil {
		t.Fatalf("nri: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	t.Logf("nri: a plugin on every node, ready where NRI is, %s after kubectl apply -k", time.Since(start).Round(100*time.Millisecond))
	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := e.pol.Target(policy.Request{MemoryLimit: 8 * policy.GiB, HostMemory: mem})
	t.Run("pods", func(t *testing.T) {
		c := e.c.For(t)
		var probes []shmProbe
		for _, n := range c.Nodes {
			if n.GPUs > 0 {
				size := int64(engineShm)
				if works(n) {
					size = want
				}
				probes = append(probes, shmProbe{"gpu-" + n.Name, n.Name, "", true, size})
			}
		}
		checkShmProbes(t, c, testNamespace(t, c), probes)
	})
	// Where NRI is not, the plugin is not ready and says why.
	why := map[string]string{}
	if err := waitUntil(agentTimeout, func() (bool, string) {
		plugins := nodePods(t, c, "gpurun-nri")
		var waiting []string
		for _, n := range c.Nodes {
			p := plugins[n.Name]
			switch {
			case works(n):
			case p.Ready:
				waiting = append(waiting, n.Name+": ready")
			default:
				if msg := nodeWarning(c, n.Name, events.ReasonNRIUnavailable); msg != "" {
					why[n.Name] = "gpurun: " + msg
				} else if w := podWarnings(c, "gpurun-system", p.Name); len(w) > 0 && p.Phase != "Running" {
					why[n.Name] = "kubelet: " + strings.Join(w, "; ")
				} else {
					waiting = append(waiting, n.Name+": no Warning Event yet")
				}
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	}); err != nil {
		t.Fatalf("nri: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	t.Logf("nri: Warning Events where NRI is not, %s after kubectl apply -k", time.Since(start).Round(100*time.Millisecond))
	plugins := nodePods(t, c, "gpurun-nri")
	for _, n := range c.Nodes {
		if works(n) {
			continue
		}
		t.Logf("node %s (%s): %s", n.Name, n.Kind, why[n.Name])
		if plugins[n.Name].Ready {
			t.Errorf("node %s (%s) serves no NRI, and the plugin's pod is ready", n.Name, n.Kind)
		}
		if msg := why[n.Name]; strings.HasPrefix(msg, "gpurun: ") && !strings.Contains(msg, "does not serve NRI") {
			t.Errorf("node %s: the Warning Event does not say what is wrong: %s", n.Name, msg)
		}
	}
	for _, n := range []*harness.ClusterNode{c.Node("gpu-c16"), c.Node("cpu")} {
		if !strings.HasPrefix(why[n.Name], "gpurun: ") {
			t.Errorf("node %s (containerd 1.6, no NRI): no Warning Event of gpurun's: %s", n.Name, why[n.Name])
		}
	}
	took := deleteOverlay(t, c, overlay)
	deleted = true
	t.Logf("kubectl delete -k took %s", took.Round(100*time.Millisecond))
	for _, n := range c.Nodes {
		now := snapshotNode(n)
		if now.restarts != before[n.Name].restarts {
			t.Errorf("node %s: containerd restarted %d times in nri mode", n.Name, now.restarts-before[n.Name].restarts)
		}
		for p, was := range before[n.Name].files {
			if !bytes.Equal(now.files[p], was) {
				t.Errorf("node %s: %s changed in nri mode", n.Name, p)
			}
		}
	}
}
