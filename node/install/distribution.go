package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpurun/gpurun/internal/hostpath"
)

// Distribution names how a node runs containerd: containerd on its own
// (its config.toml is gpurun's to edit), or the containerd that k3s or
// RKE2 embed, whose config.toml they write from a template at every start.
type Distribution string

// The distributions. Auto detects one from the node's files.
const (
	DistAuto       Distribution = "auto"
	DistContainerd Distribution = "containerd"
	DistK3s        Distribution = "k3s"
	DistRKE2       Distribution = "rke2"
)

// Distributions lists the values of --distribution, for help texts.
const Distributions = "auto|containerd|k3s|rke2"

// ParseDistribution checks a --distribution value; "" means DistAuto.
func ParseDistribution(s string) (Distribution, error) {
	switch d := Distribution(s); d {
	case "":
		return DistAuto, nil
	case DistAuto, DistContainerd, DistK3s, DistRKE2:
		return d, nil
	}
	return "", fmt.Errorf("distribution %q: want one of %s", s, Distributions)
}

// Templated reports whether the distribution writes containerd's
// config.toml from a template (k3s, RKE2).
func (d Distribution) Templated() bool { return d == DistK3s || d == DistRKE2 }

// DetectDistribution tells k3s or RKE2 by their containerd directory under
// hostRoot ("" or "/": this host), else DistContainerd. A node with both
// is taken for RKE2, which runs k3s's agent code under its own data dir.
func DetectDistribution(hostRoot string) Distribution {
	for _, d := range []Distribution{DistRKE2, DistK3s} {
		dir := Layout{Distribution: d}.ContainerdDir()
		if hostRoot != "" && hostRoot != "/" {
			dir = filepath.Join(hostRoot, dir)
		}
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return d
		}
	}
	return DistContainerd
}

// ResolveDistribution resolves DistAuto: a containerd config given
// other than containerd's default (configPath, a node path) means a
// containerd of its own unless it lies in k3s's or RKE2's directory;
// otherwise the node's files tell (DetectDistribution).
func ResolveDistribution(d Distribution, hostRoot, configPath string) Distribution {
	if d != DistAuto && d != "" {
		return d
	}
	if configPath != "" && configPath != DefaultContainerdConfig {
		for _, t := range []Distribution{DistK3s, DistRKE2} {
			if filepath.Dir(configPath) == (Layout{Distribution: t}).ContainerdDir() {
				return t
			}
		}
		return DistContainerd
	}
	return DetectDistribution(hostRoot)
}

// Layout is where k3s or RKE2 keep their embedded containerd's files (node
// paths). Both use one socket and state directory under /run/k3s.
type Layout struct {
	Distribution Distribution
}

// DataDir is the distribution's data directory.
func (l Layout) DataDir() string {
	if l.Distribution == DistRKE2 {
		return "/var/lib/rancher/rke2"
	}
	return "/var/lib/rancher/k3s"
}

// ContainerdDir holds the templates and the generated config.toml.
func (l Layout) ContainerdDir() string {
	return filepath.Join(l.DataDir(), "agent", "etc", "containerd")
}

// Config is the config.toml the distribution generates at every start:
// containerd reads it; gpurun never writes it.
func (l Layout) Config() string { return filepath.Join(l.ContainerdDir(), "config.toml") }

// Template is the template for a version 2 config (containerd 1.7, and
// containerd 2.x when there is no version 3 template).
func (l Layout) Template() string { return filepath.Join(l.ContainerdDir(), "config.toml.tmpl") }

// TemplateV3 is the template for a version 3 config, which releases with
// containerd 2.x prefer.
func (l Layout) TemplateV3() string { return filepath.Join(l.ContainerdDir(), "config-v3.toml.tmpl") }

// Root is containerd's root directory.
func (l Layout) Root() string { return filepath.Join(l.DataDir(), "agent", "containerd") }

// State is containerd's state directory.
func (l Layout) State() string { return "/run/k3s/containerd" }

// Socket is containerd's socket.
func (l Layout) Socket() string { return "/run/k3s/containerd/containerd.sock" }

// Binaries are where the embedded containerd binary may be.
func (l Layout) Binaries() []string {
	if l.Distribution == DistRKE2 {
		return []string{"/var/lib/rancher/rke2/bin/containerd", "/var/lib/rancher/rke2/data/current/bin/containerd"}
	}
	return []string{"/var/lib/rancher/k3s/data/current/bin/containerd"}
}

// Programs are where the k3s or RKE2 binary may be (node paths).
func (l Layout) Programs() []string {
	name := string(l.Distribution)
	return []string{"/usr/local/bin/" + name, "/usr/bin/" + name, "/opt/bin/" + name, "/opt/" + name + "/bin/" + name}
}

// Program returns the k3s or RKE2 binary on the node under hostRoot (a
// node path), "" when there is none.
func (l Layout) Program(hostRoot string) string {
	for _, p := range l.Programs() {
		if fi, err := hostpath.Stat(hostRoot, p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Version runs the k3s or RKE2 binary (a node path, from Program) with
// --version, chrooted into hostRoot when there is one, and returns the
// version it prints ("k3s version v1.31.6+k3s1 (hash)" gives
// "v1.31.6+k3s1").
func (l Layout) Version(ctx context.Context, hostRoot, program string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := hostpath.Command(ctx, hostRoot, program, "--version")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", program, err, strings.TrimSpace(stderr.String()))
	}
	return ParseVersion(string(out))
}

// ParseVersion returns the version in the output of k3s --version or
// rke2 --version.
func ParseVersion(out string) (string, error) {
	f := strings.Fields(out)
	if len(f) < 3 || f[1] != "version" || !strings.HasPrefix(f[2], "v") {
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return "", fmt.Errorf("--version printed %q", first)
	}
	return f[2], nil
}

// Units are the systemd units that run the distribution (server first);
// restarting one makes it render the template and restart containerd.
func (l Layout) Units() []string {
	if l.Distribution == DistRKE2 {
		return []string{"rke2-server.service", "rke2-agent.service"}
	}
	return []string{"k3s.service", "k3s-agent.service"}
}

// unitDirs are where unit files are installed.
func unitDirs() []string {
	return []string{"/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}
}

// Unit returns the distribution's unit installed on the node under
// hostRoot, else the first of Units.
func (l Layout) Unit(hostRoot string) string {
	for _, u := range l.Units() {
		for _, d := range unitDirs() {
			p := filepath.Join(d, u)
			if hostRoot != "" && hostRoot != "/" {
				p = filepath.Join(hostRoot, p)
			}
			if _, err := os.Stat(p); err == nil {
				return u
			}
		}
	}
	return l.Units()[0]
}
