package doctor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// TestPodsCheck: a running GPU container whose pod still has the
// engine's 64 MiB /dev/shm is a problem, whatever the configuration says,
// naming its runtime handler when that is not gpurun's; a GPU pod sized
// (to any size but 64 MiB: gpurun under another policy, the user) and a
// pod without GPUs are not.
func TestPodsCheck(t *testing.T) {
	const fixture = "containerd-1.6-cri-container-env-nvidia-all.json"
	cfg, err := specfile.Load(fixtures + "/" + fixture)
	if err != nil {
		t.Fatal(err)
	}
	sandbox := cfg.Spec.Annotations[oci.AnnotationCRISandboxID]
	shm := oci.ClassifyShm(cfg.Spec, 0).Source
	running := func(spec any) *runtimeapi.ContainerStatusResponse {
		info, _ := json.Marshal(map[string]any{"pid": 4242, "sandboxID": sandbox, "runtimeSpec": spec})
		return &runtimeapi.ContainerStatusResponse{
			Status: &runtimeapi.ContainerStatus{Id: strings.Repeat("c", 64), Metadata: &runtimeapi.ContainerMetadata{Name: "trainer"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			Info:   map[string]string{"info": string(info)},
		}
	}
	plain, err := specfile.Load(fixtures + "/containerd-1.6-cri-container.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		spec     any
		size     int64
		handler  string
		want     Status
		wantText string
	}{
		{"GPU pod at 64MiB through NVIDIA's handler", cfg.Spec, policy.EngineDefaultShm, "nvidia", Problem, "handler nvidia"},
		{"GPU pod at 64MiB through gpurun's handler", cfg.Spec, policy.EngineDefaultShm, "gpurun", Problem, "gpurun resize --cri"},
		{"GPU pod sized", cfg.Spec, 8 * policy.GiB, "nvidia", OK, "none has"},
		{"pod without GPUs", plain.Spec, policy.EngineDefaultShm, "nvidia", OK, "0 running GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostFake(t)
			f.fs[shm] = FS{Tmpfs: true, Size: tc.size}
			cri := &fakeCRI{status: map[string]*runtimeapi.ContainerStatusResponse{"c1": running(tc.spec)},
				sandboxOf: map[string]string{"c1": sandbox}, handlers: map[string]string{sandbox: tc.handler}}
			c, ok := podsCheck(context.Background(), f.system(), HostOptions{CRI: cri, CRIEndpoint: "unix:///run/containerd/containerd.sock"}, policy.Default(), "gpurun")
			if !ok || c.Status != tc.want || !strings.Contains(c.Detail+c.Fix, tc.wantText) {
				t.Errorf("%s: %s; want %s mentioning %q [fix: %s]", c.Status, c.Detail, tc.want, tc.wantText, c.Fix)
			}
		})
	}
}
