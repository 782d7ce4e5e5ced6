package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/node/hook"
)

// TestRunHook: gpurun-runtime's hook mode takes `gpurun hook`'s command
// line and exit statuses: 0 when the container may start, 1 when the
// policy fails closed on an error (the error on stderr), 2 for a command
// line it cannot read; --help prints the usage installers look for.
func TestRunHook(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	// A container without GPU evidence: the hook decides "none".
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"ociVersion":"1.2.0","process":{"args":["true"],"cwd":"/"},"root":{"path":"rootfs"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	policyFile := func(name, extra string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(fmt.Sprintf("log_file = %q\n%s", filepath.Join(dir, "hook.log"), extra)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open, closed := policyFile("open.toml", ""), policyFile("closed.toml", "fail_closed = true\n")
	state := func(bundle string) string {
		return fmt.Sprintf(`{"ociVersion":"1.2.0","id":"c1","status":"creating","pid":%d,"bundle":%q}`, os.Getpid(), bundle)
	}
	missing := filepath.Join(dir, "gone")
	for _, tc := range []struct {
		name       string
		args       []string
		stdin      string
		code       int
		wantStderr string
	}{
		{"no GPU", []string{"--stage", "createRuntime", "--config", open}, state(bundle), 0, ""},
		{"an error, failing open", []string{"--config=" + open}, state(missing), 0, ""},
		{"an error, failing closed", []string{"--config", closed, "--stage", "createRuntime"}, state(missing), 1, missing},
		{"an argument", []string{"--config", open, "extra"}, "", 2, `takes no arguments, got ["extra"]`},
		{"an unknown flag", []string{"--bogus"}, "", 2, "-bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runHook(tc.args, strings.NewReader(tc.stdin), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.wantStderr) || tc.wantStderr == "" && stderr.Len() > 0 || stdout.Len() > 0 {
				t.Errorf("runHook(%q) = %d, stdout %q, stderr %q; want %d with %q on stderr", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.wantStderr)
			}
		})
	}
	// --help: the usage on stdout, naming the hook mode, exit 0.
	for _, help := range []string{"-h", "--help"} {
		var stdout, stderr bytes.Buffer
		if code := runHook([]string{help}, strings.NewReader(""), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), hook.RuntimeUsage) || stderr.Len() > 0 {
			t.Errorf("runHook(%s) = %d, stdout %q, stderr %q; want 0 with the usage on stdout", help, code, stdout.String(), stderr.String())
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, "hook.log"))
	if err != nil || !strings.Contains(string(log), `"stage":"createRuntime"`) {
		t.Errorf("the hook's log: %s, %v; want its records with the stage", log, err)
	}
}
