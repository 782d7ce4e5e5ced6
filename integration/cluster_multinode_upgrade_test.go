//go:build integration

package integration

// The chart's rollouts on the mixed cluster between the previous release
// (harness.RequirePrevious: a pinned earlier commit built as image and
// chart) and this build, measured (docs/upgrading.md).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// prevImageTag tags the previous release's image (agentImageName:prevImageTag).
const prevImageTag = "prev"

// apiURL is the API server as APIClient reaches it.
const apiURL = "https://127.0.0.1:6443"

// apiGet decodes the JSON the API server answers a GET of path with.
func apiGet(client *http.Client, path string, out any) error {
	resp, err := client.Get(apiURL + path)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	if s, ok := out.(*string); ok {
		*s = string(body)
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// apiCreate creates an object (JSON) with a POST to path.
func apiCreate(client *http.Client, path string, obj any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	resp, err := client.Post(apiURL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, msg)
	}
	return nil
}

// podList is the little of a pod list the rollout reads.
type podList struct {
	Items []struct {
		Metadata struct {
			Name, UID         string
			CreationTimestamp time.Time  `json:"creationTimestamp"`
			DeletionTimestamp *time.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
		Status struct {
			Phase             string `json:"phase"`
			Reason            string `json:"reason"`
			Conditions        []struct{ Type, Status string }
			ContainerStatuses []struct {
				Ready        bool
				RestartCount int
				ContainerID  string `json:"containerID"`
				State        struct {
					Waiting    *struct{ Reason, Message string } `json:"waiting"`
					Terminated *struct {
						ExitCode int    `json:"exitCode"`
						Reason   string `json:"reason"`
						Message  string `json:"message"`
					} `json:"terminated"`
				} `json:"state"`
			} `json:"containerStatuses"`
		} `json:"status"`
	} `json:"items"`
}

// ready reports whether a pod of the list is Ready.
func podReady(conds []struct{ Type, Status string }) bool {
	for _, c := range conds {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// envGPUPod is a GPU pod of the rollouts: GPU evidence as NVIDIA's device
// plugin's envvar strategy gives it (the node's GPUs are not asked for:
// the pods outnumber them), memory limit 8 GiB (a request of 64 MiB: the
// node admits them all), the RuntimeClass, bound to a node. With cmd it
// runs cmd once; without, it sleeps.
func envGPUPod(name, node string, labels map[string]string, cmd ...string) map[string]any {
	k, v, _ := strings.Cut(gpuEnv, "=")
	restart := "Never"
	if len(cmd) == 0 {
		cmd, restart = []string{"sleep", "2147483647"}, "Always"
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": labels},
		"spec": map[string]any{
			"nodeName": node, "runtimeClassName": "gpurun", "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
			"containers": []map[string]any{{
				"name": "app", "image": harness.BusyboxRef, "imagePullPolicy": "Never",
				"command": cmd,
				"env":     []map[string]string{{"name": k, "value": v}},
				"resources": map[string]any{
					"limits":   map[string]string{"memory": "8Gi"},
					"requests": map[string]string{"memory": "64Mi"},
				},
			}},
		},
	}
}

// statShm is the command of a pod that writes its /dev/shm's size (block
// size, blocks) into its termination message and ends.
var statShm = []string{"sh", "-c", "stat -f -c '%S %b' /dev/shm > /dev/termination-log"}

// probePod is a GPU pod created during a rollout (envGPUPod) that runs
// statShm.
func probePod(name, node, phase string) map[string]any {
	return envGPUPod(name, node, map[string]string{"gpurun.test/rollout": phase}, statShm...)
}

// shmProbe is a pod that runs statShm on a node: a GPU pod (one
// nvidia.com/gpu from the node's fake device plugin, memory limit 8 GiB)
// or a plain one (memory limit 1 GiB), with runtimeClassName class when
// set.
type shmProbe struct {
	name, node, class string
	gpu               bool
	// want is the /dev/shm it must see.
	want int64
}

// checkShmProbes creates the probes in ns, waits until each has ended, and
// fails the test for each that did not see its size: every check in one
// list of the pods, no exec.
func checkShmProbes(t *testing.T, c *harness.Cluster, ns string, probes []shmProbe) {
	t.Helper()
	client := c.APIClient()
	for _, p := range probes {
		limits := map[string]any{"memory": "1Gi"}
		if p.gpu {
			limits = map[string]any{"memory": "8Gi", harness.GPUResource: 1}
		}
		spec := map[string]any{
			"nodeName": p.node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
			"containers": []map[string]any{{
				"name": "app", "image": harness.BusyboxRef, "imagePullPolicy": "Never", "command": statShm,
				"resources": map[string]any{"limits": limits},
			}},
		}
		if p.class != "" {
			spec["runtimeClassName"] = p.class
		}
		pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": p.name, "labels": map[string]string{"gpurun.test/probe": "shm"}}, "spec": spec}
		if err := apiCreate(client, "/api/v1/namespaces/"+ns+"/pods", pod); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	if err := waitUntil(podTimeout, func() (bool, string) {
		var pods podList
		if err := apiGet(client, "/api/v1/namespaces/"+ns+"/pods?labelSelector=gpurun.test%2Fprobe%3Dshm", &pods); err != nil {
			return false, err.Error()
		}
		var pending []string
		for _, p := range pods.Items {
			what := ""
			if len(p.Status.ContainerStatuses) == 1 {
				if st := p.Status.ContainerStatuses[0].State.Terminated; st != nil && st.ExitCode == 0 {
					what = shmOfMessage(st.Message)
				} else if st != nil {
					what = fmt.Sprintf("exit %d (%s): %s", st.ExitCode, st.Reason, st.Message)
				}
			}
			if p.Status.Phase == "Failed" && what == "" {
				what = "failed: " + p.Status.Reason
			}
			if what == "" {
				pending = append(pending, p.Metadata.Name+" "+p.Status.Phase)
				continue
			}
			got[p.Metadata.Name] = what
		}
		return len(pending) == 0 && len(got) == len(probes), strings.Join(pending, ", ")
	}); err != nil {
		t.Fatalf("pods that report their /dev/shm: %v\n%s", err, c.PodsDump(ns))
	}
	for _, p := range probes {
		if got[p.name] != policy.FormatSize(p.want) {
			n := c.Node(p.node)
			t.Errorf("node %s (%s), pod %s (GPU: %v, RuntimeClass %q): /dev/shm %s, want %s", n.Name, n.Kind, p.name, p.gpu, p.class, got[p.name], policy.FormatSize(p.want))
		}
	}
}

// rolloutResult is what a rollout of the node agent measured.
type rolloutResult struct {
	took time.Duration
	// restarts are containerd's restarts per node during the rollout;
	// changed says the node's containerd config (k3s: templates and
	// generated config) differs after it.
	restarts map[string]int
	changed  map[string]bool
	// asked are the nodes whose new agent asked for a restart (the test,
	// as the administrator, then restarted containerd there); refused
	// those where it refused to install, saying to restart containerd and
	// install again (which the administrator did): the refusal.
	asked   map[string]int
	refused map[string]string
	// answers says what the administrator did, when, and why.
	answers []string
	// probes is how many GPU pods were created during the rollout;
	// unsized lists those that did not get the policy's size.
	probes  int
	unsized []unsizedPod
}

// unsizedPod is a GPU pod created during a rollout without the policy's
// size: its node, and what it got.
type unsizedPod struct{ node, what string }

// rollout runs `helm upgrade` to chart with values and measures it until
// the node agent's DaemonSet has rolled out on every GPU node: how long it
// took, the containerd restarts of each node, and what GPU pods created
// meanwhile (one about every second, round the GPU nodes) got. With the
// shipped restart=none, the test restarts a node's containerd (as the
// administrator would) only when the new agent there says containerd has
// not read the new configuration.
func (e *multiEnv) rollout(t *testing.T, phase, helm, chart, values, postRenderer string, want int64) rolloutResult {
	t.Helper()
	c := e.c.For(t)
	client := c.APIClient()
	ns := testNamespace(t, c)
	var gpuNodes []*harness.ClusterNode
	for _, n := range c.Nodes {
		if n.GPUs > 0 {
			gpuNodes = append(gpuNodes, n)
		}
	}
	before := map[string]nodeSnapshot{}
	for _, n := range c.Nodes {
		before[n.Name] = snapshotNode(n)
	}
	oldAgents := map[string]bool{}
	for _, a := range agentsByNode(t, c) {
		oldAgents[a.UID] = true
	}
	res := rolloutResult{restarts: map[string]int{}, changed: map[string]bool{}, asked: map[string]int{}, refused: map[string]string{}}
	start := time.Now()
	if out, err := c.Helm(helm, "upgrade", "gpurun", chart, "--namespace", "gpurun-system", "--values", values, "--post-renderer", postRenderer); err != nil {
		t.Fatalf("helm upgrade (%s): %v\n%s", phase, err, out)
	}
	// GPU pods created while the agents roll, by a worker of its own.
	stop := make(chan struct{})
	var created sync.WaitGroup
	created.Add(1)
	var createErrs []string
	go func() {
		defer created.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			n := gpuNodes[i%len(gpuNodes)]
			if err := apiCreate(client, "/api/v1/namespaces/"+ns+"/pods", probePod(fmt.Sprintf("%s-%03d-%s", phase, i, n.Name), n.Name, phase)); err != nil {
				createErrs = append(createErrs, err.Error())
			} else {
				res.probes++
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	answered := map[string]bool{} // new agents' requests answered, by pod uid and request
	done := false
	var last string
	for deadline := time.Now().Add(agentTimeout); !done; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(stop)
			created.Wait()
			t.Fatalf("%s: the node agent did not roll out within %s: %s\n%s", phase, agentTimeout, last, c.PodsDump("gpurun-system"))
		}
		var pods podList
		if err := apiGet(client, "/api/v1/namespaces/gpurun-system/pods?labelSelector=app.kubernetes.io%2Fname%3Dgpurun-node", &pods); err != nil {
			last = err.Error()
			continue
		}
		onNode := map[string]bool{}
		var waiting []string
		for _, p := range pods.Items {
			if oldAgents[p.Metadata.UID] || p.Metadata.DeletionTimestamp != nil {
				waiting = append(waiting, p.Spec.NodeName+": an agent going away")
				continue
			}
			if p.Spec.NodeName == "" { // the scheduler places DaemonSet pods too
				waiting = append(waiting, p.Metadata.Name+": not scheduled yet")
				continue
			}
			if !podReady(p.Status.Conditions) {
				waiting = append(waiting, p.Spec.NodeName+": not ready")
				// The administrator's part: restart containerd where the
				// new agent says it has not read the configuration, or
				// where it refuses to install until containerd restarts
				// (the kubelet then starts it again).
				logs := agentLogs(client, p.Metadata.Name)
				node := c.Node(p.Spec.NodeName)
				switch refusal := lineWith(logs, "then install again"); {
				case refusal != "" && !answered[p.Metadata.UID+" refused"]:
					answered[p.Metadata.UID+" refused"] = true
					res.refused[node.Name] = refusal
					res.asked[node.Name]++
					res.answers = append(res.answers, fmt.Sprintf("%s after helm upgrade: %s refused: restarted containerd", time.Since(start).Round(100*time.Millisecond), p.Metadata.Name))
					c.NodeContainerd(node).Restart() // the kubelet starts the agent again
				case strings.Contains(logs, "has not read the new configuration") && !answered[p.Metadata.UID+" restart"]:
					answered[p.Metadata.UID+" restart"] = true
					res.asked[node.Name]++
					res.answers = append(res.answers, fmt.Sprintf("%s after helm upgrade: %s asked for a restart: restarted containerd", time.Since(start).Round(100*time.Millisecond), p.Metadata.Name))
					c.NodeContainerd(node).Restart()
				}
				continue
			}
			onNode[p.Spec.NodeName] = true
		}
		done = len(waiting) == 0
		for _, n := range gpuNodes {
			if !onNode[n.Name] {
				done = false
			}
		}
		last = strings.Join(waiting, "; ")
	}
	res.took = time.Since(start)
	close(stop)
	created.Wait()
	for _, e := range createErrs {
		t.Errorf("%s: creating a GPU pod during the rollout: %s", phase, e)
	}
	for _, n := range c.Nodes {
		now := snapshotNode(n)
		res.restarts[n.Name] = now.restarts - before[n.Name].restarts
		for p, was := range before[n.Name].files {
			if (p == "/etc/containerd/config.toml" || strings.Contains(p, "/agent/etc/containerd/")) && !bytes.Equal(now.files[p], was) {
				res.changed[n.Name] = true
			}
		}
	}
	// What the GPU pods created during the rollout got.
	var probes podList
	if err := waitUntil(podTimeout, func() (bool, string) {
		probes = podList{}
		if err := apiGet(client, "/api/v1/namespaces/"+ns+"/pods?labelSelector=gpurun.test%2Frollout%3D"+phase, &probes); err != nil {
			return false, err.Error()
		}
		var pending []string
		for _, p := range probes.Items {
			if p.Status.Phase != "Succeeded" && p.Status.Phase != "Failed" {
				pending = append(pending, p.Metadata.Name+" "+p.Status.Phase)
			}
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	}); err != nil {
		t.Errorf("%s: GPU pods created during the rollout did not end: %v", phase, err)
	}
	for _, p := range probes.Items {
		got := "not ended: " + p.Status.Phase
		if len(p.Status.ContainerStatuses) == 1 {
			st := p.Status.ContainerStatuses[0].State
			switch {
			case st.Terminated != nil && st.Terminated.ExitCode == 0:
				got = shmOfMessage(st.Terminated.Message)
			case st.Terminated != nil:
				got = fmt.Sprintf("exit %d (%s): %s", st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.Message)
			case st.Waiting != nil:
				got = st.Waiting.Reason + ": " + st.Waiting.Message
			}
		}
		if got != policy.FormatSize(want) {
			res.unsized = append(res.unsized, unsizedPod{p.Spec.NodeName, fmt.Sprintf("%s (created %s after helm upgrade): %s", p.Metadata.Name, p.Metadata.CreationTimestamp.Sub(start.Truncate(time.Second)).Round(time.Second), got)})
		}
	}
	sort.Slice(res.unsized, func(i, j int) bool { return res.unsized[i].what < res.unsized[j].what })
	return res
}

// agentLogs returns a node agent pod's log, its previous container's
// first (an agent that exited, restarted by the kubelet).
func agentLogs(client *http.Client, pod string) string {
	var prev, cur string
	path := "/api/v1/namespaces/gpurun-system/pods/" + url.PathEscape(pod) + "/log"
	_ = apiGet(client, path+"?previous=true", &prev)
	_ = apiGet(client, path, &cur)
	return prev + cur
}

// lineWith returns the last line of text that holds s, "" when none does.
func lineWith(text, s string) string {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// shmOfMessage is the /dev/shm size a probe pod wrote ("<block size>
// <blocks>"), formatted as policy.FormatSize does, or what it wrote.
func shmOfMessage(msg string) string {
	f := strings.Fields(msg)
	if len(f) != 2 {
		return fmt.Sprintf("wrote %q", msg)
	}
	bs, err1 := strconv.ParseInt(f[0], 10, 64)
	blocks, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("wrote %q", msg)
	}
	return policy.FormatSize(bs * blocks)
}

// checkRollout reports a rollout and fails on what the numbers
// forbid: a GPU pod created during it without the policy's size, a
// restart on a node whose containerd config did not change, more than one
// on a node whose config did. With mayRefuse (a downgrade to a release
// that refuses what a later one left on a node), a node whose agent
// refused, saying what to do, is the contract's clear refusal: its
// restarts and its unsized GPU pods are reported, not failed.
func checkRollout(t *testing.T, c *harness.Cluster, phase string, r rolloutResult, mayRefuse bool) {
	t.Helper()
	var per []string
	for _, n := range c.Nodes {
		got := r.restarts[n.Name]
		per = append(per, fmt.Sprintf("%s %d (config changed: %v, agent asked: %d)", n.Name, got, r.changed[n.Name], r.asked[n.Name]))
		switch refusal := r.refused[n.Name]; {
		case refusal != "" && !mayRefuse:
			t.Errorf("%s: node %s: the agent refused to install: %s", phase, n.Name, refusal)
		case refusal != "":
			t.Logf("%s: node %s: the agent refused (%s): containerd restarted %d times there", phase, n.Name, refusal, got)
		case !r.changed[n.Name] && got != 0:
			t.Errorf("%s: node %s: containerd restarted %d times, and its config did not change", phase, n.Name, got)
		case got > 1:
			t.Errorf("%s: node %s: containerd restarted %d times, want at most 1", phase, n.Name, got)
		}
	}
	t.Logf("%s: rolled out on every GPU node in %s; containerd restarts: %s", phase, r.took.Round(100*time.Millisecond), strings.Join(per, ", "))
	for _, a := range r.answers {
		t.Logf("%s: the administrator, %s", phase, a)
	}
	t.Logf("%s: %d GPU pods created during the rollout, %d without the policy's size", phase, r.probes, len(r.unsized))
	if r.probes == 0 {
		t.Errorf("%s: no GPU pod was created during the rollout", phase)
	}
	for _, u := range r.unsized {
		if mayRefuse && r.refused[u.node] != "" {
			t.Logf("%s: a GPU pod created during the rollout on %s, whose agent refused: %s", phase, u.node, u.what)
			continue
		}
		t.Errorf("%s: a GPU pod created during the rollout: %s", phase, u.what)
	}
}

// servingPods are the GPU pods that run through the rollouts, with what
// each had: a restart or a smaller /dev/shm after a rollout fails it.
type servingPods struct {
	ns   string
	pods map[string]servingPod // by name
}

type servingPod struct {
	uid, container string
	restarts       int
	shm            int64
}

// serving starts a GPU pod on every GPU node and waits until each runs
// with the policy's size.
func (e *multiEnv) serving(t *testing.T, ns string, want int64) *servingPods {
	t.Helper()
	c := e.c.For(t)
	s := &servingPods{ns: ns, pods: map[string]servingPod{}}
	for _, n := range c.Nodes {
		if n.GPUs > 0 {
			if err := apiCreate(c.APIClient(), "/api/v1/namespaces/"+ns+"/pods", envGPUPod("serving-"+n.Name, n.Name, nil)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range c.Nodes {
		if n.GPUs > 0 {
			c.WaitPodReady(ns, "serving-"+n.Name, podTimeout)
		}
	}
	s.pods = s.now(t, c)
	for name, p := range s.pods {
		if p.shm != want {
			t.Errorf("%s: /dev/shm %s, want the policy's %s", name, policy.FormatSize(p.shm), policy.FormatSize(want))
		}
	}
	return s
}

// now reads the serving pods' state.
func (s *servingPods) now(t *testing.T, c *harness.Cluster) map[string]servingPod {
	t.Helper()
	var pods podList
	if err := apiGet(c.APIClient(), "/api/v1/namespaces/"+s.ns+"/pods", &pods); err != nil {
		t.Fatal(err)
	}
	out := map[string]servingPod{}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Metadata.Name, "serving-") || len(p.Status.ContainerStatuses) != 1 {
			continue
		}
		cs := p.Status.ContainerStatuses[0]
		out[p.Metadata.Name] = servingPod{uid: p.Metadata.UID, container: cs.ContainerID, restarts: cs.RestartCount, shm: c.ShmOf(s.ns, p.Metadata.Name, "app").Bytes}
	}
	return out
}

// check fails on a serving pod that restarted, was replaced or has a
// smaller /dev/shm than before, reports how many were checked, and
// returns how many restarted (or were replaced, or are gone).
func (s *servingPods) check(t *testing.T, c *harness.Cluster, phase string) int {
	t.Helper()
	now := s.now(t, c)
	restarted := 0
	for name, was := range s.pods {
		got, ok := now[name]
		switch {
		case !ok:
			t.Errorf("%s: running pod %s is gone", phase, name)
			restarted++
		case got.uid != was.uid || got.container != was.container || got.restarts != was.restarts:
			t.Errorf("%s: running pod %s restarted: %+v, was %+v", phase, name, got, was)
			restarted++
		case got.shm < was.shm:
			t.Errorf("%s: running pod %s resized down: /dev/shm %s, was %s", phase, name, policy.FormatSize(got.shm), policy.FormatSize(was.shm))
		}
	}
	t.Logf("%s: %d running GPU pods, %d restarted or replaced", phase, len(s.pods), restarted)
	return restarted
}
