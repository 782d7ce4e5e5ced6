package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
)

// TestRunRefusals: flags that do not go together are refused, exit 2,
// before anything is checked.
func TestRunRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    RunOptions
		want string
	}{
		{"--host --container", RunOptions{Host: true, InContainer: true}, "exclude each other"},
		{"--container --host-root", RunOptions{InContainer: true, HostRoot: "/x"}, "do not go with --container"},
		{"--container --docker-config", RunOptions{InContainer: true, DockerConfig: "/d.json"}, "do not go with --container"},
		{"CONTAINER --host", RunOptions{Container: "trainer", Host: true}, "CONTAINER does not go with"},
		{"CONTAINER --probe", RunOptions{Container: "trainer", Probe: "1g"}, "CONTAINER does not go with"},
		{"--cri alone", RunOptions{CRI: true}, "--cri needs a CRI container id"},
		{"a bad --probe", RunOptions{InContainer: true, Probe: "lots"}, `--probe "lots"`},
		{"--probe 0", RunOptions{InContainer: true, Probe: "0"}, `--probe "0"`},
		{"--probe on a host", RunOptions{Host: true, Probe: "1g"}, "--probe allocates in a container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.o.Out, tc.o.Getenv = &out, func(string) string { return "" }
			err := Run(context.Background(), tc.o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}

// TestWriteReport: the report's exit code is the error's.
func TestWriteReport(t *testing.T) {
	for _, tc := range []struct {
		status   Status
		wantCode int
		want     string
	}{
		{OK, 0, ""},
		{Warn, 0, ""},
		{Problem, 1, "1 problem(s) found"},
		{Error, 2, "1 check(s) could not be made"},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			rep := &Report{Mode: ModeHost}
			rep.add(Check{Name: "x", Status: tc.status, Detail: "d"})
			rep.finish()
			var out bytes.Buffer
			err := WriteReport(&out, rep, true)
			if exitcode.Of(err) != tc.wantCode || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("WriteReport: %v (exit %d), want exit %d %q", err, exitcode.Of(err), tc.wantCode, tc.want)
			}
			var back struct {
				ExitCode int `json:"exit_code"`
			}
			if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.ExitCode != tc.wantCode {
				t.Errorf("JSON %s: %v", out.String(), err)
			}
		})
	}
}
