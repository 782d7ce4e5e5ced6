package resize

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/policy"
)

// podAPI is an API server with one pod. A PATCH of its resize
// subresource is answered as the cluster would: refused (refuse: the
// status and message), or applied (a JSON patch, the generation one up)
// after which the kubelet's status follows after: the conditions each
// read back shows in turn, then the observedGeneration.
type podAPI struct {
	mu      sync.Mutex
	pod     corev1.Pod
	refuse  int
	message string
	after   []corev1.PodCondition // one a read, then none
	never   bool                  // the kubelet never observes the new generation
	patches []string
	ctype   string
}

func (a *podAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	podPath := "/api/v1/namespaces/ml/pods/trainer"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == podPath:
		if len(a.after) > 0 && a.pod.Generation > 1 {
			a.pod.Status.Conditions = []corev1.PodCondition{a.after[0]}
			a.after = a.after[1:]
		} else if a.pod.Generation > 1 && !a.never {
			a.pod.Status.Conditions = nil
			a.pod.Status.ObservedGeneration = a.pod.Generation
		}
		_ = json.NewEncoder(w).Encode(a.pod)
	case r.Method == http.MethodPatch && r.URL.Path == podPath+"/resize":
		body, _ := io.ReadAll(r.Body)
		a.patches = append(a.patches, string(body))
		a.ctype = r.Header.Get("Content-Type")
		if a.refuse != 0 {
			w.WriteHeader(a.refuse)
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "code": a.refuse, "message": a.message})
			return
		}
		p, err := jsonpatch.DecodePatch(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		orig, _ := json.Marshal(a.pod)
		out, err := p.Apply(orig)
		if err != nil {
			http.Error(w, `{"kind":"Status","code":422,"message":"`+err.Error()+`"}`, http.StatusUnprocessableEntity)
			return
		}
		var pod corev1.Pod
		_ = json.Unmarshal(out, &pod)
		pod.Generation++
		a.pod = pod
		_ = json.NewEncoder(w).Encode(a.pod)
	default:
		http.Error(w, `{"kind":"Status","code":404,"message":"the server could not find the requested resource"}`, http.StatusNotFound)
	}
}

// webhookPod is a pod as gpurun webhook sized it: its 8Gi emptyDir
// gpurun-shm at /dev/shm, after a volume of its own.
func webhookPod() corev1.Pod {
	q := resource.MustParse("8Gi")
	mount := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "gpurun-shm", MountPath: "/dev/shm"}}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer", Generation: 1},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "gpurun-shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &q}}}},
			Containers: []corev1.Container{{Name: "trainer", VolumeMounts: mount,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Gi")}}}},
		}}
}

// TestResizePod: gpurun resize --pod against a fake API server: the
// request (a JSON patch of the resize subresource, guarded by the
// volume's name), the kubelet's answers (done, infeasible, failed, never
// acted on), and the API server's refusals (the feature gate off: 422;
// no resize subresource: 404; not allowed: 403), each said in words that
// name KEP-6030's gate, cgroup v2, and what to do instead.
func TestResizePod(t *testing.T) {
	gateOff := `Pod "trainer" is invalid: spec: Forbidden: only cpu and memory resources are mutable`
	tests := []struct {
		name   string
		api    func(a *podAPI)
		size   string
		dry    bool
		code   int      // exit status
		out    []string // parts of the output
		err    string   // a part of the error
		sizeIs string   // the pod's sizeLimit after, "" for unchanged
	}{
		{name: "the kubelet resizes it", size: "16Gi", api: func(a *podAPI) {
			a.after = []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue}}
		}, out: []string{"patched pod ml/trainer's volume gpurun-shm (gpurun webhook's emptyDir at /dev/shm): sizeLimit 8Gi -> 16Gi",
			"resized /dev/shm of pod ml/trainer: 8Gi -> 16Gi (the kubelet remounted the tmpfs in place"}, sizeIs: "16Gi"},
		{name: "Docker units", size: "12g", out: []string{"sizeLimit 8Gi -> 12Gi"}, sizeIs: "12Gi"},
		{name: "above the memory limit", size: "32Gi", out: []string{"note: 32GiB is not below the pod's 32GiB memory limit"}, sizeIs: "32Gi"},
		{name: "the same size", size: "8Gi", out: []string{"left pod ml/trainer's volume gpurun-shm (gpurun webhook's emptyDir at /dev/shm): sizeLimit is 8Gi already"}},
		{name: "dry run", size: "16Gi", dry: true, out: []string{"would patch pod ml/trainer's volume gpurun-shm (gpurun webhook's emptyDir at /dev/shm): sizeLimit 8Gi -> 16Gi, through the pod's resize subresource (KEP-6030)"}},
		{name: "the feature gate off", size: "16Gi", api: func(a *podAPI) { a.refuse, a.message = http.StatusUnprocessableEntity, gateOff }, code: 1,
			err: `the API server refused to change the sizeLimit of pod ml/trainer's volume gpurun-shm in place (422: ` + gateOff + `): a Memory emptyDir is resized in place only on Kubernetes 1.37 or later with the feature gate InPlacePodVerticalScalingMemoryBackedVolumes on the API server and the kubelet, on a cgroup v2 node (KEP-6030); instead, recreate the pod with the annotation gpurun.io/shm-size: "16Gi"`},
		{name: "no resize subresource", size: "16Gi", api: func(a *podAPI) {
			a.refuse, a.message = http.StatusNotFound, "the server could not find the requested resource"
		}, code: 1,
			err: "the API server has no resize subresource for it (404: the server could not find the requested resource): in-place resize needs Kubernetes 1.33 or later"},
		{name: "not allowed", size: "16Gi", api: func(a *podAPI) { a.refuse, a.message = http.StatusForbidden, `pods "trainer" is forbidden` }, code: 1,
			err: "needs patch on pods/resize in namespace ml (kubectl auth can-i patch pods --subresource=resize -n ml)"},
		{name: "infeasible", size: "16Gi", api: func(a *podAPI) {
			a.after = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible, Message: "memory-backed volume resize is not supported with cgroup v1"}}
			a.never = true
		}, code: 1, err: "the kubelet will not resize pod ml/trainer's volume gpurun-shm: Infeasible (memory-backed volume resize is not supported with cgroup v1)", sizeIs: "16Gi"},
		{name: "the remount fails", size: "1Gi", api: func(a *podAPI) {
			a.after = []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue, Reason: corev1.PodReasonError, Message: "mount point not mounted or bad option"}}
			a.never = true
		}, code: 1, err: "the kubelet failed to resize pod ml/trainer's volume gpurun-shm: mount point not mounted or bad option (a size below what /dev/shm holds cannot be remounted", sizeIs: "1Gi"},
		{name: "the kubelet never acts", size: "16Gi", api: func(a *podAPI) { a.never = true }, code: 1,
			err: "the API server took the new sizeLimit of pod ml/trainer's volume gpurun-shm, but its kubelet has not confirmed the resize in 50ms (no resize condition, and the pod's status has not observed the new spec): the kubelet resizes a Memory emptyDir in place only with the feature gate InPlacePodVerticalScalingMemoryBackedVolumes on, on a cgroup v2 node", sizeIs: "16Gi"},
		{name: "hostIPC", size: "16Gi", api: func(a *podAPI) { a.pod.Spec.HostIPC = true }, code: 1, err: "pod ml/trainer is hostIPC: its /dev/shm is the host's, which gpurun never resizes"},
		{name: "the sandbox's /dev/shm", size: "16Gi", api: func(a *podAPI) { a.pod.Spec.Containers[0].VolumeMounts = nil }, code: 1,
			err: "pod ml/trainer mounts no volume at /dev/shm: its /dev/shm is the tmpfs its runtime made for the pod sandbox, which no pod field sizes; on its node, sudo gpurun resize --cri CONTAINER-ID SIZE grows it now"},
		{name: "no sizeLimit", size: "16Gi", api: func(a *podAPI) { a.pod.Spec.Volumes[1].EmptyDir.SizeLimit = nil }, code: 1, err: "volume gpurun-shm (emptyDir, medium Memory) has no sizeLimit"},
		{name: "a disk emptyDir", size: "16Gi", api: func(a *podAPI) { a.pod.Spec.Volumes[1].EmptyDir.Medium = "" }, code: 1, err: "which is not an emptyDir of medium Memory"},
		{name: "a pod's own dshm", size: "16Gi", api: func(a *podAPI) {
			a.pod.Spec.Volumes[1].Name, a.pod.Spec.Containers[0].VolumeMounts[1].Name = "dshm", "dshm"
		}, out: []string{"patched pod ml/trainer's volume dshm (emptyDir, medium Memory): sizeLimit 8Gi -> 16Gi"}, sizeIs: "16Gi"},
		{name: "above the policy's max", size: "200Gi", code: 2, err: "above the policy's max of 128GiB; use --force"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &podAPI{pod: webhookPod()}
			if tt.api != nil {
				tt.api(a)
			}
			srv := httptest.NewServer(a)
			defer srv.Close()
			var out bytes.Buffer
			err := Run(context.Background(), RunOptions{Container: "ml/trainer", Size: tt.size, Pod: true, DryRun: tt.dry, Out: &out,
				Wait: 50 * time.Millisecond, Poll: 5 * time.Millisecond, KubeClient: &kube.Kube{Base: srv.URL, Client: srv.Client()},
				LoadPolicy: func() (*policy.Policy, error) { p := policy.Default(); p.Max = 128 * policy.GiB; return p, nil }})
			if got := exitcode.Of(err); got != tt.code || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Run: %v (exit %d); want exit %d with %q\n%s", err, got, tt.code, tt.err, out.String())
			}
			for _, w := range tt.out {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			got := a.pod.Spec.Volumes[1].EmptyDir.SizeLimit
			if tt.sizeIs == "" && (len(a.patches) > 0 && a.refuse == 0 || got != nil && got.String() != "8Gi") {
				t.Errorf("patched %q: want no change", a.patches)
			}
			if tt.sizeIs != "" && (got == nil || got.String() != tt.sizeIs || a.ctype != "application/json-patch+json" ||
				!strings.Contains(a.patches[0], `{"op":"test","path":"/spec/volumes/1/name","value":"`)) {
				t.Errorf("sizeLimit %v after %q (%s): want %s, by a JSON patch that tests the volume's name", got, a.patches, a.ctype, tt.sizeIs)
			}
		})
	}
}

// TestResizePodNotFound: a pod that is not there is bad input (exit 2).
func TestResizePodNotFound(t *testing.T) {
	srv := httptest.NewServer(&podAPI{pod: webhookPod()})
	defer srv.Close()
	err := Run(context.Background(), RunOptions{Container: "gone", Size: "16Gi", Pod: true, Out: io.Discard, Kube: kube.KubeconfigOptions{Namespace: "ml"},
		KubeClient: &kube.Kube{Base: srv.URL, Client: srv.Client()}, LoadPolicy: func() (*policy.Policy, error) { return policy.Default(), nil }})
	if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), "pod ml/gone not found") {
		t.Errorf("Run: %v (exit %d)", err, exitcode.Of(err))
	}
}
