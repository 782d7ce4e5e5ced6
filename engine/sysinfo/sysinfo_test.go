package sysinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/oci"
)

// MemTotal is the MemTotal line of /proc/meminfo, in bytes.
func TestMemTotal(t *testing.T) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var kib int64
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			if kib, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err != nil {
				t.Fatalf("MemTotal line %q: %v", line, err)
			}
		}
	}
	if kib == 0 {
		t.Fatal("no MemTotal line in /proc/meminfo")
	}
	if n, err := MemTotal(); err != nil || n != kib*1024 {
		t.Errorf("MemTotal() = %d, %v; /proc/meminfo says %d", n, err, kib*1024)
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
		// More names than one getdents(2) buffer holds, GPU nodes among them.
		{"a /dev of many entries", []string{"nvidia0", "nvidia1", "nvidia2"}, manyNames(600), 3},
		{"a directory named as a node is no device", nil, []string{"nvidia0/x"}, 0},
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

// manyNames returns n plain file names of /dev's usual kind.
func manyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("tty%04d-with-a-longer-name", i)
	}
	return names
}

// TestGPUCountErrors: a dev dir that cannot be listed is an error, not a
// host without GPUs.
func TestGPUCountErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := GPUCount(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("GPUCount(a file) = %d, %v; want an error naming %s", n, err, file)
	}
}

// oci.MayBeDeviceNode, GPUCount's filter, lets through every name
// ClassifyDevice counts, in each of the dirs GPUCount reads: this host's
// and the GPU nodes of every vendor.
func TestMayBeDeviceNode(t *testing.T) {
	names := []string{"nvidia0", "nvidia15", "nvidiactl", "nvidia-uvm", "nvidia-caps", "renderD128", "renderD129", "card0", "card1",
		"accel0", "accel12", "kfd", "hidraw0", "tty0", "null", "dri", "accel", "nvme0n1"}
	for _, dir := range oci.DeviceDirs() {
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				names = append(names, e.Name())
			}
		}
	}
	for _, dir := range oci.DeviceDirs() {
		for _, name := range names {
			if oci.ClassifyDevice(filepath.Join(dir, name)).GPU && !oci.MayBeDeviceNode(name) {
				t.Errorf("%s counts as a GPU but MayBeDeviceNode(%q) is false", filepath.Join(dir, name), name)
			}
		}
	}
}
