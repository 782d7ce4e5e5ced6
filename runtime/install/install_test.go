package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/policy"
)

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func opts(root string, out *bytes.Buffer) Options {
	return Options{HostRoot: root, RuntimePath: "/usr/local/bin/gpurun-runtime", StatePath: "/var/lib/gpurun/state.json",
		PolicyPath: "/etc/gpurun/config.toml", Out: out, Now: func() time.Time { return time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC) }}
}

const nvidiaDaemonJSON = `{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}`

func TestDockerInstallTwiceThenUninstall(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/docker/daemon.json")
	write(t, cfg, nvidiaDaemonJSON)
	write(t, filepath.Join(root, "etc/gpurun/config.toml"), "# site policy\nmin = \"2g\"\n")
	d := Docker{Options: opts(root, &out)}

	// Dry run: nothing written.
	dry := d
	dry.DryRun = true
	if err := dry.Install(); err != nil {
		t.Fatal(err)
	}
	if read(t, cfg) != nvidiaDaemonJSON || !strings.Contains(out.String(), `+        "gpurun": {`) {
		t.Fatalf("dry run wrote or printed wrong:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/gpurun/state.json")); err == nil {
		t.Fatal("dry run wrote the state file")
	}

	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	// The nvidia default is chained in the policy, which still validates.
	pol, err := policy.Load(filepath.Join(root, "etc/gpurun/config.toml"), true)
	if err != nil || pol.Runtime != "nvidia-container-runtime" || pol.Min != 2*policy.GiB {
		t.Fatalf("policy after chain: %+v, %v", pol, err)
	}
	d.SetAsDefault = true
	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, cfg); !strings.Contains(got, `"default-runtime": "gpurun"`) || !strings.Contains(got, `"nvidia": {`) {
		t.Fatalf("after set-as-default:\n%s", got)
	}
	backups, _ := filepath.Glob(cfg + ".gpurun-*.bak")
	if len(backups) != 1 || read(t, backups[0]) != nvidiaDaemonJSON {
		t.Fatalf("backups %v", backups)
	}
	// A third install is a no-op.
	before := read(t, cfg)
	out.Reset()
	if err := d.Install(); err != nil || read(t, cfg) != before || !strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("third install: %v\n%s", err, out.String())
	}
	if err := d.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, cfg); got != nvidiaDaemonJSON {
		t.Errorf("uninstall left\n%s\nwant the original\n%s", got, nvidiaDaemonJSON)
	}
	if got := read(t, filepath.Join(root, "etc/gpurun/config.toml")); got != "# site policy\nmin = \"2g\"\n" {
		t.Errorf("policy not restored: %q", got)
	}
	// Uninstall again: nothing to do, no error.
	if err := d.Uninstall(); err != nil {
		t.Errorf("second uninstall: %v", err)
	}
}

func TestDockerUninstallWithoutState(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/docker/daemon.json")
	write(t, cfg, `{"log-level": "warn"}`)
	d := Docker{Options: opts(root, &out), SetAsDefault: true}
	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "var/lib/gpurun/state.json")); err != nil {
		t.Fatal(err)
	}
	if err := d.Uninstall(); err != nil {
		t.Fatal(err)
	}
	got := read(t, cfg)
	if strings.Contains(got, "gpurun") || !strings.Contains(got, `"log-level": "warn"`) {
		t.Errorf("uninstall without state left %s", got)
	}
}

func TestContainerdInstallThenUninstall(t *testing.T) {
	const debian = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".cni]\n      bin_dir = \"/usr/lib/cni\"\n      conf_dir = \"/etc/cni/net.d\"\n  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = \"/var/lib/containerd/opt\"\n"
	for _, dropIn := range []string{"", "/etc/containerd/conf.d"} {
		t.Run("drop-in="+dropIn, func(t *testing.T) {
			root := t.TempDir()
			var out bytes.Buffer
			cfg := filepath.Join(root, "etc/containerd/config.toml")
			write(t, cfg, debian)
			c := Containerd{Options: opts(root, &out), DropInDir: dropIn}
			if err := c.Install(); err != nil {
				t.Fatal(err)
			}
			c.SetAsDefault = true
			if err := c.Install(); err != nil {
				t.Fatal(err)
			}
			all := read(t, cfg)
			if dropIn != "" {
				all += read(t, filepath.Join(root, dropIn, DropInName))
				if !strings.Contains(read(t, cfg), filepath.Join(dropIn, DropInName)) {
					t.Errorf("main config does not import the drop-in:\n%s", read(t, cfg))
				}
			}
			for _, want := range []string{`BinaryName = "/usr/local/bin/gpurun-runtime"`, `default_runtime_name = "gpurun"`, `"gpurun.io/*"`} {
				if !strings.Contains(all, want) {
					t.Errorf("config lacks %s:\n%s", want, all)
				}
			}
			if err := c.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, cfg); got != debian {
				t.Errorf("uninstall left\n%s\nwant\n%s", got, debian)
			}
			if dropIn != "" {
				if _, err := os.Stat(filepath.Join(root, dropIn, DropInName)); err == nil {
					t.Error("drop-in left behind")
				}
			}
		})
	}
}

func TestContainerdRefusesVersion1(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, "[plugins.cri]\n  sandbox_image = \"x\"\n")
	err := Containerd{Options: opts(root, &out)}.Install()
	if err == nil || !strings.Contains(err.Error(), "version 1") || !strings.Contains(err.Error(), cfg) {
		t.Errorf("error %v", err)
	}
	if read(t, cfg) != "[plugins.cri]\n  sandbox_image = \"x\"\n" {
		t.Error("refused config was changed")
	}
}

// TestContainerdReadsImports: NVIDIA's drop-in makes nvidia the default
// (as nvidia-ctk does for containerd 2.x). gpurun copies and chains to
// it, and refuses a --set-as-default that the drop-in, read after the
// main config, would undo, naming the file and line.
func TestContainerdReadsImports(t *testing.T) {
	const main = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
	const nvidia = "version = 3\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"nvidia\"\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n  [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n    BinaryName = \"/usr/bin/nvidia-container-runtime\"\n    SystemdCgroup = true\n"
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, main)
	write(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml"), nvidia)

	err := Containerd{Options: opts(root, &out), SetAsDefault: true}.Install()
	want := "containerd (containerd 2.x) would keep nvidia as its default runtime handler, set in /etc/containerd/conf.d/99-nvidia.toml:4"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("set as default: %v\nwant %q", err, want)
	}
	if read(t, cfg) != main {
		t.Error("a refused install changed the config")
	}

	if err := (Containerd{Options: opts(root, &out)}).Install(); err != nil {
		t.Fatal(err)
	}
	got := read(t, cfg)
	for _, line := range []string{"  SystemdCgroup = true\n", "BinaryName = \"/usr/local/bin/gpurun-runtime\""} {
		if !strings.Contains(got, line) {
			t.Errorf("the runtime copied from nvidia's lacks %q:\n%s", line, got)
		}
	}
	pol, err := policy.Parse("policy", []byte(read(t, filepath.Join(root, "etc/gpurun/config.toml"))))
	if err != nil || pol.Runtime != "/usr/bin/nvidia-container-runtime" {
		t.Errorf("chained runtime %q, %v", pol.Runtime, err)
	}
}

// TestContainerdRefusesABrokenImport: containerd does not start with an
// import that does not exist; the install says so instead of editing.
func TestContainerdRefusesABrokenImport(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, "version = 2\nimports = [\"/etc/containerd/gone.toml\"]\n")
	err := Containerd{Options: opts(root, &out)}.Install()
	if err == nil || !strings.Contains(err.Error(), "/etc/containerd/config.toml:2: imports /etc/containerd/gone.toml, which does not exist") {
		t.Errorf("got %v", err)
	}
}
