package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpurun/gpurun/internal/cfgtree"
)

// NodeConfigOptions configures [StartContainerdOnNodeConfig] and
// [StartContainerd2OnNodeConfig].
type NodeConfigOptions struct {
	// Config is a node's config.toml, as an installer left it (version 2
	// for containerd 1.6; 3 or 4 for containerd 2.x).
	Config []byte
	// HostRoot is where the node's files lie on this machine (a fake host
	// root): executables the config names by node path (runtimes'
	// options.BinaryName) and imported files are found under it.
	HostRoot string
	// Env is added to containerd's environment.
	Env []string
}

// StartContainerdOnNodeConfig starts Debian's containerd 1.6 on a node's
// config, every setting kept except those that would touch this machine's
// own containerd or need a registry (see [NodeConfig]), and waits until its
// CRI plugin answers, as [StartContainerd] does; the cleanup is the same.
func StartContainerdOnNodeConfig(t testing.TB, opts NodeConfigOptions) *Containerd {
	t.Helper()
	bin, ctr := requireContainerd16(t)
	return launchContainerd(t, launchSpec{kind: "cn"}, bin, ctr, opts.Env, func(dir string) (string, error) {
		return NodeConfig(dir, opts.Config, opts.HostRoot)
	})
}

// StartContainerd2OnNodeConfig is [StartContainerdOnNodeConfig] for
// containerd 2.x (from $GPURUN_TEST_CONTAINERD2_BIN, as
// [StartContainerd2]) and a version 3 or 4 config.
func StartContainerd2OnNodeConfig(t testing.TB, opts NodeConfigOptions) *Containerd {
	t.Helper()
	binDir, _ := requireContainerd2(t)
	bin := filepath.Join(binDir, "containerd")
	env := append([]string{"PATH=" + binDir + ":" + os.Getenv("PATH")}, opts.Env...)
	return launchContainerd(t, launchSpec{kind: "cn2"}, bin, filepath.Join(binDir, "ctr"), env, func(dir string) (string, error) {
		return NodeConfig(dir, opts.Config, opts.HostRoot)
	})
}

// NodeConfig returns the config a private containerd living in dir runs
// with, from a node's config: every setting of node is kept except that
// root, state, the gRPC and ttrpc sockets, the opt directory, CNI's
// configuration directory and NRI's socket and directories move under dir;
// the sandbox image is the harness's pause image (never pulled); OOM score
// adjustments are restricted and SELinux is off (as on this machine); the
// runc runtimes' options.Root is dir/runc; and node paths of runtimes'
// BinaryName and of imports are taken under hostRoot. TOML is re-encoded:
// the meaning is kept, not the bytes.
func NodeConfig(dir string, node []byte, hostRoot string) (string, error) {
	var cfg map[string]any
	if err := toml.Unmarshal(node, &cfg); err != nil {
		return "", fmt.Errorf("node config: %w", err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	version, _ := cfg["version"].(int64)
	if version == 0 {
		version = 2
		cfg["version"] = version
	}
	under := func(p string) string {
		if p == "" || !filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(hostRoot, p)
	}
	cfg["root"] = filepath.Join(dir, "root")
	cfg["state"] = filepath.Join(dir, "state")
	if imports, ok := cfg["imports"].([]any); ok {
		for i, v := range imports {
			if s, ok := v.(string); ok {
				imports[i] = under(s)
			}
		}
	}
	disabled, _ := cfg["disabled_plugins"].([]any)
	for _, p := range []string{"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"} {
		if !slices.Contains(disabled, any(p)) {
			disabled = append(disabled, p)
		}
	}
	if version == 2 && !slices.Contains(disabled, any("io.containerd.snapshotter.v1.aufs")) {
		disabled = append(disabled, "io.containerd.snapshotter.v1.aufs")
	}
	cfg["disabled_plugins"] = disabled
	grpc, ttrpc := filepath.Join(dir, "containerd.sock"), filepath.Join(dir, "containerd.sock.ttrpc")
	set := func(v any, path ...string) { cfgtree.Set(cfg, path, v) }
	get := func(path ...string) map[string]any { return cfgtree.Table(cfg, path...) }
	set(filepath.Join(dir, "opt"), "plugins", "io.containerd.internal.v1.opt", "path")
	var runtimePlugin string
	switch version {
	case 2:
		runtimePlugin = "io.containerd.grpc.v1.cri"
		set(grpc, "grpc", "address")
		set(ttrpc, "ttrpc", "address")
		cri := []string{"plugins", runtimePlugin}
		set(PauseRef, append(cri, "sandbox_image")...)
		set("/usr/lib/cni", append(cri, "cni", "bin_dir")...)
		set(filepath.Join(dir, "cni"), append(cri, "cni", "conf_dir")...)
	case 3, 4:
		runtimePlugin = "io.containerd.cri.v1.runtime"
		if version == 3 {
			set(grpc, "grpc", "address")
			set(ttrpc, "ttrpc", "address")
		} else {
			set(grpc, "plugins", "io.containerd.server.v1.grpc", "address")
			set(ttrpc, "plugins", "io.containerd.server.v1.ttrpc", "address")
		}
		set(PauseRef, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox")
		rt := []string{"plugins", runtimePlugin}
		set([]any{"/usr/lib/cni"}, append(rt, "cni", "bin_dirs")...)
		if cni := get(append(rt, "cni")...); cni != nil {
			delete(cni, "bin_dir")
		}
		set(filepath.Join(dir, "cni"), append(rt, "cni", "conf_dir")...)
		nri := []string{"plugins", "io.containerd.nri.v1.nri"}
		set(filepath.Join(dir, "nri", "nri.sock"), append(nri, "socket_path")...)
		set(filepath.Join(dir, "nri", "plugins"), append(nri, "plugin_path")...)
		set(filepath.Join(dir, "nri", "conf.d"), append(nri, "plugin_config_path")...)
	default:
		return "", fmt.Errorf("node config: version %d is not supported", version)
	}
	set("127.0.0.1", "plugins", "io.containerd.grpc.v1.cri", "stream_server_address")
	set("0", "plugins", "io.containerd.grpc.v1.cri", "stream_server_port")
	set(true, "plugins", runtimePlugin, "restrict_oom_score_adj")
	set(false, "plugins", runtimePlugin, "enable_selinux")
	runtimes := get("plugins", runtimePlugin, "containerd", "runtimes")
	for _, v := range runtimes {
		r, ok := v.(map[string]any)
		if !ok || r["runtime_type"] != "io.containerd.runc.v2" {
			continue
		}
		opts, ok := r["options"].(map[string]any)
		if !ok {
			opts = map[string]any{}
			r["options"] = opts
		}
		opts["Root"] = filepath.Join(dir, "runc")
		if b, ok := opts["BinaryName"].(string); ok {
			opts["BinaryName"] = under(b)
		}
	}
	out, err := toml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("node config: %w", err)
	}
	return string(out), nil
}
