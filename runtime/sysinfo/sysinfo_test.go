package sysinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemTotal(t *testing.T) {
	tests := []struct {
		name, meminfo string
		want          int64
		wantErr       string
	}{
		{"kernel format", "MemTotal:       24731272 kB\nMemFree:        23000000 kB\n", 24731272 * 1024, ""},
		{"not first", "MemFree: 1 kB\nMemTotal: 1024 kB\n", 1024 * 1024, ""},
		{"missing", "MemFree: 1 kB\n", 0, "no MemTotal line"},
		{"garbage", "MemTotal: lots kB\n", 0, `MemTotal "lots"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "meminfo")
			if err := os.WriteFile(p, []byte(tt.meminfo), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := memTotal(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("memTotal = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
	if n, err := MemTotal(); err != nil || n <= 0 {
		t.Errorf("MemTotal() = %d, %v on this host", n, err)
	}
}

func TestTmpfsSize(t *testing.T) {
	if n, err := TmpfsSize("/dev/shm"); err != nil || n <= 0 {
		t.Errorf("TmpfsSize(/dev/shm) = %d, %v", n, err)
	}
	if _, err := TmpfsSize("/"); err == nil || !strings.Contains(err.Error(), "not a tmpfs") {
		t.Errorf("TmpfsSize(/) error = %v", err)
	}
}
