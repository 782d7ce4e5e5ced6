package doctor

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// fakeAPI serves recorded API objects as an API server does: GET of one
// object, LIST with labelSelector and fieldSelector, a pod's log; 403 for
// the requests the case forbids, 404 for what is not there.
type fakeAPI struct {
	objs []fakeObj
	// logs are by "namespace/pod/container" (+ "/previous").
	logs map[string][]byte
	// forbid are RBAC's refusals: "VERB RESOURCE[ NAMESPACE]" ("get
	// nodes", "list pods gpurun-system", "get pods/log ml").
	forbid []string
	// allow, when set, are the only requests RBAC lets through (a Role's
	// rules), in forbid's form.
	allow []string
	// user is who the refusals name.
	user string
	// asked are the requests made, "VERB RESOURCE[ NAMESPACE]".
	asked []string
	// token, when set, is the bearer token every request must carry.
	token string
}

// fakeObj is a recorded object and what the server looks it up by.
type fakeObj struct {
	raw                 json.RawMessage
	group, resource     string
	namespace, name     string
	labels, fieldValues map[string]string
}

// resources maps a kind to its API group and resource.
func resources() map[string][2]string {
	return map[string][2]string{
		"Pod": {"", "pods"}, "Event": {"", "events"}, "Node": {"", "nodes"}, "Namespace": {"", "namespaces"},
		"ConfigMap": {"", "configmaps"}, "DaemonSet": {"apps", "daemonsets"}, "Deployment": {"apps", "deployments"},
		"ReplicaSet": {"apps", "replicasets"}, "StatefulSet": {"apps", "statefulsets"}, "Job": {"batch", "jobs"},
		"CronJob":                      {"batch", "cronjobs"},
		"MutatingWebhookConfiguration": {"admissionregistration.k8s.io", "mutatingwebhookconfigurations"},
		"ResourceClaim":                {"resource.k8s.io", "resourceclaims"},
		"ResourceClaimTemplate":        {"resource.k8s.io", "resourceclaimtemplates"},
		"DeviceClass":                  {"resource.k8s.io", "deviceclasses"},
	}
}

// loadFakeAPI reads a case directory: objects.json (a List, as kubectl
// get -o json prints), logs/NAMESPACE_POD_CONTAINER[.previous].log.
func loadFakeAPI(t *testing.T, dir string) *fakeAPI {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "objects.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	f := &fakeAPI{logs: map[string][]byte{}}
	for _, raw := range list.Items {
		f.objs = append(f.objs, indexObj(t, raw))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		key := strings.TrimSuffix(filepath.Base(p), ".log")
		key = strings.ReplaceAll(strings.Replace(key, ".previous", "_previous", 1), "_", "/")
		f.logs[key] = b
	}
	return f
}

// indexObj reads what the server looks an object up by.
func indexObj(t *testing.T, raw json.RawMessage) fakeObj {
	t.Helper()
	var m struct {
		Kind     string
		Metadata struct {
			Name, Namespace string
			Labels          map[string]string
		}
		Spec struct {
			NodeName string `json:"nodeName"`
		}
		InvolvedObject struct {
			UID, Name, Namespace, Kind string
		} `json:"involvedObject"`
		Reason string
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	gr, ok := resources()[m.Kind]
	if !ok {
		t.Fatalf("fake API: no resource for kind %s", m.Kind)
	}
	return fakeObj{raw: raw, group: gr[0], resource: gr[1], namespace: m.Metadata.Namespace, name: m.Metadata.Name, labels: m.Metadata.Labels,
		fieldValues: map[string]string{
			"metadata.name": m.Metadata.Name, "metadata.namespace": m.Metadata.Namespace, "spec.nodeName": m.Spec.NodeName,
			"involvedObject.uid": m.InvolvedObject.UID, "involvedObject.name": m.InvolvedObject.Name,
			"involvedObject.namespace": m.InvolvedObject.Namespace, "involvedObject.kind": m.InvolvedObject.Kind, "reason": m.Reason,
		}}
}

// serve starts the server; the client is doctor's own, pointed at it.
func (f *fakeAPI) serve(t *testing.T) *KubeClient {
	t.Helper()
	return NewKubeClientFor(f.start(t), http.DefaultClient)
}

// start starts the server and returns its URL.
func (f *fakeAPI) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

// startTLS starts the server on HTTPS, as API servers are (client-go
// sends a kubeconfig's credentials only there), and returns its URL and
// its certificate in PEM.
func (f *fakeAPI) startTLS(t *testing.T) (url string, caPEM []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// fakeReq is a request's path, read as the API server reads it.
type fakeReq struct {
	group, resource, namespace, name, sub string
}

func parsePath(p string) (fakeReq, error) {
	seg := strings.Split(strings.Trim(p, "/"), "/")
	var r fakeReq
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		r.group, seg = seg[1], seg[3:]
	default:
		return r, fmt.Errorf("not an API path: %s", p)
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		r.namespace, seg = seg[1], seg[2:]
	}
	r.resource = seg[0]
	if len(seg) > 1 {
		r.name = seg[1]
	}
	if len(seg) > 2 {
		r.sub = seg[2]
	}
	return r, nil
}

// ServeHTTP answers a GET.
func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if f.token != "" && req.Header.Get("Authorization") != "Bearer "+f.token {
		f.status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	r, err := parsePath(req.URL.Path)
	if err != nil || req.Method != http.MethodGet {
		f.status(w, http.StatusBadRequest, fmt.Sprint(err))
		return
	}
	verb, res := "list", r.resource
	if r.name != "" {
		verb = "get"
	}
	if r.sub != "" {
		res += "/" + r.sub
	}
	if r.group != "" {
		res += "." + r.group
	}
	asked := strings.TrimSpace(verb + " " + res + " " + r.namespace)
	f.asked = append(f.asked, asked)
	if f.refused(asked, verb+" "+res) {
		scope := "at the cluster scope"
		if r.namespace != "" {
			scope = fmt.Sprintf("in the namespace %q", r.namespace)
		}
		f.status(w, http.StatusForbidden, fmt.Sprintf("%s is forbidden: User %q cannot %s resource %q in API group %q %s", r.resource, f.user, verb, r.resource, r.group, scope))
		return
	}
	switch {
	case r.sub == "log":
		f.log(w, req, r)
	case r.name != "":
		f.get(w, r)
	default:
		f.list(w, req, r)
	}
}

// refused says RBAC refuses a request, named with and without its
// namespace.
func (f *fakeAPI) refused(asked, anywhere string) bool {
	if f.allow != nil && !slices.Contains(f.allow, asked) && !slices.Contains(f.allow, anywhere) {
		return true
	}
	return slices.Contains(f.forbid, asked) || slices.Contains(f.forbid, anywhere)
}

func (f *fakeAPI) status(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "code": code})
}

func (f *fakeAPI) get(w http.ResponseWriter, r fakeReq) {
	for _, o := range f.objs {
		if o.group == r.group && o.resource == r.resource && o.namespace == r.namespace && o.name == r.name {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(o.raw)
			return
		}
	}
	f.status(w, http.StatusNotFound, fmt.Sprintf("%s %q not found", r.resource, r.name))
}

func (f *fakeAPI) list(w http.ResponseWriter, req *http.Request, r fakeReq) {
	ls, err := labels.Parse(req.URL.Query().Get("labelSelector"))
	if err != nil {
		f.status(w, http.StatusBadRequest, err.Error())
		return
	}
	fs, err := fields.ParseSelector(req.URL.Query().Get("fieldSelector"))
	if err != nil {
		f.status(w, http.StatusBadRequest, err.Error())
		return
	}
	items := []json.RawMessage{}
	for _, o := range f.objs {
		if o.group == r.group && o.resource == r.resource && (r.namespace == "" || o.namespace == r.namespace) &&
			ls.Matches(labels.Set(o.labels)) && fs.Matches(fields.Set(o.fieldValues)) {
			items = append(items, o.raw)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "List", "apiVersion": "v1", "items": items})
}

func (f *fakeAPI) log(w http.ResponseWriter, req *http.Request, r fakeReq) {
	q := req.URL.Query()
	key := r.namespace + "/" + r.name + "/" + q.Get("container")
	if q.Get("previous") == "true" {
		key += "/previous"
	}
	b, ok := f.logs[key]
	if !ok {
		f.status(w, http.StatusBadRequest, fmt.Sprintf("previous terminated container %q in pod %q not found", q.Get("container"), r.name))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(b)
}

// edit changes every recorded object of a kind for which match says so
// (nil: all of them); the change is made on the object as a map.
func (f *fakeAPI) edit(t *testing.T, kind string, match func(m map[string]any) bool, change func(m map[string]any)) {
	t.Helper()
	n := 0
	for i, o := range f.objs {
		var m map[string]any
		if err := json.Unmarshal(o.raw, &m); err != nil {
			t.Fatal(err)
		}
		if m["kind"] != kind || (match != nil && !match(m)) {
			continue
		}
		change(m)
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		f.objs[i] = indexObj(t, raw)
		n++
	}
	if n == 0 {
		t.Fatalf("fake API: no %s to edit", kind)
	}
}

// drop removes every recorded object of a kind for which match says so.
func (f *fakeAPI) drop(t *testing.T, kind string, match func(m map[string]any) bool) {
	t.Helper()
	f.objs = slices.DeleteFunc(f.objs, func(o fakeObj) bool {
		var m map[string]any
		if err := json.Unmarshal(o.raw, &m); err != nil {
			t.Fatal(err)
		}
		return m["kind"] == kind && (match == nil || match(m))
	})
}

// add records one more object, given as JSON.
func (f *fakeAPI) add(t *testing.T, obj string) {
	t.Helper()
	f.objs = append(f.objs, indexObj(t, json.RawMessage(obj)))
}

// named matches an object by its name.
func named(name string) func(m map[string]any) bool {
	return func(m map[string]any) bool { return field(m, "metadata", "name") == name }
}

// labelled matches an object by one of its labels.
func labelled(key, value string) func(m map[string]any) bool {
	return func(m map[string]any) bool { return field(m, "metadata", "labels", key) == value }
}

// field reads a nested field of a map (nil when absent).
func field(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}
