package shmprobe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
)

func TestPrint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        Result
		asJSON   bool
		wantCode int
	}{
		{"allocated", Result{Requested: 1 << 20, Allocated: 1 << 20}, false, 0},
		{"ENOSPC", Result{Requested: 1 << 30, Failure: FailureENOSPC, Err: "no space left on device"}, false, 1},
		{"setup, as JSON", Result{Failure: FailureSetup, Err: "no such directory"}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Print(&out, tc.r, tc.r.Failure, tc.asJSON)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Errorf("exit %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.wantCode != 0 && !strings.Contains(err.Error(), string(tc.r.Failure)) {
				t.Errorf("error %q does not name the failure %s", err, tc.r.Failure)
			}
			if tc.asJSON {
				var back Result
				if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Failure != tc.r.Failure {
					t.Errorf("JSON %q: %v", out.String(), err)
				}
			} else if out.String() != tc.r.String()+"\n" {
				t.Errorf("printed %q, want %q", out.String(), tc.r.String()+"\n")
			}
		})
	}
}
