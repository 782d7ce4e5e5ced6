package nri

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/gpurun/gpurun/engine/remount"
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
