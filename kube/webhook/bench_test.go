package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

// benchPod is a case of the benchmarks: a pod, and what resolves its
// claims.
type benchPod struct {
	name   string
	pod    *corev1.Pod
	claims podspec.Claims
}

// benchPods are a PyTorchJob worker as the Kubeflow operator creates it,
// its 4 GPUs from NVIDIA's device plugin (nvidia.com/gpu: 4); and the
// same worker with its 4 GPUs as a DRA claim of a ResourceClaimTemplate,
// resolved from a ClaimCache that listed it from an API server (as the
// webhook's does: a lookup in memory, no API call per review) among 1,000
// templates and 1,000 claims of other namespaces.
func benchPods(b *testing.B) []benchPod {
	t := &testing.T{}
	plugin := loadPod(t, "kubeflow-pytorchjob-worker.yaml")
	claim := plugin.DeepCopy()
	c := &claim.Spec.Containers[0]
	delete(c.Resources.Limits, "nvidia.com/gpu")
	delete(c.Resources.Requests, "nvidia.com/gpu")
	c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	claim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: str("four-gpus")}}
	objects := draObjects()
	template := func(ns, name string) resourcev1.ResourceClaimTemplate {
		return resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", Count: 4}}}}}}}
	}
	objects[ResourceClaimTemplates] = append(objects[ResourceClaimTemplates], template("kubeflow-user", "four-gpus"))
	for i := range 1000 {
		ns := fmt.Sprintf("team-%d", i)
		objects[ResourceClaimTemplates] = append(objects[ResourceClaimTemplates], template(ns, "four-gpus"))
		objects[ResourceClaims] = append(objects[ResourceClaims], resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}})
	}
	cache := startCache(b, &draAPI{objects: objects})
	if tmpl, err := cache.ResourceClaimTemplate("kubeflow-user", "four-gpus"); err != nil || tmpl == nil {
		b.Fatalf("the cache lacks the template: %v", err)
	}
	return []benchPod{{"device-plugin", plugin, cache}, {"dra-claim", claim, cache}}
}

// BenchmarkReview: one admission decision in-process (decode the pod,
// translate, resolve its claims, decide, build the patch) for a
// PyTorchJob worker whose GPUs come from the device plugin, and for the
// same worker with its GPUs as a DRA claim; reports the 99th percentile,
// which must stay under a millisecond, and about the same for both.
func BenchmarkReview(b *testing.B) {
	pol := policy.Default()
	for _, bp := range benchPods(b) {
		b.Run(bp.name, func(b *testing.B) {
			r := review(&testing.T{}, bp.pod, admissionv1.Create)
			times := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, m := ReviewWith(r, pol, bp.claims)
				times = append(times, time.Since(start))
				if len(out.Response.Patch) == 0 || m.Decision.Plans[1].GPUs != 4 {
					b.Fatalf("no patch, or not 4 GPUs: %s", m.Decision.Reason)
				}
			}
			b.StopTimer()
			slices.Sort(times)
			p99 := times[len(times)*99/100]
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			if testing.Verbose() {
				fmt.Printf("admission decision, %s: p99 %s over %d\n", bp.name, p99, len(times))
			}
		})
	}
}

// BenchmarkServeHTTP2: one review as the API server sends it, end to end
// through the handler as Serve sets it up (TLS, HTTP/2, the JSON log at
// Info, the metrics, the claims cache), from as many concurrent clients as
// GOMAXPROCS, over one HTTP/2 connection as the API server keeps one; for
// the device plugin's worker and the DRA claim's. The client shares the
// process and its CPUs: ns/op bounds what a review costs both ends.
func BenchmarkServeHTTP2(b *testing.B) {
	pol := policy.Default()
	for _, bp := range benchPods(b) {
		b.Run(bp.name, func(b *testing.B) {
			body, err := json.Marshal(review(&testing.T{}, bp.pod, admissionv1.Create))
			if err != nil {
				b.Fatal(err)
			}
			h := &Handler{Policy: func() *policy.Policy { return pol }, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: NewMetrics(nil), Claims: bp.claims}
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(srv.URL+MutatePath, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
						b.Errorf("%s %s", resp.Proto, resp.Status)
						return
					}
				}
			})
		})
	}
}
