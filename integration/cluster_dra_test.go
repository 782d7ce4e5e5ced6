//go:build integration

package integration

// GPUs allocated by Dynamic Resource Allocation (resource.k8s.io/v1) on
// the test clusters: the harness's DRA driver (harness.StartDRAGPUs, built
// on k8s.io/dynamic-resource-allocation's kubeletplugin) publishes fake
// GPUs in a ResourceSlice as NVIDIA's DRA driver does, the scheduler
// allocates claims from them, the kubelet has the driver prepare them and
// hands the CDI names it answers to containerd, which injects the devices
// from the claim's CDI spec (2.x; containerd 1.6 has no CDI, and the
// kubelet gives DRA devices to a runtime only as CDI names since 1.31, so
// on 1.6 nothing of a claim reaches the container or gpurun's node
// doors). A DeviceClass of another driver's devices (a "network
// interface", harness.StartDRANICs) is the claim that is not a GPU.

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

// The DRA GPUs of a cluster node: minors from draFirstMinor (the device
// plugin's GPUs are 0 and 1), two of 40 GiB and two of 80 GiB, in that
// order (the scheduler's allocator takes the first that fits: a claim for
// one GPU of any size gets a 40 GiB one while one is free).
const draFirstMinor = 16

var draGPUMemory = []string{"40Gi", "40Gi", "80Gi", "80Gi"}

// draDrivers are the DRA drivers on a cluster's node.
type draDrivers struct {
	gpus, nics *harness.DRADriver
}

// startDRA starts the harness's DRA drivers on the cluster's node: four
// GPUs, two NICs.
func startDRA(t *testing.T, c *harness.Cluster, node *harness.ClusterNode) *draDrivers {
	t.Helper()
	began := time.Now()
	d := &draDrivers{gpus: c.StartDRAGPUs(node, draFirstMinor, draGPUMemory...), nics: c.StartDRANICs(node, 2)}
	t.Logf("DRA drivers on %s: %d GPUs and %d NICs registered with the kubelet and published in %s", node.Name,
		len(d.gpus.Devices), len(d.nics.Devices), time.Since(began).Round(time.Millisecond))
	return d
}

// draClaims renders the claims the DRA pods of namespace ns use, as users
// write them: a ResourceClaimTemplate for one GPU (gpu.nvidia.com, the
// class NVIDIA's driver installs), one for every 80 GiB GPU of the node
// (allocationMode All, with a selector on the capacity NVIDIA's driver
// publishes), a ResourceClaim for one GPU that pods share, and a template
// for one device of the non-GPU class.
func draClaims(ns string) string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: %[2]s}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: all-80g-gpus, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: %[2]s
          allocationMode: All
          selectors:
          - cel: {expression: "device.capacity['%[2]s'].memory.compareTo(quantity('80Gi')) >= 0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-gpu, namespace: %[1]s}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: %[2]s}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-nic, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly: {deviceClassName: %[3]s}
`, ns, harness.DRAGPUClass, harness.DRANICClass)
}

// draCase is a DRA pod: its spec, the /dev/shm size its containers must
// see, and whether its claim is a GPU's.
type draCase struct {
	pod  podSpec
	want func(e *clusterEnv, t *testing.T) int64
	gpu  bool
}

// draPods are the DRA pods of a test, with runtimeClassName class ("" for
// none) and memory limit limit on their claim's container ("" for none):
// a GPU from a template (used by the trainer, not by the sidecar), every
// 80 GiB GPU, a GPU claim two pods share, and a NIC. want is the size of
// the GPU pods; the NIC pod keeps containerd's.
func draPods(class, limit string, want func(*clusterEnv, *testing.T) int64) []draCase {
	one := func(name string, cl podClaim, sidecar bool) podSpec {
		ctrs := []containerSpec{{name: "trainer", claims: []string{cl.name}, memoryLimit: limit}}
		if sidecar {
			ctrs = append(ctrs, containerSpec{name: "sidecar", memoryLimit: limit})
		}
		return podSpec{name: name, runtimeClass: class, claims: []podClaim{cl}, containers: ctrs}
	}
	return []draCase{
		{one("dra-one", podClaim{name: "gpu", template: "one-gpu"}, true), want, true},
		{one("dra-all", podClaim{name: "gpus", template: "all-80g-gpus"}, false), want, true},
		{one("dra-shared-a", podClaim{name: "gpu", claim: "shared-gpu"}, false), want, true},
		{one("dra-shared-b", podClaim{name: "gpu", claim: "shared-gpu"}, false), want, true},
		{one("dra-nic", podClaim{name: "nic", template: "one-nic"}, true), wantEngine, false},
	}
}

// waitWebhookClaims waits until gpurun's webhook resolves the claims of
// draClaims in ns from its cache, which learns of them by a watch event
// that may come after their create returned: a server-side dry run of a
// pod that uses them all, until the webhook's answer warns of no claim
// that could not be read (its warning for a claim it judged by the
// policy's unresolved_claims, docs/install-kubernetes.md).
func waitWebhookClaims(t *testing.T, c *harness.Cluster, ns string) {
	t.Helper()
	probe := []byte(podManifest(ns, podSpec{name: "claims-probe",
		claims:     []podClaim{{name: "one", template: "one-gpu"}, {name: "all", template: "all-80g-gpus"}, {name: "shared", claim: "shared-gpu"}, {name: "nic", template: "one-nic"}},
		containers: []containerSpec{{name: "probe", claims: []string{"one", "all", "shared", "nic"}}}}))
	began := time.Now()
	var last string
	for time.Since(began) < 30*time.Second {
		_, stderr, err := c.KubectlWarnings(probe, "create", "--dry-run=server", "-f", "-", "-o", "name")
		switch {
		case err != nil:
			last = fmt.Sprintf("%v: %s", err, stderr)
		case strings.Contains(stderr, "could not be read"):
			last = stderr
		default:
			t.Logf("the webhook resolves the claims of %s %s after they were made", ns, time.Since(began).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the webhook did not resolve the claims of %s in 30s: %s", ns, last)
}

// runDRACases creates the pods in ns (whose claims draClaims made),
// waits until every pod is ready, checks each container's /dev/shm
// (runShmCases), and, when devices is true, the devices each container
// got from its claims (checkDRADevices).
func (e *clusterEnv) runDRACases(t *testing.T, ns string, cases []draCase, devices bool) {
	t.Helper()
	c := e.c.For(t)
	var shm []shmCase
	for _, dc := range cases {
		shm = append(shm, shmCase{dc.pod, dc.want})
	}
	began := time.Now()
	e.runShmCases(t, ns, shm)
	sized := time.Since(began)
	if devices {
		for _, dc := range cases {
			checkDRADevices(t, c, e.dra, ns, dc.pod)
		}
	}
	t.Logf("%d DRA pods ready and their /dev/shm checked in %s, their devices in %s more", len(cases),
		sized.Round(time.Millisecond), (time.Since(began) - sized).Round(time.Millisecond))
}

// podClaimStatus is what a pod's status says of its claims.
type podClaimStatus struct {
	Status struct {
		ResourceClaimStatuses []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaimStatuses"`
	} `json:"status"`
}

// claimDevices returns the devices allocated to claim name in ns, as
// driver/device.
func claimDevices(t *testing.T, c *harness.Cluster, ns, name string) []string {
	t.Helper()
	out, err := c.Kubectl("get", "resourceclaim", "-n", ns, name, "-o", "json")
	if err != nil {
		t.Fatalf("resourceclaim %s: %v", name, err)
	}
	var claim struct {
		Status struct {
			Allocation *struct {
				Devices struct {
					Results []struct{ Driver, Pool, Device string } `json:"results"`
				} `json:"devices"`
			} `json:"allocation"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &claim); err != nil {
		t.Fatalf("resourceclaim %s/%s: %v", ns, name, err)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("resourceclaim %s/%s is not allocated:\n%s", ns, name, out)
	}
	var devs []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		devs = append(devs, r.Driver+"/"+r.Device)
	}
	sort.Strings(devs)
	return devs
}

// claimEnvKeys are the environment variables the harness's DRA drivers
// set through their CDI specs: the GPU driver's for every claim
// (NVIDIA_VISIBLE_DEVICES=void), the NIC's for each device.
func claimEnvKeys(dra *draDrivers) []string {
	var keys []string
	add := func(env []string) {
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	for _, d := range []*harness.DRADriver{dra.gpus, dra.nics} {
		add(d.Env)
		for _, dev := range d.Devices {
			add(dev.Env)
		}
	}
	return keys
}

// containerClaimView is what a container sees of DRA claims, read by one
// exec: the /dev/nvidia* it has (path -> "major:minor" of a character
// device, in decimal; "not a character device: …" otherwise) and those of
// the variables keys that are set (KEY=VALUE).
func containerClaimView(t *testing.T, c *harness.Cluster, ns, pod, ctr string, keys []string) (devs map[string]string, env []string) {
	t.Helper()
	script := `for f in /dev/nvidia*; do [ -e "$f" ] && stat -c 'dev %n %F %t %T' "$f"; done`
	for _, k := range keys {
		script += fmt.Sprintf(`; [ -n "${%[1]s+set}" ] && echo "env %[1]s=$%[1]s"`, k)
	}
	out, err := c.Exec(ns, pod, ctr, "sh", "-c", script+"; true")
	if err != nil {
		t.Fatalf("pod %s, container %s: %v", pod, ctr, err)
	}
	devs = map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if kv, ok := strings.CutPrefix(l, "env "); ok {
			env = append(env, kv)
			continue
		}
		f := strings.Fields(l)
		if len(f) < 5 || f[0] != "dev" {
			continue
		}
		major, err1 := strconv.ParseUint(f[len(f)-2], 16, 32)
		minor, err2 := strconv.ParseUint(f[len(f)-1], 16, 32)
		kind := strings.Join(f[2:len(f)-2], " ")
		if kind != "character special file" || err1 != nil || err2 != nil {
			devs[f[1]] = "not a character device: " + l
			continue
		}
		devs[f[1]] = fmt.Sprintf("%d:%d", major, minor)
	}
	sort.Strings(env)
	return devs, env
}

// checkDRADevices: every container of a DRA pod sees exactly what the
// claims it uses were allocated — each GPU as /dev/nvidia<minor>, a
// character device 195:<minor>, and no other /dev/nvidia*, with the GPU
// driver's NVIDIA_VISIBLE_DEVICES=void; a NIC as DRANICEnv=<its name> —
// and a container that uses no claim sees none of it.
func checkDRADevices(t *testing.T, c *harness.Cluster, dra *draDrivers, ns string, p podSpec) {
	t.Helper()
	out, err := c.Kubectl("get", "pod", "-n", ns, p.name, "-o", "json")
	if err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
	var st podClaimStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
	claimOf := map[string]string{} // the pod's claim name -> the ResourceClaim's
	for _, cl := range p.claims {
		claimOf[cl.name] = cl.claim
	}
	for _, s := range st.Status.ResourceClaimStatuses {
		claimOf[s.Name] = s.ResourceClaimName
	}
	keys := claimEnvKeys(dra)
	devices := map[string][]string{} // the ResourceClaim's name -> its devices
	for _, ctr := range p.containers {
		wantGPUs, wantEnv := map[string]string{}, []string{}
		for _, cl := range ctr.claims {
			name := claimOf[cl]
			if name == "" {
				t.Fatalf("pod %s: claim %s has no ResourceClaim in its status:\n%s", p.name, cl, out)
			}
			if devices[name] == nil {
				devices[name] = claimDevices(t, c, ns, name)
			}
			for _, dev := range devices[name] {
				driver, devName, _ := strings.Cut(dev, "/")
				d := dra.gpus
				if driver == harness.DRANICDriver {
					d = dra.nics
				} else if driver != harness.DRAGPUDriver {
					t.Errorf("pod %s: claim %s has device %s of another driver", p.name, cl, dev)
					continue
				}
				pub, ok := d.Device(devName)
				if !ok {
					t.Fatalf("pod %s: claim %s has device %s, which its driver does not publish", p.name, cl, dev)
				}
				if pub.Node != "" {
					wantGPUs[pub.DevPath] = fmt.Sprintf("%d:%d", harness.NvidiaMajor, pub.Minor)
				}
				for _, kv := range append(slices.Clone(d.Env), pub.Env...) {
					if !slices.Contains(wantEnv, kv) {
						wantEnv = append(wantEnv, kv)
					}
				}
			}
		}
		sort.Strings(wantEnv)
		got, env := containerClaimView(t, c, ns, p.name, ctr.name, keys)
		t.Logf("pod %s, container %s (claims %v): /dev/nvidia* %v, env %v", p.name, ctr.name, ctr.claims, got, env)
		if fmt.Sprint(got) != fmt.Sprint(wantGPUs) {
			t.Errorf("pod %s, container %s (claims %v): /dev/nvidia* %v, want %v (what its claims were allocated)\n--- the GPU driver's log ---\n%s",
				p.name, ctr.name, ctr.claims, got, wantGPUs, dra.gpus.LogTail(10))
		}
		if !slices.Equal(env, wantEnv) {
			t.Errorf("pod %s, container %s (claims %v): the drivers' variables %v, want %v (what their CDI specs set for its claims)",
				p.name, ctr.name, ctr.claims, env, wantEnv)
		}
	}
}

// testDRA: the DRA pods in a namespace of their own with the node mode
// in place (class: the RuntimeClass its pods name, "" for none). The GPU
// pods get the policy's size and their devices, the NIC pod keeps
// containerd's 64 MiB and gets its device. On containerd 2.x only: 1.6
// has no CDI, so a claim's devices never reach the container, nor
// anything of the claim the node modes could see.
func (e *clusterEnv) testDRA(t *testing.T, class string) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	c.Apply(draClaims(ns))
	e.runDRACases(t, ns, draPods(class, "", wantTarget(0)), true)
}

// testWebhookDRA: with the webhook, the DRA pods as users write them,
// with memory limits: every GPU pod gets the webhook's Memory emptyDir at
// /dev/shm (its volume, and the size in each container), the NIC pod is
// left as it is. On containerd 2.x each container has its claims' devices
// too (checkDRADevices); on 1.6 (TestCluster's webhook cluster) the
// runtime injects none (no CDI: the kubelet's CDI names are dropped),
// which the test checks, as docs/cluster-tests.md says it.
func (e *clusterEnv) testWebhookDRA(t *testing.T) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	c.Apply(draClaims(ns))
	waitWebhookClaims(t, c, ns)
	const limit = "1Gi"
	want, _ := e.pol.Target(policy.Request{MemoryLimit: policy.GiB, GPUs: 1})
	cases := draPods("", limit, func(*clusterEnv, *testing.T) int64 { return want })
	// The sidecar's limit counts too: the pod's memory is 2 GiB.
	want2, _ := e.pol.Target(policy.Request{MemoryLimit: 2 * policy.GiB, GPUs: 1})
	cases[0].want = func(*clusterEnv, *testing.T) int64 { return want2 }
	e.runDRACases(t, ns, cases, e.containerd2)
	for _, dc := range cases {
		p := getPod(t, c, ns, dc.pod.name)
		var sized bool
		for _, v := range p.Spec.Volumes {
			if v.Name == webhook.VolumeName && v.EmptyDir != nil && v.EmptyDir.Medium == "Memory" {
				sized = true
			}
		}
		decision := p.Metadata.Annotations[webhook.DecisionAnnotation]
		if sized != dc.gpu {
			t.Errorf("pod %s (a GPU claim: %v): the webhook's volume %s: %v (decision %q)", dc.pod.name, dc.gpu, webhook.VolumeName, sized, decision)
		}
		if !e.containerd2 {
			if got, env := containerClaimView(t, c, ns, dc.pod.name, "trainer", claimEnvKeys(e.dra)); len(got) > 0 || len(env) > 0 {
				t.Errorf("pod %s on containerd 1.6: /dev/nvidia* %v, env %v: a claim's CDI device reached a runtime without CDI (docs/cluster-tests.md says it cannot)", dc.pod.name, got, env)
			}
		}
	}
}
