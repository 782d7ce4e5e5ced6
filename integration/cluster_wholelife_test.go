//go:build integration

package integration

// A job's whole life on the real test cluster (docs/observe.md, "Restarts"
// and "The memory limit"): a pod's /dev/shm outlives its containers, so a
// container killed mid-run leaves its segments there and its restart finds
// them; gpurun's node doors sweep them before the new instance starts. The
// kubelet's crash-loop back-off is capped at 1 s in the test clusters
// (KubeletCrashLoopBackOffMax), so ten restarts take seconds, not 25
// minutes.

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

const (
	// leakRestarts is how many times the leaking container is killed.
	leakRestarts = 10
	// leakMiB is what each of its instances writes to /dev/shm: 7
	// segments of 100 MiB, in the 1 GiB /dev/shm the policy gives its 2Gi
	// memory limit (what the users saw: 700 MiB into 1 GiB, and
	// the restart finds 324 MiB free).
	leakMiB      = 700
	leakSegments = 7
	leakLimit    = "2Gi"
)

// leakScript is the leaking container: each start appends to a disk
// emptyDir (/log) what /dev/shm holds as it starts, then writes its
// segments, keeps one open (as a live NCCL keeps its segments), says
// "ready N" and waits to be killed. A start that cannot write them (the
// earlier instances' leftovers fill /dev/shm) says "enospc N" and exits 1.
var leakScript = fmt.Sprintf(`n=$(( $(cat /log/starts 2>/dev/null || echo 0) + 1 )); echo $n > /log/starts
set -- $(df -P -k /dev/shm | tail -n 1)
echo "start $n size_kib=$2 used_kib=$3 free_kib=$4" >> /log/shm
i=0
while [ $i -lt %d ]; do
  if ! dd if=/dev/zero of=/dev/shm/nccl-shm-$n-$i bs=1M count=%d 2>/dev/null; then
    echo "enospc $n" >> /log/shm
    exit 1
  fi
  i=$((i+1))
done
sleep 2147483647 < /dev/shm/nccl-shm-$n-0 &
echo "ready $n" >> /log/shm
wait
`, leakSegments, leakMiB/leakSegments)

// leakPod is the leaking pod: a GPU container (NVIDIA_VISIBLE_DEVICES, as
// the device plugin sets it) with a 2Gi limit, and a sidecar that reads
// its log whether it runs or not. runtimeClass "" runs it on
// the node's default handler; ownShm mounts a Memory emptyDir of 1Gi of
// its own at /dev/shm instead of taking the runtime's (no gpurun at all).
func leakPod(ns, name, runtimeClass string, ownShm bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:\n  terminationGracePeriodSeconds: 1\n", name, ns)
	if runtimeClass != "" {
		fmt.Fprintf(&b, "  runtimeClassName: %s\n", runtimeClass)
	}
	b.WriteString("  volumes:\n  - {name: log, emptyDir: {}}\n")
	if ownShm {
		b.WriteString("  - {name: dshm, emptyDir: {medium: Memory, sizeLimit: 1Gi}}\n")
	}
	fmt.Fprintf(&b, "  containers:\n  - name: trainer\n    image: %s\n    imagePullPolicy: Never\n", harness.BusyboxRef)
	fmt.Fprintf(&b, "    env: [{name: %s, value: %q}]\n", strings.SplitN(gpuEnv, "=", 2)[0], strings.SplitN(gpuEnv, "=", 2)[1])
	fmt.Fprintf(&b, "    resources: {limits: {memory: %s}}\n", leakLimit)
	b.WriteString("    volumeMounts:\n    - {name: log, mountPath: /log}\n")
	if ownShm {
		b.WriteString("    - {name: dshm, mountPath: /dev/shm}\n")
	}
	b.WriteString("    command: [sh, -c]\n    args:\n    - |\n")
	for _, l := range strings.Split(strings.TrimSpace(leakScript), "\n") {
		b.WriteString("      " + l + "\n")
	}
	// The log's reader: it runs while the leaking container is dead.
	fmt.Fprintf(&b, "  - name: log\n    image: %s\n    imagePullPolicy: Never\n    command: [sleep, \"2147483647\"]\n", harness.BusyboxRef)
	b.WriteString("    resources: {limits: {memory: 64Mi}}\n    volumeMounts:\n    - {name: log, mountPath: /log}\n")
	return b.String()
}

// leakStart is one start of the leaking container, as it logged it.
type leakStart struct {
	n                       int
	sizeKiB, usedKiB, freeK int64
	ready, enospc           bool
}

var leakStartLine = regexp.MustCompile(`^start (\d+) size_kib=(\d+) used_kib=(\d+) free_kib=(\d+)$`)

// leakLog reads the leaking container's log of its starts (/log/shm).
func leakLog(c *harness.Cluster, ns, pod string) (map[int]*leakStart, string, error) {
	out, err := c.Exec(ns, pod, "log", "cat", "/log/shm")
	if err != nil {
		return nil, out, err
	}
	starts := map[int]*leakStart{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if m := leakStartLine.FindStringSubmatch(l); m != nil {
			s := &leakStart{n: atoi(m[1]), sizeKiB: atoi64(m[2]), usedKiB: atoi64(m[3]), freeK: atoi64(m[4])}
			starts[s.n] = s
			continue
		}
		var what string
		var n int
		if _, err := fmt.Sscanf(l, "%s %d", &what, &n); err == nil && starts[n] != nil {
			starts[n].ready = starts[n].ready || what == "ready"
			starts[n].enospc = starts[n].enospc || what == "enospc"
		}
	}
	return starts, out, nil
}

func atoi(s string) int     { n, _ := strconv.Atoi(s); return n }
func atoi64(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

// waitLeakStart waits until the leaking container's start n has said
// ready or enospc, and returns it.
func waitLeakStart(t *testing.T, c *harness.Cluster, ns, pod string, n int) *leakStart {
	t.Helper()
	var s *leakStart
	var last string
	kick := kicker(c, ns, pod)
	if err := waitUntil(podTimeout, func() (bool, string) {
		kick()
		starts, out, err := leakLog(c, ns, pod)
		last = out
		if err != nil {
			return false, err.Error()
		}
		s = starts[n]
		return s != nil && (s.ready || s.enospc), out
	}); err != nil {
		t.Fatalf("start %d of %s/%s: %v\n%s\n%s", n, ns, pod, err, last, c.Dump(harness.Pod(ns, pod)))
	}
	return s
}

// kicker returns a function that, called while a test waits for a
// container of pod ns/name to restart, touches the pod (an annotation) at
// most every two seconds. The crash-loop back-off is capped at 1 s in the
// test clusters, but after a restart in back-off the kubelet's pod worker
// looks at the pod again only 10–15 s later (pod_workers.go's
// backOffPeriod, a constant) or at the pod's next update: the touch is
// that update, as any controller's change of the pod would be. It changes
// nothing else of the restart.
func kicker(c *harness.Cluster, ns, name string) func() {
	var last time.Time
	n := 0
	return func() {
		if time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		n++
		_, _ = c.Kubectl("annotate", "pod", "-n", ns, name, "--overwrite", fmt.Sprintf("gpurun.test/kick=%d", n))
	}
}

// runningContainer returns the id of the running container ctr of pod
// ns/name, from the node's CRI.
func runningContainer(c *harness.Cluster, ns, pod, ctr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Containerd.Runtime().ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod, "io.kubernetes.container.name": ctr},
	}})
	if err != nil {
		return "", err
	}
	if len(resp.Containers) != 1 {
		return "", fmt.Errorf("%d running containers %s of %s/%s", len(resp.Containers), ctr, ns, pod)
	}
	return resp.Containers[0].Id, nil
}

// killRunning SIGKILLs the running container ctr of pod ns/name, as the
// OOM killer or a node's watchdog would: its processes die with their
// files open, none of them cleans up.
func killRunning(t *testing.T, c *harness.Cluster, ns, pod, ctr string) {
	t.Helper()
	var id string
	if err := waitUntil(podTimeout, func() (bool, string) {
		var err error
		id, err = runningContainer(c, ns, pod, ctr)
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.KillContainer(c.Nodes[0], id, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// sweptTotal is the gpurun_shm_swept_bytes_total the DaemonSet ds's pod
// serves (0 before its first sweep).
func sweptTotal(t *testing.T, c *harness.Cluster, ds string) float64 {
	t.Helper()
	raw, mfs, err := scrapeAgent(t, c, agentPod(t, c, ds))
	if err != nil {
		t.Fatalf("metrics of %s: %v\n%s", ds, err, raw)
	}
	var sum float64
	for _, m := range mfs["gpurun_shm_swept_bytes_total"].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// testRestartSweep: a GPU pod whose container writes 700 MiB of segments
// into its 1 GiB /dev/shm and is SIGKILLed ten times: every instance,
// the first and each restart, starts with all of /dev/shm free, the pod
// gets a ShmSwept Event for each restart (one Event, counted), and the
// metrics of the door's DaemonSet ds count the bytes swept. runtimeClass
// is the pod's ("" for none); the door is whatever the section installed.
func (e *clusterEnv) testRestartSweep(t *testing.T, runtimeClass, ds string) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	before := sweptTotal(t, c, ds)
	start := time.Now()
	c.Apply(leakPod(ns, "leaky", runtimeClass, false))
	size := e.target(2*policy.GiB) / 1024
	for n := 1; n <= leakRestarts+1; n++ {
		s := waitLeakStart(t, c, ns, "leaky", n)
		if s.enospc || !s.ready || s.usedKiB != 0 || s.freeK < size-1024 || s.sizeKiB < size {
			_, log, _ := leakLog(c, ns, "leaky")
			t.Fatalf("start %d: %+v; want all of a %d KiB /dev/shm free\n%s\n--- gpurun's records ---\n%s", n, *s, size, log, e.gpurunLogs())
		}
		if n <= leakRestarts {
			killRunning(t, c, ns, "leaky", "trainer")
		}
	}
	t.Logf("%d restarts, each with all of /dev/shm free, in %s", leakRestarts, time.Since(start).Round(100*time.Millisecond))
	uid, err := c.Get(harness.Pod(ns, "leaky"), "{.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, c, ds, ns, uid, "ShmSwept")
	if err := waitUntil(observeTimeout, func() (bool, string) {
		found, _, err := findEvent(c, ns, uid, "ShmSwept")
		if found != nil {
			ev = *found
		}
		return ev.Count >= leakRestarts, fmt.Sprintf("count %d: %s (%v)", ev.Count, ev.Message, err)
	}); err != nil {
		t.Errorf("ShmSwept Event: %v", err)
	}
	if ev.Type != "Normal" || !strings.Contains(ev.Message, "removed 700MiB in 7 files that the earlier instance of container trainer left in /dev/shm: nccl-shm-") {
		t.Errorf("ShmSwept Event %+v", ev)
	}
	if ev.Count != leakRestarts {
		t.Errorf("ShmSwept counted %d times, want %d (one per restart)", ev.Count, leakRestarts)
	}
	want := before + float64(leakRestarts*leakMiB*policy.MiB)
	if err := waitUntil(observeTimeout, func() (bool, string) {
		got := sweptTotal(t, c, ds)
		return got >= want, fmt.Sprintf("gpurun_shm_swept_bytes_total %v, want %v", got, want)
	}); err != nil {
		t.Error(err)
	}
	t.Logf("ShmSwept Event counted %d: %s", ev.Count, ev.Message)
	if ds == "gpurun-node" {
		e.checkStatsSwept(t, ns, leakRestarts*leakMiB*policy.MiB)
	}
}

// checkStatsSwept: gpurun stats, run where the node agent runs, shows
// what the sweeps removed from the pod's /dev/shm.
func (e *clusterEnv) checkStatsSwept(t *testing.T, ns string, want int64) {
	c := e.c.For(t)
	agent := agentPod(t, c, "gpurun-node")
	out, err := c.Exec("gpurun-system", agent, "", "gpurun", "stats", "--json", "--host-root=/host", "--containerd-state="+c.Containerd.StateDir, "--namespace="+ns, "--pod=leaky")
	if err != nil {
		t.Fatalf("gpurun stats --json: %v\n%s", err, out)
	}
	var cs []struct {
		Name string
		Shm  struct {
			SweptBytes int64 `json:"swept_bytes"`
			SweptFiles int64 `json:"swept_files"`
		}
	}
	if err := json.Unmarshal([]byte(out), &cs); err != nil || len(cs) == 0 {
		t.Fatalf("gpurun stats --json: %v\n%s", err, out)
	}
	for _, ct := range cs {
		if ct.Shm.SweptBytes != want || ct.Shm.SweptFiles != int64(leakRestarts*leakSegments) {
			t.Errorf("gpurun stats: container %s of the pod shows %d bytes in %d files swept, want %d in %d", ct.Name, ct.Shm.SweptBytes, ct.Shm.SweptFiles, want, leakRestarts*leakSegments)
		}
	}
}

// testCrashloopWithoutGpurun proves the failure real: the same pod with a
// 1 GiB Memory emptyDir of its own at /dev/shm and no gpurun door (no
// RuntimeClass, on a node where gpurun is only a RuntimeClass) finds its
// earlier instance's 700 MiB at its first restart and dies of ENOSPC.
func (e *clusterEnv) testCrashloopWithoutGpurun(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	c.Apply(leakPod(ns, "leaky", "", true))
	if s := waitLeakStart(t, c, ns, "leaky", 1); !s.ready || s.usedKiB != 0 {
		t.Fatalf("first start: %+v", *s)
	}
	killRunning(t, c, ns, "leaky", "trainer")
	s := waitLeakStart(t, c, ns, "leaky", 2)
	if !s.enospc || s.usedKiB < leakMiB*1024 {
		_, log, _ := leakLog(c, ns, "leaky")
		t.Fatalf("without gpurun the restart found %+v; want the earlier instance's %d MiB and ENOSPC\n%s", *s, leakMiB, log)
	}
	t.Logf("without gpurun: the restart found %d KiB used, %d KiB free, and died of ENOSPC", s.usedKiB, s.freeK)
}

// keeperPod: an init container leaves a file in /dev/shm for the main
// container, which opens it at each start, writes 60 MiB of its own and
// waits; a sibling container, once the first instance has started, writes
// a file it closes (for later use) and one it keeps open.
func keeperPod(ns, runtimeClass string) string {
	gpuKey, gpuVal, _ := strings.Cut(gpuEnv, "=")
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: keeper, namespace: %[1]s}
spec:
  terminationGracePeriodSeconds: 1
  runtimeClassName: %[2]s
  volumes: [{name: log, emptyDir: {}}]
  initContainers:
  - name: init
    image: %[3]s
    imagePullPolicy: Never
    command: [sh, -c, "dd if=/dev/zero of=/dev/shm/init-file bs=1M count=10 2>/dev/null"]
  containers:
  - name: trainer
    image: %[3]s
    imagePullPolicy: Never
    env: [{name: %[4]s, value: %[5]q}]
    resources: {limits: {memory: 2Gi}}
    volumeMounts: [{name: log, mountPath: /log}]
    command: [sh, -c]
    args:
    - |
      n=$(( $(cat /log/starts 2>/dev/null || echo 0) + 1 )); echo $n > /log/starts
      cat /dev/shm/init-file > /dev/null && echo "opened init-file $n" >> /log/trainer
      echo "start $n: $(ls /dev/shm | tr '\n' ' ')" >> /log/trainer
      touch /log/trainer-started-$n
      i=0
      while [ $i -lt 3 ]; do dd if=/dev/zero of=/dev/shm/own-$n-$i bs=1M count=20 2>/dev/null; i=$((i+1)); done
      echo "ready $n" >> /log/trainer
      exec sleep 2147483647
  - name: sibling
    image: %[3]s
    imagePullPolicy: Never
    resources: {limits: {memory: 256Mi}}
    volumeMounts: [{name: log, mountPath: /log}]
    command: [sh, -c]
    args:
    - |
      while [ ! -e /log/trainer-started-1 ]; do sleep 1; done
      dd if=/dev/zero of=/dev/shm/sib-closed bs=1M count=10 2>/dev/null
      dd if=/dev/zero of=/dev/shm/sib-live bs=1M count=10 2>/dev/null
      touch /log/sibling-wrote
      exec sleep 2147483647 < /dev/shm/sib-live
`, ns, runtimeClass, harness.BusyboxRef, gpuKey, gpuVal)
}

// testNeverRemoved: what the sweep must never take. At the main
// container's first start the init container's file is there and stays;
// at each restart the init container's file (which the container opens
// again), the sibling's closed file (its pages charged to the live
// sibling's memory cgroup) and its open one survive, and only the
// container's own earlier segments go. The ShmSwept Event says what was
// kept.
func (e *clusterEnv) testNeverRemoved(t *testing.T, runtimeClass, ds string) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	c.Apply(keeperPod(ns, runtimeClass))
	shm := func() []string {
		out, err := c.Exec(ns, "keeper", "sibling", "ls", "/dev/shm")
		if err != nil {
			t.Fatalf("ls /dev/shm: %v\n%s", err, out)
		}
		return strings.Fields(out)
	}
	waitReady := func(n int) {
		t.Helper()
		kick := kicker(c, ns, "keeper")
		if err := waitUntil(podTimeout, func() (bool, string) {
			kick()
			out, err := c.Exec(ns, "keeper", "sibling", "cat", "/log/trainer")
			ok := err == nil && strings.Contains(out, fmt.Sprintf("ready %d\n", n)) && strings.Contains(out, fmt.Sprintf("opened init-file %d\n", n))
			if n == 1 {
				_, serr := c.Exec(ns, "keeper", "sibling", "test", "-e", "/log/sibling-wrote")
				ok = ok && serr == nil
			}
			return ok, out
		}); err != nil {
			t.Fatalf("start %d: %v\n%s", n, err, c.Dump(harness.Pod(ns, "keeper")))
		}
	}
	waitReady(1)
	for n := 2; n <= 3; n++ {
		killRunning(t, c, ns, "keeper", "trainer")
		waitReady(n)
		got := shm()
		want := []string{"init-file", fmt.Sprintf("own-%d-0", n), fmt.Sprintf("own-%d-1", n), fmt.Sprintf("own-%d-2", n), "sib-closed", "sib-live"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			log, _ := c.Exec(ns, "keeper", "sibling", "cat", "/log/trainer")
			t.Errorf("after restart %d /dev/shm holds %q, want %q\n%s\n--- gpurun's records ---\n%s", n-1, got, want, log, e.gpurunLogs())
		}
	}
	uid, err := c.Get(harness.Pod(ns, "keeper"), "{.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, c, ds, ns, uid, "ShmSwept"); !strings.Contains(ev.Message, "removed 60MiB in 3 files") {
		t.Errorf("ShmSwept Event: %q; want 60MiB in 3 files removed", ev.Message)
	}
	// The first restart's record: the sibling's two files were candidates
	// (written after the first instance started) and were kept, the open
	// one as held, the closed one as the live sibling's.
	data, err := c.ReadNodeFile("/var/log/gpurun.log")
	if err != nil {
		t.Fatal(err)
	}
	records := string(data)
	first := regexp.MustCompile(`"k8s_pod":"keeper".*"swept_files":3,.*"kept_files":2,"kept_why":\{"held":1,"sibling":1\}`)
	if !first.MatchString(records) {
		t.Errorf("no record of the first restart keeping the sibling's open file (held) and its closed one (sibling):\n%s", grepLines(records, `"keeper"`))
	}
}

// testOOMShare: a GPU container with a 512Mi limit (the policy's /dev/shm:
// its memory_reserve ceiling, 384MiB) fills 300 MiB of /dev/shm, holds it
// over a sample of the door's metrics — which show /dev/shm against the
// limit — and then allocates until the kernel OOM-kills it: the pod gets a
// ShmOOMKilled Event saying how much of its limit /dev/shm held.
func (e *clusterEnv) testOOMShare(t *testing.T, runtimeClass, ds string) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	gpuKey, gpuVal, _ := strings.Cut(gpuEnv, "=")
	c.Apply(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: oom, namespace: %[1]s}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  runtimeClassName: %[2]s
  containers:
  - name: trainer
    image: %[3]s
    imagePullPolicy: Never
    env: [{name: %[4]s, value: %[5]q}]
    resources: {limits: {memory: 512Mi}}
    command: [sh, -c]
    args:
    - |
      dd if=/dev/zero of=/dev/shm/torch_1 bs=1M count=300 2>/dev/null
      while [ ! -e /dev/shm/go ]; do sleep 1; done
      exec tail /dev/zero
`, ns, runtimeClass, harness.BusyboxRef, gpuKey, gpuVal))
	c.WaitPodReady(ns, "oom", podTimeout)
	agent := agentPod(t, c, ds)
	var raw string
	if err := waitUntil(observeTimeout, func() (bool, string) {
		var mfs map[string]*dto.MetricFamily
		var err error
		raw, mfs, err = scrapeAgent(t, c, agent)
		if err != nil {
			return false, err.Error()
		}
		limit, ok1 := seriesWith(mfs, "gpurun_memory_limit_bytes", map[string]string{"pod": "oom"})
		used, ok2 := seriesWith(mfs, "gpurun_shm_used_bytes", map[string]string{"pod": "oom"})
		return ok1 && ok2 && limit == 512*float64(policy.MiB) && used >= 300*float64(policy.MiB), grepLines(raw, `pod="oom"`)
	}); err != nil {
		t.Fatalf("the memory limit and /dev/shm in %s's metrics: %v", ds, err)
	}
	stats, err := c.Exec("gpurun-system", agent, "", "gpurun", "stats", "--host-root=/host", "--containerd-state="+c.Containerd.StateDir, "--namespace="+ns)
	t.Logf("gpurun stats in %s (%v):\n%s", agent, err, grepLines(stats, "oom"))
	if !regexp.MustCompile(`/oom/trainer .* 512MiB +5[89]% `).MatchString(grepLines(stats, "oom")) {
		t.Errorf("gpurun stats does not show /dev/shm's share of the 512MiB limit:\n%s", stats)
	}
	c.MustKubectl("exec", "-n", ns, "oom", "--", "touch", "/dev/shm/go")
	c.WaitPodPhase(ns, "oom", "Failed", podTimeout)
	uid, err := c.Get(harness.Pod(ns, "oom"), "{.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, c, ds, ns, uid, "ShmOOMKilled")
	if ok, _ := regexp.MatchString(`^container trainer was OOM-killed with 300MiB of its 512MiB memory limit in /dev/shm \(at the last sample, \d+s before\)$`, ev.Message); !ok || ev.Type != "Warning" {
		t.Errorf("ShmOOMKilled Event %+v", ev)
	}
}
