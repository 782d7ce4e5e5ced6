//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
)

// BenchmarkRunOverhead times `gpurun run --rm IMG true` against
// `docker run --rm IMG true` on a private dockerd with docker's default
// bridge network (in the daemon's own network namespace), alternating the
// two, and which of them goes first, so drift hits both. It reports the medians of each and gpurun's added
// time (goal: at most 15 ms) and ratio. The GPU variant includes gpurun's
// work: asking the daemon for the image env, memory and default-shm-size,
// and planning. docker run itself varies by ±10 ms from run to run here, so
// it also reports the launcher's own time, `gpurun --dry-run run ...`
// (launcher-ms): everything gpurun does before it would exec docker.
func BenchmarkRunOverhead(b *testing.B) {
	d := harness.StartDockerd(b, harness.DockerdOptions{Bridge: true})
	img := harness.BusyboxImage(b, d)
	gpurun := benchGpurun(b)
	for _, v := range []struct {
		name  string
		extra []string
	}{
		{"plain", nil},
		{"gpu", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			args := append(append([]string{"run", "--rm"}, v.extra...), img, "true")
			timeIt := func(name string, argv ...string) time.Duration {
				cmd := exec.Command(name, argv...)
				cmd.Env = d.Env()
				start := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%s %q: %v\n%s", name, argv, err, out)
				}
				return time.Since(start)
			}
			// One of each first, so images and caches are warm for both.
			timeIt("docker", args...)
			timeIt(gpurun, args...)
			// The launcher's own work, without docker run's: what it
			// does before it execs docker, shown by --dry-run.
			dry := append([]string{"--dry-run"}, args...)
			var dockerTimes, gpurunTimes, dryTimes []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				// Which goes first alternates: the daemon is still
				// removing the last --rm container when the next run
				// starts, which costs the second of a pair more.
				if i%2 == 0 {
					dockerTimes = append(dockerTimes, timeIt("docker", args...))
					gpurunTimes = append(gpurunTimes, timeIt(gpurun, args...))
				} else {
					gpurunTimes = append(gpurunTimes, timeIt(gpurun, args...))
					dockerTimes = append(dockerTimes, timeIt("docker", args...))
				}
				dryTimes = append(dryTimes, timeIt(gpurun, dry...))
			}
			b.StopTimer()
			reportAdded(b, "docker", dockerTimes, "gpurun", gpurunTimes)
			b.ReportMetric(ms(median(dryTimes)), "launcher-ms")
		})
	}
}

// BenchmarkCLIStart times `gpurun version` and `gpurun --help` (goal: at
// most 10 ms each), with one exec of /bin/true as the floor.
func BenchmarkCLIStart(b *testing.B) {
	gpurun := benchGpurun(b)
	for _, v := range []struct {
		name string
		argv []string
	}{
		{"true", []string{"/bin/true"}},
		{"version", []string{gpurun, "version"}},
		{"help", []string{gpurun, "--help"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				start := time.Now()
				if out, err := exec.Command(v.argv[0], v.argv[1:]...).CombinedOutput(); err != nil {
					b.Fatalf("%q: %v\n%s", v.argv, err, out)
				}
				times = append(times, time.Since(start))
			}
			b.ReportMetric(ms(median(times)), "median-ms")
		})
	}
}

// BenchmarkRuntimeShim times what gpurun-runtime adds to a runtime call
// (goal: at most one exec of a static Go binary + 1 ms): `gpurun-runtime
// create` of a GPU container's bundle on a tmpfs (/dev/shm), as containerd
// and dockerd keep bundles, whose low-level runtime is a trivial static Go
// binary, against that binary alone. Each call plans, rewrites config.json
// (the bundle is put back between calls, off the clock) and execs the
// binary. It reports the medians of both (go-exec-ms, shim-ms), the
// shim's added time, and that less one exec (over-exec-ms, goal ≤ 1).
func BenchmarkRuntimeShim(b *testing.B) {
	rt := os.Getenv("GPURUN_BENCH_RUNTIME") // an older build, for before/after
	if rt == "" {
		rt = bin(b, "gpurun-runtime")
	}
	rt = installed(b, rt)
	dir := b.TempDir()
	trivial := buildStaticGo(b, "package main\n\nfunc main() {}\n")
	// The bundle on a tmpfs, as engines keep it.
	bundle, err := os.MkdirTemp("/dev/shm", "gpurun-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(bundle) })
	spec, err := os.ReadFile(filepath.Join("..", "oci", "testdata", "fixtures", "docker-20.10-env-nvidia-all.json"))
	if err != nil {
		b.Fatal(err)
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte("runtime = \""+trivial+"\"\nlog_file = \""+filepath.Join(dir, "gpurun.log")+"\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "GPURUN_CONFIG="+config)
	timeIt := func(argv ...string) time.Duration {
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%q: %v\n%s", argv, err, out)
		}
		return time.Since(start)
	}
	shimArgs := []string{rt, "--root", filepath.Join(dir, "root"), "--log", filepath.Join(bundle, "log.json"), "--log-format", "json",
		"create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, "init.pid"), "bench"}
	timeIt(shimArgs...)
	if after, err := os.ReadFile(filepath.Join(bundle, "config.json")); err != nil || string(after) == string(spec) {
		b.Fatalf("gpurun-runtime did not resize the GPU container's /dev/shm in %s (%v): not the create path", bundle, err)
	}
	var goTimes, shimTimes []time.Duration
	b.ResetTimer()
	for b.Loop() {
		goTimes = append(goTimes, timeIt(trivial))
		shimTimes = append(shimTimes, timeIt(shimArgs...))
	}
	b.StopTimer()
	reportAdded(b, "go-exec", goTimes, "shim", shimTimes)
	over := make([]time.Duration, len(goTimes))
	for i := range goTimes {
		over[i] = shimTimes[i] - 2*goTimes[i]
	}
	b.ReportMetric(ms(median(over)), "over-exec-ms")
}

// BenchmarkRuntimeShimRuncRun times a whole container life through
// gpurun-runtime against runc alone: `run` of a GPU container (busybox
// `true`, NVIDIA_VISIBLE_DEVICES=all) whose /dev/shm gpurun sizes, runc
// creating, starting, waiting for and deleting it. The bundle's config.json
// is put back between calls, off the clock. It reports both medians
// (runc-ms, shim-ms), the added time and the ratio, and the same run through
// a static Go binary that only execs runc (go-exec-runc-ms: what any
// wrapper written in Go costs) with the shim's time beyond it
// (over-go-exec-ms).
func BenchmarkRuntimeShimRuncRun(b *testing.B) {
	e := newRuncEnv(b, "")
	if p := os.Getenv("GPURUN_BENCH_RUNTIME"); p != "" {
		e.rt = p // an older build, for before/after
	}
	e.rt = installed(b, e.rt)
	// The bundle on a tmpfs, as engines keep it (under /run).
	shm, err := os.MkdirTemp("/dev/shm", "gpurun-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(shm) })
	bundle := harness.RuncBundle(b, shm, e.rootfs, []string{"true"}, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
	config := filepath.Join(bundle, "config.json")
	spec, err := os.ReadFile(config)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	timeIt := func(runtime string) time.Duration {
		if err := os.WriteFile(config, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		n++
		start := time.Now()
		if _, stderr, err := e.run(runtime, "run", "--bundle", bundle, fmt.Sprintf("bench-%d", n)); err != nil {
			b.Fatalf("%s run: %v\n%s", runtime, err, stderr)
		}
		return time.Since(start)
	}
	timeIt(e.rt)
	if after, err := os.ReadFile(config); err != nil || string(after) == string(spec) {
		b.Fatalf("gpurun-runtime did not size the GPU container's /dev/shm (%v): not the sizing path", err)
	}
	wrapper := runcWrapper(b)
	var runcTimes, wrapTimes, shimTimes []time.Duration
	b.ResetTimer()
	for b.Loop() {
		runcTimes = append(runcTimes, timeIt("runc"))
		wrapTimes = append(wrapTimes, timeIt(wrapper))
		shimTimes = append(shimTimes, timeIt(e.rt))
	}
	b.StopTimer()
	reportAdded(b, "runc", runcTimes, "shim", shimTimes)
	b.ReportMetric(ms(median(wrapTimes)), "go-exec-runc-ms")
	over := make([]time.Duration, len(shimTimes))
	for i := range shimTimes {
		over[i] = shimTimes[i] - wrapTimes[i]
	}
	b.ReportMetric(ms(median(over)), "over-go-exec-ms")
}

// runcWrapper builds the floor of any runtime wrapper written in Go: a
// static Go binary that only execs runc with its command line.
func runcWrapper(b *testing.B) string {
	runc, err := exec.LookPath("runc")
	if err != nil {
		b.Fatal(err)
	}
	return buildStaticGo(b, fmt.Sprintf(`package main

import (
	"os"
	"syscall"
)

func main() {
	panic(syscall.Exec(%q, append([]string{%q}, os.Args[1:]...), os.Environ()))
}
`, runc, runc))
}

// buildStaticGo builds a static Go program of one file, src, as the
// release binaries are built, and returns its path.
func buildStaticGo(b *testing.B, src string) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module trivial\n\ngo 1.22\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if msg, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build a static Go binary: %v\n%s", err, msg)
	}
	return installed(b, out)
}

// installed returns a copy of the binary at path written as a package
// manager, install(1) or the node agent (gpurun node) writes one: with
// write(2). The Go
// linker writes its output through a shared mapping, and on this machine
// (Linux 6.18, ext4) an exec of the linker's file costs more than one of a
// byte-identical copy: 0.3 ms for gpurun-runtime (3 MB), 0.7 ms for
// gpurun (12 MB), measured run by run; the linker's file, once evicted
// and read back from disk, costs what the copy does. The benchmarks time
// binaries as they are installed, the floors (static Go binaries) too.
func installed(b *testing.B, path string) string {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, data, 0o755); err != nil {
		b.Fatal(err)
	}
	return out
}

// benchGpurun is the gpurun binary to measure, installed: a copy of
// $GPURUN_BENCH_GPURUN (an older build, for before/after numbers on the
// same conditions), else of the one built from this tree.
func benchGpurun(b *testing.B) string {
	if p := os.Getenv("GPURUN_BENCH_GPURUN"); p != "" {
		return installed(b, p)
	}
	return installed(b, bin(b, "gpurun"))
}

// reportAdded reports the median times of a base command and of the one
// measured against it, the median added time and the ratio of the medians.
func reportAdded(b *testing.B, baseName string, base []time.Duration, name string, times []time.Duration) {
	mb, mt := median(base), median(times)
	added := make([]time.Duration, len(base))
	for i := range base {
		added[i] = times[i] - base[i]
	}
	b.ReportMetric(ms(mb), baseName+"-ms")
	b.ReportMetric(ms(mt), name+"-ms")
	b.ReportMetric(ms(median(added)), "added-ms")
	b.ReportMetric(float64(mt)/float64(mb), "ratio")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
