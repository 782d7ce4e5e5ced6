package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// BenchmarkSampleAndScrape is the sampler's cost beyond shmstats.Collect
// (BenchmarkCollect in observe/shmstats measures that): taking a sample of
// 200 containers and serving one scrape of it.
func BenchmarkSampleAndScrape(b *testing.B) {
	var cs []shmstats.Container
	for i := range 200 {
		cs = append(cs, podCtr(fmt.Sprintf("%064d", i), "ml", fmt.Sprintf("job-%d", i/2), "c", 1<<30, int64(i)<<20, int64(i)<<21))
	}
	reg := metrics.Registry()
	metrics.NewCounters(reg)
	s := metrics.NewSampler(reg, metrics.SamplerOptions{Collect: (&fake{samples: [][]shmstats.Container{cs}}).collect})
	h := metrics.Handler(reg, nil)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Sample(context.Background()); err != nil {
			b.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}
