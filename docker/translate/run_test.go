package translate

import (
	"slices"
	"testing"

	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// TestDeviceFlags: every --device spelling reaches the one classifier by
// its path in the container; exactly the GPU ones are evidence, named as
// the spec names them.
func TestDeviceFlags(t *testing.T) {
	devices := []string{
		"/dev/nvidia0", "/dev/nvidia12:/dev/nvidia12:rwm", "/tmp/nvidia0:/dev/nvidia0",
		"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia0:/dev/fake",
		"/dev/kfd", "/dev/dri", "/dev/dri/renderD128", "/dev/dri/card0", "/dev/accel/accel0", "/dev/accel0",
		"/dev/nvidia1:rw", "/dev/snd", "/dev/fuse:/dev/fuse:rwm", "/dev//nvidia3",
		"nvidia.com/gpu=all", "nvidia.com/gpu=0", "amd.com/gpu=1", "habana.ai/gaudi=all", "intel.com/sgx=epc",
		"/dev/a:/dev/b:/dev/c:rw",
	}
	want := []string{
		"device nvidia.com/gpu=all", "device nvidia.com/gpu=0", "device amd.com/gpu=1", "device habana.ai/gaudi=all",
		"device /dev/nvidia0", "device /dev/nvidia12", "device /dev/nvidia0",
		"device /dev/kfd", "device /dev/dri", "device /dev/dri/renderD128", "device /dev/accel/accel0", "device /dev/accel0",
		"device /dev/nvidia1", "device /dev/nvidia3",
	}
	var args []string
	for _, d := range devices {
		args = append(args, "--device", d)
	}
	run, err := runargs.Parse(append(args, "img"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromRun(run, nil, policy.EngineDefaultShm)
	if err != nil {
		t.Fatal(err)
	}
	if g := oci.EvidenceOf(nil).DetectGPU(c, 0); !slices.Equal(g.Evidence, want) {
		t.Errorf("evidence\n got %q\nwant %q", g.Evidence, want)
	}
	// docker refuses these; gpurun leaves the command to it.
	for _, bad := range []string{"nvidia.com/gpu=", "=all"} {
		run, err := runargs.Parse([]string{"--device", bad, "img"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := FromRun(run, nil, policy.EngineDefaultShm); err == nil {
			t.Errorf("--device %s was accepted", bad)
		}
	}
	for _, single := range []string{"/dev/nvidiactl", "/dev/dri/card0", "intel.com/sgx=epc", "/dev/nvidia0:/dev/fake"} {
		run, err := runargs.Parse([]string{"--device", single, "img"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := FromRun(run, nil, policy.EngineDefaultShm)
		if err != nil {
			t.Fatal(err)
		}
		if g := oci.EvidenceOf(nil).DetectGPU(c, 0); g.GPU {
			t.Errorf("--device %s alone is GPU evidence: %q", single, g.Evidence)
		}
	}
}
