package exporter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// eventsAPI is the events part of an API server: POST (409 for a name that
// exists), GET and merge PATCH of one.
type eventsAPI struct {
	mu     sync.Mutex
	events map[string]*corev1.Event
}

func (f *eventsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/")
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == "POST" && len(parts) == 2:
		var ev corev1.Event
		if json.Unmarshal(body, &ev) != nil {
			http.Error(w, `{"message":"bad"}`, http.StatusBadRequest)
			return
		}
		if _, ok := f.events[ev.Name]; ok {
			http.Error(w, `{"message":"exists"}`, http.StatusConflict)
			return
		}
		f.events[ev.Name] = &ev
		_ = json.NewEncoder(w).Encode(ev)
	case len(parts) == 3 && f.events[parts[2]] != nil:
		ev := f.events[parts[2]]
		if r.Method == "PATCH" {
			_ = json.Unmarshal(body, ev)
		}
		_ = json.NewEncoder(w).Encode(ev)
	default:
		http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
	}
}

func (f *eventsAPI) byReason() map[string]corev1.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]corev1.Event{}
	for _, ev := range f.events {
		out[ev.Reason] = *ev
	}
	return out
}

// scripted returns the samples in turn, then the last one again.
type scripted struct {
	samples [][]shmstats.Container
	n       int
}

func (s *scripted) collect(context.Context, shmstats.Options) ([]shmstats.Container, error) {
	c := s.samples[min(s.n, len(s.samples)-1)]
	s.n++
	return c, nil
}

type oneExit struct{ exit metrics.Exit }

func (o oneExit) Exit(context.Context, string) (metrics.Exit, error) { return o.exit, nil }

func trainer(shm, ws, oom int64) shmstats.Container {
	const limit = 16 << 30
	c := shmstats.Container{Engine: shmstats.EngineContainerd, Namespace: "k8s.io", ID: "c1", Name: "trainer", PID: 42,
		Pod: &shmstats.Pod{Namespace: "ml", Name: "job-0", UID: "0b5c", Container: "trainer"},
		Shm: shmstats.Shm{Kind: "engine-host-tmpfs", Tmpfs: true, Device: "0:50", Size: limit / 2, Used: shm, Peak: shm, Orphaned: -1}}
	c.Memory = &shmstats.Memory{Version: 1, Limit: limit, LimitOf: shmstats.LimitContainer, Usage: ws, WorkingSet: ws, OOMKills: oom}
	c.Memory.Share(shm, true)
	return c
}

// TestMemoryAlerts: from the samples to the pod's Events and the node's
// log: a container near its limit with /dev/shm half of it (once), then
// OOM-killed, as the CRI says, with the last sample's /dev/shm.
func TestMemoryAlerts(t *testing.T) {
	api := &eventsAPI{events: map[string]*corev1.Event{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	var logBuf bytes.Buffer
	exp, err := New(Options{Events: true, Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "node-1",
		Log: slog.New(slog.NewJSONHandler(&logBuf, nil)), Stats: shmstats.Options{Docker: "none", Containerd: []string{}, Podman: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	near := trainer(8<<30, 15<<30, 0)
	exp.sampler = metrics.NewSampler(prometheus.NewRegistry(), metrics.SamplerOptions{
		Collect: (&scripted{samples: [][]shmstats.Container{{near}, {near}, {}}}).collect,
		Exits:   oneExit{metrics.Exit{Reason: "OOMKilled", ExitCode: 137, FinishedAt: t0.Add(27 * time.Second)}},
		Alert:   exp.memoryAlert,
		Now:     func() time.Time { return now },
	})
	for range 3 {
		if err := exp.sampler.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
		now = now.Add(15 * time.Second)
	}
	exp.poster.Flush()
	got := api.byReason()
	wantOOM := "container trainer was OOM-killed with 8GiB of its 16GiB memory limit in /dev/shm (at the last sample, 12s before)"
	if ev := got[events.ReasonOOMKilled]; ev.Message != wantOOM || ev.Type != corev1.EventTypeWarning || ev.Count != 1 || ev.InvolvedObject.Name != "job-0" {
		t.Errorf("ShmOOMKilled %+v,\nwant the message %q", ev, wantOOM)
	}
	if ev := got[events.ReasonNearMemoryLimit]; ev.Count != 1 || !strings.HasPrefix(ev.Message, "/dev/shm holds 8GiB and container trainer uses 15GiB of its 16GiB memory limit") {
		t.Errorf("ShmNearMemoryLimit %+v", ev)
	}
	var oomLine map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(logBuf.Bytes()), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m["reason"] == events.ReasonOOMKilled {
			oomLine = m
		}
	}
	if oomLine == nil || oomLine["msg"] != wantOOM || oomLine["pod"] != "job-0" || oomLine["shm_used_bytes"] != float64(8<<30) || oomLine["limit_bytes"] != float64(16<<30) {
		t.Errorf("the OOM kill's log record %v, want msg %q and its numbers\n%s", oomLine, wantOOM, logBuf.String())
	}
}

// TestSweepErrorLogged: a sweep that failed is logged, posts nothing.
func TestSweepErrorLogged(t *testing.T) {
	api := &eventsAPI{events: map[string]*corev1.Event{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	var logBuf bytes.Buffer
	exp, err := New(Options{Events: true, Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "node-1", Log: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	exp.Observe(records.Record{ID: "c2", Action: "none", Pod: records.Pod{Namespace: "ml", Name: "job-0", UID: "0b5c", Container: "trainer"},
		Sweep: records.Sweep{Path: "/run/x/shm", Err: "unlink /run/x/shm/nccl-shm-a: read-only file system"}})
	exp.poster.Flush()
	if got := api.byReason(); len(got) != 0 {
		t.Errorf("events %v, want none", got)
	}
	if !strings.Contains(logBuf.String(), "could not sweep") || !strings.Contains(logBuf.String(), "read-only file system") {
		t.Errorf("log %q", logBuf.String())
	}
}

// fakeRuntime is a CRI runtime service that knows some containers.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	known map[string]*runtimeapi.ContainerStatus
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	st, ok := f.known[r.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", r.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: st}, nil
}

// serveCRI serves a fake CRI at <state>/containerd.sock.
func serveCRI(t *testing.T, state string, known map[string]*runtimeapi.ContainerStatus) {
	t.Helper()
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(state, "containerd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, &fakeRuntime{known: known})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

// TestCRIExits: how containers ended, from containerd's CRI at the socket
// in each state dir (under the host root), the first that knows them.
func TestCRIExits(t *testing.T) {
	root, err := os.MkdirTemp("", "gpurun-cri") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	finished := time.Date(2026, 3, 1, 12, 0, 27, 0, time.UTC)
	serveCRI(t, filepath.Join(root, "run/k3s/containerd"), map[string]*runtimeapi.ContainerStatus{})
	serveCRI(t, filepath.Join(root, "run/containerd"), map[string]*runtimeapi.ContainerStatus{
		"oom":  {Id: "oom", State: runtimeapi.ContainerState_CONTAINER_EXITED, Reason: "OOMKilled", ExitCode: 137, FinishedAt: finished.UnixNano()},
		"runs": {Id: "runs", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	// The k3s state dir, whose containerd does not know them, is asked
	// first; the dockerd one has no socket.
	c := newCRIExits(shmstats.Options{HostRoot: root, Containerd: []string{"/run/k3s/containerd", "/var/run/docker/containerd/daemon", "/run/containerd"}}, nil)
	defer c.Close()
	for _, tc := range []struct {
		id   string
		want metrics.Exit
		err  error
	}{
		{"oom", metrics.Exit{Reason: "OOMKilled", ExitCode: 137, FinishedAt: finished}, nil},
		{"runs", metrics.Exit{Running: true}, nil},
		{"gone", metrics.Exit{}, metrics.ErrNoSuchContainer},
	} {
		got, err := c.Exit(context.Background(), tc.id)
		if !errors.Is(err, tc.err) || err == nil && tc.err != nil || !got.FinishedAt.Equal(tc.want.FinishedAt) || got.Reason != tc.want.Reason || got.ExitCode != tc.want.ExitCode || got.Running != tc.want.Running {
			t.Errorf("Exit(%s) = %+v, %v; want %+v, %v", tc.id, got, err, tc.want, tc.err)
		}
	}
	none := newCRIExits(shmstats.Options{HostRoot: root, Containerd: []string{"/nowhere"}}, nil)
	if _, err := none.Exit(context.Background(), "oom"); err == nil || errors.Is(err, metrics.ErrNoSuchContainer) || !strings.Contains(err.Error(), "no containerd socket") {
		t.Errorf("without a socket: %v", err)
	}
}
