package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

// draAPI is an API server's resource.k8s.io/v1: it lists the objects
// given (each collection in one page) and holds every watch open until
// the request ends; a collection in missing answers 404 (DRA not
// served), one in forbidden 403.
type draAPI struct {
	objects   map[string][]any // by resource
	missing   map[string]bool
	forbidden map[string]bool
	lists     chan string
}

func (a *draAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res := strings.TrimPrefix(r.URL.Path, "/apis/resource.k8s.io/v1/")
	switch {
	case a.missing[res]:
		http.Error(w, `{"kind":"Status","code":404,"message":"the server could not find the requested resource"}`, http.StatusNotFound)
		return
	case a.forbidden[res]:
		http.Error(w, `{"kind":"Status","code":403,"message":"`+res+`.resource.k8s.io is forbidden: User \"system:serviceaccount:gpurun-system:gpurun-webhook\" cannot list resource \"`+res+`\""}`, http.StatusForbidden)
		return
	}
	if r.URL.Query().Get("watch") == "1" {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	if a.lists != nil {
		a.lists <- res
	}
	items := a.objects[res]
	if items == nil {
		items = []any{}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "100"}, "items": items})
}

// startCache runs a ClaimCache against api until the test ends, and
// waits for its first lists.
func startCache(t testing.TB, api *draAPI) *ClaimCache {
	t.Helper()
	srv := httptest.NewServer(api)
	c := NewClaimCache(&kube.Kube{Base: srv.URL, Client: srv.Client()}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); srv.CloseClientConnections(); <-done; srv.Close() })
	for end := time.Now().Add(5 * time.Second); c.Ready() != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the cache is not ready in 5 s: %v", c.Ready())
		}
	}
	return c
}

func str(s string) *string { return &s }

// draObjects are a cluster's: NVIDIA's GPU class, a class of another
// name that selects NVIDIA's driver, a NIC's; a template for one GPU, one
// for a NIC, a shared claim already allocated, and a claim the API server
// made for a running pod.
func draObjects() map[string][]any {
	yes := true
	exactly := func(name, class string, n int64) resourcev1.DeviceRequest {
		return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n,
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["gpu.nvidia.com"].productName == "H100"`}}}}}
	}
	meta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "7", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}, Annotations: map[string]string{"big": strings.Repeat("x", 100)}}
	}
	template := func(name string, r ...resourcev1.DeviceRequest) resourcev1.ResourceClaimTemplate {
		return resourcev1.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"}, ObjectMeta: meta("ml", name),
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: r}}}}
	}
	made := resourcev1.ResourceClaim{ObjectMeta: meta("ml", "trainer-gpu-x7k2p"), Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{exactly("gpu", "gpu.nvidia.com", 1)}}}}
	made.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "trainer", UID: "u", Controller: &yes}}
	shared := resourcev1.ResourceClaim{ObjectMeta: meta("ml", "shared"), Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{exactly("gpu", "h100", 2)}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}}}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "a", UID: "a"}}}}
	class := func(name, cel string) resourcev1.DeviceClass {
		return resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "3"}, Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}, ExtendedResourceName: str("example.com/x")}}
	}
	return map[string][]any{
		DeviceClasses: {class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"),
			class("h100", `device.driver == "gpu.nvidia.com"`), class("nic", `device.driver == "dra.net"`)},
		ResourceClaimTemplates: {template("single-gpu", exactly("gpu", "gpu.nvidia.com", 1)), template("nic", exactly("nic", "nic", 1))},
		ResourceClaims:         {shared, made},
	}
}

// TestClaimCache: what the cache holds of each object (what the decision
// reads), the claims made for running pods left out, and why a lookup
// fails: not found, or a cache that is not current (DRA not served, or
// not readable), which never keeps the webhook from being ready.
func TestClaimCache(t *testing.T) {
	c := startCache(t, &draAPI{objects: draObjects()})
	tmpl, err := c.ResourceClaimTemplate("ml", "single-gpu")
	if err != nil {
		t.Fatal(err)
	}
	e := tmpl.Spec.Spec.Devices.Requests[0].Exactly
	if e.DeviceClassName != "gpu.nvidia.com" || e.Count != 1 || len(e.Selectors) != 0 || tmpl.ManagedFields != nil || tmpl.Annotations != nil || tmpl.Name != "single-gpu" {
		t.Errorf("template kept as %+v", tmpl)
	}
	shared, err := c.ResourceClaim("ml", "shared")
	if err != nil || shared.Status.Allocation == nil || shared.Status.Allocation.Devices.Results[0].Driver != "gpu.nvidia.com" ||
		shared.Status.Allocation.Devices.Results[0].Device != "" || shared.Status.ReservedFor != nil {
		t.Errorf("shared claim kept as %+v, %v", shared, err)
	}
	if _, err := c.ResourceClaim("ml", "trainer-gpu-x7k2p"); err == nil {
		t.Error("a claim made for a pod is kept")
	}
	if dc, err := c.DeviceClass("h100"); err != nil || len(dc.Spec.Selectors) != 1 || dc.Spec.ExtendedResourceName != nil {
		t.Errorf("class kept as %+v, %v", dc, err)
	}
	if _, err := c.ResourceClaimTemplate("other", "single-gpu"); err == nil ||
		err.Error() != "ResourceClaimTemplate other/single-gpu not found (not created yet? kubectl apply of a directory creates in any order)" {
		t.Errorf("not found: %v", err)
	}

	notServed := startCache(t, &draAPI{missing: map[string]bool{ResourceClaims: true, ResourceClaimTemplates: true, DeviceClasses: true}})
	if _, err := notServed.ResourceClaimTemplate("ml", "single-gpu"); err == nil || !strings.Contains(err.Error(), "not in the webhook's cache, which is not current") ||
		!strings.Contains(err.Error(), "404") {
		t.Errorf("DRA not served: %v", err)
	}
	forbidden := startCache(t, &draAPI{objects: draObjects(), forbidden: map[string]bool{ResourceClaimTemplates: true}})
	if _, err := forbidden.ResourceClaimTemplate("ml", "single-gpu"); err == nil || !strings.Contains(err.Error(), `cannot list resource \"resourceclaimtemplates\"`) && !strings.Contains(err.Error(), `cannot list resource "resourceclaimtemplates"`) {
		t.Errorf("not readable: %v", err)
	}
	if _, err := forbidden.ResourceClaim("ml", "shared"); err != nil {
		t.Errorf("another resource, readable: %v", err)
	}
}

// claimPod is a pod whose trainer uses the claim gpu, of the template or
// claim named; with a memory limit.
func claimPod(template, claim string) *corev1.Pod {
	rc := corev1.PodResourceClaim{Name: "gpu"}
	if template != "" {
		rc.ResourceClaimTemplateName = str(template)
	}
	if claim != "" {
		rc.ResourceClaimName = str(claim)
	}
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{rc}, Containers: []corev1.Container{{Name: "trainer", Image: "pytorch",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}},
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi")}}}}}}
}

// TestReviewClaims: pods whose only GPU is a DRA claim, through a whole
// AdmissionReview with the cache: a GPU's claim sizes the pod and the
// decision names the claim; a NIC's does not; a claim not in the cache is
// judged by the policy, with a warning in kubectl's output, never a
// refused create.
func TestReviewClaims(t *testing.T) {
	c := startCache(t, &draAPI{objects: draObjects()})
	ignore := mustPolicy(t, `unresolved_claims = "ignore"`)
	tests := []struct {
		name     string
		pod      *corev1.Pod
		pol      *policy.Policy
		claims   podspec.Claims
		sized    bool
		reason   string // a part of the decision annotation
		warnings string // a part of the warnings, "" for none
	}{
		{"a template for one GPU", claimPod("single-gpu", ""), nil, c, true, "emptydir 8Gi: container trainer: GPU container (resources.claims gpu (resourceClaimTemplateName: single-gpu): request gpu: 1 of device class gpu.nvidia.com)", ""},
		{"a shared claim of a class that selects NVIDIA's driver", claimPod("", "shared"), nil, c, true, "request gpu: 2 of device class h100 (driver gpu.nvidia.com); allocated from driver gpu.nvidia.com", ""},
		{"a NIC", claimPod("nic", ""), nil, c, false, "", ""},
		{"a template not created yet", claimPod("later", ""), nil, c, true, "resources.claims gpu (resourceClaimTemplateName: later), not resolved: counted as a GPU",
			`gpurun: container trainer: resources.claims gpu (resourceClaimTemplateName: later) could not be read (ResourceClaimTemplate ml/later not found (not created yet? kubectl apply of a directory creates in any order)): counted as a GPU (policy unresolved_claims = "gpu")`},
		{"a template not created yet, left out", claimPod("later", ""), ignore, c, false, "", `not counted as a GPU (policy unresolved_claims = "ignore")`},
		{"no cache: every claim unresolved", claimPod("single-gpu", ""), nil, nil, true, "(resourceClaimTemplateName: single-gpu), not resolved: counted as a GPU", "could not be read (no claim objects given)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := tt.pol
			if pol == nil {
				pol = policy.Default()
			}
			out, m := ReviewWith(review(t, tt.pod, admissionv1.Create), pol, tt.claims)
			resp := out.Response
			if !resp.Allowed || (len(resp.Patch) > 0) != tt.sized {
				t.Fatalf("allowed %v, patched %v (%s); want sized %v", resp.Allowed, len(resp.Patch) > 0, m.Decision.Reason, tt.sized)
			}
			if tt.sized {
				got := apply(t, tt.pod, resp)
				if ann := got.Annotations[DecisionAnnotation]; !strings.Contains(ann, tt.reason) {
					t.Errorf("decision %q, want %q", ann, tt.reason)
				}
			}
			w := strings.Join(resp.Warnings, "\n")
			if tt.warnings == "" && w != "" || !strings.Contains(w, tt.warnings) {
				t.Errorf("warnings %q, want %q", resp.Warnings, tt.warnings)
			}
		})
	}
}

// TestReviewNeverUndoesAResize: KEP-6030 lets the kubelet resize a Memory
// emptyDir in place when its sizeLimit changes (a PATCH of the pod's
// resize subresource), and a user may change it so too: the webhook
// decides a pod at its creation only, so no UPDATE of a pod, of its resize
// subresource or of its status, is ever given a patch, whatever the
// sizeLimit says.
func TestReviewNeverUndoesAResize(t *testing.T) {
	pol := policy.Default()
	created := loadPod(t, "kubeflow-pytorchjob-worker.yaml")
	out, _ := Review(review(t, created, admissionv1.Create), pol)
	sized := apply(t, created, out.Response)
	var vol *corev1.Volume
	for i := range sized.Spec.Volumes {
		if sized.Spec.Volumes[i].Name == VolumeName {
			vol = &sized.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.EmptyDir.SizeLimit.String() != "32Gi" {
		t.Fatalf("the webhook's volume %+v, want 32Gi", vol)
	}
	for _, size := range []string{"48Gi", "4Gi"} {
		for _, sub := range []string{"", "resize", "status"} {
			t.Run(size+"/"+sub, func(t *testing.T) {
				resized := sized.DeepCopy()
				for i := range resized.Spec.Volumes {
					if resized.Spec.Volumes[i].Name == VolumeName {
						q := resource.MustParse(size)
						resized.Spec.Volumes[i].EmptyDir.SizeLimit = &q
					}
				}
				r := review(t, resized, admissionv1.Update)
				r.Request.SubResource = sub
				old, _ := json.Marshal(sized)
				r.Request.OldObject = runtimeRaw(old)
				out, m := Review(r, pol)
				if !out.Response.Allowed || out.Response.Patch != nil || m.Skipped == "" {
					t.Errorf("UPDATE %s to %s: %+v (%+v): want allowed, unchanged, skipped", sub, size, out.Response, m)
				}
			})
		}
	}
}

// TestReadinessWaitsForTheClaimsCache: with a claims cache, the webhook is
// ready once the cache has tried its lists, and not before.
func TestReadinessWaitsForTheClaimsCache(t *testing.T) {
	lists := make(chan string)
	api := &draAPI{objects: draObjects(), lists: lists}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c := NewClaimCache(&kube.Kube{Base: srv.URL, Client: srv.Client()}, nil, NewMetrics(nil))
	h := &Handler{Policy: policy.Default, Claims: c}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); srv.CloseClientConnections(); <-done }()
	<-lists
	<-lists
	if err := h.Ready(); err == nil || !strings.Contains(err.Error(), "claims cache") {
		t.Errorf("ready with a list in flight: %v", err)
	}
	<-lists
	for end := time.Now().Add(5 * time.Second); h.Ready() != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not ready after the lists: %v", h.Ready())
		}
	}
}

// TestServeResolveClaimsOutsideAPod: --resolve-claims needs the pod's
// service account; outside a pod it is a setup error (exit 2) that says
// so.
func TestServeResolveClaimsOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	_, certFile, keyFile, _ := servingPair(t, dir, time.Now())
	err := Serve(context.Background(), ServeOptions{Listen: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, ResolveClaims: true,
		LoadPolicy: func() (*policy.Policy, error) { return policy.Default(), nil }, Log: &bytes.Buffer{}})
	if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), "--resolve-claims reads the cluster's claims with the pod's service account") {
		t.Errorf("Serve: %v (exit %d)", err, exitcode.Of(err))
	}
}

// TestClaimsCacheMetrics: the cache's state in the webhook's metrics.
func TestClaimsCacheMetrics(t *testing.T) {
	m := NewMetrics(nil)
	srv := httptest.NewServer(&draAPI{objects: draObjects(), missing: map[string]bool{DeviceClasses: true}})
	defer srv.Close()
	c := NewClaimCache(&kube.Kube{Base: srv.URL, Client: srv.Client()}, nil, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); srv.CloseClientConnections(); <-done }()
	want := []string{
		`gpurun_webhook_claims_cache_objects{resource="resourceclaimtemplates"} 2`,
		`gpurun_webhook_claims_cache_objects{resource="resourceclaims"} 1`,
		`gpurun_webhook_claims_cache_synced{resource="deviceclasses"} 0`,
		`gpurun_webhook_claims_cache_synced{resource="resourceclaims"} 1`,
	}
	var text string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		text = rec.Body.String()
		all := true
		for _, w := range want {
			all = all && strings.Contains(text, w)
		}
		if all {
			return
		}
	}
	t.Errorf("metrics lack one of %q:\n%s", want, grep(text, "claims_cache"))
}

func grep(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
