package main

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// heavyPackages are import paths (each with its subpackages) whose package init, or sheer size,
// costs a process start milliseconds (GODEBUG=inittrace=1 gpurun-full
// version): they must stay out of gpurun, the build every `gpurun run` and
// every OCI hook call starts.
var heavyPackages = []struct{ prefix, why string }{
	{"github.com/santhosh-tekuri/jsonschema", "compiles its meta-schemas at init (~7 ms)"},
	{"github.com/compose-spec/compose-go", "pulls jsonschema"},
	{"github.com/containerd/nri", "NRI stub, with a WebAssembly runtime"},
	{"github.com/tetratelabs/wazero", "WebAssembly runtime"},
	{"k8s.io/", "Kubernetes API types, CRI protobufs, client-go"},
	{"sigs.k8s.io/", "kustomize, structured-merge-diff"},
	{"google.golang.org/grpc", "gRPC (CRI clients)"},
	{"google.golang.org/protobuf", "protobuf registries"},
	{"github.com/gogo/protobuf", "protobuf registries"},
	{"github.com/russross/blackfriday", "markdown for man pages"},
	{"github.com/cpuguy83/go-md2man", "man pages"},
	{"github.com/spf13/cobra/doc", "man pages"},
	{"github.com/prometheus/", "metrics registries and collectors"},
	{"html/template", "template escaper tables"},
	{"github.com/gpurun/gpurun/compose", "compose-go"},
	{"github.com/gpurun/gpurun/kube/podspec", "Kubernetes API types"},
	{"github.com/gpurun/gpurun/kube/webhook", "Kubernetes API types"},
	{"github.com/gpurun/gpurun/diagnose/doctor", "CRI, Kubernetes"},
	{"github.com/gpurun/gpurun/engine/criclient", "gRPC, CRI"},
	{"github.com/gpurun/gpurun/node/nri", "NRI"},
	{"github.com/gpurun/gpurun/cmd/internal/docgen", "man pages"},
	{"github.com/gpurun/gpurun/diagnose/plan", "Kubernetes API types"},
	{"github.com/gpurun/gpurun/observe/exporter", "metrics, Kubernetes Events"},
	{"github.com/gpurun/gpurun/cmd/internal/fullcli", "gpurun-full's commands"},
}

func heavy(pkg string) (string, bool) {
	for _, h := range heavyPackages {
		p := strings.TrimSuffix(h.prefix, "/")
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return h.why, true
		}
	}
	return "", false
}

// deps lists the packages a build of the main package in dir links, as
// every way of building it does (go build, go install, make).
func deps(t *testing.T, dir string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the import graph: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", dir, err)
	}
	return strings.Fields(string(out))
}

// TestLeanImportGraph fails when a package that is slow to start enters
// gpurun (this main package); gpurun-full (cmd/gpurun-full) must still
// have them all, or this list no longer describes anything.
func TestLeanImportGraph(t *testing.T) {
	lean := deps(t, ".")
	if !slices.Contains(lean, "github.com/gpurun/gpurun/cmd/internal/cli") {
		t.Fatalf("gpurun's import graph lacks cmd/internal/cli: %v", lean)
	}
	for _, pkg := range lean {
		if why, ok := heavy(pkg); ok {
			t.Errorf("gpurun imports %s (%s): move the command that needs it into gpurun-full (cmd/internal/fullcli; cmd/internal/cli/delegate.go)", pkg, why)
		}
	}
	full := deps(t, "../gpurun-full")
	for _, want := range []string{
		"github.com/santhosh-tekuri/jsonschema/v6", "github.com/containerd/nri/pkg/stub", "k8s.io/api/core/v1",
		"k8s.io/cri-api/pkg/apis/runtime/v1", "google.golang.org/grpc", "github.com/russross/blackfriday/v2",
	} {
		if !slices.Contains(full, want) {
			t.Errorf("gpurun-full no longer imports %s: update heavyPackages", want)
		}
	}
}

// TestHeavyPrefix: the prefix match neither misses a subpackage nor takes
// a package whose path merely starts with the same letters.
func TestHeavyPrefix(t *testing.T) {
	for _, tc := range []struct {
		pkg  string
		want bool
	}{
		{"github.com/compose-spec/compose-go/v2/loader", true},
		{"github.com/gpurun/gpurun/compose", true},
		{"github.com/gpurun/gpurun/compose/yamledit", true},
		{"k8s.io/api/core/v1", true},
		{"html/template", true},
		{"text/template", false},
		{"github.com/gpurun/gpurun/composeish", false},
		{"github.com/gpurun/gpurun/node/nrilog", false},
		{"github.com/docker/docker/client", false},
	} {
		if _, got := heavy(tc.pkg); got != tc.want {
			t.Errorf("heavy(%q) = %v, want %v", tc.pkg, got, tc.want)
		}
	}
}
