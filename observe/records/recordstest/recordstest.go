// Package recordstest produces real enforce records for tests: it runs
// containers captured from real engines (oci/testdata/fixtures) through a
// node/enforce Enforcer, whose host effects (the remount) are faked.
package recordstest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/oci"
)

// Fixtures of real engines' container specs.
const (
	// CRIGPU is a GPU container of a containerd 2.4 CRI pod (the pod's
	// namespace, name and uid in its annotations): a remount plan.
	CRIGPU = "containerd-2.4-cri-container-env-nvidia-all"
	// CRIPlain is a container of a CRI pod without GPU evidence.
	CRIPlain = "containerd-2.4-cri-container"
	// DockerGPU is a docker run --gpus all container: a set-size plan.
	DockerGPU = "docker-20.10-gpus-all"
)

// Case is one container start.
type Case struct {
	// Fixture names the spec (without .json).
	Fixture string
	// Refuse makes the remount fail as remount's safety rules refuse it;
	// Fail makes it fail otherwise (a tmpfs that is not there).
	Refuse, Fail bool
	// Subject names the container as the front door knows it.
	Subject enforce.Subject
}

// Run runs each case through one Enforcer (component "gpurun-runtime")
// and returns the JSON lines it logged and the records its Observe got.
func Run(t testing.TB, cases ...Case) (log []byte, observed []records.Record) {
	t.Helper()
	var buf bytes.Buffer
	var refuse, fail bool
	e := enforce.New(enforce.Config{
		Component: "gpurun-runtime",
		Facts: func() (oci.Facts, error) {
			return oci.Facts{HostMemory: 64 << 30, HostGPUs: 2, TmpfsSize: func(string) (int64, error) { return 64 << 20, nil }}, nil
		},
		Grow: func(path string, size int64, _ remount.Scope) (remount.Result, error) {
			switch {
			case refuse:
				return remount.Result{}, fmt.Errorf("%s: %w", path, remount.ErrUnsafe)
			case fail:
				return remount.Result{}, fmt.Errorf("%s: %w", path, errors.New("no such file or directory"))
			}
			return remount.Result{Before: 64 << 20, After: size, Changed: true}, nil
		},
		Log: slog.New(slog.NewJSONHandler(&buf, nil)).With("component", "gpurun-runtime"),
		Observe: func(s enforce.Subject, r enforce.Result) {
			observed = append(observed, records.FromResult("gpurun-runtime", s, r))
		},
	})
	for _, c := range cases {
		cfg := Fixture(t, c.Fixture)
		refuse, fail = c.Refuse, c.Fail
		_, err := e.Run(c.Subject, nil, func() (enforce.Request, error) {
			return enforce.Request{
				Container: oci.FromSpec(cfg.Spec),
				Carry: func(pl oci.Plan) (enforce.Done, error) {
					return enforce.Done{Path: "config.json", Before: pl.Current, After: pl.Size, Changed: pl.Size != pl.Current}, nil
				},
			}, nil
		})
		if err != nil {
			t.Fatalf("%s: %v", c.Fixture, err)
		}
	}
	return buf.Bytes(), observed
}

// Fixture reads a real engine's spec from oci/testdata/fixtures.
func Fixture(t testing.TB, name string) *specfile.Config {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(self), "..", "..", "..", "oci", "testdata", "fixtures", name+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := specfile.Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
