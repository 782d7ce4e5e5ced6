package harness

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// PrevEnv names the directory of the previous release of gpurun that the
// upgrade tests install first and downgrade to (hack/build-previous.sh
// builds it once into /var/cache/gpurun-prev/<commit>: make
// test-integration sets it).
const PrevEnv = "GPURUN_TEST_PREV"

// Previous is a previous release of gpurun as hack/build-previous.sh
// leaves it: its image's build context, its Dockerfile and its chart.
type Previous struct {
	// Dir is the release's directory.
	Dir string
	// Commit is the commit it was built from (full id).
	Commit string
}

// RequirePrevious returns the previous release $GPURUN_TEST_PREV names,
// or fails the test saying how to get it: a missing release fails the
// test, it does not skip it.
func RequirePrevious(t testing.TB) Previous {
	t.Helper()
	dir := os.Getenv(PrevEnv)
	if dir == "" {
		t.Fatalf("harness: prerequisite missing: $%s is not set: run the tests with `make test-integration` (it builds the previous release with hack/build-previous.sh into /var/cache/gpurun-prev and sets it)", PrevEnv)
	}
	commit, err := os.ReadFile(filepath.Join(dir, "commit"))
	if err != nil {
		t.Fatalf("harness: prerequisite missing: no previous release at %s (hack/build-previous.sh builds it): %v", dir, err)
	}
	p := Previous{Dir: dir, Commit: strings.TrimSpace(string(commit))}
	for _, f := range []string{p.Binary("gpurun"), p.Binary("gpurun-full"), p.Binary("gpurun-runtime"), p.Dockerfile(), filepath.Join(p.Chart(), "Chart.yaml")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("harness: the previous release at %s is incomplete (remove it; hack/build-previous.sh builds it again): %v", dir, err)
		}
	}
	return p
}

// Short is the commit's first 7 digits.
func (p Previous) Short() string { return p.Commit[:min(7, len(p.Commit))] }

// ImageContext is the image's build context (linux-<arch>/ directories of
// binaries, as make image-context lays them out).
func (p Previous) ImageContext() string { return filepath.Join(p.Dir, "image") }

// Binary is one of its binaries for this machine's architecture.
func (p Previous) Binary(name string) string {
	return filepath.Join(p.ImageContext(), "linux-"+runtime.GOARCH, name)
}

// Dockerfile is its deploy/image/Dockerfile.
func (p Previous) Dockerfile() string { return filepath.Join(p.Dir, "Dockerfile") }

// Chart is its Helm chart (deploy/helm/gpurun).
func (p Previous) Chart() string { return filepath.Join(p.Dir, "chart", "gpurun") }

// ImageTar builds its image from its Dockerfile over its build context
// (DockerfileImageTar), tagged ref, into dir.
func (p Previous) ImageTar(t testing.TB, dir, ref string) string {
	t.Helper()
	return DockerfileImageTar(t, dir, ref, p.Dockerfile(), p.ImageContext(), map[string]string{"VERSION": p.Short()})
}
