//go:build integration

package integration

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
)

// BenchmarkRunOverhead times `gpurun run --rm IMG true` against
// `docker run --rm IMG true` on a private dockerd with docker's default
// bridge network (in the daemon's own network namespace), alternating the
// two so drift hits both. It reports the medians of each and gpurun's added
// time (goal: at most 15 ms) and ratio. The GPU variant includes gpurun's
// work: asking the daemon for the image env, memory and default-shm-size,
// and planning.
func BenchmarkRunOverhead(b *testing.B) {
	d := harness.StartDockerd(b, harness.DockerdOptions{Bridge: true})
	img := harness.BusyboxImage(b, d)
	gpurun := benchGpurun(b)
	for _, v := range []struct {
		name  string
		extra []string
	}{
		{"plain", nil},
		{"gpu", []string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			args := append(append([]string{"run", "--rm"}, v.extra...), img, "true")
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
			var dockerTimes, gpurunTimes []time.Duration
			b.ResetTimer()
			for b.Loop() {
				dockerTimes = append(dockerTimes, timeIt("docker", args...))
				gpurunTimes = append(gpurunTimes, timeIt(gpurun, args...))
			}
			b.StopTimer()
			reportAdded(b, "docker", dockerTimes, "gpurun", gpurunTimes)
		})
	}
}

// BenchmarkCLIStart times `gpurun version` and `gpurun --help` (goal: at
// most 10 ms each), with one exec of /bin/true as the floor.
func BenchmarkCLIStart(b *testing.B) {
	gpurun := benchGpurun(b)
	for _, v := range []struct {
		name string
		argv []string
	}{
		{"true", []string{"/bin/true"}},
		{"version", []string{gpurun, "version"}},
		{"help", []string{gpurun, "--help"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				start := time.Now()
				if out, err := exec.Command(v.argv[0], v.argv[1:]...).CombinedOutput(); err != nil {
					b.Fatalf("%q: %v\n%s", v.argv, err, out)
				}
				times = append(times, time.Since(start))
			}
			b.ReportMetric(ms(median(times)), "median-ms")
		})
	}
}

// benchGpurun is the gpurun binary to measure: $GPURUN_BENCH_GPURUN (an
// older build, for before/after numbers on the same conditions), else the
// one built from this tree.
func benchGpurun(b *testing.B) string {
	if p := os.Getenv("GPURUN_BENCH_GPURUN"); p != "" {
		return p
	}
	return bin(b, "gpurun")
}

// reportAdded reports the median times of a base command and of the one
// measured against it, the median added time and the ratio of the medians.
func reportAdded(b *testing.B, baseName string, base []time.Duration, name string, times []time.Duration) {
	mb, mt := median(base), median(times)
	added := make([]time.Duration, len(base))
	for i := range base {
		added[i] = times[i] - base[i]
	}
	b.ReportMetric(ms(mb), baseName+"-ms")
	b.ReportMetric(ms(mt), name+"-ms")
	b.ReportMetric(ms(median(added)), "added-ms")
	b.ReportMetric(float64(mt)/float64(mb), "ratio")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
