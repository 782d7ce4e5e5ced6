package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const (
	hostMem   = 48 << 30 // what the fake MemTotal reports
	podmanShm = 65536000 // Podman's default userdata/shm, as the fake statfs reports it
	podmanSrc = "/var/lib/containers/storage/overlay-containers/2e315290161bfa1356e29152e483e5b451fe61ce288d62009a7145af926d173b/userdata/shm"
)

// spec builds a config.json: a /dev/shm mount (nil: none), env and
// annotations.
func spec(shm map[string]any, env []string, ann map[string]string) map[string]any {
	mounts := []any{map[string]any{"destination": "/proc", "type": "proc", "source": "proc"}}
	if shm != nil {
		mounts = append(mounts, shm)
	}
	s := map[string]any{
		"ociVersion": "1.0.2",
		"process":    map[string]any{"args": []string{"sh"}, "env": append([]string{"PATH=/bin"}, env...), "cwd": "/"},
		"root":       map[string]any{"path": "rootfs"},
		"mounts":     mounts,
		"linux":      map[string]any{"namespaces": []any{map[string]any{"type": "mount"}, map[string]any{"type": "ipc"}}},
	}
	if ann != nil {
		s["annotations"] = ann
	}
	return s
}

var (
	privateShm = map[string]any{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}
	podmanBind = map[string]any{"destination": "/dev/shm", "type": "bind", "source": podmanSrc, "options": []string{"bind", "rprivate", "nosuid", "noexec", "nodev"}}
	gpuEnv     = []string{"NVIDIA_VISIBLE_DEVICES=all"}
)

// calls records what the hook did.
type calls struct {
	grow    []string // "path size roots"
	private []Target
	sizes   []int64
}

type fixture struct {
	dir, bundle, config, log string
	calls                    *calls
	h                        *Hook
}

// newFixture writes a bundle with cfg (nil: no config.json) and a policy
// with extra lines, and a Hook whose effects are recorded.
func newFixture(t *testing.T, cfg map[string]any, extra string, state string) *fixture {
	t.Helper()
	return newFixtureAt(t, "bundle", cfg, extra, state)
}

// newFixtureAt is newFixture with the bundle at rel under the fixture's
// directory (a Podman layout, say).
func newFixtureAt(t *testing.T, rel string, cfg map[string]any, extra string, state string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), calls: &calls{}}
	f.bundle = filepath.Join(f.dir, rel)
	if err := os.MkdirAll(filepath.Join(f.bundle, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		data, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.bundle, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.log = filepath.Join(f.dir, "gpurun.log")
	f.config = filepath.Join(f.dir, "config.toml")
	body := fmt.Sprintf("log_file = %q\nengine_roots = [\"/var/lib/containers/storage\"]\n%s", f.log, extra)
	if err := os.WriteFile(f.config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if state == "" {
		state = fmt.Sprintf(`{"ociVersion":"1.0.2","id":"ctr1","status":"creating","pid":4242,"bundle":%q}`, f.bundle)
	}
	c := f.calls
	f.h = &Hook{
		Stdin:      strings.NewReader(state),
		ConfigPath: f.config,
		Stage:      "createRuntime",
		Getenv:     func(string) string { return "" },
		Fallback:   &policy.Policy{LogFile: f.log},
		Facts:      hostFacts(podmanShm),
		Grow: func(path string, size int64, scope remount.Scope) (remount.Result, error) {
			c.grow = append(c.grow, fmt.Sprintf("%s %d %s", path, size, scope))
			return remount.Result{Before: podmanShm, After: size, Changed: true}, nil
		},
		GrowPrivate: func(tg Target, size int64) (remount.Result, string, error) {
			c.private = append(c.private, tg)
			c.sizes = append(c.sizes, size)
			return remount.Result{Before: 64 << 20, After: size, Changed: true}, "pid 4242: " + tg.Rootfs + "/dev/shm", nil
		},
	}
	return f
}

// hostFacts are the fake host's facts, its engine tmpfs shmSize bytes.
func hostFacts(shmSize int64) func() (oci.Facts, error) {
	return func() (oci.Facts, error) {
		return oci.Facts{HostMemory: hostMem, TmpfsSize: func(string) (int64, error) { return shmSize, nil }}, nil
	}
}

// records returns the hook's log records.
func (f *fixture) records(t *testing.T) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(f.log)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// target is what the policy in f gives a container without a memory limit.
func (f *fixture) target(t *testing.T) int64 {
	t.Helper()
	pol, err := policy.Load(f.config, true)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := pol.Target(policy.Request{HostMemory: hostMem})
	return n
}

func TestRunCarriesOutThePlan(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]any
		extra   string
		action  oci.Action
		grow    bool // remount.Grow of podmanSrc
		private bool // GrowPrivate
	}{
		{"GPU container with its own tmpfs: grown in its namespace", spec(privateShm, gpuEnv, nil), "", oci.ActionSetSize, false, true},
		{"GPU container binding Podman's host tmpfs: grown on the host", spec(podmanBind, gpuEnv, nil), "", oci.ActionRemount, true, false},
		{"GPU by CDI annotation", spec(podmanBind, nil, map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}), "", oci.ActionRemount, true, false},
		{"no GPU evidence: nothing", spec(privateShm, nil, nil), "", oci.ActionNone, false, false},
		{"no GPU but match all", spec(privateShm, nil, nil), "match = \"all\"\n", oci.ActionSetSize, false, true},
		{"already sized by --shm-size: nothing", spec(podmanBind, gpuEnv, nil), "", oci.ActionNone, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.cfg, tt.extra, "")
			if strings.Contains(tt.name, "--shm-size") {
				f.h.Facts = hostFacts(2 << 30)
			}
			if err := f.h.Run(); err != nil {
				t.Fatal(err)
			}
			want := f.target(t)
			if tt.grow {
				if len(f.calls.grow) != 1 || f.calls.grow[0] != fmt.Sprintf("%s %d engine roots %s", podmanSrc, want, "/var/lib/containers/storage") {
					t.Errorf("Grow calls %q, want one of %s to %d", f.calls.grow, podmanSrc, want)
				}
			} else if len(f.calls.grow) != 0 {
				t.Errorf("unexpected Grow %q", f.calls.grow)
			}
			if tt.private {
				wantT := Target{Pid: 4242, Rootfs: filepath.Join(f.bundle, "rootfs"), Stage: "createRuntime"}
				if len(f.calls.private) != 1 || f.calls.private[0] != wantT || f.calls.sizes[0] != want {
					t.Errorf("GrowPrivate calls %+v %v, want %+v to %d", f.calls.private, f.calls.sizes, wantT, want)
				}
			} else if len(f.calls.private) != 0 {
				t.Errorf("unexpected GrowPrivate %+v", f.calls.private)
			}
			recs := f.records(t)
			if len(recs) != 1 || recs[0]["msg"] != "planned /dev/shm" || recs[0]["action"] != string(tt.action) ||
				recs[0]["id"] != "ctr1" || recs[0]["stage"] != "createRuntime" || recs[0]["component"] != Component {
				t.Errorf("log %v, want one planned record with action %s", recs, tt.action)
			}
		})
	}
}

func TestRunFailsOpenUnlessFailClosed(t *testing.T) {
	badGrow := func(f *fixture) {
		f.h.Grow = func(string, int64, remount.Scope) (remount.Result, error) {
			return remount.Result{}, fmt.Errorf("%w: not under an engine root", remount.ErrUnsafe)
		}
	}
	badPrivate := func(f *fixture) {
		f.h.GrowPrivate = func(Target, int64) (remount.Result, string, error) {
			return remount.Result{}, "", errors.New("no tmpfs could be grown: not a mount point")
		}
	}
	panics := func(f *fixture) {
		f.h.GrowPrivate = func(Target, int64) (remount.Result, string, error) { panic("boom") }
	}
	noPid := func(f *fixture) {
		f.h.Stdin = strings.NewReader(fmt.Sprintf(`{"id":"ctr1","bundle":%q}`, f.bundle))
	}
	tests := []struct {
		name  string
		cfg   map[string]any
		extra string
		setup func(*fixture)
		log   string
	}{
		{"mode mount would inject a tmpfs", spec(nil, gpuEnv, nil), "mode = \"mount\"\n", nil, "cannot change the container's spec"},
		{"mode ipc-host", spec(privateShm, gpuEnv, nil), "mode = \"ipc-host\"\n", nil, "plan \"ipc-host\""},
		{"host tmpfs refused", spec(podmanBind, gpuEnv, nil), "", badGrow, "not under an engine root"},
		{"own tmpfs not found", spec(privateShm, gpuEnv, nil), "", badPrivate, "not a mount point"},
		{"panic while acting", spec(privateShm, gpuEnv, nil), "", panics, "panic: boom"},
		{"state without pid", spec(privateShm, gpuEnv, nil), "", noPid, `no "pid"`},
		{"no config.json", nil, "", nil, "config.json"},
	}
	for _, tt := range tests {
		for _, closed := range []bool{false, true} {
			name := tt.name + map[bool]string{false: " (fail-open)", true: " (fail_closed)"}[closed]
			t.Run(name, func(t *testing.T) {
				extra := tt.extra
				if closed {
					extra += "fail_closed = true\n"
				}
				f := newFixture(t, tt.cfg, extra, "")
				if tt.setup != nil {
					tt.setup(f)
				}
				err := f.h.Run()
				var fc *enforce.FailClosedError
				if closed != errors.As(err, &fc) {
					t.Fatalf("Run = %v; fail_closed %v", err, closed)
				}
				if closed && (!strings.Contains(err.Error(), tt.log) || fc.Policy != f.config) {
					t.Errorf("error %q lacks %q or the policy path", err, tt.log)
				}
				recs := f.records(t)
				if len(recs) != 1 || recs[0]["level"] != "ERROR" || !strings.Contains(fmt.Sprint(recs[0]["err"]), tt.log) || recs[0]["fail_closed"] != closed {
					t.Errorf("log %v, want one error record with %q", recs, tt.log)
				}
			})
		}
	}
}

// TestRunGrowsWhatPodmanNamed: a bundle in Podman's layout names its graph
// root, wherever it is: the hook grows exactly the userdata/shm there,
// whatever engine_roots say, and refuses a bind under another root.
func TestRunGrowsWhatPodmanNamed(t *testing.T) {
	const id = "2e315290161bfa1356e29152e483e5b451fe61ce288d62009a7145af926d173b"
	rel := filepath.Join("graph", "overlay-containers", id, "userdata")
	state := func(f *fixture) string {
		return fmt.Sprintf(`{"ociVersion":"1.0.2","id":%q,"status":"creating","pid":4242,"bundle":%q}`, id, f.bundle)
	}
	for _, tt := range []struct {
		name    string
		source  func(f *fixture) string
		refused bool
	}{
		{"the container's own userdata/shm", func(f *fixture) string { return filepath.Join(f.bundle, "shm") }, false},
		{"another graph root's", func(*fixture) string { return podmanSrc }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureAt(t, rel, nil, "", "-")
			bindAt := map[string]any{"destination": "/dev/shm", "type": "bind", "source": tt.source(f), "options": []string{"bind", "rprivate"}}
			data, err := json.Marshal(spec(bindAt, gpuEnv, nil))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(f.bundle, "config.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			f.h.Stdin = strings.NewReader(state(f))
			if err := f.h.Run(); err != nil {
				t.Fatal(err)
			}
			recs := f.records(t)
			if tt.refused {
				if len(f.calls.grow) != 0 || len(recs) != 1 || recs[0]["refused"] != true || !strings.Contains(fmt.Sprint(recs[0]["err"]), "containers/storage named "+filepath.Join(f.dir, "graph")) {
					t.Errorf("grows %q, records %v; want a refusal naming the graph root", f.calls.grow, recs)
				}
				return
			}
			want := fmt.Sprintf("%s %d named %s", tt.source(f), f.target(t), tt.source(f))
			if len(f.calls.grow) != 1 || f.calls.grow[0] != want || len(recs) != 1 || recs[0]["msg"] != "planned /dev/shm" {
				t.Errorf("grows %q, records %v; want %q", f.calls.grow, recs, want)
			}
		})
	}
}

func TestRunWithUnreadablePolicyFailsOpen(t *testing.T) {
	f := newFixture(t, spec(privateShm, gpuEnv, nil), "", "")
	if err := os.WriteFile(f.config, []byte("fail_closed = true\nsize = [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.h.Run(); err != nil {
		t.Fatalf("Run = %v, want fail-open", err)
	}
	if len(f.calls.grow)+len(f.calls.private) != 0 {
		t.Errorf("acted without a policy: %+v", f.calls)
	}
	recs := f.records(t)
	if len(recs) != 1 || recs[0]["msg"] != "policy unreadable; container left as it is" || !strings.Contains(fmt.Sprint(recs[0]["err"]), f.config) {
		t.Errorf("log %v", recs)
	}
}

type specsRoot = specs.Root

func TestRootfs(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.MkdirAll(filepath.Join(real, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, bundle, want string
	}{
		{"relative to the bundle", "rootfs", real, filepath.Join(real, "rootfs")},
		{"absolute", "/x/y/", real, "/x/y"},
		{"no root: bundle/rootfs", "", real, filepath.Join(real, "rootfs")},
		{"links resolved", filepath.Join(dir, "link", "rootfs"), "/b", filepath.Join(real, "rootfs")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var root *specsRoot
			if tt.path != "" {
				root = &specsRoot{Path: tt.path}
			}
			if got := Rootfs(root, tt.bundle); got != tt.want {
				t.Errorf("Rootfs(%q, %q) = %q, want %q", tt.path, tt.bundle, got, tt.want)
			}
		})
	}
}
