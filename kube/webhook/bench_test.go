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

// BenchmarkServeHTTP2: one review as the API server sends it, end to end
// through the handler as Serve sets it up (TLS, HTTP/2, the JSON log at
// Info, the metrics), from as many concurrent clients as GOMAXPROCS, over
// one HTTP/2 connection as the API server keeps one. The client shares
// the process and its CPUs: ns/op bounds what a review costs both ends.
func BenchmarkServeHTTP2(b *testing.B) {
	t := &testing.T{}
	body, err := json.Marshal(review(t, loadPod(t, "kubeflow-pytorchjob-worker.yaml"), admissionv1.Create))
	if err != nil {
		b.Fatal(err)
	}
	pol := policy.Default()
	h := &Handler{Policy: func() *policy.Policy { return pol }, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: NewMetrics(nil)}
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
}
