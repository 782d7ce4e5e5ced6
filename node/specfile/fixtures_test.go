package specfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// fixtureDir holds config.json files captured from real engines by
// hack/capture-fixtures.sh (see its README.md); oci's tests say what the
// decision is for each.
const fixtureDir = "../../oci/testdata/fixtures"

func loadFixture(t testing.TB, file string) *Config {
	t.Helper()
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFixturesApply carries out the decision for every captured spec,
// under the default policy and under match "all", and reads the result
// back: the spec says what the plan said, and nothing but /dev/shm (and,
// for ipc-host, the IPC namespace) changed.
func TestFixturesApply(t *testing.T) {
	all, err := policy.Parse("all.toml", []byte(`match = "all"`))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtureDir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			for _, pol := range []*policy.Policy{policy.Default(), all} {
				c := loadFixture(t, file)
				pl := oci.Decide(oci.Input{Container: oci.FromSpec(c.Spec), Policy: pol, Facts: oci.Facts{HostMemory: 64 * policy.GiB}})
				if _, err := c.Apply(pl); err != nil {
					t.Fatalf("match %s: apply %s: %v", pol.Match, pl.Action, err)
				}
				out, err := c.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				back, err := Parse("applied.json", out)
				if err != nil {
					t.Fatal(err)
				}
				if pl.Action == oci.ActionSetSize {
					if got := oci.ClassifyShm(back.Spec, 64*policy.GiB).Size; got != pl.Size {
						t.Errorf("match %s: applied spec says %d, plan %d", pol.Match, got, pl.Size)
					}
				}
				assertSameExceptShm(t, loadFixture(t, file), back)
			}
		})
	}
}

// assertSameExceptShm checks that apply changed nothing but the /dev/shm
// mount: every other mount and the whole process are byte-for-byte equal.
func assertSameExceptShm(t *testing.T, before, after *Config) {
	t.Helper()
	beforeTop, afterTop := topLevel(t, mustConfigJSON(t, before)), topLevel(t, mustConfigJSON(t, after))
	for k, v := range beforeTop {
		if k == "mounts" {
			continue
		}
		if string(afterTop[k]) != string(v) && !jsonEqual(t, afterTop[k], v) {
			t.Errorf("field %q changed", k)
		}
	}
	if len(after.Spec.Mounts) != len(before.Spec.Mounts) {
		t.Fatalf("mount count %d -> %d", len(before.Spec.Mounts), len(after.Spec.Mounts))
	}
	for i, m := range before.Spec.Mounts {
		if m.Destination == oci.ShmPath {
			continue
		}
		if strings.Join(m.Options, ",") != strings.Join(after.Spec.Mounts[i].Options, ",") || m.Source != after.Spec.Mounts[i].Source {
			t.Errorf("mount %s changed", m.Destination)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	ga, gb := generic(t, []byte(`{"v":`+string(a)+`}`)), generic(t, []byte(`{"v":`+string(b)+`}`))
	return strings.TrimSpace(string(mustMarshal(t, ga))) == strings.TrimSpace(string(mustMarshal(t, gb)))
}

// BenchmarkPlanApply is the shim's work on one container: parse a real
// config.json, plan, apply, encode.
func BenchmarkPlanApply(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(fixtureDir, "docker-20.10-env-nvidia-all.json"))
	if err != nil {
		b.Fatal(err)
	}
	pol := policy.Default()
	b.ReportAllocs()
	for b.Loop() {
		c, err := Parse("config.json", data)
		if err != nil {
			b.Fatal(err)
		}
		pl := oci.Decide(oci.Input{Container: oci.FromSpec(c.Spec), Policy: pol, Facts: oci.Facts{HostMemory: 64 * policy.GiB}})
		if _, err := c.Apply(pl); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFixturesCgroupsPath: every captured spec's linux.cgroupsPath is read
// as encoding/json reads it (the restart sweep finds the pod's memory
// cgroup from it), containerd's CRI containers' included.
func TestFixturesCgroupsPath(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	var cri int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ref struct {
			Linux struct {
				CgroupsPath string `json:"cgroupsPath"`
			} `json:"linux"`
		}
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatal(err)
		}
		cfg, err := Parse(f, data)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if cfg.Spec.Linux != nil {
			got = cfg.Spec.Linux.CgroupsPath
		}
		if got != ref.Linux.CgroupsPath {
			t.Errorf("%s: cgroupsPath %q, want %q", filepath.Base(f), got, ref.Linux.CgroupsPath)
		}
		if strings.HasPrefix(got, "/kubepods/") {
			cri++
		}
	}
	if cri == 0 {
		t.Error("no fixture of a pod's container with a cgroupsPath")
	}
}
