package compose

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

func TestRunMigrate(t *testing.T) {
	const gpu = "services:\n  trainer:\n    image: pytorch/pytorch\n    gpus: all\n"
	migrated := strings.Replace(gpu, "  trainer:\n", "  trainer:\n    shm_size: 8gb\n", 1)
	for _, tc := range []struct {
		name       string
		set        func(*MigrateRun)
		wantCode   int
		wantOut    string
		wantErr    string
		wantFile   string
		wantBackup bool
	}{
		{"the migrated file on stdout", func(*MigrateRun) {}, 0, migrated, "", gpu, false},
		{"--check", func(o *MigrateRun) { o.Check = true }, 1, "would add shm_size: 8gb", "1 file(s) would change", gpu, false},
		{"--write --backup", func(o *MigrateRun) { o.Write, o.Backup = true, true }, 0, "added shm_size: 8gb", "", migrated, true},
		{"--dry-run --write: a diff", func(o *MigrateRun) { o.Write, o.DryRun = true, true }, 0, "+    shm_size: 8gb", "", gpu, false},
		{"--backup alone", func(o *MigrateRun) { o.Backup = true }, 2, "", "--backup needs --write", gpu, false},
		{"--size 0", func(o *MigrateRun) { o.SizeFlag = "0" }, 2, "", "must be more than 0", gpu, false},
		{"a policy that cannot be read", func(o *MigrateRun) {
			o.LoadPolicy = func() (*policy.Policy, error) { return nil, errors.New("bad.toml") }
		}, 2, "", "bad.toml", gpu, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "compose.yaml")
			if err := os.WriteFile(file, []byte(gpu), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			o := MigrateRun{
				Options:    Options{Files: []string{file}},
				LoadPolicy: func() (*policy.Policy, error) { return policy.Default(), nil },
				Out:        &out, Err: &errOut,
			}
			tc.set(&o)
			err := RunMigrate(context.Background(), o)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d\n%s%s", got, err, tc.wantCode, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.wantOut)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v lacks %q", err, tc.wantErr)
			}
			if got, _ := os.ReadFile(file); string(got) != tc.wantFile {
				t.Errorf("compose.yaml is %q, want %q", got, tc.wantFile)
			}
			if _, err := os.Stat(file + ".bak"); (err == nil) != tc.wantBackup {
				t.Errorf("backup: %v, want %v", err == nil, tc.wantBackup)
			}
		})
	}
}
