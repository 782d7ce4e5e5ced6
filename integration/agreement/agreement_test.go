package agreement_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/docker/docker/api/types/container"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/compose"
	"github.com/gpurun/gpurun/docker/launch"
	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/node/nri"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// The agreement test: every container captured from a real engine by
// hack/capture-fixtures.sh goes through every front door that can take
// it, and all of them plan the same action and size under the same facts
// and policy — or the difference is one of the exceptions below, stated
// with its reason.

const fixtureDir = "../../oci/testdata/fixtures"

// captureIndex is capture/index.json, written by hack/capture-fixtures.sh.
type captureIndex struct {
	Host struct {
		MemoryBytes    int64    `json:"memory_bytes"`
		GPUDeviceNodes []string `json:"gpu_device_nodes"`
	} `json:"host"`
	Fixtures []captured `json:"fixtures"`
}

// captured is one fixture as the capture recorded it.
type captured struct {
	File    string   `json:"file"`
	Engine  string   `json:"engine"`
	Argv    []string `json:"argv"`
	HostShm []struct {
		Source    string `json:"source"`
		SizeBytes *int64 `json:"size_bytes"`
	} `json:"host_shm"`
	Docker *struct {
		DataRoot       string                    `json:"data_root"`
		DefaultShmSize int64                     `json:"default_shm_size"`
		Inspect        container.InspectResponse `json:"inspect"`
		ImageEnv       []string                  `json:"image_env"`
		Donor          string                    `json:"donor"`
	} `json:"docker"`
	Compose *struct {
		File    string `json:"file"`
		Service string `json:"service"`
	} `json:"compose"`

	name string
	spec *specs.Spec
}

func loadIndex(t *testing.T) (captureIndex, map[string]*captured) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, "capture", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx captureIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatalf("capture/index.json: %v", err)
	}
	byFile := map[string]*captured{}
	for i := range idx.Fixtures {
		fx := &idx.Fixtures[i]
		fx.name = strings.TrimSuffix(fx.File, ".json")
		cfg, err := specfile.Load(filepath.Join(fixtureDir, fx.File))
		if err != nil {
			t.Fatal(err)
		}
		fx.spec = cfg.Spec
		byFile[fx.File] = fx
	}
	return idx, byFile
}

// A door is one front door of gpurun.
type door string

const (
	doorPlan     door = "gpurun plan --spec" // the captured config.json: the reference
	doorShim     door = "gpurun-runtime"
	doorHook     door = "gpurun hook"
	doorNRI      door = "gpurun nri"
	doorLauncher door = "gpurun run"              // docker run's argv, dry run against a fake daemon
	doorDoctor   door = "gpurun doctor CONTAINER" // docker inspect
	doorCompose  door = "gpurun compose migrate"  // the compose file's service
)

var doors = []door{doorPlan, doorShim, doorHook, doorNRI, doorLauncher, doorDoctor, doorCompose}

// outcome is what a door plans, reduced to what every door can say: the
// action, the size, and the kinds of the decision's warnings it passes on.
type outcome struct {
	action oci.Action
	size   int64  // when the action is not none
	warns  string // the warnings' kinds, sorted, joined by ","
}

func (o outcome) String() string {
	s := "none"
	if o.action != oci.ActionNone {
		s = fmt.Sprintf("%s %s", o.action, policy.FormatSize(o.size))
	}
	if o.warns != "" {
		s += " (warns " + o.warns + ")"
	}
	return s
}

// kinds is the warns of an outcome.
func kinds[K ~string](ks []K) string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func planOutcome(pl oci.Plan) outcome {
	ks := make([]oci.WarningKind, len(pl.Warnings))
	for i, w := range pl.Warnings {
		ks[i] = w.Kind
	}
	if pl.Action == oci.ActionNone {
		return outcome{action: oci.ActionNone, warns: kinds(ks)}
	}
	return outcome{pl.Action, pl.Size, kinds(ks)}
}

// setting is a policy and the facts every door gets: the host's memory
// (the test's), its GPUs (the capture host's device nodes) and the size of
// each engine-made host tmpfs as the capture saw it.
type setting struct {
	name   string
	pol    *policy.Policy
	memory int64
	gpus   int
}

func (st setting) facts(fx *captured) oci.Facts {
	sizes := map[string]int64{}
	for _, h := range fx.HostShm {
		if h.SizeBytes != nil {
			sizes[h.Source] = *h.SizeBytes
		}
	}
	return oci.Facts{HostMemory: st.memory, HostGPUs: st.gpus, TmpfsSize: func(p string) (int64, error) {
		if n, ok := sizes[p]; ok {
			return n, nil
		}
		return 0, fmt.Errorf("%s: no tmpfs there when %s was captured", p, fx.File)
	}}
}

// nodePlan is how the node-level front doors plan a bundle: `gpurun plan
// --spec` reads config.json with oci.FromSpec and asks oci.Decide; the
// shim, the hook and the NRI plugin hand the one form to the one enforcer
// (node/enforce), which plans with the host's facts — here f, for every
// door alike — and carries nothing out (its Grow and the door's Carry only
// record). The NRI plugin first sees the container the way containerd
// describes it to NRI and rebuilds the spec with nri.ToSpec. ok is false
// where the door never sees the container (NRI is never asked about a
// pod's sandbox).
func nodePlan(d door, s *specs.Spec, pol *policy.Policy, f oci.Facts) (oci.Plan, bool) {
	switch d {
	case doorPlan:
		return oci.Decide(oci.Input{Container: oci.FromSpec(s), Policy: pol, Facts: f}), true
	case doorNRI:
		pod := oci.CRIPod(s)
		if pod.Sandbox {
			return oci.Plan{}, false
		}
		s = nri.ToSpec("containerd", &api.PodSandbox{Id: pod.SandboxID}, nriContainer(s, pod.SandboxID))
	}
	e := enforce.New(enforce.Config{
		Component: string(d),
		Policy:    pol,
		Facts:     func() (oci.Facts, error) { return f, nil },
		Grow: func(string, int64, remount.Scope) (remount.Result, error) {
			return remount.Result{}, nil
		},
	})
	res, _ := e.Run(enforce.Subject{ID: "agreement"}, nil, func() (enforce.Request, error) {
		return enforce.Request{
			Container: oci.FromSpec(s),
			Carry:     func(oci.Plan) (enforce.Done, error) { return enforce.Done{}, nil },
		}, nil
	})
	return res.Plan, true
}

// nriContainer describes a spec the way containerd's CRI plugin describes
// the container it creates to NRI plugins (from the generated spec, with
// the NRI api's converters).
func nriContainer(s *specs.Spec, podID string) *api.Container {
	c := &api.Container{Id: "agreement", PodSandboxId: podID, Name: "app", Annotations: s.Annotations,
		Mounts: api.FromOCIMounts(s.Mounts), Hooks: api.FromOCIHooks(s.Hooks)}
	if s.Process != nil {
		c.Env, c.Args = s.Process.Env, s.Process.Args
	}
	if s.Linux != nil {
		c.Linux = &api.LinuxContainer{
			Namespaces: api.FromOCILinuxNamespaces(s.Linux.Namespaces),
			Devices:    api.FromOCILinuxDevices(s.Linux.Devices),
			Resources:  api.FromOCILinuxResources(s.Linux.Resources, s.Annotations),
		}
	}
	return c
}

// fakeDaemon answers the launcher as the capture's dockerd would have.
type fakeDaemon struct {
	memory     int64
	imageEnv   []string
	defaultShm int64
}

func (d fakeDaemon) Facts(context.Context) (dockerapi.Facts, error) {
	return dockerapi.Facts{MemTotal: d.memory}, nil
}
func (d fakeDaemon) ImageEnv(context.Context, string) ([]string, error) { return d.imageEnv, nil }
func (d fakeDaemon) DefaultShmSize(context.Context, string) (int64, error) {
	return d.defaultShm, nil
}

// launcherPlan is `gpurun --dry-run run ARGS` for a fixture captured from
// docker run.
func launcherPlan(fx *captured, st setting) (outcome, bool) {
	if fx.Docker == nil || len(fx.Argv) < 2 || fx.Argv[0] != "docker" || fx.Argv[1] != "run" {
		return outcome{}, false
	}
	res := launch.Prepare(context.Background(), launch.Request{
		Args:        fx.Argv[2:],
		Policy:      st.pol,
		Daemon:      fakeDaemon{memory: st.memory, imageEnv: fx.Docker.ImageEnv, defaultShm: fx.Docker.DefaultShmSize},
		LookupEnv:   func(string) (string, bool) { return "", false },
		ReadFile:    func(p string) ([]byte, error) { return nil, errors.New(p + ": no files here") },
		LocalFacts:  func() (oci.Facts, error) { return oci.Facts{HostMemory: st.memory, HostGPUs: st.gpus}, nil },
		DaemonLocal: true,
	})
	return planOutcome(res.Plan), true
}

// doctorPlan is doctor's assessment of a Docker container from docker
// inspect (translate.FromInspect), with its IPC donor's inspect.
func doctorPlan(t *testing.T, fx *captured, byFile map[string]*captured, st setting) (outcome, bool) {
	if fx.Docker == nil {
		return outcome{}, false
	}
	var donor *container.InspectResponse
	if fx.Docker.Donor != "" {
		d := byFile[fx.Docker.Donor]
		if d == nil || d.Docker == nil {
			t.Fatalf("%s: donor %s is not in the index", fx.File, fx.Docker.Donor)
		}
		donor = &d.Docker.Inspect
	}
	c, err := translate.FromInspect(fx.Docker.Inspect, fx.Docker.DataRoot, donor)
	if err != nil {
		t.Fatalf("%s: %v", fx.File, err)
	}
	return planOutcome(oci.Decide(oci.Input{Container: c, Policy: st.pol, Facts: st.facts(fx)})), true
}

// composeOutcomes migrates capture/compose.yaml, the file docker-compose
// ran, and gives each service's outcome: add, raise and inherit set a
// size; keep, none and skip leave /dev/shm as it is.
func composeOutcomes(t *testing.T, st setting) map[string]outcome {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(fixtureDir, "capture"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compose.Migrate(context.Background(), compose.Options{Files: []string{"compose.yaml"}, WorkDir: dir, Policy: st.pol})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]outcome{}
	for _, s := range res.Services {
		switch s.Action {
		case compose.ActionAdd, compose.ActionRaise, compose.ActionInherit:
			out[s.Service] = outcome{oci.ActionSetSize, s.SizeBytes, kinds(s.WarningKinds)}
		default:
			out[s.Service] = outcome{action: oci.ActionNone, warns: kinds(s.WarningKinds)}
		}
	}
	return out
}

// exception is a front door's legitimate disagreement with the captured
// spec's plan. Exceptions apply in order to what the door is expected to
// plan, starting from the spec's plan: where one applies to the
// expectation so far (cur), the door plans want(cur) instead. An exception
// that applies where the door plans cur anyway fails the test: it is
// stale.
type exception struct {
	why     string
	doors   []door
	applies func(fx *captured, st setting, cur outcome) bool
	want    func(fx *captured, st setting, cur outcome) outcome
}

func named(names ...string) func(*captured, setting, outcome) bool {
	return func(fx *captured, _ setting, _ outcome) bool { return slices.Contains(names, fx.name) }
}

func ipcMode(fx *captured) container.IpcMode {
	if fx.Docker == nil || fx.Docker.Inspect.HostConfig == nil {
		return ""
	}
	return fx.Docker.Inspect.HostConfig.IpcMode
}

// portableTarget is the size compose writes: the policy's rule over the
// service's memory limit, without one compose_default — never this host's
// memory.
func portableTarget(fx *captured, st setting) int64 {
	n, _ := st.pol.Target(policy.Request{MemoryLimit: fx.Docker.Inspect.HostConfig.Memory, Portable: true})
	return n
}

var exceptions = []exception{
	{
		why:   "a setting's GPU host is not the capture host (which had no GPUs): where config.json lists the host's own devices — --privileged gets every one, --device DIR the nodes dockerd found under the directory (here a temp dir of one render node) — the spec shows the capture host's, while gpurun run and doctor count the setting's host's GPUs, as the spec would on that host",
		doors: []door{doorLauncher, doorDoctor},
		applies: func(fx *captured, st setting, cur outcome) bool {
			return st.gpus > 0 && named("docker-20.10-device-dri-dir", "docker-20.10-privileged", "docker-compose-1.29-devices-dri")(fx, st, cur)
		},
		want: func(fx *captured, st setting, _ outcome) outcome {
			n, _ := st.pol.Target(policy.Request{MemoryLimit: fx.Docker.Inspect.HostConfig.Memory, HostMemory: st.memory, GPUs: st.gpus})
			return outcome{action: oci.ActionSetSize, size: n}
		},
	},
	{
		why:   "an explicit 64 MiB (--shm-size 64m, shm_size: 64m) is the user's choice at the front doors that read the user's words, which warn that it is below the policy's minimum; config.json and docker inspect cannot tell it from the engines' default, so the others size it",
		doors: []door{doorLauncher, doorCompose},
		applies: func(fx *captured, st setting, cur outcome) bool {
			return named("docker-20.10-gpu-shm-size-64m", "docker-compose-1.29-shm-size-64m")(fx, st, cur) && cur.action == oci.ActionSetSize
		},
		want: func(*captured, setting, outcome) outcome {
			return outcome{action: oci.ActionNone, warns: string(oci.WarnBelowMin)}
		},
	},
	{
		why:   "runtime: nvidia is a GPU request in the user's words and in docker inspect (HostConfig.Runtime), but leaves no trace in config.json: NVIDIA's runtime adds its hook itself, after the node-level doors have planned (they see such a GPU through the image's NVIDIA_VISIBLE_DEVICES, which CUDA images set)",
		doors: []door{doorDoctor, doorCompose},
		applies: func(fx *captured, st setting, cur outcome) bool {
			return named("docker-compose-1.29-runtime-nvidia")(fx, st, cur) && cur.action == oci.ActionNone
		},
		want: func(fx *captured, st setting, _ outcome) outcome {
			n, _ := st.pol.Target(policy.Request{HostMemory: st.memory})
			return outcome{action: oci.ActionSetSize, size: n}
		},
	},
	{
		why:   "gpurun run plans a new --ipc shareable container before dockerd makes its host tmpfs, so it asks for a bigger tmpfs with --shm-size (set-size); the node-level doors and doctor see the 64 MiB tmpfs dockerd already made and grow it (remount): the same size",
		doors: []door{doorLauncher},
		applies: func(fx *captured, _ setting, cur outcome) bool {
			return ipcMode(fx) == "shareable" && cur.action == oci.ActionRemount
		},
		want: func(_ *captured, _ setting, cur outcome) outcome {
			return outcome{action: oci.ActionSetSize, size: cur.size, warns: cur.warns}
		},
	},
	{
		why:   "a --ipc container:<donor> peer: docker run's words do not say how big the donor's /dev/shm is, so gpurun run plans to grow it to the policy's size (and, since docker run cannot, reports the plan as not carried out, naming gpurun resize <donor>); the node-level doors and doctor see the donor's tmpfs and leave one the user sized (--shm-size 1g)",
		doors: []door{doorLauncher},
		applies: func(fx *captured, st setting, cur outcome) bool {
			return named("docker-20.10-gpu-ipc-container-shm-size-1g")(fx, st, cur) && cur.action == oci.ActionNone
		},
		want: func(fx *captured, st setting, _ outcome) outcome {
			n, _ := st.pol.Target(policy.Request{MemoryLimit: fx.Docker.Inspect.HostConfig.Memory, HostMemory: st.memory, GPUs: st.gpus})
			return outcome{action: oci.ActionRemount, size: n}
		},
	},
	{
		why:   "compose is portable: its shm_size runs on hosts not known now, so without a memory limit it writes compose_default (8gb) instead of half of this host's memory",
		doors: []door{doorCompose},
		applies: func(fx *captured, _ setting, cur outcome) bool {
			return cur.action == oci.ActionSetSize && fx.Docker.Inspect.HostConfig.Memory == 0
		},
		want: func(fx *captured, st setting, cur outcome) outcome {
			return outcome{action: cur.action, size: portableTarget(fx, st), warns: cur.warns}
		},
	},
}

// pinned are a few plans derived by hand from the policy, on the test's
// 64 GiB host: the doors must not only agree, they must be right.
var pinned = []struct {
	fixture, setting string
	door             door
	want             outcome
}{
	// half of the 64 GiB host
	{"docker-20.10-gpus-all", "default", doorLauncher, outcome{action: oci.ActionSetSize, size: 32 * policy.GiB}},
	{"docker-20.10-gpus-all", "default", doorShim, outcome{action: oci.ActionSetSize, size: 32 * policy.GiB}},
	{"docker-20.10-device-dri-dir", "default", doorDoctor, outcome{action: oci.ActionSetSize, size: 32 * policy.GiB}},
	// the peer grows the donor's 64 MiB tmpfs
	{"docker-20.10-gpu-ipc-container", "default", doorShim, outcome{action: oci.ActionRemount, size: 32 * policy.GiB}},
	// the donor's 2 GiB was chosen
	{"docker-20.10-gpu-ipc-container-shm-size-1g", "default", doorHook, outcome{action: oci.ActionNone}},
	// no GPU: the driver's control node alone; everyone with match "all"
	{"docker-20.10-device-nvidiactl", "default", doorLauncher, outcome{action: oci.ActionNone}},
	{"docker-20.10-device-nvidiactl", `match "all"`, doorNRI, outcome{action: oci.ActionSetSize, size: 32 * policy.GiB}},
	// half of the 4 GiB memory limit, compose included
	{"docker-compose-1.29-deploy-gpu-mem-limit-4g", "default", doorCompose, outcome{action: oci.ActionSetSize, size: 2 * policy.GiB}},
	{"docker-compose-1.29-deploy-gpu-mem-limit-4g", "default", doorDoctor, outcome{action: oci.ActionSetSize, size: 2 * policy.GiB}},
	// compose without a limit: compose_default
	{"docker-compose-1.29-env-nvidia-all", "default", doorCompose, outcome{action: oci.ActionSetSize, size: 8 * policy.GiB}},
	// a pod's shared tmpfs
	{"containerd-2.4-cri-container-env-nvidia-all", "default", doorNRI, outcome{action: oci.ActionRemount, size: 32 * policy.GiB}},
}

func TestFrontDoorsAgree(t *testing.T) {
	idx, byFile := loadIndex(t)
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(idx.Fixtures) {
		t.Errorf("%d fixtures, %d in capture/index.json: regenerate them together (hack/capture-fixtures.sh)", len(files), len(idx.Fixtures))
	}
	hostGPUs := 0
	for _, n := range idx.Host.GPUDeviceNodes {
		if oci.ClassifyDevice(n).GPU {
			hostGPUs++
		}
	}
	all, err := policy.Parse("all.toml", []byte(`match = "all"`))
	if err != nil {
		t.Fatal(err)
	}
	perGPU, err := policy.Parse("per-gpu.toml", []byte(`per_gpu = "4g"`))
	if err != nil {
		t.Fatal(err)
	}
	settings := []setting{
		{name: "default", pol: policy.Default(), memory: 64 * policy.GiB, gpus: hostGPUs},
		{name: `match "all"`, pol: all, memory: 64 * policy.GiB, gpus: hostGPUs},
		// A GPU host: per_gpu counts the host's GPUs for "all" in every
		// door alike (the hook and the NRI plugin once planned without them).
		{name: "per_gpu 4g, 8 GPUs", pol: perGPU, memory: 64 * policy.GiB, gpus: 8},
	}
	used := map[string]bool{}
	got := map[string]map[door]outcome{} // fixture/setting -> door -> outcome
	checked := map[door]int{}
	for _, st := range settings {
		composed := composeOutcomes(t, st)
		for i := range idx.Fixtures {
			fx := &idx.Fixtures[i]
			facts := st.facts(fx)
			outs := map[door]outcome{}
			for _, d := range []door{doorPlan, doorShim, doorHook, doorNRI} {
				if pl, ok := nodePlan(d, fx.spec, st.pol, facts); ok {
					outs[d] = planOutcome(pl)
				}
			}
			if o, ok := launcherPlan(fx, st); ok {
				outs[doorLauncher] = o
			}
			if o, ok := doctorPlan(t, fx, byFile, st); ok {
				outs[doorDoctor] = o
			}
			if fx.Compose != nil {
				o, ok := composed[fx.Compose.Service]
				if !ok {
					t.Fatalf("%s: compose migrate has no service %s", fx.File, fx.Compose.Service)
				}
				outs[doorCompose] = o
			}
			got[fx.name+"/"+st.name] = outs

			ref := outs[doorPlan]
			for _, d := range doors[1:] {
				o, ok := outs[d]
				if !ok {
					continue
				}
				checked[d]++
				want := ref
				for _, ex := range exceptions {
					if !slices.Contains(ex.doors, d) || !ex.applies(fx, st, want) {
						continue
					}
					if o == want {
						t.Errorf("%s, %s: %s plans %s without the exception; it is stale: %s", fx.name, st.name, d, o, ex.why)
					}
					want = ex.want(fx, st, want)
					used[ex.why] = true
				}
				if o != want {
					t.Errorf("%s, %s: %s plans %s, the captured spec %s (want %s)", fx.name, st.name, d, o, ref, want)
				}
			}
		}
	}
	for _, ex := range exceptions {
		if !used[ex.why] {
			t.Errorf("exception never applies, so it is stale: %s", ex.why)
		}
	}
	for _, p := range pinned {
		o, ok := got[p.fixture+"/"+p.setting][p.door]
		if !ok {
			t.Errorf("pinned %s, %s, %s: no such plan", p.fixture, p.setting, p.door)
			continue
		}
		if o != p.want {
			t.Errorf("pinned %s, %s: %s plans %s, want %s", p.fixture, p.setting, p.door, o, p.want)
		}
	}
	// Every door took part: the matrix is as wide as the brief.
	for _, d := range doors[1:] {
		if checked[d] == 0 {
			t.Errorf("%s planned no fixture", d)
		}
	}
	if testing.Verbose() {
		logMatrix(t, idx, got, settings)
		t.Logf("compared with the spec's plan, over %d fixtures and %d settings: %v", len(idx.Fixtures), len(settings), checked)
	}
}

// logMatrix prints, with -v, each fixture's plan per door and setting.
func logMatrix(t *testing.T, idx captureIndex, got map[string]map[door]outcome, settings []setting) {
	var b strings.Builder
	b.WriteString("fixture | setting")
	for _, d := range doors {
		b.WriteString(" | " + string(d))
	}
	b.WriteString("\n")
	for _, fx := range idx.Fixtures {
		for _, st := range settings {
			b.WriteString(fx.name + " | " + st.name)
			for _, d := range doors {
				cell := "-"
				if o, ok := got[fx.name+"/"+st.name][d]; ok {
					cell = o.String()
				}
				b.WriteString(" | " + cell)
			}
			b.WriteString("\n")
		}
	}
	t.Log("\n" + b.String())
}
