package resize

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

func TestDescribeTarget(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{Engine: "docker", Container: "0123456789abcdef", Kind: HostTmpfs, Path: "/var/lib/docker/containers/0123/mounts/shm"},
			"docker container 0123456789ab, host tmpfs /var/lib/docker/containers/0123/mounts/shm"},
		{Target{Engine: "cri", Container: "3f2a", Kind: Namespace, Path: "/dev/shm", PID: 42},
			"cri container 3f2a, tmpfs /dev/shm in the mount namespace of pid 42"},
	} {
		if got := DescribeTarget(tc.t); got != tc.want {
			t.Errorf("DescribeTarget = %q, want %q", got, tc.want)
		}
	}
}

// TestRunRefusals: a bad size, a policy that cannot be read, a size above
// the policy's max and an engine that cannot be reached are exit 2, and
// nothing is printed.
func TestRunRefusals(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "docker.sock")
	defaults := func() (*policy.Policy, error) { return policy.Default(), nil }
	capped := func() (*policy.Policy, error) {
		p := policy.Default()
		p.Max = 10 * policy.GiB
		return p, nil
	}
	for _, tc := range []struct {
		name string
		o    RunOptions
		want string
	}{
		{"bad size", RunOptions{Size: "lots", LoadPolicy: defaults}, "SIZE"},
		{"bad policy", RunOptions{Size: "2g", LoadPolicy: func() (*policy.Policy, error) { return nil, errors.New("bad.toml") }}, "bad.toml"},
		{"above max", RunOptions{Size: "11g", LoadPolicy: capped}, "--force"},
		{"no dockerd", RunOptions{Size: "11g", Force: true, LoadPolicy: capped}, sock},
		{"no CRI endpoint", RunOptions{Size: "2g", CRI: true, Endpoint: "ftp://x", LoadPolicy: defaults}, "ftp://x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.o.Container, tc.o.Out = "trainer", &out
			tc.o.Getenv = func(k string) string { return map[string]string{"DOCKER_HOST": sock}[k] }
			err := Run(context.Background(), tc.o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}
