package doctor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// mountinfo lines for the cgroup tests (cgroup v2 ones written from the
// kernel's cgroup-v2 documentation; the v1 ones are in the captures).
const (
	mountCgroup2   = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
	mountV1Memory  = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mountV1CPU     = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
	mountV2Unified = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)

func TestCgroup(t *testing.T) {
	const v1NoLimit = "9223372036854771712\n"
	tests := []struct {
		name        string
		capture     string // a captured container, or "" for the files below
		mountinfo   string
		cgroup      string
		files       map[string]string
		wantVersion int
		wantLimit   int64
		wantQuota   float64
	}{
		{"v1 container, --memory 2g (captured)", "docker-memory-2g", "", "", nil, 1, 2 * policy.GiB, 0},
		{"v1 container, no limit (captured)", "docker-default", "", "", nil, 1, 0, 0},
		{"v2 container (cgroup namespace)", "", mountCgroup2, "0::/\n",
			map[string]string{"/sys/fs/cgroup/memory.max": "4294967296\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 2, 4 * policy.GiB, 1.5},
		{"v2 container without limits", "", mountCgroup2, "0::/\n",
			map[string]string{"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/cpu.max": "max 100000\n"}, 2, 0, 0},
		{"v2 on a node: the pod's limit is the smallest on the chain", "", mountCgroup2, "0::/kubepods.slice/pod1.slice/cri-containerd-abc.scope\n",
			map[string]string{
				"/sys/fs/cgroup/kubepods.slice/pod1.slice/cri-containerd-abc.scope/memory.max": "max\n",
				"/sys/fs/cgroup/kubepods.slice/pod1.slice/memory.max":                          "8589934592\n",
				"/sys/fs/cgroup/kubepods.slice/memory.max":                                     "68719476736\n",
			}, 2, 8 * policy.GiB, 0},
		{"v1 on a host: a parent's limit counts", "", mountV1Memory + mountV1CPU, "5:cpu,cpuacct:/a/b\n4:memory:/a/b\n",
			map[string]string{
				"/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes":  v1NoLimit,
				"/sys/fs/cgroup/memory/a/memory.limit_in_bytes":    "1073741824\n",
				"/sys/fs/cgroup/memory/memory.limit_in_bytes":      v1NoLimit,
				"/sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us":  "200000\n",
				"/sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us": "100000\n",
			}, 1, policy.GiB, 2},
		{"hybrid: the memory controller is v1", "", mountV1Memory + mountV2Unified, "4:memory:/\n0::/\n",
			map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, 1, 512 * policy.MiB, 0},
		{"a path outside the mounted root falls back to the mount", "", strings.Replace(mountV1Memory, " / /sys", " /docker/abc /sys", 1), "4:memory:/other\n",
			map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n"}, 1, 256 * policy.MiB, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			if tt.capture != "" {
				f.loadCapture(tt.capture)
			} else {
				f.write("/proc/self/mountinfo", tt.mountinfo)
				f.write("/proc/self/cgroup", tt.cgroup)
				for p, c := range tt.files {
					f.write(p, c)
				}
			}
			sys := f.system()
			ms, err := sys.mounts()
			if err != nil {
				t.Fatal(err)
			}
			cg, err := sys.cgroup(ms)
			if err != nil {
				t.Fatal(err)
			}
			if cg.Version != tt.wantVersion || cg.MemoryLimit != tt.wantLimit || cg.CPUQuota != tt.wantQuota {
				t.Errorf("got v%d limit %d (%s) quota %g; want v%d limit %d quota %g", cg.Version, cg.MemoryLimit, cg.LimitFile, cg.CPUQuota, tt.wantVersion, tt.wantLimit, tt.wantQuota)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fakeSystem)
		want    bool
		wantEvi string
	}{
		{"own PID namespace", func(f *fakeSystem) { f.namespaces(containerPIDNS, containerIPCNS) }, true, "own PID namespace"},
		{"host with /.dockerenv (a machine built from an image)", func(f *fakeSystem) {
			f.namespaces(hostPIDNS, hostIPCNS)
			f.write("/.dockerenv", "")
			f.write("/proc/self/mountinfo", mountV1Memory)
		}, false, "/.dockerenv ignored there"},
		{"--pid host container: the engine's /etc/hostname", func(f *fakeSystem) {
			f.namespaces(hostPIDNS, hostIPCNS)
			f.copyFile(filepath.Join("testdata", "containers", "docker-default", "mountinfo"), "/proc/self/mountinfo")
		}, true, "/etc/hostname bound by the engine"},
		{"no namespace links, /.dockerenv", func(f *fakeSystem) { f.write("/.dockerenv", "") }, true, "/.dockerenv"},
		{"no namespace links, Kubernetes env", func(f *fakeSystem) { f.env["KUBERNETES_SERVICE_HOST"] = "10.0.0.1" }, true, "KUBERNETES_SERVICE_HOST"},
		{"no namespace links, PID 1 in a kubepods cgroup", func(f *fakeSystem) { f.write("/proc/1/cgroup", "4:memory:/kubepods/burstable/pod1/abc\n") }, true, "kubepods cgroup"},
		{"no namespace links, PID 1 systemd", func(f *fakeSystem) { f.write("/proc/1/comm", "systemd\n") }, false, "PID namespace unknown"},
		{"no namespace links, PID 1 a program", func(f *fakeSystem) { f.write("/proc/1/comm", "python3\n") }, true, "PID 1 is python3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			tt.setup(f)
			w := Detect(f.system())
			if w.Container != tt.want || !strings.Contains(strings.Join(w.Evidence, "; "), tt.wantEvi) {
				t.Errorf("container %v %q; want %v with %q", w.Container, w.Evidence, tt.want, tt.wantEvi)
			}
		})
	}
}
