//go:build integration

package integration

// What the node agent shows of the pods' /dev/shm on the real test cluster
// (docs/observe.md): its metrics, scraped through the API server's pod
// proxy and parsed with the Prometheus text parser, the Events it posts on
// the pods, and what sampling costs the agent, read from its container's
// cgroup.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// observeTimeout bounds the wait for the agent's next sample (its shipped
// --metrics-interval is 15s) and for an Event to be posted.
const observeTimeout = 90 * time.Second

// fillMiB is what the test's GPU Job writes to /dev/shm.
const fillMiB = 300

// testObserve: under the runtime-class overlay, a GPU Job that writes 300
// MiB to /dev/shm is in the agent's metrics with its namespace, pod, uid
// and container labels: used 300 MiB (to the page), size the policy's, a
// peak at least that; the pod has a ShmSized Event naming the size; the
// agent's CPU and memory over the test's window stay within its limits.
func (e *clusterEnv) testObserve(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	agent := agentPod(t, c, "gpurun-node")
	cg := cgroupOf(t, c, "gpurun-system", agent)
	before := cg.read(t)
	start := time.Now()

	c.Apply(fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: fill, namespace: %s}
spec:
  backoffLimit: 0
  template:
    spec:
      runtimeClassName: gpurun
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: trainer
        image: %s
        imagePullPolicy: Never
        command: ["sh", "-c", %q]
        env: [{name: %s, value: %q}]
`, ns, harness.BusyboxRef, writeMiB("fill", fillMiB)+" && touch /tmp/written && exec sleep 2147483647",
		strings.Split(gpuEnv, "=")[0], strings.SplitN(gpuEnv, "=", 2)[1]))
	pod := jobPod(t, c, ns, "fill")
	c.WaitPodReady(ns, pod, podTimeout)
	if err := waitUntil(podTimeout, func() (bool, string) {
		out, err := c.Exec(ns, pod, "trainer", "ls", "/tmp/written")
		return err == nil, out
	}); err != nil {
		t.Fatalf("pod %s did not write its %d MiB: %v", pod, fillMiB, err)
	}
	uid, err := c.Get(harness.Pod(ns, pod), "{.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	want := e.target(0)
	labels := map[string]string{"namespace": ns, "pod": pod, "uid": uid, "container": "trainer", "engine": "containerd"}

	// The metrics, as Prometheus would get them from the pod's port.
	var raw string
	var mfs map[string]*dto.MetricFamily
	if err := waitUntil(observeTimeout, func() (bool, string) {
		if raw, mfs, err = scrapeAgent(t, c, agent); err != nil {
			return false, raw
		}
		used, ok := seriesWith(mfs, "gpurun_shm_used_bytes", labels)
		return ok && int64(used) >= fillMiB*policy.MiB-page, fmt.Sprintf("used %v (seen %v)", used, ok)
	}); err != nil {
		logs, _ := c.Kubectl("logs", "-n", "gpurun-system", agent, "--tail=30")
		t.Fatalf("pod %s/%s in the agent's metrics: %v\n%s\n--- agent log ---\n%s", ns, pod, err, grepLines(raw, "gpurun_shm_"), logs)
	}
	t.Logf("scraped from %s:\n%s", agent, grepLines(raw, `pod="`+pod+`"`))
	for name, check := range map[string]func(v float64) bool{
		"gpurun_shm_used_bytes": func(v float64) bool { return near(int64(v), fillMiB*policy.MiB) },
		"gpurun_shm_peak_bytes": func(v float64) bool { return int64(v) >= fillMiB*policy.MiB-page },
		"gpurun_shm_size_bytes": func(v float64) bool { return int64(v) == want },
	} {
		if v, ok := seriesWith(mfs, name, labels); !ok || !check(v) {
			t.Errorf("%s of %s/%s: %v (present %v); wrote %d MiB, the policy's size %s", name, ns, pod, v, ok, fillMiB, policy.FormatSize(want))
		}
	}
	// The plan is what gpurun-runtime did for the pod (grow the sandbox's
	// 64 MiB tmpfs), and it is in effect — not "already 11.77GiB".
	plan := map[string]string{"action": "remount", "gpu": "true", "in_effect": "true"}
	for k, v := range labels {
		plan[k] = v
	}
	if v, ok := seriesWith(mfs, "gpurun_shm_plan_info", plan); !ok || v != 1 {
		t.Errorf("gpurun_shm_plan_info of %s/%s with %v: %v (present %v); served:\n%s", ns, pod, plan, v, ok, grepLines(raw, "gpurun_shm_plan_info"))
	}

	// The Event on the pod, as its owner sees it.
	ev := waitEvent(t, c, "gpurun-node", ns, uid, "ShmSized")
	if !strings.Contains(ev.Message, policy.FormatSize(want)) || ev.Type != "Normal" || ev.Source.Component != "gpurun" {
		t.Errorf("ShmSized Event on %s: %+v; want type Normal, source gpurun, the size %s in the message", pod, ev, policy.FormatSize(want))
	}
	if out, err := c.Kubectl("describe", "pod", "-n", ns, pod); err == nil {
		t.Logf("kubectl describe pod %s (Events):\n%s", pod, out[strings.LastIndex(out, "Events:"):])
	}
	if out, err := c.Kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name="+pod); err == nil {
		t.Logf("kubectl get events:\n%s", out)
	}

	// What the agent cost while it sampled: the window spans at least two
	// more of its samples.
	samples := func(mfs map[string]*dto.MetricFamily) float64 {
		v := 0.0
		for _, m := range mfs["gpurun_shm_samples_total"].GetMetric() {
			v += m.GetCounter().GetValue()
		}
		return v
	}
	first := samples(mfs)
	if err := waitUntil(observeTimeout, func() (bool, string) {
		raw, mfs, err := scrapeAgent(t, c, agent)
		if err != nil {
			return false, raw
		}
		n := samples(mfs)
		return n >= first+2, fmt.Sprintf("%v samples, %v at first", n, first)
	}); err != nil {
		t.Fatalf("the agent's samples: %v", err)
	}
	after := cg.read(t)
	window := time.Since(start)
	cpu := float64(after.cpuUsec-before.cpuUsec) / float64(window.Microseconds())
	t.Logf("agent %s over %s: %.2f%% of a core (cgroup CPU time %d µs), memory %s now, %s at most, limit %s",
		agent, window.Round(time.Second), 100*cpu, after.cpuUsec-before.cpuUsec,
		policy.FormatSize(after.memCurrent), policy.FormatSize(after.memPeak), policy.FormatSize(after.memMax))
	if after.memMax <= 0 {
		t.Errorf("the agent's container has no memory limit")
	} else if after.memPeak >= after.memMax || after.memCurrent >= after.memMax {
		t.Errorf("the agent reached its memory limit: %d (peak %d) of %d bytes", after.memCurrent, after.memPeak, after.memMax)
	}
	// The budget is 1 % of a core for sampling 200 containers; the
	// readiness probe's exec of gpurun node status every 10s runs in the
	// same cgroup and counts here too.
	if cpu > 0.05 {
		t.Errorf("the agent used %.2f%% of a core over %s", 100*cpu, window.Round(time.Second))
	}
}

// jobPod waits for the one pod of Job ns/job and returns its name.
func jobPod(t *testing.T, c *harness.Cluster, ns, job string) string {
	t.Helper()
	var pod string
	if err := waitUntil(podTimeout, func() (bool, string) {
		out, err := c.Kubectl("get", "pods", "-n", ns, "-l", "job-name="+job, "-o", "jsonpath={.items[*].metadata.name}")
		f := strings.Fields(out)
		if err == nil && len(f) == 1 {
			pod = f[0]
		}
		return pod != "", out
	}); err != nil {
		t.Fatalf("the pod of Job %s/%s: %v", ns, job, err)
	}
	return pod
}

// scrapeAgent gets the node agent's metrics as Prometheus would, from the
// agent pod's port through the API server's pod proxy, and parses them; it
// returns the exposition text too.
func scrapeAgent(t *testing.T, c *harness.Cluster, agent string) (string, map[string]*dto.MetricFamily, error) {
	t.Helper()
	raw, err := c.Kubectl("get", "--raw", "/api/v1/namespaces/gpurun-system/pods/"+agent+":9469/proxy/metrics")
	if err != nil {
		return raw, nil, err
	}
	return raw, parseExposition(t, strings.NewReader(raw)), nil
}

// seriesWith returns the value of name's series whose labels include all
// of want.
func seriesWith(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if match {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// grepLines returns s's lines that contain sub and are not comments.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// event is what the tests read of a core/v1 Event.
type event struct {
	Reason, Message, Type string
	Count                 int
	InvolvedObject        struct{ UID, Name string }
	Source                struct{ Component, Host string }
}

// waitEvent waits for the Event reason on the pod of uid in ns; when none
// comes it fails the test with the log of DaemonSet ds (the poster).
func waitEvent(t *testing.T, c *harness.Cluster, ds, ns, uid, reason string) event {
	t.Helper()
	var found *event
	var last string
	if err := waitUntil(observeTimeout, func() (bool, string) {
		var err error
		found, last, err = findEvent(c, ns, uid, reason)
		return found != nil, fmt.Sprint(err)
	}); err != nil {
		logs, _ := c.Kubectl("logs", "-n", "gpurun-system", "daemonset/"+ds, "--tail=30")
		t.Fatalf("%s Event on pod uid %s: %v\n%s\n--- %s log ---\n%s", reason, uid, err, last, ds, logs)
	}
	return *found
}

// findEvent returns the Event reason on the pod of uid in ns, nil when
// there is none (yet), and the events' JSON it looked in.
func findEvent(c *harness.Cluster, ns, uid, reason string) (*event, string, error) {
	out, err := c.Kubectl("get", "events", "-n", ns, "-o", "json")
	if err != nil {
		return nil, out, err
	}
	var list struct{ Items []event }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, out, err
	}
	for i, ev := range list.Items {
		if ev.Reason == reason && ev.InvolvedObject.UID == uid {
			return &list.Items[i], out, nil
		}
	}
	return nil, out, fmt.Errorf("none of %d events", len(list.Items))
}

// cgroupUse is a container cgroup's CPU time and memory.
type cgroupUse struct {
	cpuUsec                     int64
	memCurrent, memPeak, memMax int64 // memMax -1: no limit
}

// containerCgroup describes where a container's cgroup files are on this
// host: the files of each controller (cgroup v1) or of the unified
// hierarchy (v2).
type containerCgroup struct {
	v2       string // the v2 directory; "" on v1
	cpu, mem string // v1: the cpuacct and memory directories
}

// cgroupOf returns the cgroup of the first container of pod ns/name, from
// its init process's /proc/<pid>/cgroup.
func cgroupOf(t *testing.T, c *harness.Cluster, ns, name string) containerCgroup {
	t.Helper()
	id, err := c.Get(harness.Pod(ns, name), "{.status.containerStatuses[0].containerID}")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimPrefix(id, "containerd://")
	pid, err := c.ReadNodeFile(filepath.Join(c.Containerd.StateDir, "io.containerd.runtime.v2.task", "k8s.io", id, "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	return cgroupOfPid(t, strings.TrimSpace(string(pid)))
}

// cgroupOfPid returns the cgroup of process pid (of this host's PID
// namespace), from /proc/<pid>/cgroup.
func cgroupOfPid(t *testing.T, pid string) containerCgroup {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			t.Fatalf("/proc/%s/cgroup: line %q", pid, l)
		}
		for _, ctl := range strings.Split(f[1], ",") {
			paths[ctl] = f[2]
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		return containerCgroup{cpu: filepath.Join("/sys/fs/cgroup/cpuacct", paths["cpuacct"]),
			mem: filepath.Join("/sys/fs/cgroup/memory", paths["memory"])}
	}
	return containerCgroup{v2: filepath.Join("/sys/fs/cgroup", paths[""])}
}

// read reads the cgroup's CPU time and memory.
func (cg containerCgroup) read(t *testing.T) cgroupUse {
	t.Helper()
	num := func(dir, file string) int64 {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(data))
		if s == "max" {
			return -1
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s/%s: %v", dir, file, err)
		}
		return n
	}
	if cg.v2 == "" {
		u := cgroupUse{cpuUsec: num(cg.cpu, "cpuacct.usage") / 1000, memCurrent: num(cg.mem, "memory.usage_in_bytes"),
			memPeak: num(cg.mem, "memory.max_usage_in_bytes"), memMax: num(cg.mem, "memory.limit_in_bytes")}
		if u.memMax >= 1<<62 { // v1's "no limit"
			u.memMax = -1
		}
		return u
	}
	u := cgroupUse{memCurrent: num(cg.v2, "memory.current"), memMax: num(cg.v2, "memory.max")}
	if _, err := os.Stat(filepath.Join(cg.v2, "memory.peak")); err == nil {
		u.memPeak = num(cg.v2, "memory.peak")
	}
	stat, err := os.ReadFile(filepath.Join(cg.v2, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			if u.cpuUsec, err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatalf("%s/cpu.stat: %v", cg.v2, err)
			}
		}
	}
	return u
}
