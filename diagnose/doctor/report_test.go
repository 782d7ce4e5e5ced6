package doctor

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

func TestReportExitCode(t *testing.T) {
	tests := []struct {
		statuses []Status
		want     int
		wantSt   Status
	}{
		{nil, 0, OK},
		{[]Status{OK, OK}, 0, OK},
		{[]Status{OK, Warn}, 0, Warn},
		{[]Status{Warn, Error}, 2, Error},
		{[]Status{Error, Problem, Warn}, 1, Problem},
	}
	for _, tt := range tests {
		r := &Report{Mode: ModeHost}
		for i, s := range tt.statuses {
			r.add(Check{Name: string(rune('a' + i)), Status: s})
		}
		r.finish()
		if r.ExitCode != tt.want || r.Status != tt.wantSt {
			t.Errorf("%v: exit %d status %s, want %d %s", tt.statuses, r.ExitCode, r.Status, tt.want, tt.wantSt)
		}
	}
}

// TestReportJSON: the schema tools rely on — field names, and a fix that
// is always there (empty when none).
func TestReportJSON(t *testing.T) {
	r := (&Report{Mode: ModeDocker, Target: "trainer", Checks: []Check{
		{Name: "shm.size", Status: Problem, Detail: "64MiB", Fix: "a\nb", Data: map[string]any{"size_bytes": policy.EngineDefaultShm}},
		{Name: "gpu", Status: OK, Detail: "env"},
	}}).finish()
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"checks", "exit_code", "mode", "schema", "status", "target"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	var back struct {
		Schema   string `json:"schema"`
		ExitCode int    `json:"exit_code"`
		Checks   []map[string]any
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Schema != Schema || back.ExitCode != 1 || len(back.Checks) != 2 {
		t.Errorf("decoded %+v", back)
	}
	for _, c := range back.Checks {
		for _, k := range []string{"name", "status", "detail", "fix"} {
			if _, ok := c[k]; !ok {
				t.Errorf("check %v lacks %q", c, k)
			}
		}
	}
	if back.Checks[0]["data"].(map[string]any)["size_bytes"] != float64(policy.EngineDefaultShm) {
		t.Errorf("data %v", back.Checks[0]["data"])
	}
	if _, ok := back.Checks[1]["data"]; ok {
		t.Error("empty data is written")
	}
}

func TestReportText(t *testing.T) {
	r := (&Report{Mode: ModeContainer, Checks: []Check{
		{Name: "shm.size", Status: Problem, Detail: "64MiB", Fix: "first way\nsecond way"},
		{Name: "gpu", Status: OK, Detail: "env"},
	}}).finish()
	var plain, color bytes.Buffer
	if err := r.WriteText(&plain, false); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteText(&color, true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b[") {
		t.Errorf("escape codes without colour:\n%q", plain.String())
	}
	if !strings.Contains(color.String(), "\x1b[31mproblem") {
		t.Errorf("no red problem:\n%q", color.String())
	}
	lines := strings.Split(plain.String(), "\n")
	var fixLines []string
	for _, l := range lines {
		if strings.Contains(l, "way") {
			fixLines = append(fixLines, l)
		}
	}
	if len(fixLines) != 2 || !strings.Contains(fixLines[0], "fix: first way") || strings.Index(fixLines[1], "second") != strings.Index(fixLines[0], "first") {
		t.Errorf("fix lines not aligned:\n%s", plain.String())
	}
	if !strings.Contains(plain.String(), "problem found: 1 problem(s), 0 warning(s) (exit 1)") {
		t.Errorf("summary:\n%s", plain.String())
	}
}
