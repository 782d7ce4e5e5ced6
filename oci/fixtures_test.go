package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// fixtureDir holds config.json files captured from real engines by
// hack/capture-fixtures.sh (see its README.md).
const fixtureDir = "testdata/fixtures"

// fixturePlans says, for each captured spec, what the planner must do under
// the default policy (match "gpu") and under match "all", on a 64 GiB host
// with the engine's host tmpfs size unknown (a captured spec outlives its
// engine). Sizes are MiB.
var fixturePlans = []struct {
	file      string
	kind      ShmKind
	gpu       bool
	gpus      int
	action    Action // default policy
	sizeMiB   int64
	allAction Action // match = "all"
	allMiB    int64
}{
	{file: "docker-20.10-default", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-ipc-private", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-memory-2g", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 1024},
	{file: "docker-20.10-env-nvidia-all", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-env-nvidia-0-1", kind: ShmPrivate, gpu: true, gpus: 2, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-env-nvidia-void", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-device-nvidia0", kind: ShmPrivate, gpu: true, gpus: 1, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-gpu-memory-4g", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionSetSize, sizeMiB: 2048, allAction: ActionSetSize, allMiB: 2048},
	{file: "docker-20.10-shm-size-2g", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 2048, allAction: ActionNone, allMiB: 2048},
	{file: "docker-20.10-default-shm-size-1g-daemon", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 1024, allAction: ActionNone, allMiB: 1024},
	{file: "docker-20.10-ipc-host", kind: ShmHost, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "docker-20.10-ipc-none", kind: ShmNone, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "docker-20.10-ipc-shareable", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 32768},
	{file: "docker-20.10-ipc-container", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 32768},
	{file: "docker-20.10-tmpfs-devshm", kind: ShmUser, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 512, allAction: ActionNone, allMiB: 512},
	{file: "docker-20.10-volume-devshm", kind: ShmUser, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "docker-20.10-bind-devshm", kind: ShmUser, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{"docker-20.10-device-dri-dir", ShmPrivate, true, 1, ActionSetSize, 32768, ActionSetSize, 32768}, // renderD128; card0 is no GPU
	{file: "docker-20.10-device-nvidiactl", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-device-dri-card0", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{"docker-20.10-privileged", ShmPrivate, false, 0, ActionNone, 64, ActionSetSize, 32768}, // the capture host had no GPU nodes
	{file: "docker-20.10-gpu-ipc-shareable", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "docker-20.10-gpu-ipc-container", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{"docker-20.10-gpu-ipc-shareable-shm-size-2g", ShmEngine, true, 0, ActionRemount, 32768, ActionRemount, 32768}, // its 2 GiB is on the host side only
	{file: "docker-20.10-gpu-ipc-container-shm-size-1g", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{"docker-20.10-gpu-shm-size-64m", ShmPrivate, true, 0, ActionSetSize, 32768, ActionSetSize, 32768}, // a bundle cannot tell an explicit 64m
	{file: "docker-20.10-gpus-all", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-20.10-gpus-2", kind: ShmPrivate, gpu: true, gpus: 2, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-compose-1.29-deploy-gpu", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-compose-1.29-deploy-gpu-mem-limit-4g", kind: ShmPrivate, gpu: true, gpus: 1, action: ActionSetSize, sizeMiB: 2048, allAction: ActionSetSize, allMiB: 2048},
	{file: "docker-compose-1.29-env-nvidia-all", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{"docker-compose-1.29-runtime-nvidia", ShmPrivate, false, 0, ActionNone, 64, ActionSetSize, 32768}, // runtime: nvidia leaves no trace in the bundle
	{file: "docker-compose-1.29-devices-dri", kind: ShmPrivate, gpu: true, gpus: 1, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-compose-1.29-devices-nvidiactl", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-compose-1.29-shm-size-2g", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionNone, sizeMiB: 2048, allAction: ActionNone, allMiB: 2048},
	{file: "docker-compose-1.29-shm-size-64m", kind: ShmPrivate, gpu: true, gpus: 0, action: ActionSetSize, sizeMiB: 32768, allAction: ActionSetSize, allMiB: 32768},
	{file: "docker-compose-1.29-ipc-host", kind: ShmHost, gpu: true, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "docker-compose-1.29-ipc-donor", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "docker-compose-1.29-ipc-peer", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "docker-compose-1.29-tmpfs-devshm", kind: ShmUser, gpu: true, gpus: 0, action: ActionNone, sizeMiB: 512, allAction: ActionNone, allMiB: 512},
	{file: "docker-compose-1.29-plain", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "containerd-1.6-cri-sandbox", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "containerd-1.6-cri-container", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 32768},
	{file: "containerd-1.6-cri-container-env-nvidia-all", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "containerd-1.6-cri-container-device-nvidia0", kind: ShmEngine, gpu: true, gpus: 1, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "containerd-1.6-cri-container-cdi-annotation", kind: ShmEngine, gpu: true, gpus: 1, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "containerd-1.6-cri-container-memory-2g", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 1024},
	{file: "containerd-1.6-cri-container-shm-hostpath", kind: ShmUser, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "containerd-1.6-cri-hostipc-sandbox", kind: ShmHost, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "containerd-1.6-cri-hostipc-container", kind: ShmHost, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "containerd-2.4-cri-sandbox", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "containerd-2.4-cri-container", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 32768},
	{file: "containerd-2.4-cri-container-env-nvidia-all", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "containerd-2.4-cri-hostipc-sandbox", kind: ShmHost, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "containerd-2.4-cri-hostipc-container", kind: ShmHost, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
	{file: "ctr-1.6-default", kind: ShmPrivate, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 64, allAction: ActionSetSize, allMiB: 32768},
	{file: "podman-4.3-default", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 32768},
	{file: "podman-4.3-env-nvidia-all", kind: ShmEngine, gpu: true, gpus: 0, action: ActionRemount, sizeMiB: 32768, allAction: ActionRemount, allMiB: 32768},
	{file: "podman-4.3-shm-size-2g", kind: ShmEngine, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionRemount, allMiB: 32768},
	{file: "podman-4.3-ipc-host", kind: ShmHost, gpu: false, gpus: 0, action: ActionNone, sizeMiB: 0, allAction: ActionNone, allMiB: 0},
}

// loadFixture decodes a captured spec with encoding/json: the decision's
// tests do not depend on how a front door reads config.json.
func loadFixture(t testing.TB, name string) *specs.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &s
}

func TestFixturePlans(t *testing.T) {
	all, err := policy.Parse("all.toml", []byte(`match = "all"`))
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixturePlans {
		t.Run(fx.file, func(t *testing.T) {
			for _, run := range []struct {
				pol    *policy.Policy
				action Action
				mib    int64
			}{{policy.Default(), fx.action, fx.sizeMiB}, {all, fx.allAction, fx.allMiB}} {
				c := loadFixture(t, fx.file)
				pl := Decide(Input{Container: FromSpec(c), Policy: run.pol, Facts: Facts{HostMemory: 64 * policy.GiB}})
				if pl.Shm.Kind != fx.kind {
					t.Errorf("match %s: /dev/shm is %s, want %s", run.pol.Match, pl.Shm.Kind, fx.kind)
				}
				if pl.GPU != fx.gpu || pl.GPUs != fx.gpus {
					t.Errorf("match %s: gpu %v/%d, want %v/%d (%v)", run.pol.Match, pl.GPU, pl.GPUs, fx.gpu, fx.gpus, pl.Evidence)
				}
				if pl.Action != run.action || pl.Size != run.mib*policy.MiB {
					t.Errorf("match %s: %s %d MiB, want %s %d MiB (%s)", run.pol.Match, pl.Action, pl.Size/policy.MiB, run.action, run.mib, pl.Reason)
				}
			}
		})
	}
}

// Every captured fixture has a row above and a line in the README, so a new
// capture cannot slip in untested.
func TestFixturesCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtureDir, err)
	}
	readme, err := os.ReadFile(filepath.Join(fixtureDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, fx := range fixturePlans {
		rows[fx.file] = true
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if !rows[name] {
			t.Errorf("fixture %s has no expected plan in fixturePlans", name)
		}
		if !strings.Contains(string(readme), name) {
			t.Errorf("fixture %s is not described in %s/README.md", name, fixtureDir)
		}
		delete(rows, name)
	}
	for name := range rows {
		t.Errorf("fixturePlans names %s, which is not in %s", name, fixtureDir)
	}
}

// The CRI container's /dev/shm bind names the same sandbox as its
// annotation; a mismatch (a spec binding another pod's tmpfs) is refused.
func TestCRISandboxMismatch(t *testing.T) {
	c := loadFixture(t, "containerd-1.6-cri-container-env-nvidia-all")
	if got := Decide(Input{Container: FromSpec(c), Facts: Facts{HostMemory: 64 * policy.GiB}}); got.Action != ActionRemount || got.Shm.OwnerID != got.Pod.SandboxID {
		t.Fatalf("plan %+v", got)
	}
	c.Annotations[AnnotationCRISandboxID] = "0000000000000000000000000000000000000000000000000000000000000000"
	got := Decide(Input{Container: FromSpec(c), Facts: Facts{HostMemory: 64 * policy.GiB}})
	if got.Action != ActionNone || !strings.Contains(got.Reason, "belongs to sandbox") {
		t.Errorf("mismatched sandbox: %+v", got)
	}
}

// With the host tmpfs's real size known, an engine tmpfs that someone sized
// (podman --shm-size 2g) is left alone, and a big enough one is not grown.
func TestHostTmpfsSizeKnown(t *testing.T) {
	all, _ := policy.Parse("all.toml", []byte(`match = "all"`))
	tests := []struct {
		file   string
		size   int64
		action Action
	}{
		{"podman-4.3-shm-size-2g", 2 * policy.GiB, ActionNone},
		{"podman-4.3-default", 64 * policy.MiB, ActionRemount},
		{"podman-4.3-default", policy.PodmanDefaultShm, ActionRemount}, // podman's own 64000k
		{"containerd-1.6-cri-container", 64 * policy.MiB, ActionRemount},
		{"containerd-1.6-cri-container", 48 * policy.GiB, ActionNone},
		{"docker-20.10-gpu-ipc-shareable-shm-size-2g", 2 * policy.GiB, ActionNone}, // the donor's --shm-size 2g
		{"docker-compose-1.29-ipc-peer", 2 * policy.GiB, ActionNone},               // its donor's shm_size: 2g
	}
	for _, tt := range tests {
		c := loadFixture(t, tt.file)
		pl := Decide(Input{Container: FromSpec(c), Policy: all, Facts: Facts{HostMemory: 64 * policy.GiB,
			TmpfsSize: func(string) (int64, error) { return tt.size, nil }}})
		if pl.Action != tt.action || pl.Current != tt.size {
			t.Errorf("%s at %d: %s (current %d): %s", tt.file, tt.size, pl.Action, pl.Current, pl.Reason)
		}
	}
}

// FuzzDecide checks the planner's invariants on any spec and policy: no
// panic; never resizes the host's /dev/shm; an acting plan's size lies within
// [min, max] (an annotation may ask for less than min, never more than the
// cap) and never below the current size; none keeps the current size.
func FuzzDecide(f *testing.F) {
	fuzzSeeds(f, func(data []byte) {
		f.Add(data, int64(64<<30), uint8(50), int64(1<<30), int64(0), uint8(0), false, uint8(0), int64(8<<30), uint8(0))
		f.Add(data, int64(0), uint8(25), int64(2<<30), int64(4<<30), uint8(1), true, uint8(1), int64(0), uint8(2))
		f.Add(data, int64(1<<40), uint8(100), int64(0), int64(1<<30), uint8(2), true, uint8(2), int64(64<<20), uint8(8))
	})
	f.Fuzz(func(t *testing.T, data []byte, hostMem int64, pct uint8, minSize, maxSize int64, mode uint8, enforce bool, match uint8, hostTmpfs int64, hostGPUs uint8) {
		var spec specs.Spec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		if hostMem < 0 || minSize < 0 || maxSize < 0 || hostTmpfs < 0 {
			return
		}
		file := policy.DefaultFile()
		file.Size = itoa(int64(pct%100)+1) + "%"
		file.Min = itoa(minSize)
		if maxSize > 0 {
			if maxSize < minSize {
				maxSize = minSize
			}
			file.Max = itoa(maxSize)
		}
		file.Mode = []string{"size", "ipc-host", "mount"}[mode%3]
		file.Match = []string{"gpu", "all"}[match%2]
		file.EnforceMin = enforce
		file.AllowedAnnotations = []string{"gpurun.io/shm-size"}
		pol, err := file.Validate("fuzz.toml")
		if err != nil {
			t.Fatalf("policy: %v", err)
		}
		pl := Decide(Input{
			Container: FromSpec(&spec),
			Policy:    pol,
			Facts: Facts{
				HostMemory: hostMem,
				HostGPUs:   int(hostGPUs),
				TmpfsSize:  func(string) (int64, error) { return hostTmpfs, nil },
			},
		})
		sh := ClassifyShm(&spec, hostMem)
		if sh.Kind == ShmHost && pl.Action != ActionNone {
			t.Fatalf("acts on the host's /dev/shm: %+v", pl)
		}
		if pl.Action == ActionRemount && (sh.Kind != ShmEngine || pol.Mode == policy.ModeMount) {
			t.Fatalf("remount of %s in mode %s: %+v", sh.Kind, pol.Mode, pl)
		}
		if pl.Reason == "" {
			t.Fatalf("no reason: %+v", pl)
		}
		switch pl.Action {
		case ActionNone:
			if pl.Size != pl.Current {
				t.Fatalf("none but size %d != current %d", pl.Size, pl.Current)
			}
		case ActionIPCHost:
			if pl.Size != 0 {
				t.Fatalf("ipc-host with a size: %+v", pl)
			}
		case ActionSetSize, ActionRemount, ActionInject:
			_, requested := spec.Annotations["gpurun.io/shm-size"]
			// The policy's size is at least min, unless it must leave the
			// processes memory_reserve of the memory they may use.
			memory := MemoryLimit(&spec)
			if memory <= 0 {
				memory = hostMem
			}
			least := pol.Min
			if ceiling, _ := pol.Ceiling(memory); memory > 0 && ceiling < least {
				least = ceiling
			}
			if (!requested && pl.Size < least) || (pol.Max > 0 && pl.Size > pol.Max) {
				t.Fatalf("size %d outside [%d, %d]: %+v", pl.Size, least, pol.Max, pl)
			}
			if ceiling, _ := pol.Ceiling(memory); !requested && memory > 0 && pl.Size > max(ceiling, pol.Min) {
				t.Fatalf("size %d leaves the processes less than memory_reserve of %d: %+v", pl.Size, memory, pl)
			}
			if pl.Current > 0 && pl.Size <= pl.Current {
				t.Fatalf("does not grow: %+v", pl)
			}
			if pl.Size <= 0 {
				t.Fatalf("acting plan without a size: %+v", pl)
			}
		default:
			t.Fatalf("unknown action %q", pl.Action)
		}
	})
}

// fuzzSeeds adds every captured fixture to a corpus.
func fuzzSeeds(f *testing.F, add func(data []byte)) {
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		add(data)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
