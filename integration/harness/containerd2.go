package harness

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Containerd2BinEnv names the directory holding containerd 2.x's
// containerd, ctr and containerd-shim-runc-v2 binaries. `make
// test-integration` builds them from the Go module proxy into /var/cache/gpurun-tools (.tools/ when not root) and
// sets it.
const Containerd2BinEnv = "GPURUN_TEST_CONTAINERD2_BIN"

// containerd2Tools are the binaries StartContainerd2 needs from Containerd2BinEnv.
var containerd2Tools = []string{"containerd", "ctr", "containerd-shim-runc-v2"}

// Containerd2Options configures [StartContainerd2].
type Containerd2Options struct {
	// Plugins are executables installed in the NRI plugin directory before
	// containerd starts, which then launches them: file name in the
	// directory (<idx>-<name>, such as "10-gpurun") -> path of the
	// executable to copy there.
	Plugins map[string]string
	// PluginConfigs are written to the NRI plugin configuration directory
	// before containerd starts: file name ("10-gpurun.conf" or
	// "gpurun.conf") -> a function of the instance's directory that
	// returns the contents (so that a config can name paths below it).
	PluginConfigs map[string]func(dir string) string
	// Env is added to containerd's environment (its own binary directory
	// always comes first in PATH, so it runs its own shim).
	Env []string
	// CRI holds the settings a kubelet's containerd needs.
	CRI CRISettings
	// NVIDIA, when set, makes this containerd a GPU node's: it runs in
	// that node's mount namespace (see NVIDIA), and reads CDI specs from
	// NVIDIA.CDIDir.
	NVIDIA *NVIDIA
}

// Containerd2 is a private containerd 2.x with its CRI plugin and NRI
// enabled: the embedded Containerd (CRI helpers, Restart, cleanup) plus
// where its NRI lives. Its config is version 3.
type Containerd2 struct {
	*Containerd
	// BinDir holds the containerd 2.x binaries; it is first in PATH.
	BinDir string
	// NRISocket is where external NRI plugins connect.
	NRISocket string
	// NRIPluginDir holds the plugins containerd launches itself
	// (<idx>-<name>), NRIPluginConfigDir their configurations.
	NRIPluginDir, NRIPluginConfigDir string
	// Version is what `containerd --version` says.
	Version string
}

// StartContainerd2 starts containerd 2.x (from $GPURUN_TEST_CONTAINERD2_BIN)
// with its CRI plugin and NRI enabled, everything under a fresh directory:
// root, state, gRPC and ttrpc sockets, the NRI socket, plugin and plugin
// configuration directories; host-network pods with the harness's pause
// image pinned as the sandbox image (imported, never pulled). The cleanup
// is StartContainerd's: pods, containerd, shims and NRI plugins it
// launched, mounts, cgroups, the directory.
func StartContainerd2(t testing.TB, opts Containerd2Options) *Containerd2 {
	t.Helper()
	binDir, version := requireContainerd2(t)
	bin := filepath.Join(binDir, "containerd")
	env := append([]string{"PATH=" + binDir + ":" + os.Getenv("PATH")}, opts.Env...)
	cri := opts.CRI
	if opts.NVIDIA != nil && len(cri.CDISpecDirs) == 0 {
		cri.CDISpecDirs = []string{opts.NVIDIA.CDIDir}
	}
	c := launchContainerd(t, launchSpec{kind: "c2", nvidia: opts.NVIDIA}, bin, filepath.Join(binDir, "ctr"), env, func(dir string) (string, error) {
		nri := nriDirs(dir)
		for _, d := range []string{nri.plugins, nri.configs} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return "", err
			}
		}
		for name, src := range opts.Plugins {
			if err := copyExecutable(src, filepath.Join(nri.plugins, name)); err != nil {
				return "", fmt.Errorf("install NRI plugin %s: %w", name, err)
			}
		}
		for name, contents := range opts.PluginConfigs {
			if err := os.WriteFile(filepath.Join(nri.configs, name), []byte(contents(dir)), 0o644); err != nil {
				return "", fmt.Errorf("write NRI plugin config %s: %w", name, err)
			}
		}
		return Containerd2ConfigWith(dir, cri), nil
	})
	nri := nriDirs(c.Dir)
	t.Logf("harness: %s", version)
	return &Containerd2{
		Containerd:         c,
		BinDir:             binDir,
		NRISocket:          nri.socket,
		NRIPluginDir:       nri.plugins,
		NRIPluginConfigDir: nri.configs,
		Version:            version,
	}
}

type nriPaths struct{ socket, plugins, configs string }

func nriDirs(dir string) nriPaths {
	return nriPaths{
		socket:  filepath.Join(dir, "nri", "nri.sock"),
		plugins: filepath.Join(dir, "nri", "plugins"),
		configs: filepath.Join(dir, "nri", "conf.d"),
	}
}

// Containerd2Config returns the version 3 config.toml StartContainerd2
// writes for an instance living in dir.
func Containerd2Config(dir string) string {
	return Containerd2ConfigWith(dir, CRISettings{})
}

// Containerd2ConfigWith is Containerd2Config with CRI settings for a
// kubelet's containerd.
func Containerd2ConfigWith(dir string, cri CRISettings) string {
	q := tomlString
	nri := nriDirs(dir)
	var b strings.Builder
	fmt.Fprintf(&b, "version = 3\n")
	fmt.Fprintf(&b, "root = %s\n", q(filepath.Join(dir, "root")))
	fmt.Fprintf(&b, "state = %s\n", q(filepath.Join(dir, "state")))
	fmt.Fprintf(&b, "disabled_plugins = [%s, %s, %s]\n\n",
		q("io.containerd.snapshotter.v1.btrfs"), q("io.containerd.snapshotter.v1.zfs"), q("io.containerd.snapshotter.v1.devmapper"))
	fmt.Fprintf(&b, "[grpc]\n  address = %s\n\n", q(filepath.Join(dir, "containerd.sock")))
	fmt.Fprintf(&b, "[ttrpc]\n  address = %s\n\n", q(filepath.Join(dir, "containerd.sock.ttrpc")))
	fmt.Fprintf(&b, "[plugins]\n\n")
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = %s\n\n", q(filepath.Join(dir, "opt")))
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.grpc.v1.cri\"]\n")
	fmt.Fprintf(&b, "    stream_server_address = \"127.0.0.1\"\n")
	fmt.Fprintf(&b, "    stream_server_port = \"0\"\n\n")
	const images = `plugins."io.containerd.cri.v1.images"`
	fmt.Fprintf(&b, "  [%s]\n    snapshotter = \"overlayfs\"\n\n", images)
	fmt.Fprintf(&b, "    [%s.pinned_images]\n      sandbox = %s\n\n", images, q(PauseRef))
	const rt = `plugins."io.containerd.cri.v1.runtime"`
	fmt.Fprintf(&b, "  [%s]\n", rt)
	fmt.Fprintf(&b, "    restrict_oom_score_adj = true\n")
	fmt.Fprintf(&b, "    enable_selinux = false\n")
	if cri.PodNetwork {
		fmt.Fprintf(&b, "    netns_mounts_under_state_dir = true\n")
	}
	if len(cri.CDISpecDirs) > 0 {
		fmt.Fprintf(&b, "    cdi_spec_dirs = %s\n", tomlArray(cri.CDISpecDirs))
	}
	fmt.Fprintf(&b, "\n")
	fmt.Fprintf(&b, "    [%s.cni]\n      bin_dirs = [\"/usr/lib/cni\"]\n      conf_dir = %s\n\n", rt, q(filepath.Join(dir, "cni")))
	fmt.Fprintf(&b, "    [%s.containerd]\n      default_runtime_name = \"runc\"\n\n", rt)
	fmt.Fprintf(&b, "      [%s.containerd.runtimes.runc]\n        runtime_type = \"io.containerd.runc.v2\"\n\n", rt)
	fmt.Fprintf(&b, "        [%s.containerd.runtimes.runc.options]\n          Root = %s\n\n", rt, q(filepath.Join(dir, "runc")))
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.nri.v1.nri\"]\n")
	fmt.Fprintf(&b, "    disable = false\n")
	fmt.Fprintf(&b, "    socket_path = %s\n", q(nri.socket))
	fmt.Fprintf(&b, "    plugin_path = %s\n", q(nri.plugins))
	fmt.Fprintf(&b, "    plugin_config_path = %s\n", q(nri.configs))
	return b.String()
}

// LogCount returns how many lines of containerd's log (all its runs)
// contain substr.
func (c *Containerd2) LogCount(substr string) int {
	return countLines(c.logPath, substr)
}

// copyExecutable copies src to dst with mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// archiveTags returns the image references of a docker-save archive
// (RepoTags in its manifest.json), nil if it has none or cannot be read.
func archiveTags(tarPath string) []string {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil
		}
		if path.Clean(h.Name) != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			return nil
		}
		var tags []string
		for _, m := range manifest {
			tags = append(tags, m.RepoTags...)
		}
		return tags
	}
}

// requireContainerd2 checks what a containerd 2.x instance needs — root,
// $GPURUN_TEST_CONTAINERD2_BIN holding containerd 2.x, ctr and its runc
// shim, runc, a static busybox — failing the test with how to get what is
// missing, and returns that directory and containerd's version line.
func requireContainerd2(t testing.TB) (binDir, version string) {
	t.Helper()
	requireRoot(t)
	binDir = os.Getenv(Containerd2BinEnv)
	if binDir == "" {
		t.Fatalf("harness: prerequisite missing: $%s is not set: run the tests with `make test-integration` (it builds containerd 2.x's containerd, ctr and containerd-shim-runc-v2 into /var/cache/gpurun-tools (.tools/ when not root) and sets it), or point it at a directory holding them", Containerd2BinEnv)
	}
	for _, name := range containerd2Tools {
		if fi, err := os.Stat(filepath.Join(binDir, name)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("harness: prerequisite missing: %s has no executable %s (%v): run `make test-integration`, which builds it with go install", binDir, name, err)
		}
	}
	bin := filepath.Join(binDir, "containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	version, _, err := runCmd(ctx, nil, bin, "--version")
	cancel()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	version = strings.TrimSpace(version)
	if !strings.Contains(version, "github.com/containerd/containerd/v2 ") {
		t.Fatalf("harness: %s is not containerd 2.x: %q", bin, version)
	}
	requireBinary(t, "runc", "runc")
	staticBusybox(t)
	return binDir, version
}
