package events_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/records/recordstest"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// fakeAPI is the events part of an API server: POST (409 for a name that
// exists), GET, merge PATCH (404 for one that does not).
type fakeAPI struct {
	mu     sync.Mutex
	events map[string]*corev1.Event // by namespace/name
	calls  []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/")
	if len(parts) < 2 || parts[1] != "events" {
		http.Error(w, `{"message":"no such path"}`, http.StatusNotFound)
		return
	}
	ns := parts[0]
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == "POST" && len(parts) == 2:
		var ev corev1.Event
		if err := json.Unmarshal(body, &ev); err != nil || ev.Namespace != ns {
			http.Error(w, `{"message":"bad event"}`, http.StatusBadRequest)
			return
		}
		if _, ok := f.events[ns+"/"+ev.Name]; ok {
			http.Error(w, `{"message":"already exists"}`, http.StatusConflict)
			return
		}
		f.events[ns+"/"+ev.Name] = &ev
		_ = json.NewEncoder(w).Encode(ev)
	case len(parts) == 3:
		ev, ok := f.events[ns+"/"+parts[2]]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		if r.Method == "PATCH" {
			if r.Header.Get("Content-Type") != "application/merge-patch+json" || json.Unmarshal(body, ev) != nil {
				http.Error(w, `{"message":"bad patch"}`, http.StatusBadRequest)
				return
			}
		}
		_ = json.NewEncoder(w).Encode(ev)
	default:
		http.Error(w, `{"message":"method"}`, http.StatusMethodNotAllowed)
	}
}

func (f *fakeAPI) list() []corev1.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []corev1.Event
	for _, ev := range f.events {
		out = append(out, *ev)
	}
	return out
}

func TestPost(t *testing.T) {
	_, rs := recordstest.Run(t,
		recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "c1"}},
		recordstest.Case{Fixture: recordstest.CRIGPU, Refuse: true, Subject: enforce.Subject{ID: "c1"}},
		recordstest.Case{Fixture: recordstest.CRIPlain, Subject: enforce.Subject{ID: "c2"}},
		recordstest.Case{Fixture: recordstest.DockerGPU, Subject: enforce.Subject{ID: "c3"}},
	)
	done, refused, plain, docker := rs[0], rs[1], rs[2], rs[3]
	type want struct {
		reason, typ, contains string
		count                 int32
	}
	tests := []struct {
		name    string
		posts   []records.Record
		restart bool // a new Poster before the last post
		expire  bool // the API server drops the events before the last post
		want    []want
	}{
		{"sized", []records.Record{done}, false, false, []want{{events.ReasonSized, "Normal", "sized /dev/shm to ", 1}}},
		{"refused", []records.Record{refused}, false, false, []want{{events.ReasonNotSized, "Warning", "fix: ", 1}}},
		{"both, repeated", []records.Record{done, refused, done, done}, false, false,
			[]want{{events.ReasonSized, "Normal", "", 3}, {events.ReasonNotSized, "Warning", "", 1}}},
		{"a restarted agent counts on", []records.Record{done, done}, true, false, []want{{events.ReasonSized, "Normal", "", 2}}},
		{"an expired event is posted anew", []records.Record{done, done}, false, true, []want{{events.ReasonSized, "Normal", "", 1}}},
		{"no GPU: no event", []records.Record{plain}, false, false, nil},
		{"not in a pod: no event", []records.Record{docker}, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeAPI{events: map[string]*corev1.Event{}}
			srv := httptest.NewServer(api)
			defer srv.Close()
			newPoster := func() *events.Poster {
				return &events.Poster{Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "node-1"}
			}
			p := newPoster()
			for i, r := range tt.posts {
				if i == len(tt.posts)-1 {
					if tt.restart {
						p = newPoster()
					}
					if tt.expire {
						api.mu.Lock()
						clear(api.events)
						api.mu.Unlock()
					}
				}
				if err := p.Post(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			got := api.list()
			if len(got) != len(tt.want) {
				t.Fatalf("%d events, want %d: %+v", len(got), len(tt.want), got)
			}
			for _, w := range tt.want {
				var ev *corev1.Event
				for i := range got {
					if got[i].Reason == w.reason {
						ev = &got[i]
					}
				}
				if ev == nil {
					t.Fatalf("no %s event in %+v", w.reason, got)
				}
				io := ev.InvolvedObject
				if io.Kind != "Pod" || io.Namespace != done.Pod.Namespace || io.Name != done.Pod.Name || string(io.UID) != done.Pod.UID || io.FieldPath != "spec.containers{app}" {
					t.Errorf("involved object %+v, want the pod %+v", io, done.Pod)
				}
				if ev.Type != w.typ || ev.Count != w.count || !strings.Contains(ev.Message, w.contains) || ev.Source.Host != "node-1" || ev.ReportingController != events.Controller {
					t.Errorf("event %s: type %s count %d message %q source %+v; want %s, %d, containing %q", ev.Reason, ev.Type, ev.Count, ev.Message, ev.Source, w.typ, w.count, w.contains)
				}
			}
		})
	}
}

// TestObserve: the background worker posts what Observe queues.
func TestObserve(t *testing.T) {
	_, rs := recordstest.Run(t, recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "c1"}})
	api := &fakeAPI{events: map[string]*corev1.Event{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := &events.Poster{Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "node-1"}
	p.Observe(rs[0])
	p.Flush()
	if got := api.list(); len(got) != 1 || got[0].Reason != events.ReasonSized {
		t.Fatalf("events %+v, want one ShmSized", got)
	}
}

// TestWarnNode: a node's Warning Event is on the Node (default namespace,
// the node's name as uid, as the kubelet's), one per reason, counted on
// repeats and across a restarted Poster, its message the latest.
func TestWarnNode(t *testing.T) {
	type post struct {
		reason, msg string
		restart     bool // a new Poster first
	}
	for _, tc := range []struct {
		name  string
		posts []post
		want  map[string]int32 // reason -> count
		last  string           // the last message posted is the event's
	}{
		{"once", []post{{events.ReasonAgentFailed, "refused", false}}, map[string]int32{events.ReasonAgentFailed: 1}, "refused"},
		{"repeated, restarted", []post{{events.ReasonAgentFailed, "a", false}, {events.ReasonAgentFailed, "b", false}, {events.ReasonAgentFailed, "c", true}},
			map[string]int32{events.ReasonAgentFailed: 3}, "c"},
		{"two reasons", []post{{events.ReasonAgentFailed, "a", false}, {events.ReasonNRIUnavailable, "no NRI", false}},
			map[string]int32{events.ReasonAgentFailed: 1, events.ReasonNRIUnavailable: 1}, "no NRI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{events: map[string]*corev1.Event{}}
			srv := httptest.NewServer(api)
			defer srv.Close()
			newPoster := func() *events.Poster {
				return &events.Poster{Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "gpu-7"}
			}
			p := newPoster()
			for _, ps := range tc.posts {
				if ps.restart {
					p = newPoster()
				}
				if err := p.WarnNode(context.Background(), ps.reason, ps.msg); err != nil {
					t.Fatal(err)
				}
			}
			got := api.list()
			if len(got) != len(tc.want) {
				t.Fatalf("%d events, want %d: %+v", len(got), len(tc.want), got)
			}
			last := tc.posts[len(tc.posts)-1]
			for _, ev := range got {
				io := ev.InvolvedObject
				if ev.Namespace != "default" || io.Kind != "Node" || io.Name != "gpu-7" || string(io.UID) != "gpu-7" || io.Namespace != "" {
					t.Errorf("event %s in %q about %+v, want node gpu-7's, in default", ev.Name, ev.Namespace, io)
				}
				if ev.Type != corev1.EventTypeWarning || ev.Count != tc.want[ev.Reason] || ev.Source.Host != "gpu-7" {
					t.Errorf("event %s: type %s, count %d, source %+v; want Warning, %d", ev.Reason, ev.Type, ev.Count, ev.Source, tc.want[ev.Reason])
				}
				if ev.Reason == last.reason && ev.Message != tc.last {
					t.Errorf("event %s: message %q, want the last one, %q", ev.Reason, ev.Message, tc.last)
				}
			}
		})
	}
}

// swept is a record of a restart whose front door swept the pod's
// /dev/shm: the remount record node/enforce made, with a sweep.
func swept(t *testing.T, s records.Sweep) records.Record {
	t.Helper()
	_, rs := recordstest.Run(t, recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "c2"}})
	r := rs[0]
	r.Sweep = s
	return r
}

func TestSweptMessage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sweep records.Sweep
		want  string
	}{
		{"names cut, kept files", records.Sweep{Bytes: 700 << 20, Files: 12, Names: []string{"/dev/shm/nccl-shm-a", "/dev/shm/torch_123"}, KeptFiles: 3, KeptBytes: 1 << 20},
			"removed 700MiB in 12 files that the earlier instance of container app left in /dev/shm: nccl-shm-a, torch_123, … (kept 3 files: held by a live process or a sibling's)"},
		{"every name, none kept", records.Sweep{Bytes: 9637888, Files: 1, Names: []string{"/dev/shm/nccl-shm-recv-1"}},
			"removed 9.19MiB in 1 file that the earlier instance of container app left in /dev/shm: nccl-shm-recv-1"},
		{"the record's own \"…\"", records.Sweep{Bytes: 10 << 20, Files: 10, Names: []string{"/dev/shm/a", "/dev/shm/b", "/dev/shm/c", "/dev/shm/d", "/dev/shm/e", "/dev/shm/f", "/dev/shm/g", "/dev/shm/h", "…"}},
			"removed 10MiB in 10 files that the earlier instance of container app left in /dev/shm: a, b, c, d, e, f, g, h, …"},
		{"no names", records.Sweep{Bytes: 4 << 20, Files: 2, KeptFiles: 1},
			"removed 4MiB in 2 files that the earlier instance of container app left in /dev/shm (kept 1 file: held by a live process or a sibling's)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := events.SweptMessage(swept(t, tc.sweep))
			if !ok || got != tc.want {
				t.Errorf("message %q (%v),\nwant    %q", got, ok, tc.want)
			}
		})
	}
	if _, ok := events.SweptMessage(swept(t, records.Sweep{Path: "/x", Err: "permission denied"})); ok {
		t.Error("a sweep that removed nothing has a message")
	}
}

// TestPostSwept: a restart's sweep is a Normal ShmSwept Event beside its
// ShmSized; a second restart's counts on it with its own message; a sweep
// that failed, or removed nothing, posts none.
func TestPostSwept(t *testing.T) {
	first := swept(t, records.Sweep{Path: "/run/x/shm", Bytes: 700 << 20, Files: 12, Names: []string{"/dev/shm/nccl-shm-a"}})
	second := swept(t, records.Sweep{Path: "/run/x/shm", Bytes: 9 << 20, Files: 1, Names: []string{"/dev/shm/torch_1"}})
	failed := swept(t, records.Sweep{Path: "/run/x/shm", Err: "open /run/x/shm: permission denied"})
	outside := first
	outside.Pod = records.Pod{}
	for _, tc := range []struct {
		name      string
		posts     []records.Record
		wantSwept int32  // the ShmSwept Event's count, 0 none
		wantMsg   string // in its message
		wantSized int32
	}{
		{"one restart", []records.Record{first}, 1, "removed 700MiB in 12 files", 1},
		{"a second restart is posted too", []records.Record{first, second}, 2, "removed 9MiB in 1 file", 2},
		{"a sweep that failed: no ShmSwept, no ShmNotSized", []records.Record{failed}, 0, "", 1},
		{"outside a pod: nothing", []records.Record{outside}, 0, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{events: map[string]*corev1.Event{}}
			srv := httptest.NewServer(api)
			defer srv.Close()
			p := &events.Poster{Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "node-1"}
			for _, r := range tc.posts {
				p.Observe(r)
			}
			p.Flush()
			byReason := map[string]corev1.Event{}
			for _, ev := range api.list() {
				byReason[ev.Reason] = ev
			}
			if _, ok := byReason[events.ReasonNotSized]; ok {
				t.Errorf("a ShmNotSized Event: %+v", byReason[events.ReasonNotSized])
			}
			if got := byReason[events.ReasonSized].Count; got != tc.wantSized {
				t.Errorf("ShmSized count %d, want %d", got, tc.wantSized)
			}
			ev, ok := byReason[events.ReasonSwept]
			if tc.wantSwept == 0 {
				if ok {
					t.Errorf("a ShmSwept Event: %+v", ev)
				}
				return
			}
			if !ok || ev.Count != tc.wantSwept || ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, tc.wantMsg) || ev.InvolvedObject.UID != types.UID(first.Pod.UID) {
				t.Errorf("ShmSwept %+v (found %v); want count %d, Normal, message with %q, on the pod", ev, ok, tc.wantSwept, tc.wantMsg)
			}
		})
	}
}

// memContainer is a sampled container of a pod whose /dev/shm holds shm of
// a limit whose, with working set ws.
func memContainer(shm, ws, limit int64, whose string) shmstats.Container {
	c := shmstats.Container{Engine: shmstats.EngineContainerd, ID: "c1", Name: "trainer",
		Pod: &shmstats.Pod{Namespace: "ml", Name: "job-0", UID: "0b5c", Container: "trainer"},
		Shm: shmstats.Shm{Tmpfs: true, Device: "0:50", Size: limit / 2, Used: shm}}
	c.Memory = &shmstats.Memory{Limit: limit, LimitOf: whose, Usage: ws, WorkingSet: ws, OOMKills: 0}
	return c
}

func TestMemoryMessages(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name string
		ev   events.PodEvent
		want string // the message's start
	}{
		{"near the limit", events.NearMemoryLimit(memContainer(7*gib+gib/2, 15*gib+gib/4, 16*gib, shmstats.LimitContainer)),
			"/dev/shm holds 7.5GiB and container trainer uses 15.25GiB of its 16GiB memory limit: tmpfs pages count against the limit"},
		{"near the pod's limit", events.NearMemoryLimit(memContainer(7*gib, 15*gib, 16*gib, shmstats.LimitPod)),
			"/dev/shm holds 7GiB and container trainer uses 15GiB of its pod's 16GiB memory limit: "},
		{"the container OOM-killed", events.OOMKilled(memContainer(7*gib+gib/2, 15*gib, 16*gib, shmstats.LimitContainer), 0, 12*time.Second+300*time.Millisecond),
			"container trainer was OOM-killed with 7.5GiB of its 16GiB memory limit in /dev/shm (at the last sample, 12s before)"},
		{"a process of it", events.OOMKilled(memContainer(7*gib, 15*gib, 16*gib, shmstats.LimitContainer), 1, 15*time.Second),
			"a process of container trainer was OOM-killed with 7GiB of its 16GiB memory limit in /dev/shm (at the last sample, 15s before)"},
		{"processes of it", events.OOMKilled(memContainer(7*gib, 15*gib, 16*gib, shmstats.LimitPod), 3, 15*time.Second),
			"3 processes of container trainer were OOM-killed with 7GiB of its pod's 16GiB memory limit in /dev/shm (at the last sample, 15s before)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.HasPrefix(tc.ev.Message, tc.want) {
				t.Errorf("message %q,\nwant it to start %q", tc.ev.Message, tc.want)
			}
			if tc.ev.Type != corev1.EventTypeWarning || tc.ev.Pod != (records.Pod{Namespace: "ml", Name: "job-0", UID: "0b5c", Container: "trainer"}) {
				t.Errorf("event %+v", tc.ev)
			}
		})
	}
	if ev := events.OOMKilled(memContainer(0, 15*gib, 16*gib, shmstats.LimitContainer), 0, 0); !strings.Contains(ev.Message, " 0B of ") {
		t.Errorf("an empty /dev/shm: %q", ev.Message)
	}
}

// TestEmit: memory Events go through the same queue, one per pod and
// reason, counted; none outside a pod.
func TestEmit(t *testing.T) {
	api := &fakeAPI{events: map[string]*corev1.Event{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := &events.Poster{Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Node: "node-1"}
	c := memContainer(7<<30, 15<<30, 16<<30, shmstats.LimitContainer)
	p.Emit(events.NearMemoryLimit(c))
	p.Emit(events.OOMKilled(c, 0, time.Second))
	p.Emit(events.OOMKilled(c, 1, time.Second))
	outside := c
	outside.Pod = nil
	p.Emit(events.OOMKilled(outside, 0, time.Second))
	p.Flush()
	got := map[string]int32{}
	for _, ev := range api.list() {
		got[ev.Reason] = ev.Count
		if ev.InvolvedObject.FieldPath != "spec.containers{trainer}" || ev.Source.Component != "gpurun" {
			t.Errorf("event %+v", ev)
		}
	}
	if len(got) != 2 || got[events.ReasonNearMemoryLimit] != 1 || got[events.ReasonOOMKilled] != 2 {
		t.Errorf("events by reason %v, want ShmNearMemoryLimit 1, ShmOOMKilled 2", got)
	}
}
