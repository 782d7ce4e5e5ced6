package doctor

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/policy"
)

// memCgroup writes a v1 memory cgroup for the process pid into a fake
// tree: its limit ("" for none), usage, inactive file cache and oom_kill
// count, and a pod's cgroup above it with podLimit ("" for none).
func memCgroup(f *fakeSystem, pid int, cg, limit string, usage, inactive, oomKills int64, podLimit string) {
	none := "9223372036854771712\n"
	lim := func(s string) string {
		if s == "" {
			return none
		}
		return s + "\n"
	}
	parent := cg[:strings.LastIndexByte(cg, '/')]
	f.write("/proc/"+strconv.Itoa(pid)+"/cgroup", "11:pids:"+cg+"\n4:memory:"+cg+"\n0::/\n")
	f.write("/sys/fs/cgroup/memory"+parent+"/memory.limit_in_bytes", lim(podLimit))
	f.write("/sys/fs/cgroup/memory"+cg+"/memory.limit_in_bytes", lim(limit))
	f.write("/sys/fs/cgroup/memory"+cg+"/memory.usage_in_bytes", strconv.FormatInt(usage, 10)+"\n")
	f.write("/sys/fs/cgroup/memory"+cg+"/memory.stat", "cache 0\nrss 0\nshmem 0\ntotal_shmem 0\ntotal_inactive_file "+strconv.FormatInt(inactive, 10)+"\n")
	f.write("/sys/fs/cgroup/memory"+cg+"/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill "+strconv.FormatInt(oomKills, 10)+"\n")
}

func TestShmMemoryDocker(t *testing.T) {
	const gib = policy.GiB
	g16 := strconv.FormatInt(16*gib, 10)
	tests := []struct {
		name       string
		ipc        string
		limit      string
		shmUsed    int64
		usage      int64
		oomKills   int64
		cgroup     bool // the cgroup files are there
		wantStatus Status
		wantDetail string
		wantOf     string
	}{
		{"/dev/shm holds much of the limit", "private", g16, 7*gib + gib/2, 8 * gib, 0, true, Warn,
			"/dev/shm holds 7.5GiB: 47 % of the 16GiB memory limit, 94 % of what the container uses now (8GiB); from 40 %", "container"},
		{"near the limit with /dev/shm a large part", "private", g16, 5 * gib, 15 * gib, 0, true, Warn,
			"/dev/shm holds 5GiB: 31 % of the 16GiB memory limit, 33 % of what the container uses now (15GiB); it is near the limit (94 %)", "container"},
		{"a small share", "private", g16, 2 * gib, 8 * gib, 0, true, OK,
			"/dev/shm holds 2GiB: 12 % of the 16GiB memory limit, 25 % of what the container uses now (8GiB)", "container"},
		{"OOM kills with /dev/shm over a quarter", "private", g16, 5 * gib, 8 * gib, 2, true, Warn,
			"the kernel has OOM-killed 2 process(es) in its cgroup", "container"},
		{"no limit: the host's memory", "private", "", 2 * gib, 8 * gib, 0, true, OK,
			"/dev/shm holds 2GiB: 3 % of the host's 64GiB of memory (no memory limit), 25 % of what the container uses now (8GiB)", "host"},
		{"the host's /dev/shm is not counted", "host", g16, 7 * gib, 15 * gib, 0, true, OK,
			"the container uses 15GiB of the 16GiB memory limit; /dev/shm is not a tmpfs of its own", "container"},
		{"the cgroup cannot be read", "private", g16, gib, gib, 0, false, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			hc := container.HostConfig{IpcMode: container.IpcMode(tt.ipc), ShmSize: 8 * gib}
			if tt.limit != "" {
				hc.Memory = 16 * gib
			}
			c := inspected("trainer", 4242, hc, "NVIDIA_VISIBLE_DEVICES=all")
			shm := FS{Tmpfs: true, Size: 8 * gib, Used: tt.shmUsed}
			if tt.ipc == "host" {
				shm.Size = fakeHostMemory / 2
			}
			f.fs["/proc/4242/root/dev/shm"] = shm
			if tt.cgroup {
				memCgroup(f, 4242, "/docker/"+c.ID, tt.limit, tt.usage, 0, tt.oomKills, "")
			}
			d := &fakeDocker{info: system.Info{MemTotal: fakeHostMemory, DockerRootDir: "/var/lib/docker", NCPU: 16}, containers: map[string]container.InspectResponse{"trainer": c}}
			r := DockerContainer(context.Background(), f.system(), d, "trainer", TargetOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
			var got *Check
			for i := range r.Checks {
				if r.Checks[i].Name == "shm.memory" {
					got = &r.Checks[i]
				}
			}
			if tt.wantStatus == "" {
				if got != nil {
					t.Errorf("shm.memory %+v, want none", got)
				}
				if mc := check(t, r, "memory"); !strings.Contains(mc.Detail, "its memory cgroup could not be read") {
					t.Errorf("memory: %s", mc.Detail)
				}
				return
			}
			if got == nil {
				t.Fatalf("no shm.memory check:\n%s", text(r))
			}
			if got.Status != tt.wantStatus || !strings.Contains(got.Detail, tt.wantDetail) || got.Data["limit_of"] != tt.wantOf {
				t.Errorf("shm.memory %s %q (limit of %v),\nwant %s with %q, limit of %s", got.Status, got.Detail, got.Data["limit_of"], tt.wantStatus, tt.wantDetail, tt.wantOf)
			}
			if (got.Status == Warn) != (got.Fix != "") {
				t.Errorf("fix %q for status %s", got.Fix, got.Status)
			}
		})
	}
}

// TestShmMemoryCRI: a pod's container, whose limit is its pod's.
func TestShmMemoryCRI(t *testing.T) {
	const gib = policy.GiB
	f := hostFake(t)
	cfg, err := specfile.Load(fixtures + "/containerd-1.6-cri-container-env-nvidia-all.json")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"pid": 777, "sandboxID": "s1", "runtimeSpec": cfg.Spec})
	cri := &fakeCRI{status: map[string]*runtimeapi.ContainerStatusResponse{"c1": {
		Status: &runtimeapi.ContainerStatus{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "trainer"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
		Info:   map[string]string{"info": string(info)},
	}}}
	f.fs["/proc/777/root/dev/shm"] = FS{Tmpfs: true, Size: 8 * gib, Used: 4 * gib}
	memCgroup(f, 777, "/kubepods/burstable/pod0b5c/c1", "", 15*gib, gib/2, 0, strconv.FormatInt(16*gib, 10))
	r := CRIContainer(context.Background(), f.system(), cri, "c1", TargetOptions{Policy: PolicySource{Path: f.root + "/none.toml"}})
	c := check(t, r, "shm.memory")
	want := "/dev/shm holds 4GiB: 25 % of the pod's 16GiB memory limit, 28 % of what the container uses now (14.5GiB); it is near the limit (91 %)"
	if c.Status != Warn || !strings.HasPrefix(c.Detail, want) || c.Data["limit_of"] != "pod" || c.Data["working_set_bytes"] != 14*gib+gib/2 {
		t.Errorf("shm.memory %s %q %v,\nwant warn, %q", c.Status, c.Detail, c.Data, want)
	}
}
