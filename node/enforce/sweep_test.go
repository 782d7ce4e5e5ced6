package enforce

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/oci"
)

// TestSweepTarget: the restart sweep runs for a container the policy
// applies to whose /dev/shm is its pod's — the sandbox's tmpfs the engine
// named, or a Memory emptyDir the kubelet made for the pod — and for
// nothing else; the policy turns it off.
func TestSweepTarget(t *testing.T) {
	const uid = "7e4a1f7c-1b2d-4c3e-9f00-123456789abc"
	bundle := "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + ctrID
	sandboxShm := "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm"
	emptyDir := func(uid string) specs.Mount {
		return specs.Mount{Destination: "/dev/shm", Type: "bind", Source: "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~empty-dir/gpurun-shm", Options: []string{"rbind", "rw"}}
	}
	ann := func(uid string) map[string]string {
		a := criAnnotations(podID)
		a[oci.AnnotationCRIContainerName] = "trainer"
		a[oci.AnnotationCRISandboxUID] = uid
		return a
	}
	notGPU := func(c *oci.Container) *oci.Container { c.Spec.Process.Env = nil; return c }
	tests := []struct {
		name   string
		policy string
		ctr    *oci.Container
		dirs   dirs.Dirs
		want   string // the ShmDir swept, "" for none
	}{
		{"the sandbox's tmpfs containerd named", "", container(sandboxBind("/run/containerd", podID), ann(uid)), dirs.FromBundle(bundle, ctrID), sandboxShm},
		{"NRI: the pod's tmpfs under a default state dir", "", container(sandboxBind("/run/containerd", podID), ann(uid)), dirs.ForPod(podID, 0, []string{"/run/containerd"}), sandboxShm},
		{"the webhook's emptyDir", "", container(emptyDir(uid), ann(uid)), dirs.FromBundle(bundle, ctrID), "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~empty-dir/gpurun-shm"},
		{"sweep off", `sweep = "off"`, container(sandboxBind("/run/containerd", podID), ann(uid)), dirs.FromBundle(bundle, ctrID), ""},
		{"not a GPU container", "", notGPU(container(sandboxBind("/run/containerd", podID), ann(uid))), dirs.FromBundle(bundle, ctrID), ""},
		{"another pod's emptyDir", "", container(emptyDir("00000000-0000-0000-0000-000000000000"), ann(uid)), dirs.FromBundle(bundle, ctrID), ""},
		{"another pod's sandbox tmpfs", "", container(sandboxBind("/run/containerd", otherID), ann(uid)), dirs.FromBundle(bundle, ctrID), ""},
		{"a tmpfs the engine did not name", "", container(sandboxBind("/run/containerd", podID), ann(uid)), dirs.Dirs{}, ""},
		{"the host's /dev/shm", "", container(specs.Mount{Destination: "/dev/shm", Type: "bind", Source: "/dev/shm", Options: []string{"rbind"}}, ann(uid)), dirs.FromBundle(bundle, ctrID), ""},
		{"a container's own tmpfs (not a pod's)", "", container(ownTmpfs, nil), dirs.Dirs{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.policy)
			if tt.ctr.Spec.Linux != nil {
				tt.ctr.Spec.Linux.CgroupsPath = "/kubepods/pod" + uid + "/" + ctrID
			}
			res, err := h.e.Run(Subject{ID: ctrID}, nil, func() (Request, error) {
				return Request{Container: tt.ctr, Dirs: tt.dirs, Carry: func(oci.Plan) (Done, error) { return Done{}, nil }}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if len(h.sweeps) != 0 || res.Sweep != nil {
					t.Errorf("swept %+v", h.sweeps)
				}
				return
			}
			want := shmsweep.Start{ShmDir: tt.want, SandboxID: podID, Container: "trainer", ContainerID: ctrID, CgroupsPath: "/kubepods/pod" + uid + "/" + ctrID}
			if len(h.sweeps) != 1 || h.sweeps[0] != want {
				t.Errorf("sweeps %+v, want %+v", h.sweeps, want)
			}
		})
	}
}

// TestSweepTargetProved: NRI names a pod's tmpfs from its mounts; under a
// state dir the policy does not list, it is the pod's (and swept) only when
// it is the filesystem the pod's sandbox sees at /dev/shm.
func TestSweepTargetProved(t *testing.T) {
	state := t.TempDir()
	shm := filepath.Join(state, "io.containerd.grpc.v1.cri", "sandboxes", podID, "shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, proof string
		swept       bool
	}{
		{"the sandbox sees that filesystem", shm, true},
		{"the sandbox sees another", "/proc", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "")
			c := container(sandboxBind(state, podID), criAnnotations(podID))
			c.Spec.Annotations[oci.AnnotationCRIContainerName] = "trainer"
			d := dirs.Dirs{PodID: podID, FromMounts: true, PodShm: tt.proof}
			if _, err := h.e.Run(Subject{ID: ctrID}, nil, func() (Request, error) { return Request{Container: c, Dirs: d}, nil }); err != nil {
				t.Fatal(err)
			}
			if got := len(h.sweeps) == 1 && h.sweeps[0].ShmDir == shm; got != tt.swept {
				t.Errorf("swept %+v, want a sweep of %s: %v", h.sweeps, shm, tt.swept)
			}
		})
	}
}

// TestSweepRecord: what a sweep did goes into the container's record (the
// node agent's Events and metrics read it back); a first start, or a
// restart with nothing left, adds nothing; a failed sweep never fails the
// start, fail_closed or not.
func TestSweepRecord(t *testing.T) {
	nccl := shmsweep.File{Name: "/dev/shm/nccl-shm-1", Bytes: 700 << 20}
	tests := []struct {
		name   string
		policy string
		res    shmsweep.Result
		err    error
		want   map[string]any // fields of the record; nil: no sweep field at all
	}{
		{name: "first start", res: shmsweep.Result{}},
		{name: "a restart with nothing left", res: shmsweep.Result{Restart: true}},
		{name: "swept", res: shmsweep.Result{Restart: true, Swept: []shmsweep.File{nccl}, SweptBytes: nccl.Bytes,
			Kept: []shmsweep.Kept{{File: shmsweep.File{Name: "/dev/shm/live", Bytes: 4096}, Why: shmsweep.KeptHeld}}, KeptBytes: 4096},
			want: map[string]any{"swept_bytes": float64(700 << 20), "swept_files": float64(1), "kept_bytes": float64(4096), "kept_files": float64(1)}},
		{name: "failed, fail_closed", policy: "fail_closed = true", err: errors.New("statfs: no such file"),
			want: map[string]any{"sweep_err": "statfs: no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.policy)
			h.sweepRes, h.sweepErr = tt.res, tt.err
			c := container(sandboxBind("/run/containerd", podID), criAnnotations(podID))
			c.Spec.Annotations[oci.AnnotationCRIContainerName] = "trainer"
			res, err := h.e.Run(Subject{ID: ctrID}, nil, func() (Request, error) {
				return Request{Container: c, Dirs: dirs.FromBundle("/run/containerd/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID)}, nil
			})
			if err != nil || res.Err != nil {
				t.Fatalf("Run = %v, %v: a sweep never fails the start", err, res.Err)
			}
			recs := h.records(t)
			if len(recs) != 1 {
				t.Fatalf("records %v", recs)
			}
			if tt.want == nil {
				for _, k := range []string{"sweep_path", "swept_bytes", "sweep_err"} {
					if _, ok := recs[0][k]; ok {
						t.Errorf("record has %s: %v", k, recs[0])
					}
				}
				return
			}
			if recs[0]["sweep_path"] != "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/"+podID+"/shm" {
				t.Errorf("sweep_path %v", recs[0]["sweep_path"])
			}
			for k, v := range tt.want {
				if recs[0][k] != v {
					t.Errorf("%s = %v, want %v (record %v)", k, recs[0][k], v, recs[0])
				}
			}
		})
	}
}
