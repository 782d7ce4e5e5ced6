package nri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const (
	testHostMemory = int64(64 << 30)
	engineDefault  = int64(64 << 20)
	testPod        = "5fce15bd29897f1573d33e815893f8349ff0008b953814662f46f70cd08e0077"
)

var sandboxShm = "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/" + testPod + "/shm"

// recorder is a Plugin whose host effects are recorded, not made.
type recorder struct {
	grows   []growCall
	growErr error
	log     bytes.Buffer
	// panics makes reading a tmpfs's size panic.
	panics bool
}

func (r *recorder) tmpfsSize(string) (int64, error) {
	if r.panics {
		panic("boom")
	}
	return engineDefault, nil
}

type growCall struct {
	path  string
	size  int64
	scope remount.Scope
}

// testFacts are a host's facts: its memory, and its engine tmpfs' sizes
// (nil: unknown).
func testFacts(mem int64, tmpfs func(string) (int64, error)) func() (oci.Facts, error) {
	return func() (oci.Facts, error) { return oci.Facts{HostMemory: mem, TmpfsSize: tmpfs}, nil }
}

func (r *recorder) plugin(pol *policy.Policy) *Plugin {
	return New(Config{
		Policy: pol,
		Facts:  testFacts(testHostMemory, r.tmpfsSize),
		Logger: slog.New(slog.NewJSONHandler(&r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Grow: func(path string, size int64, scope remount.Scope) (remount.Result, error) {
			r.grows = append(r.grows, growCall{path, size, scope})
			if r.growErr != nil {
				return remount.Result{}, r.growErr
			}
			return remount.Result{Before: engineDefault, After: size, Changed: true}, nil
		},
	})
}

func gpuContainer(mounts ...*api.Mount) *api.Container {
	return &api.Container{
		Id:           "c1",
		PodSandboxId: testPod,
		Name:         "trainer",
		Env:          []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"},
		Annotations:  map[string]string{oci.AnnotationCRIContainerType: "container", oci.AnnotationCRISandboxID: testPod},
		Mounts:       mounts,
	}
}

// TestMountShapes: what the plugin does for each /dev/shm a container can
// have, with the size the policy gives.
func TestMountShapes(t *testing.T) {
	bindSandbox := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: sandboxShm, Options: []string{"rbind", "rprivate", "rw"}}
	ownTmpfsKiB := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}
	ownTmpfsBytes := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=67108864"}}
	ownTmpfsNoSize := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "mode=1777"}}
	hostIPC := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: "/dev/shm", Options: []string{"rbind", "rprivate", "rw"}}
	otherPod := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/other/shm", Options: []string{"rbind", "rw"}}
	userTmpfs := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1g"}}

	def := policy.Default()
	mountMode := mustParse(t, `mode = "mount"`)
	limited := func(c *api.Container, limit int64) *api.Container {
		c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(limit)}}}
		return c
	}
	tests := []struct {
		name    string
		pol     *policy.Policy
		ctr     *api.Container
		action  oci.Action
		limit   int64 // the container's memory limit, for the expected size
		grow    bool  // the pod's host tmpfs is grown
		adjust  bool  // an adjustment replaces the mount
		skipped bool  // a plan the plugin does not carry out
	}{
		{name: "sandbox bind: grow the pod's tmpfs", pol: def, ctr: gpuContainer(bindSandbox), action: oci.ActionRemount, grow: true},
		{name: "sandbox bind, memory limit", pol: def, ctr: limited(gpuContainer(bindSandbox), 8<<30), limit: 8 << 30, action: oci.ActionRemount, grow: true},
		{name: "sandbox bind, mode mount: never remounts", pol: mountMode, ctr: gpuContainer(bindSandbox), action: oci.ActionNone},
		{name: "sandbox bind of another pod", pol: def, ctr: gpuContainer(otherPod), action: oci.ActionNone},
		{name: "own tmpfs in KiB: adjust", pol: def, ctr: gpuContainer(ownTmpfsKiB), action: oci.ActionSetSize, adjust: true},
		{name: "own tmpfs in bytes: adjust", pol: def, ctr: gpuContainer(ownTmpfsBytes), action: oci.ActionSetSize, adjust: true},
		{name: "own tmpfs, memory limit", pol: def, ctr: limited(gpuContainer(ownTmpfsKiB), 4<<30), limit: 4 << 30, action: oci.ActionSetSize, adjust: true},
		{name: "own tmpfs without size (half the host): already large", pol: def, ctr: gpuContainer(ownTmpfsNoSize), action: oci.ActionNone},
		{name: "no /dev/shm", pol: def, ctr: gpuContainer(), action: oci.ActionNone},
		{name: "no /dev/shm, mode mount: inject is not done", pol: mountMode, ctr: gpuContainer(), action: oci.ActionInject, skipped: true},
		{name: "host IPC", pol: def, ctr: gpuContainer(hostIPC), action: oci.ActionNone},
		{name: "the user's own tmpfs", pol: def, ctr: gpuContainer(userTmpfs), action: oci.ActionNone},
		{name: "no GPU", pol: def, ctr: &api.Container{PodSandboxId: testPod, Mounts: []*api.Mount{bindSandbox}}, action: oci.ActionNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			p := r.plugin(tt.pol)
			before := slices.Clone(tt.ctr.Mounts)
			adj, upd, err := p.CreateContainer(context.Background(), &api.PodSandbox{Id: testPod, Name: "pod", Namespace: "ml"}, tt.ctr)
			if err != nil || upd != nil {
				t.Fatalf("CreateContainer: updates %v, err %v", upd, err)
			}
			out, err := p.Handle(&api.PodSandbox{Id: testPod}, tt.ctr)
			if err != nil {
				t.Fatal(err)
			}
			if out.Plan.Action != tt.action {
				t.Fatalf("action %s, want %s (%s)", out.Plan.Action, tt.action, out.Plan.Reason)
			}
			want, _ := tt.pol.Target(policy.Request{MemoryLimit: tt.limit, HostMemory: testHostMemory})

			if tt.grow {
				// The pod's tmpfs as the engine named it, whatever engine_roots say.
				wantCall := growCall{sandboxShm, want, remount.Scope{Named: sandboxShm}}
				if len(r.grows) != 2 || !equalGrow(r.grows[0], wantCall) {
					t.Errorf("grows %+v, want %+v (once per call)", r.grows, wantCall)
				}
				if out.Grown == nil || out.Grown.After != want {
					t.Errorf("outcome grown %+v", out.Grown)
				}
			} else if len(r.grows) != 0 {
				t.Errorf("grew %+v, want nothing grown", r.grows)
			}

			if !tt.adjust {
				if adj != nil {
					t.Errorf("adjustment %v, want none", adj)
				}
			} else {
				checkShmAdjustment(t, adj, before, want)
			}
			if got := out.Skipped != ""; got != tt.skipped {
				t.Errorf("skipped %q, want skipped %v", out.Skipped, tt.skipped)
			}
			if !slices.EqualFunc(tt.ctr.Mounts, before, func(a, b *api.Mount) bool { return a.Cmp(b) }) {
				t.Errorf("the request's mounts were changed")
			}
		})
	}
}

// checkShmAdjustment checks that adj removes the container's /dev/shm
// mount and adds it back with size want, every other option kept, and
// that applying it the way runtimes do leaves one tmpfs of that size.
func checkShmAdjustment(t *testing.T, adj *api.ContainerAdjustment, mounts []*api.Mount, want int64) {
	t.Helper()
	if adj == nil {
		t.Fatal("no adjustment")
	}
	var orig *api.Mount
	for _, m := range mounts {
		if m.Destination == "/dev/shm" {
			orig = m
		}
	}
	if len(adj.Mounts) != 2 {
		t.Fatalf("adjustment mounts %v, want a removal and an addition", adj.Mounts)
	}
	if dest, marked := adj.Mounts[0].IsMarkedForRemoval(); !marked || dest != "/dev/shm" {
		t.Errorf("first adjustment %v, want the removal of /dev/shm", adj.Mounts[0])
	}
	add := adj.Mounts[1]
	if add.Destination != orig.Destination || add.Type != orig.Type || add.Source != orig.Source {
		t.Errorf("added mount %v, want %v with a new size", add, orig)
	}
	kib := strings.HasSuffix(sizeOpt(orig.Options), "k")
	wantOpts := slices.Clone(orig.Options)
	for i, o := range wantOpts {
		if strings.HasPrefix(o, "size=") {
			wantOpts[i] = policy.MountSizeOption(want, kib)
		}
	}
	if !slices.Equal(add.Options, wantOpts) {
		t.Errorf("added options %v, want %v", add.Options, wantOpts)
	}
	if len(adj.Annotations) != 0 || len(adj.Env) != 0 || adj.Linux != nil || adj.Hooks != nil {
		t.Errorf("adjustment changes more than /dev/shm: %v", adj)
	}

	// Apply it as a runtime's spec generator does: drop the marked
	// destinations and the re-added ones, append the additions.
	var applied []*api.Mount
	for _, m := range mounts {
		if m.Destination != "/dev/shm" {
			applied = append(applied, m)
		}
	}
	applied = append(applied, add)
	s := ToSpec("", nil, &api.Container{Mounts: applied})
	sh := oci.ClassifyShm(s, testHostMemory)
	if sh.Kind != oci.ShmPrivate || sh.Size != want {
		t.Errorf("after the adjustment /dev/shm is %s of %d bytes, want a private tmpfs of %d", sh.Kind, sh.Size, want)
	}
}

func sizeOpt(opts []string) string {
	v, _ := oci.SizeOption(opts)
	return v
}

func equalGrow(a, b growCall) bool {
	return a.path == b.path && a.size == b.size && a.scope.Named == b.scope.Named && a.scope.SameAs == b.scope.SameAs && slices.Equal(a.scope.Roots, b.scope.Roots)
}

// TestAdjustmentRefuses: Adjustment needs a set-size plan that matches the spec.
func TestAdjustmentRefuses(t *testing.T) {
	s := ToSpec("", nil, &api.Container{Mounts: []*api.Mount{{Destination: "/dev/shm", Type: "tmpfs", Source: "shm"}}})
	if adj, err := Adjustment(s, oci.Plan{Action: oci.ActionRemount}); adj != nil || err != nil {
		t.Errorf("remount plan: %v, %v; want nothing", adj, err)
	}
	if _, err := Adjustment(s, oci.Plan{Action: oci.ActionSetSize, Size: 1 << 30, Shm: oci.Shm{Index: 3}}); err == nil {
		t.Error("index out of range: no error")
	}
	if _, err := Adjustment(s, oci.Plan{Action: oci.ActionSetSize, Size: 0, Shm: oci.Shm{Index: 0}}); err == nil {
		t.Error("size 0: no error")
	}
	adj, err := Adjustment(s, oci.Plan{Action: oci.ActionSetSize, Size: 2 << 30, Shm: oci.Shm{Index: 0}})
	if err != nil || len(adj.Mounts) != 2 || !slices.Equal(adj.Mounts[1].Options, []string{policy.MountSizeOption(2<<30, false)}) {
		t.Errorf("no size option: %v, %v; want one added", adj, err)
	}
}

// TestFailOpenOrClosed: an error (a refused remount, a panic) leaves the
// container unchanged and is logged, unless the policy is fail_closed.
func TestFailOpenOrClosed(t *testing.T) {
	bind := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: sandboxShm, Options: []string{"rbind", "rw"}}
	refused := fmt.Errorf("%w: not under an engine root", remount.ErrUnsafe)
	tests := []struct {
		name       string
		failClosed bool
		growErr    error
		panics     bool
	}{
		{name: "grow refused, fail-open", growErr: refused},
		{name: "grow refused, fail_closed", failClosed: true, growErr: refused},
		{name: "panic, fail-open", panics: true},
		{name: "panic, fail_closed", failClosed: true, panics: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := mustParse(t, fmt.Sprintf("fail_closed = %v", tt.failClosed))
			r := recorder{growErr: tt.growErr, panics: tt.panics}
			p := r.plugin(pol)
			adj, upd, err := p.CreateContainer(context.Background(), &api.PodSandbox{Id: testPod, Name: "pod"}, gpuContainer(bind))
			if adj != nil || upd != nil {
				t.Errorf("adjustment %v, updates %v; want the container unchanged", adj, upd)
			}
			if tt.failClosed {
				if err == nil || !strings.Contains(err.Error(), "fail_closed") {
					t.Fatalf("err = %v, want the error with a fail_closed note", err)
				}
				if tt.growErr != nil && !errors.Is(err, remount.ErrUnsafe) {
					t.Errorf("err = %v, want it to wrap the remount's refusal", err)
				}
			} else if err != nil {
				t.Fatalf("err = %v, want fail-open", err)
			}
			logged := r.log.String()
			if !strings.Contains(logged, "could not size /dev/shm") || !strings.Contains(logged, `"fail_closed":`+fmt.Sprint(tt.failClosed)) {
				t.Errorf("log %s: want the error logged with fail_closed", logged)
			}
			if tt.panics && !strings.Contains(logged, "panic: boom") {
				t.Errorf("log %s: want the panic", logged)
			}
		})
	}
}

// TestConfigure: a configuration from the runtime is gpurun's policy file
// and replaces the plugin's policy; a bad one is refused, naming the key.
func TestConfigure(t *testing.T) {
	var r recorder
	p := r.plugin(policy.Default())
	if _, err := p.Configure(context.Background(), "min = \"lots\"\n", "containerd", "v2.4.2"); err == nil || !strings.Contains(err.Error(), `"min"`) {
		t.Errorf("bad config: err = %v, want one naming min", err)
	}
	if p.Policy().Min != policy.Default().Min {
		t.Errorf("a bad config changed the policy")
	}
	if _, err := p.Configure(context.Background(), "", "containerd", "v2.4.2"); err != nil || p.Policy().Min != policy.Default().Min {
		t.Errorf("empty config: err %v, min %d; want the policy kept", err, p.Policy().Min)
	}
	events, err := p.Configure(context.Background(), "min = \"3g\"\nsize = \"1g\"\n", RuntimeCRIO, "1.31")
	if err != nil {
		t.Fatal(err)
	}
	if events != 0 {
		t.Errorf("events = %v, want 0 (what the plugin implements)", events)
	}
	want := mustParse(t, "min = \"3g\"\nsize = \"1g\"\n")
	if p.Policy().Min != want.Min {
		t.Errorf("min = %d, want %d from the runtime's config", p.Policy().Min, want.Min)
	}
	bind := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: "/run/containers/storage/overlay-containers/" + strings.Repeat("ab", 32) + "/userdata/shm", Options: []string{"rbind"}}
	out, err := p.Handle(&api.PodSandbox{Id: strings.Repeat("ab", 32)}, &api.Container{PodSandboxId: strings.Repeat("ab", 32), Env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, Mounts: []*api.Mount{bind}})
	if err != nil {
		t.Fatal(err)
	}
	wantSize, _ := want.Target(policy.Request{HostMemory: testHostMemory, GPUs: 1})
	if out.Plan.Pod.Engine != "cri-o" || out.Plan.Action != oci.ActionRemount || out.Plan.Size != wantSize {
		t.Errorf("CRI-O container: plan %+v, want a remount to %d as cri-o", out.Plan, wantSize)
	}
}

func TestCheckIdentity(t *testing.T) {
	tests := []struct {
		name, index string
		bad         string
	}{
		{DefaultName, DefaultIndex, ""},
		{"gpurun", "5", "--index"},
		{"gpurun", "ab", "--index"},
		{"", "10", "--name"},
		{"gpu run", "10", "--name"},
	}
	for _, tt := range tests {
		err := CheckIdentity(tt.name, tt.index)
		if tt.bad == "" && err != nil || tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)) {
			t.Errorf("CheckIdentity(%q, %q) = %v, want an error about %q", tt.name, tt.index, err, tt.bad)
		}
	}
}

// TestPodAnnotationRequest: an allowed annotation on the pod asks for a
// size for the pod's /dev/shm, GPU container or not, within the policy's cap.
func TestPodAnnotationRequest(t *testing.T) {
	bind := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: sandboxShm, Options: []string{"rbind", "rw"}}
	for _, tt := range []struct {
		policy, value string
	}{
		{"", "2Gi"},
		{`max = "1g"`, "8Gi"}, // capped
	} {
		pol := mustParse(t, tt.policy)
		var r recorder
		p := r.plugin(pol)
		pod := &api.PodSandbox{Id: testPod, Annotations: map[string]string{pol.AllowedAnnotations[0]: tt.value}}
		out, err := p.Handle(pod, &api.Container{PodSandboxId: testPod, Mounts: []*api.Mount{bind}})
		if err != nil {
			t.Fatal(err)
		}
		asked, err := policy.ParseAnySize(tt.value)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := pol.CapRequest(asked)
		if out.Plan.Action != oci.ActionRemount || len(r.grows) != 1 || r.grows[0].size != want {
			t.Errorf("policy %q, pod annotation %s: plan %s, grows %+v; want a remount to %d", tt.policy, tt.value, out.Plan.Action, r.grows, want)
		}
	}
}

// TestEngineNamesThePodsTmpfs: the pod's tmpfs is the one the engine named
// in the container's mounts for NRI's pod: under a state dir the policy's
// engine_roots list, or anywhere when the runtime gave the pod's pid, whose
// own /dev/shm the remount must then be (Scope.SameAs); a bind of another
// shape, or under an unknown root with no pid, is refused before any
// remount.
func TestEngineNamesThePodsTmpfs(t *testing.T) {
	moved := "/data/containerd/state/io.containerd.grpc.v1.cri/sandboxes/" + testPod + "/shm"
	const proof = "/proc/4242/root/dev/shm"
	tests := []struct {
		name, source string
		pid          uint32
		sameAs       string
		refused      string
	}{
		{"containerd's state on another disk, the pod's pid given", moved, 4242, proof, ""},
		{"containerd's state on another disk, no pid", moved, 0, "", "not a containerd dir in engine_roots"},
		{"the default state dir", sandboxShm, 0, "", ""},
		{"the default state dir, the pod's pid given", sandboxShm, 4242, "", ""},
		{"a subdir of the default state dir", "/run/containerd/user/io.containerd.grpc.v1.cri/sandboxes/" + testPod + "/shm", 0, "", "under /run/containerd/user"},
		{"not the CRI plugin's layout", "/run/containerd/evil/sandboxes/" + testPod + "/shm", 4242, "", "not where containerd makes a pod's /dev/shm"},
		{"a .. segment", "/data/x/../containerd/state/io.containerd.grpc.v1.cri/sandboxes/" + testPod + "/shm", 4242, "", "containerd named /data/containerd/state/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := recorder{}
			p := r.plugin(mustParse(t, `engine_roots = ["/run/containerd"]`))
			bind := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: tt.source, Options: []string{"rbind", "rw"}}
			out, err := p.Handle(&api.PodSandbox{Id: testPod, Name: "pod", Namespace: "ml", Pid: tt.pid}, gpuContainer(bind))
			if out.Plan.Action != oci.ActionRemount {
				t.Fatalf("plan %s (%s), want a remount", out.Plan.Action, out.Plan.Reason)
			}
			if tt.refused == "" {
				want := growCall{tt.source, out.Plan.Size, remount.Scope{Named: tt.source, SameAs: tt.sameAs}}
				if err != nil || len(r.grows) != 1 || !equalGrow(r.grows[0], want) {
					t.Errorf("err %v, grows %+v; want %+v", err, r.grows, want)
				}
				return
			}
			if len(r.grows) != 0 || !errors.Is(err, dirs.ErrNotNamed) || !strings.Contains(err.Error(), tt.refused) {
				t.Errorf("err %v, grows %+v; want a refusal saying %q before any remount", err, r.grows, tt.refused)
			}
			if !strings.Contains(r.log.String(), `"refused":true`) || !strings.Contains(r.log.String(), `"pod_id":"`+testPod+`"`) {
				t.Errorf("log %s: want the refusal with the pod", r.log.String())
			}
		})
	}
}

// TestSynchronize: at registration the plugin grows the pod tmpfs of each
// running GPU container created without it, reports only what it grew,
// and never fails the registration.
func TestSynchronize(t *testing.T) {
	bindSandbox := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: sandboxShm, Options: []string{"rbind", "rprivate", "rw"}}
	ownTmpfs := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "mode=1777", "size=65536k"}}
	ctr := func(id string, state api.ContainerState, env string, m *api.Mount) *api.Container {
		c := gpuContainer(m)
		c.Id, c.State, c.Env = id, state, []string{"PATH=/bin", env}
		return c
	}
	gpu, plain := "NVIDIA_VISIBLE_DEVICES=all", "HOME=/root"
	pods := []*api.PodSandbox{{Id: testPod, Name: "trainer-0", Namespace: "ml"}}
	tests := []struct {
		name     string
		ctrs     []*api.Container
		growErr  error
		grows    int    // remounts tried
		observed int    // containers reported grown
		log      string // a record the log must hold
	}{
		{name: "a running GPU container is grown", ctrs: []*api.Container{ctr("c1", api.ContainerState_CONTAINER_RUNNING, gpu, bindSandbox)},
			grows: 1, observed: 1, log: "created while the plugin was not connected"},
		{name: "a plain one is left", ctrs: []*api.Container{ctr("c1", api.ContainerState_CONTAINER_RUNNING, plain, bindSandbox)},
			log: `"grown":0`},
		{name: "a stopped GPU container is left", ctrs: []*api.Container{ctr("c1", api.ContainerState_CONTAINER_STOPPED, gpu, bindSandbox)},
			log: `"running_containers":0`},
		{name: "a running one with its own tmpfs is only logged", ctrs: []*api.Container{ctr("c1", api.ContainerState_CONTAINER_RUNNING, gpu, ownTmpfs)},
			log: "gpurun resize --cri c1"},
		{name: "a failed remount does not fail the registration", ctrs: []*api.Container{ctr("c1", api.ContainerState_CONTAINER_RUNNING, gpu, bindSandbox)},
			growErr: errors.New("remount refused"), grows: 1, log: `"failed":1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, failClosed := range []bool{false, true} {
				r := &recorder{growErr: tt.growErr}
				pol := policy.Default()
				pol.FailClosed = failClosed
				p := r.plugin(pol)
				var observed []string
				p.observe = func(s enforce.Subject, res enforce.Result) { observed = append(observed, s.ID) }
				upd, err := p.Synchronize(context.Background(), pods, tt.ctrs)
				if err != nil || upd != nil {
					t.Fatalf("fail_closed %v: Synchronize = %v, %v; want no updates and no error", failClosed, upd, err)
				}
				if len(r.grows) != tt.grows || len(observed) != tt.observed {
					t.Errorf("fail_closed %v: %d remounts, %d observed; want %d, %d", failClosed, len(r.grows), len(observed), tt.grows, tt.observed)
				}
				if tt.grows > 0 && r.grows[0].path != sandboxShm {
					t.Errorf("remounted %s, want the pod's %s", r.grows[0].path, sandboxShm)
				}
				if !strings.Contains(r.log.String(), tt.log) {
					t.Errorf("fail_closed %v: log has no %q:\n%s", failClosed, tt.log, r.log.String())
				}
			}
		})
	}
}
