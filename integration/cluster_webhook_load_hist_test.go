//go:build integration

package integration

import (
	"math"
	"testing"
)

// TestHistogramQuantile: the load test's histogram_quantile, as
// Prometheus computes it: linear within the bucket the rank falls in.
func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	// 100 observations: 50 up to 1 ms, 40 more up to 5 ms, 10 more above.
	h := histogram{0.001: 50, 0.005: 90, 0.01: 100, inf: 100}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.5, 0.001},
		{0.25, 0.0005},
		{0.7, 0.003},
		{0.95, 0.0075},
		{1, 0.01},
	} {
		if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := h.within(0.005); got != 0.9 {
		t.Errorf("within 5 ms: %v, want 0.9", got)
	}
	if got := (histogram{0.001: 10, inf: 20}).quantile(0.99); got != 0.001 {
		t.Errorf("a quantile in the +Inf bucket: %v, want the highest finite bound", got)
	}
	if d := h.sub(histogram{0.001: 50, 0.005: 50, 0.01: 50, inf: 50}); d.count() != 50 || math.Abs(d.quantile(0.5)-0.0035) > 1e-12 {
		t.Errorf("sub: %v (p50 %v)", d, d.quantile(0.5))
	}
}
