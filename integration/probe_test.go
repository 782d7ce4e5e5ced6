//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// The failure of the field reports, without PyTorch: a FROM-scratch image
// holding only the static gpurun binary, whose hidden `shm-probe` command
// allocates in /dev/shm the way DataLoader workers (map and touch) and NCCL
// (posix_fallocate) do. At Docker's default 64 MiB the DataLoader probe's
// workers die of SIGBUS and the NCCL probe runs out after six segments;
// under `gpurun run`, and under the runtime shim installed as dockerd's
// default runtime with no flag at all, both succeed.

const probeRef = "gpurun-test/shm-probe:latest"

// Probe sizes: what the issue names. The expectations below are computed
// from them and from the tmpfs sizes, never written down.
const (
	probeWorkers    = 4
	probeWorkerSeg  = 48 * policy.MiB
	probeNCCLCount  = 8
	probeNCCLSeg    = shmprobe.NCCLSegmentSize // 9,637,888 bytes
	probeCheckLarge = policy.EngineDefaultShm + policy.MiB
)

// probeImage builds the image: FROM scratch, /gpurun, ENTRYPOINT gpurun.
func probeImage(t *testing.T, d *harness.Dockerd) string {
	t.Helper()
	return harness.StaticBinaryImage(t, d, probeRef, bin(t, "gpurun"))
}

// probeArgs are the container arguments of each probe: the probe's
// command line after the image, always with --json.
var probeArgs = map[string][]string{
	"dataloader": {"shm-probe", "dataloader", "--json", "--workers", strconv.Itoa(probeWorkers), "--segment-size", strconv.FormatInt(probeWorkerSeg, 10)},
	"nccl":       {"shm-probe", "nccl", "--json", "--count", strconv.Itoa(probeNCCLCount), "--segment-size", strconv.FormatInt(probeNCCLSeg, 10)},
	"size-large": {"shm-probe", "size", "--json", strconv.FormatInt(probeCheckLarge, 10)},
}

// probeRun runs cmd and decodes the probe's JSON into v; it returns the
// exit status. A status other than 0 and 1 (2: the probe could not run,
// 125+: docker) fails the test.
func probeRun(t *testing.T, cmd *exec.Cmd, v any) int {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%q: %v", cmd.Args, err)
	}
	if code != 0 && code != 1 {
		t.Fatalf("%q: exit %d\nstdout: %s\nstderr: %s", cmd.Args, code, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		t.Fatalf("%q: output is not the probe's JSON: %v\nstdout: %s\nstderr: %s", cmd.Args, err, stdout.String(), stderr.String())
	}
	return code
}

// pages rounds n up to whole pages: what a tmpfs charges for a file.
func pages(n int64) int64 {
	page := int64(os.Getpagesize())
	return (n + page - 1) / page * page
}

// probeRunner returns the command that runs a probe in a container.
type probeRunner func(t *testing.T, probe string) *exec.Cmd

// expectTooSmall checks every probe at a /dev/shm of shm bytes that is too
// small for it.
func expectTooSmall(t *testing.T, run probeRunner, shm int64) {
	if probeWorkers*probeWorkerSeg <= shm || probeNCCLCount*pages(probeNCCLSeg) <= shm {
		t.Fatalf("the probes fit in %s: nothing to prove", policy.FormatSize(shm))
	}
	t.Run("dataloader workers die of SIGBUS", func(t *testing.T) {
		var r shmprobe.DataLoaderResult
		code := probeRun(t, run(t, "dataloader"), &r)
		if r.FS.Size != shm {
			t.Fatalf("the probe saw a %s /dev/shm, want %s", policy.FormatSize(r.FS.Size), policy.FormatSize(shm))
		}
		// At most as many workers fit as whole segments fit; every other
		// one dies of SIGBUS, and says so.
		fit := int(shm / pages(probeWorkerSeg))
		if code != 1 || r.Failure != shmprobe.FailureSIGBUS || r.OK > fit || len(r.Results) != probeWorkers {
			t.Errorf("exit %d, %s; want exit 1, SIGBUS, at most %d of %d workers ok", code, r, fit, probeWorkers)
		}
		for _, w := range r.Results {
			if w.Failure != shmprobe.FailureNone && (w.Signal != "SIGBUS" || w.ExitCode != -1 || w.Touched >= probeWorkerSeg) {
				t.Errorf("worker %+v: want killed by SIGBUS before the end of its segment", w)
			}
		}
	})
	t.Run("nccl segments run out with ENOSPC", func(t *testing.T) {
		var r shmprobe.NCCLResult
		code := probeRun(t, run(t, "nccl"), &r)
		want := int(shm / pages(probeNCCLSeg)) // 64 MiB / 9,637,888 bytes: 6
		if code != 1 || r.Failure != shmprobe.FailureENOSPC || r.Created != want || r.SegmentSize != probeNCCLSeg {
			t.Errorf("exit %d, %s; want exit 1, ENOSPC after %d segments", code, r, want)
		}
	})
	t.Run("size check stops at the tmpfs size", func(t *testing.T) {
		var r shmprobe.Result
		code := probeRun(t, run(t, "size-large"), &r)
		if code != 1 || r.Failure != shmprobe.FailureENOSPC || r.Allocated != shm || r.Requested != probeCheckLarge {
			t.Errorf("exit %d, %s; want exit 1, ENOSPC after %s", code, r, policy.FormatSize(shm))
		}
	})
}

// expectRoom checks every probe at a /dev/shm of shm bytes that holds it.
func expectRoom(t *testing.T, run probeRunner, shm int64) {
	if probeWorkers*probeWorkerSeg > shm || probeNCCLCount*pages(probeNCCLSeg) > shm || probeCheckLarge > shm {
		t.Fatalf("the probes do not fit in %s: the policy gives this host too little to prove anything", policy.FormatSize(shm))
	}
	t.Run("dataloader workers all finish", func(t *testing.T) {
		var r shmprobe.DataLoaderResult
		code := probeRun(t, run(t, "dataloader"), &r)
		if r.FS.Size != shm {
			t.Fatalf("the probe saw a %s /dev/shm, want %s", policy.FormatSize(r.FS.Size), policy.FormatSize(shm))
		}
		if code != 0 || r.Failure != shmprobe.FailureNone || r.OK != probeWorkers {
			t.Errorf("exit %d, %s; want all %d workers ok", code, r, probeWorkers)
		}
		for _, w := range r.Results {
			if w.Touched != probeWorkerSeg || w.Signal != "" {
				t.Errorf("worker %+v: want %d bytes touched", w, probeWorkerSeg)
			}
		}
	})
	t.Run("nccl creates every segment", func(t *testing.T) {
		var r shmprobe.NCCLResult
		code := probeRun(t, run(t, "nccl"), &r)
		if code != 0 || r.Failure != shmprobe.FailureNone || r.Created != probeNCCLCount {
			t.Errorf("exit %d, %s; want all %d segments", code, r, probeNCCLCount)
		}
	})
	t.Run("size check allocates all", func(t *testing.T) {
		var r shmprobe.Result
		code := probeRun(t, run(t, "size-large"), &r)
		if code != 0 || !r.OK() || r.Allocated != probeCheckLarge {
			t.Errorf("exit %d, %s; want %d bytes allocated", code, r, probeCheckLarge)
		}
	})
}

func TestShmProbe(t *testing.T) {
	config, logFile := shimConfig(t, "")
	d := harness.StartDockerd(t, harness.DockerdOptions{Env: []string{"GPURUN_CONFIG=" + config}})
	img := probeImage(t, d)
	pol, err := policy.Load(config, true)
	if err != nil {
		t.Fatal(err)
	}
	// GPU evidence: CUDA images set NVIDIA_VISIBLE_DEVICES; so does this.
	gpu := []string{"--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all"}

	t.Run("docker run, 64 MiB", func(t *testing.T) {
		expectTooSmall(t, func(t *testing.T, probe string) *exec.Cmd {
			return d.DockerCmd(append(append(append([]string{"run"}, gpu...), img), probeArgs[probe]...)...)
		}, policy.EngineDefaultShm)
	})

	// A size the container's memory limit cannot hold is refused, not
	// allocated: the kernel would OOM-kill the prober instead of saying no.
	t.Run("size check within a memory limit", func(t *testing.T) {
		limit, shm := 128*policy.MiB, policy.GiB
		var r shmprobe.Result
		code := probeRun(t, d.DockerCmd("run", "--rm", "--network", "none", "--memory", strconv.FormatInt(limit, 10), "--shm-size", strconv.FormatInt(shm, 10),
			img, "shm-probe", "size", "--json", strconv.FormatInt(shm/2, 10)), &r)
		if code != 1 || r.Failure != shmprobe.FailureMemory || r.Allocated != 0 || r.FS.Size != shm {
			t.Errorf("exit %d, %s; want exit 1, %s, nothing allocated", code, r, shmprobe.FailureMemory)
		}
	})

	t.Run("gpurun run", func(t *testing.T) {
		// gpurun sizes by the memory the daemon reports for its host.
		out, _, err := d.Docker("info", "--format", "{{.MemTotal}}")
		if err != nil {
			t.Fatal(err)
		}
		mem, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("docker info MemTotal %q: %v", out, err)
		}
		want, _ := pol.Target(policy.Request{HostMemory: mem})
		expectRoom(t, func(t *testing.T, probe string) *exec.Cmd {
			cmd := exec.Command(bin(t, "gpurun"), append(append(append([]string{"run"}, gpu...), img), probeArgs[probe]...)...)
			cmd.Env = append(d.Env(), "GPURUN_CONFIG="+config)
			return cmd
		}, want)
	})

	t.Run("runtime shim as the default runtime, no flag", func(t *testing.T) {
		installDocker(t, d, "install", "docker", "--config", d.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
			"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", config,
			"--set-as-default", "--reload", "--pid-file", filepath.Join(d.Dir, "dockerd.pid"))
		d.Reload()
		// The shim sizes by this host's memory, as /proc/meminfo says.
		expectRoom(t, func(t *testing.T, probe string) *exec.Cmd {
			return d.DockerCmd(append(append(append([]string{"run"}, gpu...), img), probeArgs[probe]...)...)
		}, hostTarget(t))
		if t.Failed() {
			t.Logf("shim log:\n%s", readFile(logFile))
		}
	})
}
