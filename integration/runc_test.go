//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
)

// runcEnv runs bundles through gpurun-runtime (or plain runc) directly,
// with runc's state under a private --root.
type runcEnv struct {
	dir, rootfs, runcRoot, rt string
	config, logFile           string
	env                       []string
}

func newRuncEnv(t testing.TB, extraConfig string) *runcEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpurun-hr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	e := &runcEnv{dir: dir, rootfs: harness.BusyboxRootfs(t, dir), runcRoot: filepath.Join(dir, "runc"), rt: bin(t, "gpurun-runtime")}
	e.config = filepath.Join(dir, "config.toml")
	e.logFile = filepath.Join(dir, "gpurun.log")
	body := fmt.Sprintf("log_file = %q\nengine_roots = [%q]\n%s", e.logFile, filepath.Join(dir, "engine"), extraConfig)
	if err := os.WriteFile(e.config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	e.env = append(os.Environ(), "GPURUN_CONFIG="+e.config)
	t.Cleanup(func() {
		// Anything a failed test left running.
		out, _ := exec.Command("runc", "--root", e.runcRoot, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command("runc", "--root", e.runcRoot, "delete", "--force", id).Run()
		}
	})
	return e
}

// run runs `RUNTIME --root R ARGS` and returns stdout, stderr and the error.
func (e *runcEnv) run(runtime string, args ...string) (string, string, error) {
	return e.runWrapped(nil, runtime, args...)
}

// runWrapped is run with the command line appended to wrap (a command that
// runs its arguments, such as unshare), when wrap is not empty.
func (e *runcEnv) runWrapped(wrap []string, runtime string, args ...string) (string, string, error) {
	stdout, stderr, _, err := e.runMeasured(wrap, runtime, args...)
	return stdout, stderr, err
}

// cost is what one command cost: its wall time, and the CPU time (user
// and system) of its whole process tree — the command and every
// descendant it waited for, as wait4 counts them. `runc run` waits for
// its init, its hooks and the container's process (it is their
// subreaper), and a shim that execs runc is the same process.
type cost struct {
	wall, cpu time.Duration
}

// runMeasured is runWrapped that also returns what the command cost; the
// wall time is the command's alone, from its fork to its exit.
func (e *runcEnv) runMeasured(wrap []string, runtime string, args ...string) (stdout, stderr string, c cost, err error) {
	argv := append([]string{runtime, "--root", e.runcRoot, "--log", filepath.Join(e.dir, "runc.log"), "--log-format", "json"}, args...)
	argv = append(append([]string{}, wrap...), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = e.env
	// Files, not pipes: `create` hands its stdio to the container's init,
	// which holds a pipe open until it runs, after `start`.
	out, err := os.CreateTemp(e.dir, "stdout-")
	if err != nil {
		return "", "", c, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	errOut, err := os.CreateTemp(e.dir, "stderr-")
	if err != nil {
		return "", "", c, err
	}
	defer os.Remove(errOut.Name())
	defer errOut.Close()
	cmd.Stdout, cmd.Stderr = out, errOut
	start := time.Now()
	runErr := cmd.Run()
	c.wall = time.Since(start)
	if ps := cmd.ProcessState; ps != nil {
		c.cpu = ps.UserTime() + ps.SystemTime()
	}
	o, _ := os.ReadFile(out.Name())
	eo, _ := os.ReadFile(errOut.Name())
	return string(o), string(eo), c, runErr
}

func (e *runcEnv) bundle(t testing.TB, name string, args, env []string, edit func(map[string]any)) string {
	return harness.RuncBundle(t, filepath.Join(e.dir, "bundles", name), e.rootfs, args, env, edit)
}

// shmBind replaces the spec's /dev/shm with a bind of source.
func shmBind(source string) func(map[string]any) {
	return func(spec map[string]any) {
		mounts := spec["mounts"].([]any)
		for i, m := range mounts {
			if m.(map[string]any)["destination"] == "/dev/shm" {
				mounts[i] = map[string]any{"destination": "/dev/shm", "type": "bind", "source": source, "options": []string{"rbind", "rw"}}
			}
		}
	}
}

// mountTmpfs mounts a 64 MiB tmpfs at path, unmounted at cleanup.
func mountTmpfs(t testing.TB, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=65536k"); err != nil {
		t.Fatalf("mount tmpfs %s: %v", path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
}

// fillBundleDisk puts the bundle dir on a small tmpfs of its own holding
// its config.json (a copy of which is kept next to it, as
// <bundle>.config.json) and a file filling the rest: no new file fits.
func fillBundleDisk(t *testing.T, bundle string) {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle+".config.json", cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bundle", bundle, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs %s: %v", bundle, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bundle, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(bundle, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill %s: %v", bundle, err)
			}
			return
		}
	}
}

func TestShimRunc(t *testing.T) {
	e := newRuncEnv(t, "")
	want := hostTarget(t) / 1024
	df := []string{"df", "-k", "/dev/shm"}
	gpuEnv := []string{"NVIDIA_VISIBLE_DEVICES=all"}

	t.Run("GPU bundle gets the policy size", func(t *testing.T) {
		b := e.bundle(t, "gpu", df, gpuEnv, nil)
		out, stderr, err := e.run(e.rt, "run", "--bundle", b, "gpu")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		if got := dfKiB(t, out); got != want {
			t.Errorf("/dev/shm %d KiB, want %d", got, want)
		}
	})
	t.Run("non-GPU bundle stays 64 MiB", func(t *testing.T) {
		b := e.bundle(t, "plain", df, nil, nil)
		out, stderr, err := e.run(e.rt, "run", "-b", b, "plain")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		if got := dfKiB(t, out); got != 65536 {
			t.Errorf("/dev/shm %d KiB, want 65536", got)
		}
	})
	t.Run("engine host tmpfs under an engine root is grown, shared", func(t *testing.T) {
		src := filepath.Join(e.dir, "engine", "sandboxes", "pod1", "shm")
		mountTmpfs(t, src)
		b := e.bundle(t, "pod1", []string{"sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm"}, gpuEnv, shmBind(src))
		out, stderr, err := e.run(e.rt, "run", "-b", b, "pod1")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		if got := dfKiB(t, out); got != want {
			t.Errorf("/dev/shm %d KiB, want %d", got, want)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(src, &st); err != nil || int64(st.Blocks)*st.Bsize/1024 != want {
			t.Errorf("host side %d KiB, %v", int64(st.Blocks)*st.Bsize/1024, err)
		}
	})
}

// TestShimFaults: what the shim cannot do safely it logs and passes
// through (the container starts as the engine made it); with fail_closed the
// create fails with the reason.
func TestShimFaults(t *testing.T) {
	gpuEnv := []string{"NVIDIA_VISIBLE_DEVICES=all"}
	dfArgs := []string{"df", "-k", "/dev/shm"}
	type fault struct {
		name    string
		make    func(t *testing.T, e *runcEnv) string // returns the bundle
		runtime string                                // the gpurun-runtime build; "" for the release one
		started bool                                  // under fail-open, runc itself can start the container
		log     string
		after   func(t *testing.T, bundle string) // more checks, if any
	}
	faults := []fault{
		{"config.json with two spellings of mounts", func(t *testing.T, e *runcEnv) string {
			b := e.bundle(t, "dup", dfArgs, gpuEnv, nil)
			data, _ := os.ReadFile(filepath.Join(b, "config.json"))
			dup := strings.Replace(string(data), "{", `{"Mounts": null,`, 1) // runc reads the later "mounts"
			if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(dup), 0o644); err != nil {
				t.Fatal(err)
			}
			return b
		}, "", true, "ambiguous keys", nil},
		{"malformed config.json", func(t *testing.T, e *runcEnv) string {
			b := e.bundle(t, "bad", dfArgs, gpuEnv, nil)
			if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(`{"ociVersion": "1.0.2", "mounts": [`), 0o644); err != nil {
				t.Fatal(err)
			}
			return b
		}, "", false, "malformed JSON", nil},
		{"bind source outside the engine roots", func(t *testing.T, e *runcEnv) string {
			src := filepath.Join(e.dir, "elsewhere", "sandboxes", "pod2", "shm")
			mountTmpfs(t, src)
			return e.bundle(t, "outside", dfArgs, gpuEnv, shmBind(src))
		}, "", true, "not under an engine root", nil},
		{"symlinked bind source", func(t *testing.T, e *runcEnv) string {
			real := filepath.Join(e.dir, "engine", "real", "sandboxes", "pod3", "shm")
			mountTmpfs(t, real)
			link := filepath.Join(e.dir, "engine", "link")
			if err := os.Symlink(filepath.Join(e.dir, "engine", "real"), link); err != nil {
				t.Fatal(err)
			}
			return e.bundle(t, "symlink", dfArgs, gpuEnv, shmBind(filepath.Join(link, "sandboxes", "pod3", "shm")))
		}, "", true, "symbolic link", nil},
		{"panic while planning (a gpurunfault build)", func(t *testing.T, e *runcEnv) string {
			return e.bundle(t, "panic", dfArgs, gpuEnv, nil)
		}, "gpurun-runtime-fault", true, "panic: injected fault", nil},
		{"full disk while writing config.json", func(t *testing.T, e *runcEnv) string {
			b := e.bundle(t, "full", dfArgs, gpuEnv, nil)
			fillBundleDisk(t, b)
			return b
		}, "", true, "no space left on device", func(t *testing.T, b string) {
			// The engine's config.json as it was, and no half-written copy.
			if got := readFile(filepath.Join(b, "config.json")); got != readFile(filepath.Join(b, "..", "full.config.json")) {
				t.Errorf("config.json changed on a full disk:\n%s", got)
			}
			entries, _ := os.ReadDir(b)
			for _, en := range entries {
				if en.Name() != "config.json" && en.Name() != "filler" {
					t.Errorf("left in the bundle: %s", en.Name())
				}
			}
		}},
	}
	for _, f := range faults {
		for _, closed := range []bool{false, true} {
			name := f.name + map[bool]string{false: " (fail-open)", true: " (fail_closed)"}[closed]
			t.Run(name, func(t *testing.T) {
				extra := ""
				if closed {
					extra = "fail_closed = true\n"
				}
				e := newRuncEnv(t, extra)
				if f.runtime != "" {
					e.rt = bin(t, f.runtime)
				}
				b := f.make(t, e)
				out, stderr, err := e.run(e.rt, "run", "-b", b, "c")
				log := readFile(e.logFile)
				if !strings.Contains(log, f.log) {
					t.Errorf("gpurun log lacks %q:\n%s", f.log, log)
				}
				switch {
				case closed:
					if err == nil || !strings.Contains(stderr, "gpurun-runtime: ") || !strings.Contains(stderr, f.log) {
						t.Errorf("fail_closed: err %v, stderr %q; want a failure naming %q", err, stderr, f.log)
					}
					if !strings.Contains(readFile(filepath.Join(e.dir, "runc.log")), f.log) {
						t.Errorf("the engine's --log lacks the reason")
					}
				case f.started:
					if err != nil {
						t.Fatalf("fail-open: the container did not start: %v %s", err, stderr)
					}
					if got := dfKiB(t, out); got != 65536 {
						t.Errorf("/dev/shm %d KiB, want the untouched 65536", got)
					}
				case f.after != nil:
				default:
					// runc cannot run a malformed spec either: it must be
					// runc's own error, not gpurun's.
					if err == nil || strings.Contains(stderr, "gpurun-runtime") {
						t.Errorf("want runc's own failure, got err %v, stderr %q", err, stderr)
					}
				}
				if f.after != nil {
					f.after(t, b)
				}
			})
		}
	}
}

// TestShimConcurrentCycles: 200 create/start/delete cycles through the shim,
// 8 at a time, leave no failure and no corrupt config.json.
func TestShimConcurrentCycles(t *testing.T) {
	e := newRuncEnv(t, "")
	want := hostTarget(t)
	const cycles, workers = 200, 8
	template := e.bundle(t, "template", []string{"true"}, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
	tmpl, err := os.ReadFile(filepath.Join(template, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failures []string
	fail := func(format string, a ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				id := fmt.Sprintf("%s-cycle-%d", filepath.Base(e.dir), i)
				b := filepath.Join(e.dir, "cycles", id)
				if err := os.MkdirAll(b, 0o755); err != nil {
					fail("%s: %v", id, err)
					continue
				}
				if err := os.WriteFile(filepath.Join(b, "config.json"), tmpl, 0o644); err != nil {
					fail("%s: %v", id, err)
					continue
				}
				for _, step := range [][]string{{"create", "--bundle", b, id}, {"start", id}} {
					if _, stderr, err := e.run(e.rt, step...); err != nil {
						fail("%s %s: %v %s", id, step[0], err, stderr)
					}
				}
				waitStopped(e, id)
				if _, stderr, err := e.run(e.rt, "delete", "--force", id); err != nil {
					fail("%s delete: %v %s", id, err, stderr)
				}
				c, err := specfile.Load(filepath.Join(b, "config.json"))
				if err != nil {
					fail("%s: corrupt config.json: %v", id, err)
					continue
				}
				if got := oci.ClassifyShm(c.Spec, 0).Size; got != want {
					fail("%s: /dev/shm %d in config.json, want %d", id, got, want)
				}
			}
		}()
	}
	for i := 0; i < cycles; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d cycles failed:\n%s", len(failures), cycles, strings.Join(failures, "\n"))
	}
}

// waitStopped polls runc state until the container's process has exited.
func waitStopped(e *runcEnv, id string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, _, err := e.run("runc", "state", id)
		var st struct {
			Status string `json:"status"`
		}
		if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Status == "stopped" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkShimCycle: create+start+delete of a busybox bundle through
// gpurun-runtime (planning a GPU container, rewriting config.json) versus
// plain runc, alternated, reported as a ratio. Each of the three runc calls
// goes through one more Go process; the same cycle through a static Go
// binary that only execs runc (go-exec-ratio) is the floor of any wrapper
// written in Go, which the shim's ratio is to be read against.
func BenchmarkShimCycle(b *testing.B) {
	e := newRuncEnv(b, "")
	e.rt = installed(b, e.rt)
	template := e.bundle(b, "template", []string{"true"}, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
	tmpl, err := os.ReadFile(filepath.Join(template, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	cycle := func(runtime string) time.Duration {
		n++
		id := fmt.Sprintf("%s-bench-%d", filepath.Base(e.dir), n)
		bundle := filepath.Join(e.dir, "bench", id)
		if err := os.MkdirAll(bundle, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), tmpl, 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, step := range [][]string{{"create", "--bundle", bundle, id}, {"start", id}} {
			if _, stderr, err := e.run(runtime, step...); err != nil {
				b.Fatalf("%s %v: %v %s", runtime, step, err, stderr)
			}
		}
		waitStopped(e, id)
		if _, stderr, err := e.run(runtime, "delete", "--force", id); err != nil {
			b.Fatalf("%s delete: %v %s", runtime, err, stderr)
		}
		return time.Since(start)
	}
	wrapper := runcWrapper(b)
	cycle("runc")
	cycle(e.rt)
	cycle(wrapper)
	var runcTotal, shimTotal, wrapTotal time.Duration
	b.ResetTimer()
	for b.Loop() {
		runcTotal += cycle("runc")
		wrapTotal += cycle(wrapper)
		shimTotal += cycle(e.rt)
	}
	b.StopTimer()
	b.ReportMetric(float64(runcTotal.Microseconds())/float64(b.N)/1000, "runc-ms/cycle")
	b.ReportMetric(float64(shimTotal.Microseconds())/float64(b.N)/1000, "shim-ms/cycle")
	b.ReportMetric(float64(shimTotal)/float64(runcTotal), "ratio")
	b.ReportMetric(float64(wrapTotal)/float64(runcTotal), "go-exec-ratio")
}
