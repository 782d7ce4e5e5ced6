package fullcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDoctorFlags(t *testing.T) {
	tests := []struct {
		args   []string
		wantIn string
	}{
		{[]string{"doctor", "--host", "--container"}, "exclude each other"},
		{[]string{"doctor", "--container", "--host-root", "/x"}, "do not go with --container"},
		{[]string{"doctor", "trainer", "--host"}, "CONTAINER does not go with"},
		{[]string{"doctor", "--cri"}, "--cri needs a CRI container id"},
		{[]string{"doctor", "--container", "--probe", "lots"}, `--probe "lots"`},
		{[]string{"doctor", "--host", "--probe", "1g"}, "--probe allocates in a container"},
		{[]string{"doctor", "a", "b"}, "accepts at most 1 arg"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, stderr, code := execute(t, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.wantIn) {
				t.Errorf("exit %d, %q; want 2 and %q", code, stderr, tt.wantIn)
			}
		})
	}
}

// TestDoctorHostRoot runs doctor over a host root holding a daemon.json,
// and checks the exit status and the JSON it prints.
func TestDoctorHostRoot(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	t.Setenv("GPURUN_CONFIG", "")
	tests := []struct {
		name       string
		daemonJSON string
		wantCode   int
		wantStatus string
	}{
		{"gpurun not installed", `{"default-shm-size": "2g"}`, 0, "warn"},
		{"broken daemon.json", "{\n  \"runtimes\": {\n", 1, "problem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"etc/docker", "dev/shm"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(root, "etc", "docker", "daemon.json"), []byte(tt.daemonJSON), 0o644); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := execute(t, "doctor", "--host-root", root, "--json")
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tt.wantCode, stdout, stderr)
			}
			var r struct {
				Mode     string `json:"mode"`
				ExitCode int    `json:"exit_code"`
				Checks   []struct {
					Name   string `json:"name"`
					Status string `json:"status"`
					Detail string `json:"detail"`
				} `json:"checks"`
			}
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, stdout)
			}
			if r.Mode != "host" || r.ExitCode != code {
				t.Errorf("mode %s exit_code %d, exit %d", r.Mode, r.ExitCode, code)
			}
			found := false
			for _, c := range r.Checks {
				if c.Name == "docker.config" {
					found = true
					if !strings.Contains(c.Detail, "/etc/docker/daemon.json") {
						t.Errorf("docker.config %q names no node path", c.Detail)
					}
				}
				if c.Name == "docker.runtime" && tt.wantStatus == "warn" && c.Status != "warn" {
					t.Errorf("docker.runtime %s: %s", c.Status, c.Detail)
				}
				if c.Name == "docker.config" && tt.wantStatus == "problem" && c.Status != "problem" {
					t.Errorf("docker.config %s: %s", c.Status, c.Detail)
				}
			}
			if !found {
				t.Errorf("no docker.config check: %s", stdout)
			}
		})
	}
}
