package fullcli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/node/nri"
)

// TestNRIPluginSocketEnv: gpurun (the lean build, which must not import
// the NRI API) knows the variable a runtime sets for a launched plugin.
func TestNRIPluginSocketEnv(t *testing.T) {
	if cli.NRIPluginSocketEnv != api.PluginSocketEnvVar {
		t.Errorf("cli.NRIPluginSocketEnv = %q, the NRI API says %q", cli.NRIPluginSocketEnv, api.PluginSocketEnvVar)
	}
}

// TestNRIFlags: bad flags are refused with the flag's name, before anything
// connects.
func TestNRIFlags(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"nri", "--index", "7"}, "--index"},
		{[]string{"nri", "--name", "gpu run"}, "--name"},
		{[]string{"--dry-run", "nri"}, "--dry-run"},
		{[]string{"nri", "extra"}, "unknown command"},
		{[]string{"--config", filepath.Join(t.TempDir(), "none.toml"), "nri"}, "none.toml"},
	} {
		_, stderr, code := execute(t, tt.args...)
		if code != 2 {
			t.Errorf("gpurun %q: exit %d, want 2", tt.args, code)
		}
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("gpurun %q: stderr %q, want it to name %s", tt.args, stderr, tt.want)
		}
	}
}

// TestNRISystemdUnit: the systemd unit's command line is one gpurun
// accepts, and names the defaults' socket, index and name.
func TestNRISystemdUnit(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "systemd", "gpurun-nri.service"))
	if err != nil {
		t.Fatal(err)
	}
	var exec []string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
	}
	if len(exec) < 2 || filepath.Base(exec[0]) != "gpurun" {
		t.Fatalf("ExecStart %q: want gpurun", exec)
	}
	root := cli.NewRoot(&cli.Globals{}, AddCommands)
	cmd, rest, err := root.Find(exec[1:])
	if err != nil || cmd.Name() != "nri" {
		t.Fatalf("ExecStart %q runs %v (%v), want gpurun nri", exec, cmd.Name(), err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("ExecStart %q: %v", exec, err)
	}
	for flag, want := range map[string]string{"socket": nri.DefaultSocket, "index": nri.DefaultIndex, "name": nri.DefaultName} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("ExecStart --%s %q, want %q", flag, got, want)
		}
	}
}

// TestRootWithoutArguments: gpurun without arguments shows the help, unless
// a runtime launched it as an NRI plugin: then it runs the plugin (and a bad
// connection is an error).
func TestRootWithoutArguments(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", filepath.Join(t.TempDir(), "absent.toml"))
	stdout, _, code := execute(t)
	if code != 0 || !strings.Contains(stdout, "Usage:") {
		t.Errorf("gpurun: exit %d, stdout %q; want the help", code, stdout)
	}
	launched := map[string]string{"NRI_PLUGIN_SOCKET": "3"}
	tests := []struct {
		args, rest []string
		env        map[string]string
		want       []string
	}{
		{nil, nil, nil, nil},
		{nil, nil, launched, []string{"nri"}},
		{[]string{"--config", "c.toml"}, nil, launched, []string{"--config", "c.toml", "nri"}},
		{[]string{"version"}, []string{"version"}, launched, []string{"version"}},
	}
	for _, tt := range tests {
		got := launchedNRI(tt.args, tt.rest, func(k string) string { return tt.env[k] })
		if !slices.Equal(got, tt.want) {
			t.Errorf("launchedNRI(%q, %q, %v) = %q, want %q", tt.args, tt.rest, tt.env, got, tt.want)
		}
	}
	// Launched with a bad socket: an error, logged to the policy's log_file.
	dir := t.TempDir()
	config, logFile := filepath.Join(dir, "config.toml"), filepath.Join(dir, "gpurun.log")
	if err := os.WriteFile(config, []byte("log_file = \""+logFile+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NRI_PLUGIN_SOCKET", "not-a-descriptor")
	t.Setenv("NRI_PLUGIN_NAME", "gpurun")
	t.Setenv("NRI_PLUGIN_IDX", "10")
	_, stderr, code := execute(t, launchedNRI([]string{"--config", config}, nil, os.Getenv)...)
	if code == 0 || !strings.Contains(stderr, "NRI_PLUGIN_SOCKET") {
		t.Errorf("launched with a bad socket: exit %d, stderr %q; want an error about NRI_PLUGIN_SOCKET", code, stderr)
	}
	logged, _ := os.ReadFile(logFile)
	if !strings.Contains(string(logged), `"launched_by_runtime":true`) || !strings.Contains(string(logged), "NRI_PLUGIN_SOCKET") {
		t.Errorf("log %s: %q, want the start and the error", logFile, logged)
	}
}
