package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	dpapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// GPUResource is the extended resource the fake GPUs are advertised as,
// NVIDIA's device plugin's name: pods ask for them with
// resources.limits["nvidia.com/gpu"].
const GPUResource = "nvidia.com/gpu"

// FakeGPU is one GPU the fake device plugin advertises.
type FakeGPU struct {
	// ID is its device id, a GPU UUID as NVIDIA's plugin reports it.
	ID string
	// Node is the character device (major 195, minor its index) made
	// below the node's directory; the container sees it as DevPath.
	Node, DevPath string
}

// GPUStrategy is how the fake device plugin hands a container its GPUs,
// as NVIDIA's device plugin's DEVICE_LIST_STRATEGY (and
// PASS_DEVICE_SPECS) say.
type GPUStrategy int

const (
	// GPUEnvAndDevices: NVIDIA_VISIBLE_DEVICES with the GPUs' UUIDs, and
	// their device nodes (envvar with pass-device-specs): the GPUs show
	// in the container whatever runtime runs it. StartFakeGPUs' strategy.
	GPUEnvAndDevices GPUStrategy = iota
	// GPUEnv: NVIDIA_VISIBLE_DEVICES only (envvar): NVIDIA's runtime
	// injects the GPUs it names, as under the GPU Operator's legacy mode.
	GPUEnv
	// GPUCDI: CDI device names (cdi-cri: CDIKind=<UUID>): the kubelet
	// hands them to containerd, which injects them from its CDI specs, as
	// under the GPU Operator's native CDI mode (NVIDIA.GPUs writes them).
	GPUCDI
)

// String names the strategy as NVIDIA's device plugin does.
func (s GPUStrategy) String() string {
	switch s {
	case GPUEnv:
		return "envvar"
	case GPUCDI:
		return "cdi-cri"
	default:
		return "envvar with device specs"
	}
}

// gpuPlugin is the harness's device plugin server.
type gpuPlugin struct {
	dpapi.UnimplementedDevicePluginServer
	gpus []FakeGPU
	stop chan struct{}

	mu       sync.Mutex
	srv      *grpc.Server
	strategy GPUStrategy
}

// fakeGPUID is the UUID of fake GPU i: GPUUUID for GPU 0.
func fakeGPUID(i int) string { return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, i) }

// pluginEndpoint is the fake device plugin's socket in the kubelet's
// device plugin directory.
const pluginEndpoint = "gpurun-fake-gpu.sock"

// StartFakeGPUs registers a device plugin with the cluster's kubelet that
// advertises n GPUs as nvidia.com/gpu and allocates them the way NVIDIA's
// device plugin does with its envvar strategy: NVIDIA_VISIBLE_DEVICES
// names the GPUs' UUIDs, and each GPU's device node (/dev/nvidiaN, a real
// character device 195:N made below NodeDir; nothing opens it, so no
// driver is needed) is added to the container. It waits until the node
// reports the GPUs as allocatable; the cleanup stops the plugin.
func (c *Cluster) StartFakeGPUs(n int) []FakeGPU {
	c.t.Helper()
	return c.StartFakeGPUsOn(c.Nodes[0], n)
}

// StartFakeGPUsOn is StartFakeGPUs for the kubelet of node. The plugin
// registers again when the node's kubelet comes back (RestoreNode), as
// NVIDIA's does when it sees the kubelet restart.
func (c *Cluster) StartFakeGPUsOn(node *ClusterNode, n int) []FakeGPU {
	c.t.Helper()
	dir := filepath.Join(node.Dir, "dev")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	var gpus []FakeGPU
	for i := 0; i < n; i++ {
		dev := filepath.Join(dir, fmt.Sprintf("nvidia%d", i))
		if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(NvidiaMajor, uint32(i)))); err != nil {
			c.t.Fatalf("harness: mknod %s: %v", dev, err)
		}
		gpus = append(gpus, FakeGPU{
			ID:      fakeGPUID(i),
			Node:    dev,
			DevPath: fmt.Sprintf("/dev/nvidia%d", i),
		})
	}
	return c.StartGPUPlugin(node, gpus, GPUEnvAndDevices)
}

// StartGPUPlugin registers a fake device plugin with node's kubelet that
// advertises gpus as nvidia.com/gpu and allocates them by strategy
// (SetGPUStrategy changes it), and waits until the node reports them as
// allocatable; the cleanup stops the plugin. On a GPU node of NVIDIA's
// stack the GPUs are NVIDIA.GPUs, which its CDI specs name.
func (c *Cluster) StartGPUPlugin(node *ClusterNode, gpus []FakeGPU, strategy GPUStrategy) []FakeGPU {
	c.t.Helper()
	n := len(gpus)
	p := &gpuPlugin{stop: make(chan struct{}), gpus: gpus, strategy: strategy}
	c.t.Cleanup(p.shutdown)
	node.mu.Lock()
	node.plugin = p
	node.mu.Unlock()
	if err := c.servePlugin(node, p); err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	obj := Object{Kind: "node", Name: node.Name}
	c.waitFor(fmt.Sprintf("%d %s allocatable on %s", n, GPUResource, node.Name), time.Minute, []Object{obj}, func() (bool, string, error) {
		return c.gpusAllocatable(node, n)
	})
	return p.gpus
}

// SetGPUStrategy changes how node's fake device plugin allocates GPUs
// from now on (a device plugin of another configuration, as a GPU
// Operator upgrade would deploy); pods already allocated keep theirs.
func (c *Cluster) SetGPUStrategy(node *ClusterNode, s GPUStrategy) {
	c.t.Helper()
	node.mu.Lock()
	p := node.plugin
	node.mu.Unlock()
	if p == nil {
		c.t.Fatalf("harness: node %s has no fake device plugin", node.Name)
	}
	p.mu.Lock()
	p.strategy = s
	p.mu.Unlock()
}

// gpusAllocatable reports whether node says n GPUs are allocatable.
func (c *Cluster) gpusAllocatable(node *ClusterNode, n int) (bool, string, error) {
	out, err := c.Get(Object{Kind: "node", Name: node.Name}, `{.status.allocatable.nvidia\.com/gpu}`)
	if err != nil {
		return false, err.Error(), nil
	}
	return strings.TrimSpace(out) == fmt.Sprint(n), "allocatable " + out, nil
}

// servePlugin serves p at the node's device plugin socket (a server in
// place before is stopped) and registers it with the node's kubelet.
func (c *Cluster) servePlugin(node *ClusterNode, p *gpuPlugin) error {
	// The kubelet's device plugin directory is fixed
	// (/var/lib/kubelet/device-plugins, whatever --root-dir says): the
	// node's own, below its private /var/lib, so the socket is made and
	// dialled in the node's mount namespace.
	sock := filepath.Join(dpapi.DevicePluginPath, pluginEndpoint)
	var ln net.Listener
	if err := node.ns.Do(func() error {
		if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
			return err
		}
		var err error
		ln, err = net.Listen("unix", sock)
		return err
	}); err != nil {
		return fmt.Errorf("device plugin on %s: %w", node.Name, err)
	}
	srv := grpc.NewServer()
	dpapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(ln) }()
	p.mu.Lock()
	old := p.srv
	p.srv = srv
	p.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	conn, err := grpc.NewClient("passthrough:///kubelet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return node.ns.DialContext(ctx, "unix", dpapi.KubeletSocket)
		}))
	if err != nil {
		return fmt.Errorf("device plugin on %s: %w", node.Name, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dpapi.NewRegistrationClient(conn).Register(ctx, &dpapi.RegisterRequest{
		Version: dpapi.Version, Endpoint: pluginEndpoint, ResourceName: GPUResource,
	}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("register the device plugin with the kubelet of %s: %w\n--- kubelet log tail ---\n%s", node.Name, err,
			logTail(filepath.Join(c.logDir, "kubelet"+node.tag+".log"), 20))
	}
	return nil
}

// shutdown stops the plugin for good.
func (p *gpuPlugin) shutdown() {
	close(p.stop)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		p.srv.Stop()
	}
}

// GetDevicePluginOptions: no pre-start call, no preferred allocation.
func (p *gpuPlugin) GetDevicePluginOptions(context.Context, *dpapi.Empty) (*dpapi.DevicePluginOptions, error) {
	return &dpapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the GPUs, all healthy, then waits for the end.
func (p *gpuPlugin) ListAndWatch(_ *dpapi.Empty, stream dpapi.DevicePlugin_ListAndWatchServer) error {
	resp := &dpapi.ListAndWatchResponse{}
	for _, g := range p.gpus {
		resp.Devices = append(resp.Devices, &dpapi.Device{ID: g.ID, Health: dpapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

// Allocate gives each container its GPUs as the plugin's strategy says:
// the env NVIDIA's plugin sets, with the device nodes or without them, or
// CDI device names.
func (p *gpuPlugin) Allocate(_ context.Context, req *dpapi.AllocateRequest) (*dpapi.AllocateResponse, error) {
	p.mu.Lock()
	strategy := p.strategy
	p.mu.Unlock()
	resp := &dpapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		cresp := &dpapi.ContainerAllocateResponse{}
		var ids []string
		for _, id := range creq.DevicesIds {
			g, ok := p.gpu(id)
			if !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			ids = append(ids, id)
			switch strategy {
			case GPUEnvAndDevices:
				cresp.Devices = append(cresp.Devices, &dpapi.DeviceSpec{ContainerPath: g.DevPath, HostPath: g.Node, Permissions: "rw"})
			case GPUCDI:
				cresp.CdiDevices = append(cresp.CdiDevices, &dpapi.CDIDevice{Name: CDIKind + "=" + id})
			}
		}
		if strategy != GPUCDI {
			cresp.Envs = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (p *gpuPlugin) gpu(id string) (FakeGPU, bool) {
	for _, g := range p.gpus {
		if g.ID == id {
			return g, true
		}
	}
	return FakeGPU{}, false
}
