package nri

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// TestServeRefusals: what Serve refuses before it connects, exit 2; a
// policy that cannot be read is logged too.
func TestServeRefusals(t *testing.T) {
	defaults := func() (*policy.Policy, error) { return policy.Default(), nil }
	for _, tc := range []struct {
		name    string
		o       ServeOptions
		want    string
		wantLog string
	}{
		{"--dry-run", ServeOptions{DryRun: true, Name: DefaultName, Index: DefaultIndex, LoadPolicy: defaults}, "--dry-run", ""},
		{"a bad index", ServeOptions{Name: DefaultName, Index: "7", LoadPolicy: defaults}, "nri:", ""},
		{"a bad name", ServeOptions{Name: "gpu run", Index: DefaultIndex, LoadPolicy: defaults}, "nri:", ""},
		{"a bad policy", ServeOptions{Name: DefaultName, Index: DefaultIndex, LoadPolicy: func() (*policy.Policy, error) {
			return nil, errors.New("none.toml: no such file")
		}}, "none.toml", "cannot start the NRI plugin"},
		{"a bad metrics interval", ServeOptions{Name: DefaultName, Index: DefaultIndex, LoadPolicy: defaults}, "--metrics-interval", "cannot start the NRI plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			tc.o.Stderr, tc.o.Getenv = &log, func(string) string { return "" }
			if tc.name == "a bad metrics interval" {
				tc.o.Metrics.Address, tc.o.Metrics.Interval = "127.0.0.1:0", -1
			}
			err := Serve(context.Background(), tc.o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Serve: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
			if !strings.Contains(log.String(), tc.wantLog) {
				t.Errorf("log %q lacks %q", log.String(), tc.wantLog)
			}
		})
	}
}
