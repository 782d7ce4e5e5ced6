package dockerapi

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/client"
)

func TestResolveEndpoint(t *testing.T) {
	dir := t.TempDir()
	writeContext := func(name, host string) {
		sum := sha256.Sum256([]byte(name))
		meta := filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]))
		if err := os.MkdirAll(meta, 0o755); err != nil {
			t.Fatal(err)
		}
		data := `{"Name":"` + name + `","Metadata":{},"Endpoints":{"docker":{"Host":"` + host + `","SkipTLSVerify":false}}}`
		if err := os.WriteFile(filepath.Join(meta, "meta.json"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeContext("gpu-box", "ssh://gpu-box")
	writeContext("remote", "tcp://10.0.0.1:2376")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"currentContext":"remote"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"DOCKER_HOST wins", map[string]string{"DOCKER_HOST": "unix:///x.sock", "DOCKER_CONTEXT": "gpu-box", "DOCKER_CONFIG": dir}, "unix:///x.sock", ""},
		{"DOCKER_CONTEXT", map[string]string{"DOCKER_CONTEXT": "gpu-box", "DOCKER_CONFIG": dir}, "ssh://gpu-box", ""},
		{"currentContext", map[string]string{"DOCKER_CONFIG": dir}, "tcp://10.0.0.1:2376", ""},
		{"default context", map[string]string{"DOCKER_CONTEXT": "default", "DOCKER_CONFIG": dir}, client.DefaultDockerHost, ""},
		{"no config at all", map[string]string{"DOCKER_CONFIG": t.TempDir()}, client.DefaultDockerHost, ""},
		{"unknown context", map[string]string{"DOCKER_CONTEXT": "nope", "DOCKER_CONFIG": dir}, "", `docker context "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, err := ResolveEndpoint(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || ep.Host != tt.want {
				t.Errorf("ResolveEndpoint = %+v, %v; want %s", ep, err, tt.want)
			}
		})
	}
}

// TestCLITLS: TLS only with --tls or --tlsverify (DOCKER_TLS,
// DOCKER_TLS_VERIFY), verifying only with the latter; a certificate file
// named by its flag must exist, a default one may be missing.
func TestCLITLS(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		env      map[string]string
		files    TLSFiles
		tls      bool
		insecure bool
		wantErr  bool
	}{
		{env: map[string]string{}},
		{env: map[string]string{"DOCKER_CONFIG": dir}, files: TLSFiles{CACert: "/nonexistent/ca.pem"}},
		{env: map[string]string{"DOCKER_TLS": "1", "DOCKER_CONFIG": dir}, tls: true, insecure: true},
		{env: map[string]string{"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": dir}, tls: true},
		{env: map[string]string{"DOCKER_TLS_VERIFY": "1", "DOCKER_CONFIG": dir}, files: TLSFiles{CACert: "/nonexistent/ca.pem"}, wantErr: true},
	}
	for i, tt := range tests {
		cfg, err := cliTLS(func(k string) string { return tt.env[k] }, tt.files)
		if (err != nil) != tt.wantErr || (cfg != nil) != tt.tls || (cfg != nil && cfg.InsecureSkipVerify != tt.insecure) {
			t.Errorf("%d %v %+v: cfg %v err %v", i, tt.env, tt.files, cfg != nil, err)
		}
	}
}
