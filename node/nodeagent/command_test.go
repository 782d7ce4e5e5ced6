package nodeagent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/node/install"
)

func TestConfigure(t *testing.T) {
	self := func() (string, error) { return "/opt/gpurun/bin/gpurun", nil }
	for _, tc := range []struct {
		name     string
		s        Settings
		wantErr  string
		wantFrom string
	}{
		{"defaults", Settings{Restart: "none", Distribution: "auto", Executable: self}, "", "/opt/gpurun/bin"},
		{"--from", Settings{Agent: Agent{SourceDir: "/img"}, Restart: "systemd", Distribution: "k3s", Executable: self}, "", "/img"},
		{"--dry-run", Settings{DryRun: true, Executable: self}, "no --dry-run", ""},
		{"a bad --restart", Settings{Restart: "reload", Distribution: "auto", Executable: self}, "--restart", ""},
		{"a bad --distribution", Settings{Restart: "none", Distribution: "microk8s", Executable: self}, "--distribution", ""},
		{"no executable", Settings{Restart: "none", Distribution: "auto", Executable: func() (string, error) { return "", errors.New("gone") }}, "--from", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.Log = &bytes.Buffer{}
			a, err := Configure(tc.s)
			if tc.wantErr != "" {
				if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Configure: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantMode, _ := restart.ParseMode(tc.s.Restart)
			wantDist, _ := install.ParseDistribution(tc.s.Distribution)
			if a.SourceDir != tc.wantFrom || a.Restart != wantMode || a.Distribution != wantDist || a.Log == nil {
				t.Errorf("agent from %q restart %q distribution %q log %v", a.SourceDir, a.Restart, a.Distribution, a.Log)
			}
		})
	}
}

// TestWriteStatus: a node without gpurun is not ready: exit 1, said in
// text and JSON.
func TestWriteStatus(t *testing.T) {
	a := &Agent{HostRoot: t.TempDir()}
	for _, asJSON := range []bool{false, true} {
		var out bytes.Buffer
		err := a.WriteStatus(&out, asJSON)
		if exitcode.Of(err) != 1 {
			t.Errorf("json %v: %v (exit %d), want exit 1", asJSON, err, exitcode.Of(err))
		}
		want := map[bool]string{false: "not ready: ", true: `"ready": false`}[asJSON]
		if !strings.Contains(out.String(), want) {
			t.Errorf("json %v: %q lacks %q", asJSON, out.String(), want)
		}
	}
}

// TestNodePolicy: the DaemonSet's source first, then the node's file,
// then the defaults; a file that cannot be loaded is passed over, and the
// error names it.
func TestNodePolicy(t *testing.T) {
	host := t.TempDir()
	src := filepath.Join(t.TempDir(), "source.toml")
	node := filepath.Join(host, "etc", "gpurun", "config.toml")
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, min string) {
		if err := os.WriteFile(p, []byte("min = \""+min+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(src, "3g")
	write(node, "5g")
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("nonsense = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		a       Agent
		wantMin int64
		wantErr string
	}{
		{"source", Agent{HostRoot: host, PolicyPath: "/etc/gpurun/config.toml", PolicySource: src}, 3 << 30, ""},
		{"node file", Agent{HostRoot: host, PolicyPath: "/etc/gpurun/config.toml"}, 5 << 30, ""},
		{"bad source: the node file, and the error", Agent{HostRoot: host, PolicyPath: "/etc/gpurun/config.toml", PolicySource: bad}, 5 << 30, bad},
		{"nothing: defaults", Agent{HostRoot: host, PolicyPath: "/etc/none.toml"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.a.NodePolicy()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err %v, want one naming %q", err, tc.wantErr)
			}
			if tc.wantMin != 0 && p.Min != tc.wantMin {
				t.Errorf("min %d, want %d", p.Min, tc.wantMin)
			}
			if tc.wantMin == 0 && p.Source != "" {
				t.Errorf("policy from %q, want the defaults", p.Source)
			}
		})
	}
}
