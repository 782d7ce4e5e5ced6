package records_test

import (
	"bytes"
	"testing"

	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/records/recordstest"
	"github.com/gpurun/gpurun/runtime/enforce"
)

// TestLogAndObserveAgree: a record read back from the log line an Enforcer
// wrote is the record its Observe callback got, for every outcome.
func TestLogAndObserveAgree(t *testing.T) {
	tests := []struct {
		name string
		c    recordstest.Case
		want func(t *testing.T, r records.Record)
	}{
		{"remount done", recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "c1", Bundle: "/run/b/c1"}},
			func(t *testing.T, r records.Record) {
				if !r.Remount() || r.Failed || !r.Changed || !r.GPU || r.Size <= 64<<20 {
					t.Errorf("want a remount that grew the tmpfs: %+v", r)
				}
				if r.Pod.Namespace != "default" || r.Pod.Name != "gpurun-env-nvidia-all" || r.Pod.UID == "" || r.Pod.Container != "app" {
					t.Errorf("pod %+v: want default/gpurun-env-nvidia-all, its uid, container app (the spec's annotations)", r.Pod)
				}
			}},
		{"remount refused", recordstest.Case{Fixture: recordstest.CRIGPU, Refuse: true, Subject: enforce.Subject{ID: "c2"}},
			func(t *testing.T, r records.Record) {
				if !r.Failed || !r.Refused || r.Fix == "" || r.Path == "" || r.Err == "" || r.Cause != enforce.CauseUnsafe {
					t.Errorf("want a refused remount with its path and fix: %+v", r)
				}
			}},
		{"remount failed", recordstest.Case{Fixture: recordstest.CRIGPU, Fail: true, Subject: enforce.Subject{ID: "c3"}},
			func(t *testing.T, r records.Record) {
				if !r.Failed || r.Refused || r.Cause != enforce.CauseError {
					t.Errorf("want a failed remount that was not refused: %+v", r)
				}
			}},
		{"no GPU", recordstest.Case{Fixture: recordstest.CRIPlain, Subject: enforce.Subject{ID: "c4"}},
			func(t *testing.T, r records.Record) {
				if r.GPU || r.Action != "none" || r.Failed {
					t.Errorf("want none without GPU: %+v", r)
				}
			}},
		{"set-size, NRI's subject", recordstest.Case{Fixture: recordstest.DockerGPU, Subject: enforce.Subject{ID: "c5", Name: "train", Pod: "ml/job-0", PodID: "p"}},
			func(t *testing.T, r records.Record) {
				if r.Action != "set-size" || !r.Changed || r.Pod.Namespace != "ml" || r.Pod.Name != "job-0" || r.Pod.Container != "train" {
					t.Errorf("want set-size in pod ml/job-0, container train: %+v", r)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, observed := recordstest.Run(t, tt.c)
			lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
			if len(lines) != 1 || len(observed) != 1 {
				t.Fatalf("%d lines, %d observed; want 1 each:\n%s", len(lines), len(observed), log)
			}
			parsed, ok, err := records.Parse(lines[0])
			if err != nil || !ok {
				t.Fatalf("Parse(%s) = %v, %v", lines[0], ok, err)
			}
			if parsed != observed[0] {
				t.Errorf("log and Observe disagree:\nlog     %+v\nobserve %+v", parsed, observed[0])
			}
			tt.want(t, parsed)
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		line    string
		ok, err bool
	}{
		{`{"msg":"planned /dev/shm","id":"x","action":"none"}`, true, false},
		{`{"msg":"could not size /dev/shm","id":"x","err":"boom"}`, true, false},
		{`{"msg":"host facts incomplete"}`, false, false},
		{`{"msg":"planned /dev/shm"`, false, true},
		{`plain text`, false, true},
	}
	for _, tt := range tests {
		_, ok, err := records.Parse([]byte(tt.line))
		if ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("Parse(%s) = %v, %v; want ok %v, error %v", tt.line, ok, err, tt.ok, tt.err)
		}
	}
}
