//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/diagnose/doctor"
	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/integration/harness"
)

// The containerd lines the NVIDIA tests run on: Debian's 1.6 and 2.x
// from $GPURUN_TEST_CONTAINERD2_BIN.
const (
	line16 = "containerd-1.6"
	line2  = "containerd-2.x"
)

// gpuNode is a GPU node of the NVIDIA tests: a containerd of one line
// running on a fake NVIDIA node (harness.NVIDIA: a GPU that is a device
// node, its CDI specs, the toolkit's binaries), NVIDIA's toolkit for it,
// and gpurun's policy, log and install state.
type gpuNode struct {
	t    *testing.T
	line string
	nv   *harness.NVIDIA
	c    *harness.Containerd
	c2   *harness.Containerd2 // nil on 1.6
	tk   *harness.Toolkit
	// policy, log and state are gpurun's policy file (GPURUN_CONFIG of
	// containerd's runtimes), its log and the install state.
	policy, log, state string
	// want is the policy's /dev/shm for a container without a memory
	// limit, in KiB.
	want int64
}

func newGPUNode(t *testing.T, line string) *gpuNode {
	t.Helper()
	nv := harness.NewNVIDIA(t)
	pol, logFile := shimConfig(t, "")
	// NVIDIA's runtime as nvidia-ctk registers it reads the toolkit's
	// config (CDI mode) through containerd's environment; the installer's
	// wrappers name their own.
	nv.RuntimeConfig()
	env := []string{"GPURUN_CONFIG=" + pol, nv.RuntimeEnv()}
	g := &gpuNode{t: t, line: line, nv: nv, policy: pol, log: logFile,
		state: filepath.Join(t.TempDir(), "install-state.json"), want: hostTarget(t) / 1024}
	if line == line16 {
		g.c = harness.StartContainerd(t, harness.ContainerdOptions{NVIDIA: nv, Env: env})
	} else {
		g.c2 = harness.StartContainerd2(t, harness.Containerd2Options{NVIDIA: nv, Env: env})
		g.c = g.c2.Containerd
	}
	g.tk = nv.Toolkit(g.c)
	return g
}

// ownDropIn is the drop-in directory of gpurun's own next to the config.
func (g *gpuNode) ownDropIn() string { return filepath.Join(filepath.Dir(g.c.ConfigPath), "gpurun.d") }

// gpurun runs the gpurun CLI with the node's policy.
func (g *gpuNode) gpurun(args ...string) (string, error) {
	cmd := exec.Command(bin(g.t, "gpurun"), args...)
	cmd.Env = append(os.Environ(), "GPURUN_CONFIG="+g.policy, "DOCKER_HOST=unix:///nonexistent.sock")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// install runs `gpurun install containerd` (or uninstall) on the node's
// config with its runtime, state and policy, and extra args.
func (g *gpuNode) install(verb string, args ...string) (string, error) {
	return g.gpurun(append([]string{verb, "containerd", "--config", g.c.ConfigPath, "--runtime-path", bin(g.t, "gpurun-runtime"),
		"--state", g.state, "--policy", g.policy}, args...)...)
}

// mustInstall is install failing the test on an error.
func (g *gpuNode) mustInstall(verb string, args ...string) string {
	g.t.Helper()
	out, err := g.install(verb, args...)
	if err != nil {
		g.t.Fatalf("gpurun %s containerd %v: %v\n%s", verb, args, err, out)
	}
	return out
}

// loaded is what the running containerd's CRI plugin loaded: its
// handlers (name -> BinaryName) and its default.
type loaded struct {
	handlers map[string]string
	def      string
}

func (l loaded) String() string {
	return fmt.Sprintf("handlers %v, default %s", l.handlers, l.def)
}

// loaded asks the running containerd.
func (g *gpuNode) loaded() loaded {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := g.c.Runtime().Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		g.t.Fatalf("CRI status: %v", err)
	}
	r, ok := containerd.ReadRunning(resp.GetInfo())
	if !ok {
		g.t.Fatal("containerd does not report its CRI config")
	}
	l := loaded{handlers: map[string]string{}, def: r.DefaultRuntime}
	for name, raw := range r.Runtimes {
		var rt struct {
			Options map[string]any `json:"options"`
		}
		_ = json.Unmarshal(raw, &rt)
		b, _ := rt.Options["BinaryName"].(string)
		l.handlers[name] = b
	}
	return l
}

// wantLoaded fails the test unless containerd loaded exactly want: the
// configuration another tool alone would leave.
func (g *gpuNode) wantLoaded(what string, want loaded) {
	g.t.Helper()
	got := g.loaded()
	if got.def != want.def || !maps.Equal(got.handlers, want.handlers) {
		g.t.Errorf("%s: containerd loaded %s; want %s", what, got, want)
	}
}

// gpuPodSpec is a pod of one container, "trainer".
type gpuPodSpec struct {
	name, handler, namespace string
	env                      []string
	cdi                      []string
	annotations              map[string]string
}

// The pods the tests make, as the GPU stack makes them.
func gpuEnvPod(name, handler string) gpuPodSpec {
	// The toolkit's legacy modes: CUDA images set NVIDIA_VISIBLE_DEVICES,
	// NVIDIA's runtime (in CDI mode here) injects the GPU.
	return gpuPodSpec{name: name, handler: handler, env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}
}

func cdiPod(name, device string) gpuPodSpec {
	// GPU Operator 25.10+ (native CDI) and the DRA driver: the kubelet
	// hands containerd CDI names, the device plugin sets
	// NVIDIA_VISIBLE_DEVICES=void.
	return gpuPodSpec{name: name, env: []string{"NVIDIA_VISIBLE_DEVICES=void"}, cdi: []string{device}}
}

func nriAnnotatedPod(name, namespace, devices string) gpuPodSpec {
	// GPU Operator 26.3+ with NVIDIA's NRI plugin: a pod annotation names
	// the container's CDI devices.
	return gpuPodSpec{name: name, namespace: namespace, annotations: map[string]string{"nvidia.cdi.k8s.io/container.trainer": devices}}
}

func plainPod(name string) gpuPodSpec { return gpuPodSpec{name: name} }

// seen is what a pod's container sees.
type seen struct {
	pod, ctr    string
	shmKiB      int64
	device, lib bool
}

// run makes the pod and returns what its container sees; the pod keeps
// running.
func (g *gpuNode) run(p gpuPodSpec) (seen, error) {
	var s seen
	var err error
	s.pod, err = g.c.TryRunPod(harness.PodOptions{Name: p.name, Namespace: p.namespace, RuntimeHandler: p.handler, Annotations: p.annotations})
	if err != nil {
		return s, err
	}
	if s.ctr, err = g.c.TryCreateContainer(s.pod, harness.ContainerOptions{Name: "trainer", Env: p.env, CDIDevices: p.cdi}); err != nil {
		return s, err
	}
	if err = g.c.TryStartContainer(s.ctr); err != nil {
		return s, err
	}
	out, err := g.c.Exec(s.ctr, "sh", "-c", "df -k /dev/shm; if [ -c "+harness.GPUDevicePath+" ]; then echo has-device; fi; cat "+harness.DriverLibPath+" 2>/dev/null; true")
	if err != nil {
		return s, err
	}
	s.shmKiB = dfKiB(g.t, out)
	s.device = strings.Contains(out, "has-device")
	s.lib = strings.Contains(out, strings.TrimSpace(harness.DriverLibContent))
	return s, nil
}

// expect makes the pod, checks its /dev/shm (in KiB) and whether it got
// the GPU (device node and driver library), and returns it running.
func (g *gpuNode) expect(what string, p gpuPodSpec, wantKiB int64, wantGPU bool) seen {
	g.t.Helper()
	s, err := g.run(p)
	if err != nil {
		g.t.Errorf("%s: pod %s (handler %q) did not start: %v\n--- containerd log tail ---\n%s\n--- gpurun log tail ---\n%s", what, p.name, p.handler, err, g.c.LogTail(15), lastLines(g.log, 5))
		return s
	}
	if s.shmKiB != wantKiB || s.device != wantGPU || s.lib != wantGPU {
		g.t.Errorf("%s: pod %s (handler %q): /dev/shm %d KiB, device %v, driver library %v; want %d KiB, GPU %v\n--- gpurun log tail ---\n%s",
			what, p.name, p.handler, s.shmKiB, s.device, s.lib, wantKiB, wantGPU, lastLines(g.log, 5))
	}
	return s
}

// remove removes pods the test made.
func (g *gpuNode) remove(pods ...seen) {
	for _, s := range pods {
		if s.pod != "" {
			g.c.RemovePod(s.pod)
		}
	}
}

// doctor runs `gpurun doctor --json` on the node's config and containerd.
func (g *gpuNode) doctor() (doctor.Report, int) {
	g.t.Helper()
	cmd := execGpurun(g.t, "doctor", "--json", "--containerd-config", g.c.ConfigPath, "--runtime-endpoint", "unix://"+g.c.Address)
	cmd.Env = append(os.Environ(), "GPURUN_CONFIG="+g.policy, "DOCKER_HOST=unix:///nonexistent.sock")
	out, _ := cmd.Output()
	return decodeReport(g.t, string(out)), cmd.ProcessState.ExitCode()
}

// wantDoctor checks doctor's verdict on the node's containerd: the
// status of the named checks, and whether any containerd or runtime
// check is a problem (problems elsewhere on the machine, its own
// /dev/shm say, are not the node's).
func (g *gpuNode) wantDoctor(what string, problem bool, want map[string]doctor.Status) doctor.Report {
	g.t.Helper()
	r, code := g.doctor()
	var problems []string
	for _, c := range r.Checks {
		if c.Status == doctor.Problem && (strings.HasPrefix(c.Name, "containerd") || strings.HasPrefix(c.Name, "runtime") || c.Name == "remount") {
			problems = append(problems, c.Name+": "+c.Detail)
		}
	}
	dump := func() string {
		var b strings.Builder
		for _, c := range r.Checks {
			fmt.Fprintf(&b, "  %s %s: %s", c.Status, c.Name, c.Detail)
			if c.Fix != "" {
				fmt.Fprintf(&b, " [fix: %s]", c.Fix)
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	switch {
	case problem && (len(problems) == 0 || code != 1):
		g.t.Errorf("%s: doctor exits %d with no problem about containerd; want one\n%s", what, code, dump())
	case !problem && len(problems) > 0:
		g.t.Errorf("%s: doctor finds %s; want none\n%s", what, strings.Join(problems, "; "), dump())
	}
	for name, st := range want {
		c, ok := r.Find(name)
		if !ok || c.Status != st {
			g.t.Errorf("%s: doctor check %s is %s (%s); want %s\n%s", what, name, c.Status, c.Detail, st, dump())
		}
	}
	return r
}

// lastLines returns the last n lines of a file.
func lastLines(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// countLog counts the records of gpurun's log with msg.
func (g *gpuNode) countLog(msg string) int {
	data, _ := os.ReadFile(g.log)
	return strings.Count(string(data), `"msg":"`+msg+`"`)
}

// forLines runs f on a GPU node of each containerd line, in parallel.
func forLines(t *testing.T, lines []string, f func(t *testing.T, g *gpuNode)) {
	for _, line := range lines {
		t.Run(line, func(t *testing.T) {
			t.Parallel()
			f(t, newGPUNode(t, line))
		})
	}
}

// TestNVIDIAToolkitFirst is the toolkit's legacy mode as an admin sets it
// up with `nvidia-ctk runtime configure --runtime=containerd
// --set-as-default` (a drop-in, conf.d/99-nvidia.toml, with a copy of the
// CRI section and the nvidia handler as the default), gpurun installed
// after it, then gpurun taken out again, on containerd 1.6 and 2.x.
// gpurun's install in place is refused, naming the one that works (a
// drop-in directory of its own, read last): with it GPU pods are sized and
// get their GPU from NVIDIA's runtime, which gpurun chains; pods with
// RuntimeClass nvidia still start (on 1.6 that drop-in carries the nvidia
// handler); plain pods keep 64 MiB; doctor is satisfied, and calls a GPU
// pod that bypasses gpurun through the nvidia handler a problem. The
// uninstall leaves containerd with what the toolkit alone had.
func TestNVIDIAToolkitFirst(t *testing.T) {
	forLines(t, []string{line16, line2}, func(t *testing.T, g *gpuNode) {
		g.tk.Configure(true)
		g.c.Restart()
		alone := g.loaded()
		if alone.def != "nvidia" {
			t.Fatalf("the toolkit alone: %s; want nvidia the default", alone)
		}
		gpu := g.expect("the toolkit alone", gpuEnvPod("gpu", ""), engineDefaultKiB, true)
		g.wantDoctor("the toolkit alone, a GPU pod at 64 MiB", true, map[string]doctor.Status{"containerd.pods": doctor.Problem})
		g.remove(gpu)

		before, _ := os.ReadFile(g.c.ConfigPath)
		out, err := g.install("install", "--set-as-default")
		if err == nil || !strings.Contains(out, "--drop-in "+g.ownDropIn()) {
			t.Errorf("install in place beside NVIDIA's drop-in: %v; want a refusal naming --drop-in %s\n%s", err, g.ownDropIn(), out)
		}
		if after, _ := os.ReadFile(g.c.ConfigPath); string(after) != string(before) {
			t.Error("a refused install changed config.toml")
		}
		out, err = g.install("install", "--set-as-default", "--drop-in", filepath.Dir(g.tk.DropIn))
		if err == nil || !strings.Contains(out, "--drop-in "+g.ownDropIn()) {
			t.Errorf("install into NVIDIA's conf.d: %v; want a refusal naming --drop-in %s\n%s", err, g.ownDropIn(), out)
		}

		g.mustInstall("install", "--set-as-default", "--drop-in", g.ownDropIn())
		g.c.Restart()
		l := g.loaded()
		if l.def != "gpurun" || l.handlers["nvidia"] != alone.handlers["nvidia"] {
			t.Errorf("gpurun in its own drop-in: %s; want gpurun the default and the toolkit's nvidia handler", l)
		}
		gpu = g.expect("gpurun after the toolkit", gpuEnvPod("gpu", ""), g.want, true)
		plain := g.expect("gpurun after the toolkit", plainPod("plain"), engineDefaultKiB, false)
		g.wantDoctor("gpurun after the toolkit", false, map[string]doctor.Status{"containerd.runtime": doctor.OK, "runtime.chain": doctor.OK})
		bypass := g.expect("RuntimeClass nvidia", gpuEnvPod("gpu-nvidia", "nvidia"), engineDefaultKiB, true)
		g.wantDoctor("a GPU pod of RuntimeClass nvidia at 64 MiB", true, map[string]doctor.Status{"containerd.pods": doctor.Problem})
		g.remove(gpu, plain, bypass)

		out = g.mustInstall("uninstall")
		g.c.Restart()
		g.wantLoaded("gpurun uninstalled", alone)
		gpu = g.expect("gpurun uninstalled", gpuEnvPod("gpu", ""), engineDefaultKiB, true)
		g.remove(gpu)
		if cfg := readFile(g.c.ConfigPath); strings.Contains(cfg, `"gpurun"`) || strings.Contains(cfg, "gpurun-runtime") {
			t.Errorf("config.toml still names gpurun after uninstall:\n%s\n%s", readFile(g.c.ConfigPath), out)
		}
	})
}
