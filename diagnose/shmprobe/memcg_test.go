//go:build linux

package shmprobe

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// fakeRoots writes files under a temporary /proc and /sys and returns both.
func fakeRoots(t *testing.T, files map[string]string) (procRoot, sysRoot string) {
	t.Helper()
	base := t.TempDir()
	for name, body := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(base, "proc"), filepath.Join(base, "sys")
}

func TestMemoryHeadroom(t *testing.T) {
	const mib = policy.MiB
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) + "\n" }
	tests := []struct {
		name   string
		files  map[string]string
		want   int64
		wantOK bool
	}{
		{"v2 container", map[string]string{
			"proc/self/cgroup":                 "0::/\n",
			"sys/fs/cgroup/memory.max":         itoa(512 * mib),
			"sys/fs/cgroup/memory.current":     itoa(200 * mib),
			"sys/fs/cgroup/memory.stat":        "anon 100\ninactive_file " + itoa(50*mib),
			"sys/fs/cgroup/memory.swap.max":    "max\n",
			"sys/fs/cgroup/cgroup.controllers": "memory\n",
		}, 512*mib - 150*mib, true},
		{"v2 no limit", map[string]string{
			"proc/self/cgroup":             "0::/\n",
			"sys/fs/cgroup/memory.max":     "max\n",
			"sys/fs/cgroup/memory.current": itoa(200 * mib),
		}, 0, false},
		{"v2 host root has no memory.max", map[string]string{
			"proc/self/cgroup":             "0::/\n",
			"sys/fs/cgroup/memory.current": itoa(200 * mib),
		}, 0, false},
		{"v2 pod limit tighter than the container's", map[string]string{
			"proc/self/cgroup":                               "0::/kubepods/pod1/ctr\n",
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max":     itoa(4096 * mib),
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.current": itoa(100 * mib),
			"sys/fs/cgroup/kubepods/pod1/memory.max":         itoa(1024 * mib),
			"sys/fs/cgroup/kubepods/pod1/memory.current":     itoa(300 * mib),
		}, 724 * mib, true},
		{"v1 container, host path not mounted", map[string]string{
			"proc/self/cgroup":                           "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": itoa(2048 * mib),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": itoa(1000 * mib),
			"sys/fs/cgroup/memory/memory.stat":           "cache 1\ntotal_inactive_file " + itoa(200*mib),
		}, 2048*mib - 800*mib, true},
		{"v1 unlimited", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": itoa(1000 * mib),
		}, 0, false},
		{"no /proc/self/cgroup", map[string]string{}, 0, false},
		{"garbage", map[string]string{
			"proc/self/cgroup":             "0::/\n",
			"sys/fs/cgroup/memory.max":     "lots\n",
			"sys/fs/cgroup/memory.current": itoa(1),
		}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := memoryHeadroom(fakeRoots(t, tt.files))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("memoryHeadroom = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// Check does not try what the caller's memory cgroup cannot hold.
func TestCheckMemoryLimit(t *testing.T) {
	proc, sys := fakeRoots(t, map[string]string{
		"proc/self/cgroup":             "0::/\n",
		"sys/fs/cgroup/memory.max":     "67108864\n",
		"sys/fs/cgroup/memory.current": "16777216\n",
	})
	room := int64(67108864 - 16777216)
	dir := t.TempDir()
	if r := check(dir, room+1, proc, sys); r.Failure != FailureMemory || r.Allocated != 0 || ExitStatus(r.Failure) != 1 ||
		!strings.Contains(r.Err, policy.FormatSize(room)) {
		t.Errorf("check(room+1) = %+v", r)
	}
	if r := check(dir, room, proc, sys); !r.OK() || r.Allocated != room {
		t.Errorf("check(room) = %+v", r)
	}
	assertEmpty(t, dir)
}
