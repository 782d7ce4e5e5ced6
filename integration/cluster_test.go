//go:build integration

package integration

// gpurun on a real single-node Kubernetes cluster (harness.StartCluster):
// a kubelet drives a private containerd 1.6 or 2.x, and the node modes are
// installed the way an administrator does it, with `kubectl apply -k` of
// the shipped overlays (deploy/kubernetes/overlays) plus a test-local
// overlay that only points the image at the locally imported one and the
// node paths at the cluster's private ones. One cluster per containerd
// version is shared by the subtests; each mode takes gpurun off the node
// again and checks that containerd's config is back byte for byte before
// the next one starts.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// Where the tests put gpurun's image: the test-local overlay's `images:`
// entry points the shipped ghcr.io/gpurun/gpurun at it. The DaemonSets'
// imagePullPolicy IfNotPresent then never pulls, since it is imported.
const (
	agentImageName = "docker.io/gpurun-test/gpurun"
	agentImageTag  = "local"
)

// engineShm is the /dev/shm every CRI pod gets from containerd.
const engineShm = 64 * policy.MiB

// How long the cluster has for the steps of a test.
const (
	podTimeout   = 2 * time.Minute
	agentTimeout = 3 * time.Minute
)

// clusterEnv is a cluster with gpurun's image imported, and what the
// tests expect of the shipped policy on this host.
type clusterEnv struct {
	c           *harness.Cluster
	containerd2 bool
	pol         *policy.Policy
	hostMem     int64
	// original is containerd's config as the harness wrote it, before
	// any mode was installed.
	original []byte
	// dra are the harness's DRA drivers on the node (TestCluster's
	// clusters; nil elsewhere).
	dra *draDrivers
}

func newClusterEnv(t *testing.T, c *harness.Cluster, containerd2 bool) *clusterEnv {
	t.Helper()
	shipped, err := os.ReadFile("../deploy/kubernetes/base/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("deploy/kubernetes/base/config.toml", shipped)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile(c.Containerd.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	c.ImportImage(gpurunImageTar(t))
	// GPUs as NVIDIA's device plugin hands them out: the env and the
	// device node (a real 195:N character device; no driver needed).
	c.StartFakeGPUs(2)
	return &clusterEnv{c: c, containerd2: containerd2, pol: pol, hostMem: mem, original: original}
}

// gpurunImageTar builds gpurun's image as deploy/image/Dockerfile builds
// it (make image), from this checkout's binaries laid out as make
// image-context does, as agentImageName:agentImageTag, and returns the
// archive.
func gpurunImageTar(t *testing.T) string {
	t.Helper()
	bins := filepath.Dir(bin(t, "gpurun"))
	ctx := t.TempDir()
	arch := filepath.Join(ctx, "linux-"+runtime.GOARCH)
	if err := os.MkdirAll(arch, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gpurun", "gpurun-full", "gpurun-runtime"} {
		if err := os.Symlink(filepath.Join(bins, name), filepath.Join(arch, name)); err != nil {
			t.Fatal(err)
		}
	}
	return harness.DockerfileImageTar(t, t.TempDir(), agentImageName+":"+agentImageTag,
		"../deploy/image/Dockerfile", ctx, map[string]string{"VERSION": "cluster-test"})
}

// target is the shipped policy's size for a GPU container with memory
// limit limit (0: none, the host's memory counts).
func (e *clusterEnv) target(limit int64) int64 {
	n, _ := e.pol.Target(policy.Request{MemoryLimit: limit, HostMemory: e.hostMem})
	return n
}

// TestCluster runs gpurun's node modes on a real cluster, for containerd
// 1.6 and 2.x (a cluster each, in parallel: most of either's time is
// spent waiting on pods and rollouts), with the harness's DRA drivers on
// the node, and checks that each cluster's cleanup leaves nothing behind.
func TestCluster(t *testing.T) {
	for _, tc := range []struct {
		name        string
		containerd2 bool
	}{
		{"containerd 1.6", false},
		{"containerd 2.x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c *harness.Cluster
			t.Run("cluster", func(t *testing.T) {
				c = harness.StartCluster(t, harness.ClusterOptions{Containerd2: tc.containerd2})
				e := newClusterEnv(t, c, tc.containerd2)
				e.dra = startDRA(t, c, c.Nodes[0])
				e.run(t)
			})
			if c == nil {
				return
			}
			if left := c.Leftovers(); len(left) > 0 {
				t.Errorf("the cluster's cleanup left:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// run runs the subtests on one cluster, in order.
func (e *clusterEnv) run(t *testing.T) {
	t.Run("smoke", e.testSmoke)
	t.Run("runtime-class", e.testRuntimeClass)
	t.Run("default-runtime", e.testDefaultRuntime)
	// The webhook and doctor --pod do not depend on the runtime: one
	// cluster each, so that the two clusters, which run at once, take
	// about as long.
	if e.containerd2 {
		t.Run("nri", e.testNRI)
		t.Run("doctor --pod", e.testDoctorPod)
	} else {
		t.Run("webhook", e.testWebhook)
	}
}

// testSmoke: the node is Ready (StartCluster waited for it), a busybox
// pod runs and has the engine's 64 MiB /dev/shm.
func (e *clusterEnv) testSmoke(t *testing.T) {
	c := e.c.For(t)
	t.Logf("cluster started in %s", c.StartTime.Round(time.Millisecond))
	ns := testNamespace(t, c)
	c.Apply(podManifest(ns, podSpec{name: "smoke", containers: []containerSpec{{name: "app"}}}))
	c.WaitPodReady(ns, "smoke", podTimeout)
	if got := c.ShmOf(ns, "smoke", "app"); got.Bytes != engineShm {
		t.Errorf("/dev/shm of a plain pod: %d bytes, want containerd's %d", got.Bytes, engineShm)
	}
}

// testNamespace creates a namespace of the test's own (deleted at its end)
// and waits for its service account.
func testNamespace(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	ns := "t-" + strings.ToLower(strings.NewReplacer("/", "-", " ", "-", ".", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 60 {
		// Subtests whose names differ only past the cut keep namespaces
		// of their own.
		sum := sha256.Sum256([]byte(ns))
		ns = strings.TrimRight(ns[:51], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	ns = strings.TrimRight(ns, "-")
	c.MustKubectl("create", "namespace", ns)
	t.Cleanup(func() {
		if _, err := c.Kubectl("delete", "namespace", ns, "--wait=true", "--timeout=2m"); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	c.WaitServiceAccount(ns, "default", time.Minute)
	return ns
}

// containerSpec and podSpec describe the test pods.
type containerSpec struct {
	name        string
	env         []string // KEY=VALUE
	memoryLimit string   // a quantity, "" for none
	gpus        int      // nvidia.com/gpu from the fake device plugin
	claims      []string // the pod's resource claims it uses (DRA)
}

type podSpec struct {
	name         string
	runtimeClass string
	hostIPC      bool
	annotations  map[string]string
	containers   []containerSpec
	claims       []podClaim
	node         string // the node it must run on (by nodeSelector: the scheduler allocates its claims), "" any
}

// podClaim is a pod's DRA resource claim: by a ResourceClaimTemplate (a
// claim of its own) or a ResourceClaim's name (shared).
type podClaim struct {
	name, template, claim string
}

// podManifest renders a pod of busybox containers that sleep.
func podManifest(ns string, p podSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n", p.name, ns)
	if len(p.annotations) > 0 {
		b.WriteString("  annotations:\n")
		for k, v := range p.annotations {
			fmt.Fprintf(&b, "    %q: %q\n", k, v)
		}
	}
	b.WriteString("spec:\n  terminationGracePeriodSeconds: 1\n")
	if p.runtimeClass != "" {
		fmt.Fprintf(&b, "  runtimeClassName: %s\n", p.runtimeClass)
	}
	if p.hostIPC {
		b.WriteString("  hostIPC: true\n")
	}
	if p.node != "" {
		fmt.Fprintf(&b, "  nodeSelector: {kubernetes.io/hostname: %s}\n", p.node)
	}
	if len(p.claims) > 0 {
		b.WriteString("  resourceClaims:\n")
		for _, cl := range p.claims {
			if cl.template != "" {
				fmt.Fprintf(&b, "  - {name: %s, resourceClaimTemplateName: %s}\n", cl.name, cl.template)
			} else {
				fmt.Fprintf(&b, "  - {name: %s, resourceClaimName: %s}\n", cl.name, cl.claim)
			}
		}
	}
	b.WriteString("  containers:\n")
	for _, ctr := range p.containers {
		fmt.Fprintf(&b, "  - name: %s\n    image: %s\n    imagePullPolicy: Never\n    command: [\"sleep\", \"2147483647\"]\n", ctr.name, harness.BusyboxRef)
		if len(ctr.env) > 0 {
			b.WriteString("    env:\n")
			for _, kv := range ctr.env {
				k, v, _ := strings.Cut(kv, "=")
				fmt.Fprintf(&b, "    - name: %s\n      value: %q\n", k, v)
			}
		}
		if ctr.memoryLimit != "" || ctr.gpus > 0 || len(ctr.claims) > 0 {
			b.WriteString("    resources:\n")
		}
		if ctr.memoryLimit != "" || ctr.gpus > 0 {
			b.WriteString("      limits:\n")
			if ctr.memoryLimit != "" {
				fmt.Fprintf(&b, "        memory: %s\n", ctr.memoryLimit)
			}
			if ctr.gpus > 0 {
				fmt.Fprintf(&b, "        %s: %d\n", harness.GPUResource, ctr.gpus)
			}
		}
		for i, cl := range ctr.claims {
			if i == 0 {
				b.WriteString("      claims:\n")
			}
			fmt.Fprintf(&b, "      - {name: %s}\n", cl)
		}
	}
	return b.String()
}

// gpuEnv is what the NVIDIA device plugin (envvar strategy) sets in a
// container it gives a GPU; pods that ask the harness's fake device plugin
// for nvidia.com/gpu get it from the plugin (with the device node) instead.
const gpuEnv = "NVIDIA_VISIBLE_DEVICES=GPU-6a8b1f4e-3c2d-4e5f-8a9b-0c1d2e3f4a5b"

// cdiAnnotation is a CDI device request as a pod annotation
// (cdi.k8s.io/<key>: <vendor>/<class>=<device>), which the runtime
// handler passes to gpurun-runtime (pod_annotations).
var cdiAnnotation = map[string]string{"cdi.k8s.io/gpurun-test": "nvidia.com/gpu=0"}

// agentOverlay writes the test-local kustomization over a shipped overlay:
// the image, and the node paths (containerd's config and state, the
// binaries' directory, the policy and the agent's records) at the
// cluster's, and the API server at the node's address (the cluster runs no
// kube-proxy: the service variables name an unreachable ClusterIP); nothing
// else of the shipped overlay changes.
func (e *clusterEnv) agentOverlay(t *testing.T, mode string) string {
	t.Helper()
	return e.agentOverlayWith(t, mode, nil, nil)
}

// agentOverlayWith is agentOverlay with more of the node agent's settings
// (its modes only): literals merged into its ConfigMap (restart=signal,
// say) and args added to its command (--interval=2s).
func (e *clusterEnv) agentOverlayWith(t *testing.T, mode string, literals, args []string) string {
	t.Helper()
	c := e.c
	var k string
	switch mode {
	case "webhook":
		// The cluster runs no kube-proxy: the webhook reaches the API
		// server at the node's address (the kubelet's service variables
		// name the ClusterIP).
		k = fmt.Sprintf(`patches:
  - target: {kind: Deployment, name: gpurun-webhook}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/env, value: [{name: KUBERNETES_SERVICE_HOST, value: %q}, {name: KUBERNETES_SERVICE_PORT, value: "6443"}]}
`, harness.ClusterNodeIP)
	case "nri":
		// The NRI socket's directory and containerd's state, where the
		// pods' /dev/shm tmpfs are (mounted at the same path, as the
		// shipped overlay does with /run/containerd).
		state := c.Containerd.StateDir
		k = fmt.Sprintf(`patches:
  - target: {kind: DaemonSet, name: gpurun-nri}
    patch: |-
      - {op: replace, path: /spec/template/spec/volumes/0/hostPath/path, value: %q}
      - {op: replace, path: /spec/template/spec/volumes/1/hostPath/path, value: %q}
      - {op: replace, path: /spec/template/spec/containers/0/volumeMounts/1/mountPath, value: %q}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: %q}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "6443"}}
`, filepath.Dir(c.NRISocket), state, state, harness.ClusterNodeIP)
	default:
		// The default-runtime overlay's drop-in directory is
		// /etc/containerd/gpurun.d, next to the node's config: here, next
		// to the cluster's (this node's /etc is the machine's).
		dropIn := ""
		if mode == "default-runtime" {
			dropIn = install.OwnDropInDir(c.Containerd.ConfigPath)
		}
		var more, ops strings.Builder
		for _, l := range literals {
			fmt.Fprintf(&more, "      - %s\n", l)
		}
		for _, a := range args {
			fmt.Fprintf(&ops, "      - {op: add, path: /spec/template/spec/containers/0/args/-, value: %q}\n", a)
		}
		k = fmt.Sprintf(`configMapGenerator:
  - name: gpurun-node
    behavior: merge
    literals:
      - bin-dir=%s
      - containerd-config=%s
      - drop-in=%s
%spatches:
  - target: {kind: DaemonSet, name: gpurun-node}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--policy=%s"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--state=%s"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--install-state=%s"}
      - {op: add, path: /spec/template/spec/containers/0/readinessProbe/exec/command/-, value: "--state=%s"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--containerd-state=%s"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--cri-endpoint=/host%s"}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: %q}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "6443"}}
%s`, c.BinDir, c.Containerd.ConfigPath, dropIn, more.String(), c.PolicyPath, c.AgentState, c.InstallState, c.AgentState, c.Containerd.StateDir, c.Containerd.Address, harness.ClusterNodeIP, ops.String())
	}
	return overShipped(t, c, mode, k)
}

// applyOverlay applies the kustomization in dir (kubectl apply -k) and
// deletes it again when t ends.
func applyOverlay(t *testing.T, c *harness.Cluster, dir string) {
	t.Helper()
	t.Cleanup(func() {
		if out, err := c.Kubectl("delete", "-k", dir, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
			t.Errorf("kubectl delete -k: %v\n%s", err, out)
		}
	})
	c.ApplyKustomize(dir)
}

// overShipped writes, in a new manifest directory of c, a kustomization
// over the shipped overlay mode that sets the image to the test's and
// adds rest (more kustomization fields, "" for none), and returns the
// directory (for kubectl apply -k).
func overShipped(t *testing.T, c *harness.Cluster, mode, rest string) string {
	t.Helper()
	shipped, err := filepath.Abs(filepath.Join("..", "deploy", "kubernetes", "overlays", mode))
	if err != nil {
		t.Fatal(err)
	}
	dir := c.WriteManifestDir(nil)
	// kustomize takes a relative path only.
	if shipped, err = filepath.Rel(dir, shipped); err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: ghcr.io/gpurun/gpurun
    newName: %s
    newTag: %s
%s`, shipped, agentImageName, agentImageTag, rest)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// agentPod returns the name of the node agent's pod (of DaemonSet ds).
func agentPod(t *testing.T, c *harness.Cluster, ds string) string {
	t.Helper()
	var name string
	deadline := time.Now().Add(agentTimeout)
	for time.Now().Before(deadline) {
		out, err := c.Kubectl("get", "pods", "-n", "gpurun-system", "-l", "app.kubernetes.io/name="+ds,
			"--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		if f := strings.Fields(out); err == nil && len(f) == 1 {
			name = f[0]
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if name == "" {
		t.Fatalf("no running pod of %s\n%s", ds, c.Dump(harness.Object{Kind: "daemonset", Namespace: "gpurun-system", Name: ds}))
	}
	return name
}

// installAgent applies a mode and waits until its agent pod is Ready:
// with the shipped restart=none, the agent installs and waits, not ready,
// for someone to restart containerd; the test does, as the administrator
// would (systemctl restart containerd: SIGTERM, and the supervisor starts
// it again).
func (e *clusterEnv) installAgent(t *testing.T, mode string) (overlay string) {
	t.Helper()
	c := e.c.For(t)
	start := time.Now()
	overlay = e.agentOverlay(t, mode)
	t.Cleanup(func() { e.uninstallAll(t, overlay) })
	c.ApplyKustomize(overlay)
	pod := agentPod(t, c, "gpurun-node")
	t.Logf("%s: agent pod %s running after %s", mode, pod, time.Since(start).Round(100*time.Millisecond))
	// Installed (the agent logs it), and `gpurun node status`, which the
	// docs send administrators to, says containerd has not read it yet.
	if err := waitUntil(agentTimeout, func() (bool, string) {
		logs, err := c.Kubectl("logs", "-n", "gpurun-system", pod)
		return err == nil && strings.Contains(logs, "msg=installed"), logs
	}); err != nil {
		t.Fatalf("agent install: %v\n%s", err, c.Dump(harness.Pod("gpurun-system", pod)))
	}
	st, err := c.Exec("gpurun-system", pod, "agent", "gpurun", "node", "status", "--host-root=/host", "--state="+c.AgentState)
	if err == nil || !strings.Contains(st, "not ready") || !strings.Contains(st, "restart containerd") {
		t.Errorf("gpurun node status before containerd's restart: %v\n%s", err, st)
	}
	installed, err := os.ReadFile(c.Containerd.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(installed, e.original) {
		t.Fatal("the agent did not change containerd's config")
	}
	t.Logf("%s: installed, waiting for a containerd restart, after %s", mode, time.Since(start).Round(100*time.Millisecond))
	c.Containerd.Restart()
	c.WaitPodReady("gpurun-system", pod, agentTimeout)
	t.Logf("%s: agent ready after %s", mode, time.Since(start).Round(100*time.Millisecond))
	return overlay
}

// uninstallAll deletes what a mode's overlay created and waits until the
// agent's pod is gone, then restarts containerd (as an administrator does
// after an uninstall with restart=none) so the next mode starts from the
// harness's own config.
func (e *clusterEnv) uninstallAll(t *testing.T, overlay string) {
	c := e.c.For(t)
	start := time.Now()
	defer func() {
		t.Logf("kubectl delete -k and a containerd restart took %s", time.Since(start).Round(100*time.Millisecond))
	}()
	if out, err := c.Kubectl("delete", "-k", overlay, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
		t.Errorf("kubectl delete -k: %v\n%s", err, out)
	}
	if now, err := os.ReadFile(c.Containerd.ConfigPath); err != nil || !bytes.Equal(now, e.original) {
		t.Errorf("containerd's config after kubectl delete -k: %v\n%s\nwant\n%s", err, now, e.original)
		// The next mode starts from the harness's node, not this one's
		// leftovers: its config, and none of the agent's files.
		if err := os.WriteFile(c.Containerd.ConfigPath, e.original, 0o644); err != nil {
			t.Error(err)
		}
		for _, p := range []string{c.AgentState, c.InstallState, c.PolicyPath,
			filepath.Join(c.BinDir, "gpurun"), filepath.Join(c.BinDir, "gpurun-runtime")} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Error(err)
			}
		}
	}
	if err := c.Containerd.TryRestart(); err != nil {
		t.Errorf("restart containerd: %v", err)
	}
}

// waitUntil polls check every half second until it says done or timeout
// passes; the error carries check's last note.
func waitUntil(timeout time.Duration, check func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, note := check()
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s; last: %s", timeout, note)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// hostShm is the size of this host's /dev/shm, which a hostIPC pod shares.
func hostShm(t *testing.T) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

// shmCase is a pod and the /dev/shm each of its containers must see.
type shmCase struct {
	pod  podSpec
	want func(e *clusterEnv, t *testing.T) int64
}

// runShmCases creates every pod, waits until all are Ready, and checks
// each container's /dev/shm size; the containers of one pod must share one
// tmpfs (one st_dev). A wrong size is reported with gpurun-runtime's log
// (or the NRI plugin's, when it runs).
func (e *clusterEnv) runShmCases(t *testing.T, ns string, cases []shmCase) {
	t.Helper()
	c := e.c.For(t)
	for _, sc := range cases {
		c.Apply(podManifest(ns, sc.pod))
	}
	for _, sc := range cases {
		c.WaitPodReady(ns, sc.pod.name, podTimeout)
	}
	for _, sc := range cases {
		want := sc.want(e, t)
		var first harness.Shm
		for i, ctr := range sc.pod.containers {
			got := c.ShmOf(ns, sc.pod.name, ctr.name)
			if got.Bytes != want {
				t.Errorf("pod %s, container %s: /dev/shm %s, want %s\n%s", sc.pod.name, ctr.name,
					policy.FormatSize(got.Bytes), policy.FormatSize(want), e.gpurunLogs())
			}
			if i == 0 {
				first = got
			} else if got.Dev != first.Dev {
				t.Errorf("pod %s: container %s's /dev/shm has st_dev %d, %s's %d: the pod's tmpfs was split", sc.pod.name,
					ctr.name, got.Dev, sc.pod.containers[0].name, first.Dev)
			}
		}
	}
}

// gpurunLogs returns what gpurun logged about the pods: the NRI plugin's
// pod log when it runs, and gpurun-runtime's log on the node.
func (e *clusterEnv) gpurunLogs() string {
	out := "--- gpurun-runtime log (node) ---\n" + e.runtimeLog()
	if nri, err := e.c.Kubectl("logs", "-n", "gpurun-system", "daemonset/gpurun-nri", "--tail=20"); err == nil {
		out += "\n--- gpurun NRI plugin log ---\n" + nri
	}
	return out
}

// runtimeLog is the tail of gpurun-runtime's log on the node (the shipped
// policy's log_file, /var/log/gpurun.log, which is the node's own).
func (e *clusterEnv) runtimeLog() string {
	data, err := e.c.ReadNodeFile("/var/log/gpurun.log")
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

func wantTarget(limit int64) func(*clusterEnv, *testing.T) int64 {
	return func(e *clusterEnv, _ *testing.T) int64 { return e.target(limit) }
}

func wantEngine(*clusterEnv, *testing.T) int64 { return engineShm }

func wantHost(_ *clusterEnv, t *testing.T) int64 { return hostShm(t) }

// testRuntimeClass: the runtime-class overlay as shipped. A rollout
// restart of the agent right after it became ready changes nothing. Pods
// with runtimeClassName gpurun whose container shows GPU evidence get the
// policy's size, shared by all their containers; everything else keeps
// what it had. Deleting the DaemonSet restores containerd's config and
// leaves running pods running.
func (e *clusterEnv) testRuntimeClass(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	// A pod that runs through the install, the restarts and the uninstall.
	c.Apply(podManifest(ns, podSpec{name: "before", containers: []containerSpec{{name: "app"}}}))
	c.WaitPodReady(ns, "before", podTimeout)
	hostBefore := hostShm(t)
	e.installAgent(t, "runtime-class")
	t.Run("rollout restart", func(t *testing.T) { e.testRolloutRestart(t, ns, "before", "app") })
	const gib = 1024 * policy.MiB
	t.Run("pods", func(t *testing.T) {
		e.runShmCases(t, ns, []shmCase{
			{podSpec{name: "gpu-env", runtimeClass: "gpurun", containers: []containerSpec{
				{name: "trainer", env: []string{gpuEnv}}, {name: "sidecar"}}}, wantTarget(0)},
			{podSpec{name: "gpu-cdi", runtimeClass: "gpurun", annotations: cdiAnnotation, containers: []containerSpec{
				{name: "trainer"}}}, wantTarget(0)},
			{podSpec{name: "gpu-device", runtimeClass: "gpurun", containers: []containerSpec{
				{name: "trainer", gpus: 1}, {name: "sidecar"}}}, wantTarget(0)},
			{podSpec{name: "gpu-limit", runtimeClass: "gpurun", containers: []containerSpec{
				{name: "trainer", env: []string{gpuEnv}, memoryLimit: "3Gi"}}}, wantTarget(3 * gib)},
			{podSpec{name: "no-class", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}}}}, wantEngine},
			{podSpec{name: "not-gpu", runtimeClass: "gpurun", containers: []containerSpec{{name: "app"}}}, wantEngine},
			{podSpec{name: "host-ipc", runtimeClass: "gpurun", hostIPC: true, containers: []containerSpec{
				{name: "trainer", env: []string{gpuEnv}}}}, wantHost},
		})
		if after := hostShm(t); after != hostBefore {
			t.Errorf("the host's /dev/shm changed from %d to %d bytes", hostBefore, after)
		}
	})
	if e.dra != nil && e.containerd2 {
		t.Run("dra", func(t *testing.T) { e.testDRA(t, "gpurun") })
	}
	t.Run("whole life", func(t *testing.T) {
		t.Run("restart sweep", func(t *testing.T) { t.Parallel(); e.testRestartSweep(t, "gpurun", "gpurun-node") })
		t.Run("crashloop without gpurun", func(t *testing.T) { t.Parallel(); e.testCrashloopWithoutGpurun(t) })
		t.Run("never removed", func(t *testing.T) { t.Parallel(); e.testNeverRemoved(t, "gpurun", "gpurun-node") })
		t.Run("OOM kill", func(t *testing.T) { t.Parallel(); e.testOOMShare(t, "gpurun", "gpurun-node") })
	})
	t.Run("observe", e.testObserve)
	t.Run("kubectl delete daemonset", func(t *testing.T) {
		e.testDeleteDaemonSet(t, ns, map[string]bool{"before": false, "gpu-env": true, "not-gpu": true}, podSpec{name: "after", containers: []containerSpec{
			{name: "trainer", env: []string{gpuEnv}}}})
	})
}

// testDefaultRuntime: the default-runtime overlay as shipped. GPU pods
// without any RuntimeClass get the policy's size; other pods keep 64 MiB.
func (e *clusterEnv) testDefaultRuntime(t *testing.T) {
	c := e.c.For(t)
	e.installAgent(t, "default-runtime")
	ns := testNamespace(t, c)
	t.Run("pods", func(t *testing.T) {
		e.runShmCases(t, ns, []shmCase{
			{podSpec{name: "gpu", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}}, {name: "sidecar"}}}, wantTarget(0)},
			{podSpec{name: "gpu-cdi", annotations: cdiAnnotation, containers: []containerSpec{{name: "trainer"}}}, wantTarget(0)},
			{podSpec{name: "gpu-device", containers: []containerSpec{{name: "trainer", gpus: 1}}}, wantTarget(0)},
			{podSpec{name: "not-gpu", containers: []containerSpec{{name: "app"}}}, wantEngine},
		})
	})
	if e.dra != nil && e.containerd2 {
		t.Run("dra", func(t *testing.T) { e.testDRA(t, "") })
	}
	t.Run("restart sweep", func(t *testing.T) { e.testRestartSweep(t, "", "gpurun-node") })
	t.Run("kubectl delete daemonset", func(t *testing.T) {
		e.testDeleteDaemonSet(t, ns, map[string]bool{"gpu": false, "not-gpu": false}, podSpec{name: "after", containers: []containerSpec{
			{name: "trainer", env: []string{gpuEnv}}}})
	})
}

// testRolloutRestart: `kubectl rollout restart` of the agent (its old pod
// uninstalls on exit, the new one installs) leaves containerd's config as
// it was, does not restart containerd, the new agent becomes ready, and
// the running pod keeps its /dev/shm.
func (e *clusterEnv) testRolloutRestart(t *testing.T, ns, pod, container string) {
	t.Helper()
	c := e.c.For(t)
	config, err := os.ReadFile(c.Containerd.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	shm := c.ShmOf(ns, pod, container)
	restarts := len(c.Containerd.Restarts())
	old := agentPod(t, c, "gpurun-node")
	// The old pod's log, to its end: what its uninstall on exit did.
	oldLog := make(chan string, 1)
	go func() {
		out, err := c.Kubectl("logs", "-f", "-n", "gpurun-system", old)
		if err != nil {
			out += "\n(" + err.Error() + ")"
		}
		oldLog <- out
	}()
	c.MustKubectl("rollout", "restart", "-n", "gpurun-system", "daemonset/gpurun-node")
	c.WaitGone(harness.Pod("gpurun-system", old), agentTimeout)
	if err := c.TryWaitRollout("gpurun-system", "gpurun-node", agentTimeout); err != nil {
		record, _ := os.ReadFile(c.AgentState)
		t.Fatalf("after kubectl rollout restart: %v\n--- the old agent pod's log ---\n%s\n--- the node record ---\n%s\n%s",
			err, <-oldLog, record, c.Dump(harness.Object{Kind: "daemonset", Namespace: "gpurun-system", Name: "gpurun-node"}))
	}
	if now, _ := os.ReadFile(c.Containerd.ConfigPath); !bytes.Equal(now, config) {
		t.Errorf("rollout restart changed containerd's config:\n%s\nwas\n%s", now, config)
	}
	if n := len(c.Containerd.Restarts()); n != restarts {
		t.Errorf("rollout restart restarted containerd (%d restarts, were %d)", n, restarts)
	}
	if got := c.ShmOf(ns, pod, container); got != shm {
		t.Errorf("pod %s after the rollout restart: /dev/shm %+v, was %+v", pod, got, shm)
	}
}

// testDeleteDaemonSet: `kubectl delete` of the agent's DaemonSet takes
// gpurun off the node: containerd's config is back byte for byte, the
// running pods keep running (the same containers, not restarted), and once
// containerd has read its config again (restart=none: the administrator
// restarts it) a new GPU pod gets containerd's 64 MiB. running maps the
// pods to whether they were started with runtimeClassName gpurun (the
// default handler has no name a pod keeps).
func (e *clusterEnv) testDeleteDaemonSet(t *testing.T, ns string, running map[string]bool, after podSpec) {
	t.Helper()
	c := e.c.For(t)
	before := map[string]string{}
	for p := range running {
		before[p] = containersRunning(t, c, ns, p)
	}
	agent := agentPod(t, c, "gpurun-node")
	c.MustKubectl("delete", "-n", "gpurun-system", "daemonset/gpurun-node", "--wait=true", "--timeout=3m")
	c.WaitGone(harness.Pod("gpurun-system", agent), agentTimeout)
	if now, err := os.ReadFile(c.Containerd.ConfigPath); err != nil || !bytes.Equal(now, e.original) {
		t.Errorf("containerd's config after kubectl delete daemonset: %v\n%s\nwant\n%s", err, now, e.original)
	}
	c.Containerd.Restart()
	for p, gpurun := range running {
		if now := containersRunning(t, c, ns, p); now != before[p] {
			t.Errorf("pod %s: containers %s after the uninstall, were %s", p, now, before[p])
		}
		_, err := c.Exec(ns, p, "", "true")
		switch {
		case err == nil:
		case gpurun && e.containerd2:
			// containerd 2.x looks the sandbox's runtime handler up in its
			// config for every exec: once the handler is gone, pods
			// started with it run on but cannot be exec'd into.
			t.Logf("pod %s (handler gpurun) runs on; containerd 2.x refuses exec in it now: %v", p, err)
		default:
			t.Errorf("exec in pod %s that ran before the uninstall: %v\n%s", p, err, c.Dump(harness.Pod(ns, p)))
		}
	}
	e.runShmCases(t, ns, []shmCase{{after, wantEngine}})
}

// containersRunning describes a pod's containers: name, start time of the
// running container (empty when not running) and restart count.
func containersRunning(t *testing.T, c *harness.Cluster, ns, pod string) string {
	t.Helper()
	out, err := c.Get(harness.Pod(ns, pod), `{range .status.containerStatuses[*]}{.name}={.state.running.startedAt}/{.restartCount} {end}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(out) {
		if strings.Contains(f, "=/") {
			t.Errorf("pod %s: container not running: %s", pod, out)
		}
	}
	return strings.TrimSpace(out)
}

// testNRI: the nri overlay as shipped, on containerd 2.x: the plugin
// registers with containerd, and GPU pods get the policy's size with no
// RuntimeClass and no change to containerd's config.
func (e *clusterEnv) testNRI(t *testing.T) {
	c := e.c.For(t)
	overlay := e.agentOverlay(t, "nri")
	applyOverlay(t, c, overlay)
	waitNRIRegistered(t, c)
	ns := testNamespace(t, c)
	e.runShmCases(t, ns, []shmCase{
		{podSpec{name: "gpu", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}}, {name: "sidecar"}}}, wantTarget(0)},
		{podSpec{name: "gpu-device", containers: []containerSpec{{name: "trainer", gpus: 1}}}, wantTarget(0)},
		{podSpec{name: "not-gpu", containers: []containerSpec{{name: "app"}}}, wantEngine},
	})
	if now, _ := os.ReadFile(c.Containerd.ConfigPath); !bytes.Equal(now, e.original) {
		t.Error("the NRI mode changed containerd's config")
	}
	if e.dra != nil {
		t.Run("dra", func(t *testing.T) { e.testDRA(t, "") })
	}
	t.Run("restart sweep", func(t *testing.T) { e.testRestartSweep(t, "", "gpurun-nri") })
	t.Run("refused without hostPID", func(t *testing.T) { e.testNRIRefused(t, ns) })
}

// testNRIRefused: an admin's Pod Security admission forbids hostPID, so the
// NRI DaemonSet runs without it, on a node whose containerd state dir (the
// test cluster's, under /tmp) is not in the policy's engine_roots: the
// plugin cannot prove a GPU pod's tmpfs is the pod's, refuses the remount
// (cause unknown-root), and the pod's owner sees a ShmNotSized Event with
// the fix. hostPID is put back at the end.
func (e *clusterEnv) testNRIRefused(t *testing.T, ns string) {
	c := e.c.For(t)
	setHostPID := func(on bool) {
		t.Helper()
		patch := fmt.Sprintf(`[{"op": "replace", "path": "/spec/template/spec/hostPID", "value": %v}]`, on)
		if out, err := c.Kubectl("patch", "daemonset", "-n", "gpurun-system", "gpurun-nri", "--type=json", "-p", patch); err != nil {
			t.Fatalf("patch hostPID %v: %v\n%s", on, err, out)
		}
		c.WaitRollout("gpurun-system", "gpurun-nri", agentTimeout)
		if err := waitUntil(agentTimeout, func() (bool, string) {
			pod := agentPod(t, c, "gpurun-nri")
			got, err := c.Get(harness.Object{Kind: "pod", Namespace: "gpurun-system", Name: pod}, "{.spec.hostPID}")
			if err != nil || (got == "true") != on {
				return false, fmt.Sprintf("pod %s hostPID %q %v", pod, got, err)
			}
			out, err := c.Kubectl("logs", "-n", "gpurun-system", pod)
			return err == nil && strings.Contains(out, "registered with the runtime"), out
		}); err != nil {
			t.Fatalf("NRI plugin with hostPID %v: %v", on, err)
		}
	}
	setHostPID(false)
	defer setHostPID(true)

	sc := podSpec{name: "gpu-refused", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}}}}
	c.Apply(podManifest(ns, sc))
	c.WaitPodReady(ns, sc.name, podTimeout)
	if got := c.ShmOf(ns, sc.name, "trainer"); got.Bytes != policy.EngineDefaultShm {
		t.Errorf("/dev/shm %s, want containerd's 64MiB left as it was (the remount refused)\n%s", policy.FormatSize(got.Bytes), e.gpurunLogs())
	}
	uid, err := c.Get(harness.Pod(ns, sc.name), "{.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, c, "gpurun-nri", ns, uid, "ShmNotSized")
	state := c.Containerd.StateDir
	_, fix, _ := strings.Cut(ev.Message, "; fix: ")
	if ev.Type != "Warning" || ev.Source.Component != "gpurun" || !strings.Contains(fix, "engine_roots") ||
		!strings.Contains(fix, "host's PID namespace") || !strings.Contains(fix, state) {
		t.Errorf("ShmNotSized Event on %s: %+v; want type Warning, source gpurun, the fix (add a dir under %s to engine_roots, or run the plugin in the host's PID namespace)", sc.name, ev, state)
	}
	if out, err := c.Kubectl("describe", "pod", "-n", ns, sc.name); err == nil {
		t.Logf("kubectl describe pod %s (Events):\n%s", sc.name, out[strings.LastIndex(out, "Events:"):])
	}
	if out, err := c.Kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name="+sc.name); err == nil {
		t.Logf("kubectl get events:\n%s", out)
	}
}
