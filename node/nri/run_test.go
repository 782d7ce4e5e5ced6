package nri

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// fakeRuntime is the runtime side of NRI (the adaptation containerd and
// CRI-O embed) with no pods, reached on socket. Its Stop is a runtime
// process going away: every plugin connection closes.
type fakeRuntime struct {
	*adaptation.Adaptation
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startRuntime starts a fakeRuntime. The adaptation listens on a socket of
// its own; a relay on socket passes the plugins' connections to it, so
// that Stop can close them (the adaptation leaves external plugins'
// connections open when it stops).
func startRuntime(t testing.TB, socket string) *fakeRuntime {
	t.Helper()
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	inner := filepath.Join(t.TempDir(), "rt.sock")
	a, err := adaptation.New("containerd", "v2.4.2", syncFn, update,
		adaptation.WithSocketPath(inner),
		adaptation.WithPluginPath(t.TempDir()),
		adaptation.WithPluginConfigPath(t.TempDir()))
	if err != nil {
		t.Fatalf("NRI adaptation: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("start NRI adaptation: %v", err)
	}
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		a.Stop()
		t.Fatalf("listen on %s: %v", socket, err)
	}
	r := &fakeRuntime{Adaptation: a, l: l}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", inner)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer r.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return r
}

// Stop closes the socket and every connection, then stops the adaptation.
func (r *fakeRuntime) Stop() {
	r.l.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.Adaptation.Stop()
}

// ownTmpfsRequest is a CreateContainer request for a GPU container with
// its own 64 MiB tmpfs, which the plugin answers with an adjustment.
func ownTmpfsRequest() *adaptation.CreateContainerRequest {
	ctr := gpuContainer(&api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}})
	return &adaptation.CreateContainerRequest{Pod: &api.PodSandbox{Id: testPod, Name: "pod", Namespace: "ml"}, Container: ctr}
}

// waitAdjusted sends CreateContainer requests until the plugin answers
// one with the /dev/shm adjustment, and returns that answer; it fails the
// test if no plugin answers within a generous deadline.
func waitAdjusted(t *testing.T, r *fakeRuntime, what string) *adaptation.CreateContainerResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := r.CreateContainer(context.Background(), ownTmpfsRequest())
		if err == nil && resp.GetAdjust() != nil && len(resp.GetAdjust().GetMounts()) > 0 {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no adjustment from the plugin (last response %v, err %v)", what, resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the plugin's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunReconnects: the plugin waits for a runtime that is not there yet,
// registers, answers through the real NRI protocol, and registers again
// with a new runtime after the first one went away.
func TestRunReconnects(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := New(Config{Policy: policy.Default(), Logger: log,
		Facts: testFacts(testHostMemory, func(string) (int64, error) { return engineDefault, nil }),
		Grow:  func(string, int64, remount.Scope) (remount.Result, error) { return remount.Result{}, nil }})
	// What the plugin tells its readiness and its warnings, in order.
	var (
		mu     sync.Mutex
		states []string // "up", or "down: why"
		warned []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, p, Options{Socket: socket, Logger: log, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			Getenv: func(string) string { return "" },
			Registered: func(ok bool, why string) {
				mu.Lock()
				defer mu.Unlock()
				if ok {
					states = append(states, "up")
				} else {
					states = append(states, "down: "+why)
				}
			},
			Unavailable: func(msg string) {
				mu.Lock()
				defer mu.Unlock()
				warned = append(warned, msg)
			},
			UnavailableAfter: 200 * time.Millisecond,
		})
	}()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	// No runtime yet: the plugin keeps trying.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "cannot register with the runtime; retrying"); {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not report a failed attempt:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Not registered for UnavailableAfter: said once, with the socket and
	// what its absence means.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(warned)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning after the plugin could not register:\n%s", logs.String())
		}
	}
	time.Sleep(100 * time.Millisecond) // more attempts fail meanwhile
	mu.Lock()
	if len(warned) != 1 || !strings.Contains(warned[0], socket) || !strings.Contains(warned[0], "does not serve NRI there") {
		t.Errorf("warnings before any runtime: %q, want one naming %s and what it means", warned, socket)
	}
	if len(states) == 0 || strings.Contains(strings.Join(states, "\n"), "up") {
		t.Errorf("states before any runtime: %q, want only downs", states)
	}
	mu.Unlock()
	first := startRuntime(t, socket)
	resp := waitAdjusted(t, first, "first runtime")
	// The runtime folds the plugin's removal and re-addition of /dev/shm
	// into one mount that replaces the container's.
	want := policy.MountSizeOption(mustTarget(p.Policy()), true)
	if ms := resp.GetAdjust().GetMounts(); len(ms) != 1 || ms[0].Destination != "/dev/shm" || sizeOpt(ms[0].Options) != strings.TrimPrefix(want, "size=") {
		t.Errorf("the runtime's adjustment %v, want /dev/shm with %s", ms, want)
	}
	first.Stop()

	second := startRuntime(t, socket)
	defer second.Stop()
	waitAdjusted(t, second, "restarted runtime")

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after its context ended, want nil", err)
	}
	stopped = true
	out := logs.String()
	for _, want := range []string{"cannot register with the runtime; retrying", "the runtime closed the connection; reconnecting", "registered with the runtime"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "registered with the runtime"); n != 2 {
		t.Errorf("registered %d times, want 2:\n%s", n, out)
	}
	// Readiness: up twice, down in between (the first runtime gone).
	mu.Lock()
	defer mu.Unlock()
	var ups []int
	for i, st := range states {
		if st == "up" {
			ups = append(ups, i)
		}
	}
	if len(ups) != 2 || ups[1] == ups[0]+1 || states[ups[0]+1] != "down: the runtime closed the connection" {
		t.Errorf("readiness went %q, want down, up, down (the runtime closed the connection), up", states)
	}
}

// TestRunLaunchedExits: a plugin the runtime launched does not dial; with
// a bad connection in its environment it returns an error at once.
func TestRunLaunchedExits(t *testing.T) {
	t.Setenv(api.PluginSocketEnvVar, "not-a-number")
	t.Setenv(api.PluginNameEnvVar, "gpurun")
	t.Setenv(api.PluginIdxEnvVar, "10")
	err := Run(context.Background(), New(Config{Facts: testFacts(testHostMemory, nil)}), Options{Socket: "/nonexistent/nri.sock"})
	if err == nil || !strings.Contains(err.Error(), api.PluginSocketEnvVar) {
		t.Errorf("Run = %v, want an error about %s", err, api.PluginSocketEnvVar)
	}
}

func mustTarget(pol *policy.Policy) int64 {
	n, _ := pol.Target(policy.Request{HostMemory: testHostMemory})
	return n
}

// BenchmarkCreateContainer measures the handler NRI calls, for the two
// shapes it acts on (NRI gives a plugin 2 s per request). The host's
// remount is recorded, not made (it needs root): the integration tests
// make it for real.
func BenchmarkCreateContainer(b *testing.B) {
	bind := &api.Mount{Destination: "/dev/shm", Type: "bind", Source: sandboxShm, Options: []string{"rbind", "rprivate", "rw"}}
	own := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}
	for _, bc := range []struct {
		name string
		ctr  *api.Container
	}{
		{"sandbox-bind-remount", gpuContainer(bind)},
		{"own-tmpfs-adjust", gpuContainer(own)},
		{"no-gpu", &api.Container{PodSandboxId: testPod, Mounts: []*api.Mount{bind}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := New(Config{Policy: policy.Default(), Facts: testFacts(testHostMemory, func(string) (int64, error) { return engineDefault, nil }),
				Grow: func(string, int64, remount.Scope) (remount.Result, error) { return remount.Result{}, nil }})
			pod := &api.PodSandbox{Id: testPod, Name: "pod", Namespace: "ml"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.CreateContainer(ctx, pod, bc.ctr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateContainerNRI measures a whole CreateContainer round trip
// through the NRI protocol: the runtime's adaptation, ttrpc over a unix
// socket, the plugin, and the adjustment back.
func BenchmarkCreateContainerNRI(b *testing.B) {
	socket := filepath.Join(b.TempDir(), "nri.sock")
	r := startRuntime(b, socket)
	defer r.Stop()
	p := New(Config{Policy: policy.Default(), Facts: testFacts(testHostMemory, func(string) (int64, error) { return engineDefault, nil })})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, p, Options{Socket: socket, MinBackoff: 5 * time.Millisecond, Getenv: func(string) string { return "" }})
	}()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := r.CreateContainer(context.Background(), ownTmpfsRequest())
		if err == nil && len(resp.GetAdjust().GetMounts()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the plugin did not register: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := r.CreateContainer(context.Background(), ownTmpfsRequest())
		if err != nil || len(resp.GetAdjust().GetMounts()) == 0 {
			b.Fatalf("response %v, err %v", resp, err)
		}
	}
}

// concurrentCreates is how many containers the concurrent benchmarks
// create at once: a node starting 100 pods together.
const concurrentCreates = 100

// benchNode is a node for the concurrent benchmarks: containerd's state
// dir, an engine root of the policy, under which each pod's sandbox
// /dev/shm is a directory of the pod's (in the test's temporary directory:
// the sweep refuses the host's /dev/shm, and only reads a pod's), and the
// restart sweep's records, on a tmpfs as /run/gpurun is on a node
// (/dev/shm, else the temporary directory): they are written and fsynced
// on every pod's first start.
type benchNode struct {
	state string // containerd's state dir
	pol   *policy.Policy
	sweep shmsweep.Options
	pods  int // pods made so far: each round's are new
}

func newBenchNode(b *testing.B) *benchNode {
	dir := b.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		b.Fatal(err)
	}
	records, err := os.MkdirTemp("/dev/shm", "gpurun-nri-bench-")
	if err != nil {
		records = filepath.Join(dir, "sweep")
	}
	b.Cleanup(func() { _ = os.RemoveAll(records) })
	n := &benchNode{state: filepath.Join(dir, "containerd"), pol: policy.Default(),
		// The pods' /dev/shm are directories on dir's filesystem.
		sweep: shmsweep.Options{StateDir: records, TmpfsMagic: int64(st.Type)}}
	n.pol.EngineRoots = []string{n.state}
	return n
}

// plugin returns a plugin for the node whose remounts of the pods' host
// tmpfs are recorded, not made (they need root; the integration tests make
// them), and which counts in bad the containers whose outcome is not the
// one of their shape: a remount and a first start's sweep (sandbox-bind),
// an adjustment (own-tmpfs).
func (n *benchNode) plugin(shape string, bad *atomic.Int64) *Plugin {
	return New(Config{Policy: n.pol, Sweep: n.sweep,
		Facts: testFacts(testHostMemory, func(string) (int64, error) { return engineDefault, nil }),
		Grow: func(_ string, size int64, _ remount.Scope) (remount.Result, error) {
			return remount.Result{Before: engineDefault, After: size, Changed: true}, nil
		},
		Observe: func(_ enforce.Subject, res enforce.Result) {
			ok := res.Err == nil
			switch shape {
			case "sandbox-bind":
				ok = ok && res.Plan.Action == oci.ActionRemount && res.Grown != nil &&
					res.Sweep != nil && res.Sweep.Err == nil && res.Sweep.NewSandbox
			case "own-tmpfs":
				ok = ok && res.Plan.Action == oci.ActionSetSize && res.Done.Changed
			}
			if !ok {
				bad.Add(1)
			}
		}})
}

// round returns the CreateContainer requests of concurrentCreates new
// pods' GPU containers, one per pod, of shape: "sandbox-bind", the
// container binds its pod's sandbox /dev/shm (containerd's CRI; made
// here), or "own-tmpfs", it has a 64 MiB tmpfs of its own.
func (n *benchNode) round(b *testing.B, shape string) []*adaptation.CreateContainerRequest {
	reqs := make([]*adaptation.CreateContainerRequest, concurrentCreates)
	for i := range reqs {
		n.pods++
		pod := fmt.Sprintf("%064x", n.pods)
		shm := &api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}
		if shape == "sandbox-bind" {
			dir := filepath.Join(n.state, "io.containerd.grpc.v1.cri", "sandboxes", pod, "shm")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			shm = &api.Mount{Destination: "/dev/shm", Type: "bind", Source: dir, Options: []string{"rbind", "rprivate", "rw"}}
		}
		ctr := gpuContainer(shm)
		ctr.Id, ctr.PodSandboxId = fmt.Sprintf("%064x", 1<<40+n.pods), pod
		ctr.Annotations = map[string]string{oci.AnnotationCRIContainerType: "container", oci.AnnotationCRISandboxID: pod}
		reqs[i] = &adaptation.CreateContainerRequest{Pod: &api.PodSandbox{Id: pod, Name: fmt.Sprintf("job-%d", n.pods), Namespace: "ml"}, Container: ctr}
	}
	return reqs
}

// remove deletes a round's pods as the runtime does (RemovePodSandbox,
// which drops their sweep records, and their sandbox dirs), so that every
// round finds the node with the same pods: none.
func (n *benchNode) remove(b *testing.B, p *Plugin, reqs []*adaptation.CreateContainerRequest) {
	for _, r := range reqs {
		if err := p.RemovePodSandbox(context.Background(), r.Pod); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(n.state, "io.containerd.grpc.v1.cri", "sandboxes", r.Pod.Id)); err != nil {
			b.Fatal(err)
		}
	}
}

// concurrently runs create(i) for every i < n in goroutines of their own,
// started before and released together, and returns each one's duration.
// The timer, stopped by the caller, runs from the release to the last
// one's end.
func concurrently(b *testing.B, n int, create func(i int)) []time.Duration {
	took := make([]time.Duration, n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			start := time.Now()
			create(i)
			took[i] = time.Since(start)
		}()
	}
	b.StartTimer()
	close(release)
	wg.Wait()
	return took
}

// percentile returns the p-th percentile (0 < p ≤ 1) of d: the smallest
// duration that at least p of them do not exceed.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	return s[max(0, int(math.Ceil(p*float64(len(s))))-1)]
}

func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(percentile(d, 0.50)), name+"-p50-µs")
	b.ReportMetric(us(percentile(d, 0.99)), name+"-p99-µs")
}

// BenchmarkCreateContainerConcurrent measures the plugin's own time per
// CreateContainer when a node starts 100 pods at once: each round, 100
// goroutines, released together, each call the handler for the GPU
// container of a new pod of its own (distinct pods: the restart sweep
// keeps its records per pod, and a pod's first start collects the records
// of pods gone). Between rounds, off the clock, the pods are removed as
// the runtime removes them (RemovePodSandbox). It reports the p50 and p99
// of the handler's time over every create (plugin-p50-µs, plugin-p99-µs),
// and ns/op is one round, all 100 creates. Two shapes:
//
//   - sandbox-bind: the container binds its pod's sandbox /dev/shm
//     (containerd's CRI): the plan grows that tmpfs (the remount is
//     recorded, not made: it needs root) and the restart sweep records the
//     pod's first start and collects the records of pods gone;
//   - own-tmpfs: the container has a tmpfs of its own, which the plugin
//     answers with an adjustment (no host state).
//
// The handler does not serialize: it takes no lock across a create, only
// a read lock for the policy in force and the runtime's name
// (Plugin.state), and the log's lock for one write per record (Log; the
// records are discarded here). The sweep's records are files of each
// pod's own, though a pod's first start reads every pod's (shmsweep.GC,
// most of a sandbox-bind create's time). So 100 creates run in parallel
// as far as the CPUs allow, and the p99 is mostly their wait for a CPU
// (GOMAXPROCS). Through NRI the runtime never calls it so: see
// BenchmarkCreateContainerConcurrentNRI.
func BenchmarkCreateContainerConcurrent(b *testing.B) {
	for _, shape := range []string{"sandbox-bind", "own-tmpfs"} {
		b.Run(shape, func(b *testing.B) {
			n := newBenchNode(b)
			var bad atomic.Int64
			p := n.plugin(shape, &bad)
			ctx := context.Background()
			var own []time.Duration
			for b.Loop() {
				b.StopTimer()
				reqs := n.round(b, shape)
				own = append(own, concurrently(b, len(reqs), func(i int) {
					if _, _, err := p.CreateContainer(ctx, reqs[i].Pod, reqs[i].Container); err != nil {
						b.Error(err)
					}
				})...)
				b.StopTimer()
				n.remove(b, p, reqs)
				b.StartTimer()
			}
			if k := bad.Load(); k > 0 {
				b.Fatalf("%d of %d creates did not take the %s path", k, len(own), shape)
			}
			reportPercentiles(b, "plugin", own)
		})
	}
}

// timedPlugin is the plugin with the time spent inside its CreateContainer
// handler recorded.
type timedPlugin struct {
	*Plugin
	mu  sync.Mutex
	own []time.Duration
}

func (t *timedPlugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := time.Now()
	adj, upd, err := t.Plugin.CreateContainer(ctx, pod, ctr)
	took := time.Since(start)
	t.mu.Lock()
	t.own = append(t.own, took)
	t.mu.Unlock()
	return adj, upd, err
}

func (t *timedPlugin) take() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	own := t.own
	t.own = nil
	return own
}

// BenchmarkCreateContainerConcurrentNRI is BenchmarkCreateContainerConcurrent
// through the NRI protocol: 100 goroutines each send the runtime's
// adaptation (what containerd and CRI-O embed) a CreateContainer for a new
// pod's GPU container at once, which relays it over ttrpc on a unix socket
// to the plugin, served by the NRI stub as Run serves it. It reports the
// p50 and p99 of the plugin's own time (plugin-p50-µs, plugin-p99-µs: the
// time inside its handler, as the stub calls it) and of the whole round
// trip (roundtrip-p50-µs, roundtrip-p99-µs: from the runtime's call to its
// answer). The adaptation holds a lock of its own across each
// CreateContainer, over every plugin (the runtime's side, not gpurun's), so
// the plugin sees the creates one at a time and a round trip's p99 is
// mostly its wait behind the 99 others.
func BenchmarkCreateContainerConcurrentNRI(b *testing.B) {
	for _, shape := range []string{"sandbox-bind", "own-tmpfs"} {
		b.Run(shape, func(b *testing.B) {
			n := newBenchNode(b)
			var bad atomic.Int64
			tp := &timedPlugin{Plugin: n.plugin(shape, &bad)}
			socket := filepath.Join(b.TempDir(), "nri.sock")
			r := startRuntime(b, socket)
			defer r.Stop()
			st, err := stub.New(tp, stub.WithSocketPath(socket), stub.WithPluginName(DefaultName), stub.WithPluginIdx(DefaultIndex),
				stub.WithLogger(stubLogger{slog.New(slog.DiscardHandler)}))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := st.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer st.Stop()
			// Registered: the adaptation relays a request to the plugin.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				resp, err := r.CreateContainer(context.Background(), ownTmpfsRequest())
				if err == nil && len(resp.GetAdjust().GetMounts()) > 0 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("the plugin did not register: %v", err)
				}
			}
			tp.take()
			bad.Store(0)
			var trips, own []time.Duration
			for b.Loop() {
				b.StopTimer()
				reqs := n.round(b, shape)
				trips = append(trips, concurrently(b, len(reqs), func(i int) {
					resp, err := r.CreateContainer(context.Background(), reqs[i])
					if err != nil || shape == "own-tmpfs" && len(resp.GetAdjust().GetMounts()) == 0 {
						b.Errorf("response %v, err %v", resp, err)
					}
				})...)
				b.StopTimer()
				own = append(own, tp.take()...)
				n.remove(b, tp.Plugin, reqs)
				b.StartTimer()
			}
			if k := bad.Load(); k > 0 || len(own) != len(trips) {
				b.Fatalf("%d of %d creates did not take the %s path; the plugin handled %d", k, len(trips), shape, len(own))
			}
			reportPercentiles(b, "plugin", own)
			reportPercentiles(b, "roundtrip", trips)
		})
	}
}
