package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// K8sBinEnv names the directory holding kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kubectl of one
// release (make k8s-tools builds them: hack/build-kubernetes.sh).
const K8sBinEnv = "GPURUN_TEST_K8S_BIN"

// The cluster's network, inside its own network namespace: the node's
// address, the pods' bridge subnet and the service
// range. They are documentation ranges (RFC 5737): nothing outside the
// namespace answers them, and nothing leaves it.
const (
	ClusterNodeIP      = "192.0.2.10"
	clusterPodSubnet   = "198.51.100.0/24"
	clusterServiceCIDR = "203.0.113.0/24"
	clusterServiceIP   = "203.0.113.1"
)

// ClusterNodeName is the name the node registers with.
const ClusterNodeName = "gpurun-node"

// ClusterOptions configures [StartCluster].
type ClusterOptions struct {
	// Containerd2 runs containerd 2.x ($GPURUN_TEST_CONTAINERD2_BIN) as
	// the node's runtime; false runs Debian's containerd 1.6.
	Containerd2 bool
	// NVIDIA, when set, makes the node a GPU node of NVIDIA's stack (see
	// NVIDIA): the node's /var/run/cdi is NVIDIA.CDIDir (where NVIDIA's
	// runtime in CDI mode finds the GPUs), containerd 2.x reads CDI specs
	// from there too, and containerd's PATH has the cat that shows the
	// toolkit's runtime wrappers an nvidia module.
	NVIDIA *NVIDIA
}

// Cluster is a single-node Kubernetes cluster of the harness's own: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet
// that drives a private containerd over CRI, all in a network namespace
// and a mount namespace of their own (see [StartCluster]).
type Cluster struct {
	// Dir holds everything of this cluster; the cleanup removes it.
	Dir string
	// NodeDir (Dir/n) holds the node's directories: containerd's, the
	// kubelet's, and the node paths gpurun is installed to. It is an
	// rshared mount, so that what the kubelet and containerd mount below
	// it is seen from the test as well.
	NodeDir string
	// Containerd is the node's runtime, supervised: when it exits (the
	// node agent's restart=signal sends SIGTERM) it is started again, as
	// systemd's Restart=always would; Restarts says when.
	Containerd *Containerd
	// NRISocket is containerd 2.x's NRI socket ("" on 1.6).
	NRISocket string
	// Node paths for gpurun (its policy is what containerd's
	// gpurun-runtime reads: containerd runs with GPURUN_CONFIG=PolicyPath).
	BinDir, PolicyPath, AgentState, InstallState string
	// CDISpecDir is containerd 2.x's CDI spec directory.
	CDISpecDir string
	// KubeletRoot is the kubelet's --root-dir, PodLogsDir its podLogsDir,
	// CgroupRoot its cgroupRoot (every pod's cgroup is below it).
	KubeletRoot, PodLogsDir, CgroupRoot string
	// Kubeconfig is the cluster admin's kubeconfig (system:masters).
	Kubeconfig string
	// StartTime is how long StartCluster took, until the node was Ready.
	StartTime time.Duration
	// APIServerIP is where nodes and pods reach the API server (port
	// 6443): the node's address in a single-node cluster, the control
	// plane's in a multi-node one (the cluster runs no kube-proxy, so the
	// kubernetes Service's ClusterIP answers nowhere).
	APIServerIP string
	// Nodes are the cluster's nodes: StartCluster's one (the fields above
	// describe it too), or StartMultiNodeCluster's.
	Nodes []*ClusterNode

	t       testing.TB
	k8sBin  string
	ns      *NetNS
	mnt     *mountNS
	nsIDs   []string // "net:[inode]" and "mnt:[inode]" of the namespaces, for Leftovers
	logDir  string
	procs   []*process // in start order
	admin   keyPair
	pki     *clusterPKI
	apiHTTP *http.Client
}

// For returns a view of the cluster whose methods report failures to t,
// for use in a subtest; the cleanup stays with the test that started it.
func (c *Cluster) For(t testing.TB) *Cluster {
	v := *c
	v.t = t
	if c.Containerd != nil {
		v.Containerd = c.Containerd.For(t)
	}
	return &v
}

// requireClusterHost fails the test unless the host has what every
// cluster needs — root, the Kubernetes binaries, etcd, ip and the CNI
// plugins of the pods' network — and returns the directory of the
// Kubernetes binaries.
func requireClusterHost(t testing.TB) string {
	t.Helper()
	requireRoot(t)
	k8sBin := requireK8s(t)
	requireBinary(t, "etcd", "etcd-server")
	requireBinary(t, "ip", "iproute2")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			t.Fatalf("harness: prerequisite missing: CNI plugin %s (apt-get install -y containernetworking-plugins): %v", p, err)
		}
	}
	return k8sBin
}

// requireK8s returns the directory of the Kubernetes binaries or fails the
// test saying how to build them.
func requireK8s(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(K8sBinEnv)
	if dir == "" {
		t.Fatalf("harness: prerequisite missing: $%s is not set: run the tests with `make test-integration` (its k8s-tools step builds Kubernetes into /var/cache/gpurun-k8s with hack/build-kubernetes.sh and sets it)", K8sBinEnv)
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("harness: prerequisite missing: no executable %s in %s (%v): run `make k8s-tools`", b, dir, err)
		}
	}
	return dir
}

// StartCluster starts a single-node cluster and waits until its node is
// Ready. Everything runs in a network namespace of its own (the node's
// address ClusterNodeIP on one end of a veth pair whose both ends stay there; pods on a CNI bridge from
// /usr/lib/cni, with host-local addresses) and in a mount namespace of its
// own, a copy of the host's in which the node's directories propagate both
// ways, and the host paths the components write regardless of their
// settings are private: /var/lib (libcni's result cache), /var/log and /run
// (containerd shims' sockets) are overlays whose upper layers are below
// Dir, and the sysctls the kubelet sets at start (vm.overcommit_memory,
// kernel.panic, ...) are private copies. Certificates, keys and
// kubeconfigs are made for this cluster. containerd (1.6, or 2.x with
// opts.Containerd2) is supervised and runs with GPURUN_CONFIG=PolicyPath;
// the pause and busybox images are imported ([PauseRef], [BusyboxRef]).
//
// The cleanup stops the kubelet and the control plane, removes every pod
// through CRI, stops containerd and the shims, removes the kubelet's
// cgroups, unmounts everything below Dir, ends both namespaces and removes
// Dir; [Cluster.Leftovers] says what, if anything, remains.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	begin := time.Now()
	k8sBin := requireClusterHost(t)
	var ctdBin, ctr, ctdBinDir string
	if opts.Containerd2 {
		ctdBinDir, _ = requireContainerd2(t)
		ctdBin, ctr = filepath.Join(ctdBinDir, "containerd"), filepath.Join(ctdBinDir, "ctr")
	} else {
		ctdBin, ctr = requireContainerd16(t)
	}

	dir := makeClusterDir(t, "k")
	c := &Cluster{
		Dir:          dir,
		NodeDir:      filepath.Join(dir, "n"),
		t:            t,
		k8sBin:       k8sBin,
		logDir:       filepath.Join(dir, "logs"),
		CgroupRoot:   "/" + filepath.Base(dir),
		Kubeconfig:   filepath.Join(dir, "admin.kubeconfig"),
		KubeletRoot:  filepath.Join(dir, "n", "k"),
		PodLogsDir:   filepath.Join(dir, "n", "pods"),
		BinDir:       filepath.Join(dir, "n", "bin"),
		PolicyPath:   filepath.Join(dir, "n", "etc", "gpurun", "config.toml"),
		AgentState:   filepath.Join(dir, "n", "var", "gpurun", "node-agent.json"),
		InstallState: filepath.Join(dir, "n", "var", "gpurun", "install-state.json"),
		CDISpecDir:   filepath.Join(dir, "n", "cdi"),
		APIServerIP:  ClusterNodeIP,
	}
	kind := NodeContainerd16
	if opts.Containerd2 {
		kind = NodeContainerd2
	}
	node := &ClusterNode{Name: ClusterNodeName, IP: ClusterNodeIP, Kind: kind, Dir: c.NodeDir, PodSubnet: clusterPodSubnet,
		BinDir: c.BinDir, PolicyPath: c.PolicyPath, AgentState: c.AgentState, InstallState: c.InstallState, CDISpecDir: c.CDISpecDir,
		KubeletRoot: c.KubeletRoot, PodLogsDir: c.PodLogsDir, CgroupRoot: c.CgroupRoot}
	c.Nodes = []*ClusterNode{node}
	// Registered first, so it runs last: after the daemons, containerd and
	// the namespaces are gone.
	t.Cleanup(c.removeAll)
	if err := makeNodeDirs(c.NodeDir, c.CgroupRoot, c.logDir, c.KubeletRoot, c.PodLogsDir, c.BinDir, c.CDISpecDir); err != nil {
		t.Fatalf("harness: %v", err)
	}

	c.ns = NewNetNS(t, dir)
	node.ns = c.ns
	mounts := nodeMounts{
		sysctls:  kubeletSysctls(),
		overlays: []string{"/var/lib", "/var/log", "/run"},
		scratch:  filepath.Join(dir, "scratch"),
	}
	if opts.NVIDIA != nil {
		mounts.binds = map[string]string{"/run/cdi": opts.NVIDIA.CDIDir}
	}
	mnt, err := newMountNS(mounts)
	if err != nil {
		t.Fatalf("harness: node mount namespace: %v", err)
	}
	c.mnt = mnt
	c.ns.mnt = mnt
	t.Cleanup(mnt.close) // after containerd's cleanup, before the netns goes
	if err := c.recordNamespaces(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		// A veth pair stands in for a dummy interface (a module not every
		// kernel has): both ends stay in the namespace, and what the
		// default route sends out of node0 ends at node1.
		{"link", "add", "node0", "type", "veth", "peer", "name", "node1"},
		{"addr", "add", ClusterNodeIP + "/24", "dev", "node0"},
		{"link", "set", "node1", "up"},
		{"link", "set", "node0", "up"},
		{"route", "add", "default", "dev", "node0"},
	} {
		if _, _, err := c.ns.Run(ctx, nil, "ip", args...); err != nil {
			t.Fatalf("harness: node network: %v", err)
		}
	}

	if err := c.writePKI(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(c.stopDaemons) // registered before containerd's: runs after it

	if err := c.startControlPlane(ctx); err != nil {
		t.Fatalf("harness: %v", err)
	}
	controlPlane := time.Since(begin)

	if err := writeCNIConfig(filepath.Join(c.NodeDir, "c", "cni"), clusterPodSubnet, filepath.Join(c.NodeDir, "cni-ipam")); err != nil {
		t.Fatalf("harness: %v", err)
	}
	cri := CRISettings{PodNetwork: true, CDISpecDirs: []string{c.CDISpecDir}}
	spec := launchSpec{dir: filepath.Join(c.NodeDir, "c"), ns: c.ns, supervise: true, cgroupParent: c.CgroupRoot}
	env := []string{"GPURUN_CONFIG=" + c.PolicyPath}
	if opts.Containerd2 {
		env = append(env, "PATH="+ctdBinDir+":"+os.Getenv("PATH"))
	}
	if opts.NVIDIA != nil {
		cri.CDISpecDirs = append(cri.CDISpecDirs, opts.NVIDIA.CDIDir)
		if env, err = opts.NVIDIA.nodeEnv(c.NodeDir, env); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	if opts.Containerd2 {
		c.Containerd = launchContainerd(t, spec, ctdBin, ctr, env, func(dir string) (string, error) {
			n := nriDirs(dir)
			for _, d := range []string{n.plugins, n.configs} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return "", err
				}
			}
			return Containerd2ConfigWith(dir, cri), nil
		})
		c.NRISocket = nriDirs(c.Containerd.Dir).socket
	} else {
		c.Containerd = launchContainerd(t, spec, ctdBin, ctr, env, func(dir string) (string, error) {
			return ContainerdConfig(dir, ContainerdOptions{CRI: cri}), nil
		})
	}
	c.Containerd.ImportImage(ImageTar(t, filepath.Join(c.Containerd.Dir, "images"), BusyboxRef, []string{"/bin/sh"}))
	node.Containerd, node.NRISocket = c.Containerd, c.NRISocket

	if err := c.startKubelet(node); err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(c.stopKubelet) // runs first of all
	c.WaitNodeReady(2 * time.Minute)
	// Pods are admitted only once their namespace's service account
	// exists (kube-controller-manager makes it).
	c.WaitServiceAccount("default", "default", time.Minute)
	c.StartTime = time.Since(begin)
	t.Logf("harness: cluster in %s ready in %s (control plane %s; %s, kubelet %s)", dir, c.StartTime.Round(time.Millisecond), controlPlane.Round(time.Millisecond), c.ContainerdVersion(), c.KubeletVersion())
	return c
}

// KubeletVersion is the first node's kubelet version, as it reports it.
func (c *Cluster) KubeletVersion() string {
	out, err := c.Kubectl("get", "node", c.Nodes[0].Name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}")
	if err != nil {
		return "unknown: " + err.Error()
	}
	return out
}

// ContainerdVersion is the node's containerd version, as the kubelet
// reports it.
func (c *Cluster) ContainerdVersion() string {
	return c.NodeContainerdVersion(c.Nodes[0])
}

// NodeContainerdVersion is a node's containerd version, as its kubelet
// reports it.
func (c *Cluster) NodeContainerdVersion(n *ClusterNode) string {
	out, err := c.Kubectl("get", "node", n.Name, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
	if err != nil {
		return "containerd version unknown: " + err.Error()
	}
	return out
}

// makeCgroupRoot creates a kubelet's cgroupRoot rel in every hierarchy
// (the kubelet wants it to exist), with cpuset v1's cpus and mems copied
// from its parent so that tasks may join below it.
func makeCgroupRoot(rel string) error {
	for _, mnt := range cgroupMounts() {
		d := filepath.Join(mnt, rel)
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", filepath.Join(d, f), err)
			}
		}
	}
	return nil
}

// recordNamespaces notes the namespaces' identities, so that Leftovers can
// find processes still in them after the cleanup.
func (c *Cluster) recordNamespaces() error {
	return c.recordNamespacesOf(c.ns)
}

// recordNamespacesOf notes the network namespace ns enters, and its mount
// namespace when it has one of its own.
func (c *Cluster) recordNamespacesOf(ns *NetNS) error {
	kinds := []string{"net"}
	if ns.mnt != nil {
		kinds = append(kinds, "mnt")
	}
	return ns.Do(func() error {
		for _, n := range kinds {
			id, err := os.Readlink("/proc/thread-self/ns/" + n)
			if err != nil {
				return fmt.Errorf("namespace id: %w", err)
			}
			c.nsIDs = append(c.nsIDs, id)
		}
		return nil
	})
}

// writePKI makes the cluster's CA, certificates and kubeconfigs: the
// admin's, the control plane's, and each node's kubelet's.
func (c *Cluster) writePKI() error {
	p, err := newClusterPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	server := "https://127.0.0.1:6443"
	if c.admin, err = p.issue("admin", "gpurun-test-admin", []string{"system:masters"}); err != nil {
		return err
	}
	if err := p.kubeconfig(c.Kubeconfig, server, "admin", c.admin); err != nil {
		return err
	}
	for _, u := range []struct{ name, cn, org string }{
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
	} {
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		kp, err := p.issue(u.name, u.cn, orgs)
		if err != nil {
			return err
		}
		if err := p.kubeconfig(filepath.Join(c.Dir, u.name+".kubeconfig"), server, u.name, kp); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		kp, err := p.issue("kubelet"+n.tag, "system:node:"+n.Name, []string{"system:nodes"})
		if err != nil {
			return err
		}
		if err := p.kubeconfig(c.kubeletFile(n, ".kubeconfig"), c.apiServerFor(n), "kubelet", kp); err != nil {
			return err
		}
		if _, err := p.issue("kubelet-serving"+n.tag, "system:node:"+n.Name, []string{"system:nodes"}, n.IP, n.Name); err != nil {
			return err
		}
	}
	if _, err := p.issue("apiserver", "kube-apiserver", nil, "127.0.0.1", c.APIServerIP, clusterServiceIP,
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"); err != nil {
		return err
	}
	if _, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.admin.Cert, c.admin.Key)
	if err != nil {
		return fmt.Errorf("admin key pair: %w", err)
	}
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c.apiHTTP = &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext:     c.ns.DialContext,
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool},
		},
	}
	return nil
}

// pkiFile is a file of the cluster's PKI directory.
func (c *Cluster) pkiFile(name string) string { return filepath.Join(c.Dir, "pki", name) }

// kubeletFile is a file of a node's kubelet in the cluster's directory:
// kubelet<tag><ext>.
func (c *Cluster) kubeletFile(n *ClusterNode, ext string) string {
	return filepath.Join(c.Dir, "kubelet"+n.tag+ext)
}

// apiServerFor is the API server's URL as node n reaches it: the
// loopback where the node shares the control plane's network namespace.
func (c *Cluster) apiServerFor(n *ClusterNode) string {
	if n.ns == c.ns {
		return "https://127.0.0.1:6443"
	}
	return "https://" + c.APIServerIP + ":6443"
}

// start starts one daemon of the cluster in its namespaces.
func (c *Cluster) start(name string, argv []string) (*process, error) {
	p, err := startProcess(name, filepath.Join(c.logDir, name+".log"), argv, os.Environ(), c.ns)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// LogTail returns the last n lines of a cluster daemon's log: "etcd",
// "kube-apiserver", "kube-controller-manager", "kube-scheduler",
// "kubelet", or "containerd".
func (c *Cluster) LogTail(name string, n int) string {
	if name == "containerd" {
		return c.Containerd.LogTail(n)
	}
	return logTail(filepath.Join(c.logDir, name+".log"), n)
}

// waitHTTP polls url (inside the namespace) until it answers 200, the
// process exits or timeout passes.
func (c *Cluster) waitHTTP(p *process, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		resp, err := c.apiHTTP.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		if p.exited() {
			return fmt.Errorf("%s exited (%v) before %s answered\n--- %s log tail ---\n%s", p.name, p.waitErr, url, p.name, logTail(p.logPath, 40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s: %s\n--- %s log tail ---\n%s", url, timeout, last, p.name, logTail(p.logPath, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startControlPlane starts etcd, kube-apiserver (waiting until it is
// ready), kube-controller-manager and kube-scheduler.
func (c *Cluster) startControlPlane(context.Context) error {
	apiserver, err := c.startAPIServer()
	if err != nil {
		return err
	}
	if err := c.waitHTTP(apiserver, "https://127.0.0.1:6443/readyz", 2*time.Minute); err != nil {
		return err
	}
	return c.startControllers()
}

// startAPIServer starts etcd, waits until it answers, and starts
// kube-apiserver without waiting for it.
func (c *Cluster) startAPIServer() (*process, error) {
	etcd, err := c.start("etcd", []string{"etcd", "--name", "gpurun-test", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "gpurun-test=http://127.0.0.1:2380", "--logger", "zap", "--log-level", "warn"})
	if err != nil {
		return nil, err
	}
	if err := c.waitHTTP(etcd, "http://127.0.0.1:2379/health", startTimeout); err != nil {
		return nil, err
	}
	apiserver, err := c.start("kube-apiserver", []string{filepath.Join(c.k8sBin, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--secure-port", "6443", "--advertise-address", c.APIServerIP,
		"--tls-cert-file", c.pkiFile("apiserver.crt"), "--tls-private-key-file", c.pkiFile("apiserver.key"),
		"--client-ca-file", c.pki.CAFile,
		"--kubelet-client-certificate", c.pkiFile("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", c.pkiFile("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", c.pki.CAFile,
		// By address: the node's name resolves nowhere in the namespace.
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.pki.SAPub, "--service-account-signing-key-file", c.pki.SAKey,
		"--service-cluster-ip-range", clusterServiceCIDR,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true", "--enable-priority-and-fairness=false", "--profiling=false",
		// No kube-proxy: the API server calls webhooks at their endpoints.
		"--enable-aggregator-routing=true",
		"--cert-dir", filepath.Join(c.Dir, "apiserver"), "--v", "1"})
	if err != nil {
		return nil, err
	}
	return apiserver, nil
}

// startControllers starts kube-controller-manager and kube-scheduler.
func (c *Cluster) startControllers() error {
	for _, d := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{"--kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
			"--service-account-private-key-file", c.pki.SAKey, "--root-ca-file", c.pki.CAFile,
			"--use-service-account-credentials=true", "--leader-elect=false", "--secure-port", "0",
			"--cert-dir", filepath.Join(c.Dir, "controller-manager"),
			"--flex-volume-plugin-dir", filepath.Join(c.Dir, "volume-plugins"), "--v", "1"}},
		{"kube-scheduler", []string{"--kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
			"--leader-elect=false", "--secure-port", "0", "--v", "1"}},
	} {
		if _, err := c.start(d.name, append([]string{filepath.Join(c.k8sBin, d.name)}, d.args...)); err != nil {
			return err
		}
	}
	return nil
}

// writeCNIConfig writes a node's CNI network into dir: a bridge with
// host-local addresses from subnet (their records in ipamDir), no
// masquerading (nothing leaves the namespaces), and a default route through
// the bridge, so that pods reach the API server (the webhook does: there
// is no kube-proxy for the kubernetes Service) and, through the node's
// routes, the pods of other nodes.
func writeCNIConfig(dir, subnet, ipamDir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "gpurun-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "gpurun-br0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, subnet, ipamDir)
	return os.WriteFile(filepath.Join(dir, "10-gpurun-test.conflist"), []byte(conf), 0o644)
}

// startKubelet writes a node's kubelet configuration and starts it.
func (c *Cluster) startKubelet(n *ClusterNode) error {
	cfg := fmt.Sprintf(`{
  "apiVersion": "kubelet.config.k8s.io/v1beta1",
  "kind": "KubeletConfiguration",
  "address": %q,
  "readOnlyPort": 0,
  "healthzBindAddress": "127.0.0.1",
  "tlsCertFile": %q,
  "tlsPrivateKeyFile": %q,
  "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}, "x509": {"clientCAFile": %q}},
  "authorization": {"mode": "AlwaysAllow"},
  "cgroupDriver": "cgroupfs",
  "cgroupRoot": %q,
  "cgroupsPerQOS": true,
  "enforceNodeAllocatable": ["pods"],
  "failCgroupV1": false,
  "failSwapOn": false,
  "featureGates": {"KubeletCrashLoopBackOffMax": true},
  "crashLoopBackOff": {"maxContainerRestartPeriod": "1s"},
  "containerRuntimeEndpoint": %q,
  "podLogsDir": %q,
  "volumePluginDir": %q,
  "imageGCHighThresholdPercent": 100,
  "imageGCLowThresholdPercent": 99,
  "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%%", "nodefs.inodesFree": "1%%", "imagefs.available": "1%%"},
  "serializeImagePulls": false,
  "nodeStatusUpdateFrequency": "4s",
  "syncFrequency": "10s",
  "runtimeRequestTimeout": "2m",
  "shutdownGracePeriod": "0s",
  "protectKernelDefaults": false,
  "clusterDomain": "cluster.local",
  "resolvConf": "/etc/resolv.conf"
}
`, n.IP, c.pkiFile("kubelet-serving"+n.tag+".crt"), c.pkiFile("kubelet-serving"+n.tag+".key"), c.pki.CAFile, n.CgroupRoot,
		"unix://"+n.Containerd.Address, n.PodLogsDir, filepath.Join(n.Dir, "volume-plugins"))
	cfgPath := c.kubeletFile(n, ".json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	argv := []string{filepath.Join(c.k8sBin, "kubelet"),
		"--config", cfgPath, "--kubeconfig", c.kubeletFile(n, ".kubeconfig"),
		"--root-dir", n.KubeletRoot, "--cert-dir", c.kubeletFile(n, "-pki"),
		"--hostname-override", n.Name, "--node-ip", n.IP, "--v", "1"}
	var l []string
	for k, v := range n.Labels {
		if !adminLabel(k) {
			l = append(l, k+"="+v)
		}
	}
	if len(l) > 0 {
		sort.Strings(l)
		argv = append(argv, "--node-labels", strings.Join(l, ","))
	}
	p, err := startProcess("kubelet"+n.tag, filepath.Join(c.logDir, "kubelet"+n.tag+".log"), argv, os.Environ(), n.ns)
	if err != nil {
		return err
	}
	n.setKubelet(p)
	return nil
}

// stopKubelet stops every kubelet first, so that nothing restarts the
// pods containerd's cleanup removes.
func (c *Cluster) stopKubelet() {
	for _, n := range c.Nodes {
		if p := n.kubeletProc(); p != nil {
			if err := p.stop(30 * time.Second); err != nil {
				c.t.Errorf("harness: %v", err)
			}
		}
	}
}

// stopDaemons stops the control plane, newest first.
func (c *Cluster) stopDaemons() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(30 * time.Second); err != nil {
			c.t.Errorf("harness: %v", err)
		}
	}
}

// removeAll runs last: the cgroups, mounts and files that are left.
func (c *Cluster) removeAll() {
	var errs []error
	errs = append(errs, killShims(c.t, c.Dir, "")...)
	if err := removeCgroup(c.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if err := removeDir(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("harness: cluster cleanup of %s: %v", c.Dir, err)
	}
}

// ownerFile, in a cluster's directory, holds the pid of the test process
// that started it.
const ownerFile = "owner"

// makeClusterDir removes what the clusters of dead test processes left
// (sweepStaleClusters), then makes a cluster's directory of kind ("k" for
// StartCluster's, "m" for StartMultiNodeCluster's: the ones the sweep
// looks at) with this process as its owner.
func makeClusterDir(t testing.TB, kind string) string {
	t.Helper()
	sweepStaleClusters(t)
	dir := makeDir(t, kind)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return dir
}

// sweepStaleClusters removes what clusters left whose test process died
// without running its cleanups (go test -timeout panics, a kill): the
// daemons die with it (PR_SET_PDEATHSIG), but containerd's shims, the
// pods' processes, their cgroups and mounts would stay. A directory without
// an owner, or whose owner runs, is left alone.
func sweepStaleClusters(t testing.TB) {
	t.Helper()
	single, _ := filepath.Glob(filepath.Join("/tmp", DirPrefix+"k-*"))
	multi, _ := filepath.Glob(filepath.Join("/tmp", DirPrefix+"m-*"))
	for _, dir := range append(single, multi...) {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || unix.Kill(pid, 0) == nil {
			continue
		}
		errs := killShims(t, dir, "")
		if err := removeCgroup("/" + filepath.Base(dir)); err != nil {
			errs = append(errs, err)
		}
		if err := removeDir(dir); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			t.Errorf("harness: removing the leftovers of %s (its test process %d is gone): %v", dir, pid, err)
			continue
		}
		t.Logf("harness: removed the leftovers of %s, whose test process %d is gone", dir, pid)
	}
}

// Leftovers says what the cluster left behind after its cleanup: what
// [Leftovers] finds for Dir, and processes still in the cluster's network
// or mount namespace. Empty means the cleanup was complete.
func (c *Cluster) Leftovers() []string {
	out := Leftovers(c.Dir)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := fmt.Sscan(e.Name(), new(int)); err != nil {
			continue
		}
		if c.othersCgroup(e.Name()) {
			continue
		}
		for _, n := range []string{"net", "mnt"} {
			id, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", n))
			if err != nil {
				continue
			}
			for _, want := range c.nsIDs {
				if id == want {
					cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
					out = append(out, fmt.Sprintf("process %s in %s: %s", e.Name(), id, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
				}
			}
		}
	}
	return out
}

// othersCgroup reports whether process pid is in the cgroup of another
// engine of the harness (another test's cluster or containerd): once this
// cluster's namespaces are gone, a namespace made later may have the same
// inode number, and its processes are not this cluster's leftovers.
func (c *Cluster) othersCgroup(pid string) bool {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/"+DirPrefix) {
			continue
		}
		if f[2] != c.CgroupRoot && !strings.HasPrefix(f[2], c.CgroupRoot+"/") {
			return true
		}
	}
	return false
}

// ReadNodeFile reads a file as the node sees it (through its mount
// namespace: /var/log/gpurun.log is the node's, not the host's).
func (c *Cluster) ReadNodeFile(path string) ([]byte, error) { return c.ns.ReadFile(path) }
