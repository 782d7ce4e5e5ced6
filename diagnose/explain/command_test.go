package explain

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
)

func TestRun(t *testing.T) {
	const log = "step 1\nRuntimeError: DataLoader worker (pid 229) is killed by signal: Bus error.\n"
	dir := t.TempDir()
	file := filepath.Join(dir, "train.log")
	if err := os.WriteFile(file, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	clean := filepath.Join(dir, "clean.log")
	if err := os.WriteFile(clean, []byte("step 1 loss 0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	on, off := true, false
	for _, tc := range []struct {
		name     string
		o        RunOptions
		wantCode int
		wantOut  string
		wantErr  string
		events   bool // one JSON event a line
	}{
		{"a file", RunOptions{Path: file}, 1, "torch-dataloader-bus-error", "1 /dev/shm finding(s) in " + file, false},
		{"nothing found", RunOptions{Path: clean}, 0, "", "", false},
		{"a missing file", RunOptions{Path: filepath.Join(dir, "gone.log")}, 2, "", "gone.log", false},
		{"standard input streams", RunOptions{Path: "-", In: strings.NewReader(log)}, 1, "1. ", "in standard input", false},
		{"standard input as JSON events", RunOptions{In: strings.NewReader(log), JSON: true}, 1, `{"event":"finding"`, "", true},
		{"--stream=false on standard input", RunOptions{In: strings.NewReader(log), JSON: true, Stream: &off}, 1, `"findings":[`, "", false},
		{"--stream on a file", RunOptions{Path: file, Stream: &on}, 1, "1. ", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			tc.o.Out, tc.o.Err = &out, &errOut
			err := Run(tc.o)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.wantCode)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output %q lacks %q", out.String(), tc.wantOut)
			}
			if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q lacks %q", err, tc.wantErr)
			}
			if tc.events {
				for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var ev StreamEvent
					if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Event == "" {
						t.Errorf("line %d is not an event: %v: %s", i+1, err, line)
					}
				}
			}
		})
	}
}
