//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

// installWebhook applies the webhook overlay as shipped (the image and the
// API server's address aside) and waits until its replicas are ready and
// one of them has put its CA into the MutatingWebhookConfiguration.
func (e *clusterEnv) installWebhook(t *testing.T) string {
	t.Helper()
	c := e.c.For(t)
	start := time.Now()
	overlay := e.agentOverlay(t, "webhook")
	applyOverlay(t, c, overlay)
	waitDeployment(t, c)
	if err := waitUntil(agentTimeout, caBundlesSet(c)); err != nil {
		logs, _ := c.Kubectl("logs", "-n", "gpurun-system", "deployment/gpurun-webhook")
		t.Fatalf("caBundle: %v\n%s", err, logs)
	}
	t.Logf("webhook ready, caBundle set, after %s", time.Since(start).Round(100*time.Millisecond))
	return overlay
}

// caBundlesSet is a waitUntil condition: both entries of the
// MutatingWebhookConfiguration, gpu-pods.gpurun.io and pods.gpurun.io,
// carry the webhook's CA.
func caBundlesSet(c *harness.Cluster) func() (bool, string) {
	return func() (bool, string) {
		out, err := c.Kubectl("get", "mutatingwebhookconfiguration", "gpurun", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}")
		f := strings.Fields(out)
		return err == nil && len(f) == 2 && len(f[0]) > 100 && len(f[1]) > 100, out
	}
}

// podVolume is what the tests read of a pod's spec.
type podVolume struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Volumes []struct {
			Name     string `json:"name"`
			EmptyDir *struct {
				Medium    string `json:"medium"`
				SizeLimit string `json:"sizeLimit"`
			} `json:"emptyDir"`
		} `json:"volumes"`
	} `json:"spec"`
}

func getPod(t *testing.T, c *harness.Cluster, ns, name string) podVolume {
	t.Helper()
	out, err := c.Kubectl("get", "pod", "-n", ns, name, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var p podVolume
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// testWebhook: the webhook overlay as shipped; a GPU pod gets one Memory
// emptyDir at /dev/shm, which every container sees with the sizeLimit as
// its size (the kubelet mounts a Memory emptyDir as a tmpfs of size
// sizeLimit) and one st_dev, whether a GPU resource or only its
// environment says it is one (the two go to different entries); a pod
// without GPUs is left as it is; with the webhook down, a pod with a GPU
// in its limits is refused, others are admitted unchanged, and gpurun
// doctor in such a pod says what happened.
func (e *clusterEnv) testWebhook(t *testing.T) {
	c := e.c.For(t)
	overlay := e.installWebhook(t)
	if e.dra != nil {
		// First, in a namespace of its own: its pods' memory is the node's
		// again for the pods below.
		t.Run("dra", e.testWebhookDRA)
	}
	ns := testNamespace(t, c)
	// The pod's memory is its containers' limits together (9Gi).
	gpuPod := podSpec{name: "gpu", containers: []containerSpec{{name: "trainer", gpus: 1, memoryLimit: "8Gi"}, {name: "sidecar", memoryLimit: "1Gi"}}}
	want, _ := e.pol.Target(policy.Request{MemoryLimit: 9 * policy.GiB, GPUs: 1})
	e.runShmCases(t, ns, []shmCase{
		{gpuPod, func(*clusterEnv, *testing.T) int64 { return want }},
		{podSpec{name: "gpu-by-env", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}, memoryLimit: "2Gi"}}}, wantTarget(2 * policy.GiB)},
		{podSpec{name: "not-gpu", containers: []containerSpec{{name: "app", memoryLimit: "1Gi"}}}, wantEngine},
	})
	p := getPod(t, c, ns, "gpu")
	var found bool
	for _, v := range p.Spec.Volumes {
		if v.Name == "gpurun-shm" && v.EmptyDir != nil && v.EmptyDir.Medium == "Memory" {
			found = true
		}
	}
	if d := p.Metadata.Annotations["gpurun.io/shm-decision"]; !found || !strings.HasPrefix(d, "emptydir ") {
		t.Errorf("GPU pod: volume gpurun-shm %v, decision %q", found, d)
	}
	q := getPod(t, c, ns, "not-gpu")
	_, decided := q.Metadata.Annotations["gpurun.io/shm-decision"]
	for _, v := range q.Spec.Volumes {
		if v.Name == "gpurun-shm" || decided {
			t.Errorf("the pod without GPUs was changed: %+v", q)
		}
	}

	// The webhook down: a pod with a GPU in its limits is refused, by
	// gpu-pods.gpurun.io (failurePolicy Fail), for its controller to
	// retry; one known only by its environment goes to pods.gpurun.io
	// (Ignore) and is admitted as it is, and doctor inside such a pod
	// says the webhook did not act.
	c.MustKubectl("scale", "-n", "gpurun-system", "deployment/gpurun-webhook", "--replicas=0")
	if err := waitUntil(agentTimeout, func() (bool, string) {
		out, err := c.Kubectl("get", "pods", "-n", "gpurun-system", "-l", "app.kubernetes.io/name=gpurun-webhook", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out
	}); err != nil {
		t.Fatal(err)
	}
	// The node's memory holds every pod of this test at 2 GiB each.
	refused := podSpec{name: "gpu-refused", containers: []containerSpec{{name: "trainer", gpus: 1, memoryLimit: "2Gi"}}}
	start := time.Now()
	_, err := c.KubectlIn([]byte(podManifest(ns, refused)), "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "`+webhook.GPUWebhookName+`"`) {
		t.Errorf("a pod with nvidia.com/gpu in its limits, the webhook down: %v\nwant it refused by %s (failurePolicy Fail)", err, webhook.GPUWebhookName)
	}
	t.Logf("a GPU pod refused with the webhook down in %s: %v", time.Since(start).Round(100*time.Millisecond), err)
	start = time.Now()
	e.runShmCases(t, ns, []shmCase{{podSpec{name: "gpu-unsized", containers: []containerSpec{{name: "trainer", env: []string{gpuEnv}, memoryLimit: "2Gi"}}}, wantEngine}})
	t.Logf("a GPU pod known by its environment only admitted and ready with the webhook down in %s", time.Since(start).Round(100*time.Millisecond))
	// doctor, from gpurun's image, in a pod like it: its service account
	// may read its own pod, so doctor can tell the webhook never saw it.
	c.Apply(fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-pods, namespace: %[1]s}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: read-pods, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-pods}
subjects: [{kind: ServiceAccount, name: default, namespace: %[1]s}]
---
apiVersion: v1
kind: Pod
metadata: {name: doctor, namespace: %[1]s}
spec:
  restartPolicy: Never
  containers:
  - name: doctor
    image: %[2]s:%[3]s
    imagePullPolicy: Never
    command: [/usr/local/bin/gpurun, doctor]
    env:
    - {name: NVIDIA_VISIBLE_DEVICES, value: all}
    - {name: KUBERNETES_SERVICE_HOST, value: %[4]q}
    - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
`, ns, agentImageName, agentImageTag, harness.ClusterNodeIP))
	if err := waitUntil(podTimeout, func() (bool, string) {
		out, err := c.Kubectl("get", "pod", "-n", ns, "doctor", "-o", "jsonpath={.status.phase}")
		return err == nil && (out == "Succeeded" || out == "Failed"), out
	}); err != nil {
		t.Fatal(err)
	}
	logs, err := c.Kubectl("logs", "-n", ns, "doctor")
	if err != nil || !strings.Contains(logs, "has no gpurun.io/shm-decision annotation, so the webhook never saw it") {
		t.Errorf("gpurun doctor in a pod the webhook did not see: %v\n%s", err, logs)
	}

	// Up again: the refused pod, created again as its controller would,
	// gets its size.
	c.MustKubectl("scale", "-n", "gpurun-system", "deployment/gpurun-webhook", "--replicas=2")
	waitDeployment(t, c)
	// Until the API server sees the new endpoints it may refuse again.
	if err := waitUntil(agentTimeout, func() (bool, string) {
		out, err := c.KubectlIn([]byte(podManifest(ns, refused)), "create", "-f", "-")
		return err == nil, out
	}); err != nil {
		t.Fatalf("the refused pod, created again with the webhook up: %v", err)
	}
	e.runShmCases(t, ns, []shmCase{{refused, wantTarget(2 * policy.GiB)}})
	t.Run("admission warnings", e.testAdmissionWarnings)
	// Last, as it takes gpurun off the node again: the webhook's emptyDir
	// is the pod's /dev/shm, and the node agent's gpurun-runtime (the
	// default handler) sweeps it at each restart.
	t.Run("restart sweep with the node agent", func(t *testing.T) {
		e.installAgent(t, "default-runtime")
		e.testRestartSweep(t, "", "gpurun-node")
	})
	_ = overlay
}

// testAdmissionWarnings: the decision's warnings reach kubectl's own
// output, as "Warning: gpurun: …" lines on its standard error: a GPU pod
// whose Memory emptyDir at /dev/shm asks for more than its memory limit.
func (e *clusterEnv) testAdmissionWarnings(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	gpuKey, gpuVal, _ := strings.Cut(gpuEnv, "=")
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: big-shm, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 4Gi}}]
  containers:
  - name: trainer
    image: %s
    imagePullPolicy: Never
    command: [sleep, "2147483647"]
    env: [{name: %s, value: %q}]
    resources: {limits: {memory: 2Gi}}
    volumeMounts: [{name: dshm, mountPath: /dev/shm}]
`, ns, harness.BusyboxRef, gpuKey, gpuVal)
	stdout, stderr, err := c.KubectlWarnings([]byte(pod), "apply", "-f", "-")
	want := "Warning: gpurun: container trainer: volume dshm (emptyDir, medium Memory, sizeLimit 4Gi) is not below the 2GiB memory limit, which /dev/shm counts against"
	if err != nil || !strings.Contains(stderr, want) || !strings.Contains(stdout, "pod/big-shm created") {
		t.Errorf("kubectl apply: %v\nstdout: %s\nstderr: %s\nwant on stderr: %s", err, stdout, stderr, want)
	}
	t.Logf("kubectl apply printed:\n%s%s", stdout, stderr)
}

// waitDeployment waits until the webhook's Deployment has rolled out.
func waitDeployment(t *testing.T, c *harness.Cluster) {
	t.Helper()
	if out, err := c.Kubectl("rollout", "status", "deployment/gpurun-webhook", "-n", "gpurun-system", "--timeout", agentTimeout.String()); err != nil {
		logs, _ := c.Kubectl("logs", "-n", "gpurun-system", "deployment/gpurun-webhook", "--all-containers")
		t.Fatalf("rollout of the webhook: %v\n%s\n%s\n%s", err, out, logs, c.PodsDump("gpurun-system"))
	}
}
