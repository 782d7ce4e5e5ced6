package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	dpapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// NodeKind is what runs a node's containers.
type NodeKind string

// The kinds of node a cluster may have.
const (
	// NodeContainerd16 is Debian's containerd 1.6, config version 2.
	NodeContainerd16 NodeKind = "containerd-1.6"
	// NodeContainerd2 is containerd 2.x ($GPURUN_TEST_CONTAINERD2_BIN),
	// config version 3, NRI on.
	NodeContainerd2 NodeKind = "containerd-2"
	// NodeK3s is a node laid out as k3s lays out its embedded containerd
	// (NodeSpec.K3s): config.toml generated from k3s's template (and the
	// administrator's, if any) in /var/lib/rancher/k3s/agent/etc/containerd,
	// state at /run/k3s/containerd, as the node sees them; containerd 2.x
	// for a version 3 template, Debian's 1.6 for version 2. Each start of
	// containerd (its supervisor's restarts included) renders the config
	// first, as k3s does.
	NodeK3s NodeKind = "k3s"
)

// GPULabels returns the labels a GPU node carries in a cluster with
// NVIDIA's GPU Operator and Node Feature Discovery: nvidia.com/gpu.present
// from the operator's GPU feature discovery, and NFD's PCI vendor label
// for NVIDIA (0x10de).
func GPULabels() map[string]string {
	return map[string]string{
		"nvidia.com/gpu.present":                      "true",
		"feature.node.kubernetes.io/pci-10de.present": "true",
	}
}

// NodeKindLabel labels every node of a multi-node cluster with its kind.
const NodeKindLabel = "gpurun.test/node-kind"

// NodeSpec describes one node of StartMultiNodeCluster's.
type NodeSpec struct {
	// Name is the node's name (short: it names files and cgroups).
	Name string
	Kind NodeKind
	// GPUs is how many fake GPUs its device plugin advertises
	// (StartFakeGPUs); a node with GPUs carries GPULabels.
	GPUs int
	// Labels are more labels for the node.
	Labels map[string]string
	// K3s describes the k3s layout of a NodeK3s node: DataDir, Program,
	// Release and Base (HostRoot is the harness's).
	K3s *K3sNode
}

// ClusterNode is one node of a cluster: a kubelet and the containerd it
// drives over CRI, with directories, a cgroup root and (in a multi-node
// cluster) network and mount namespaces of its own.
type ClusterNode struct {
	// Name, IP and Kind are the node's name, its address and what runs
	// its containers; Labels are the labels it registered with.
	Name, IP string
	Kind     NodeKind
	Labels   map[string]string
	// GPUs is how many fake GPUs it advertises.
	GPUs int
	// Dir holds its directories (an rshared mount: what its kubelet and
	// containerd mount below it is seen from the test too).
	Dir string
	// Containerd is its runtime, supervised (see Cluster.Containerd);
	// NRISocket is containerd 2.x's NRI socket ("" on 1.6; a node path in
	// a multi-node cluster).
	Containerd *Containerd
	NRISocket  string
	// Paths for gpurun: in a multi-node cluster gpurun's defaults, node
	// paths (the node's own /usr/local, /etc and /var/lib: read them with
	// ReadFile); for StartCluster's node this machine's, as in Cluster.
	BinDir, PolicyPath, AgentState, InstallState, CDISpecDir string
	// KubeletRoot, PodLogsDir and CgroupRoot are its kubelet's.
	KubeletRoot, PodLogsDir, CgroupRoot string
	// PodSubnet is where its pods' addresses come from.
	PodSubnet string
	// K3s is the layout of a NodeK3s node (its HostRoot holds the node's
	// /var/lib/rancher; the node sees it at its own path).
	K3s *K3sNode

	ns  *NetNS
	mnt *mountNS
	tag string // "-<name>" in a multi-node cluster's file names, "" alone

	mu      sync.Mutex
	kubelet *process
	plugin  *gpuPlugin
}

func (n *ClusterNode) setKubelet(p *process) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kubelet = p
}

func (n *ClusterNode) kubeletProc() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kubelet
}

// NetNS is the network namespace the node runs in.
func (n *ClusterNode) NetNS() *NetNS { return n.ns }

// ReadFile reads a file as the node sees it (through its mount
// namespace).
func (n *ClusterNode) ReadFile(path string) ([]byte, error) { return n.ns.ReadFile(path) }

// Multi-node network: the control plane's namespace holds a bridge
// (multiBridge, multiControlIP) that every node's eth0 is a veth peer of;
// node i has the address 192.0.2.(11+i) and the pod subnet
// 198.51.100.(32i)/27, routed through it by the control plane's namespace,
// which forwards between the nodes. Documentation ranges, as for the
// single node: nothing leaves the namespaces.
const (
	multiControlIP = "192.0.2.1"
	multiBridge    = "gpurun-cl0"
	multiMaxNodes  = 8
)

// MultiNodeOptions configures [StartMultiNodeCluster].
type MultiNodeOptions struct {
	// Nodes are the nodes, at least one and at most 8.
	Nodes []NodeSpec
	// Images are docker-save archives imported into every node's
	// containerd (with the pause and busybox images), in parallel.
	Images []string
}

// MixedNodes is a GPU cluster of mixed engines: a GPU node on containerd
// 1.6 (config version 2), one on containerd 2.x (version 3, NRI on), one
// laid out as k3s lays it out (k3s, the k3s layout of a release the caller
// gives, with its base template), and a node without GPUs. GPU nodes have
// two fake GPUs each and GPULabels.
func MixedNodes(k3s K3sNode) []NodeSpec {
	return []NodeSpec{
		{Name: "gpu-c16", Kind: NodeContainerd16, GPUs: 2},
		{Name: "gpu-c2", Kind: NodeContainerd2, GPUs: 2},
		{Name: "gpu-k3s", Kind: NodeK3s, GPUs: 2, K3s: &k3s},
		{Name: "cpu", Kind: NodeContainerd16},
	}
}

// StartMultiNodeCluster starts a cluster of opts.Nodes and waits until
// every node is Ready and has its GPUs. The control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) runs in a
// network namespace of its own, at APIServerIP; each node in network and
// mount namespaces of its own (as StartCluster's node: private /var/lib,
// /var/log, /run and kubelet sysctls), with its own containerd (kind per
// node), directories, kubelet, cgroup root below the cluster's, and pod
// subnet; pods reach the API server and the pods of other nodes through
// the control plane's namespace. The nodes start together: their
// containerds, image imports and kubelets run while the control plane
// comes up. Every method of Cluster works on it; the fields that describe
// StartCluster's node describe the first node here.
//
// The cleanup stops the kubelets, removes every node's pods, its
// containerd and shims, its namespaces, then the control plane, the
// cgroups, the mounts and the directory; [Cluster.Leftovers] says what
// remains.
func StartMultiNodeCluster(t testing.TB, opts MultiNodeOptions) *Cluster {
	t.Helper()
	begin := time.Now()
	if len(opts.Nodes) == 0 || len(opts.Nodes) > multiMaxNodes {
		t.Fatalf("harness: %d nodes: want 1 to %d", len(opts.Nodes), multiMaxNodes)
	}
	k8sBin := requireClusterHost(t)
	seen := map[string]bool{}
	for _, spec := range opts.Nodes {
		if spec.Name == "" || seen[spec.Name] || strings.ContainsAny(spec.Name, "/ ") {
			t.Fatalf("harness: node name %q: want a unique, short name", spec.Name)
		}
		seen[spec.Name] = true
		if spec.Kind == NodeK3s && spec.K3s == nil {
			t.Fatalf("harness: node %s: a k3s node needs its K3s layout", spec.Name)
		}
	}

	dir := makeClusterDir(t, "m")
	c := &Cluster{
		Dir:         dir,
		t:           t,
		k8sBin:      k8sBin,
		logDir:      filepath.Join(dir, "logs"),
		CgroupRoot:  "/" + filepath.Base(dir),
		Kubeconfig:  filepath.Join(dir, "admin.kubeconfig"),
		APIServerIP: multiControlIP,
	}
	for i, spec := range opts.Nodes {
		nd := filepath.Join(dir, spec.Name)
		n := &ClusterNode{
			Name: spec.Name, IP: fmt.Sprintf("192.0.2.%d", 11+i), Kind: spec.Kind, GPUs: spec.GPUs, Dir: nd,
			Labels:    map[string]string{NodeKindLabel: string(spec.Kind)},
			PodSubnet: fmt.Sprintf("198.51.100.%d/27", 32*i),
			// gpurun's defaults, in the node's own /usr/local, /etc and
			// /var/lib.
			BinDir: "/usr/local/bin", PolicyPath: "/etc/gpurun/config.toml",
			AgentState: "/var/lib/gpurun/node-agent.json", InstallState: "/var/lib/gpurun/install-state.json",
			CDISpecDir: "/etc/cdi", KubeletRoot: filepath.Join(nd, "k"), PodLogsDir: filepath.Join(nd, "pods"),
			CgroupRoot: c.CgroupRoot + "/" + spec.Name, tag: "-" + spec.Name,
		}
		if spec.GPUs > 0 {
			for k, v := range GPULabels() {
				n.Labels[k] = v
			}
		}
		for k, v := range spec.Labels {
			n.Labels[k] = v
		}
		if spec.K3s != nil {
			k := *spec.K3s
			k.HostRoot = filepath.Join(nd, "k3sroot")
			n.K3s = &k
		}
		c.Nodes = append(c.Nodes, n)
	}
	first := c.Nodes[0]
	c.NodeDir, c.BinDir, c.PolicyPath, c.AgentState, c.InstallState = first.Dir, first.BinDir, first.PolicyPath, first.AgentState, first.InstallState
	c.CDISpecDir, c.KubeletRoot, c.PodLogsDir = first.CDISpecDir, first.KubeletRoot, first.PodLogsDir
	// Registered first, so it runs last.
	t.Cleanup(c.removeAll)
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := makeCgroupRoot(c.CgroupRoot); err != nil {
		t.Fatalf("harness: %v", err)
	}

	// The control plane's namespace: the bridge the nodes hang on, and
	// forwarding between them.
	c.ns = NewNetNS(t, dir)
	if err := c.recordNamespaces(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := [][]string{
		{"link", "add", multiBridge, "type", "bridge"},
		{"addr", "add", multiControlIP + "/24", "dev", multiBridge},
		{"link", "set", multiBridge, "up"},
	}
	if err := runIP(ctx, c.ns, cp); err != nil {
		t.Fatalf("harness: control plane network: %v", err)
	}
	if err := setSysctl(c.ns, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := c.writePKI(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(c.stopDaemons) // after every node's cleanup

	// etcd and the API server start while the nodes are set up.
	apiserver, err := c.startAPIServer()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, n := range c.Nodes {
		c.setUpNode(ctx, n)
	}
	if first.Containerd != nil {
		c.Containerd, c.NRISocket = first.Containerd, first.NRISocket
	}

	// Images into every node, all at once.
	images := append([]string{ImageTar(t, dir, BusyboxRef, []string{"/bin/sh"})}, opts.Images...)
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, img := range images {
				if err := n.Containerd.TryImportImage(img); err != nil {
					errs[i] = fmt.Errorf("node %s: %w", n.Name, err)
					return
				}
			}
		}()
	}
	if err := c.waitHTTP(apiserver, "https://127.0.0.1:6443/readyz", 2*time.Minute); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := c.startControllers(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	controlPlane := time.Since(begin)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, n := range c.Nodes {
		if err := c.startKubelet(n); err != nil {
			t.Fatalf("harness: node %s: %v", n.Name, err)
		}
	}
	t.Cleanup(c.stopKubelet) // runs first of all
	c.WaitNodeReady(2 * time.Minute)
	for _, n := range c.Nodes {
		args := []string{"label", "node", n.Name}
		for k, v := range n.Labels {
			if adminLabel(k) {
				args = append(args, k+"="+v)
			}
		}
		if len(args) > 3 {
			c.MustKubectl(args...)
		}
	}
	for _, n := range c.Nodes {
		if n.GPUs > 0 {
			c.StartFakeGPUsOn(n, n.GPUs)
		}
	}
	c.WaitServiceAccount("default", "default", time.Minute)
	c.StartTime = time.Since(begin)
	var kinds []string
	for _, n := range c.Nodes {
		kinds = append(kinds, fmt.Sprintf("%s %s (%s, %d GPUs)", n.Name, n.IP, c.NodeContainerdVersion(n), n.GPUs))
	}
	t.Logf("harness: cluster in %s of %d nodes ready in %s (control plane %s): %s", dir, len(c.Nodes), c.StartTime.Round(time.Millisecond),
		controlPlane.Round(time.Millisecond), strings.Join(kinds, "; "))
	return c
}

// setUpNode makes node n's directories, namespaces, network and
// containerd. The node keeps gpurun's files where a node keeps them, and
// containerd where its kind keeps it: a containerd-1.6 or containerd-2
// node reads /etc/containerd/config.toml and keeps its state and socket
// in /run/containerd (directories of the harness, bind-mounted there in
// the node's mount namespace); a k3s node reads the config.toml k3s
// generates in /var/lib/rancher/k3s/agent/etc/containerd, with its state
// and socket in /run/k3s/containerd, its CNI configuration and plugins
// where k3s keeps them.
func (c *Cluster) setUpNode(ctx context.Context, n *ClusterNode) {
	t := c.t
	t.Helper()
	if err := makeNodeDirs(n.Dir, n.CgroupRoot, n.KubeletRoot, n.PodLogsDir); err != nil {
		t.Fatalf("harness: %v", err)
	}
	n.ns = NewNetNS(t, n.Dir)
	mnt, err := newMountNS(nodeMounts{
		sysctls: kubeletSysctls(),
		// The directories the node has of its own (the host's files
		// below, the node's writes kept apart): what the node agent and
		// containerd write there (the agent's records in /var/lib/gpurun,
		// gpurun in /usr/local/bin, the policy in /etc/gpurun, NRI's
		// socket in /var/run/nri and plugins in /opt/nri, containerd's
		// /etc/containerd) stays the node's.
		overlays: []string{"/var/lib", "/var/log", "/run", "/etc", "/usr/local", "/opt"},
		scratch:  filepath.Join(n.Dir, "scratch"),
	})
	if err != nil {
		t.Fatalf("harness: node %s mount namespace: %v", n.Name, err)
	}
	n.mnt, n.ns.mnt = mnt, mnt
	t.Cleanup(mnt.close) // after containerd's cleanup, before the netns goes
	if err := c.recordNamespacesOf(n.ns); err != nil {
		t.Fatalf("harness: %v", err)
	}
	veth := "vn" + strings.TrimPrefix(n.IP, "192.0.2.")
	if err := runIP(ctx, c.ns, [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", n.ns.Path},
		{"link", "set", veth, "master", multiBridge},
		{"link", "set", veth, "up"},
		{"route", "add", n.PodSubnet, "via", n.IP},
	}); err != nil {
		t.Fatalf("harness: node %s network: %v", n.Name, err)
	}
	if err := runIP(ctx, n.ns, [][]string{
		{"addr", "add", n.IP + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", multiControlIP},
	}); err != nil {
		t.Fatalf("harness: node %s network: %v", n.Name, err)
	}
	if err := setSysctl(n.ns, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatalf("harness: node %s: %v", n.Name, err)
	}

	ctrdDir := filepath.Join(n.Dir, "c")
	state := filepath.Join(ctrdDir, "state")
	containerd2 := n.Kind == NodeContainerd2 || n.Kind == NodeK3s && n.K3s.Release.Version >= 3
	var bin, ctr string
	var env []string
	if containerd2 {
		binDir, _ := requireContainerd2(t)
		bin, ctr = filepath.Join(binDir, "containerd"), filepath.Join(binDir, "ctr")
		env = append(env, "PATH="+binDir+":"+os.Getenv("PATH"))
	} else {
		bin, ctr = requireContainerd16(t)
	}
	// binds are node paths and the harness directories they show.
	type bind struct{ node, host string }
	var binds []bind
	spec := launchSpec{dir: ctrdDir, ns: n.ns, supervise: true, cgroupParent: n.CgroupRoot, stateDir: state}
	var setup func(dir string) (string, error)
	switch n.Kind {
	case NodeContainerd16, NodeContainerd2:
		etc := filepath.Join(ctrdDir, "etc")
		binds = []bind{{"/etc/containerd", etc}, {"/run/containerd", state}}
		spec.configPath, spec.address = filepath.Join(etc, "config.toml"), filepath.Join(state, "containerd.sock")
		cni := filepath.Join(ctrdDir, "cni")
		if err := writeCNIConfig(cni, n.PodSubnet, filepath.Join(n.Dir, "cni-ipam")); err != nil {
			t.Fatalf("harness: %v", err)
		}
		setup = func(dir string) (string, error) {
			cri := CRISettings{PodNetwork: true}
			var cfg string
			if n.Kind == NodeContainerd2 {
				cfg = Containerd2ConfigWith(dir, cri)
			} else {
				cfg = ContainerdConfig(dir, ContainerdOptions{CRI: cri})
			}
			return atNodePaths(cfg)
		}
		n.NRISocket = "/var/run/nri/nri.sock"
	case NodeK3s:
		k := n.K3s
		k.InUserNS = true
		// k3s's own CNI plugins and configuration directory.
		cniBin := k.Host(filepath.Join(k.DataDir, "data", "current", "bin"))
		cniConf := k.Host(filepath.Join(k.DataDir, "agent", "etc", "cni", "net.d"))
		if err := os.MkdirAll(cniBin, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
		for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
			if err := os.Symlink(filepath.Join("/usr/lib/cni", p), filepath.Join(cniBin, p)); err != nil {
				t.Fatalf("harness: %v", err)
			}
		}
		if err := writeCNIConfig(cniConf, n.PodSubnet, filepath.Join(n.Dir, "cni-ipam")); err != nil {
			t.Fatalf("harness: %v", err)
		}
		binds = []bind{{filepath.Dir(k.DataDir), k.Host(filepath.Dir(k.DataDir))}, {k.StateDir(), state}}
		spec.configPath, spec.address = k.Host(k.ConfigPath()), filepath.Join(state, "containerd.sock")
		setup = func(string) (string, error) {
			rendered, err := k.Render()
			return string(rendered), err
		}
		spec.beforeRestart = func(string, string) error {
			_, err := k.Render()
			return err
		}
		if containerd2 {
			n.NRISocket = "/var/run/nri/nri.sock"
		}
	default:
		t.Fatalf("harness: node %s: unknown kind %q", n.Name, n.Kind)
	}
	for _, b := range binds {
		if err := os.MkdirAll(b.host, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	if err := n.ns.Do(func() error {
		for _, b := range binds {
			if err := os.MkdirAll(b.node, 0o755); err != nil {
				return err
			}
			if err := unix.Mount(b.host, b.node, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s on %s: %w", b.host, b.node, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("harness: node %s: %v", n.Name, err)
	}
	n.Containerd = launchContainerd(t, spec, bin, ctr, env, setup)
}

// atNodePaths moves a harness config's state and sockets to a node's
// usual ones (/run/containerd, bind-mounted from the harness's state
// directory) and its NRI socket and directories to NRI's defaults (the
// node's own /var/run, /opt and /etc): the config a node's containerd has.
func atNodePaths(config string) (string, error) {
	var cfg map[string]any
	if err := toml.Unmarshal([]byte(config), &cfg); err != nil {
		return "", fmt.Errorf("node config: %w", err)
	}
	cfg["state"] = "/run/containerd"
	for _, k := range []struct{ table, addr string }{{"grpc", "/run/containerd/containerd.sock"}, {"ttrpc", "/run/containerd/containerd.sock.ttrpc"}} {
		if t, ok := cfg[k.table].(map[string]any); ok {
			t["address"] = k.addr
		}
	}
	if plugins, ok := cfg["plugins"].(map[string]any); ok {
		if nri, ok := plugins["io.containerd.nri.v1.nri"].(map[string]any); ok {
			nri["socket_path"] = "/var/run/nri/nri.sock"
			nri["plugin_path"] = "/opt/nri/plugins"
			nri["plugin_config_path"] = "/etc/nri/conf.d"
		}
	}
	out, err := toml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("node config: %w", err)
	}
	return string(out), nil
}

// adminLabel reports whether a node label is in a Kubernetes namespace
// the kubelet may not set (--node-labels refuses it: NFD's
// feature.node.kubernetes.io, say): an administrator's or a controller's,
// set with kubectl once the node is registered.
func adminLabel(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, ns := range []string{"kubernetes.io", "k8s.io"} {
		if domain == ns || strings.HasSuffix(domain, "."+ns) {
			return !strings.HasPrefix(domain, "kubelet.") && !strings.HasPrefix(domain, "node.")
		}
	}
	return false
}

// runIP runs ip with each argument list in ns, in order.
func runIP(ctx context.Context, ns *NetNS, cmds [][]string) error {
	for _, args := range cmds {
		if _, stderr, err := ns.Run(ctx, nil, "ip", args...); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
		}
	}
	return nil
}

// setSysctl writes a network sysctl (a path below /proc/sys) in ns: the
// namespace's own, not the host's.
func setSysctl(ns *NetNS, name, value string) error {
	return ns.Do(func() error {
		if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", name, err)
		}
		return nil
	})
}

// Node returns the node named name, failing the test when there is none.
func (c *Cluster) Node(name string) *ClusterNode {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	c.t.Fatalf("harness: no node %q", name)
	return nil
}

// NodeContainerd is a node's containerd, reporting failures to the
// view's test.
func (c *Cluster) NodeContainerd(n *ClusterNode) *Containerd { return n.Containerd.For(c.t) }

// DialContext dials from the control plane's network namespace (the
// node's, for StartCluster's): pod addresses are routed from there.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.ns.DialContext(ctx, network, addr)
}

// APIClient returns a new HTTP client of the API server's, as the cluster
// admin, with a transport (and so connections) of its own: a load test's
// client, as client-go's would be (HTTP/2 where the server offers it). Its
// requests go to https://127.0.0.1:6443.
func (c *Cluster) APIClient() *http.Client {
	base := c.apiHTTP.Transport.(*http.Transport)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:       c.ns.DialContext,
		TLSClientConfig:   base.TLSClientConfig.Clone(),
		ForceAttemptHTTP2: true,
		MaxIdleConns:      100, MaxIdleConnsPerHost: 100, IdleConnTimeout: 90 * time.Second,
	}}
}

// KillContainer sends sig to the init process of a container of node n
// (a CRI container id, as a pod's status names it without its
// "containerd://"): SIGKILL is a process killed outright, as the OOM
// killer or a crash would.
func (c *Cluster) KillContainer(n *ClusterNode, id string, sig syscall.Signal) error {
	pid, err := c.ContainerPID(n, id)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("container %s on %s: kill %d: %w", id, n.Name, pid, err)
	}
	return nil
}

// ContainerPID is the pid (in this host's PID namespace) of container id's
// first process on node n, from its CRI status.
func (c *Cluster) ContainerPID(n *ClusterNode, id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	resp, err := n.Containerd.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("container %s on %s: %w", id, n.Name, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("container %s on %s: no pid in its status (%v)", id, n.Name, err)
	}
	return info.Pid, nil
}

// LoseNode kills node n's kubelet and containerd outright (SIGKILL), as a
// node that crashes would lose them, and keeps them down until
// RestoreNode; the pods' processes keep running under their shims.
func (c *Cluster) LoseNode(n *ClusterNode) error {
	var errs []error
	if p := n.kubeletProc(); p != nil {
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("SIGKILL the kubelet of %s: %w", n.Name, err))
		} else {
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				errs = append(errs, fmt.Errorf("the kubelet of %s survived SIGKILL", n.Name))
			}
		}
	}
	if err := n.Containerd.Kill(); err != nil {
		errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
	}
	return errors.Join(errs...)
}

// RestoreNode starts a lost node's containerd and kubelet again, as the
// node's boot (or systemd) would.
func (c *Cluster) RestoreNode(n *ClusterNode) error {
	if err := n.Containerd.Revive(); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	old := n.kubeletSocket()
	if err := c.startKubelet(n); err != nil {
		return fmt.Errorf("node %s: start the kubelet: %w", n.Name, err)
	}
	n.mu.Lock()
	p := n.plugin
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	// The kubelet empties its device plugin directory at start, then
	// makes its registration socket: once that is new, the plugin serves
	// and registers again, as NVIDIA's does when it sees the kubelet
	// restart.
	if err := poll(time.Minute, func() (bool, string, error) {
		now := n.kubeletSocket()
		// A new socket may get the old one's inode number: its time tells.
		return now != nil && (old == nil || !os.SameFile(old, now) || !now.ModTime().Equal(old.ModTime())), "the kubelet's registration socket is not new yet", nil
	}); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := c.servePlugin(n, p); err != nil {
		return err
	}
	if err := poll(time.Minute, func() (bool, string, error) { return c.gpusAllocatable(n, len(p.gpus)) }); err != nil {
		return fmt.Errorf("node %s: GPUs after the kubelet came back: %w", n.Name, err)
	}
	return nil
}

// kubeletSocket is the node's kubelet device plugin registration socket
// (nil when there is none).
func (n *ClusterNode) kubeletSocket() os.FileInfo {
	var fi os.FileInfo
	_ = n.ns.Do(func() error {
		var err error
		fi, err = os.Stat(dpapi.KubeletSocket)
		return err
	})
	return fi
}
