//go:build integration

package integration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/shmsweep"
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

// benchTmpfs is a directory on a tmpfs for a benchmark's bundles, as
// engines keep theirs (under /run), removed at its end.
func benchTmpfs(b *testing.B) string {
	b.Helper()
	shm, err := os.MkdirTemp("/dev/shm", "gpurun-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(shm) })
	return shm
}

// benchDir is a new directory in dir for one run of a benchmark (-count
// runs it again in the same dir).
func benchDir(b *testing.B, dir, prefix string) string {
	b.Helper()
	d, err := os.MkdirTemp(dir, prefix+"-")
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkRuntimeShimRuncRun measures a whole container life through
// gpurun-runtime against runc alone: `run` of a GPU container (busybox
// `true`, NVIDIA_VISIBLE_DEVICES=all) whose /dev/shm gpurun sizes, runc
// creating, starting, waiting for and deleting it, with the bundle on a
// tmpfs as engines keep it. Its cost is the CPU time of the whole process
// tree (user and system: the shim, runc and everything runc waited for),
// which contention on a busy machine inflates far less than wall time. Two
// bundles:
//
//   - docker: a bundle of Docker's shape, whose config.json gpurun-runtime
//     rewrites with the /dev/shm size;
//   - pod-sweep: a Kubernetes pod's container as containerd's CRI plugin
//     hands it over (its task bundle under the state dir, its /dev/shm
//     the sandbox's tmpfs there, the CRI annotations): gpurun-runtime grows
//     the sandbox's tmpfs (once: it is then at its size), and runs the
//     restart sweep of the pod's /dev/shm on every start (policy sweep =
//     "restart", the default; all but the first are restarts of the same
//     container, whose earlier instance left nothing).
//
// Each round runs runc, a static Go binary that only execs runc (the floor
// of any wrapper written in Go) and gpurun-runtime, in an order that
// rotates, so drift and contention fall on all three; config.json is put
// back before each run, off the clock. It reports the medians of the CPU
// times (runc-cpu-ms, go-exec-cpu-ms, shim-cpu-ms) and their ratios to
// runc's (cpu-ratio, goal ≤ 1.05; go-exec-cpu-ratio, the floor), and the
// wall times as before (runc-ms, shim-ms, added-ms, ratio,
// go-exec-runc-ms, over-go-exec-ms). GPURUN_BENCH_RUNTIME measures
// another build (an older one, for before/after).
func BenchmarkRuntimeShimRuncRun(b *testing.B) {
	e := newRuncEnv(b, "")
	if p := os.Getenv("GPURUN_BENCH_RUNTIME"); p != "" {
		e.rt = p
	}
	e.rt = installed(b, e.rt)
	wrapper := runcWrapper(b)
	shm := benchTmpfs(b)
	for _, v := range []struct {
		name string
		// bundle makes the bundle and returns it, the container id and a
		// check that the first run through gpurun-runtime took the path
		// measured.
		bundle func(b *testing.B) (bundle, id string, check func(spec []byte) error)
	}{
		{"docker", func(b *testing.B) (string, string, func([]byte) error) {
			bundle := harness.RuncBundle(b, benchDir(b, shm, "docker"), e.rootfs, []string{"true"}, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
			return bundle, "", func(spec []byte) error {
				if after, err := os.ReadFile(filepath.Join(bundle, "config.json")); err != nil || string(after) == string(spec) {
					return fmt.Errorf("gpurun-runtime did not size the GPU container's /dev/shm in its config.json (%v): not the sizing path", err)
				}
				return nil
			}
		}},
		{"pod-sweep", func(b *testing.B) (string, string, func([]byte) error) {
			bundle, id, record := podBundle(b, e.rootfs, benchDir(b, shm, "pod"))
			return bundle, id, func([]byte) error {
				if _, err := os.Stat(record); err != nil {
					return fmt.Errorf("the restart sweep recorded nothing (%v): not the sweep's path", err)
				}
				return nil
			}
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			bundle, id, check := v.bundle(b)
			config := filepath.Join(bundle, "config.json")
			spec, err := os.ReadFile(config)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			runIt := func(runtime string) cost {
				if err := os.WriteFile(config, spec, 0o644); err != nil {
					b.Fatal(err)
				}
				n++
				cid := id
				if cid == "" {
					cid = fmt.Sprintf("bench-%d", n)
				}
				_, stderr, c, err := e.runMeasured(nil, runtime, "run", "--bundle", bundle, cid)
				if err != nil {
					b.Fatalf("%s run: %v\n%s", runtime, err, stderr)
				}
				return c
			}
			runIt(e.rt)
			if err := check(spec); err != nil {
				b.Fatal(err)
			}
			// One of each before the clock, so caches are warm for all.
			runIt("runc")
			runIt(wrapper)
			runIt(e.rt)
			order := []string{"runc", wrapper, e.rt}
			costs := map[string][]cost{}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for j := range order {
					rt := order[(i+j)%len(order)]
					costs[rt] = append(costs[rt], runIt(rt))
				}
			}
			b.StopTimer()
			runc, wrap, shim := costs["runc"], costs[wrapper], costs[e.rt]
			reportAdded(b, "runc", walls(runc), "shim", walls(shim))
			b.ReportMetric(ms(median(walls(wrap))), "go-exec-runc-ms")
			over := make([]time.Duration, len(shim))
			for i := range shim {
				over[i] = shim[i].wall - wrap[i].wall
			}
			b.ReportMetric(ms(median(over)), "over-go-exec-ms")
			reportCPU(b, "runc", runc, map[string][]cost{"go-exec": wrap, "shim": shim})
		})
	}
}

// podBundle makes a bundle of a Kubernetes pod's GPU container as
// containerd's CRI plugin hands it to the runtime: under state, a tmpfs as
// containerd's state dir is, the task bundle
// <state>/io.containerd.runtime.v2.task/k8s.io/<id>, and its /dev/shm a
// bind of the sandbox's 64 MiB tmpfs
// <state>/io.containerd.grpc.v1.cri/sandboxes/<sandbox id>/shm, with the CRI
// annotations containerd 2.x writes (oci/testdata/fixtures). It returns
// the bundle, the container id and where the restart sweep keeps its
// record of the container, which it removes at cleanup.
func podBundle(b *testing.B, rootfs, state string) (bundle, id, record string) {
	b.Helper()
	sandbox := randomID(b)
	id = randomID(b)
	shm := filepath.Join(state, "io.containerd.grpc.v1.cri", "sandboxes", sandbox, "shm")
	mountTmpfs(b, shm)
	b.Cleanup(func() { _ = os.RemoveAll(filepath.Join(shmsweep.DefaultStateDir, sandbox)) })
	bundle = harness.RuncBundle(b, filepath.Join(state, dirs.ContainerdTaskDir, "k8s.io", id), rootfs, []string{"true"}, []string{"NVIDIA_VISIBLE_DEVICES=all"},
		func(spec map[string]any) {
			shmBind(shm)(spec)
			spec["annotations"] = map[string]any{
				"io.kubernetes.cri.container-name":    "app",
				"io.kubernetes.cri.container-type":    "container",
				"io.kubernetes.cri.image-name":        "docker.io/gpurun-test/busybox:latest",
				"io.kubernetes.cri.sandbox-id":        sandbox,
				"io.kubernetes.cri.sandbox-name":      "gpurun-bench",
				"io.kubernetes.cri.sandbox-namespace": "default",
				"io.kubernetes.cri.sandbox-uid":       "249b7efd-d799-4d3a-b63e-4abcf561c3b6",
			}
		})
	return bundle, id, filepath.Join(shmsweep.DefaultStateDir, sandbox, "app")
}

// randomID returns a container or sandbox id of containerd's shape: 64
// hex digits.
func randomID(b *testing.B) string {
	var buf [32]byte
	if _, err := rand.Read(buf[:]); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(buf[:])
}

// reportCPU reports the median CPU time of a base command's runs and of
// each other's, and each one's ratio to the base's (name-cpu-ratio;
// "cpu-ratio" for the one named "shim" or "hooked"). The medians are of
// runs taken side by side, in rotating order.
func reportCPU(b *testing.B, baseName string, base []cost, others map[string][]cost) {
	mb := median(cpus(base))
	b.ReportMetric(ms(mb), baseName+"-cpu-ms")
	for name, c := range others {
		m := median(cpus(c))
		b.ReportMetric(ms(m), name+"-cpu-ms")
		unit := name + "-cpu-ratio"
		if name == "shim" || name == "hooked" {
			unit = "cpu-ratio"
		}
		b.ReportMetric(float64(m)/float64(mb), unit)
	}
}

func walls(c []cost) []time.Duration {
	out := make([]time.Duration, len(c))
	for i := range c {
		out[i] = c[i].wall
	}
	return out
}

func cpus(c []cost) []time.Duration {
	out := make([]time.Duration, len(c))
	for i := range c {
		out[i] = c[i].cpu
	}
	return out
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
