package nri

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
		{"what runs beside it cannot start", ServeOptions{Name: DefaultName, Index: DefaultIndex, LoadPolicy: defaults, Beside: func(*policy.Policy, *slog.Logger) (Beside, error) {
			return Beside{}, exitcode.New(2, errors.New("--metrics-interval -1s: want a positive duration"))
		}}, "--metrics-interval", "cannot start the NRI plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			tc.o.Stderr, tc.o.Getenv = &log, func(string) string { return "" }
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
