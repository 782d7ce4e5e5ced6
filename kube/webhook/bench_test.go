package webhook

import (
	"fmt"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpurun/gpurun/policy"
)

// BenchmarkReview: one admission decision in-process (decode the pod,
// translate, decide, build the patch) for a PyTorchJob worker; reports the
// 99th percentile, which must stay under a millisecond.
func BenchmarkReview(b *testing.B) {
	t := &testing.T{}
	r := review(t, loadPod(t, "kubeflow-pytorchjob-worker.yaml"), admissionv1.Create)
	pol := policy.Default()
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, _ := Review(r, pol)
		times = append(times, time.Since(start))
		if len(out.Response.Patch) == 0 {
			b.Fatal("no patch")
		}
	}
	b.StopTimer()
	slices.Sort(times)
	p99 := times[len(times)*99/100]
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	if testing.Verbose() {
		fmt.Printf("admission decision: p99 %s over %d\n", p99, len(times))
	}
}
