package shmstats

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// BenchmarkCollect samples 200 containers of a containerd state dir (real
// captured specs, each init.pid this process, so every /dev/shm read is a
// real statfs and stat through /proc): the node agent's sampler does this
// every scrape interval, without the orphan walk and with its specs cached
// (Specs); "uncached" parses every config.json at every sample, as `gpurun
// stats` does once. ns/op is the cost of one sample; at a 15 s interval,
// 1 % of a core is 150 ms a sample.
func BenchmarkCollect(b *testing.B) {
	for _, tc := range []struct {
		name    string
		orphans bool
		specs   bool
	}{{"sampler", false, true}, {"uncached", false, false}, {"orphans", true, false}} {
		b.Run(tc.name, func(b *testing.B) {
			state := b.TempDir()
			fixturesByKind := []string{"containerd-2.4-cri-container.json", "containerd-2.4-cri-container-env-nvidia-all.json", "containerd-1.6-cri-container-memory-2g.json", "ctr-1.6-default.json"}
			for i := range 200 {
				bundle(b, state, "k8s.io", fmt.Sprintf("c%03d", i), fixturesByKind[i%len(fixturesByKind)], os.Getpid())
			}
			o := Options{Docker: "none", Containerd: []string{state}, Podman: []string{}, Policy: policy.Default(), Peaks: NewPeaks(), Orphans: tc.orphans}
			if tc.specs {
				o.Specs = NewSpecs()
			}
			b.ReportAllocs()
			for b.Loop() {
				cs, err := Collect(context.Background(), o)
				if err != nil || len(cs) != 200 {
					b.Fatalf("%d containers, %v", len(cs), err)
				}
			}
		})
	}
}
