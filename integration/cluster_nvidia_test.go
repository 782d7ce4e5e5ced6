//go:build integration

package integration

// docs/nvidia.md's rows on the harness's single-node cluster: a real
// kubelet whose node is a GPU node of NVIDIA's stack (harness.NVIDIA: GPUs
// that are character devices 195:N in the test's directory, the CDI specs
// that name them, NVIDIA's real toolkit, v1.20.2, run by
// nvidia-ctk-installer as the GPU Operator's toolkit pod runs it), the
// fake device plugin answering as NVIDIA's does in each of the operator's
// modes, and gpurun installed with the shipped overlays
// (agentOverlay's test-local paths aside). One cluster per containerd
// line: on 2.x the native CDI mode and NVIDIA's NRI plugin mode beside
// gpurun's NRI plugin, then the legacy mode beside gpurun's default-runtime
// mode; on 1.6 the legacy mode.

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/diagnose/doctor"
	"github.com/gpurun/gpurun/engine/nvidia"
	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// nvClusterEnv is a cluster whose node is a GPU node of NVIDIA's stack.
type nvClusterEnv struct {
	*clusterEnv
	nv   *harness.NVIDIA
	line string
	// ns is the namespace of the tests' pods, one for every subtest (each
	// removes its pods).
	ns string
	// want is the shipped policy's /dev/shm for a GPU container without a
	// memory limit, in KiB.
	want int64
}

// TestClusterNVIDIA runs the rows of docs/nvidia.md's table on the test
// cluster against NVIDIA's real toolkit, on containerd 2.x and 1.6 (one
// cluster each, in parallel), and checks that each cluster's cleanup
// leaves nothing behind.
func TestClusterNVIDIA(t *testing.T) {
	for _, tc := range []struct {
		line        string
		containerd2 bool
	}{
		{line2, true},
		{line16, false},
	} {
		t.Run(tc.line, func(t *testing.T) {
			t.Parallel()
			begin := time.Now()
			var c *harness.Cluster
			t.Run("cluster", func(t *testing.T) {
				nv := harness.NewNVIDIA(t)
				c = harness.StartCluster(t, harness.ClusterOptions{Containerd2: tc.containerd2, NVIDIA: nv})
				e := newNVClusterEnv(t, c, nv, tc.line)
				// On 2.x the NRI modes, on 1.6 the toolkit's restart
				// cycle beside the default-runtime mode (on 1.x its
				// drop-in carries a copy of NVIDIA's CRI section); on both
				// the agent's repair when the toolkit comes second.
				if tc.containerd2 {
					t.Run("nri", e.testNRIModes)
				} else {
					t.Run("operator-legacy", e.testOperatorLegacy)
				}
				t.Run("operator-after-gpurun", e.testOperatorAfterGpurun)
			})
			t.Logf("%s took %s", t.Name(), time.Since(begin).Round(100*time.Millisecond))
			if c == nil {
				return
			}
			if left := c.Leftovers(); len(left) > 0 {
				t.Errorf("the cluster's cleanup left:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// newNVClusterEnv imports gpurun's image, starts the fake device plugin
// for the node's two GPUs (NVIDIA.GPUs: its CDI specs name them) answering
// as NVIDIA's does in the GPU Operator's native CDI mode on containerd 2.x
// (CDI names) and in its legacy mode on 1.6 (NVIDIA_VISIBLE_DEVICES), and
// makes the RuntimeClass nvidia the GPU Operator makes.
func newNVClusterEnv(t *testing.T, c *harness.Cluster, nv *harness.NVIDIA, line string) *nvClusterEnv {
	t.Helper()
	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile(c.Containerd.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	e := &nvClusterEnv{
		clusterEnv: &clusterEnv{c: c, containerd2: line == line2, pol: shippedPolicy(t), hostMem: mem, original: original},
		nv:         nv,
		line:       line,
	}
	e.want = e.target(0) / 1024
	c.ImportImage(gpurunImageTar(t))
	strategy := harness.GPUEnv
	if e.containerd2 {
		strategy = harness.GPUCDI
	}
	c.StartGPUPlugin(c.Nodes[0], nv.GPUs(2), strategy)
	c.Apply("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: nvidia\nhandler: nvidia\n")
	e.ns = testNamespace(t, c)
	return e
}

// nvPod is a pod the tests make (its GPU container is "trainer"), and
// what that container must see: its /dev/shm in KiB, and whether it has a
// GPU (a /dev/nvidiaN device node and the driver library the CDI spec
// mounts, which only NVIDIA's runtime or containerd's CDI put there).
type nvPod struct {
	spec podSpec
	// ns is the pod's namespace ("": the test's).
	ns     string
	shmKiB int64
	gpu    bool
}

// nvGPUPod is a pod whose container asks the device plugin for one GPU,
// of RuntimeClass class ("": none).
func nvGPUPod(name, class string, shmKiB int64, gpu bool) nvPod {
	return nvPod{spec: podSpec{name: name, runtimeClass: class, containers: []containerSpec{{name: "trainer", gpus: 1}}}, shmKiB: shmKiB, gpu: gpu}
}

// annotatedPod is a pod whose container's CDI devices are named by the
// annotation NVIDIA's NRI plugin reads (the GPU Operator 26.3+ with
// cdi.nriPluginEnabled).
func annotatedPod(name, ns, devices string, shmKiB int64, gpu bool) nvPod {
	return nvPod{spec: podSpec{name: name, annotations: map[string]string{"nvidia.cdi.k8s.io/container.trainer": devices},
		containers: []containerSpec{{name: "trainer"}}}, ns: ns, shmKiB: shmKiB, gpu: gpu}
}

// plainNVPod is a pod without a GPU.
func plainNVPod() nvPod {
	return nvPod{spec: podSpec{name: "plain", containers: []containerSpec{{name: "trainer"}}}, shmKiB: engineDefaultKiB}
}

// expect makes the pods (in namespace ns unless they name their own),
// waits until every one is Ready and checks what each container
// "trainer" sees; it returns a function that deletes them and waits
// until they are gone (their GPUs free again).
func (e *nvClusterEnv) expect(t *testing.T, what, ns string, pods ...nvPod) (remove func()) {
	t.Helper()
	c := e.c.For(t)
	begin := time.Now()
	defer func() {
		t.Logf("%s: %d pods checked in %s", what, len(pods), time.Since(begin).Round(100*time.Millisecond))
	}()
	nsOf := func(p nvPod) string {
		if p.ns != "" {
			return p.ns
		}
		return ns
	}
	remove = func() {
		byNS := map[string][]string{}
		for _, p := range pods {
			byNS[nsOf(p)] = append(byNS[nsOf(p)], p.spec.name)
		}
		for n, names := range byNS {
			if out, err := c.Kubectl(append([]string{"delete", "pod", "-n", n, "--wait=true", "--timeout=2m"}, names...)...); err != nil {
				t.Errorf("delete pods %v: %v\n%s", names, err, out)
			}
		}
	}
	var manifests []string
	byNS := map[string][]string{}
	for _, p := range pods {
		manifests = append(manifests, podManifest(nsOf(p), p.spec))
		byNS[nsOf(p)] = append(byNS[nsOf(p)], "pod/"+p.spec.name)
	}
	c.Apply(strings.Join(manifests, "---\n"))
	for n, names := range byNS {
		// One watch for every pod of the namespace.
		if out, err := c.Kubectl(append([]string{"wait", "-n", n, "--for=condition=Ready", "--timeout=" + podTimeout.String()}, names...)...); err != nil {
			var objs []harness.Object
			for _, p := range pods {
				objs = append(objs, harness.Pod(nsOf(p), p.spec.name))
			}
			t.Fatalf("%s: pods not Ready: %v\n%s\n%s", what, err, out, c.Dump(objs...))
		}
	}
	script := "stat -f -c '%S %b' /dev/shm; for d in /dev/nvidia[0-9]*; do [ -c \"$d\" ] && echo has-device; done; cat " + harness.DriverLibPath + " 2>/dev/null; true"
	for _, p := range pods {
		out, err := c.Exec(nsOf(p), p.spec.name, "trainer", "sh", "-c", script)
		if err != nil {
			t.Errorf("%s: pod %s: %v", what, p.spec.name, err)
			continue
		}
		var bs, blocks int64
		if f := strings.Fields(strings.SplitN(out, "\n", 2)[0]); len(f) == 2 {
			bs, _ = strconv.ParseInt(f[0], 10, 64)
			blocks, _ = strconv.ParseInt(f[1], 10, 64)
		}
		shmKiB := bs * blocks / 1024
		device := strings.Contains(out, "has-device")
		lib := strings.Contains(out, strings.TrimSpace(harness.DriverLibContent))
		if shmKiB != p.shmKiB || device != p.gpu || lib != p.gpu {
			t.Errorf("%s: pod %s/%s (RuntimeClass %q): /dev/shm %d KiB, device %v, driver library %v; want %d KiB, GPU %v\n%s",
				what, nsOf(p), p.spec.name, p.spec.runtimeClass, shmKiB, device, lib, p.shmKiB, p.gpu, e.gpurunLogs())
		}
	}
	return remove
}

// doctor runs gpurun doctor on the node's containerd (its config, its
// CRI endpoint, the node's policy) and checks its verdict (wantVerdict):
// with problem, the problems about containerd and the runtime are exactly
// the checks want says are problems.
func (e *nvClusterEnv) doctor(t *testing.T, what string, problem bool, want map[string]doctor.Status) {
	t.Helper()
	r, code := doctorOn(t, e.c.Containerd, e.c.PolicyPath)
	wantVerdict(t, what, r, code, problem, want)
	for _, c := range r.Checks {
		if c.Status == doctor.Problem && (strings.HasPrefix(c.Name, "containerd") || strings.HasPrefix(c.Name, "runtime")) && want[c.Name] != doctor.Problem {
			t.Errorf("%s: doctor finds %s: %s; want no problem there", what, c.Name, c.Detail)
		}
	}
}

// loaded asks the node's containerd what it loaded, failing the test on
// an error.
func (e *nvClusterEnv) loaded(t *testing.T) loaded {
	t.Helper()
	l, err := tryLoaded(e.c.Containerd)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitLoaded polls the node's containerd (which restarts meanwhile) until
// it has loaded a configuration ok accepts.
func (e *nvClusterEnv) waitLoaded(t *testing.T, what string, ok func(loaded) bool) {
	t.Helper()
	var last string
	if err := waitUntil(agentTimeout, func() (bool, string) {
		l, err := tryLoaded(e.c.Containerd)
		if err != nil {
			last = err.Error()
			return false, last
		}
		last = l.String()
		return ok(l), last
	}); err != nil {
		t.Fatalf("%s: %v\n--- the agent's log ---\n%s", what, err, e.agentLog())
	}
}

// agentLog is the node agent's log, when it runs.
func (e *nvClusterEnv) agentLog() string {
	out, err := e.c.Kubectl("logs", "-n", "gpurun-system", "daemonset/gpurun-node", "--tail=40")
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return out
}

// sameLoaded says whether two loaded configurations are equal.
func sameLoaded(a, b loaded) bool { return a.def == b.def && maps.Equal(a.handlers, b.handlers) }

// waitNRIRegistered waits until gpurun's NRI DaemonSet's plugin has
// registered with containerd.
func waitNRIRegistered(t *testing.T, c *harness.Cluster) {
	t.Helper()
	c.WaitRollout("gpurun-system", "gpurun-nri", agentTimeout)
	if err := waitUntil(agentTimeout, func() (bool, string) {
		out, err := c.Kubectl("logs", "-n", "gpurun-system", "daemonset/gpurun-nri")
		return err == nil && strings.Contains(out, "registered with the runtime"), out
	}); err != nil {
		t.Fatalf("NRI plugin: %v\n%s", err, c.Dump(harness.Object{Kind: "daemonset", Namespace: "gpurun-system", Name: "gpurun-nri"}))
	}
}

// testNRIModes installs gpurun's NRI plugin (the nri overlay) and runs
// the GPU Operator's modes beside it on containerd 2.x: native CDI,
// legacy (the NRI plugin is the mode that fits on 2.x) and NVIDIA's NRI
// plugin.
func (e *nvClusterEnv) testNRIModes(t *testing.T) {
	c := e.c.For(t)
	overlay := e.agentOverlay(t, "nri")
	applyOverlay(t, c, overlay)
	waitNRIRegistered(t, c)
	t.Run("native-cdi", e.testNativeCDI)
	t.Run("legacy", e.testLegacyNRI)
	t.Run("nvidia-nri-plugin", e.testNVIDIANRIPlugin)
}

// testNativeCDI is the GPU Operator's native CDI mode (its default since
// 25.10): the device plugin answers Allocate with CDI names, the kubelet
// hands them to containerd, which injects the GPU from the specs; the
// toolkit registers its handlers but does not make nvidia the default.
// Beside it, gpurun's NRI plugin sizes GPU pods of the default handler and
// of RuntimeClass nvidia; plain pods keep 64 MiB; doctor sees the plugin
// and has nothing to say. The toolkit's pod stops (containerd restarts,
// the handlers go): GPU pods are sized as before.
func (e *nvClusterEnv) testNativeCDI(t *testing.T) {
	c := e.c.For(t)
	c.SetGPUStrategy(c.Nodes[0], harness.GPUCDI)
	ns := e.ns
	inst := e.nv.Toolkit(c.Containerd).StartInstaller(harness.InstallerOptions{Env: []string{"NVIDIA_RUNTIME_SET_AS_DEFAULT=false"}})
	if l := e.loaded(t); l.def != "runc" || l.handlers["nvidia"] == "" {
		t.Fatalf("the toolkit in native CDI mode: %s; want its handlers, runc the default", l)
	}
	keep := e.expect(t, "gpurun's NRI plugin beside the toolkit", ns, nvGPUPod("gpu", "", e.want, true), nvGPUPod("gpu-nvidia", "nvidia", e.want, true), plainNVPod())
	e.doctor(t, "gpurun's NRI plugin beside the toolkit", false, map[string]doctor.Status{"containerd.runtime": doctor.OK, "containerd.pods": doctor.OK})
	keep()
	inst.Stop()
	e.expect(t, "the toolkit stopped", ns, nvGPUPod("gpu", "", e.want, true))()
}

// testLegacyNRI is the GPU Operator's legacy mode (nvidia the default
// handler, the device plugin's NVIDIA_VISIBLE_DEVICES, NVIDIA's runtime
// injecting the GPU) beside gpurun's NRI plugin, the mode docs/nvidia.md
// says fits on containerd 2.x: GPU pods of the default handler and of
// RuntimeClass nvidia get their GPU and their size; doctor has nothing to
// say.
func (e *nvClusterEnv) testLegacyNRI(t *testing.T) {
	c := e.c.For(t)
	c.SetGPUStrategy(c.Nodes[0], harness.GPUEnv)
	ns := e.ns
	inst := e.nv.Toolkit(c.Containerd).StartInstaller(legacyToolkit())
	if l := e.loaded(t); l.def != "nvidia" {
		t.Fatalf("the toolkit in legacy mode: %s; want nvidia the default", l)
	}
	keep := e.expect(t, "gpurun's NRI plugin beside the legacy toolkit", ns, nvGPUPod("gpu", "", e.want, true), nvGPUPod("gpu-nvidia", "nvidia", e.want, true), plainNVPod())
	e.doctor(t, "gpurun's NRI plugin beside the legacy toolkit", false, map[string]doctor.Status{"containerd.runtime": doctor.OK, "containerd.pods": doctor.OK})
	keep()
	inst.Stop()
}

// testNVIDIANRIPlugin is the GPU Operator 26.3+ with NVIDIA's NRI plugin
// (cdi.nriPluginEnabled; nvidia-ctk-installer runs it): it injects the CDI
// devices a pod's nvidia.cdi.k8s.io/container.<name> annotation names,
// management devices only in the operator's namespace, and leaves
// containerd's config alone. gpurun's NRI plugin beside it sizes those
// pods (the annotation is GPU evidence), the operator's operands too, and
// still once NVIDIA's plugin is gone; plain pods keep 64 MiB; doctor has
// nothing to say.
func (e *nvClusterEnv) testNVIDIANRIPlugin(t *testing.T) {
	c := e.c.For(t)
	ns := e.ns
	const operator = "gpu-operator"
	c.MustKubectl("create", "namespace", operator)
	t.Cleanup(func() {
		// Its pods are gone: the namespace goes while the tests go on.
		if out, err := c.Kubectl("delete", "namespace", operator, "--wait=false"); err != nil {
			t.Errorf("delete namespace %s: %v\n%s", operator, err, out)
		}
	})
	c.WaitServiceAccount(operator, "default", time.Minute)
	before := e.loaded(t)
	inst := e.nv.Toolkit(c.Containerd).StartInstaller(harness.InstallerOptions{NRI: true, NRINamespace: operator})
	if l := e.loaded(t); !sameLoaded(l, before) {
		t.Errorf("the toolkit in NRI mode changed what containerd loaded: %s, was %s", l, before)
	}
	gpu := func(withDevice bool) nvPod { return annotatedPod("gpu", "", harness.CDIKind+"=0", e.want, withDevice) }
	keep := e.expect(t, "NVIDIA's NRI plugin and gpurun's", ns, gpu(true),
		annotatedPod("dcgm", operator, harness.CDIManagementKind+"=all", e.want, true),
		annotatedPod("management-elsewhere", "", harness.CDIManagementKind+"=all", e.want, false),
		plainNVPod())
	e.doctor(t, "NVIDIA's NRI plugin and gpurun's", false, map[string]doctor.Status{"containerd.runtime": doctor.OK, "containerd.pods": doctor.OK})
	keep()
	inst.Stop()
	e.expect(t, "NVIDIA's NRI plugin stopped", ns, gpu(false))()
}

// repairMsg is what the node agent logs when it installs gpurun's
// registration again after another tool changed containerd's config.
const repairMsg = "installing gpurun's registration again"

// The GPU Operator's toolkit in its legacy mode (before 25.10, or CDI
// off: nvidia the default handler; the device plugin sets
// NVIDIA_VISIBLE_DEVICES and NVIDIA's runtime injects the GPU), with
// NVIDIA_CONTAINER_RUNTIME_RUNTIMES=runc,crun as docs/nvidia.md says.
func legacyToolkit() harness.InstallerOptions {
	return harness.InstallerOptions{Env: []string{"NVIDIA_CONTAINER_RUNTIME_RUNTIMES=runc,crun"}}
}

// installDefaultRuntime applies gpurun's default-runtime overlay (its
// drop-in directory next to containerd's config), with restart=signal so
// that the agent restarts containerd itself (containerd's supervisor
// starts it again, as systemd's Restart=always would) when it installs,
// repairs or uninstalls, and its checks every 2 s where it ships with
// 30 s; it waits until containerd has loaded gpurun as its default. It
// returns a function that deletes the overlay and waits until the agent
// has uninstalled and gone (the cleanup does it otherwise).
func (e *nvClusterEnv) installDefaultRuntime(t *testing.T) (uninstall func()) {
	t.Helper()
	c := e.c.For(t)
	start := time.Now()
	overlay := e.agentOverlayWith(t, "default-runtime", []string{"restart=signal"}, []string{"--interval=2s"})
	removed := false
	uninstall = func() {
		agent := agentPod(t, c, "gpurun-node")
		if out, err := c.Kubectl("delete", "-k", overlay, "--wait=true", "--timeout=3m"); err != nil {
			t.Fatalf("kubectl delete -k: %v\n%s", err, out)
		}
		removed = true
		c.WaitGone(harness.Pod("gpurun-system", agent), agentTimeout)
	}
	t.Cleanup(func() {
		if removed {
			return
		}
		if out, err := c.Kubectl("delete", "-k", overlay, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
			t.Errorf("kubectl delete -k: %v\n%s", err, out)
		}
	})
	c.ApplyKustomize(overlay)
	// What GPU pods need is containerd's: the agent's readiness follows
	// within its probe's period (TestCluster waits for it).
	e.waitLoaded(t, "gpurun's default-runtime mode", func(l loaded) bool { return l.def == "gpurun" })
	t.Logf("the agent installed, containerd restarted, in %s", time.Since(start).Round(100*time.Millisecond))
	return uninstall
}

// agentReady waits until the node agent says gpurun is in effect:
// `gpurun node status`, its readiness probe, exits 0 (its pod's Ready
// condition follows within the probe's period).
func (e *nvClusterEnv) agentReady(t *testing.T, what string) {
	t.Helper()
	c := e.c.For(t)
	agent := agentPod(t, c, "gpurun-node")
	if err := waitUntil(agentTimeout, func() (bool, string) {
		out, err := c.Exec("gpurun-system", agent, "agent", "gpurun", "node", "status", "--host-root=/host", "--state="+c.AgentState)
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	}); err != nil {
		t.Errorf("%s: gpurun node status: %v\n--- the agent's log ---\n%s", what, err, e.agentLog())
	}
}

// repairs counts the node agent's repairs so far.
func (e *nvClusterEnv) repairs(t *testing.T) int {
	t.Helper()
	return strings.Count(e.agentLogAll(t), repairMsg)
}

// testOperatorLegacy is the toolkit of the GPU Operator's legacy mode
// first, then gpurun's default-runtime overlay: GPU pods get their GPU
// from NVIDIA's runtime, which gpurun chains, and their size; pods of
// RuntimeClass nvidia start and keep 64 MiB, the one problem doctor finds.
// Then the toolkit's pod restarts (an operator upgrade, a drain): while it
// is away GPU pods keep starting, sized, with their GPU; started again it
// leaves gpurun's drop-in last (its import stays before gpurun's), and
// the agent, which checks the node every 2 s meanwhile, has nothing to
// repair: the two do not restart containerd in turn. gpurun goes first,
// leaving containerd with what the toolkit alone had; then the toolkit,
// leaving what the harness started with.
func (e *nvClusterEnv) testOperatorLegacy(t *testing.T) {
	c := e.c.For(t)
	c.SetGPUStrategy(c.Nodes[0], harness.GPUEnv)
	ns := e.ns
	original := e.loaded(t)
	tk := e.nv.Toolkit(c.Containerd)
	inst := tk.StartInstaller(legacyToolkit())
	alone := e.loaded(t)
	if alone.def != "nvidia" {
		t.Fatalf("the toolkit alone: %s; want nvidia the default", alone)
	}
	uninstall := e.installDefaultRuntime(t)
	if l := e.loaded(t); l.handlers["nvidia"] != alone.handlers["nvidia"] {
		t.Errorf("gpurun after the toolkit: %s; want the toolkit's nvidia handler kept", l)
	}
	all := func() []nvPod {
		return []nvPod{nvGPUPod("gpu", "", e.want, true), nvGPUPod("gpu-nvidia", "nvidia", engineDefaultKiB, true), plainNVPod()}
	}
	verdict := map[string]doctor.Status{"containerd.pods": doctor.Problem, "runtime.nvidia-default": doctor.OK, "runtime.cycle": doctor.OK, "runtime.chain": doctor.OK}
	e.agentReady(t, "gpurun after the toolkit")
	keep := e.expect(t, "gpurun after the toolkit", ns, all()...)
	e.doctor(t, "gpurun after the toolkit, a GPU pod of RuntimeClass nvidia at 64 MiB", true, verdict)
	keep()

	// The toolkit's pod restarts. Stopped, it takes its drop-in out
	// (containerd 2.x loses the nvidia handler; on 1.x gpurun's drop-in
	// carries a copy) and leaves its files: gpurun-runtime still hands
	// over to its runtime.
	repairs := e.repairs(t)
	inst.Stop()
	stopped := []nvPod{nvGPUPod("gpu", "", e.want, true), plainNVPod()}
	if !e.containerd2 {
		stopped = all()
	}
	e.expect(t, "the toolkit stopped", ns, stopped...)()
	inst = tk.StartInstaller(legacyToolkit())
	if l := e.loaded(t); l.def != "gpurun" || l.handlers["nvidia"] == "" {
		t.Errorf("the toolkit started again: %s; want gpurun the default and the nvidia handler", l)
	}
	e.agentReady(t, "the toolkit started again")
	keep = e.expect(t, "the toolkit started again", ns, all()...)
	e.doctor(t, "the toolkit started again", true, verdict)
	keep()
	if n := e.repairs(t); n != repairs {
		t.Errorf("the agent repaired gpurun's registration %d times through the toolkit's restart; want none\n%s", n-repairs, e.agentLog())
	}

	// gpurun goes first: the agent uninstalls on exit and restarts
	// containerd; the toolkit's configuration remains.
	uninstall()
	e.waitLoaded(t, "gpurun uninstalled, the toolkit stays", func(l loaded) bool { return sameLoaded(l, alone) })
	inst.Stop()
	if l := e.loaded(t); !sameLoaded(l, original) {
		t.Errorf("both uninstalled: containerd loaded %s; want %s", l, original)
	}
}

// testOperatorAfterGpurun is gpurun's default-runtime overlay first, the
// toolkit of the GPU Operator's legacy mode second: its drop-in, imported
// after gpurun's, makes nvidia the default, and the agent installs
// gpurun's registration again within its round — at most once, chaining
// NVIDIA's runtime — and restarts containerd, with no one's help: GPU
// pods get their GPU and their size,
// pods of RuntimeClass nvidia start. Then the toolkit goes first (its
// pod's cleanup; its files stay): GPU pods keep their GPU and size. Then
// gpurun goes, leaving what the harness started with.
func (e *nvClusterEnv) testOperatorAfterGpurun(t *testing.T) {
	c := e.c.For(t)
	c.SetGPUStrategy(c.Nodes[0], harness.GPUEnv)
	ns := e.ns
	original := e.loaded(t)
	uninstall := e.installDefaultRuntime(t)
	start := time.Now()
	repairs := e.repairs(t)
	inst := e.nv.Toolkit(c.Containerd).StartInstaller(legacyToolkit())
	e.waitLoaded(t, "the toolkit after gpurun: the agent's repair", func(l loaded) bool { return l.def == "gpurun" && l.handlers["nvidia"] != "" })
	t.Logf("the toolkit started after gpurun; containerd had loaded gpurun's repaired registration %s later", time.Since(start).Round(100*time.Millisecond))
	e.agentReady(t, "the toolkit after gpurun, repaired")
	keep := e.expect(t, "the toolkit after gpurun", ns, nvGPUPod("gpu", "", e.want, true), nvGPUPod("gpu-nvidia", "nvidia", engineDefaultKiB, true), plainNVPod())
	e.doctor(t, "the toolkit after gpurun, repaired", true, map[string]doctor.Status{
		"containerd.pods": doctor.Problem, "runtime.nvidia-default": doctor.OK, "runtime.cycle": doctor.OK, "runtime.chain": doctor.OK})
	keep()
	// gpurun's registration now chains NVIDIA's runtime (the GPU pods
	// above got their GPU through it), installed again at most once: by
	// the agent's repair, or by a new agent container (the kubelet may
	// start the agent's container anew after containerd's restart; its
	// install then chains NVIDIA's runtime at once, with nothing to
	// repair). More would be the two agents restarting containerd in turn.
	if n := e.repairs(t) - repairs; n > 1 {
		t.Errorf("the agent repaired gpurun's registration %d times after the toolkit's start; want at most once\n%s", n, e.agentLog())
	}
	if pol, err := policy.Load(c.PolicyPath, true); err != nil {
		t.Error(err)
	} else if !nvidia.IsRuntime(pol.Runtime) {
		t.Errorf("the toolkit after gpurun: the node's policy chains %q; want NVIDIA's runtime\n%s", pol.Runtime, e.agentLog())
	}

	// The toolkit goes first.
	inst.Stop()
	e.expect(t, "the toolkit gone", ns, nvGPUPod("gpu", "", e.want, true), plainNVPod())()
	uninstall()
	e.waitLoaded(t, "both uninstalled", func(l loaded) bool { return sameLoaded(l, original) })
}

// agentLogAll is the node agent's whole log. The agent may have done its
// work (containerd shows it) before the kubelet reports its container
// started, and until then its log cannot be read: it waits for that.
func (e *nvClusterEnv) agentLogAll(t *testing.T) string {
	t.Helper()
	var out string
	if err := waitUntil(agentTimeout, func() (bool, string) {
		var err error
		out, err = e.c.Kubectl("logs", "-n", "gpurun-system", "daemonset/gpurun-node")
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	}); err != nil {
		t.Fatalf("the agent's log: %v", err)
	}
	return out
}
