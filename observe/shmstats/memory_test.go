package shmstats

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

var updateStats = flag.Bool("update-stats", false, "rewrite the golden files under observe/shmstats/testdata")

// cgroupTree is a fake node: /proc/<pid>/cgroup files and a cgroup
// filesystem, in a temporary directory.
type cgroupTree struct {
	t                testing.TB
	proc, cgroupRoot string
}

func newCgroupTree(t testing.TB) *cgroupTree {
	dir := t.TempDir()
	return &cgroupTree{t: t, proc: filepath.Join(dir, "proc"), cgroupRoot: filepath.Join(dir, "sys", "fs", "cgroup")}
}

func (c *cgroupTree) write(p, content string) {
	c.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// proc writes /proc/<pid>/cgroup.
func (c *cgroupTree) procCgroup(pid, content string) {
	c.write(filepath.Join(c.proc, pid, "cgroup"), content)
}

// file writes a file of a cgroup (a hierarchy path) under the hierarchy
// at sub ("memory" for v1, "" for v2).
func (c *cgroupTree) file(sub, cg, name, content string) {
	c.write(filepath.Join(c.cgroupRoot, sub, cg, name), content)
}

// v1 writes a v1 memory cgroup: its limit ("" for none: the kernel's
// maximum), usage, memory.stat and oom_control (oomKill < 0: a kernel
// before 4.13, without the line).
func (c *cgroupTree) v1(cg string, limit string, usage, inactiveFile, shmem, oomKill int64) {
	if limit == "" {
		limit = "9223372036854771712"
	}
	c.file("memory", cg, "memory.limit_in_bytes", limit+"\n")
	if usage < 0 {
		return // a cgroup above: its limit only
	}
	c.file("memory", cg, "memory.usage_in_bytes", itoa64(usage)+"\n")
	c.file("memory", cg, "memory.stat", "cache 1\nrss 2\nshmem 0\ninactive_file 0\nhierarchical_memory_limit 1\ntotal_cache 5\ntotal_rss 6\ntotal_shmem "+itoa64(shmem)+"\ntotal_inactive_file "+itoa64(inactiveFile)+"\n")
	oc := "oom_kill_disable 0\nunder_oom 0\n"
	if oomKill >= 0 {
		oc += "oom_kill " + itoa64(oomKill) + "\n"
	}
	c.file("memory", cg, "memory.oom_control", oc)
}

// v2 writes a v2 cgroup: memory.max ("max" for none), memory.current,
// memory.stat and memory.events.
func (c *cgroupTree) v2(cg string, limit string, usage, inactiveFile, shmem, oomKill int64) {
	c.file("", cg, "memory.max", limit+"\n")
	if usage < 0 {
		return
	}
	c.file("", cg, "memory.current", itoa64(usage)+"\n")
	c.file("", cg, "memory.stat", "anon 100\nfile 200\nshmem "+itoa64(shmem)+"\nactive_file 10\ninactive_file "+itoa64(inactiveFile)+"\n")
	c.file("", cg, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill "+itoa64(oomKill)+"\noom_group_kill 0\n")
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

const gib = int64(1) << 30

func TestCgroupsRead(t *testing.T) {
	const host = 64 * gib
	pod := "/kubepods/burstable/pod0b5c"
	ctr := pod + "/c1"
	v2pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b5c.slice"
	v2ctr := v2pod + "/cri-containerd-c1.scope"
	tests := []struct {
		name  string
		setup func(c *cgroupTree)
		inPod bool
		want  Memory // Cgroup, Version, Limit, LimitOf, LimitCgroup, Usage, WorkingSet, Shmem, OOMKills
		err   string // in Memory.Err
	}{
		{"v1, the container's own limit", func(c *cgroupTree) {
			c.procCgroup("10", "12:pids:"+ctr+"\n4:memory:"+ctr+"\n1:name=systemd:"+ctr+"\n0::/\n")
			c.v1("/kubepods", itoa64(60*gib), -1, 0, 0, 0)
			c.v1(pod, "", -1, 0, 0, 0)
			c.v1(ctr, itoa64(16*gib), 15*gib, gib/2, 7*gib, 2)
		}, true, Memory{Cgroup: ctr, Version: 1, Limit: 16 * gib, LimitOf: LimitContainer, LimitCgroup: ctr, Usage: 15 * gib, WorkingSet: 15*gib - gib/2, Shmem: 7 * gib, OOMKills: 2}, ""},
		{"v1, a pod of one container: its limit is the container's own", func(c *cgroupTree) {
			c.procCgroup("10", "4:memory:"+ctr+"\n")
			c.v1("/kubepods", itoa64(60*gib), -1, 0, 0, 0)
			c.v1(pod, itoa64(512<<20), -1, 0, 0, 0)
			c.v1(ctr, itoa64(512<<20), gib/4, 0, 0, 0)
		}, true, Memory{Cgroup: ctr, Version: 1, Limit: 512 << 20, LimitOf: LimitContainer, LimitCgroup: ctr, Usage: gib / 4, WorkingSet: gib / 4, OOMKills: 0}, ""},
		{"v1, the pod's limit", func(c *cgroupTree) {
			c.procCgroup("10", "4:memory:"+ctr+"\n")
			c.v1("/kubepods", itoa64(60*gib), -1, 0, 0, 0)
			c.v1(pod, itoa64(8*gib), -1, 0, 0, 0)
			c.v1(ctr, "", gib, 0, 0, 0)
		}, true, Memory{Cgroup: ctr, Version: 1, Limit: 8 * gib, LimitOf: LimitPod, LimitCgroup: pod, Usage: gib, WorkingSet: gib, OOMKills: 0}, ""},
		{"v1, the parent's limit outside a pod", func(c *cgroupTree) {
			c.procCgroup("10", "4:memory:/docker/c1\n")
			c.v1("/docker", itoa64(8*gib), -1, 0, 0, 0)
			c.v1("/docker/c1", "", gib, 0, 0, 0)
		}, false, Memory{Cgroup: "/docker/c1", Version: 1, Limit: 8 * gib, LimitOf: LimitParent, LimitCgroup: "/docker", Usage: gib, WorkingSet: gib, OOMKills: 0}, ""},
		{"v1, kubepods' allocatable", func(c *cgroupTree) {
			c.procCgroup("10", "4:memory:"+ctr+"\n")
			c.v1("/kubepods", itoa64(60*gib), -1, 0, 0, 0)
			c.v1(pod, "", -1, 0, 0, 0)
			c.v1(ctr, "", gib, 0, 0, 0)
		}, true, Memory{Cgroup: ctr, Version: 1, Limit: 60 * gib, LimitOf: LimitAncestor, LimitCgroup: "/kubepods", Usage: gib, WorkingSet: gib, OOMKills: 0}, ""},
		{"v1, no limit: the host's memory; a kernel before 4.13", func(c *cgroupTree) {
			c.procCgroup("10", "4:memory:/docker/c1\n")
			c.v1("/docker", "", -1, 0, 0, 0)
			c.v1("/docker/c1", "", gib, 0, 0, -1)
		}, false, Memory{Cgroup: "/docker/c1", Version: 1, Limit: host, LimitOf: LimitHost, Usage: gib, WorkingSet: gib, OOMKills: -1}, ""},
		{"v1 memory beside a v2 hierarchy (hybrid)", func(c *cgroupTree) {
			c.procCgroup("10", "4:memory:/docker/c1\n0::/docker/c1\n")
			c.v1("/docker/c1", itoa64(2*gib), gib, 0, 0, 0)
		}, false, Memory{Cgroup: "/docker/c1", Version: 1, Limit: 2 * gib, LimitOf: LimitContainer, LimitCgroup: "/docker/c1", Usage: gib, WorkingSet: gib, OOMKills: 0}, ""},
		{"v2, the container's own limit", func(c *cgroupTree) {
			c.procCgroup("10", "0::"+v2ctr+"\n")
			c.v2("/kubepods.slice", itoa64(60*gib), -1, 0, 0, 0)
			c.v2(v2pod, "max", -1, 0, 0, 0)
			c.v2(v2ctr, itoa64(16*gib), 15*gib, gib, 7*gib, 1)
		}, true, Memory{Cgroup: v2ctr, Version: 2, Limit: 16 * gib, LimitOf: LimitContainer, LimitCgroup: v2ctr, Usage: 15 * gib, WorkingSet: 14 * gib, Shmem: 7 * gib, OOMKills: 1}, ""},
		{"v2, the pod's limit", func(c *cgroupTree) {
			c.procCgroup("10", "0::"+v2ctr+"\n")
			c.v2(v2pod, itoa64(4*gib), -1, 0, 0, 0)
			c.v2(v2ctr, "max", gib, 0, 0, 0)
		}, true, Memory{Cgroup: v2ctr, Version: 2, Limit: 4 * gib, LimitOf: LimitPod, LimitCgroup: v2pod, Usage: gib, WorkingSet: gib, OOMKills: 0}, ""},
		{"v2, a smaller limit above wins", func(c *cgroupTree) {
			c.procCgroup("10", "0::"+v2ctr+"\n")
			c.v2(v2pod, itoa64(4*gib), -1, 0, 0, 0)
			c.v2(v2ctr, itoa64(8*gib), gib, 0, 0, 0)
		}, true, Memory{Cgroup: v2ctr, Version: 2, Limit: 4 * gib, LimitOf: LimitPod, LimitCgroup: v2pod, Usage: gib, WorkingSet: gib, OOMKills: 0}, ""},
		{"a cgroup namespace of gpurun's own", func(c *cgroupTree) {
			c.procCgroup("10", "0::/../../kubepods.slice/x.scope\n")
		}, true, Memory{OOMKills: -1}, "cgroup namespace of its own"},
		{"no such process", func(*cgroupTree) {}, true, Memory{OOMKills: -1}, "no such file"},
		{"the container's cgroup is gone", func(c *cgroupTree) {
			c.procCgroup("10", "0::"+v2ctr+"\n")
		}, true, Memory{Cgroup: v2ctr, Version: 2, OOMKills: -1}, "memory.current"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCgroupTree(t)
			tt.setup(c)
			g := &Cgroups{Proc: c.proc, Root: c.cgroupRoot, HostMemory: host}
			got := g.Read(10, tt.inPod)
			gotErr := got.Err
			got.Err = ""
			if got != tt.want {
				t.Errorf("Read:\n got %+v\nwant %+v", got, tt.want)
			}
			if tt.err == "" && gotErr != "" || !strings.Contains(gotErr, tt.err) {
				t.Errorf("error %q, want one containing %q", gotErr, tt.err)
			}
		})
	}
}

// TestMemoryShares: /dev/shm's share of the limit and the working set, only
// where /dev/shm is a tmpfs of the container's or its pod's; the pressure
// predicates.
func TestMemoryShares(t *testing.T) {
	own := Shm{Tmpfs: true, Device: "0:50", Used: 7 * gib}
	host := Shm{Tmpfs: true, Device: "0:22", HostIPC: true, Used: 7 * gib}
	mem := func(limit, ws int64, of string) *Memory {
		return &Memory{Limit: limit, LimitOf: of, Usage: ws, WorkingSet: ws, OOMKills: 0}
	}
	tests := []struct {
		name                 string
		shm                  Shm
		m                    *Memory
		ofLimit, ofWS        float64
		near, rearmed, quart bool
	}{
		{"near the limit, /dev/shm half of it", own, mem(16*gib, 15*gib, LimitContainer), 43.75, 7 * 100.0 / 15, true, false, true},
		{"near the pod's limit", own, mem(16*gib, 15*gib, LimitPod), 43.75, 7 * 100.0 / 15, true, false, true},
		{"at 85 %: not near, not re-armed", own, mem(16*gib, 16*gib*85/100, LimitContainer), 43.75, 7 * 100.0 / (16 * 0.85), false, false, true},
		{"below 80 %: re-armed", own, mem(16*gib, 12*gib, LimitContainer), 43.75, 7 * 100.0 / 12, false, true, true},
		{"near, but /dev/shm a small part", Shm{Tmpfs: true, Device: "0:50", Used: gib}, mem(16*gib, 15*gib, LimitContainer), 6.25, 100.0 / 15, false, false, false},
		{"the host's memory is no limit of its own", own, mem(64*gib, 63*gib, LimitHost), 7 * 100.0 / 64, 7 * 100.0 / 63, false, false, false},
		{"the host's /dev/shm is not the container's", host, mem(16*gib, 15*gib, LimitContainer), 0, 0, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Container{Shm: tt.shm, Memory: tt.m}
			c.Memory.Share(c.Shm.Used, c.ownShm())
			if !near(c.Memory.ShmPercentOfLimit, tt.ofLimit) || !near(c.Memory.ShmPercentOfWorkingSet, tt.ofWS) {
				t.Errorf("shares %.2f%% of the limit, %.2f%% of the working set; want %.2f, %.2f", c.Memory.ShmPercentOfLimit, c.Memory.ShmPercentOfWorkingSet, tt.ofLimit, tt.ofWS)
			}
			if c.NearMemoryLimit() != tt.near || c.BelowMemoryRearm() != tt.rearmed || c.ShmOverQuarter() != tt.quart {
				t.Errorf("near %v, re-armed %v, over a quarter %v; want %v, %v, %v", c.NearMemoryLimit(), c.BelowMemoryRearm(), c.ShmOverQuarter(), tt.near, tt.rearmed, tt.quart)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }

// TestWriteTableGolden: the table with the memory columns, its notes under
// it, against testdata/table.golden (go test -update-stats rewrites it).
func TestWriteTableGolden(t *testing.T) {
	mem := func(ws, limit int64, of string, shm int64) *Memory {
		m := &Memory{Version: 2, Limit: limit, LimitOf: of, Usage: ws + 100<<20, WorkingSet: ws, OOMKills: 0}
		m.Share(shm, true)
		return m
	}
	trainer := Container{Engine: EngineContainerd, Namespace: "k8s.io", ID: strings.Repeat("a", 64), Name: "trainer", PID: 4242, GPU: true,
		Pod:      &Pod{Namespace: "ml", Name: "job-0", UID: "u", Container: "trainer"},
		Decision: Decision{Action: "remount", Size: 8 * gib, InEffect: true},
		Shm:      Shm{Kind: "engine-host-tmpfs", Device: "0:50", Tmpfs: true, Size: 8 * gib, Used: 7*gib + 600<<20, Peak: 7*gib + 600<<20, Orphaned: -1, Percent: 95, SweptBytes: 700 << 20, SweptFiles: 7}}
	trainer.Memory = mem(15*gib+200<<20, 16*gib, LimitContainer, trainer.Shm.Used)
	sidecar := Container{Engine: EngineContainerd, Namespace: "k8s.io", ID: strings.Repeat("b", 64), Name: "sidecar", PID: 4243,
		Pod:        &Pod{Namespace: "ml", Name: "job-0", UID: "u", Container: "sidecar"},
		Decision:   Decision{Action: "none"},
		Shm:        trainer.Shm,
		SharedWith: []string{trainer.ID}}
	sidecar.Memory = mem(300<<20, 20*gib, LimitPod, sidecar.Shm.Used)
	trainer.SharedWith = []string{sidecar.ID}
	web := Container{Engine: EngineDocker, ID: strings.Repeat("c", 64), Name: "web", PID: 4244,
		Decision: Decision{Action: "none"},
		Shm:      Shm{Kind: "private-tmpfs", Device: "0:51", Tmpfs: true, Size: 64 << 20, Used: 3 << 20, Peak: 3 << 20, Orphaned: 3 << 20, OrphanedFiles: []string{"/dev/shm/a"}, Percent: 4.7}}
	web.Memory = mem(50<<20, 64*gib, LimitHost, web.Shm.Used)
	hostipc := Container{Engine: EngineDocker, ID: strings.Repeat("d", 64), Name: "hostipc", PID: 4245,
		Decision: Decision{Action: "none"},
		Shm:      Shm{Kind: KindHost, Device: "0:22", HostIPC: true, Tmpfs: true, Size: 32 * gib, Used: 12 << 10, Peak: 12 << 10, Orphaned: -1}}
	hostipc.Memory = &Memory{Err: "memory cgroup: /proc/4245/cgroup: no such file or directory", OOMKills: -1}
	var buf bytes.Buffer
	if err := WriteTable(&buf, []Container{trainer, sidecar, web, hostipc}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *updateStats {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update-stats writes it)", err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestCollectReadsMemory: Collect reads each container's memory cgroup
// through its init process (this test process's, on this machine).
func TestCollectReadsMemory(t *testing.T) {
	state := t.TempDir()
	bundle(t, state, "k8s.io", "ctr1", "containerd-2.4-cri-container.json", os.Getpid())
	cs, err := Collect(t.Context(), Options{Docker: "none", Containerd: []string{state}, Podman: []string{}, Policy: policy.Default()})
	if err != nil || len(cs) != 1 {
		t.Fatalf("%d containers, %v", len(cs), err)
	}
	m := cs[0].Memory
	if m == nil {
		t.Fatal("no memory read")
	}
	if m.Err != "" {
		t.Skipf("this machine's cgroups cannot be read here: %s", m.Err)
	}
	if m.Version != 1 && m.Version != 2 || m.Usage <= 0 || m.Limit <= 0 || m.LimitOf == "" || m.Cgroup == "" {
		t.Errorf("memory %+v", m)
	}
	// The test process's /dev/shm is the host's: no share of its own.
	if m.ShmPercentOfLimit != 0 || m.ShmPercentOfWorkingSet != 0 {
		t.Errorf("shares %+v for the host's /dev/shm", m)
	}
}

// TestMemoryJSON: the field names of `gpurun stats --json`'s memory object
// are stable (docs/observe.md lists them).
func TestMemoryJSON(t *testing.T) {
	data, err := json.Marshal(Container{Memory: &Memory{Cgroup: "/docker/x", Version: 1, Limit: 1, LimitOf: LimitContainer, LimitCgroup: "/docker/x", Err: "e"}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Memory map[string]any `json:"memory"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"cgroup", "cgroup_version", "limit_bytes", "limit_of", "limit_cgroup", "usage_bytes", "working_set_bytes", "shmem_bytes", "oom_kills", "shm_percent_of_limit", "shm_percent_of_working_set", "error"}
	for _, k := range want {
		if _, ok := got.Memory[k]; !ok {
			t.Errorf("no %q in %s", k, data)
		}
	}
	if len(got.Memory) != len(want) {
		t.Errorf("fields %v, want %v", got.Memory, want)
	}
}
