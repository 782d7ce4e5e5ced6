//go:build integration

package integration

import (
	"os/exec"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
)

// BenchmarkRunOverhead times `gpurun run --rm IMG true` against
// `docker run --rm IMG true` on a private dockerd, alternating the two so
// drift hits both, and reports gpurun's time as a ratio of docker's
// (goal: at most 1.03). The GPU variant includes gpurun's work: asking the
// daemon for the image env, memory and default-shm-size, and planning.
func BenchmarkRunOverhead(b *testing.B) {
	d := harness.StartDockerd(b, harness.DockerdOptions{})
	img := harness.BusyboxImage(b, d)
	gpurun := bin(b, "gpurun")
	for _, v := range []struct {
		name  string
		extra []string
	}{
		{"plain", nil},
		{"gpu", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			args := append(append([]string{"run", "--rm", "--network", "none"}, v.extra...), img, "true")
			timeIt := func(name string, argv ...string) time.Duration {
				cmd := exec.Command(name, argv...)
				cmd.Env = d.Env()
				start := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%s %q: %v\n%s", name, argv, err, out)
				}
				return time.Since(start)
			}
			// One of each first, so images and caches are warm for both.
			timeIt("docker", args...)
			timeIt(gpurun, args...)
			var dockerTotal, gpurunTotal time.Duration
			b.ResetTimer()
			for b.Loop() {
				dockerTotal += timeIt("docker", args...)
				gpurunTotal += timeIt(gpurun, args...)
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(dockerTotal.Milliseconds())/n, "docker-ms/run")
			b.ReportMetric(float64(gpurunTotal.Milliseconds())/n, "gpurun-ms/run")
			b.ReportMetric(float64(gpurunTotal)/float64(dockerTotal), "ratio")
		})
	}
}
