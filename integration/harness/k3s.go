package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpurun/gpurun/internal/k3stest"
)

// K3sNode is a node laid out as k3s (or RKE2) lays out its embedded
// containerd, under a host root on this machine: the templates and the
// config.toml k3s generates from them in DataDir/agent/etc/containerd, and
// containerd's state directory at /run/k3s/containerd. The harness plays
// k3s's part: Render writes config.toml from the node's template as k3s
// does when it starts, and Restart is k3s's service restart (render, then
// start containerd again; running containers keep running).
type K3sNode struct {
	// HostRoot is the node's root on this machine.
	HostRoot string
	// DataDir is the distribution's data directory (a node path):
	// /var/lib/rancher/k3s or /var/lib/rancher/rke2.
	DataDir string
	// Program is "k3s" or "rke2" (the template's .Program).
	Program string
	// Release is the k3s release that renders the config, and Base its
	// base template (the text of Release.Base), defined as "base" for the
	// node's template and rendered alone when there is none.
	Release k3stest.Release
	Base    string
	// NVIDIA adds the runtimes k3s adds when it finds the NVIDIA container
	// runtime on the node.
	NVIDIA bool
	// InUserNS renders as k3s does when it finds itself in a user
	// namespace (k3s in a container): OOM score adjustments restricted,
	// AppArmor off, which a containerd of the harness needs.
	InUserNS bool
}

// ContainerdDir is where the templates and config.toml are (a node path).
func (n K3sNode) ContainerdDir() string {
	return filepath.Join(n.DataDir, "agent", "etc", "containerd")
}

// ConfigPath is the generated config.toml (a node path).
func (n K3sNode) ConfigPath() string { return filepath.Join(n.ContainerdDir(), "config.toml") }

// StateDir is containerd's state directory (a node path).
func (n K3sNode) StateDir() string { return "/run/k3s/containerd" }

// Host returns a node path's path on this machine.
func (n K3sNode) Host(p string) string { return filepath.Join(n.HostRoot, p) }

// Data is what k3s executes the template with (k3stest.Release.Data).
// SystemdCgroup is false: this machine's containers are not in systemd's
// cgroups.
func (n K3sNode) Data() map[string]any {
	d := n.Release.Data(k3stest.Node{
		Program: n.Program, DataDir: n.DataDir, Root: filepath.Join(n.DataDir, "agent", "containerd"),
		State: n.StateDir(), Address: filepath.Join(n.StateDir(), "containerd.sock"), PauseImage: PauseRef, NVIDIA: n.NVIDIA,
	})
	if n.InUserNS {
		d["IsRunningInUserNS"] = true
	}
	return d
}

// Render writes config.toml from the node's template as k3s does at start
// (config-v3.toml.tmpl first, then config.toml.tmpl, else the base
// template alone, with the base template defined as "base") and returns
// it.
func (n K3sNode) Render() ([]byte, error) {
	main := n.Base
	for _, name := range []string{"config-v3.toml.tmpl", "config.toml.tmpl"} {
		p := n.Host(filepath.Join(n.ContainerdDir(), name))
		data, err := os.ReadFile(p)
		if err == nil {
			main = string(data)
			break
		}
		if !os.IsNotExist(err) {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
	}
	rendered, err := n.Release.Render(main, n.Base, n.Data())
	if err != nil {
		return nil, err
	}
	p := n.Host(n.ConfigPath())
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, []byte(rendered), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", p, err)
	}
	return []byte(rendered), nil
}

// StartK3sContainerd renders the node's config and starts a containerd on
// it (Debian's 1.6 for a version 2 config; containerd 2.x with
// containerd2), as [StartContainerdOnNodeConfig] does: the config's
// settings kept except what would touch this machine. The node's
// /run/k3s/containerd is made a link to its state directory, where the node
// agent finds the bundles; the cleanup removes the link.
func StartK3sContainerd(t testing.TB, n K3sNode, containerd2 bool, env []string) *Containerd {
	t.Helper()
	rendered, err := n.Render()
	if err != nil {
		t.Fatal(err)
	}
	opts := NodeConfigOptions{Config: rendered, HostRoot: n.HostRoot, Env: env}
	var c *Containerd
	if containerd2 {
		c = StartContainerd2OnNodeConfig(t, opts)
	} else {
		c = StartContainerdOnNodeConfig(t, opts)
	}
	link := n.Host(n.StateDir())
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(c.StateDir, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(link)
		os.Remove(filepath.Dir(link)) // run/k3s, when empty
	})
	return c
}

// Restart is k3s's service restart: the config is rendered from the
// node's template again and containerd restarts on it; running containers
// keep running.
func (n K3sNode) Restart(t testing.TB, c *Containerd) {
	t.Helper()
	rendered, err := n.Render()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := NodeConfig(c.Dir, rendered, n.HostRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Restart()
}
