package sysinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// TestGPUCount counts device nodes the way a container's are counted: by
// family, the largest, control nodes and plain files left out.
func TestGPUCount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: device nodes cannot be made, only the empty and missing cases run")
	}
	tests := []struct {
		name  string
		nodes []string // device nodes to make (root only)
		files []string // plain files
		want  int
	}{
		{"missing dir", nil, nil, 0},
		{"plain files are no devices", nil, []string{"nvidia0", "dri/renderD128"}, 0},
		{"nvidia", []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}, nil, 2},
		{"render nodes beside kfd", []string{"kfd", "dri/renderD128", "dri/renderD129", "dri/card0"}, nil, 2},
		{"largest family", []string{"nvidia0", "dri/renderD128", "dri/renderD129", "dri/renderD130"}, nil, 3},
		{"accel", []string{"accel/accel0"}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.nodes) > 0 && os.Geteuid() != 0 {
				return
			}
			dev := filepath.Join(t.TempDir(), "dev")
			if tt.name == "missing dir" {
				dev = filepath.Join(dev, "nope")
			}
			for i, n := range tt.nodes {
				p := filepath.Join(dev, n)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, uint32(3+i)))); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tt.files {
				p := filepath.Join(dev, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := GPUCount(dev)
			if err != nil || got != tt.want {
				t.Errorf("GPUCount = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
