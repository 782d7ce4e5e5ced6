package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
)

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

// TestLeanDispatch: the lean gpurun hands gpurun-full's commands, and a
// bare start by a runtime that launched it as an NRI plugin, to
// gpurun-full; everything else stays in its own command tree.
func TestLeanDispatch(t *testing.T) {
	launched := map[string]string{NRIPluginSocketEnv: "3"}
	for _, tc := range []struct {
		name       string
		args, rest []string
		env        map[string]string
		handed     bool
	}{
		{"plan", []string{"--config", "c.toml", "plan"}, []string{"plan"}, nil, true},
		{"version", []string{"version"}, []string{"version"}, launched, false},
		{"nothing", nil, nil, nil, false},
		{"nothing, launched as a plugin", []string{"-v"}, nil, launched, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var execd []string
			d := delegator{
				Executable: func() (string, error) { return "/nonexistent/gpurun", nil },
				LookPath:   func(string) (string, error) { return "/opt/bin/" + FullBinary, nil },
				Exec:       func(_ string, argv, _ []string) error { execd = argv; return nil },
			}
			cobraArgs, handled, err := d.dispatch(tc.args, tc.rest, func(k string) string { return tc.env[k] })
			if err != nil || handled != tc.handed {
				t.Fatalf("handled %v err %v, want handled %v", handled, err, tc.handed)
			}
			if tc.handed && !slices.Equal(execd, append([]string{"/opt/bin/" + FullBinary}, tc.args...)) {
				t.Errorf("exec %q, want gpurun-full with %q", execd, tc.args)
			}
			if !tc.handed && (execd != nil || !slices.Equal(cobraArgs, tc.args)) {
				t.Errorf("exec %q, args %q; want the command tree with %q", execd, cobraArgs, tc.args)
			}
		})
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
				if exitcode.Of(err) != tc.code || !strings.Contains(err.Error(), FullBinary+" is not installed") {
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
	if err := d.run(args); exitcode.Of(err) != 126 || !strings.Contains(err.Error(), FullBinary) {
		t.Errorf("failed exec: %v, want exit 126 naming %s", err, FullBinary)
	}
}
