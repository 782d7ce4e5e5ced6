package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/diagnose/explain"
	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/policy"
)

// executeIn runs gpurun's command tree with args and stdin, and returns
// its output and exit status (an error is appended to stderr, as main
// prints it).
func executeIn(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCmd(&globals{})
	var out, errOut bytes.Buffer
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var ee *exitError
		code = 2
		if errors.As(err, &ee) {
			code = ee.code
		}
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

var explainLogs = filepath.Join("..", "..", "diagnose", "explain", "testdata", "logs")

func TestExplainExitStatus(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	found := filepath.Join(explainLogs, "nccl-525.log")
	unrelated := filepath.Join(explainLogs, "mgfn-35.log")
	data, err := os.ReadFile(found)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"finding in a file", "", []string{"explain", found}, 1, "nccl-posix-fallocate", "2 /dev/shm finding(s) in " + found},
		{"finding on stdin", string(data), []string{"explain"}, 1, "in standard input", "in standard input"},
		{"finding on stdin as -", string(data), []string{"explain", "-"}, 1, "nccl-shm-segment", ""},
		{"nothing found", "", []string{"explain", unrelated}, 0, "matched a known /dev/shm failure", ""},
		{"missing file", "", []string{"explain", filepath.Join(t.TempDir(), "gone.log")}, 2, "", "gone.log"},
		{"bad --memory", "", []string{"explain", "--memory", "lots", found}, 2, "", "--memory"},
		{"bad policy", "", []string{"explain", "--config", filepath.Join(t.TempDir(), "none.toml"), found}, 2, "", "none.toml"},
		{"two files", "", []string{"explain", found, unrelated}, 2, "", "accepts at most 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := executeIn(t, strings.NewReader(tt.stdin), tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// --memory sizes the fix as gpurun run would for that container.
func TestExplainJSONMemory(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	stdout, stderr, code := executeIn(t, nil, "explain", "--json", "--memory", "16g", filepath.Join(explainLogs, "stcn-132.log"))
	if code != 1 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	want, _ := policy.Default().Target(policy.Request{MemoryLimit: 16 * policy.GiB})
	if len(r.Findings) != 1 || r.Findings[0].Signature != "torch-dataloader-bus-error" || r.Fix == nil || r.Fix.SizeBytes != want {
		t.Errorf("report %+v; want one torch-dataloader-bus-error and a %d-byte fix", r, want)
	}
}

// The probe command's exit status and JSON; the DataLoader probe, which
// re-executes gpurun, runs in the integration tests.
func TestShmProbeCommand(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := executeIn(t, nil, "shm-probe", "nccl", "--dir", dir, "--count", "3", "--segment-size", "1m", "--json")
	var r shmprobe.NCCLResult
	if code != 0 || json.Unmarshal([]byte(stdout), &r) != nil || r.Created != 3 || r.SegmentSize != policy.MiB {
		t.Errorf("nccl: exit %d, %q, %q", code, stdout, stderr)
	}
	stdout, _, code = executeIn(t, nil, "shm-probe", "size", "--dir", dir, "3m")
	if code != 0 || !strings.HasPrefix(stdout, "size: ok: allocated 3MiB of 3MiB") {
		t.Errorf("size: exit %d, %q", code, stdout)
	}
	for _, args := range [][]string{
		{"shm-probe", "size", "--dir", filepath.Join(dir, "missing"), "1m"},
		{"shm-probe", "size", "lots"},
		{"shm-probe", "nccl", "--segment-size", "lots"},
		{"shm-probe", "dataloader", "--dir", filepath.Join(dir, "missing")},
	} {
		if _, stderr, code := executeIn(t, nil, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("probes left %d files in %s", len(ents), dir)
	}
}
