package fullcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const composeGPU = "services:\n  trainer:\n    image: pytorch/pytorch\n    gpus: all\n  web:\n    image: nginx\n"

// composeProject writes a compose.yaml and an empty policy file into a new
// directory, makes it the working directory, and returns the --config
// arguments that pin the default policy.
func composeProject(t *testing.T, content string) (dir string, config []string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return dir, []string{"--config", cfg}
}

// composeShared is a GPU service anchored into a CPU variant.
const composeShared = "services:\n  trainer: &trainer\n    image: pytorch/pytorch\n" +
	"    deploy: {resources: {reservations: {devices: [{capabilities: [gpu]}]}}}\n" +
	"  trainer-cpu:\n    <<: *trainer\n    deploy: {}\n"

// sharedMigrated is composeShared migrated: the line in the shared mapping.
var sharedMigrated = strings.Replace(composeShared, "&trainer\n", "&trainer\n    shm_size: 8gb\n", 1)

func TestComposeMigrate(t *testing.T) {
	migrated := strings.Replace(composeGPU, "  trainer:\n", "  trainer:\n    shm_size: 8gb\n", 1)
	tests := []struct {
		name       string
		content    string
		args       []string
		wantCode   int
		wantOut    string // stdout contains
		wantErr    string // stderr contains
		wantFile   string // compose.yaml afterwards ("" = unchanged)
		wantBackup bool
	}{
		{name: "stdout", content: composeGPU, args: nil, wantCode: 0, wantOut: migrated},
		{name: "check: would change", content: composeGPU, args: []string{"--check"}, wantCode: 1,
			wantOut: "compose.yaml:2: service trainer: would add shm_size: 8gb", wantErr: "1 file(s) would change"},
		{name: "check: migrated", content: migrated, args: []string{"--check"}, wantCode: 0},
		{name: "diff", content: composeGPU, args: []string{"--diff"}, wantCode: 0, wantOut: "--- a/compose.yaml\n+++ b/compose.yaml\n@@ -1,5 +1,6 @@\n services:\n   trainer:\n+    shm_size: 8gb\n"},
		{name: "write with backup", content: composeGPU, args: []string{"--write", "--backup"}, wantCode: 0,
			wantOut: "service trainer: added shm_size: 8gb", wantFile: migrated, wantBackup: true},
		{name: "dry-run write shows the diff", content: composeGPU, args: []string{"--dry-run", "--write"}, wantCode: 0, wantOut: "+    shm_size: 8gb"},
		{name: "--size", content: composeGPU, args: []string{"--size", "16gb", "--write"}, wantCode: 0,
			wantFile: strings.Replace(composeGPU, "  trainer:\n", "  trainer:\n    shm_size: 16gb\n", 1)},
		{name: "--size in Kubernetes units", content: composeGPU, args: []string{"--size", "2Gi"}, wantCode: 0, wantOut: "shm_size: 2gb"},
		{name: "bad --size", content: composeGPU, args: []string{"--size", "lots"}, wantCode: 2, wantErr: "--size lots"},
		{name: "--backup without --write", content: composeGPU, args: []string{"--backup"}, wantCode: 2, wantErr: "--backup needs --write"},
		{name: "two modes", content: composeGPU, args: []string{"--check", "--diff"}, wantCode: 2, wantErr: "none of the others"},
		{name: "syntax error", content: "services:\n  trainer: [x\n", args: []string{"--write"}, wantCode: 2, wantErr: "compose.yaml:3:1: did not find expected ',' or ']'"},
		{name: "not compose", content: "kind: Pod\n", args: []string{"--check"}, wantCode: 2, wantErr: "compose.yaml:1:1: not a compose file"},
		{name: "shared anchor: the CPU variant inherits, named on stderr", content: composeShared, args: nil, wantCode: 0,
			wantOut: sharedMigrated, wantErr: "gpurun: note: compose.yaml:5: service trainer-cpu: not a GPU service, but it shares the mapping of trainer (compose.yaml:2) and inherits the shm_size 8gb added there: harmless, a tmpfs reserves no memory"},
		{name: "shared anchor, check", content: composeShared, args: []string{"--check"}, wantCode: 1,
			wantOut: "compose.yaml:5: service trainer-cpu: would inherit shm_size: 8gb", wantErr: "1 file(s) would change"},
		{name: "shared anchor, write", content: composeShared, args: []string{"--write"}, wantCode: 0,
			wantOut: "compose.yaml:2: service trainer: added shm_size: 8gb (GPU container (deploy.resources.reservations.devices: capabilities [gpu]): no memory limit, so the policy's compose default 8GiB; trainer-cpu (not a GPU service) inherits", wantFile: sharedMigrated},
		{name: "shared anchor, --strict-shared: a warning, nothing written", content: composeShared, args: []string{"--strict-shared", "--write"}, wantCode: 0,
			wantErr: "warning: compose.yaml:2: service trainer: its mapping (compose.yaml:2) is shared: a shm_size line there would also change trainer-cpu, which is not a GPU service (--strict-shared)"},
		{name: "shared anchor, --strict-shared --check fails on the hand edit", content: composeShared, args: []string{"--strict-shared", "--check"}, wantCode: 1,
			wantErr: "compose migrate --check: 1 GPU service(s) need shm_size added by hand"},
		{name: "shared anchor migrated, --strict-shared --check", content: sharedMigrated, args: []string{"--strict-shared", "--check"}, wantCode: 0},
		{name: "warnings on stderr", content: "services:\n  t:\n    image: x\n    gpus: all\n    ipc: host\n    shm_size: 1g\n", args: nil, wantCode: 0,
			wantErr: "warning: compose.yaml:2: service t: shm_size: 1g has no effect with ipc: host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, cfg := composeProject(t, tt.content)
			args := append(append([]string{"compose", "migrate"}, cfg...), tt.args...)
			stdout, stderr, code := execute(t, args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.wantOut) {
				t.Errorf("stdout %q does not contain %q", stdout, tt.wantOut)
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.wantErr)
			}
			got, _ := os.ReadFile(filepath.Join(dir, "compose.yaml"))
			want := tt.wantFile
			if want == "" {
				want = tt.content
			}
			if string(got) != want {
				t.Errorf("compose.yaml is\n%q\nwant\n%q", got, want)
			}
			_, err := os.Stat(filepath.Join(dir, "compose.yaml.bak"))
			if (err == nil) != tt.wantBackup {
				t.Errorf("backup exists: %v, want %v", err == nil, tt.wantBackup)
			}
		})
	}
}

func TestComposeMigrateJSON(t *testing.T) {
	_, cfg := composeProject(t, composeGPU)
	stdout, stderr, code := execute(t, append(append([]string{"compose", "migrate"}, cfg...), "--json", "--check")...)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var reports []map[string]any
	if err := json.Unmarshal([]byte(stdout), &reports); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, stdout)
	}
	if len(reports) != 2 {
		t.Fatalf("%d reports, want 2: %s", len(reports), stdout)
	}
	tr := reports[0]
	if tr["service"] != "trainer" || tr["action"] != "add" || tr["size"] != "8gb" || tr["size_bytes"] != float64(8<<30) ||
		tr["gpu"] != true || tr["file"] != "compose.yaml" || tr["reason"] == "" {
		t.Errorf("trainer report = %v", tr)
	}
	if ev, _ := tr["evidence"].([]any); len(ev) != 1 || ev[0] != "gpus: all" {
		t.Errorf("trainer evidence = %v", tr["evidence"])
	}
	if web := reports[1]; web["service"] != "web" || web["action"] != "none" || web["gpu"] != false {
		t.Errorf("web report = %v", web)
	}
}

// TestComposeMigratePaths: several projects at once; stdout separates the
// files.
func TestComposeMigratePaths(t *testing.T) {
	dir, cfg := composeProject(t, composeGPU)
	if err := os.MkdirAll(filepath.Join(dir, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b", "docker-compose.yml"), []byte(composeGPU), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := execute(t, append(append([]string{"compose", "migrate"}, cfg...), ".")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"==> compose.yaml <==\n", "==> " + filepath.Join("b", "docker-compose.yml") + " <==\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Count(stdout, "shm_size: 8gb") != 2 {
		t.Errorf("want two added lines:\n%s", stdout)
	}
}
