package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
	{"github.com/gpurun/gpurun/runtime/nri", "NRI"},
	{"github.com/gpurun/gpurun/internal/docgen", "man pages"},
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

// deps lists the packages a build of this directory links.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the import graph: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-tags", tags, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps -tags %q: %v\n%s", tags, err, ee.Stderr)
		}
		t.Fatalf("go list -deps -tags %q: %v", tags, err)
	}
	return strings.Fields(string(out))
}

// TestLeanImportGraph fails when a package that is slow to start enters
// gpurun (the gpurun_lean build); gpurun-full (the default build) must
// still have them all, or this list no longer describes anything.
func TestLeanImportGraph(t *testing.T) {
	for _, pkg := range deps(t, "gpurun_lean") {
		if why, ok := heavy(pkg); ok {
			t.Errorf("gpurun (-tags gpurun_lean) imports %s (%s): move the command that needs it into gpurun-full (cmd/gpurun/delegate.go)", pkg, why)
		}
	}
	full := deps(t, "")
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
		{"github.com/gpurun/gpurun/runtime/nrilog", false},
		{"github.com/docker/docker/client", false},
	} {
		if _, got := heavy(tc.pkg); got != tc.want {
			t.Errorf("heavy(%q) = %v, want %v", tc.pkg, got, tc.want)
		}
	}
}

// TestStubsMatchFull: every command of gpurun-full's table exists in the
// full tree with the description and visibility gpurun's stub shows, and
// every command of the full tree is either in gpurun itself or in the
// table.
func TestStubsMatchFull(t *testing.T) {
	root := newRootCmd(&globals{})
	stubs := map[string]bool{}
	for _, s := range stubCmds() {
		stubs[s.Name()] = true
		c, _, err := root.Find([]string{s.Name()})
		if err != nil || c == root {
			t.Errorf("stub %s: no such command in gpurun-full", s.Name())
			continue
		}
		if c.Short != s.Short || c.Hidden != s.Hidden {
			t.Errorf("stub %s: Short %q hidden %v; gpurun-full's: %q %v", s.Name(), s.Short, s.Hidden, c.Short, c.Hidden)
		}
	}
	if len(stubs) != len(fullCommands()) {
		t.Errorf("fullCommands names a command twice: %v", fullCommands())
	}
	for _, name := range []string{"run", "create", "hook", "install", "version", "completion"} {
		if stubs[name] {
			t.Errorf("%s is on the fast path and must run in gpurun itself, not in %s", name, FullBinary)
		}
	}
}

func TestDelegated(t *testing.T) {
	for _, tc := range []struct {
		rest []string
		want bool
	}{
		{nil, false},
		{[]string{"compose", "migrate", "-f", "x.yml"}, true},
		{[]string{"node", "run"}, true},
		{[]string{"nri"}, true},
		{[]string{"plan", "--spec", "c.json"}, true},
		{[]string{"__gendocs", "--out", "d"}, true},
		{[]string{"help", "webhook"}, true},
		{[]string{"__complete", "compose", ""}, true},
		{[]string{"__completeNoDesc", "doctor", "--"}, true},
		{[]string{"help"}, false},
		{[]string{"help", "run"}, false},
		{[]string{"__complete", ""}, false},
		{[]string{"__complete", "run", "--"}, false},
		{[]string{"run", "compose"}, false},
		{[]string{"version"}, false},
		{[]string{"hook", "--", "compose"}, false},
	} {
		if got := delegated(tc.rest); got != tc.want {
			t.Errorf("delegated(%q) = %v, want %v", tc.rest, got, tc.want)
		}
	}
}

// TestDelegatorRun: gpurun-full is found next to gpurun's real path (the
// docker CLI plugin is a link to it), else on PATH, and gets the whole
// command line; when it is missing, the error says so (exit 127).
func TestDelegatorRun(t *testing.T) {
	dir := t.TempDir()
	bin, elsewhere, onPath := filepath.Join(dir, "bin"), filepath.Join(dir, "plugins"), filepath.Join(dir, "path")
	for _, d := range []string{bin, elsewhere, onPath} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(bin, "gpurun"), filepath.Join(bin, FullBinary), filepath.Join(onPath, FullBinary), filepath.Join(onPath, "gpurun")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plugin := filepath.Join(elsewhere, "docker-gpurun")
	if err := os.Symlink(filepath.Join(bin, "gpurun"), plugin); err != nil {
		t.Fatal(err)
	}
	lookIn := func(d string) func(string) (string, error) {
		return func(name string) (string, error) {
			if d == "" {
				return "", exec.ErrNotFound
			}
			return filepath.Join(d, name), nil
		}
	}
	args := []string{"--config", "c.toml", "compose", "migrate"}
	for _, tc := range []struct {
		name, self, path string
		want             string
		code             int
	}{
		{"next to gpurun", filepath.Join(bin, "gpurun"), onPath, filepath.Join(bin, FullBinary), 0},
		{"next to the link's target", plugin, "", filepath.Join(bin, FullBinary), 0},
		{"on PATH", filepath.Join(onPath, "..", "x", "gpurun"), onPath, filepath.Join(onPath, FullBinary), 0},
		{"missing", filepath.Join(dir, "gpurun"), "", "", 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotPath string
			var gotArgv, gotEnv []string
			d := delegator{
				Executable: func() (string, error) { return tc.self, nil },
				LookPath:   lookIn(tc.path),
				Exec: func(path string, argv, env []string) error {
					gotPath, gotArgv, gotEnv = path, argv, env
					return nil
				},
				Environ: []string{"A=1"},
			}
			err := d.run(args)
			if tc.code != 0 {
				var ee *exitError
				if !errors.As(err, &ee) || ee.code != tc.code || !strings.Contains(err.Error(), FullBinary+" is not installed") {
					t.Fatalf("run: %v, want exit %d saying %s is not installed", err, tc.code, FullBinary)
				}
				if gotPath != "" {
					t.Errorf("exec %s after an error", gotPath)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantArgv := append([]string{tc.want}, args...)
			if gotPath != tc.want || !slices.Equal(gotArgv, wantArgv) || !slices.Equal(gotEnv, []string{"A=1"}) {
				t.Errorf("exec %s %q env %q, want %s %q env [A=1]", gotPath, gotArgv, gotEnv, tc.want, wantArgv)
			}
		})
	}
	// An exec that fails: exit 126, naming the program.
	d := delegator{
		Executable: func() (string, error) { return filepath.Join(bin, "gpurun"), nil },
		LookPath:   lookIn(""),
		Exec:       func(string, []string, []string) error { return errors.New("exec format error") },
	}
	var ee *exitError
	if err := d.run(args); !errors.As(err, &ee) || ee.code != 126 || !strings.Contains(err.Error(), FullBinary) {
		t.Errorf("failed exec: %v, want exit 126 naming %s", err, FullBinary)
	}
}
