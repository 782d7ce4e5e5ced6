package exporter

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/observe/shmstats"
)

func TestNodeOptionsNew(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name     string
		o        NodeOptions
		wantNil  bool
		wantCode int
	}{
		{"nothing asked", NodeOptions{Interval: -1}, true, 0},
		{"a bad interval", NodeOptions{Address: "127.0.0.1:0", Interval: 0}, true, 2},
		{"a bad address", NodeOptions{Address: "256.0.0.1:x", Interval: 1}, true, 2},
		{"metrics", NodeOptions{Address: "127.0.0.1:0", Interval: 1, Containerd: []string{"/run/x"}}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, err := tc.o.New(shmstats.Options{}, "", log)
			if exitcode.Of(err) != tc.wantCode || (exp == nil) != tc.wantNil {
				t.Fatalf("New: %v, %v (exit %d); want nil %v, exit %d", exp, err, exitcode.Of(err), tc.wantNil, tc.wantCode)
			}
			if exp != nil {
				if got := exp.o.Stats.Containerd; len(got) != 1 || got[0] != "/run/x" {
					t.Errorf("containerd state dirs %q", got)
				}
				exp.ln.Close()
			}
		})
	}
}

// TestRunBeside: without an exporter fn runs alone; with one, the
// exporter stops when fn returns, and fn's error is the result.
func TestRunBeside(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	boom := errors.New("boom")
	if err := RunBeside(context.Background(), nil, log, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("no exporter: %v", err)
	}
	exp, err := NodeOptions{Address: "127.0.0.1:0", Interval: 1 << 40}.New(shmstats.Options{Docker: "none", Containerd: []string{}, Podman: []string{}}, "", log)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := RunBeside(context.Background(), exp, log, func(ctx context.Context) error { ran = ctx.Err() == nil; return boom }); !errors.Is(err, boom) || !ran {
		t.Errorf("with an exporter: %v, ran %v", err, ran)
	}
}
