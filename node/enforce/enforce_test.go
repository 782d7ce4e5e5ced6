package enforce

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const (
	hostMem = int64(64 << 30)
	podID   = "5fce15bd29897f1573d33e815893f8349ff0008b953814662f46f70cd08e0077"
	ctrID   = "8d2e4fe6b9b6d1c0d1a8e4b2e94c1bc0b5f0f4ee7b5c9d2d1c8a3e1f0b9a7c6d"
	otherID = "a46dafde315e36d7b69a341af7882d05e8ebff7d8aa3fc755f5e6c454de491cb"
)

// harness is an Enforcer whose host effects are recorded.
type harness struct {
	log    bytes.Buffer
	grows  []string // "path size scope"
	growFn func(string, int64, remount.Scope) (remount.Result, error)
	facts  oci.Facts
	e      *Enforcer
	// sweeps are the restart sweeps asked for, answered with sweepRes and
	// sweepErr.
	sweeps   []shmsweep.Start
	sweepRes shmsweep.Result
	sweepErr error
}

func newHarness(t *testing.T, policyText string) *harness {
	t.Helper()
	pol, err := policy.Parse("/etc/gpurun/config.toml", []byte(policyText))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{facts: oci.Facts{HostMemory: hostMem, HostGPUs: 4, TmpfsSize: func(string) (int64, error) { return 64 << 20, nil }}}
	h.e = New(Config{
		Component: "gpurun-test",
		Policy:    pol,
		Facts:     func() (oci.Facts, error) { return h.facts, nil },
		Grow: func(path string, size int64, scope remount.Scope) (remount.Result, error) {
			h.grows = append(h.grows, fmt.Sprintf("%s %d %s", path, size, scope))
			if h.growFn != nil {
				return h.growFn(path, size, scope)
			}
			return remount.Result{Before: 64 << 20, After: size, Changed: true}, nil
		},
		Log: slog.New(slog.NewJSONHandler(&h.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Sweep: func(st shmsweep.Start) (shmsweep.Result, error) {
			h.sweeps = append(h.sweeps, st)
			return h.sweepRes, h.sweepErr
		},
	})
	return h
}

func (h *harness) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(h.log.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// container is a GPU container (env) whose /dev/shm is m.
func container(m specs.Mount, annotations map[string]string) *oci.Container {
	return oci.FromSpec(&specs.Spec{
		Process:     &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
		Mounts:      []specs.Mount{m},
		Annotations: annotations,
		Linux:       &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace}}},
	})
}

func sandboxBind(state, pod string) specs.Mount {
	return specs.Mount{Destination: "/dev/shm", Type: "bind", Source: state + "/io.containerd.grpc.v1.cri/sandboxes/" + pod + "/shm", Options: []string{"rbind", "rw"}}
}

func criAnnotations(pod string) map[string]string {
	return map[string]string{oci.AnnotationCRIContainerType: "container", oci.AnnotationCRISandboxID: pod}
}

var ownTmpfs = specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "size=65536k"}}

func TestRemountScope(t *testing.T) {
	bundle := "/data/ctd/io.containerd.runtime.v2.task/k8s.io/" + ctrID
	named := "/data/ctd/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm"
	defaults := policy.Default().EngineRoots
	tests := []struct {
		name    string
		ctr     *oci.Container
		dirs    dirs.Dirs
		grow    string // the Grow call's scope; "" for none
		refused string // the refusal's text; "" for none
	}{
		{"containerd named the pod's tmpfs", container(sandboxBind("/data/ctd", podID), criAnnotations(podID)), dirs.FromBundle(bundle, ctrID), "named " + named, ""},
		{"a bundle of another shape: the policy's engine roots", container(sandboxBind("/data/ctd", podID), criAnnotations(podID)), dirs.FromBundle("/tmp/bundle", ""), "engine roots " + strings.Join(defaults, ", "), ""},
		{"NRI: the pod's tmpfs, from the mounts, proved by its pid", container(sandboxBind("/data/ctd", podID), criAnnotations(podID)), dirs.ForPod(podID, 42, defaults), "named " + named + " (the filesystem of /proc/42/root/dev/shm)", ""},
		{"NRI: the pod's tmpfs under a default state dir", container(sandboxBind("/run/containerd", podID), criAnnotations(podID)), dirs.ForPod(podID, 42, defaults), "named /run/containerd/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm", ""},
		{"NRI: a moved state dir, no pid", container(sandboxBind("/data/ctd", podID), criAnnotations(podID)), dirs.ForPod(podID, 0, defaults), "", "not a containerd dir in engine_roots"},
		{"under the state dir, not the pod's", container(sandboxBind("/data/ctd/io.containerd.grpc.v1.cri/x", podID), criAnnotations(podID)), dirs.FromBundle(bundle, ctrID), "", "containerd named " + named},
		{"another containerd's state dir", container(sandboxBind("/run/containerd", podID), criAnnotations(podID)), dirs.FromBundle(bundle, ctrID), "", "named"},
		{"NRI: another pod's tmpfs", container(sandboxBind("/data/ctd", otherID), criAnnotations(otherID)), dirs.ForPod(podID, 42, defaults), "", otherID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "")
			res, err := h.e.Run(Subject{ID: "c1"}, nil, func() (Request, error) {
				return Request{Container: tt.ctr, Dirs: tt.dirs}, nil
			})
			if err != nil {
				t.Fatalf("Run = %v, want fail-open", err)
			}
			if res.Plan.Action != oci.ActionRemount {
				t.Fatalf("plan %s (%s), want a remount", res.Plan.Action, res.Plan.Reason)
			}
			recs := h.records(t)
			if tt.refused == "" {
				want := fmt.Sprintf("%s %d %s", tt.ctr.Spec.Mounts[0].Source, res.Plan.Size, tt.grow)
				if len(h.grows) != 1 || h.grows[0] != want {
					t.Errorf("grows %q, want %q", h.grows, want)
				}
				if res.Err != nil || res.Grown == nil || len(recs) != 1 || recs[0]["msg"] != MsgPlanned || recs[0]["path"] != tt.ctr.Spec.Mounts[0].Source || recs[0]["changed"] != true {
					t.Errorf("result %+v, records %v", res, recs)
				}
				return
			}
			if len(h.grows) != 0 {
				t.Errorf("grew %q, want a refusal before any remount", h.grows)
			}
			var ref *RefusedError
			if !errors.As(res.Err, &ref) || !errors.Is(res.Err, dirs.ErrNotNamed) || !strings.Contains(res.Err.Error(), tt.refused) {
				t.Fatalf("err = %v, want a refusal saying %q", res.Err, tt.refused)
			}
			if len(recs) != 1 || recs[0]["msg"] != MsgFailed || recs[0]["refused"] != true || recs[0]["path"] != tt.ctr.Spec.Mounts[0].Source || recs[0]["fix"] == "" {
				t.Errorf("records %v, want one refusal naming the path and a fix", recs)
			}
		})
	}
}

// TestRemountRefusedForReal runs remount.Grow itself on real directories
// (its path rules refuse before it reads the mount table, so no root is
// needed): a derived path through a symbolic link, and a bind outside the
// engine roots where the engine named nothing, are refused with a fix.
func TestRemountRefusedForReal(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	if err := os.MkdirAll(filepath.Join(real, "io.containerd.grpc.v1.cri", "sandboxes", podID, "shm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, state string
		dirs        dirs.Dirs
		err, fix    string
	}{
		{"containerd's state dir is a symbolic link", link, dirs.FromBundle(link+"/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID), "symbolic link", "real directory"},
		{"no bundle layout, not under the engine roots", real, dirs.Dirs{}, "not under an engine root", "engine_roots"},
	}
	for _, tt := range tests {
		for _, closed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, fail_closed %v", tt.name, closed), func(t *testing.T) {
				pol, err := policy.Parse("/etc/gpurun/config.toml", []byte(fmt.Sprintf("fail_closed = %v\n", closed)))
				if err != nil {
					t.Fatal(err)
				}
				var log bytes.Buffer
				e := New(Config{Component: "gpurun-runtime", Policy: pol, Log: slog.New(slog.NewJSONHandler(&log, nil)),
					Facts:        func() (oci.Facts, error) { return oci.Facts{HostMemory: hostMem}, nil },
					SweepOptions: shmsweep.Options{StateDir: t.TempDir(), Proc: t.TempDir(), CgroupRoot: t.TempDir()}})
				src := tt.state + "/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm"
				res, err := e.Run(Subject{ID: ctrID}, nil, func() (Request, error) {
					return Request{Container: container(sandboxBind(tt.state, podID), criAnnotations(podID)), Dirs: tt.dirs}, nil
				})
				if !errors.Is(res.Err, remount.ErrUnsafe) || !strings.Contains(res.Err.Error(), tt.err) {
					t.Fatalf("err = %v, want a refusal saying %q", res.Err, tt.err)
				}
				var fc *FailClosedError
				if closed != errors.As(err, &fc) {
					t.Fatalf("Run = %v, fail_closed %v", err, closed)
				}
				if closed && (!errors.Is(err, remount.ErrUnsafe) || !strings.HasPrefix(err.Error(), "gpurun-runtime: /dev/shm of container "+ctrID+": grow "+src) || !strings.Contains(err.Error(), "fail_closed is set in /etc/gpurun/config.toml")) {
					t.Errorf("fail-closed error %q", err)
				}
				var rec map[string]any
				if err := json.Unmarshal(log.Bytes(), &rec); err != nil {
					t.Fatalf("record %q: %v", log.String(), err)
				}
				if rec["msg"] != MsgFailed || rec["path"] != src || rec["refused"] != true || !strings.Contains(fmt.Sprint(rec["fix"]), tt.fix) || rec["fail_closed"] != closed {
					t.Errorf("record %v, want a refusal of %s with a fix naming %q", rec, src, tt.fix)
				}
			})
		}
	}
}

func TestCarry(t *testing.T) {
	errCannot := errors.New("cannot")
	tests := []struct {
		name   string
		policy string
		carry  func(oci.Plan) (Done, error)
		action oci.Action
		err    string
		field  string // a field the record must have
	}{
		{"set-size is the front door's", "", func(pl oci.Plan) (Done, error) {
			return Done{Path: "pid 1: /rootfs/dev/shm", Before: pl.Current, After: pl.Size, Changed: true}, nil
		}, oci.ActionSetSize, "", "path"},
		{"skipped on purpose is no error", "mode = \"ipc-host\"\n", func(pl oci.Plan) (Done, error) {
			return Done{Skipped: "NRI cannot change a pod's IPC namespace"}, nil
		}, oci.ActionIPCHost, "", "skipped"},
		{"the front door cannot", "", func(oci.Plan) (Done, error) { return Done{}, errCannot }, oci.ActionSetSize, "cannot", ""},
		{"no Carry at all", "", nil, oci.ActionSetSize, "cannot carry it out", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.policy)
			res, err := h.e.Run(Subject{ID: "c1"}, []any{"stage", "createRuntime"}, func() (Request, error) {
				return Request{Container: container(ownTmpfs, nil), Carry: tt.carry}, nil
			})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if res.Plan.Action != tt.action {
				t.Fatalf("plan %s, want %s", res.Plan.Action, tt.action)
			}
			recs := h.records(t)
			if len(recs) != 1 || recs[0]["stage"] != "createRuntime" || recs[0]["id"] != "c1" {
				t.Fatalf("records %v, want one with the front door's fields", recs)
			}
			if tt.err != "" {
				if res.Err == nil || !strings.Contains(res.Err.Error(), tt.err) || recs[0]["msg"] != MsgFailed {
					t.Errorf("err %v, record %v; want %q", res.Err, recs[0], tt.err)
				}
				return
			}
			if _, ok := recs[0][tt.field]; res.Err != nil || recs[0]["msg"] != MsgPlanned || !ok {
				t.Errorf("err %v, record %v; want a planned record with %q", res.Err, recs[0], tt.field)
			}
		})
	}
}

// TestFailOpenOrClosed: whatever goes wrong — the front door cannot read
// the container, a panic in its parsing, in the host's facts, in its Carry
// — the container starts as it is and the record says why, unless
// fail_closed.
func TestFailOpenOrClosed(t *testing.T) {
	ok := func() (Request, error) {
		return Request{Container: container(ownTmpfs, nil), Carry: func(oci.Plan) (Done, error) { return Done{}, nil }}, nil
	}
	tests := []struct {
		name    string
		prepare func() (Request, error)
		setup   func(*harness)
		err     string
		stack   bool
	}{
		{"the front door cannot read the container", func() (Request, error) { return Request{}, errors.New("parse config.json: malformed JSON") }, nil, "malformed JSON", false},
		{"a panic while reading it", func() (Request, error) { panic("boom") }, nil, "panic: boom", true},
		{"a panic in the host's facts", ok, func(h *harness) {
			h.e.facts = func() (oci.Facts, error) { panic("facts") }
		}, "panic: facts", true},
		{"a panic while carrying the plan out", func() (Request, error) {
			return Request{Container: container(ownTmpfs, nil), Carry: func(oci.Plan) (Done, error) { panic("carry") }}, nil
		}, nil, "panic: carry", true},
		{"a remount that fails", func() (Request, error) {
			return Request{Container: container(sandboxBind("/run/containerd", podID), criAnnotations(podID))}, nil
		}, func(h *harness) {
			h.growFn = func(string, int64, remount.Scope) (remount.Result, error) {
				return remount.Result{}, fmt.Errorf("%w: not under an engine root", remount.ErrUnsafe)
			}
		}, "not under an engine root", false},
	}
	for _, tt := range tests {
		for _, closed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, fail_closed %v", tt.name, closed), func(t *testing.T) {
				h := newHarness(t, fmt.Sprintf("fail_closed = %v\n", closed))
				if tt.setup != nil {
					tt.setup(h)
				}
				res, err := h.e.Run(Subject{ID: "c1", Bundle: "/b"}, nil, tt.prepare)
				if res.Err == nil || !strings.Contains(res.Err.Error(), tt.err) {
					t.Fatalf("result error %v, want %q", res.Err, tt.err)
				}
				var fc *FailClosedError
				if closed != errors.As(err, &fc) {
					t.Fatalf("Run = %v; fail_closed %v", err, closed)
				}
				if closed && (fc.Component != "gpurun-test" || fc.Policy != "/etc/gpurun/config.toml" || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "goroutine")) {
					t.Errorf("fail-closed error %q (%+v), want the cause without a stack", err, fc)
				}
				recs := h.records(t)
				if len(recs) != 1 || recs[0]["msg"] != MsgFailed || recs[0]["level"] != "ERROR" || !strings.Contains(fmt.Sprint(recs[0]["err"]), tt.err) ||
					recs[0]["fail_closed"] != closed || recs[0]["bundle"] != "/b" {
					t.Fatalf("records %v, want one error record", recs)
				}
				_, hasStack := recs[0]["stack"]
				if hasStack != tt.stack {
					t.Errorf("record has a stack: %v, want %v", hasStack, tt.stack)
				}
			})
		}
	}
}

func TestPolicyUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte("fail_closed = true\nsize = [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fallback := &policy.Policy{LogFile: "/x.log"}
	pol, polErr := LoadPolicy(path, true, fallback)
	if polErr == nil || pol != fallback {
		t.Fatalf("LoadPolicy = %v, %v; want the fallback and the error", pol, polErr)
	}
	var log bytes.Buffer
	e := New(Config{Policy: pol, PolicyErr: polErr, Log: slog.New(slog.NewJSONHandler(&log, nil))})
	called := false
	res, err := e.Run(Subject{ID: "c1"}, nil, func() (Request, error) { called = true; return Request{}, nil })
	if err != nil || called || res.Err == nil {
		t.Errorf("Run = %v (called %v, result %v): want the container left alone, no fail_closed", err, called, res.Err)
	}
	if !strings.Contains(log.String(), MsgPolicyUnreadable) || !strings.Contains(log.String(), path) {
		t.Errorf("record %s", log.String())
	}
	if pol, err := LoadPolicy(filepath.Join(dir, "missing.toml"), false, nil); err != nil || pol.Source != "" {
		t.Errorf("a missing default policy file: %v, %v; want the defaults", pol, err)
	}
}

// TestOneSetOfFacts: the enforcer plans with every fact the provider gives,
// the host's GPU count included, so that per_gpu means the same for every
// front door as for doctor and gpurun plan.
func TestOneSetOfFacts(t *testing.T) {
	h := newHarness(t, "per_gpu = \"2g\"\n")
	res, _ := h.e.Run(Subject{}, nil, func() (Request, error) {
		return Request{Container: container(ownTmpfs, nil), Carry: func(oci.Plan) (Done, error) { return Done{}, nil }}, nil
	})
	if res.Plan.GPUs != 4 || res.Plan.Size != 8<<30 {
		t.Errorf("plan %d GPUs, %d bytes; want the host's 4 GPUs x 2g", res.Plan.GPUs, res.Plan.Size)
	}
	h = newHarness(t, "")
	h.e.facts = func() (oci.Facts, error) { return oci.Facts{}, errors.New("no /proc/meminfo") }
	res, _ = h.e.Run(Subject{}, nil, func() (Request, error) {
		return Request{Container: container(ownTmpfs, nil), Carry: func(oci.Plan) (Done, error) { return Done{}, nil }}, nil
	})
	recs := h.records(t)
	if res.Err != nil || len(recs) != 2 || recs[0]["msg"] != "host facts incomplete" || recs[1]["msg"] != MsgPlanned {
		t.Errorf("records %v, want a warning and the plan", recs)
	}
}

func TestQuietNone(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		var log bytes.Buffer
		e := New(Config{QuietNone: quiet, Log: slog.New(slog.NewJSONHandler(&log, nil)),
			Facts: func() (oci.Facts, error) { return oci.Facts{HostMemory: hostMem}, nil }})
		_, _ = e.Run(Subject{}, nil, func() (Request, error) {
			return Request{Container: oci.FromSpec(&specs.Spec{Mounts: []specs.Mount{ownTmpfs}})}, nil
		})
		if logged := strings.Contains(log.String(), MsgPlanned); logged == quiet {
			t.Errorf("QuietNone %v: a non-GPU container's record at info: %v", quiet, logged)
		}
	}
}

// TestCauseAndFix: each kind of refusal, as engine/dirs and engine/remount
// return it, gets its cause and its own fix, chosen by the error's type:
// each case's fix says what only that mapping says, and an error that
// only reads like a refusal gets none of them.
func TestCauseAndFix(t *testing.T) {
	shmOf := func(source string) oci.Shm {
		return oci.ClassifyShm(&specs.Spec{Mounts: []specs.Mount{{Destination: "/dev/shm", Type: "bind", Source: source, Options: []string{"rbind", "rw"}}}}, 0)
	}
	ctd := shmOf("/data/ctd/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm")
	dockerShm := shmOf("/srv/docker/containers/" + ctrID + "/mounts/shm")
	remapped := shmOf("/var/lib/docker/231072.231072/containers/" + ctrID + "/mounts/shm")
	pod := oci.Pod{SandboxID: podID, Engine: oci.EngineContainerdCRI}
	refusal := func(rule error, path string) error {
		return fmt.Errorf("grow %s: %w", path, &remount.RefusalError{Rule: rule, Path: path, Detail: path + " is refused"})
	}
	shmErr := func(d dirs.Dirs, sh oci.Shm, p oci.Pod) error {
		_, _, err := d.Shm(sh, p)
		if err == nil {
			t.Fatalf("dirs.Shm(%s) refused nothing", sh.Source)
		}
		return err
	}
	// A symbolic link in the path, refused by remount itself.
	dir := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	symlink := remount.CheckPath(filepath.Join(dir, "link"), remount.Scope{Roots: []string{dir}})
	tests := []struct {
		name  string
		sh    oci.Shm
		named bool
		err   error
		cause string
		fix   string // what only this mapping's fix says
	}{
		{"unproven: the plugin outside the host's PID namespace", ctd, false,
			&remount.RefusalError{Rule: remount.ErrUnproven, Path: ctd.Source, Detail: "unproven", Err: os.ErrNotExist},
			CauseUnknownRoot, "hostPID: true"},
		{"an unknown root", ctd, true, shmErr(dirs.ForPod(podID, 0, []string{"/run/containerd"}), ctd, pod),
			CauseUnknownRoot, `if /data/ctd is the runtime's state dir, add "/data/ctd" to engine_roots`},
		{"a stale data-root: dockerd moved", dockerShm, true, shmErr(dirs.Dirs{DockerRoot: "/var/lib/docker"}, dockerShm, oci.Pod{}),
			CauseNotNamed, "(/srv/docker; it was told /var/lib/docker): sudo gpurun install docker --reload"},
		{"a stale data-root: userns-remap", remapped, true, shmErr(dirs.Dirs{DockerRoot: "/var/lib/docker"}, remapped, oci.Pod{}),
			CauseNotNamed, "(/var/lib/docker/231072.231072; it was told /var/lib/docker): sudo gpurun install docker --reload"},
		{"not the engine's", ctd, true, shmErr(dirs.FromBundle("/run/containerd/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID), ctd, pod),
			CauseNotNamed, "none to make: /dev/shm binds a tmpfs its engine did not make"},
		{"a symbolic link", ctd, false, symlink, CauseUnsafe, "resolve /data/ctd with readlink -f"},
		{"Docker, not under a root", dockerShm, false, refusal(remount.ErrNotUnderRoot, dockerShm.Source),
			CauseUnsafe, "tell gpurun-runtime dockerd's data-root /srv/docker"},
		{"not under a root", ctd, false, refusal(remount.ErrNotUnderRoot, ctd.Source),
			CauseUnsafe, "not a bundle layout gpurun knows"},
		{"the host's /dev/shm", ctd, false, refusal(remount.ErrHostShm, "/dev/shm"),
			CauseUnsafe, "never resizes the host's /dev/shm"},
		{"named, not reachable", ctd, true, errors.New("read mount table: no such file or directory"),
			CauseError, "mountPropagation HostToContainer"},
		{"an error", ctd, false, errors.New("remount: permission denied"), CauseError, "findmnt"},
		// The text of a refusal without its type: no mapping of a refusal.
		{"a message that reads like a refusal", ctd, false, errors.New("refused: x goes through a symbolic link, not under an engine root, the host's /dev/shm"),
			CauseError, "findmnt"},
	}
	e := New(Config{Component: "gpurun-nri", Policy: policy.Default()})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Cause(tt.err); got != tt.cause {
				t.Errorf("Cause(%v) = %q, want %q", tt.err, got, tt.cause)
			}
			fix := e.fix(tt.sh, tt.named, tt.err)
			if !strings.Contains(fix, tt.fix) {
				t.Errorf("fix %q does not say %q", fix, tt.fix)
			}
			for _, other := range tests {
				if other.fix != tt.fix && strings.Contains(fix, other.fix) {
					t.Errorf("fix %q says %q, the fix of %s", fix, other.fix, other.name)
				}
			}
		})
	}
}
