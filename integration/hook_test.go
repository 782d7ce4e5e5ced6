//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/hooksd"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// withHook adds `gpurun hook --config CONFIG [--stage STAGE]` to a runc
// spec under stage; passStage false leaves --stage out, as a hooks.d entry
// listing several stages would.
func withHook(gpurun, config, stage string, passStage bool, then func(map[string]any)) func(map[string]any) {
	return func(spec map[string]any) {
		args := []string{"gpurun", "hook", "--config", config}
		if passStage {
			args = append(args, "--stage", stage)
		}
		spec["hooks"] = map[string]any{stage: []any{map[string]any{"path": gpurun, "args": args}}}
		if then != nil {
			then(spec)
		}
	}
}

// plannedKiB is what the shared planner gives the bundle's spec under the
// policy in config on this host, in KiB (df's unit); the plan's action too.
func plannedKiB(t *testing.T, config, bundle string) (int64, oci.Action) {
	t.Helper()
	pol, err := policy.Load(config, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := specfile.Load(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := sysinfo.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(cfg.Spec), Policy: pol, Facts: oci.Facts{HostMemory: mem, TmpfsSize: sysinfo.TmpfsSize}})
	return pl.Size / 1024, pl.Action
}

// hookLog returns the hook's log records for container id.
func hookLog(t testing.TB, path, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	data, _ := os.ReadFile(path)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["component"] == "gpurun-hook" && r["id"] == id {
			out = append(out, r)
		}
	}
	return out
}

// TestHookRunc runs busybox bundles with `runc run` directly, gpurun hook in
// their config.json: a GPU container's /dev/shm becomes the planned size in
// each stage a hook can act in, whether /dev/shm is the container's own
// 64 MiB tmpfs (grown inside its mount namespace) or a bind of a host tmpfs
// under an engine root (grown on the host); a container without GPU
// evidence keeps 64 MiB.
func TestHookRunc(t *testing.T) {
	e := newRuncEnv(t, "")
	gpurun := bin(t, "gpurun")
	gpuEnv := []string{"NVIDIA_VISIBLE_DEVICES=all"}
	df := []string{"df", "-k", "/dev/shm"}
	tests := []struct {
		name      string
		stage     string
		passStage bool
		env       []string
		hostShm   bool // /dev/shm binds a host tmpfs under the engine root
		action    oci.Action
	}{
		{"createRuntime, own tmpfs", "createRuntime", true, gpuEnv, false, oci.ActionSetSize},
		{"prestart, own tmpfs", "prestart", true, gpuEnv, false, oci.ActionSetSize},
		// Inside the container's namespaces; the state's pid is 1 in its PID
		// namespace; no --stage, as from a hooks.d entry.
		{"createContainer, own tmpfs", "createContainer", false, gpuEnv, false, oci.ActionSetSize},
		{"createContainer named, own tmpfs", "createContainer", true, gpuEnv, false, oci.ActionSetSize},
		{"createRuntime, host tmpfs", "createRuntime", true, gpuEnv, true, oci.ActionRemount},
		{"createRuntime, no GPU", "createRuntime", true, nil, false, oci.ActionNone},
		{"createContainer, no GPU", "createContainer", false, nil, false, oci.ActionNone},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("hook-%d", i)
			var edit func(map[string]any)
			var src string
			if tt.hostShm {
				src = filepath.Join(e.dir, "engine", "sandboxes", id, "shm")
				mountTmpfs(t, src)
				edit = shmBind(src)
			}
			b := e.bundle(t, id, df, tt.env, withHook(gpurun, e.config, tt.stage, tt.passStage, edit))
			wantKiB, action := plannedKiB(t, e.config, b)
			if action != tt.action {
				t.Fatalf("planner says %s for this bundle, the test expects %s", action, tt.action)
			}
			if action == oci.ActionNone && wantKiB != 65536 {
				t.Fatalf("planner keeps %d KiB; the bundle's /dev/shm is 64 MiB", wantKiB)
			}
			out, stderr, err := e.run("runc", "run", "--bundle", b, id)
			if err != nil {
				t.Fatalf("runc run: %v\n%s\ngpurun log:\n%s", err, stderr, readFile(e.logFile))
			}
			if got := dfKiB(t, out); got != wantKiB {
				t.Errorf("/dev/shm is %d KiB inside, want %d (%s)\ngpurun log:\n%s", got, wantKiB, action, readFile(e.logFile))
			}
			if tt.hostShm {
				var st unix.Statfs_t
				if err := unix.Statfs(src, &st); err != nil || int64(st.Blocks)*st.Bsize/1024 != wantKiB {
					t.Errorf("host side of %s is %d KiB (%v), want %d", src, int64(st.Blocks)*st.Bsize/1024, err, wantKiB)
				}
			}
			recs := hookLog(t, e.logFile, id)
			if len(recs) != 1 || recs[0]["msg"] != "planned /dev/shm" || recs[0]["action"] != string(action) {
				t.Errorf("hook log for %s: %v", id, recs)
			}
			if tt.passStage && len(recs) == 1 && recs[0]["stage"] != tt.stage {
				t.Errorf("logged stage %v, want %s", recs[0]["stage"], tt.stage)
			}
			if action == oci.ActionSetSize && len(recs) == 1 {
				// Where the tmpfs was found: from the runtime's namespace, the
				// init's; inside the container (createContainer), the hook's own.
				where := fmt.Sprint(recs[0]["path"])
				rootShm := filepath.Join(e.rootfs, "dev", "shm")
				want := fmt.Sprintf("pid %v: %s", recs[0]["container_pid"], rootShm)
				if tt.stage == "createContainer" {
					want = "own namespace: " + rootShm
				}
				if where != want {
					t.Errorf("grown at %q, want %q", where, want)
				}
			}
		})
	}
}

// TestHookRuncFaults: a hook that cannot act logs why and exits 0, so the
// container starts as the engine made it (64 MiB); with fail_closed the
// hook fails and runc does not start the container.
func TestHookRuncFaults(t *testing.T) {
	gpuEnv := []string{"NVIDIA_VISIBLE_DEVICES=all"}
	df := []string{"df", "-k", "/dev/shm"}
	type fault struct {
		name string
		// make returns the bundle and the policy file the hook is given.
		make func(t *testing.T, e *runcEnv, gpurun string) (bundle, config string)
		// log is where the hook's record goes: "" for the test's log_file.
		// Any other path is the machine's (the default log_file): runc and
		// the hook then run in a mount namespace of their own in which
		// that directory is one of the test's.
		log  string
		text string
	}
	faults := []fault{
		{"config.json malformed when the hook reads it", func(t *testing.T, e *runcEnv, gpurun string) (string, string) {
			// runc has read config.json before any hook runs; a hook ahead
			// of gpurun's breaks it for the hook only.
			breakIt := func(spec map[string]any) {
				hooks := spec["hooks"].(map[string]any)
				first := map[string]any{"path": "/bin/sh", "args": []string{"sh", "-c", `printf '{"ociVersion": ' >"$0/config.json"`, filepath.Join(e.dir, "bundles", "malformed")}}
				hooks["createRuntime"] = append([]any{first}, hooks["createRuntime"].([]any)...)
			}
			b := e.bundle(t, "malformed", df, gpuEnv, func(spec map[string]any) {
				withHook(gpurun, e.config, "createRuntime", true, nil)(spec)
				breakIt(spec)
			})
			return b, e.config
		}, "", "config.json: malformed JSON"},
		{"host tmpfs outside the engine roots", func(t *testing.T, e *runcEnv, gpurun string) (string, string) {
			src := filepath.Join(e.dir, "elsewhere", "sandboxes", "pod9", "shm")
			mountTmpfs(t, src)
			return e.bundle(t, "outside", df, gpuEnv, withHook(gpurun, e.config, "createRuntime", true, shmBind(src))), e.config
		}, "", "not under an engine root"},
		{"mode mount would add a tmpfs", func(t *testing.T, e *runcEnv, gpurun string) (string, string) {
			cfg := filepath.Join(e.dir, "mount.toml")
			body := strings.Replace(readFile(e.config), "log_file", "mode = \"mount\"\nlog_file", 1)
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			noShm := func(spec map[string]any) {
				var keep []any
				for _, m := range spec["mounts"].([]any) {
					if m.(map[string]any)["destination"] != "/dev/shm" {
						keep = append(keep, m)
					}
				}
				spec["mounts"] = keep
			}
			return e.bundle(t, "inject", []string{"true"}, gpuEnv, withHook(gpurun, cfg, "createRuntime", true, noShm)), cfg
		}, "", "cannot change the container's spec"},
		{"policy unreadable", func(t *testing.T, e *runcEnv, gpurun string) (string, string) {
			cfg := filepath.Join(e.dir, "broken.toml")
			if err := os.WriteFile(cfg, []byte("fail_closed = true\nsize = [\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return e.bundle(t, "nopolicy", df, gpuEnv, withHook(gpurun, cfg, "createRuntime", true, nil)), cfg
		}, policy.Default().LogFile, "policy unreadable"},
	}
	for _, f := range faults {
		for _, closed := range []bool{false, true} {
			if closed && f.log != "" {
				continue // an unreadable policy has no fail_closed to honour
			}
			name := f.name + map[bool]string{false: " (fail-open)", true: " (fail_closed)"}[closed]
			t.Run(name, func(t *testing.T) {
				extra := ""
				if closed {
					extra = "fail_closed = true\n"
				}
				e := newRuncEnv(t, extra)
				gpurun := bin(t, "gpurun")
				b, _ := f.make(t, e, gpurun)
				id := filepath.Base(e.dir) + "-" + filepath.Base(b)
				logPath := e.logFile
				var wrap []string
				if f.log != "" {
					private := t.TempDir()
					wrap = []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-ec", `mount --bind "$0" "$1"; shift; exec "$@"`, private, filepath.Dir(f.log)}
					logPath = filepath.Join(private, filepath.Base(f.log))
				}
				out, stderr, err := e.runWrapped(wrap, "runc", "run", "--bundle", b, id)
				recs := hookLog(t, logPath, id)
				if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["err"]), f.text) && !strings.Contains(fmt.Sprint(recs[0]["msg"]), f.text) {
					t.Errorf("hook log %s for %s: %v, want one record saying %q", logPath, id, recs, f.text)
				}
				if closed {
					if err == nil || !strings.Contains(stderr, "fail_closed") || !strings.Contains(stderr, f.text) {
						t.Errorf("fail_closed: runc run = %v, stderr %q; want a failed start naming %q", err, stderr, f.text)
					}
					return
				}
				if err != nil {
					t.Fatalf("fail-open: the container did not start: %v\n%s", err, stderr)
				}
				if strings.Contains(f.name, "mode mount") {
					return // started, with nothing added
				}
				if got := dfKiB(t, out); got != 65536 {
					t.Errorf("/dev/shm %d KiB, want the untouched 65536", got)
				}
			})
		}
	}
}

// nsHolder is a process in a mount namespace of its own.
type nsHolder struct {
	pid int
}

// startNamespace runs script in a new private mount namespace and waits for
// it to print "ready"; the process (and so the namespace) ends at cleanup,
// or with the test binary (PR_SET_PDEATHSIG: the starting OS thread stays
// locked until the process is reaped, since the signal fires when that
// thread ends — and GrowInNamespace ends the threads it uses).
func startNamespace(t *testing.T, script string) *nsHolder {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-ec", script+"\necho ready\nexec sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends after the process
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(exited)
	}()
	if err := <-started; err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("namespace script failed: %s", stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("namespace script not ready: %s", stderr.String())
	}
	return &nsHolder{pid: cmd.Process.Pid}
}

func mustReadlink(t *testing.T, p string) string {
	t.Helper()
	s, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nsMount returns the mount at path in the namespace of pid (nil if none).
func nsMount(t *testing.T, pid int, path string) *mountinfo.Info {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, mountinfo.SingleEntryFilter(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		return nil
	}
	return ms[0]
}

// TestGrowInNamespace: remount.GrowInNamespace grows a tmpfs that exists
// only in another process's mount namespace, keeps its flags, never
// shrinks it, and refuses the host's /dev/shm, stacked non-tmpfs mounts and
// paths that are no mount point there.
func TestGrowInNamespace(t *testing.T) {
	dir := t.TempDir()
	shm := filepath.Join(dir, "rootfs", "dev", "shm")
	hostBind := filepath.Join(dir, "rootfs", "hostshm")
	stacked := filepath.Join(dir, "rootfs", "stacked")
	plain := filepath.Join(dir, "rootfs", "plain")
	for _, d := range []string{shm, hostBind, stacked, plain} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := startNamespace(t, fmt.Sprintf(`
mount -t tmpfs -o size=64m,nosuid,nodev,noexec shm %[1]s
mount --bind /dev/shm %[2]s
mount -t tmpfs -o size=64m tmpfs %[3]s
mount --bind %[4]s %[3]s`, shm, hostBind, stacked, plain))

	if nsMount(t, os.Getpid(), shm) != nil {
		t.Fatalf("%s is mounted in the test's own namespace: the namespace is not private", shm)
	}
	const grown = 256 << 20
	res, err := remount.GrowInNamespace(h.pid, shm, grown)
	if err != nil || !res.Changed || res.Before != 64<<20 || res.After != grown {
		t.Fatalf("GrowInNamespace = %+v, %v; want 64 MiB -> 256 MiB", res, err)
	}
	m := nsMount(t, h.pid, shm)
	if m == nil || !strings.Contains(m.VFSOptions, fmt.Sprintf("size=%dk", grown/1024)) {
		t.Fatalf("mount in the namespace after growing: %+v", m)
	}
	for _, flag := range []string{"nosuid", "nodev", "noexec"} {
		if !strings.Contains(","+m.Options+",", ","+flag+",") {
			t.Errorf("flag %s dropped: %q", flag, m.Options)
		}
	}
	if nsMount(t, os.Getpid(), shm) != nil {
		t.Error("the remount leaked into the test's namespace")
	}

	// Never shrinks.
	res, err = remount.GrowInNamespace(h.pid, shm, 128<<20)
	if err != nil || res.Changed || res.After != grown {
		t.Errorf("GrowInNamespace(smaller) = %+v, %v; want no change", res, err)
	}

	hostBefore := hostShmKiB(t)
	refusals := []struct{ name, path, text string }{
		{"the host's /dev/shm, bound", hostBind, "host's /dev/shm"},
		{"a bind stacked on a tmpfs", stacked, "not a tmpfs"},
		{"not a mount point", plain, "not a mount point"},
		{"a path through a link", filepath.Join(dir, "link", "dev", "shm"), "not a mount point"},
	}
	if err := os.Symlink(filepath.Join(dir, "rootfs"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			res, err := remount.GrowInNamespace(h.pid, r.path, 1<<40)
			if !errors.Is(err, remount.ErrUnsafe) || !strings.Contains(err.Error(), r.text) || res.Changed {
				t.Errorf("GrowInNamespace(%s) = %+v, %v; want a refusal saying %q", r.path, res, err, r.text)
			}
		})
	}
	if got := hostShmKiB(t); got != hostBefore {
		t.Errorf("the host's /dev/shm changed: %d -> %d KiB", hostBefore, got)
	}
	// No thread of ours, the main one included, stayed in that namespace.
	if main, this := mustReadlink(t, "/proc/self/ns/mnt"), mustReadlink(t, "/proc/thread-self/ns/mnt"); main != this {
		t.Errorf("the main thread is in mount namespace %s after GrowInNamespace, this thread in %s", main, this)
	}

	// The caller's own namespace (pid 0), as a createContainer hook uses it,
	// after the calls above, one of which may have run first on the main thread.
	own := filepath.Join(dir, "own")
	mountTmpfs(t, own)
	res, err = remount.GrowInNamespace(0, own, grown)
	if err != nil || !res.Changed || res.After != grown {
		t.Errorf("GrowInNamespace(own namespace) = %+v, %v", res, err)
	}
}

// TestHookPodman: Podman from Debian's packages with --hooks-dir at what
// `gpurun install podman` wrote: a GPU container (env only) sees the planned
// size, a non-GPU one keeps Podman's default; uninstall removes the entry.
func TestHookPodman(t *testing.T) {
	p := harness.NewPodman(t)
	img := p.BusyboxImage()
	gpurun := bin(t, "gpurun")
	dir := t.TempDir()
	hooksDir := filepath.Join(dir, "hooks.d")
	state := filepath.Join(dir, "install-state.json")
	// Podman's /dev/shm is a tmpfs it mounts under its graph root, here
	// under /tmp, which the default engine_roots do not list: the hook
	// learns the graph root from the bundle path Podman hands the runtime.
	config, logFile := hookPolicy(t, dir)

	// No --hook-path: the entry runs the gpurun-runtime built beside
	// gpurun, in its hook mode.
	install := exec.Command(gpurun, "install", "podman", "--hooks-dir", hooksDir, "--policy", config, "--state", state)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("gpurun install podman: %v\n%s", err, out)
	}
	entry := filepath.Join(hooksDir, hooksd.HookFileName)
	data, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	if err := hooksd.ValidateHookJSON(entry, data); err != nil || !hooksd.IsGPURunHook(data) {
		t.Fatalf("hooks.d entry: %v\n%s", err, data)
	}
	var written struct{ Hook struct{ Path string } }
	if err := json.Unmarshal(data, &written); err != nil || written.Hook.Path != bin(t, "gpurun-runtime") {
		t.Fatalf("the hooks.d entry runs %q (%v), want gpurun-runtime's hook mode, %s:\n%s", written.Hook.Path, err, bin(t, "gpurun-runtime"), data)
	}

	tests := []struct {
		name string
		env  []string
		want int64
	}{
		{"GPU container by env", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}, podmanGPUShmKiB(t, config)},
		{"no GPU", nil, podmanDefaultKiB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--hooks-dir", hooksDir}, tt.env...)
			args = append(args, img, "df", "-k", "/dev/shm")
			out, stderr, err := p.Run(args...)
			if err != nil {
				t.Fatalf("%v\n%s\ngpurun log:\n%s", err, stderr, readFile(logFile))
			}
			if got := dfKiB(t, out); got != tt.want {
				t.Errorf("/dev/shm %d KiB, want %d\ngpurun log:\n%s", got, tt.want, readFile(logFile))
			}
		})
	}
	if log := readFile(logFile); strings.Count(log, `"component":"gpurun-hook"`) != len(tests) || strings.Contains(log, `"level":"ERROR"`) ||
		!strings.Contains(log, `"path":"`+filepath.Join(p.Root, "overlay-containers")) {
		t.Errorf("want one clean hook record per container, the GPU one's remount under the graph root %s:\n%s", p.Root, log)
	}

	uninstall := exec.Command(gpurun, "uninstall", "podman", "--hooks-dir", hooksDir, "--state", state)
	if out, err := uninstall.CombinedOutput(); err != nil {
		t.Fatalf("gpurun uninstall podman: %v\n%s", err, out)
	}
	if _, err := os.Stat(entry); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uninstall left %s: %v", entry, err)
	}
}

// podmanDefaultKiB is a Podman container's /dev/shm in KiB: containers.conf's
// default shm_size "65536k", which Podman reads as 65,536,000 bytes (see
// oci/testdata/fixtures/README.md).
const podmanDefaultKiB = 65536000 / 1024

// hookPolicy writes a policy file in dir that only sends the hook's log to
// a file of its own there, and returns both paths.
func hookPolicy(t *testing.T, dir string) (config, logFile string) {
	t.Helper()
	config, logFile = filepath.Join(dir, "config.toml"), filepath.Join(dir, "gpurun.log")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("log_file = %q\n", logFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	return config, logFile
}

// podmanGPUShmKiB is the /dev/shm size in KiB that the policy file config
// plans for a GPU container run by Podman with no memory limit: the
// policy's share of the host's memory.
func podmanGPUShmKiB(t *testing.T, config string) int64 {
	t.Helper()
	pol, err := policy.Load(config, true)
	if err != nil {
		t.Fatal(err)
	}
	return policyHostTarget(t, pol) / 1024
}

// BenchmarkHookRunc measures what gpurun's OCI hook at createRuntime (as
// Podman and CRI-O run it from hooks.d) adds to a whole container life:
// `runc run` of a busybox bundle (`true`) with the hook against the same
// bundle without it, runc creating, starting, waiting for and deleting
// the container, with the bundles on a tmpfs (/dev/shm) as engines keep
// them. Its cost is the CPU time of the whole process tree (user and
// system: runc, its init, the hook and the container's process, all of
// which runc waits for), which contention on a busy machine inflates far
// less than wall time. Two bundles:
//
//   - gpu: NVIDIA_VISIBLE_DEVICES=all; the hook sizes the container's own
//     64 MiB /dev/shm tmpfs, growing it inside the container's mount
//     namespace (the sizing path);
//   - no-gpu: no GPU evidence; the hook decides "none", the cost every
//     container pays for a hooks.d entry with "when": {"always": true}.
//
// Before the clock, one hooked run must have taken that path (the hook's
// log record: set-size, changed; or none), so the benchmark cannot
// measure a hook that does nothing. Each round runs the bundle without a
// hook, with a static Go binary as the hook that only reads the state runc
// gives it (the floor of any hook written in Go), with `gpurun hook` (the
// entry earlier installs wrote, and any written by hand) and with
// `gpurun-runtime hook` (what `gpurun install podman|crio` writes now), in
// an order that rotates, so drift and contention fall on all four;
// config.json is put back before each run, off the clock, as the shim's
// benchmark does. It reports the medians of the CPU times (runc-cpu-ms,
// go-hook-cpu-ms, hooked-cpu-ms, runtime-hook-cpu-ms) and their ratios to
// runc's (cpu-ratio for `gpurun hook`; runtime-hook-cpu-ratio;
// go-hook-cpu-ratio, the floor), and the mean wall times of runc and
// `gpurun hook` as before (runc-ms/run, hooked-ms/run, ratio).
// GPURUN_BENCH_GPURUN measures another build of gpurun (an older one, for
// before/after).
func BenchmarkHookRunc(b *testing.B) {
	e := newRuncEnv(b, "")
	gpurun := benchGpurun(b)
	rt := installed(b, e.rt)
	floor := buildStaticGo(b, "package main\n\nimport (\n\t\"io\"\n\t\"os\"\n)\n\nfunc main() { _, _ = io.Copy(io.Discard, os.Stdin) }\n")
	shm := benchTmpfs(b)
	for _, v := range []struct {
		name   string
		env    []string
		action oci.Action
	}{
		{"gpu", []string{"NVIDIA_VISIBLE_DEVICES=all"}, oci.ActionSetSize},
		{"no-gpu", nil, oci.ActionNone},
	} {
		b.Run(v.name, func(b *testing.B) {
			hook := func(path string) func(map[string]any) {
				return func(spec map[string]any) {
					withHook(gpurun, e.config, "createRuntime", true, nil)(spec)
					h := spec["hooks"].(map[string]any)["createRuntime"].([]any)[0].(map[string]any)
					switch path {
					case floor:
						h["path"], h["args"] = path, []string{"hook"}
					case rt:
						h["path"] = path
						h["args"].([]string)[0] = filepath.Base(path)
					}
				}
			}
			dir := benchDir(b, shm, v.name)
			bundles := map[string]string{
				"runc":         harness.RuncBundle(b, filepath.Join(dir, "plain"), e.rootfs, []string{"true"}, v.env, nil),
				"go-hook":      harness.RuncBundle(b, filepath.Join(dir, "go-hook"), e.rootfs, []string{"true"}, v.env, hook(floor)),
				"hooked":       harness.RuncBundle(b, filepath.Join(dir, "hooked"), e.rootfs, []string{"true"}, v.env, hook(gpurun)),
				"runtime-hook": harness.RuncBundle(b, filepath.Join(dir, "runtime-hook"), e.rootfs, []string{"true"}, v.env, hook(rt)),
			}
			specs := map[string][]byte{}
			for name, bundle := range bundles {
				spec, err := os.ReadFile(filepath.Join(bundle, "config.json"))
				if err != nil {
					b.Fatal(err)
				}
				specs[name] = spec
			}
			n := 0
			runIt := func(name string) (cost, string) {
				if err := os.WriteFile(filepath.Join(bundles[name], "config.json"), specs[name], 0o644); err != nil {
					b.Fatal(err)
				}
				n++
				id := fmt.Sprintf("%s-%s-%d", filepath.Base(e.dir), filepath.Base(dir), n)
				_, stderr, c, err := e.runMeasured(nil, "runc", "run", "--bundle", bundles[name], id)
				if err != nil {
					b.Fatalf("runc run (%s): %v\n%s", name, err, stderr)
				}
				return c, id
			}
			for _, name := range []string{"hooked", "runtime-hook"} {
				_, id := runIt(name)
				recs := hookLog(b, e.logFile, id)
				if len(recs) != 1 || recs[0]["msg"] != enforce.MsgPlanned || recs[0]["action"] != string(v.action) || recs[0]["err"] != nil ||
					v.action == oci.ActionSetSize && recs[0]["changed"] != true {
					b.Fatalf("the %s's records for %s: %v; want one %q, %s%s: not the path measured", name, id, recs, enforce.MsgPlanned, v.action,
						map[bool]string{true: ", changed"}[v.action == oci.ActionSetSize])
				}
			}
			// One of each before the clock, so caches are warm for all.
			order := []string{"runc", "go-hook", "hooked", "runtime-hook"}
			for _, name := range order {
				runIt(name)
			}
			costs := map[string][]cost{}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for j := range order {
					name := order[(i+j)%len(order)]
					c, _ := runIt(name)
					costs[name] = append(costs[name], c)
				}
			}
			b.StopTimer()
			runc, hooked := costs["runc"], costs["hooked"]
			mean := func(c []cost) float64 {
				var sum time.Duration
				for _, x := range c {
					sum += x.wall
				}
				return ms(sum) / float64(len(c))
			}
			b.ReportMetric(mean(runc), "runc-ms/run")
			b.ReportMetric(mean(hooked), "hooked-ms/run")
			b.ReportMetric(mean(hooked)/mean(runc), "ratio")
			reportCPU(b, "runc", runc, map[string][]cost{"go-hook": costs["go-hook"], "hooked": hooked, "runtime-hook": costs["runtime-hook"]})
		})
	}
}

// TestHookPodmanHooksDirConf: on a node whose containers.conf sets
// hooks_dir (Podman then reads only those directories), `gpurun install
// podman` without --hooks-dir writes its entry where Podman reads it, and
// a GPU container started with no --hooks-dir gets the planned size; an
// entry put in the default directory instead is never run (the container
// keeps Podman's default) and `gpurun doctor` says so. Podman and gpurun
// read /etc/containers as on a node (harness.Podman.AsOnANode).
func TestHookPodmanHooksDirConf(t *testing.T) {
	p := harness.NewPodman(t)
	img := p.BusyboxImage()
	gpurun := bin(t, "gpurun")
	dir := t.TempDir()
	siteHooks := filepath.Join(dir, "site-hooks.d")
	config, logFile := hookPolicy(t, dir)
	want := podmanGPUShmKiB(t, config)
	conf := fmt.Sprintf("[engine]\nhooks_dir = [%q]\n", siteHooks)
	// Each step prints the GPU container's /dev/shm (df -k) after a line
	// "== df", and what gpurun printed before it.
	for _, tc := range []struct {
		name, install string
		want          int64
		doctor        string // in gpurun doctor's output
	}{
		{"install without --hooks-dir", "", want, siteHooks + "/gpurun.json (read by Podman"},
		{"an entry in the default directory", "--hooks-dir /etc/containers/oci/hooks.d", podmanDefaultKiB,
			"/etc/containers/oci/hooks.d/gpurun.json: in no directory the engines here read (Podman reads " + siteHooks + ", as hooks_dir in /etc/containers/containers.conf says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "install-state.json")
			script := fmt.Sprintf(`%[1]s install podman --policy %[2]s --state %[3]s %[4]s
echo "== doctor"
%[1]s doctor --host 2>&1 || true
echo "== df"
"$@" run --rm --network none --cgroup-parent %[5]s -e NVIDIA_VISIBLE_DEVICES=all %[6]s df -k /dev/shm
%[1]s uninstall podman --state %[3]s
`, gpurun, config, state, tc.install, p.CgroupParent, img)
			out, stderr, err := p.AsOnANode(conf, script)
			if err != nil {
				t.Fatalf("%v\n%s\n%s", err, out, stderr)
			}
			before, df, ok := strings.Cut(out, "== df\n")
			if !ok {
				t.Fatalf("no df output:\n%s\n%s", out, stderr)
			}
			if got := dfKiB(t, df); got != tc.want {
				t.Errorf("/dev/shm %d KiB, want %d\n%s\ngpurun log:\n%s", got, tc.want, before, readFile(logFile))
			}
			if !strings.Contains(before, tc.doctor) {
				t.Errorf("install and doctor printed, without %q:\n%s", tc.doctor, before)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(siteHooks, hooksd.HookFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uninstall left the entry in %s: %v", siteHooks, err)
	}
}
