//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/compose"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// composeProjectYAML is a project with a GPU service found by its
// environment, one found by its device (a fake /dev/nvidia0) with a memory
// limit, and a CPU service. No networks: the private dockerd has none.
const composeProjectYAML = `# a GPU project, before gpurun compose migrate
services:
  trainer:
    image: @IMAGE@
    command: ["sleep", "600"]
    network_mode: none
    environment:
      NVIDIA_VISIBLE_DEVICES: all   # the GPU, as CUDA images say it
  tuner:
    image: @IMAGE@
    command: ["sleep", "600"]
    network_mode: none
    devices:
      - @GPU@:/dev/nvidia0
    mem_limit: 3g
  web:
    image: @IMAGE@
    command: ["sleep", "600"]
    network_mode: none
`

// composeSharedYAML is the Stable Diffusion web UI stacks' pattern: the
// GPU service (its fake /dev/nvidia0) anchored and merged into a CPU
// variant that drops the device, next to a plain CPU service.
const composeSharedYAML = `x-common: &common
  image: @IMAGE@
  command: ["sleep", "600"]
  network_mode: none

services:
  ui: &ui
    <<: *common
    devices:
      - @GPU@:/dev/nvidia0
  ui-cpu:
    <<: *ui
    devices: []   # the CPU variant
  fetch:
    <<: *common
`

// TestComposeMigrateUp migrates two projects with gpurun compose migrate
// --write — one with GPU services found by environment and by device, one
// whose GPU service is anchored into a CPU variant — and brings each up
// with the real docker-compose (Debian's 1.29.2) and docker compose v2 (the
// CLI plugin make builds, $GPURUN_TEST_COMPOSE_V2) against a private
// dockerd: each GPU service sees a /dev/shm of the size written, the CPU
// variant the size it inherits, the other CPU services the engine's
// default.
func TestComposeMigrateUp(t *testing.T) {
	composeV1, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("prerequisite missing: docker-compose (apt-get install -y docker-compose): %v", err)
	}
	v2 := harness.RequireComposeV2(t)
	d := harness.StartDockerd(t, harness.DockerdOptions{})
	img := harness.BusyboxImage(t, d)
	gpu := harness.MknodGPU(t, t.TempDir())

	dir := t.TempDir()
	config := filepath.Join(dir, "gpurun.toml")
	if err := os.WriteFile(config, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(config, true)
	if err != nil {
		t.Fatal(err)
	}
	tuner, _ := pol.Target(policy.Request{MemoryLimit: 3 * policy.GiB, GPUs: 1, Portable: true})
	type project struct {
		name, yaml string
		want       map[string]int64 // service -> /dev/shm size
		actions    map[string]compose.ServiceAction
		file       string
	}
	projects := []*project{
		{name: "plain", yaml: composeProjectYAML,
			want: map[string]int64{
				"trainer": pol.ComposeDefault,      // no memory limit
				"tuner":   tuner,                   // from the 3g limit
				"web":     policy.EngineDefaultShm, // not a GPU service
			},
			actions: map[string]compose.ServiceAction{"trainer": compose.ActionAdd, "tuner": compose.ActionAdd, "web": compose.ActionNone},
		},
		{name: "shared", yaml: composeSharedYAML,
			want: map[string]int64{
				"ui":     pol.ComposeDefault,      // the line in its anchored mapping
				"ui-cpu": pol.ComposeDefault,      // inherits it
				"fetch":  policy.EngineDefaultShm, // merges only x-common
			},
			actions: map[string]compose.ServiceAction{"ui": compose.ActionAdd, "ui-cpu": compose.ActionInherit, "fetch": compose.ActionNone},
		},
	}
	var files []string
	for _, p := range projects {
		p.file = filepath.Join(dir, p.name, "compose.yaml")
		if err := os.MkdirAll(filepath.Dir(p.file), 0o755); err != nil {
			t.Fatal(err)
		}
		content := strings.NewReplacer("@IMAGE@", img, "@GPU@", gpu).Replace(p.yaml)
		if err := os.WriteFile(p.file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p.file)
	}

	gpurun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin(t, "gpurun"), append([]string{"--config", config, "compose", "migrate"}, args...)...)
		cmd.Dir = dir
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("gpurun compose migrate %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	var reports []compose.ServiceReport
	if err := json.Unmarshal([]byte(gpurun(append([]string{"--json"}, files...)...)), &reports); err != nil {
		t.Fatal(err)
	}
	for _, p := range projects {
		for svc, want := range p.actions {
			i := slices.IndexFunc(reports, func(r compose.ServiceReport) bool { return r.Project == p.file && r.Service == svc })
			if i < 0 || reports[i].Action != want {
				t.Errorf("project %s: service %s: report %+v, want action %s", p.name, svc, reports, want)
			}
		}
	}
	gpurun(append([]string{"--write"}, files...)...)
	gpurun(append([]string{"--check"}, files...)...)
	for _, p := range projects {
		migrated, err := os.ReadFile(p.file)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("migrated %s/compose.yaml:\n%s", p.name, migrated)
	}

	v1, _, err := composeRun(d.Env(), composeV1, "version", "--short")
	if err != nil {
		t.Fatalf("docker-compose version: %v", err)
	}
	t.Logf("docker-compose %s, docker compose %s", strings.TrimSpace(v1), v2.Version)
	engines := []struct {
		name string
		argv []string
		env  []string
	}{
		{"docker-compose v1", []string{composeV1}, d.Env()},
		{"docker compose v2", []string{"docker", "compose"}, v2.Env(d.Env())},
	}
	for i, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			for j, p := range projects {
				name := "gpuruncompose" + strconv.Itoa(i) + strconv.Itoa(j)
				composeCmd := func(args ...string) (string, string, error) {
					args = append(append(slices.Clone(e.argv[1:]), "-p", name, "-f", p.file), args...)
					return composeRun(e.env, e.argv[0], args...)
				}
				t.Cleanup(func() {
					if _, stderr, err := composeCmd("down", "--timeout", "1"); err != nil {
						t.Errorf("%s down: %v\n%s", e.name, err, stderr)
					}
				})
				if _, stderr, err := composeCmd("up", "-d"); err != nil {
					t.Fatalf("%s: project %s: up -d: %v\n%s\ndockerd:\n%s", e.name, p.name, err, stderr, d.LogTail(20))
				}
				for _, svc := range slices.Sorted(maps.Keys(p.want)) {
					size := p.want[svc]
					out, stderr, err := composeCmd("exec", "-T", svc, "df", "-k", "/dev/shm")
					if err != nil {
						t.Fatalf("%s: project %s: exec %s df: %v\n%s", e.name, p.name, svc, err, stderr)
					}
					if got := dfKiB(t, out); got != size/1024 {
						t.Errorf("%s: project %s: service %s: /dev/shm is %d KiB, want %d KiB (%s)", e.name, p.name, svc, got, size/1024, policy.FormatSize(size))
					}
				}
			}
		})
	}
}

// composeRun runs a command with env and returns its stdout and stderr.
func composeRun(env []string, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
