package compose

import (
	"strings"
	"testing"

	"github.com/docker/go-units"

	"github.com/gpurun/gpurun/policy"
)

func TestTarget(t *testing.T) {
	const GiB, MiB = policy.GiB, policy.MiB
	tests := []struct {
		name    string
		config  string
		limit   int64
		gpus    int
		want    int64
		wantWhy string
	}{
		{"no limit: compose default", "", 0, 0, 8 * GiB, "compose default 8GiB"},
		{"configured compose default", `compose_default = "4gb"`, 0, 0, 4 * GiB, "compose default 4GiB"},
		{"compose default capped at max", "compose_default = \"32g\"\nmax = \"16g\"\n", 0, 0, 16 * GiB, "capped at max 16GiB"},
		{"compose default raised to min", "compose_default = \"512m\"\nmin = \"2g\"\n", 0, 0, 2 * GiB, "raised to min 2GiB"},
		{"no compose default: min", `compose_default = ""`, 0, 0, GiB, "policy minimum"},
		{"half the limit", "", 16 * GiB, 0, 8 * GiB, "50% of the 16GiB memory limit"},
		{"half of 3g", "", 3 * GiB, 0, 1536 * MiB, "= 1.5GiB"},
		{"small limit: min", "", GiB, 0, GiB, "raised to min"},
		{"per_gpu without a limit", `per_gpu = "4g"`, 0, 2, 8 * GiB, "4GiB per GPU x 2 GPUs"},
		{"per_gpu, count unknown: compose default", `per_gpu = "4g"`, 0, 0, 8 * GiB, "compose default"},
		{"absolute size capped by the limit", `size = "16g"`, 8 * GiB, 0, 8 * GiB, "capped at the 8GiB memory limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse("t.toml", []byte(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			got, why := Target(p, tt.limit, "mem_limit", tt.gpus)
			if got != tt.want || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("Target = %d (%s), want %d (%s)", got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

// TestComposeReadsSizes checks that compose, which reads shm_size with
// go-units as docker does, reads back what migrate writes.
func TestComposeReadsSizes(t *testing.T) {
	for _, n := range []int64{8 << 30, 1536 << 20, 64 << 10, 1000, 1 << 30, 3<<30 + 1<<20} {
		s := policy.FormatCompose(n)
		back, err := units.RAMInBytes(s)
		if err != nil || back != n {
			t.Errorf("policy.FormatCompose(%d) = %q, which compose reads as %d (%v)", n, s, back, err)
		}
	}
}
