package records_test

import (
	"bytes"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/records/recordstest"
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
			if parsed.Time.IsZero() {
				t.Errorf("Parse(%s): no time", lines[0])
			}
			// Only the log has a time: the rest must agree.
			parsed.Time = time.Time{}
			if !reflect.DeepEqual(parsed, observed[0]) {
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

// sweepLine writes one record as node/enforce's slog JSON handler
// writes it (the log_file's format), with the sweep fields the front doors
// add when a restarted container's /dev/shm is swept.
func sweepLine(t *testing.T, msg string, sweep []any) []byte {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)).With("component", "gpurun-runtime")
	args := []any{"id", "c2", "bundle", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/c2",
		"k8s_namespace", "ml", "k8s_pod", "job-0", "k8s_uid", "0b5c", "k8s_container", "trainer",
		"action", "remount", "size_bytes", int64(8 << 30), "current_bytes", int64(8 << 30), "gpu", true, "reason", "GPU container", "changed", false}
	if msg == enforce.MsgFailed {
		args = append(args, "err", "remount refused", "cause", enforce.CauseUnsafe, "refused", true)
		log.Error(msg, append(args, sweep...)...)
	} else {
		log.Info(msg, append(args, sweep...)...)
	}
	return bytes.TrimSpace(buf.Bytes())
}

// TestParseSweep: the sweep fields of both record messages become
// Record.Sweep; a record without them has a zero Sweep.
func TestParseSweep(t *testing.T) {
	full := []any{"sweep_path", "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/84f2/shm",
		"swept_bytes", int64(700 << 20), "swept_files", 12,
		"swept_names", []string{"/dev/shm/nccl-shm-a", "/dev/shm/torch_123"},
		"kept_bytes", int64(3 << 20), "kept_files", 3}
	want := records.Sweep{Path: "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/84f2/shm", Bytes: 700 << 20, Files: 12,
		Names: []string{"/dev/shm/nccl-shm-a", "/dev/shm/torch_123"}, KeptBytes: 3 << 20, KeptFiles: 3}
	failedSweep := []any{"sweep_path", "/run/x/shm", "swept_bytes", int64(4096), "swept_files", 1,
		"swept_names", []string{"/dev/shm/a"}, "sweep_err", "unlink /dev/shm/b: permission denied"}
	for _, tc := range []struct {
		name  string
		msg   string
		sweep []any
		want  records.Sweep
	}{
		{"planned, swept", enforce.MsgPlanned, full, want},
		{"failed plan, swept", enforce.MsgFailed, full, want},
		{"planned, no sweep fields", enforce.MsgPlanned, nil, records.Sweep{}},
		{"failed plan, no sweep fields", enforce.MsgFailed, nil, records.Sweep{}},
		{"a sweep that failed half-way", enforce.MsgPlanned, failedSweep,
			records.Sweep{Path: "/run/x/shm", Bytes: 4096, Files: 1, Names: []string{"/dev/shm/a"}, Err: "unlink /dev/shm/b: permission denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := sweepLine(t, tc.msg, tc.sweep)
			r, ok, err := records.Parse(line)
			if err != nil || !ok {
				t.Fatalf("Parse(%s) = %v, %v", line, ok, err)
			}
			if !reflect.DeepEqual(r.Sweep, tc.want) {
				t.Errorf("sweep %+v, want %+v\n%s", r.Sweep, tc.want, line)
			}
			if r.Sweep.Swept() != (tc.want.Bytes > 0) || r.Failed != (tc.msg == enforce.MsgFailed) || r.Pod.Container != "trainer" {
				t.Errorf("record %+v", r)
			}
		})
	}
}
