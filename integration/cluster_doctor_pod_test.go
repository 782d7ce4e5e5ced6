//go:build integration

package integration

// gpurun doctor --pod on the real test cluster, as a Kubernetes user runs
// it: from outside the nodes, with a kubeconfig and kubectl only — as
// gpurun doctor and as the kubectl plugin through the cluster's real
// kubectl. Each case asserts the verdict (the exit status, the check that
// names the cause) and the fix, in text and --json. The kubelet's
// crash-loop back-off is capped at 1 s in the test clusters
// (KubeletCrashLoopBackOffMax), so restarts come quickly.
//
// GPURUN_TEST_DOCTOR_RECORD=DIR writes each case's API objects and logs
// (kubectl get -o json, kubectl logs) under DIR/<case>, the form of
// diagnose/doctor/testdata/pods.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

// doctorRecordEnv names the directory the cases' API objects are
// recorded in ("" none).
const doctorRecordEnv = "GPURUN_TEST_DOCTOR_RECORD"

// doctorCLI runs gpurun doctor, and kubectl with the gpurun plugin, as a
// user with a kubeconfig: in the cluster's network namespace (where its
// API server listens), with the plugin's links on PATH.
type doctorCLI struct {
	c          *harness.Cluster
	ns         *harness.NetNS
	pluginDir  string
	kubeconfig string
	home       string
}

// newDoctorCLI installs the kubectl plugin (gpurun install
// kubectl-plugin) into a directory of the test's own.
func newDoctorCLI(t *testing.T, c *harness.Cluster) *doctorCLI {
	t.Helper()
	d := &doctorCLI{c: c, ns: &harness.NetNS{Path: filepath.Join(c.Dir, "netns")}, pluginDir: t.TempDir(),
		kubeconfig: c.Kubeconfig, home: t.TempDir()}
	out, err := exec.Command(bin(t, "gpurun"), "install", "kubectl-plugin", "--dir", d.pluginDir).CombinedOutput()
	if err != nil {
		t.Fatalf("gpurun install kubectl-plugin: %v\n%s", err, out)
	}
	for _, f := range []string{"kubectl-gpurun", "kubectl_complete-gpurun"} {
		if target, err := os.Readlink(filepath.Join(d.pluginDir, f)); err != nil || target != bin(t, "gpurun") {
			t.Fatalf("%s -> %q (%v), want %s", f, target, err, bin(t, "gpurun"))
		}
	}
	return d
}

// run runs a program in the cluster's network namespace with kubeconfig
// as $KUBECONFIG; code is its exit status.
func (d *doctorCLI) run(t *testing.T, kubeconfig, prog string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+d.home, "GPURUN_CONFIG=",
		"PATH="+d.pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := d.ns.Command(cmd)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", prog, strings.Join(args, " "), err)
	}
	return o.String(), e.String(), code
}

// doctor runs gpurun doctor with args, in text and as JSON, and returns
// both, failing the test when the exit statuses differ.
func (d *doctorCLI) doctor(t *testing.T, kubeconfig string, args ...string) (text string, rep doctorReport) {
	t.Helper()
	text, stderr, code := d.run(t, kubeconfig, bin(t, "gpurun"), append([]string{"doctor"}, args...)...)
	js, jerr, jcode := d.run(t, kubeconfig, bin(t, "gpurun"), append([]string{"doctor", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("gpurun doctor --json %s: %v\n%s\n%s", strings.Join(args, " "), err, js, jerr)
	}
	if code != rep.ExitCode || jcode != rep.ExitCode {
		t.Errorf("gpurun doctor %s: exit %d (text), %d (--json), report's exit_code %d\n%s", strings.Join(args, " "), code, jcode, rep.ExitCode, stderr)
	}
	t.Logf("gpurun doctor %s (exit %d):\n%s", strings.Join(args, " "), code, text)
	return text, rep
}

// doctorReport is doctor's --json.
type doctorReport struct {
	Schema   string `json:"schema"`
	Mode     string `json:"mode"`
	Target   string `json:"target"`
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Checks   []struct {
		Name    string         `json:"name"`
		Status  string         `json:"status"`
		Detail  string         `json:"detail"`
		Fix     string         `json:"fix"`
		Data    map[string]any `json:"data"`
		Subject string         `json:"subject"`
	} `json:"checks"`
}

// verdict is what a case expects of a report: its exit status, the
// status of checks, and words in their details and fixes.
type verdict struct {
	exit   int
	checks map[string]string // check name: status
	detail map[string]string // check name: words in its detail
	fix    map[string]string // check name: words in its fix
}

// assert checks a report (and its text) against a verdict.
func (v verdict) assert(t *testing.T, text string, rep doctorReport) {
	t.Helper()
	if rep.ExitCode != v.exit || rep.Schema != "gpurun.doctor/v1" {
		t.Errorf("exit_code %d, schema %q; want %d, gpurun.doctor/v1", rep.ExitCode, rep.Schema, v.exit)
	}
	find := func(name string) (status, detail, fix string) {
		for _, c := range rep.Checks {
			if c.Name == name {
				return c.Status, c.Detail, c.Fix
			}
		}
		return "", "", ""
	}
	for name, want := range v.checks {
		if got, detail, _ := find(name); got != want {
			t.Errorf("check %s: %s, want %s (%s)", name, got, want, detail)
		}
	}
	for name, want := range v.detail {
		if _, got, _ := find(name); !strings.Contains(got, want) || !strings.Contains(oneLine(text), want) {
			t.Errorf("check %s's detail lacks %q (text or --json):\n%s", name, want, got)
		}
	}
	for name, want := range v.fix {
		if _, _, got := find(name); !strings.Contains(got, want) || !strings.Contains(text, want) {
			t.Errorf("check %s's fix lacks %q (text or --json):\n%s", name, want, got)
		}
	}
}

// oneLine undoes the text report's wrapping of details.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// testDoctorPod: gpurun doctor --pod on the cases of the issue, first
// under gpurun's webhook (a sized pod, a GPU pod in a namespace the
// webhook leaves out, SIGBUS, leftovers, a reader without node access, a
// pod that does not exist), then under the node agent (not ready, an OOM
// kill with /dev/shm full).
func (e *clusterEnv) testDoctorPod(t *testing.T) {
	start := time.Now()
	d := newDoctorCLI(t, e.c.For(t))
	t.Run("webhook", func(t *testing.T) { e.testDoctorWebhook(t, d) })
	t.Run("node agent", func(t *testing.T) { e.testDoctorAgent(t, d) })
	t.Logf("doctor --pod took %s", time.Since(start).Round(time.Second))
}

// doctorPod is a test pod of busybox: a GPU container (its environment, as
// NVIDIA's device plugin sets it, or nvidia.com/gpu from the fake device
// plugin) running script, with a memory limit.
type doctorPod struct {
	ns, name, script, limit string
	gpus                    int
	restartNever            bool
	// shm is a Memory emptyDir of the pod's own at /dev/shm ("" none).
	shm string
}

func (p doctorPod) manifest() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:\n  terminationGracePeriodSeconds: 1\n", p.name, p.ns)
	if p.restartNever {
		b.WriteString("  restartPolicy: Never\n")
	}
	if p.shm != "" {
		fmt.Fprintf(&b, "  volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: %s}}]\n", p.shm)
	}
	fmt.Fprintf(&b, "  containers:\n  - name: trainer\n    image: %s\n    imagePullPolicy: Never\n", harness.BusyboxRef)
	fmt.Fprintf(&b, "    command: [sh, -c, %q]\n", p.script)
	limits := "memory: " + p.limit
	if p.gpus > 0 {
		limits += fmt.Sprintf(", %s: %d", harness.GPUResource, p.gpus)
	} else {
		k, v, _ := strings.Cut(gpuEnv, "=")
		fmt.Fprintf(&b, "    env: [{name: %s, value: %q}]\n", k, v)
	}
	fmt.Fprintf(&b, "    resources: {limits: {%s}}\n", limits)
	if p.shm != "" {
		b.WriteString("    volumeMounts: [{name: dshm, mountPath: /dev/shm}]\n")
	}
	return b.String()
}

// sigbusScript stands for a DataLoader whose worker dies of SIGBUS: a
// busybox container cannot really take a SIGBUS as PID 1 (the kernel
// drops signals PID 1 has no handler for), so it prints PyTorch's own
// message and exits 135, as a shell does after a child's SIGBUS (128+7).
const sigbusScript = `echo 'ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).' >&2; sleep 1; exit 135`

// leftoversScript fills the pod's /dev/shm a little more at each start
// and exits 1 (as a rank killed mid-run): the first instance's 40 MiB
// stay in the pod's 64 MiB emptyDir, and the restart dies of ENOSPC.
const leftoversScript = `i=$(ls /dev/shm | wc -l); if dd if=/dev/zero of=/dev/shm/nccl-shm-$i bs=1M count=40; then echo "segment $i written"; else echo "segment $i failed"; fi; sleep 1; exit 1`

// sleepScript keeps a container running.
const sleepScript = `exec sleep 2147483647`

// testDoctorWebhook: the webhook overlay as shipped; doctor on a pod it
// sized, on GPU pods in a namespace labelled gpurun.io/webhook=disabled
// (left at 64 MiB; one of them crashing with SIGBUS), on a pod crashlooping
// on its own emptyDir's leftovers, as a reader without node access, and on
// a pod that does not exist.
func (e *clusterEnv) testDoctorWebhook(t *testing.T, d *doctorCLI) {
	c := e.c.For(t)
	e.installWebhook(t)
	ns := doctorNamespace(t, c, "ml")
	out := doctorNamespace(t, c, "batch")
	c.MustKubectl("label", "namespace", out, "gpurun.io/webhook=disabled")
	pods := []doctorPod{
		{ns: ns, name: "sized", script: sleepScript, limit: "2Gi", gpus: 1},
		{ns: out, name: "unsized", script: sleepScript, limit: "2Gi"},
		{ns: out, name: "sigbus", script: sigbusScript, limit: "2Gi"},
		{ns: ns, name: "leftovers", script: leftoversScript, limit: "2Gi", shm: "64Mi"},
	}
	for _, p := range pods {
		c.Apply(p.manifest())
	}
	c.Apply(doctorJob(out, "train", sigbusScript))
	c.WaitPodReady(ns, "sized", podTimeout)
	c.WaitPodReady(out, "unsized", podTimeout)
	waitRestarted(t, c, out, "sigbus", 1, 135)
	waitRestarted(t, c, ns, "leftovers", 2, 1)

	sizedWant := e.target(2 * policy.GiB)
	t.Run("sized", func(t *testing.T) { d.testSized(t, ns, sizedWant) })
	t.Run("left out of the webhook", func(t *testing.T) { d.testLeftOut(t, out) })
	t.Run("SIGBUS", func(t *testing.T) { d.testSIGBUS(t, out) })
	t.Run("a Job's pods", func(t *testing.T) { d.testJob(t, out) })
	t.Run("leftovers", func(t *testing.T) { d.testLeftovers(t, ns) })
	t.Run("reader without node access", func(t *testing.T) { d.testReader(t, ns) })
	t.Run("no such pod", func(t *testing.T) { d.testNoSuchPod(t, ns) })
}

// doctorNamespace creates a namespace of a short name, as users' are
// (the reports and the recorded cases read better), deleted when t ends.
func doctorNamespace(t *testing.T, c *harness.Cluster, name string) string {
	t.Helper()
	ns := "doctor-" + name
	c.MustKubectl("create", "namespace", ns)
	t.Cleanup(func() {
		if out, err := c.Kubectl("delete", "namespace", ns, "--wait=true", "--timeout=2m"); err != nil {
			t.Errorf("delete namespace %s: %v\n%s", ns, err, out)
		}
	})
	c.WaitServiceAccount(ns, "default", time.Minute)
	return ns
}

// waitRestarted waits until a pod's container has restarted n times and
// its last instance ended with exit code code.
func waitRestarted(t *testing.T, c *harness.Cluster, ns, pod string, n, code int) {
	t.Helper()
	if err := waitUntil(podTimeout, func() (bool, string) {
		out, err := c.Get(harness.Pod(ns, pod), "{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.exitCode}")
		var restarts, exit int
		if _, serr := fmt.Sscan(out, &restarts, &exit); err != nil || serr != nil {
			return false, out
		}
		return restarts >= n && exit == code, out
	}); err != nil {
		t.Fatalf("pod %s/%s restarting: %v\n%s", ns, pod, err, c.Dump(harness.Pod(ns, pod)))
	}
}

// testSized: a GPU pod the webhook sized is healthy (exit 0), through
// gpurun doctor and through kubectl's plugin, and kubectl completes the
// plugin's TYPE/NAME.
func (d *doctorCLI) testSized(t *testing.T, ns string, want int64) {
	text, rep := d.doctor(t, d.kubeconfig, "--pod", ns+"/sized")
	verdict{exit: 0,
		checks: map[string]string{"pod": "ok", "decision": "ok", "shm.door": "ok", "restarts": "ok", "log": "ok", "webhook": "ok", "node.agent": "ok"},
		detail: map[string]string{"shm.door": "volume " + webhook.VolumeName + " (emptyDir, medium Memory, sizeLimit " + policy.FormatQuantity(want) + ")",
			"decision": "gpurun gives this pod a /dev/shm of " + policy.FormatSize(want)},
	}.assert(t, text, rep)
	d.record(t, "webhook-sized", ns, "sized", "")

	stdout, stderr, code := d.run(t, d.kubeconfig, d.c.KubectlBinary(), "gpurun", "doctor", "pod/sized", "-n", ns)
	if code != 0 || !strings.Contains(stdout, "gpurun doctor: Kubernetes pod "+ns+"/sized") || !strings.Contains(stdout, "healthy: 0 problem(s)") {
		t.Errorf("kubectl gpurun doctor pod/sized: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = d.run(t, d.kubeconfig, d.c.KubectlBinary(), "__complete", "gpurun", "doctor", "-n", ns, "pod/")
	if code != 0 || !strings.Contains(stdout, "pod/sized") {
		t.Errorf("kubectl's completion of kubectl gpurun doctor -n %s pod/: exit %d\n%s\n%s", ns, code, stdout, stderr)
	}
}

// testLeftOut: a GPU pod in a namespace the webhook's configuration
// leaves out keeps the runtime's 64 MiB: a problem naming the door and the
// label to take off.
func (d *doctorCLI) testLeftOut(t *testing.T, ns string) {
	text, rep := d.doctor(t, d.kubeconfig, "pod/unsized", "-n", ns)
	verdict{exit: 1,
		checks: map[string]string{"shm.door": "problem", "webhook": "warn", "restarts": "ok", "node.agent": "ok"},
		detail: map[string]string{"shm.door": "the namespace is labelled gpurun.io/webhook=disabled",
			"webhook": "this GPU pod's namespace is left out of gpurun's webhook"},
		fix: map[string]string{"shm.door": "kubectl label namespace " + ns + " gpurun.io/webhook-",
			"webhook": "kubectl label namespace " + ns + " gpurun.io/webhook-"},
	}.assert(t, text, rep)
	d.record(t, "webhook-left-out", ns, "unsized", "")
}

// testSIGBUS: a pod crashing with SIGBUS at 64 MiB: the log's finding,
// the exit code read, and the fix; through kubectl's plugin too.
func (d *doctorCLI) testSIGBUS(t *testing.T, ns string) {
	text, rep := d.doctor(t, d.kubeconfig, "--pod", "sigbus", "-n", ns, "-c", "trainer")
	verdict{exit: 1,
		checks: map[string]string{"shm.door": "problem", "restarts": "problem", "log": "problem"},
		detail: map[string]string{"restarts": "exit code 135 (Error): 128+7, SIGBUS",
			"log": "torch-dataloader-bus-error"},
		fix: map[string]string{"restarts": "kubectl label namespace " + ns + " gpurun.io/webhook-",
			"log": "emptyDir: {medium: Memory, sizeLimit: "},
	}.assert(t, text, rep)
	d.record(t, "sigbus", ns, "sigbus", "")
	stdout, _, code := d.run(t, d.kubeconfig, d.c.KubectlBinary(), "gpurun", "doctor", "pod/sigbus", "-n", ns, "--json")
	var plug doctorReport
	if err := json.Unmarshal([]byte(stdout), &plug); err != nil || code != 1 || plug.ExitCode != 1 || plug.Target != ns+"/sigbus" {
		t.Errorf("kubectl gpurun doctor pod/sigbus --json: exit %d, %v\n%s", code, err, stdout)
	}
}

// doctorJob is a Job of one GPU pod (its environment) that runs script
// and restarts in place when it fails.
func doctorJob(ns, name, script string) string {
	k, v, _ := strings.Cut(gpuEnv, "=")
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  backoffLimit: 100
  template:
    spec:
      terminationGracePeriodSeconds: 1
      restartPolicy: OnFailure
      containers:
      - name: trainer
        image: %[3]s
        imagePullPolicy: Never
        command: [sh, -c, %[4]q]
        env: [{name: %[5]s, value: %[6]q}]
        resources: {limits: {memory: 2Gi}}
`, name, ns, harness.BusyboxRef, script, k, v)
}

// testJob: doctor on a Job (job/NAME, through kubectl's plugin, and
// --job): its pods, the worst first, each check marked with its pod.
func (d *doctorCLI) testJob(t *testing.T, ns string) {
	c := d.c
	var pod string
	if err := waitUntil(podTimeout, func() (bool, string) {
		out, err := c.Kubectl("get", "pods", "-n", ns, "-l", "job-name=train", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].lastState.terminated.exitCode}{"\n"}{end}`)
		f := strings.Fields(out)
		if err == nil && len(f) == 2 && f[1] == "135" {
			pod = f[0]
			return true, out
		}
		return false, out
	}); err != nil {
		t.Fatalf("the Job's pod restarting: %v", err)
	}
	stdout, stderr, code := d.run(t, d.kubeconfig, d.c.KubectlBinary(), "gpurun", "doctor", "job/train", "-n", ns)
	t.Logf("kubectl gpurun doctor job/train (exit %d):\n%s%s", code, stdout, stderr)
	if code != 1 || !strings.Contains(stdout, "gpurun doctor: Kubernetes job "+ns+"/train") || !strings.Contains(stdout, "pod "+pod+":") {
		t.Errorf("kubectl gpurun doctor job/train: exit %d, want 1, the Job and its pod %s", code, pod)
	}
	text, rep := d.doctor(t, d.kubeconfig, "--job", "train", "-n", ns)
	verdict{exit: 1, checks: map[string]string{"owner": "ok", "restarts": "problem"},
		detail: map[string]string{"owner": "job " + ns + "/train has 1 pod(s), the worst first: " + pod + " problem"},
		fix:    map[string]string{"restarts": "kubectl -n " + ns + " delete job train, then create it again"},
	}.assert(t, text, rep)
	if rep.Mode != "kubernetes-owner" || len(rep.Checks) < 2 || rep.Checks[1].Subject != "pod "+pod {
		t.Errorf("mode %s, the pod's checks' subject %q; want kubernetes-owner, pod %s", rep.Mode, rep.Checks[1].Subject, pod)
	}
	d.record(t, "job", ns, pod, "", "job/train")
}

// testLeftovers: a container that fills its pod's own Memory emptyDir and
// exits; its restart dies of ENOSPC on what the first left.
func (d *doctorCLI) testLeftovers(t *testing.T, ns string) {
	text, rep := d.doctor(t, d.kubeconfig, "pod/leftovers", "-n", ns)
	verdict{exit: 1,
		checks: map[string]string{"restarts": "problem", "log": "problem"},
		detail: map[string]string{"restarts": "what its earlier instances left in the pod's /dev/shm",
			"log": "shm-restart-leftovers"},
		fix: map[string]string{"restarts": "kubectl -n " + ns + " delete pod leftovers",
			"log": `sweep = "restart"`},
	}.assert(t, text, rep)
	d.record(t, "leftovers", ns, "leftovers", "")
}

// testNoSuchPod: a pod that does not exist: exit 2, and how to find it.
func (d *doctorCLI) testNoSuchPod(t *testing.T, ns string) {
	text, rep := d.doctor(t, d.kubeconfig, "--pod", ns+"/no-such-pod")
	verdict{exit: 2, checks: map[string]string{"pod": "error"},
		detail: map[string]string{"pod": "pod " + ns + "/no-such-pod does not exist"},
		fix:    map[string]string{"pod": "kubectl -n " + ns + " get pods"},
	}.assert(t, text, rep)
	if len(rep.Checks) != 1 {
		t.Errorf("%d checks for a pod that does not exist, want only the pod check", len(rep.Checks))
	}
}

// testReader: a ServiceAccount that may read pods, their logs and Events
// in its namespace, and nothing else, through a kubeconfig with its token:
// the checks it can make are made, the others say which permission they
// need (exit 2: no problem, some checks not made).
func (d *doctorCLI) testReader(t *testing.T, ns string) {
	c := d.c
	c.Apply(fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: %[1]s}
rules:
- {apiGroups: [""], resources: [pods, pods/log, events], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{kind: ServiceAccount, name: reader, namespace: %[1]s}]
`, ns))
	kc := readerKubeconfig(t, c, ns)
	text, rep := d.doctor(t, kc, "pod/sized")
	verdict{exit: 2,
		checks: map[string]string{"pod": "ok", "shm.door": "ok", "restarts": "ok", "log": "ok", "events": "ok",
			"node": "error", "node.agent": "error", "webhook": "error"},
		detail: map[string]string{"node": "needs get on nodes (cluster-scoped: a ClusterRole)",
			"node.agent": "needs get on daemonsets.apps in namespace gpurun-system",
			"webhook":    "needs get on mutatingwebhookconfigurations.admissionregistration.k8s.io",
			"policy":     "needs get on configmaps in namespace gpurun-system",
			"decision":   "gpurun gives this pod a /dev/shm of",
		},
	}.assert(t, text, rep)
	d.record(t, "reader", ns, "sized", "reader")
}

// readerKubeconfig writes a kubeconfig for ServiceAccount reader of ns:
// the admin's cluster entry, the account's token.
func readerKubeconfig(t *testing.T, c *harness.Cluster, ns string) string {
	t.Helper()
	token := strings.TrimSpace(c.MustKubectl("create", "token", "reader", "-n", ns, "--duration=1h"))
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Contexts[admin.CurrentContext].Cluster
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = admin.Clusters[cluster]
	cfg.AuthInfos["reader"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["reader"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "reader", Namespace: ns}
	cfg.CurrentContext = "reader"
	path := filepath.Join(t.TempDir(), "reader.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// oomScript fills 300 MiB of /dev/shm, holds it over a few of the node
// agent's samples (every 2 s here), then allocates until the kernel
// OOM-kills it: tail keeps reading a line that never ends.
const oomScript = `dd if=/dev/zero of=/dev/shm/torch_1 bs=1M count=300 2>/dev/null; echo "300MiB in /dev/shm"; sleep 6; exec tail /dev/zero`

// testDoctorAgent: the default-runtime overlay as shipped (restart=none),
// its metrics sampled every 2 s. A GPU pod started while the agent waits
// for containerd's restart keeps 64 MiB: a problem naming the agent that
// is not ready, and why; once containerd restarted, the same pod started
// before gpurun was in effect; a pod OOM-killed with /dev/shm holding much
// of its limit: the share the node reported, and the memory to give it.
func (e *clusterEnv) testDoctorAgent(t *testing.T, d *doctorCLI) {
	c := e.c.For(t)
	overlay := e.agentOverlayWith(t, "default-runtime", nil, []string{"--metrics-interval=2s"})
	t.Cleanup(func() { e.uninstallAll(t, overlay) })
	c.ApplyKustomize(overlay)
	agent := agentPod(t, c, "gpurun-node")
	if err := waitUntil(agentTimeout, func() (bool, string) {
		out, err := c.Kubectl("get", "events", "-n", "gpurun-system", "--field-selector", "involvedObject.name="+agent+",reason=Unhealthy", "-o", "jsonpath={.items[*].message}")
		return err == nil && strings.Contains(out, "restart containerd"), out
	}); err != nil {
		t.Fatalf("the agent's readiness probe saying it waits for containerd's restart: %v", err)
	}
	ns := doctorNamespace(t, c, "train")
	c.Apply(doctorPod{ns: ns, name: "early", script: sleepScript, limit: "2Gi"}.manifest())
	c.WaitPodReady(ns, "early", podTimeout)
	t.Run("agent not ready", func(t *testing.T) {
		text, rep := d.doctor(t, d.kubeconfig, "pod/early", "-n", ns)
		verdict{exit: 1, checks: map[string]string{"shm.door": "problem", "node.agent": "warn", "webhook": "ok"},
			detail: map[string]string{"shm.door": "the gpurun-node pod " + agent + " on node " + harness.ClusterNodeName + " is not ready",
				"node.agent": "restart containerd"},
			fix: map[string]string{"shm.door": "restart containerd on node " + harness.ClusterNodeName, "node.agent": "nodeAgent.restart=systemd"},
		}.assert(t, text, rep)
		d.record(t, "agent-not-ready", ns, "early", "")
	})
	c.Containerd.Restart()
	c.WaitPodReady("gpurun-system", agent, agentTimeout)
	t.Run("started before the agent was ready", func(t *testing.T) {
		text, rep := d.doctor(t, d.kubeconfig, "pod/early", "-n", ns)
		verdict{exit: 1, checks: map[string]string{"shm.door": "problem", "node.agent": "ok"},
			detail: map[string]string{"shm.door": "before the gpurun-node pod " + agent},
			fix:    map[string]string{"shm.door": "kubectl -n " + ns + " delete pod early"},
		}.assert(t, text, rep)
	})
	t.Run("OOM kill", func(t *testing.T) { e.testDoctorOOM(t, d, ns) })
}

// testDoctorOOM: a GPU pod (limit 512Mi: the policy's /dev/shm is its
// memory_reserve ceiling, 384MiB) OOM-killed with 300 MiB in /dev/shm:
// the node agent's ShmOOMKilled Event says so, and doctor reads it as a
// problem with the memory limit to give.
func (e *clusterEnv) testDoctorOOM(t *testing.T, d *doctorCLI, ns string) {
	c := e.c.For(t)
	c.Apply(doctorPod{ns: ns, name: "oom", script: oomScript, limit: "512Mi", restartNever: true}.manifest())
	c.WaitPodPhase(ns, "oom", "Failed", podTimeout)
	uid, err := c.Get(harness.Pod(ns, "oom"), "{.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, "gpurun-node", ns, uid, "ShmOOMKilled")
	text, rep := d.doctor(t, d.kubeconfig, "pod/oom", "-n", ns)
	if !regexp.MustCompile(`the node reported: (a process of )?container trainer (was|were) OOM-killed with 300MiB of its (pod's )?512MiB memory limit in /dev/shm`).MatchString(text) {
		t.Errorf("the restarts check does not give the node's ShmOOMKilled Event:\n%s", text)
	}
	verdict{exit: 1, checks: map[string]string{"shm.door": "ok", "restarts": "problem"},
		detail: map[string]string{"restarts": "/dev/shm held 58% of the limit",
			"shm.door": "grown by gpurun on the node"},
		fix: map[string]string{"restarts": "resources.limits.memory: 1Gi in container trainer"},
	}.assert(t, text, rep)
	d.record(t, "oom", ns, "oom", "")
}

// record writes a case's API objects and logs under
// $GPURUN_TEST_DOCTOR_RECORD/<name> for diagnose/doctor's tests: the pod,
// the Events of its namespace and of gpurun's, its node and namespace,
// gpurun's DaemonSets, Deployments, pods and ConfigMaps, the webhook's
// configuration, the containers' logs (managedFields, the node's image
// list and the webhook's caBundle left out).
func (d *doctorCLI) record(t *testing.T, name, ns, pod, user string, more ...string) {
	t.Helper()
	root := os.Getenv(doctorRecordEnv)
	if root == "" {
		return
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := d.c
	node, _ := c.Get(harness.Pod(ns, pod), "{.spec.nodeName}")
	var items []json.RawMessage
	for _, args := range [][]string{
		{"get", "pod", pod, "-n", ns}, {"get", "events", "-n", ns}, {"get", "namespace", ns}, {"get", "node", node},
		{"get", "daemonsets,deployments,pods,configmaps,events", "-n", "gpurun-system"},
		{"get", "mutatingwebhookconfigurations", "--ignore-not-found"},
	} {
		items = append(items, recordItems(t, c, args)...)
	}
	for _, obj := range more {
		args := []string{"get", obj, "-n", ns}
		items = append(items, recordItems(t, c, args)...)
	}
	list, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	meta := fmt.Sprintf(`{"namespace": %q, "pod": %q, "user": %q}`+"\n", ns, pod, user)
	for file, data := range map[string][]byte{"objects.json": append(list, '\n'), "case.json": []byte(meta)} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, prev := range []bool{false, true} {
		out, err := c.Kubectl("logs", pod, "-n", ns, "-c", "trainer", "--tail=300", fmt.Sprintf("--previous=%v", prev))
		file := ns + "_" + pod + "_trainer.log"
		if prev {
			file = ns + "_" + pod + "_trainer.previous.log"
		}
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, "logs", file), []byte(out), 0o644)
		}
	}
	t.Logf("recorded %s in %s", name, dir)
}

// recordItems returns the objects kubectl get -o json lists, cleaned.
func recordItems(t *testing.T, c *harness.Cluster, args []string) []json.RawMessage {
	t.Helper()
	out, err := c.Kubectl(append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	if strings.TrimSpace(out) == "" {
		return nil // --ignore-not-found, and none
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("record: %v", err)
	}
	objs := []any{obj}
	if items, ok := obj["items"].([]any); ok {
		objs = items
	}
	var res []json.RawMessage
	for _, o := range objs {
		m, _ := o.(map[string]any)
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
		if st, ok := m["status"].(map[string]any); ok {
			delete(st, "images")
		}
		if hooks, ok := m["webhooks"].([]any); ok {
			for _, h := range hooks {
				if cc, ok := h.(map[string]any)["clientConfig"].(map[string]any); ok {
					delete(cc, "caBundle")
				}
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, b)
	}
	return res
}
