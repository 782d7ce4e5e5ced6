//go:build integration && e2e

package integration

// The users' failure end to end, on Debian's PyTorch (make e2e, make bench;
// docs/e2e.md): a DataLoader whose batches are larger than Docker's 64 MiB
// /dev/shm dies of it under plain docker run ("DataLoader worker (pid N) is
// killed by signal: Bus error", or another of PyTorch's messages for it:
// shmFailure), and finishes under gpurun run and under the gpurun runtime
// shim, with the same docker run arguments.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// torchImage is the tag hack/build-torch-image.sh imports the image as.
const torchImage = "gpurun-e2e/torch:bookworm"

// dockerDefaultShm is the /dev/shm Docker gives a container by default.
const dockerDefaultShm = 64 * policy.MiB

// The DataLoader of the failure: 4 workers, prefetch 2, batches of 9 samples
// of 8 MiB (72 MiB, more than dockerDefaultShm), 8 batches.
const (
	blocksWorkers   = 4
	blocksPrefetch  = 2
	blocksBatch     = 9
	blocksSampleMiB = 8
	blocksSamples   = blocksBatch * blocksWorkers * blocksPrefetch
)

// The throughput workload: 3x224x224 float32 images (588 KiB) through a
// CPU-bound numpy transform, in batches of 32 (18.4 MiB; 4 workers with
// prefetch 2 keep up to 8 of them, 147 MiB, in /dev/shm).
const (
	imagesBatch   = 32
	imagesSamples = 512
	imagesRounds  = 16
)

// shmFailure matches PyTorch's messages for a DataLoader that ran out of
// /dev/shm. Which of them a run prints is a race between the workers and
// the main process: a worker writing a batch into a full tmpfs faults
// (SIGBUS: its handler's "Unexpected bus error encountered in worker" and
// the main process's "DataLoader worker (pid N) is killed by signal: Bus
// error") or, when the file cannot even be sized, raises "unable to write
// to file </torch_…>: No space left on device", which the main process
// raises again.
var shmFailure = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)DataLoader worker \(pid \d+\) is killed by signal: bus error` +
		`|Unexpected bus error encountered in worker\. This might be caused by insufficient shared memory` +
		`|unable to write to file </torch_[0-9_]+>: No space left on device`)
})

// torchEnv is a private dockerd holding the PyTorch image, and a gpurun
// policy file that gpurun run and the daemon's runtimes both read.
type torchEnv struct {
	d       *harness.Dockerd
	config  string
	logFile string
	pol     *policy.Policy
	scripts string // testdata/e2e, mounted at /e2e in the containers
}

func newTorchEnv(tb testing.TB) *torchEnv {
	tb.Helper()
	dir := tb.TempDir()
	e := &torchEnv{
		config:  filepath.Join(dir, "config.toml"),
		logFile: filepath.Join(dir, "gpurun.log"),
	}
	if err := os.WriteFile(e.config, []byte("log_file = "+strconv.Quote(e.logFile)+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	var err error
	if e.pol, err = policy.Load(e.config, true); err != nil {
		tb.Fatal(err)
	}
	if e.scripts, err = filepath.Abs(filepath.Join("testdata", "e2e")); err != nil {
		tb.Fatal(err)
	}
	e.d = harness.StartDockerd(tb, harness.DockerdOptions{Env: []string{"GPURUN_CONFIG=" + e.config}})
	start := time.Now()
	cmd := exec.Command(filepath.Join("..", "hack", "build-torch-image.sh"), torchImage)
	cmd.Env = e.d.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("hack/build-torch-image.sh %s: %v\n%s", torchImage, err, out)
	}
	tb.Logf("PyTorch image ready in %s:\n%s", time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(string(out)))
	return e
}

// runArgs are the docker run arguments of every run: a GPU container (by
// NVIDIA_VISIBLE_DEVICES; gpurun needs no real GPU to decide) running
// testdata/e2e/dataloader.py with args.
func (e *torchEnv) runArgs(args ...string) []string {
	return append([]string{"run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all",
		"-v", e.scripts + ":/e2e:ro", torchImage, "python3", "/e2e/dataloader.py"}, args...)
}

// run runs name (docker or gpurun) with args against the private daemon and
// returns stdout and stderr together, the exit status and the wall time.
func (e *torchEnv) run(tb testing.TB, name string, args ...string) (string, int, time.Duration) {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(e.d.Env(), "GPURUN_CONFIG="+e.config)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		tb.Fatalf("%s %q: %v", name, args, err)
	}
	return out.String(), code, took
}

// loaderResult is the RESULT line of dataloader.py.
type loaderResult struct {
	ShmBytes    int64   `json:"shm_bytes"`
	Samples     int     `json:"samples"`
	Batches     int     `json:"batches"`
	Seconds     float64 `json:"seconds"`
	SamplesPerS float64 `json:"samples_per_s"`
	CPUSeconds  float64 `json:"cpu_seconds"`
}

// result returns the RESULT line of a run that must have succeeded.
func result(tb testing.TB, out string, code int) loaderResult {
	tb.Helper()
	if code != 0 {
		tb.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			var r loaderResult
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				tb.Fatalf("RESULT line %q: %v", rest, err)
			}
			return r
		}
	}
	tb.Fatalf("no RESULT line:\n%s", out)
	return loaderResult{}
}

// requireShmFailure fails unless a run died of its DataLoader's full
// /dev/shm.
func requireShmFailure(tb testing.TB, out string, code int) {
	tb.Helper()
	if code == 0 || !shmFailure().MatchString(out) {
		tb.Fatalf("exit %d, want a failure matching %q:\n%s", code, shmFailure(), out)
	}
	if strings.Contains(out, "\nRESULT ") {
		tb.Fatalf("the DataLoader finished although a worker died:\n%s", out)
	}
}

func blocksArgs() []string {
	return []string{"blocks", "--workers", strconv.Itoa(blocksWorkers), "--prefetch", strconv.Itoa(blocksPrefetch),
		"--batch", strconv.Itoa(blocksBatch), "--sample-mib", strconv.Itoa(blocksSampleMiB), "--samples", strconv.Itoa(blocksSamples)}
}

func imagesArgs(workers int) []string {
	return []string{"images", "--workers", strconv.Itoa(workers), "--prefetch", "2",
		"--batch", strconv.Itoa(imagesBatch), "--samples", strconv.Itoa(imagesSamples), "--rounds", strconv.Itoa(imagesRounds)}
}

// TestTorchDataLoaderShm: the same docker run of a DataLoader dies with Bus
// error at Docker's default /dev/shm, and finishes under gpurun run and
// under gpurun-runtime installed as the daemon's default runtime.
func TestTorchDataLoaderShm(t *testing.T) {
	if batch := int64(blocksBatch * blocksSampleMiB * policy.MiB); batch <= dockerDefaultShm {
		t.Fatalf("a batch of %d bytes fits in Docker's default /dev/shm: the test would prove nothing", batch)
	}
	e := newTorchEnv(t)
	args := e.runArgs(blocksArgs()...)
	check := func(t *testing.T, r loaderResult, wantShm int64) {
		t.Helper()
		if r.ShmBytes != wantShm {
			t.Errorf("/dev/shm %d bytes, want %d", r.ShmBytes, wantShm)
		}
		if want := (blocksSamples + blocksBatch - 1) / blocksBatch; r.Samples != blocksSamples || r.Batches != want {
			t.Errorf("%d samples in %d batches, want %d in %d", r.Samples, r.Batches, blocksSamples, want)
		}
	}

	t.Run("docker run at the default /dev/shm dies of it", func(t *testing.T) {
		out, code, took := e.run(t, "docker", args...)
		requireShmFailure(t, out, code)
		if want := "/dev/shm " + strconv.FormatInt(dockerDefaultShm, 10) + " bytes"; !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
		t.Logf("docker run: exit %d in %s: %s", code, took.Round(time.Millisecond), shmFailure().FindString(out))
	})

	t.Run("gpurun run with the same arguments finishes", func(t *testing.T) {
		info, code, _ := e.run(t, "docker", "info", "--format", "{{.MemTotal}}")
		mem, err := strconv.ParseInt(strings.TrimSpace(info), 10, 64)
		if code != 0 || err != nil {
			t.Fatalf("docker info MemTotal: exit %d, %v: %s", code, err, info)
		}
		want, _ := e.pol.Target(policy.Request{HostMemory: mem})
		out, code, took := e.run(t, bin(t, "gpurun"), args...)
		r := result(t, out, code)
		check(t, r, want)
		t.Logf("gpurun run: /dev/shm %s, container run %s: %s", policy.FormatSize(r.ShmBytes), took.Round(time.Millisecond), lastLine(out))
	})

	t.Run("docker run under the gpurun runtime shim finishes", func(t *testing.T) {
		installDocker(t, e.d, "install", "docker", "--config", e.d.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
			"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", e.config,
			"--set-as-default", "--reload", "--pid-file", filepath.Join(e.d.Dir, "dockerd.pid"))
		e.d.For(t).Reload()
		mem, err := sysinfo.MemTotal()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := e.pol.Target(policy.Request{HostMemory: mem})
		out, code, took := e.run(t, "docker", args...)
		if code != 0 {
			t.Fatalf("exit %d:\n%s\nshim log:\n%s", code, out, readFile(e.logFile))
		}
		r := result(t, out, code)
		check(t, r, want)
		t.Logf("docker run (gpurun-runtime): /dev/shm %s, container run %s: %s", policy.FormatSize(r.ShmBytes), took.Round(time.Millisecond), lastLine(out))
	})
}

// BenchmarkTorchDataLoader measures what the num_workers=0 workaround costs:
// DataLoader throughput (samples/s) on a CPU-bound transform with
// num_workers=4 under gpurun run, against num_workers=0 under plain docker
// run at Docker's default /dev/shm (where num_workers=4 dies, checked
// first). The two runs alternate so drift hits both. On a machine with few
// cores the speedup is bounded by the cores the workers get, not by the 4
// workers; the cores-used metrics say how many that was.
func BenchmarkTorchDataLoader(b *testing.B) {
	e := newTorchEnv(b)
	gpurun := bin(b, "gpurun")
	out, code, _ := e.run(b, "docker", e.runArgs(imagesArgs(4)...)...)
	requireShmFailure(b, out, code)

	var w0, w4 loaderResult
	add := func(sum *loaderResult, r loaderResult, wantShm func(int64) bool) {
		if r.Samples != imagesSamples || !wantShm(r.ShmBytes) {
			b.Fatalf("run gave %d samples with /dev/shm %d bytes", r.Samples, r.ShmBytes)
		}
		sum.Samples += r.Samples
		sum.Seconds += r.Seconds
		sum.CPUSeconds += r.CPUSeconds
	}
	for b.Loop() {
		out, code, _ := e.run(b, "docker", e.runArgs(imagesArgs(0)...)...)
		add(&w0, result(b, out, code), func(n int64) bool { return n == dockerDefaultShm })
		out, code, _ = e.run(b, gpurun, e.runArgs(imagesArgs(4)...)...)
		add(&w4, result(b, out, code), func(n int64) bool { return n > dockerDefaultShm })
	}
	b.StopTimer()
	rate := func(r loaderResult) float64 { return float64(r.Samples) / r.Seconds }
	b.ReportMetric(rate(w0), "workers0-default-shm-samples/s")
	b.ReportMetric(rate(w4), "workers4-gpurun-samples/s")
	b.ReportMetric(rate(w4)/rate(w0), "speedup")
	// How many cores each variant kept busy: on a shared machine the
	// speedup follows what the workers were given.
	b.ReportMetric(w0.CPUSeconds/w0.Seconds, "workers0-cores-used")
	b.ReportMetric(w4.CPUSeconds/w4.Seconds, "workers4-cores-used")
}
