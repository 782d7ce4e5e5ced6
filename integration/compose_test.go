//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestComposeMigrateUp migrates a project with gpurun compose migrate
// --write and brings it up with the real docker-compose (Debian's 1.29.2)
// and, where the machine has it, docker compose v2, against a private
// dockerd: each GPU service sees a /dev/shm of the size written, the CPU
// service keeps the engine's default.
func TestComposeMigrateUp(t *testing.T) {
	composeV1, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("prerequisite missing: docker-compose (apt-get install -y docker-compose): %v", err)
	}
	d := harness.StartDockerd(t, harness.DockerdOptions{})
	img := harness.BusyboxImage(t, d)
	gpu := harness.MknodGPU(t, t.TempDir())

	dir := t.TempDir()
	file := filepath.Join(dir, "compose.yaml")
	content := strings.NewReplacer("@IMAGE@", img, "@GPU@", gpu).Replace(composeProjectYAML)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "gpurun.toml")
	if err := os.WriteFile(config, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(config, true)
	if err != nil {
		t.Fatal(err)
	}
	tuner, _ := pol.Target(policy.Request{MemoryLimit: 3 * policy.GiB, GPUs: 1, Portable: true})
	want := map[string]int64{
		"trainer": pol.ComposeDefault,      // no memory limit
		"tuner":   tuner,                   // from the 3g limit
		"web":     policy.EngineDefaultShm, // not a GPU service
	}

	migrate := exec.Command(bin(t, "gpurun"), "--config", config, "compose", "migrate", "--write")
	migrate.Dir = dir
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("gpurun compose migrate --write: %v\n%s", err, out)
	}
	migrated, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated compose.yaml:\n%s", migrated)
	check := exec.Command(bin(t, "gpurun"), "--config", config, "compose", "migrate", "--check")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("gpurun compose migrate --check after --write: %v\n%s", err, out)
	}

	type engine struct{ name, bin string }
	engines := []engine{{"docker-compose v1", composeV1}}
	v1, _, err := composeRun(d.Env(), composeV1, "version", "--short")
	if err != nil {
		t.Fatalf("docker-compose version: %v", err)
	}
	t.Logf("docker-compose %s", strings.TrimSpace(v1))
	if v2, stderr, err := composeRun(d.Env(), "docker", "compose", "version", "--short"); err == nil {
		t.Logf("docker compose %s", strings.TrimSpace(v2))
		engines = append(engines, engine{"docker compose v2", ""})
	} else {
		first, _, _ := strings.Cut(strings.TrimSpace(stderr), "\n")
		t.Logf("docker compose v2 is not installed on this machine (docker compose version: %v: %s); only docker-compose %s is tested",
			err, first, strings.TrimSpace(v1))
	}

	for i, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			project := "gpuruncompose" + strconv.Itoa(i)
			composeCmd := func(args ...string) (string, string, error) {
				args = append([]string{"-p", project, "-f", file}, args...)
				if e.bin == "" {
					return composeRun(d.Env(), "docker", append([]string{"compose"}, args...)...)
				}
				return composeRun(d.Env(), e.bin, args...)
			}
			t.Cleanup(func() {
				if _, stderr, err := composeCmd("down", "--timeout", "1"); err != nil {
					t.Errorf("%s down: %v\n%s", e.name, err, stderr)
				}
			})
			if _, stderr, err := composeCmd("up", "-d"); err != nil {
				t.Fatalf("%s up -d: %v\n%s\ndockerd:\n%s", e.name, err, stderr, d.LogTail(20))
			}
			for svc, size := range want {
				out, stderr, err := composeCmd("exec", "-T", svc, "df", "-k", "/dev/shm")
				if err != nil {
					t.Fatalf("%s exec %s df: %v\n%s", e.name, svc, err, stderr)
				}
				if got := dfKiB(t, out); got != size/1024 {
					t.Errorf("%s: service %s: /dev/shm is %d KiB, want %d KiB (%s)", e.name, svc, got, size/1024, policy.FormatSize(size))
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
