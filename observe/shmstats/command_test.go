package shmstats

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// TestRunRefusals: a bad interval, no root and a policy that cannot be
// read are exit 2, before anything is read.
func TestRunRefusals(t *testing.T) {
	root := func() int { return 0 }
	defaults := func() (*policy.Policy, error) { return policy.Default(), nil }
	for _, tc := range []struct {
		name string
		o    RunOptions
		want string
	}{
		{"interval 0", RunOptions{Geteuid: root, LoadPolicy: defaults}, "--interval 0s"},
		{"not root", RunOptions{Interval: 1, Geteuid: func() int { return 1000 }, LoadPolicy: defaults}, "run it as root"},
		{"bad policy", RunOptions{Interval: 1, Geteuid: root, LoadPolicy: func() (*policy.Policy, error) { return nil, errors.New("bad.toml") }}, "bad.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.o.Out, tc.o.Err = &out, &out
			tc.o.Serve = func(context.Context, Options) error { t.Error("served"); return nil }
			err := Run(context.Background(), tc.o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
		})
	}
}

// TestRunServe: with Serve set, Run hands it the options it set up (the
// policy, peaks, specs with --watch) instead of printing.
func TestRunServe(t *testing.T) {
	pol := policy.Default()
	var got Options
	var out bytes.Buffer
	err := Run(context.Background(), RunOptions{
		Options: Options{HostRoot: "/host"}, Interval: 1, Watch: true,
		Geteuid: func() int { return 0 }, LoadPolicy: func() (*policy.Policy, error) { return pol, nil },
		Serve: func(_ context.Context, o Options) error { got = o; return nil },
		Out:   &out, Err: &out,
	})
	if err != nil || got.HostRoot != "/host" || got.Policy != pol || got.Peaks == nil || got.Specs == nil || out.Len() != 0 {
		t.Errorf("Run: %v; served %+v; printed %q", err, got, out.String())
	}
}
