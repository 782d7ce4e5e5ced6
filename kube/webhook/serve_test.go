package webhook

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

// TestServeRefusals: options that do not go together, a policy or a
// serving pair that cannot be read: exit 2, before anything listens.
func TestServeRefusals(t *testing.T) {
	defaults := func() (*policy.Policy, error) { return policy.Default(), nil }
	missing := filepath.Join(t.TempDir(), "tls.crt")
	for _, tc := range []struct {
		name string
		o    ServeOptions
		want string
	}{
		{"--dry-run", ServeOptions{DryRun: true, SelfSigned: true}, "--dry-run does not apply"},
		{"both kinds of TLS", ServeOptions{SelfSigned: true, CertFile: "c", KeyFile: "k"}, "exclude each other"},
		{"a cert without its key", ServeOptions{CertFile: "c"}, "go together"},
		{"no TLS", ServeOptions{}, "give --tls-cert-file and --tls-key-file, or --self-signed"},
		{"a policy that cannot be read", ServeOptions{CertFile: missing, KeyFile: missing,
			LoadPolicy: func() (*policy.Policy, error) { return nil, errors.New("bad.toml") }}, "bad.toml"},
		{"a pair that cannot be read", ServeOptions{CertFile: missing, KeyFile: missing, LoadPolicy: defaults}, missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Listen, tc.o.Log = "127.0.0.1:0", &bytes.Buffer{}
			err := Serve(context.Background(), tc.o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Serve: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
		})
	}
}
