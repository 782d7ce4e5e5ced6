package shmstats

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const fixtures = "../../oci/testdata/fixtures"

// bundle writes a containerd bundle <state>/io.containerd.runtime.v2.task/<ns>/<id>
// holding a fixture's config.json and init.pid.
func bundle(t testing.TB, state, ns, id, fixture string, pid int) {
	t.Helper()
	dir := filepath.Join(state, "io.containerd.runtime.v2.task", ns, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(fixtures, fixture))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if pid != 0 {
		if err := os.WriteFile(filepath.Join(dir, "init.pid"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fixtureAnnotation reads one annotation of a fixture.
func fixtureAnnotation(t *testing.T, fixture, key string) string {
	t.Helper()
	cfg, err := specfile.Load(filepath.Join(fixtures, fixture))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Spec.Annotations[key]
}

func TestCollectContainerdBundles(t *testing.T) {
	state := t.TempDir()
	self := os.Getpid()
	bundle(t, state, "k8s.io", "ctr1", "containerd-2.4-cri-container.json", self)
	bundle(t, state, "k8s.io", "gpu1", "containerd-2.4-cri-container-env-nvidia-all.json", self)
	bundle(t, state, "k8s.io", "sandbox1", "containerd-2.4-cri-sandbox.json", self)
	bundle(t, state, "default", "ctr-plain", "ctr-1.6-default.json", self)
	bundle(t, state, "k8s.io", "notstarted", "containerd-2.4-cri-container.json", 0)
	bundle(t, state, "k8s.io", "exited", "containerd-2.4-cri-container.json", 1<<30)

	cs, err := Collect(context.Background(), Options{Docker: "none", Containerd: []string{state}, Podman: []string{}, Policy: policy.Default(), Peaks: NewPeaks(), SweepState: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.Namespace+"/"+c.ID)
	}
	if want := []string{"default/ctr-plain", "k8s.io/ctr1", "k8s.io/gpu1"}; !slices.Equal(ids, want) {
		t.Fatalf("containers %v, want %v (no sandbox, none without a live init.pid)", ids, want)
	}
	podName := fixtureAnnotation(t, "containerd-2.4-cri-container.json", annotationSandboxName)
	tests := []struct {
		id       string
		pod      bool
		gpu      bool
		kind     string
		action   string
		podName  string
		contName string
	}{
		{"ctr-plain", false, false, KindHost, "none", "", ""},
		{"ctr1", true, false, KindHost, "none", podName, fixtureAnnotation(t, "containerd-2.4-cri-container.json", annotationContainerName)},
		{"gpu1", true, true, KindHost, "remount", fixtureAnnotation(t, "containerd-2.4-cri-container-env-nvidia-all.json", annotationSandboxName), fixtureAnnotation(t, "containerd-2.4-cri-container-env-nvidia-all.json", annotationContainerName)},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			var c *Container
			for i := range cs {
				if cs[i].ID == tc.id {
					c = &cs[i]
				}
			}
			if c.Engine != EngineContainerd || c.PID != self {
				t.Errorf("engine %q pid %d", c.Engine, c.PID)
			}
			if (c.Pod != nil) != tc.pod || tc.pod && (c.Pod.Name != tc.podName || c.Pod.Container != tc.contName || c.Name != tc.contName || c.Pod.SandboxID == "" || c.Pod.UID == "") {
				t.Errorf("pod %+v, want name %q container %q", c.Pod, tc.podName, tc.contName)
			}
			if c.GPU != tc.gpu || c.Decision.Action != tc.action || c.Decision.Reason == "" {
				t.Errorf("gpu %v decision %+v, want gpu %v action %s", c.GPU, c.Decision, tc.gpu, tc.action)
			}
			// The test process's /dev/shm is the host's: read, and known as such.
			if c.Shm.Kind != tc.kind || !c.Shm.HostIPC || c.Shm.Device == "" || c.Shm.Size == 0 || len(c.SharedWith) != 0 {
				t.Errorf("shm %+v shared %v", c.Shm, c.SharedWith)
			}
		})
	}
}

func TestCollectEngineErrorsDoNotHideOthers(t *testing.T) {
	good := t.TempDir()
	bundle(t, good, "k8s.io", "ok", "containerd-2.4-cri-container.json", os.Getpid())
	bad := t.TempDir()
	bundle(t, bad, "k8s.io", "broken", "containerd-2.4-cri-container.json", os.Getpid())
	if err := os.WriteFile(filepath.Join(bad, "io.containerd.runtime.v2.task", "k8s.io", "broken", "config.json"), []byte("{\n  \"mounts\": [,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := Collect(context.Background(), Options{Docker: "none", Containerd: []string{bad, good}, Podman: []string{}, Policy: policy.Default()})
	if len(cs) != 1 || cs[0].ID != "ok" {
		t.Errorf("containers %+v, want the good state dir's", cs)
	}
	if err == nil || !strings.Contains(err.Error(), "containerd "+bad) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v: want it to name the state dir and the bad line", err)
	}
}

func TestSharingAndPeaksByDevice(t *testing.T) {
	// Three containers on two tmpfs: a pod of two and one alone; the
	// measurement is given, not read.
	pol := policy.Default()
	c := newCollector(Options{Peaks: NewPeaks(), Policy: pol})
	c.pol = pol
	all := []found{
		{c: Container{ID: "a", Shm: Shm{Device: "0:50", Used: 10, Tmpfs: true}}, owner: "pod1"},
		{c: Container{ID: "b", Shm: Shm{Device: "0:50", Used: 10, Tmpfs: true}}, owner: "pod1"},
		{c: Container{ID: "c", Shm: Shm{Device: "0:51", Used: 5, Tmpfs: true}}},
	}
	out := c.group(measuredAs(all))
	want := map[string][]string{"a": {"b"}, "b": {"a"}, "c": nil}
	for _, ct := range out {
		if !slices.Equal(ct.SharedWith, want[ct.ID]) {
			t.Errorf("%s shared with %v, want %v", ct.ID, ct.SharedWith, want[ct.ID])
		}
	}
	if _, ok := c.o.Peaks.Get(PeakKey("pod1", "0:50")); !ok {
		t.Error("the pod's tmpfs is not keyed by its sandbox")
	}
	if _, ok := c.o.Peaks.Get(PeakKey("c", "0:51")); !ok {
		t.Error("a lone tmpfs is not keyed by its container")
	}
	// Less used now: the peak stays.
	all[0].c.Shm.Used, all[1].c.Shm.Used = 2, 2
	for _, ct := range c.group(measuredAs(all)) {
		if ct.ID == "a" && (ct.Shm.Peak != 10 || ct.Shm.Used != 2) {
			t.Errorf("after a drop: used %d peak %d, want 2 and 10", ct.Shm.Used, ct.Shm.Peak)
		}
	}
}

func measuredAs(all []found) []measured {
	var out []measured
	for _, f := range all {
		out = append(out, measured{c: f.c, owner: f.owner})
	}
	return out
}

func TestSuggest(t *testing.T) {
	const MiB, GiB = policy.MiB, policy.GiB
	perGPU := policy.Default()
	perGPU.PerGPU = 2 * GiB
	noAnn := policy.Default()
	noAnn.AllowedAnnotations = nil
	tests := []struct {
		name     string
		m        Measured
		pol      *policy.Policy
		size     int64 // 0: no suggestion
		settings []string
	}{
		{"fits", Measured{Peak: 30 * MiB, Size: 64 * MiB, Engine: EngineDocker, Kind: "private-tmpfs"}, nil, 0, nil},
		{"nothing measured", Measured{Size: 64 * MiB, Engine: EngineDocker}, nil, 0, nil},
		{"host IPC", Measured{Peak: 64 * MiB, Size: 64 * MiB, Kind: KindHost}, nil, 0, nil},
		{"docker near the ceiling", Measured{Peak: 60 * MiB, Size: 64 * MiB, Engine: EngineDocker, Kind: "private-tmpfs", Ref: "c0ffee"}, nil, 128 * MiB,
			[]string{"now: gpurun resize c0ffee 128m  (no restart; Docker's record keeps the old size)", "recreate: docker run --shm-size=128m ...  (or gpurun run ..., which adds it)", `compose: shm_size: "128mb" in the service`}},
		{"docker IPC group: the group's owner is grown", Measured{Peak: 62 * MiB, Size: 64 * MiB, Engine: EngineDocker, Kind: "engine-host-tmpfs", Ref: "c0ffee", Owner: "d0d0"}, nil, 128 * MiB,
			[]string{"now: gpurun resize d0d0 128m  (grows the shared /dev/shm of d0d0 and every container joined to it; no restart)",
				`recreate: start d0d0 with --shm-size=128m (docker ignores --shm-size on a container that joins another's IPC namespace; compose: shm_size: "128mb" on that service)`}},
		{"GPU pod near the ceiling, default policy", Measured{Peak: 1000 * MiB, Size: GiB, Pod: true, Kind: "engine-host-tmpfs", Sized: true, GPUs: 1, Ref: "0a1b2c"}, nil, 1536 * MiB,
			[]string{"now: gpurun resize --cri 0a1b2c 1536m  (grows the pod's /dev/shm; no restart)",
				`annotation: pod annotation gpurun.io/shm-size: "1536Mi" (the runtime must pass it to the spec: containerd's pod_annotations)`,
				"kubernetes: an emptyDir {medium: Memory, sizeLimit: 1536Mi} mounted at /dev/shm, or runtimeClassName: gpurun on nodes set up by gpurun (kubectl apply -k deploy/kubernetes/overlays/runtime-class; default-runtime, nri or webhook size every GPU pod)", `policy: min = "1.5GiB" (sizes every container the policy sizes at least this)`}},
		{"per_gpu policy", Measured{Peak: 3900 * MiB, Size: 4 * GiB, Pod: true, Sized: true, GPUs: 2}, perGPU, 5888 * MiB,
			[]string{"now: gpurun resize --cri ID 5888m  (grows the pod's /dev/shm; no restart)",
				`annotation: pod annotation gpurun.io/shm-size: "5888Mi" (the runtime must pass it to the spec: containerd's pod_annotations)`,
				"kubernetes: an emptyDir {medium: Memory, sizeLimit: 5888Mi} mounted at /dev/shm, or runtimeClassName: gpurun on nodes set up by gpurun (kubectl apply -k deploy/kubernetes/overlays/runtime-class; default-runtime, nri or webhook size every GPU pod)", `policy: per_gpu = "2.88GiB" (x 2 GPUs; sizes every GPU container the policy sizes)`}},
		{"no allowed annotation", Measured{Peak: 63 * MiB, Size: 64 * MiB, Pod: true}, noAnn, 128 * MiB,
			[]string{"now: gpurun resize --cri ID 128m  (grows the pod's /dev/shm; no restart)", "kubernetes: an emptyDir {medium: Memory, sizeLimit: 128Mi} mounted at /dev/shm, or runtimeClassName: gpurun on nodes set up by gpurun (kubectl apply -k deploy/kubernetes/overlays/runtime-class; default-runtime, nri or webhook size every GPU pod)"}},
		{"GPU container gpurun did not start", Measured{Peak: 60 * MiB, Size: 64 * MiB, Engine: EngineDocker, Kind: "private-tmpfs", Sized: true, Target: 8 * GiB, Pending: true, Ref: "c0ffee"}, nil, 128 * MiB,
			[]string{"now: gpurun resize c0ffee 128m  (no restart; Docker's record keeps the old size)", "recreate: docker run --shm-size=128m ...  (or gpurun run ..., which adds it)", `compose: shm_size: "128mb" in the service`, "gpurun: start it through a gpurun front door (gpurun run, gpurun-runtime, the hook, the NRI plugin): the policy already gives it 8GiB"}},
		{"user's own choice the policy left alone", Measured{Peak: 60 * MiB, Size: 64 * MiB, Engine: EngineDocker, Kind: "private-tmpfs", Sized: true, Target: 8 * GiB, Ref: "c0ffee"}, nil, 128 * MiB,
			[]string{"now: gpurun resize c0ffee 128m  (no restart; Docker's record keeps the old size)", "recreate: docker run --shm-size=128m ...  (or gpurun run ..., which adds it)", `compose: shm_size: "128mb" in the service`}},
		{"far below", Measured{Peak: 100 * MiB, Size: 8 * GiB, Engine: EnginePodman, Ref: "c0ffee"}, nil, 192 * MiB,
			[]string{"now: gpurun resize c0ffee 192m  (no restart)", "recreate: podman run --shm-size=192m ..."}},
		{"below but not far", Measured{Peak: 100 * MiB, Size: 1 * GiB, Engine: EnginePodman}, nil, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := SuggestFor(tc.m, tc.pol)
			if tc.size == 0 {
				if s != nil {
					t.Errorf("suggestion %+v, want none", s)
				}
				return
			}
			if s == nil {
				t.Fatal("no suggestion")
			}
			if s.Size != tc.size || s.Size < tc.m.Peak || s.Why == "" {
				t.Errorf("size %s (%s), want %s", policy.FormatSize(s.Size), s.Why, policy.FormatSize(tc.size))
			}
			if !slices.Equal(s.Settings, tc.settings) {
				t.Errorf("settings\n%q\nwant\n%q", s.Settings, tc.settings)
			}
		})
	}
}

func TestFit(t *testing.T) {
	const MiB = policy.MiB
	for _, tc := range []struct{ peak, want int64 }{
		{1, 128 * MiB}, // 64 MiB headroom, rounded up
		{64 * MiB, 128 * MiB},
		{100 * MiB, 192 * MiB},
		{300 * MiB, 512 * MiB}, // 450 MiB rounded up
		{1024 * MiB, 1536 * MiB},
	} {
		if got := Fit(tc.peak); got != tc.want {
			t.Errorf("Fit(%d) = %d, want %d", tc.peak, got, tc.want)
		}
	}
}

func TestPeaksFile(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" = no file
		wantErr string
		want    int64
	}{
		{"missing", "", "", 0},
		{"corrupt", "{\"version\":1,\"peaks\":", "read peaks", 0},
		{"other version", `{"version":9,"peaks":{}}`, "version 9", 0},
		{"good", `{"version":1,"peaks":{"k@0:1":{"bytes":77,"at":"2026-01-01T00:00:00Z","seen":"2099-01-01T00:00:00Z"}}}`, "", 77},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "peaks.json")
			if tc.content != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := OpenPeaks(path)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path)) {
				t.Fatalf("OpenPeaks: %v, want %q naming the file", err, tc.wantErr)
			}
			e, _ := p.Get("k@0:1")
			if e.Bytes != tc.want {
				t.Errorf("peak %d, want %d", e.Bytes, tc.want)
			}
			p.Observe("new@0:2", 5)
			if err := p.Save(); err != nil {
				t.Fatal(err)
			}
			again, err := OpenPeaks(path)
			if err != nil {
				t.Fatalf("after save: %v", err)
			}
			if e, _ := again.Get("new@0:2"); e.Bytes != 5 {
				t.Errorf("saved peak %d, want 5", e.Bytes)
			}
		})
	}
}

func TestPeaksConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peaks.json")
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := OpenPeaks(path) // each as a process of its own would
			if err != nil {
				errs <- err
				return
			}
			p.Observe(fmt.Sprintf("w%d@0:1", w), int64(w+1))
			p.Observe("shared@0:1", int64(100*(w+1)))
			errs <- p.Save()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := OpenPeaks(path)
	if err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		if e, _ := p.Get(fmt.Sprintf("w%d@0:1", w)); e.Bytes != int64(w+1) {
			t.Errorf("writer %d's peak %d lost", w, e.Bytes)
		}
	}
	if e, _ := p.Get("shared@0:1"); e.Bytes != 100*writers {
		t.Errorf("shared peak %d, want the highest, %d", e.Bytes, 100*writers)
	}
}

func TestPeaksPrunesOld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peaks.json")
	p, _ := OpenPeaks(path)
	now := time.Now()
	p.now = func() time.Time { return now.Add(-PeaksMaxAge - time.Hour) }
	p.Observe("old@0:1", 1)
	p.now = func() time.Time { return now }
	p.Observe("new@0:1", 2)
	if err := p.Save(); err != nil {
		t.Fatal(err)
	}
	again, _ := OpenPeaks(path)
	if _, ok := again.Get("old@0:1"); ok {
		t.Error("a peak not seen for PeaksMaxAge was kept")
	}
	if _, ok := again.Get("new@0:1"); !ok {
		t.Error("a fresh peak was dropped")
	}
}

// fakeProc builds a /proc-like tree: pid 10's root/dev/shm is shm (a real
// directory, so its files have real inodes), pid 20 has fd 3 open on
// "open" and pid 30 maps "mapped" (its maps line names the device and
// inode, as the kernel writes them).
func fakeProc(t *testing.T) (proc string, dev uint64) {
	t.Helper()
	proc = t.TempDir()
	shm := filepath.Join(proc, "10", "root", "dev", "shm")
	for _, d := range []string{shm, filepath.Join(proc, "20", "fd"), filepath.Join(proc, "30", "fd"), filepath.Join(shm, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string, n int) {
		if err := os.WriteFile(filepath.Join(shm, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("open", 8192)
	write("mapped", 8192)
	write("orphan", 3*4096)
	write("sub/orphan2", 4096)
	if err := os.Symlink(filepath.Join(shm, "open"), filepath.Join(proc, "20", "fd", "3")); err != nil {
		t.Fatal(err)
	}
	st := statOf(t, filepath.Join(shm, "mapped"))
	dev = st.Dev
	maps := fmt.Sprintf("7f0000000000-7f0000002000 rw-s 00000000 %02x:%02x %d %s\n7f0000003000-7f0000004000 r--p 00000000 00:00 0 [heap]\n",
		unix.Major(dev), unix.Minor(dev), st.Ino, "/dev/shm/mapped")
	if err := os.WriteFile(filepath.Join(proc, "30", "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
	return proc, dev
}

func TestOrphans(t *testing.T) {
	proc, dev := fakeProc(t)
	c := newCollector(Options{Proc: proc})
	device := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	out := []Container{
		{ID: "x", PID: 10, Shm: Shm{Device: device, Tmpfs: true}},
		{ID: "host", PID: 10, Shm: Shm{Device: device, Tmpfs: true, HostIPC: true, Orphaned: -1}},
	}
	c.orphans(out)
	shm := filepath.Join(proc, "10", "root", "dev", "shm")
	want := statOf(t, filepath.Join(shm, "orphan")).Blocks*512 + statOf(t, filepath.Join(shm, "sub", "orphan2")).Blocks*512
	if out[0].Shm.Orphaned != want {
		t.Errorf("orphaned %d, want %d (orphan and sub/orphan2, not the open or the mapped file)", out[0].Shm.Orphaned, want)
	}
	if w := []string{"/dev/shm/orphan", "/dev/shm/sub/orphan2"}; !slices.Equal(out[0].Shm.OrphanedFiles, w) {
		t.Errorf("orphaned files %v, want %v", out[0].Shm.OrphanedFiles, w)
	}
	if out[1].Shm.Orphaned != -1 {
		t.Errorf("the host's /dev/shm: orphaned %d, want -1 (not computed)", out[1].Shm.Orphaned)
	}
}

func TestFilter(t *testing.T) {
	cs := []Container{
		{ID: "aaaa1111", Namespace: "k8s.io", Pod: &Pod{Namespace: "ml", Name: "job", Container: "trainer"}, Name: "trainer"},
		{ID: "bbbb2222", Namespace: "k8s.io", Pod: &Pod{Namespace: "ml", Name: "job", Container: "sidecar"}, Name: "sidecar"},
		{ID: "cccc3333", Engine: EngineDocker, Name: "web"},
		{ID: "dddd4444", Namespace: "default", Name: ""},
	}
	ids := func(cs []Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	for _, tc := range []struct {
		f    Filter
		want []string
	}{
		{Filter{}, []string{"aaaa1111", "bbbb2222", "cccc3333", "dddd4444"}},
		{Filter{Namespace: "ml"}, []string{"aaaa1111", "bbbb2222"}},
		{Filter{Namespace: "default"}, []string{"dddd4444"}},
		{Filter{Pod: "job", Container: "sidecar"}, []string{"bbbb2222"}},
		{Filter{Container: "ccc"}, []string{"cccc3333"}},
		{Filter{Container: "cc"}, nil}, // too short a prefix
		{Filter{Container: "web"}, []string{"cccc3333"}},
	} {
		if got := ids(tc.f.Select(cs)); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestJSONFieldNames(t *testing.T) {
	data, err := json.Marshal(Container{Engine: "docker", ID: "x", Pod: &Pod{Namespace: "n", Name: "p"}, Suggestion: &Suggestion{Size: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"engine"`, `"id"`, `"pid"`, `"gpu"`, `"decision"`, `"action"`, `"size_bytes"`, `"target_bytes"`, `"reason"`,
		`"shm"`, `"kind"`, `"host_ipc"`, `"used_bytes"`, `"peak_bytes"`, `"orphaned_bytes"`, `"swept_bytes"`, `"swept_files"`, `"percent"`, `"pod"`, `"suggestion"`, `"settings"`} {
		if !strings.Contains(string(data), k) {
			t.Errorf("JSON lacks %s: %s", k, data)
		}
	}
}

func statOf(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDecisionAsMade checks that the decision is gpurun's plan for the
// container as its engine made it, whatever a gpurun front door did to it
// since (a grown pod tmpfs, a rewritten size option), and that InEffect
// says whether the /dev/shm read now carries it out. The expected plan is
// oci.Decide's over the captured spec before any front door acted, with the
// engine's tmpfs at the size the engine made it.
func TestDecisionAsMade(t *testing.T) {
	pol := policy.Default()
	const hostMemory = 16 << 30
	before := func(t *testing.T, fixture string, made int64) oci.Plan {
		cfg, err := specfile.Load(filepath.Join(fixtures, fixture))
		if err != nil {
			t.Fatal(err)
		}
		return oci.Decide(oci.Input{Container: oci.FromSpec(cfg.Spec), Policy: pol,
			Facts: oci.Facts{HostMemory: hostMemory, TmpfsSize: func(string) (int64, error) { return made, nil }}})
	}
	tests := []struct {
		name    string
		fixture string
		// made is what the engine records (Docker's HostConfig.ShmSize),
		// 0 none; engineSize the size the engine made the tmpfs at.
		made, engineSize int64
		// acted: a gpurun front door carried the plan out before the read.
		acted    bool
		action   oci.Action
		inEffect bool
	}{
		{"cri 2.x gpu pod, grown by gpurun", "containerd-2.4-cri-container-env-nvidia-all.json", 0, policy.EngineDefaultShm, true, oci.ActionRemount, true},
		{"cri 2.x gpu pod, not grown", "containerd-2.4-cri-container-env-nvidia-all.json", 0, policy.EngineDefaultShm, false, oci.ActionRemount, false},
		{"cri 1.6 gpu pod, grown by gpurun", "containerd-1.6-cri-container-env-nvidia-all.json", 0, policy.EngineDefaultShm, true, oci.ActionRemount, true},
		{"cri pod without gpu", "containerd-2.4-cri-container.json", 0, policy.EngineDefaultShm, false, oci.ActionNone, true},
		{"docker gpu, size rewritten by gpurun-runtime", "docker-20.10-env-nvidia-all.json", policy.EngineDefaultShm, policy.EngineDefaultShm, true, oci.ActionSetSize, true},
		{"docker gpu under plain runc", "docker-20.10-env-nvidia-all.json", policy.EngineDefaultShm, policy.EngineDefaultShm, false, oci.ActionSetSize, false},
		{"docker gpu --shm-size 64m", "docker-20.10-gpu-shm-size-64m.json", policy.EngineDefaultShm, policy.EngineDefaultShm, true, oci.ActionSetSize, true},
		{"docker shareable gpu --shm-size 2g", "docker-20.10-gpu-ipc-shareable-shm-size-2g.json", 2 << 30, 2 << 30, false, oci.ActionNone, true},
		{"docker ipc peer of a donor grown by gpurun", "docker-20.10-gpu-ipc-container.json", policy.EngineDefaultShm, policy.EngineDefaultShm, true, oci.ActionRemount, true},
		{"podman gpu, not grown (the size found is taken as made)", "podman-4.3-env-nvidia-all.json", 0, policy.PodmanDefaultShm, false, oci.ActionRemount, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := before(t, tc.fixture, tc.engineSize)
			if want.Action != tc.action {
				t.Fatalf("fixture's plan %s (%s), want %s", want.Action, want.Reason, tc.action)
			}
			cfg, err := specfile.Load(filepath.Join(fixtures, tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			now := tc.engineSize // the size read from /dev/shm
			if sh := oci.ClassifyShm(cfg.Spec, hostMemory); sh.Kind == oci.ShmPrivate {
				now = sh.Size
			}
			if tc.acted {
				// What the front door did: rewrite the spec (set-size), or
				// grow the host tmpfs (remount).
				if _, err := cfg.Apply(want); err != nil {
					t.Fatal(err)
				}
				now = want.Size
			}
			c := &collector{pol: pol, facts: oci.Facts{HostMemory: hostMemory, TmpfsSize: func(string) (int64, error) { return now, nil }}}
			f := fromSpec(cfg.Spec)
			f.made = tc.made
			ct := f.c
			c.decide(&ct, f)
			ct.Shm.Size, ct.Shm.Device = now, "0:99"
			ct.Decision.InEffect = inEffect(ct)
			d := ct.Decision
			if d.Action != string(want.Action) || d.Size != want.Size || d.Reason != want.Reason || d.Target != want.Target {
				t.Errorf("decision %+v\nwant the plan before gpurun acted: %s %d %q", d, want.Action, want.Size, want.Reason)
			}
			if d.InEffect != tc.inEffect {
				t.Errorf("in effect %v with /dev/shm at %d, want %v (plan size %d)", d.InEffect, now, tc.inEffect, d.Size)
			}
		})
	}
}
