package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpurun/gpurun/diagnose/explain"
	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

var explainLogs = filepath.Join("..", "..", "..", "diagnose", "explain", "testdata", "logs")

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

// syncBuffer is a bytes.Buffer that a command may write while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until out holds want, for at most 10 seconds.
func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q before the log ended; output so far:\n%s", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kubectl logs -f | gpurun explain -: each finding is printed while the
// pipe is still open, as soon as its line arrives; the fix at the end.
func TestExplainStreams(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	tests := []struct {
		name       string
		args       []string
		first      string // a line that makes a finding
		wantFirst  string // printed before the log ends
		second     string
		wantSecond string
		wantEnd    string // printed once it has ended
	}{
		{"text", []string{"explain", "-"},
			"[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n", "1. NCCL could not reserve a shared-memory segment",
			"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB.\n", "not /dev/shm: CUDA out of memory",
			"gpurun explain: 1 /dev/shm finding in standard input (3 lines): nccl-posix-fallocate [certain]"},
		{"json", []string{"explain", "--json"},
			"RuntimeError: DataLoader worker (pid 229) is killed by signal: Bus error.\n", `{"event":"finding","finding":{"signature":"torch-dataloader-bus-error"`,
			"WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available.\n", `"signature":"ray-object-store-shm"`,
			`{"event":"report","report":{"source":"-","lines":3,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			var out, errOut syncBuffer
			root := NewRoot(&Globals{}, Lean().AddCommands)
			root.SetIn(pr)
			root.SetOut(&out)
			root.SetErr(&errOut)
			root.SetArgs(tt.args)
			done := make(chan error, 1)
			go func() { done <- root.Execute() }()

			write := func(s string) {
				if _, err := io.WriteString(pw, s); err != nil {
					t.Fatal(err)
				}
			}
			write("step 1 loss 0.5\n" + tt.first)
			waitFor(t, &out, tt.wantFirst)
			if strings.Contains(out.String(), tt.wantEnd) {
				t.Fatalf("the end was printed before the log ended:\n%s", out.String())
			}
			write(tt.second)
			waitFor(t, &out, tt.wantSecond)
			pw.Close()
			err := <-done
			if exitcode.Of(err) != 1 {
				t.Errorf("exit: %v, want status 1", err)
			}
			if got := out.String(); !strings.Contains(got, tt.wantEnd) {
				t.Errorf("output lacks %q:\n%s", tt.wantEnd, got)
			}
			if tt.name == "json" {
				for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var ev explain.StreamEvent
					if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Event == "" {
						t.Errorf("line %d is not an event: %v: %s", i+1, err, line)
					}
				}
			}
		})
	}
}

// --stream=false on standard input prints the sorted report at the end,
// as for a file; --stream on a file streams it.
func TestExplainStreamFlag(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	file := filepath.Join(explainLogs, "nccl-525.log")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	batch, _, _ := executeIn(t, strings.NewReader(string(data)), "explain", "--stream=false", "-")
	fromFile, _, _ := executeIn(t, nil, "explain", file)
	if want := strings.Replace(fromFile, file, "standard input", 1); batch != want {
		t.Errorf("--stream=false on stdin:\n%s\nwant the file's report:\n%s", batch, want)
	}
	streamed, _, code := executeIn(t, nil, "explain", "--stream", file)
	if code != 1 || !strings.HasPrefix(streamed, "\n1. ") || !strings.Contains(streamed, "gpurun explain: 2 /dev/shm findings in "+file) {
		t.Errorf("--stream on a file: exit %d:\n%s", code, streamed)
	}
}
