package compose

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// corpusFiles returns the real-world compose files under testdata/corpus.
func corpusFiles(tb testing.TB) []string {
	tb.Helper()
	var files []string
	for _, pat := range []string{"testdata/corpus/*/*.yml", "testdata/corpus/*/*.yaml"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 15 {
		tb.Fatalf("corpus has %d files, want at least 15", len(files))
	}
	return files
}

// cpuTime is the CPU time this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMigrateCorpus migrates every corpus file, one project at a time
// (read, parse, analyze, decide, validate, edit, verify the edit), as a
// first run does. files/s is wall-clock throughput; files/cpu-s divides by
// the CPU time the process used, which a busy machine does not distort.
// Run it with -cpu 1 for one core.
func BenchmarkMigrateCorpus(b *testing.B) {
	benchCorpus(b, corpusFiles(b))
}

// BenchmarkCheckMigratedCorpus is the steady state in CI: --check over
// files that are already migrated (nothing to change, nothing to verify).
func BenchmarkCheckMigratedCorpus(b *testing.B) {
	var files []string
	dir := b.TempDir()
	for _, f := range corpusFiles(b) {
		res, err := Migrate(context.Background(), Options{Paths: []string{f}})
		if err != nil {
			b.Fatal(err)
		}
		out := filepath.Join(dir, filepath.Base(filepath.Dir(f))+"-"+filepath.Base(f))
		if err := writeFile(out, res.Files[0].New); err != nil {
			b.Fatal(err)
		}
		files = append(files, out)
	}
	benchCorpus(b, files)
}

func benchCorpus(b *testing.B, files []string) {
	ctx := context.Background()
	n := 0
	start, cpu := time.Now(), cpuTime(b)
	for b.Loop() {
		for _, f := range files {
			if _, err := Migrate(ctx, Options{Paths: []string{f}}); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "files/s")
	b.ReportMetric(float64(n)/(cpuTime(b)-cpu).Seconds(), "files/cpu-s")
}

func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o644)
}
