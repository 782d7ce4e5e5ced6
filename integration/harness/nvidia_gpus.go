package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// GPUs gives the fake GPU node count GPUs, as NVIDIA's driver, toolkit
// and device plugin show them: GPU i is a character device 195:i in Dir
// (GPU 0 is GPU), with a UUID (GPU 0's is GPUUUID), and the CDI spec of
// kind CDIKind (which NewNVIDIA wrote for GPU 0 alone) names each one by
// its index and its UUID, with its own device node /dev/nvidia<i>, and
// "all" every one; the driver's mount and NVIDIA_VISIBLE_DEVICES=void are
// the spec's, as before. It returns them for Cluster.StartGPUPlugin, whose
// device names (UUIDs, for every strategy) the spec then resolves: through
// containerd's CDI (GPUCDI) or NVIDIA's runtime in CDI mode (GPUEnv).
func (n *NVIDIA) GPUs(count int) []FakeGPU {
	n.t.Helper()
	if count < 1 {
		n.t.Fatalf("harness: %d GPUs: want at least one", count)
	}
	gpus := []FakeGPU{{ID: GPUUUID, Node: n.GPU, DevPath: GPUDevicePath}}
	for i := 1; i < count; i++ {
		dev := filepath.Join(filepath.Dir(n.GPU), fmt.Sprintf("nvidia%d", i))
		if _, err := os.Stat(dev); os.IsNotExist(err) {
			if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(NvidiaMajor, uint32(i)))); err != nil {
				n.t.Fatalf("harness: mknod %s c %d %d: %v", dev, NvidiaMajor, i, err)
			}
		}
		gpus = append(gpus, FakeGPU{ID: fakeGPUID(i), Node: dev, DevPath: fmt.Sprintf("/dev/nvidia%d", i)})
	}
	var devices, all []any
	for i, g := range gpus {
		node := map[string]any{"path": g.DevPath, "hostPath": g.Node}
		all = append(all, node)
		for _, name := range []string{strconv.Itoa(i), g.ID} {
			devices = append(devices, map[string]any{"name": name, "containerEdits": map[string]any{"deviceNodes": []any{node}}})
		}
	}
	devices = append(devices, map[string]any{"name": "all", "containerEdits": map[string]any{"deviceNodes": all}})
	spec := n.spec(CDIKind, nil, true)
	spec["devices"] = devices
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		n.t.Fatalf("harness: %v", err)
	}
	if err := os.WriteFile(filepath.Join(n.CDIDir, "nvidia.com-gpu.json"), data, 0o644); err != nil {
		n.t.Fatalf("harness: %v", err)
	}
	return gpus
}
