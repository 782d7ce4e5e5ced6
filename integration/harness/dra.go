package harness

// A DRA driver of the harness's own, for the cluster tests: it runs in the
// test process, as the fake device plugin does, and talks to a node's
// kubelet and to the API server the way a DRA driver's kubelet plugin
// does, through k8s.io/dynamic-resource-allocation's kubeletplugin
// library: it registers with the kubelet (its plugins_registry), publishes
// the node's devices in a ResourceSlice, and prepares the claims the
// scheduler allocated from them by writing a CDI spec for each claim into
// the directory the node's containerd reads, and answering the kubelet
// with the CDI device names, which the kubelet hands to the runtime
// (CRI's CDIDevices) — what NVIDIA's DRA driver does with real GPUs. Its
// GPUs are character devices 195:N below the node's directory, as the
// device plugin's are (nothing opens them, so no driver is needed).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// The GPU driver's names are NVIDIA's DRA driver's
// (kubernetes-sigs/dra-driver-nvidia-gpu): its driver name, which is also
// the domain of its devices' attributes; the DeviceClass its chart
// installs, which selects the driver's devices of type gpu; and the CDI
// kind of the per-claim specs its kubelet plugin writes
// (k8s.gpu.nvidia.com/claim=<claim UID>-gpu-<minor>).
const (
	DRAGPUDriver  = "gpu.nvidia.com"
	DRAGPUClass   = "gpu.nvidia.com"
	DRAGPUCDIKind = "k8s.gpu.nvidia.com/claim"
)

// The non-GPU driver is the harness's own: a "network interface" whose
// claim gives the container one environment variable (DRANICEnv=<device
// name>) and nothing else, so that a test can tell the claim was prepared
// and its CDI device injected.
const (
	DRANICDriver  = "nic.test.gpurun.io"
	DRANICClass   = "nic.test.gpurun.io"
	DRANICCDIKind = "test.gpurun.io/nic"
	DRANICEnv     = "GPURUN_TEST_NIC"
)

// DeviceClassManifest is the DeviceClass of a DRA driver of the harness's
// (DRAGPUClass or DRANICClass), as its installation creates it; "" for
// another name. The GPU class is NVIDIA's chart's (without its
// extendedResourceName, which would let the scheduler serve the device
// plugin's nvidia.com/gpu from DRA devices on the same node).
func DeviceClassManifest(class string) string {
	var expr string
	switch class {
	case DRAGPUClass:
		expr = fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", DRAGPUDriver, DRAGPUDriver)
	case DRANICClass:
		expr = fmt.Sprintf("device.driver == '%s'", DRANICDriver)
	default:
		return ""
	}
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: %s}
spec:
  selectors:
  - cel: {expression: %q}
`, class, expr)
}

// DRADevice is one device a DRA driver of the harness's publishes.
type DRADevice struct {
	// Name is its name in the ResourceSlice (NVIDIA's: gpu-<minor>).
	Name string
	// Attributes and Capacity are its attributes and capacities in the
	// ResourceSlice (unqualified names are the driver's domain).
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	// Node is its character device on the node ("" for none), which the
	// container sees as DevPath; Minor is its minor number.
	Node, DevPath string
	Minor         int
	// Env is what its CDI device sets in the container (KEY=VALUE).
	Env []string
}

// DRADriver is a DRA driver of the harness's on one node (see
// StartDRADriver).
type DRADriver struct {
	// Name is the driver's name; CDIKind the kind of its CDI devices.
	Name, CDIKind string
	// Node is the node it serves; Devices what it publishes there (one
	// pool, named after the node, of one ResourceSlice).
	Node    *ClusterNode
	Devices []DRADevice
	// Env is what every claim's CDI spec sets in the container, besides
	// its devices' own (NVIDIA's driver: NVIDIA_VISIBLE_DEVICES=void, so
	// that NVIDIA's runtime in legacy mode injects nothing more).
	Env []string

	helper  *kubeletplugin.Helper
	cancel  context.CancelFunc
	logPath string
	log     io.WriteCloser

	mu       sync.Mutex
	inUse    map[string]types.UID // device name -> the claim it is prepared for
	prepared map[types.UID]preparedClaim
	fatal    []error
}

// preparedClaim is what the driver prepared for a claim.
type preparedClaim struct {
	namespace, name string
	devices         []string
	spec            string // the CDI spec file, on the node
}

// StartDRAGPUs starts the GPU driver (DRAGPUDriver) on node with a fake
// GPU for each memory size (a quantity: "40Gi"), in that order, their
// minors from first on: device gpu-<minor>, a character device
// 195:<minor> made below the node's directory that the container sees as
// /dev/nvidia<minor>, with attributes as NVIDIA's driver publishes them
// for a GPU (type gpu, uuid, productName, brand, driverVersion) and its
// memory as the capacity "memory", which a request's selector can pick
// GPUs by. It creates the DeviceClass DRAGPUClass too. The claims it
// prepares set NVIDIA_VISIBLE_DEVICES=void besides their device nodes, as
// NVIDIA's per-claim specs do.
func (c *Cluster) StartDRAGPUs(node *ClusterNode, first int, memory ...string) *DRADriver {
	c.t.Helper()
	dir := filepath.Join(node.Dir, "dra-dev")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatalf("harness: DRA GPUs: %v", err)
	}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	ver := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{VersionValue: &s} }
	var devices []DRADevice
	for i, mem := range memory {
		minor := first + i
		q, err := resource.ParseQuantity(mem)
		if err != nil {
			c.t.Fatalf("harness: GPU memory %q: %v", mem, err)
		}
		dev := filepath.Join(dir, fmt.Sprintf("nvidia%d", minor))
		if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(NvidiaMajor, uint32(minor)))); err != nil {
			c.t.Fatalf("harness: mknod %s c %d %d: %v", dev, NvidiaMajor, minor, err)
		}
		devices = append(devices, DRADevice{
			Name: fmt.Sprintf("gpu-%d", minor),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":          str("gpu"),
				"uuid":          str(fakeGPUID(minor)),
				"productName":   str("gpurun test GPU " + mem),
				"brand":         str("Nvidia"),
				"driverVersion": ver("580.95.5"),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: q}},
			Node:     dev, DevPath: fmt.Sprintf("/dev/nvidia%d", minor), Minor: minor,
		})
	}
	d := &DRADriver{Name: DRAGPUDriver, CDIKind: DRAGPUCDIKind, Node: node, Devices: devices, Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}
	c.Apply(DeviceClassManifest(DRAGPUClass))
	c.StartDRADriver(d)
	return d
}

// StartDRANICs starts the non-GPU driver (DRANICDriver) on node with n
// devices nic-0 … nic-(n-1), whose claims set DRANICEnv=<device name> and
// nothing else, and creates the DeviceClass DRANICClass.
func (c *Cluster) StartDRANICs(node *ClusterNode, n int) *DRADriver {
	c.t.Helper()
	var devices []DRADevice
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("nic-%d", i)
		kind := "nic"
		devices = append(devices, DRADevice{Name: name, Minor: -1, Env: []string{DRANICEnv + "=" + name},
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: &kind}}})
	}
	d := &DRADriver{Name: DRANICDriver, CDIKind: DRANICCDIKind, Node: node, Devices: devices}
	c.Apply(DeviceClassManifest(DRANICClass))
	c.StartDRADriver(d)
	return d
}

// StartDRADriver starts d on its node: the kubelet plugin (registration
// socket in the kubelet's plugins_registry, its DRA socket in the
// kubelet's plugins directory, both below the kubelet's --root-dir), and
// the ResourceSlice of its devices (pool and slice named for the node, as
// the library names them, owned by the Node). It waits until the kubelet
// has registered the plugin and the API server lists every device; the
// cleanup stops it, and fails the test if the driver hit a fatal error
// (its log, one per driver and node, is in the cluster's log directory).
func (c *Cluster) StartDRADriver(d *DRADriver) {
	c.t.Helper()
	t := c.t
	node := d.Node
	d.inUse = map[string]types.UID{}
	d.prepared = map[types.UID]preparedClaim{}
	d.logPath = filepath.Join(c.logDir, "dra-"+d.Name+node.tag+".log")
	f, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("harness: DRA driver %s on %s: its log: %v", d.Name, node.Name, err)
	}
	d.log = f
	registry := filepath.Join(node.KubeletRoot, "plugins_registry")
	data := filepath.Join(node.KubeletRoot, "plugins", d.Name)
	if err := os.MkdirAll(data, 0o750); err != nil {
		t.Fatalf("harness: DRA driver %s on %s: %v", d.Name, node.Name, err)
	}
	client, err := c.kubeClient()
	if err != nil {
		t.Fatalf("harness: DRA driver %s on %s: API client: %v", d.Name, node.Name, err)
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(6)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	d.cancel = cancel
	t.Cleanup(d.stop(t))
	d.helper, err = kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.Name),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node.Name),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(data),
		// No health reporting: the fake devices never fail.
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		t.Fatalf("harness: DRA driver %s on %s: %v", d.Name, node.Name, err)
	}
	var devices []resourceapi.Device
	for _, dev := range d.Devices {
		devices = append(devices, resourceapi.Device{Name: dev.Name, Attributes: dev.Attributes, Capacity: dev.Capacity})
	}
	if err := d.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node.Name: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}); err != nil {
		t.Fatalf("harness: DRA driver %s on %s: publish: %v", d.Name, node.Name, err)
	}
	if err := poll(time.Minute, func() (bool, string, error) {
		st := d.helper.RegistrationStatus()
		if st == nil || !st.PluginRegistered {
			return false, fmt.Sprintf("the kubelet has not registered it (%v)", st), nil
		}
		slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + node.Name + ",spec.driver=" + d.Name})
		if err != nil {
			return false, err.Error(), nil
		}
		n := 0
		for _, s := range slices.Items {
			n += len(s.Spec.Devices)
		}
		return n == len(d.Devices), fmt.Sprintf("%d devices in %d ResourceSlices", n, len(slices.Items)), nil
	}); err != nil {
		t.Fatalf("harness: DRA driver %s on %s: %v\n--- its log ---\n%s\n--- kubelet log tail ---\n%s", d.Name, node.Name, err,
			logTail(d.logPath, 30), logTail(filepath.Join(c.logDir, "kubelet"+node.tag+".log"), 30))
	}
}

// stop returns the cleanup: the plugin stopped (its sockets gone), the
// CDI specs of claims still prepared removed, and its fatal errors
// reported.
func (d *DRADriver) stop(t interface{ Errorf(string, ...any) }) func() {
	return func() {
		if d.helper != nil {
			d.helper.Stop()
		}
		d.cancel()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, p := range d.prepared {
			if err := d.Node.ns.Do(func() error { return os.Remove(p.spec) }); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("harness: DRA driver %s on %s: claim %s/%s: its CDI spec: %v", d.Name, d.Node.Name, p.namespace, p.name, err)
			}
		}
		for _, err := range d.fatal {
			t.Errorf("harness: DRA driver %s on %s: %v (its log: %s)", d.Name, d.Node.Name, err, d.logPath)
		}
		d.log.Close()
	}
}

// LogTail is the last n lines of the driver's log.
func (d *DRADriver) LogTail(n int) string { return logTail(d.logPath, n) }

// Device returns the driver's device named name.
func (d *DRADriver) Device(name string) (DRADevice, bool) {
	for _, dev := range d.Devices {
		if dev.Name == name {
			return dev, true
		}
	}
	return DRADevice{}, false
}

// kubeClient is a client-go client of the API server as the cluster
// admin, dialling from the control plane's network namespace.
func (c *Cluster) kubeClient() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(&rest.Config{
		Host:            "https://127.0.0.1:6443",
		TLSClientConfig: rest.TLSClientConfig{CertFile: c.admin.Cert, KeyFile: c.admin.Key, CAFile: c.pki.CAFile},
		Dial:            c.ns.DialContext,
		UserAgent:       "gpurun-test-dra-driver",
		QPS:             50, Burst: 100,
	})
}

// PrepareResourceClaims prepares each claim: the devices allocated to it
// from this driver's pool, each once (a device prepared for another claim
// that is still prepared is an error: the last line of defence the
// library asks of a driver), become the devices of one CDI spec for the
// claim, written where the node's containerd reads specs, and the kubelet
// is answered with their CDI names.
func (d *DRADriver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		res, err := d.prepare(claim)
		if err != nil {
			klog.FromContext(ctx).Error(err, "prepare", "claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID)
			res = kubeletplugin.PrepareResult{Err: err}
		}
		out[claim.UID] = res
	}
	return out, nil
}

func (d *DRADriver) prepare(claim *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, error) {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	vendor, class, _ := strings.Cut(d.CDIKind, "/")
	var result kubeletplugin.PrepareResult
	var cdiDevices []any
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.Name {
			continue
		}
		if r.Pool != d.Node.Name {
			return result, fmt.Errorf("claim %s/%s: device %s of pool %s: this driver's pool on this node is %s", claim.Namespace, claim.Name, r.Device, r.Pool, d.Node.Name)
		}
		dev, ok := d.Device(r.Device)
		if !ok {
			return result, fmt.Errorf("claim %s/%s: no device %s here", claim.Namespace, claim.Name, r.Device)
		}
		if other, busy := d.inUse[dev.Name]; busy && other != claim.UID {
			return result, fmt.Errorf("claim %s/%s: device %s is prepared for claim %s", claim.Namespace, claim.Name, dev.Name, other)
		}
		cdiName := string(claim.UID) + "-" + dev.Name
		edits := map[string]any{}
		if dev.Node != "" {
			edits["deviceNodes"] = []any{map[string]any{"path": dev.DevPath, "hostPath": dev.Node}}
		}
		if len(dev.Env) > 0 {
			edits["env"] = dev.Env
		}
		cdiDevices = append(cdiDevices, map[string]any{"name": cdiName, "containerEdits": edits})
		names = append(names, dev.Name)
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{d.CDIKind + "=" + cdiName},
		})
	}
	if len(cdiDevices) == 0 {
		return result, nil
	}
	spec := map[string]any{"cdiVersion": "0.5.0", "kind": d.CDIKind, "devices": cdiDevices}
	if len(d.Env) > 0 {
		spec["containerEdits"] = map[string]any{"env": d.Env}
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return result, fmt.Errorf("claim %s/%s: CDI spec: %w", claim.Namespace, claim.Name, err)
	}
	// A transient spec per claim, named as CDI names them.
	path := filepath.Join(d.Node.CDISpecDir, fmt.Sprintf("%s-%s_%s.json", vendor, class, claim.UID))
	if err := d.Node.ns.Do(func() error {
		if err := os.MkdirAll(d.Node.CDISpecDir, 0o755); err != nil {
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}); err != nil {
		return result, fmt.Errorf("claim %s/%s: CDI spec: %w", claim.Namespace, claim.Name, err)
	}
	for _, n := range names {
		d.inUse[n] = claim.UID
	}
	sort.Strings(names)
	d.prepared[claim.UID] = preparedClaim{namespace: claim.Namespace, name: claim.Name, devices: names, spec: path}
	return result, nil
}

// UnprepareResourceClaims removes each claim's CDI spec and frees its
// devices; a claim not prepared here is no error (the kubelet may ask
// again).
func (d *DRADriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, claim := range claims {
		p, ok := d.prepared[claim.UID]
		if !ok {
			out[claim.UID] = nil
			continue
		}
		err := d.Node.ns.Do(func() error { return os.Remove(p.spec) })
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		if err == nil {
			for _, n := range p.devices {
				delete(d.inUse, n)
			}
			delete(d.prepared, claim.UID)
		}
		out[claim.UID] = err
	}
	return out, nil
}

// HandleError logs what went wrong in the background (the library's
// ResourceSlice publishing, its gRPC servers) and keeps the fatal errors
// for the cleanup to report.
func (d *DRADriver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && ctx.Err() == nil {
		d.mu.Lock()
		d.fatal = append(d.fatal, fmt.Errorf("%s: %w", msg, err))
		d.mu.Unlock()
	}
}

// WatchHealthStatus: the driver reports no health (the service is off).
func (d *DRADriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
