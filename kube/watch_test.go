package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeCollection is an API server's collection of ConfigMaps (any object
// does) that lists in pages and streams watch events the test sends.
type fakeCollection struct {
	t      *testing.T
	mu     sync.Mutex
	items  []corev1.ConfigMap
	rv     int
	lists  int
	status int // answer lists with this status when set
	// watches gets one channel per watch; the test sends its events,
	// and closing it ends the watch.
	watches chan chan string
	// gone answers the next watch with 410 Gone.
	gone bool
}

func (f *fakeCollection) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	q := r.URL.Query()
	if q.Get("watch") != "1" {
		defer f.mu.Unlock()
		f.lists++
		if f.status != 0 {
			http.Error(w, `{"kind":"Status","message":"configmaps is forbidden: User \"system:serviceaccount:x:y\" cannot list"}`, f.status)
			return
		}
		start := 0
		if c := q.Get("continue"); c != "" {
			fmt.Sscan(c, &start)
		}
		end := min(start+2, len(f.items))
		page := map[string]any{"metadata": map[string]any{"resourceVersion": fmt.Sprint(f.rv)}, "items": f.items[start:end]}
		if end < len(f.items) {
			page["metadata"].(map[string]any)["continue"] = fmt.Sprint(end)
		}
		if q.Get("limit") != "2" {
			f.t.Errorf("list limit %q, want the page size 2", q.Get("limit"))
		}
		_ = json.NewEncoder(w).Encode(page)
		return
	}
	if f.gone {
		f.gone = false
		f.mu.Unlock()
		http.Error(w, `{"kind":"Status","code":410,"message":"too old resource version"}`, http.StatusGone)
		return
	}
	f.mu.Unlock()
	if q.Get("allowWatchBookmarks") != "true" || q.Get("resourceVersion") == "" {
		f.t.Errorf("watch query %v: want bookmarks, from a resourceVersion", q)
	}
	events := make(chan string)
	select {
	case f.watches <- events:
	case <-r.Context().Done(): // the test has ended (failed) without taking it
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			fmt.Fprintln(w, ev)
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
	}
}

func cm(ns, name, rv, data string) corev1.ConfigMap {
	return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}, Data: map[string]string{"v": data}}
}

func eventJSON(typ string, obj any) string {
	b, _ := json.Marshal(map[string]any{"type": typ, "object": obj})
	return string(b)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("no %s in 5 s", what)
}

// TestWatched: a cache listed in pages and kept by a watch — added,
// modified and deleted objects, bookmarks, what Keep drops — listed anew
// when the watch's resourceVersion is gone, and not current while its
// list fails, with the API server's reason.
func TestWatched(t *testing.T) {
	f := &fakeCollection{t: t, watches: make(chan chan string), rv: 10,
		items: []corev1.ConfigMap{cm("a", "one", "1", "1"), cm("a", "two", "2", "2"), cm("b", "one", "3", "3"), cm("b", "skip", "4", "4")}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var changes []string
	var mu sync.Mutex
	w := &Watched[corev1.ConfigMap]{Kube: &Kube{Base: srv.URL, Client: srv.Client()}, Path: "/api/v1/configmaps", PageSize: 2,
		Keep: func(c *corev1.ConfigMap) *corev1.ConfigMap {
			if c.Name == "skip" {
				return nil
			}
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name}, Data: c.Data}
		},
		Skip:     func(h Head) bool { return len(h.OwnerReferences) > 0 && h.OwnerReferences[0].Kind == "Pod" },
		OnChange: func(n int, synced bool) { mu.Lock(); changes = append(changes, fmt.Sprint(n, synced)); mu.Unlock() }}
	if _, _, err := w.Get("a", "one"); err == nil || !strings.Contains(err.Error(), "not listed yet") {
		t.Errorf("before a list: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-w.Tried()
	events := <-f.watches
	get := func(ns, name string) string {
		c, ok, _ := w.Get(ns, name)
		if !ok {
			return "-"
		}
		return c.Data["v"]
	}
	if get("a", "one") != "1" || get("b", "one") != "3" || get("b", "skip") != "-" || w.Len() != 3 || !w.Synced() {
		t.Fatalf("after the list: a/one %s, b/one %s, b/skip %s, %d objects, synced %v", get("a", "one"), get("b", "one"), get("b", "skip"), w.Len(), w.Synced())
	}
	events <- eventJSON("ADDED", cm("c", "new", "11", "new"))
	events <- eventJSON("MODIFIED", cm("a", "one", "12", "changed"))
	events <- eventJSON("DELETED", cm("a", "two", "13", ""))
	events <- eventJSON("MODIFIED", cm("b", "one", "14", "x"))
	events <- eventJSON("BOOKMARK", map[string]any{"metadata": map[string]any{"resourceVersion": "20"}})
	waitFor(t, "events applied", func() bool {
		return get("c", "new") == "new" && get("a", "one") == "changed" && get("a", "two") == "-"
	})
	events <- eventJSON("ADDED", cm("b", "skip", "21", "skipped"))
	waitFor(t, "the bookmark's resourceVersion", func() bool { w.mu.RLock(); defer w.mu.RUnlock(); return w.rv == "21" })
	if get("b", "skip") != "-" || get("b", "one") != "x" {
		t.Errorf("b/skip %s, b/one %s", get("b", "skip"), get("b", "one"))
	}
	// An object that Skip leaves out by its metadata is not decoded (this
	// one's data could not be: the watch would fail) and leaves the
	// cache, as a deletion would; the watch goes on.
	events <- eventJSON("MODIFIED", map[string]any{"metadata": map[string]any{"namespace": "b", "name": "one", "resourceVersion": "22",
		"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": true}}}, "data": 5})
	events <- eventJSON("ADDED", cm("c", "after", "23", "after"))
	waitFor(t, "the pod's object skipped, the next event applied", func() bool { return get("b", "one") == "-" && get("c", "after") == "after" })
	// The API server ends the watch: watched again from where it was,
	// without a list (after a second: a watch that ends at once is not
	// taken up again at once).
	f.mu.Lock()
	lists := f.lists
	f.mu.Unlock()
	time.Sleep(1100 * time.Millisecond)
	close(events)
	events = <-f.watches
	f.mu.Lock()
	if f.lists != lists {
		t.Errorf("%d lists after a watch ended, want none", f.lists-lists)
	}
	// The resourceVersion too old: an ERROR event of 410, then a 410
	// answer: listed anew.
	f.items = []corev1.ConfigMap{cm("z", "only", "30", "z")}
	f.rv = 30
	f.mu.Unlock()
	events <- eventJSON("ERROR", map[string]any{"kind": "Status", "code": 410, "message": "too old"})
	events = <-f.watches
	waitFor(t, "the list anew", func() bool { return get("z", "only") == "z" && get("a", "one") == "-" })
	// A list that fails: the cache is not current, with the reason.
	f.mu.Lock()
	f.status, f.gone = http.StatusForbidden, true
	f.mu.Unlock()
	close(events)
	waitFor(t, "a failed list", func() bool { return !w.Synced() })
	if _, ok, err := w.Get("z", "only"); !ok || err == nil || !strings.Contains(err.Error(), "configmaps is forbidden") || Code(err) != http.StatusForbidden {
		t.Errorf("a stale object: %v, %v (code %d)", ok, err, Code(err))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) < 3 || changes[0] != "3 true" || changes[len(changes)-1] != "1 false" {
		t.Errorf("changes %q", changes)
	}
}

// TestStatusError: an answer other than 2xx keeps its code and wraps the
// sentinel errors of 404 and 409.
func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		code      int
		notFound  bool
		conflict  bool
		wantInErr string
	}{
		{404, true, false, "404 Not Found: pods \"x\" not found"},
		{409, false, true, "409 Conflict"},
		{422, false, false, "422 Unprocessable Entity"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tc.code)
			fmt.Fprintf(w, `{"kind":"Status","message":"pods \"x\" not found","code":%d}`, tc.code)
		}))
		err := (&Kube{Base: srv.URL, Client: srv.Client()}).Do(context.Background(), "GET", "/api/v1/pods/x", "", nil, nil)
		srv.Close()
		if Code(err) != tc.code || errors.Is(err, ErrNotFound) != tc.notFound || errors.Is(err, ErrConflict) != tc.conflict || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("%d: %v (code %d)", tc.code, err, Code(err))
		}
	}
}

// TestDRA: one GET per object, and why one cannot be had, in a user's
// words: not there, DRA not served, not allowed (with the kubectl that
// tells).
func TestDRA(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/one-gpu":
			fmt.Fprint(w, `{"metadata":{"namespace":"ml","name":"one-gpu"},"spec":{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.nvidia.com"}}]}}}}`)
		case "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/secret":
			http.Error(w, `{"kind":"Status","code":403,"message":"resourceclaims.resource.k8s.io \"secret\" is forbidden"}`, http.StatusForbidden)
		case "/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com":
			http.Error(w, `{"kind":"Status","code":404,"message":"the server could not find the requested resource"}`, http.StatusNotFound)
		default:
			http.Error(w, `{"kind":"Status","code":404,"message":"not found"}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	d := DRA{Kube: &Kube{Base: srv.URL, Client: srv.Client()}}
	if tmpl, err := d.ResourceClaimTemplate("ml", "one-gpu"); err != nil || tmpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName != "gpu.nvidia.com" {
		t.Errorf("template: %+v, %v", tmpl, err)
	}
	for _, tc := range []struct {
		get  func() error
		want string
	}{
		{func() error { _, err := d.ResourceClaimTemplate("ml", "later"); return err }, "ResourceClaimTemplate ml/later not found in the cluster"},
		{func() error { _, err := d.ResourceClaim("ml", "secret"); return err },
			"ResourceClaim ml/secret: forbidden: needs get on resourceclaims.resource.k8s.io (kubectl auth can-i get resourceclaims.resource.k8s.io -n ml)"},
		{func() error { _, err := d.DeviceClass("gpu.nvidia.com"); return err }, "DeviceClass gpu.nvidia.com: the cluster does not serve resource.k8s.io/v1 (Kubernetes 1.34 and later do)"},
	} {
		if err := tc.get(); err == nil || err.Error() != tc.want {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

// TestBaseURL: a kubeconfig's server, as a URL without a trailing slash.
func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.1:6443": "https://10.0.0.1:6443", "https://api.example.com/": "https://api.example.com", "http://127.0.0.1:8080": "http://127.0.0.1:8080"} {
		if got := BaseURL(in); got != want {
			t.Errorf("BaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkWatchClaimEvent: one watch event of a ResourceClaim the API
// server made for a pod from its template (owned by the pod, allocated and
// reserved for it, as most of a training cluster's claims are), applied
// to a cache of claims: decoded whole and left out by Keep, against left
// out by Skip from its metadata.
func BenchmarkWatchClaimEvent(b *testing.B) {
	yes := true
	claim := resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "trainer-0-gpu-x7k2p", GenerateName: "trainer-0-gpu-", ResourceVersion: "4242", UID: "0b9d1c8e-8a5f-4c53-9f0e-2a1f6d3e7c11",
			Annotations:     map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "trainer-0", UID: "5c1d", Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update", APIVersion: "resource.k8s.io/v1", FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:resource.kubernetes.io/pod-claim-name":{}},"f:generateName":{},"f:ownerReferences":{".":{},"k:{\"uid\":\"5c1d\"}":{}}},"f:spec":{"f:devices":{"f:requests":{}}}}`)}}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: "ExactCount", Count: 4}}}}},
		Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}, {Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-1"},
				{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-2"}, {Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-3"}}}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer-0", UID: "5c1d"}},
		},
	}
	ev := event{Type: "MODIFIED"}
	var err error
	if ev.Object, err = json.Marshal(claim); err != nil {
		b.Fatal(err)
	}
	podMade := func(owners []metav1.OwnerReference) bool {
		return len(owners) > 0 && owners[0].Kind == "Pod" && owners[0].Controller != nil && *owners[0].Controller
	}
	keep := func(rc *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
		if podMade(rc.OwnerReferences) {
			return nil
		}
		return rc
	}
	for _, tc := range []struct {
		name string
		skip func(Head) bool
	}{
		{"decoded", nil},
		{"skipped", func(h Head) bool { return podMade(h.OwnerReferences) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := &Watched[resourcev1.ResourceClaim]{Keep: keep, Skip: tc.skip, items: map[string]*resourcev1.ResourceClaim{}}
			b.ReportAllocs()
			for b.Loop() {
				if err := w.apply(ev); err != nil {
					b.Fatal(err)
				}
			}
			if w.Len() != 0 {
				b.Fatalf("the pod's claim is held")
			}
		})
	}
}
