package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

const (
	gi = int64(1) << 30
	mi = int64(1) << 20
)

func mustPolicy(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loadPod reads a pod shape from podspec's testdata.
func loadPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	path := filepath.Join("..", "podspec", "testdata", "pods", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := podspec.Load(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// review builds the AdmissionReview the API server sends for a pod's CREATE.
func review(t *testing.T, pod *corev1.Pod, op admissionv1.Operation) *admissionv1.AdmissionReview {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("uid-" + pod.Name), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "ml", Name: pod.Name,
			Operation: op, Object: runtimeRaw(raw),
		},
	}
}

// apply applies a response's JSON patch to pod, as the API server does.
func apply(t *testing.T, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	if len(resp.Patch) == 0 {
		return pod
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decode patch %s: %v", resp.Patch, err)
	}
	orig, _ := json.Marshal(pod)
	out, err := p.Apply(orig)
	if err != nil {
		t.Fatalf("apply patch %s: %v", resp.Patch, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// TestReviewPodShapes: real pod shapes through a whole AdmissionReview;
// the patched pod has one Memory emptyDir of the policy's size, mounted at
// /dev/shm in every container, and the decision annotation; re-admission
// changes nothing.
func TestReviewPodShapes(t *testing.T) {
	tests := []struct {
		file string
		gpu  bool
		want podspec.PodAction
		// memory is the pod's memory limit as read from the file (0: none),
		// gpus each GPU container's count: the expected size is the
		// largest of the policy's targets for them.
		memory int64
		gpus   []int
		// asked is the size an annotation asks for (0: none).
		asked int64
		why   string // the reason says this
	}{
		{file: "argo-workflow-step.yaml", gpu: true, want: podspec.ActionEmptyDir, gpus: []int{1}, why: "container wait has no memory limit"},
		{file: "kubeflow-pytorchjob-worker.yaml", gpu: true, want: podspec.ActionEmptyDir, memory: 64 * gi, gpus: []int{4}, why: "container pytorch"},
		{file: "kuberay-worker.yaml", gpu: true, want: podspec.ActionNone, why: "volume shared-mem (emptyDir, medium Memory, sizeLimit 32Gi)"},
		{file: "vllm-deployment.yaml", gpu: true, want: podspec.ActionEmptyDir, memory: 20e9, gpus: []int{1}, why: "resources.limits nvidia.com/gpu: 1"},
		{file: "vllm-deployment-dshm.yaml", gpu: true, want: podspec.ActionNone, why: "volume shm"},
		{file: "hostipc.yaml", gpu: true, want: podspec.ActionNone, why: "hostIPC"},
		{file: "sidecar-amd.yaml", gpu: true, want: podspec.ActionEmptyDir, memory: 24*gi + 256*mi, gpus: []int{2}, why: "amd.com/gpu: 2"},
		{file: "nginx.yaml", gpu: false, want: podspec.ActionNone},
		{file: "env-visible-devices.yaml", gpu: true, want: podspec.ActionEmptyDir, memory: 8 * gi, gpus: []int{2}, why: "env NVIDIA_VISIBLE_DEVICES=0,1"},
		{file: "runtimeclass-nvidia.yaml", gpu: true, want: podspec.ActionEmptyDir, gpus: []int{0}, why: "runtimeClassName: nvidia"},
		{file: "opt-out.yaml", gpu: true, want: podspec.ActionNone, why: "gpurun.io/opt-out=true"},
		{file: "size-annotation.yaml", gpu: true, want: podspec.ActionEmptyDir, asked: 4 * gi, why: "annotation gpurun.io/shm-size=4Gi"},
		{file: "intel-habana-pod-level.yaml", gpu: true, want: podspec.ActionEmptyDir, memory: 96 * gi, gpus: []int{8, 1}, why: "habana.ai/gaudi: 8"},
	}
	policies := map[string]string{
		"default":             "",
		"per_gpu and max":     "per_gpu = \"4g\"\nmax = \"24g\"\n",
		"absolute, large min": "size = \"6g\"\nmin = \"2g\"\nannotation_max = \"3g\"\n",
	}
	for polName, text := range policies {
		pol := mustPolicy(t, text)
		for _, tt := range tests {
			t.Run(polName+"/"+tt.file, func(t *testing.T) {
				pod := loadPod(t, tt.file)
				out, m := Review(review(t, pod, admissionv1.Create), pol)
				resp := out.Response
				if resp == nil || !resp.Allowed || resp.UID != types.UID("uid-"+pod.Name) {
					t.Fatalf("response %+v: want allowed, with the request's uid", resp)
				}
				d := m.Decision
				if d.GPU != tt.gpu || d.Action != tt.want {
					t.Fatalf("decision %+v; want gpu %v, action %s", d, tt.gpu, tt.want)
				}
				if !strings.Contains(d.Reason, tt.why) {
					t.Errorf("reason %q; want it to say %q", d.Reason, tt.why)
				}
				got := apply(t, pod, resp)
				if !tt.gpu {
					if len(resp.Patch) != 0 {
						t.Errorf("a pod with no GPU was patched: %s", resp.Patch)
					}
					return
				}
				if ann := got.Annotations[DecisionAnnotation]; !strings.HasPrefix(ann, string(tt.want)) || !strings.Contains(ann, d.Reason) {
					t.Errorf("annotation %q; want the decision", ann)
				}
				var want int64
				for _, n := range tt.gpus {
					size, _ := pol.Target(policy.Request{MemoryLimit: tt.memory, GPUs: n, Portable: tt.memory == 0})
					want = max(want, size)
				}
				if tt.asked > 0 {
					want, _ = pol.CapRequest(tt.asked)
				}
				checkShm(t, got, tt.want == podspec.ActionEmptyDir, want)
				if tt.want == podspec.ActionNone && !slices.Equal(volumeNames(got), volumeNames(pod)) {
					t.Errorf("volumes %v, want %v", volumeNames(got), volumeNames(pod))
				}
				// Re-admission (reinvocation, or a pod recreated from its
				// own spec) changes nothing.
				again, _ := Review(review(t, got, admissionv1.Create), pol)
				if again.Response.Patch != nil && tt.want == podspec.ActionEmptyDir {
					t.Errorf("re-admission patched again: %s", again.Response.Patch)
				}
			})
		}
	}
}

func volumeNames(p *corev1.Pod) []string {
	var n []string
	for _, v := range p.Spec.Volumes {
		n = append(n, v.Name)
	}
	return n
}

// checkShm checks the webhook's volume (want: present, of size) and its
// mount in every container.
func checkShm(t *testing.T, p *corev1.Pod, present bool, size int64) {
	t.Helper()
	var vol *corev1.Volume
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == VolumeName {
			vol = &p.Spec.Volumes[i]
		}
	}
	if !present {
		if vol != nil {
			t.Errorf("the pod got %s: %+v", VolumeName, vol)
		}
		return
	}
	if vol == nil || vol.EmptyDir == nil || vol.EmptyDir.Medium != corev1.StorageMediumMemory || vol.EmptyDir.SizeLimit == nil {
		t.Fatalf("volume %+v; want a Memory emptyDir with a sizeLimit", vol)
	}
	if got := vol.EmptyDir.SizeLimit.Value(); got != size {
		t.Errorf("sizeLimit %s (%d), want %d (%s)", vol.EmptyDir.SizeLimit, got, size, policy.FormatSize(size))
	}
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		n := 0
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/dev/shm" {
				n++
				if m.Name != VolumeName {
					t.Errorf("container %s mounts %s at /dev/shm", c.Name, m.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("container %s has %d mounts at /dev/shm, want 1", c.Name, n)
		}
	}
}

// TestReviewLeavesOthersAlone: not a pod CREATE, or a pod that cannot be
// read: allowed, unchanged (a warning for the latter).
func TestReviewLeavesOthersAlone(t *testing.T) {
	pol := policy.Default()
	pod := loadPod(t, "kubeflow-pytorchjob-worker.yaml")
	update := review(t, pod, admissionv1.Update)
	bad := review(t, pod, admissionv1.Create)
	bad.Request.Object = runtimeRaw([]byte(`{"spec": {"containers": "not a list"}}`))
	other := review(t, pod, admissionv1.Create)
	other.Request.Kind.Kind = "Deployment"
	status := review(t, pod, admissionv1.Create)
	status.Request.SubResource = "status"
	for name, r := range map[string]*admissionv1.AdmissionReview{"update": update, "unreadable": bad, "a deployment": other, "a subresource": status} {
		t.Run(name, func(t *testing.T) {
			out, _ := Review(r, pol)
			if !out.Response.Allowed || out.Response.Patch != nil {
				t.Errorf("response %+v: want allowed, unchanged", out.Response)
			}
			if name == "unreadable" && (len(out.Response.Warnings) != 1 || !strings.Contains(out.Response.Warnings[0], "cannot be read")) {
				t.Errorf("warnings %q: want one saying the pod cannot be read", out.Response.Warnings)
			}
		})
	}
}

// TestHandler: the HTTP side: only POSTed JSON AdmissionReviews, bounded.
func TestHandler(t *testing.T) {
	h := &Handler{Policy: policy.Default}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body, _ := json.Marshal(review(t, loadPod(t, "vllm-deployment.yaml"), admissionv1.Create))
	tests := []struct {
		name, method, path, ctype string
		body                      []byte
		status                    int
	}{
		{"a review", "POST", MutatePath, "application/json", body, 200},
		{"a review, charset", "POST", MutatePath, "application/json; charset=utf-8", body, 200},
		{"GET", "GET", MutatePath, "", nil, 405},
		{"not JSON", "POST", MutatePath, "text/plain", body, 415},
		{"bad JSON", "POST", MutatePath, "application/json", []byte("{"), 400},
		{"no request", "POST", MutatePath, "application/json", []byte(`{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}`), 400},
		{"too large", "POST", MutatePath, "application/json", bytes.Repeat([]byte(" "), DefaultMaxReviewBytes+1), 413},
		{"health", "GET", "/healthz", "", nil, 200},
		{"ready", "GET", "/readyz", "", nil, 200},
		{"elsewhere", "GET", "/", "", nil, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, bytes.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == 200 && tt.path == MutatePath {
				var out admissionv1.AdmissionReview
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) == 0 {
					t.Errorf("review answer %+v, %v; want allowed with a patch", out.Response, err)
				}
				if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
					t.Errorf("answer is %s %s", out.APIVersion, out.Kind)
				}
			}
		})
	}
}

// TestDecisionAction: the action read back from the annotation's text, as
// DecisionText writes it and as a hand or an older webhook may have.
func TestDecisionAction(t *testing.T) {
	for _, tc := range []struct {
		text string
		want podspec.PodAction
	}{
		{DecisionText(podspec.Decision{Action: podspec.ActionEmptyDir, Size: 1 << 30, Reason: "container trainer: GPU container"}), podspec.ActionEmptyDir},
		{DecisionText(podspec.Decision{Action: podspec.ActionHostIPC, Reason: "mode ipc-host"}), podspec.ActionHostIPC},
		{DecisionText(podspec.Decision{Action: podspec.ActionNone, Reason: "not a GPU pod"}), podspec.ActionNone},
		{"emptydir: no size", podspec.ActionEmptyDir},
		{"emptydirs 1Gi: a typo", ""},
		{"", ""},
		{"sized by hand", ""},
	} {
		if got := DecisionAction(tc.text); got != tc.want {
			t.Errorf("DecisionAction(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}
