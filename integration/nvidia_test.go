//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/gpurun/gpurun/node/shim"
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
	l, err := tryLoaded(g.c)
	if err != nil {
		g.t.Fatal(err)
	}
	return l
}

// tryLoaded asks containerd c what its CRI plugin loaded.
func tryLoaded(c *harness.Containerd) (loaded, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Runtime().Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return loaded{}, fmt.Errorf("CRI status: %w", err)
	}
	r, ok := containerd.ReadRunning(resp.GetInfo())
	if !ok {
		return loaded{}, errors.New("containerd does not report its CRI config")
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
	return l, nil
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
	return doctorOn(g.t, g.c, g.policy)
}

// doctorOn runs `gpurun doctor --json` on containerd c's config and CRI
// endpoint, with policy as gpurun's policy file.
func doctorOn(t *testing.T, c *harness.Containerd, policy string) (doctor.Report, int) {
	t.Helper()
	cmd := execGpurun(t, "doctor", "--json", "--containerd-config", c.ConfigPath, "--runtime-endpoint", "unix://"+c.Address)
	cmd.Env = append(os.Environ(), "GPURUN_CONFIG="+policy, "DOCKER_HOST=unix:///nonexistent.sock")
	out, _ := cmd.Output()
	return decodeReport(t, string(out)), cmd.ProcessState.ExitCode()
}

// wantDoctor checks doctor's verdict on the node's containerd: the
// status of the named checks, and whether any containerd or runtime
// check is a problem (problems elsewhere on the machine, its own
// /dev/shm say, are not the node's).
func (g *gpuNode) wantDoctor(what string, problem bool, want map[string]doctor.Status) doctor.Report {
	g.t.Helper()
	r, code := g.doctor()
	wantVerdict(g.t, what, r, code, problem, want)
	return r
}

// wantVerdict checks a doctor report on a node (see wantDoctor); code is
// doctor's exit status.
func wantVerdict(t *testing.T, what string, r doctor.Report, code int, problem bool, want map[string]doctor.Status) {
	t.Helper()
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
		t.Errorf("%s: doctor exits %d with no problem about containerd; want one\n%s", what, code, dump())
	case !problem && len(problems) > 0:
		t.Errorf("%s: doctor finds %s; want none\n%s", what, strings.Join(problems, "; "), dump())
	}
	for name, st := range want {
		c, ok := r.Find(name)
		if !ok || c.Status != st {
			t.Errorf("%s: doctor check %s is %s (%s); want %s\n%s", what, name, c.Status, c.Detail, st, dump())
		}
	}
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
		out, err := g.install("install", "--set-as-default", "--no-auto-drop-in")
		if err == nil || !strings.Contains(out, "--drop-in "+g.ownDropIn()) {
			t.Errorf("install in place beside NVIDIA's drop-in, --no-auto-drop-in: %v; want a refusal naming --drop-in %s\n%s", err, g.ownDropIn(), out)
		}
		if after, _ := os.ReadFile(g.c.ConfigPath); string(after) != string(before) {
			t.Error("a refused install changed config.toml")
		}
		out, err = g.install("install", "--set-as-default", "--drop-in", filepath.Dir(g.tk.DropIn))
		if err == nil || !strings.Contains(out, "--drop-in "+g.ownDropIn()) {
			t.Errorf("install into NVIDIA's conf.d: %v; want a refusal naming --drop-in %s\n%s", err, g.ownDropIn(), out)
		}

		// The plain command takes the way that works, and says so.
		if out := g.mustInstall("install", "--set-as-default"); !strings.Contains(out, "installing into "+g.ownDropIn()+" instead") {
			t.Errorf("install in place beside NVIDIA's drop-in: want it to go into %s and say so, got\n%s", g.ownDropIn(), out)
		}
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

// TestNVIDIAOperator is the GPU Operator's toolkit container
// (nvidia-ctk-installer in its legacy mode: nvidia the default handler)
// first, then gpurun's default-runtime mode in a drop-in directory of its
// own, on containerd 1.6 and 2.x, through the toolkit pod's restart
// cycle (SIGTERM: it reverts its config and restarts containerd; a fresh
// start: it configures again from `containerd config dump` and restarts
// it), then gpurun taken out, then the toolkit. After each step GPU pods
// start, get their GPU and are sized, plain pods keep 64 MiB, and doctor
// says what is wrong. The toolkit's second start, with gpurun the
// default, lists gpurun-runtime as NVIDIA's low-level runtime: pods still
// start, get their GPU and are sized (gpurun-runtime, called back, runs
// runc), and doctor calls the cycle a problem, until the toolkit's
// NVIDIA_CONTAINER_RUNTIME_RUNTIMES names runc and crun. Each uninstall
// leaves containerd as the other tool alone would have it.
func TestNVIDIAOperator(t *testing.T) {
	forLines(t, []string{line16, line2}, func(t *testing.T, g *gpuNode) {
		original := g.loaded()
		inst := g.tk.StartInstaller(harness.InstallerOptions{})
		alone := g.loaded()
		if alone.def != "nvidia" || alone.handlers["nvidia-cdi"] == "" {
			t.Fatalf("the toolkit alone: %s; want its nvidia handlers, nvidia the default", alone)
		}
		// pods checks a GPU pod and a plain pod of the default handler,
		// and a GPU pod of handler nvidia (nvidiaKiB: its /dev/shm; 0: the
		// handler is not there).
		pods := func(what string, nvidiaKiB int64) {
			t.Helper()
			g.remove(g.expect(what, gpuEnvPod("gpu", ""), g.want, true), g.expect(what, plainPod("plain"), engineDefaultKiB, false))
			if nvidiaKiB != 0 {
				g.remove(g.expect(what+", RuntimeClass nvidia", gpuEnvPod("gpu-nvidia", "nvidia"), nvidiaKiB, true))
			}
		}

		if out, err := g.install("install", "--set-as-default", "--no-auto-drop-in"); err == nil || !strings.Contains(out, "--drop-in "+g.ownDropIn()) {
			t.Errorf("install in place beside the toolkit, --no-auto-drop-in: %v; want a refusal naming --drop-in %s\n%s", err, g.ownDropIn(), out)
		}
		g.mustInstall("install", "--set-as-default", "--drop-in", g.ownDropIn())
		g.c.Restart()
		pods("gpurun after the toolkit", engineDefaultKiB)
		g.wantDoctor("gpurun after the toolkit", false, map[string]doctor.Status{"runtime.nvidia-default": doctor.OK, "runtime.cycle": doctor.OK})

		// The toolkit pod restarts: its cleanup, then a fresh start.
		inst.Stop()
		nvidiaKiB := int64(0) // 2.x: the handler went with the toolkit's drop-in
		if g.line == line16 {
			nvidiaKiB = engineDefaultKiB // 1.6: gpurun's drop-in carries a copy of it
		}
		pods("the toolkit stopped", nvidiaKiB)
		g.wantDoctor("the toolkit stopped", false, nil)
		cycles := g.countLog(shim.MsgCycle)
		inst = g.tk.StartInstaller(harness.InstallerOptions{})
		// NVIDIA's runtime now runs gpurun-runtime for the nvidia handler
		// too, which sizes its pods.
		pods("the toolkit started again", g.want)
		if n := g.countLog(shim.MsgCycle); n == cycles {
			t.Errorf("the toolkit started again with gpurun the default: no runtime cycle broken; NVIDIA's runtimes:\n%s", readFile(g.tk.RuntimeConfig))
		}
		g.wantDoctor("NVIDIA's runtime lists gpurun-runtime", true, map[string]doctor.Status{"runtime.cycle": doctor.Problem})
		inst.Stop()
		inst = g.tk.StartInstaller(harness.InstallerOptions{Env: []string{"NVIDIA_CONTAINER_RUNTIME_RUNTIMES=runc,crun"}})
		cycles = g.countLog(shim.MsgCycle)
		pods("the toolkit started again, its runtimes runc and crun", engineDefaultKiB)
		if n := g.countLog(shim.MsgCycle); n != cycles {
			t.Errorf("NVIDIA_CONTAINER_RUNTIME_RUNTIMES=runc,crun: %d runtime cycles broken", n-cycles)
		}
		g.wantDoctor("NVIDIA's runtimes runc and crun", false, map[string]doctor.Status{"runtime.cycle": doctor.OK})

		// gpurun out first: the toolkit's configuration remains.
		g.mustInstall("uninstall")
		g.c.Restart()
		g.wantLoaded("gpurun uninstalled, the toolkit stays", alone)
		g.remove(g.expect("gpurun uninstalled", gpuEnvPod("gpu", ""), engineDefaultKiB, true))
		inst.Stop()
		g.wantLoaded("both uninstalled", original)
	})
}

// TestNVIDIAOperatorAfterGpurun is gpurun first (default-runtime mode, a
// drop-in directory of its own), the GPU Operator's toolkit second (its
// legacy mode, its runtimes runc and crun as the GPU Operator's docs
// advise beside another default runtime), on containerd 1.6 and 2.x: the
// toolkit's drop-in, imported after gpurun's, makes nvidia the default,
// and GPU pods bypass gpurun — doctor calls that a problem and names the
// fix, installing gpurun again, which puts its drop-in last and chains
// NVIDIA's runtime. Then the toolkit goes first: gpurun's pods still
// start and are sized (a chained runtime that went away is not fatal),
// doctor says so, and installing gpurun again leaves gpurun alone's
// configuration; then gpurun goes.
func TestNVIDIAOperatorAfterGpurun(t *testing.T) {
	forLines(t, []string{line16, line2}, func(t *testing.T, g *gpuNode) {
		original := g.loaded()
		g.mustInstall("install", "--set-as-default", "--drop-in", g.ownDropIn())
		g.c.Restart()
		g.remove(g.expect("gpurun alone", gpuEnvPod("gpu", ""), g.want, false))
		gpurunAlone := g.loaded()

		inst := g.tk.StartInstaller(harness.InstallerOptions{Env: []string{"NVIDIA_CONTAINER_RUNTIME_RUNTIMES=runc,crun"}})
		if l := g.loaded(); l.def != "nvidia" {
			t.Errorf("the toolkit after gpurun: %s; want the toolkit's default read last", l)
		}
		bypassed := g.expect("the toolkit after gpurun", gpuEnvPod("gpu", ""), engineDefaultKiB, true)
		g.wantDoctor("the toolkit's default read after gpurun's", true, map[string]doctor.Status{"containerd.pods": doctor.Problem})
		g.remove(bypassed)

		g.mustInstall("install", "--set-as-default", "--drop-in", g.ownDropIn())
		g.c.Restart()
		g.remove(g.expect("gpurun installed again", gpuEnvPod("gpu", ""), g.want, true),
			g.expect("gpurun installed again", plainPod("plain"), engineDefaultKiB, false),
			g.expect("gpurun installed again, RuntimeClass nvidia", gpuEnvPod("gpu-nvidia", "nvidia"), engineDefaultKiB, true))
		g.wantDoctor("gpurun installed again", false, map[string]doctor.Status{"runtime.nvidia-default": doctor.OK, "runtime.cycle": doctor.OK})

		// The toolkit goes first: its pod's cleanup leaves its files, and
		// gpurun-runtime still hands over to its runtime; then its files
		// go too (the operator uninstalled), and gpurun-runtime runs runc
		// instead, saying so.
		inst.Stop()
		g.remove(g.expect("the toolkit's pod gone", gpuEnvPod("gpu", ""), g.want, true))
		if err := os.RemoveAll(g.tk.Root); err != nil {
			t.Fatal(err)
		}
		missing := g.countLog(shim.MsgRuntimeMissing)
		g.remove(g.expect("the toolkit's files gone", gpuEnvPod("gpu", ""), g.want, false))
		if g.countLog(shim.MsgRuntimeMissing) == missing {
			t.Errorf("the chained runtime gone: gpurun-runtime did not say so")
		}
		g.wantDoctor("the chained runtime gone", true, map[string]doctor.Status{"runtime.chain": doctor.Problem})
		g.mustInstall("install", "--set-as-default", "--drop-in", g.ownDropIn())
		g.c.Restart()
		g.wantLoaded("the toolkit uninstalled, gpurun installed again", gpurunAlone)
		g.remove(g.expect("the toolkit uninstalled, gpurun installed again", gpuEnvPod("gpu", ""), g.want, false))
		g.wantDoctor("gpurun alone again", false, nil)
		g.mustInstall("uninstall")
		g.c.Restart()
		g.wantLoaded("both uninstalled", original)
	})
}

// TestNVIDIANativeCDI is the GPU Operator's default since 25.10 (native
// CDI) and NVIDIA's DRA driver, on containerd 2.x: the kubelet hands
// containerd CDI device names (ContainerConfig.CDIDevices; the device
// plugin also sets NVIDIA_VISIBLE_DEVICES=void), containerd injects them
// from the specs, and the toolkit's installer registers its handlers but
// does not make nvidia the default. gpurun's NRI plugin (the mode that
// fits: no containerd config) sizes those pods, of any handler, through
// the toolkit pod's restart cycle; plain pods keep 64 MiB; doctor sees
// the plugin and has nothing to say. gpurun's default-runtime mode works
// there too: the CDI devices in the spec are GPU evidence.
func TestNVIDIANativeCDI(t *testing.T) {
	forLines(t, []string{line2}, func(t *testing.T, g *gpuNode) {
		text, _ := nriPolicy(t, "")
		want := nriTarget(t, text)
		plugin := startNRIPlugin(t, text, g.c2.NRISocket)
		plugin.waitLog(t, "registered with the runtime", 1)
		// Each start and stop of the toolkit restarts containerd; the
		// plugin reconnects (with backoff), and a pod started before it
		// has is not sized (docs/nri.md: a pod created while the plugin is
		// not connected): the test starts pods once it has.
		reregistered := func(restart func()) {
			t.Helper()
			n := plugin.count("registered with the runtime")
			restart()
			plugin.waitLog(t, "registered with the runtime", n+1)
		}
		var inst *harness.Installer
		reregistered(func() {
			inst = g.tk.StartInstaller(harness.InstallerOptions{Env: []string{"NVIDIA_RUNTIME_SET_AS_DEFAULT=false"}})
		})
		if l := g.loaded(); l.def != "runc" || l.handlers["nvidia"] == "" {
			t.Fatalf("the toolkit in CDI mode: %s; want its handlers, runc the default", l)
		}
		gpu := cdiPod("gpu", harness.CDIKind+"=0")
		claim := cdiPod("claim", harness.CDIDRAKind+"=claim-0-gpu-0")
		pods := func(what string) {
			t.Helper()
			nvidiaCDI := cdiPod("gpu-nvidia-cdi", harness.CDIKind+"="+harness.GPUUUID)
			nvidiaCDI.handler = "nvidia-cdi"
			g.remove(g.expect(what, gpu, want, true), g.expect(what+", a DRA claim", claim, want, true),
				g.expect(what, plainPod("plain"), engineDefaultKiB, false))
			if _, ok := g.loaded().handlers["nvidia-cdi"]; ok {
				g.remove(g.expect(what+", RuntimeClass nvidia-cdi", nvidiaCDI, want, true))
			}
		}
		pods("gpurun's NRI plugin beside the toolkit")
		keep := g.expect("gpurun's NRI plugin beside the toolkit", gpu, want, true)
		g.wantDoctor("gpurun's NRI plugin beside the toolkit", false, map[string]doctor.Status{"containerd.runtime": doctor.OK, "containerd.pods": doctor.OK})
		g.remove(keep)
		reregistered(inst.Stop)
		pods("the toolkit stopped")
		reregistered(func() {
			inst = g.tk.StartInstaller(harness.InstallerOptions{Env: []string{"NVIDIA_RUNTIME_SET_AS_DEFAULT=false"}})
		})
		pods("the toolkit started again")
		plugin.kill()

		// The runtime handler instead.
		g.mustInstall("install", "--set-as-default", "--drop-in", g.ownDropIn())
		g.c.Restart()
		g.remove(g.expect("gpurun's default runtime", gpu, g.want, true), g.expect("gpurun's default runtime, a DRA claim", claim, g.want, true))
		g.wantDoctor("gpurun's default runtime beside the toolkit in CDI mode", false, nil)
		g.mustInstall("uninstall")
		inst.Stop()
	})
}

// TestNVIDIANRIPlugin is the GPU Operator 26.3+ with NVIDIA's NRI plugin
// (cdi.nriPluginEnabled): the toolkit's installer leaves containerd's
// config alone and its plugin injects the CDI devices a pod annotation
// names (nvidia.cdi.k8s.io/container.<name>); management.nvidia.com/gpu
// devices only in its own namespaces. gpurun's NRI plugin runs beside it:
// such pods are sized (the annotation is GPU evidence, management devices
// included: the operator's own operands get a /dev/shm like any GPU pod,
// which costs nothing until used), also while the toolkit's pod restarts;
// plain pods keep 64 MiB; doctor sees gpurun's plugin and has nothing to
// say.
func TestNVIDIANRIPlugin(t *testing.T) {
	forLines(t, []string{line2}, func(t *testing.T, g *gpuNode) {
		text, _ := nriPolicy(t, "")
		want := nriTarget(t, text)
		plugin := startNRIPlugin(t, text, g.c2.NRISocket)
		plugin.waitLog(t, "registered with the runtime", 1)
		before := g.loaded()
		inst := g.tk.StartInstaller(harness.InstallerOptions{NRI: true, NRINamespace: "gpu-operator"})
		g.wantLoaded("the toolkit in NRI mode", before)
		operand := nriAnnotatedPod("dcgm", "gpu-operator", harness.CDIManagementKind+"=all")
		elsewhere := nriAnnotatedPod("management-elsewhere", "default", harness.CDIManagementKind+"=all")
		pods := func(what string, nvidiaPlugin bool) {
			t.Helper()
			g.remove(g.expect(what, nriAnnotatedPod("gpu", "default", harness.CDIKind+"=0"), want, nvidiaPlugin),
				g.expect(what+", the operator's operand", operand, want, nvidiaPlugin),
				g.expect(what+", management devices outside the operator's namespace", elsewhere, want, false),
				g.expect(what, plainPod("plain"), engineDefaultKiB, false))
		}
		pods("NVIDIA's NRI plugin and gpurun's", true)
		keep := g.expect("NVIDIA's NRI plugin and gpurun's", nriAnnotatedPod("gpu", "default", harness.CDIKind+"=0"), want, true)
		g.wantDoctor("NVIDIA's NRI plugin and gpurun's", false, map[string]doctor.Status{"containerd.runtime": doctor.OK, "containerd.pods": doctor.OK})
		g.remove(keep)
		inst.Stop()
		pods("the toolkit stopped", false)
		// The installer waits for its signal once its plugin has
		// registered with containerd.
		inst = g.tk.StartInstaller(harness.InstallerOptions{NRI: true, NRINamespace: "gpu-operator"})
		pods("the toolkit started again", true)
		inst.Stop()
	})
}
