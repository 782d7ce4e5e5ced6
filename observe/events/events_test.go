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

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/records/recordstest"
	"github.com/gpurun/gpurun/runtime/enforce"
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
