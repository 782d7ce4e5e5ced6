package install

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/internal/cfgtree"
)

// nvidiaFiles are what nvidia-ctk v1.20.2 wrote (engine/containerd's
// testdata): over containerd 1.6.20's default config, and over that
// config with gpurun installed in place as the default.
func nvidiaFiles(t *testing.T, overGpurun bool) (main, dropIn string) {
	t.Helper()
	prefix := "containerd-1.6.20-"
	if overGpurun {
		prefix = "over-gpurun-containerd-1.6.20-"
	}
	dir := filepath.Join("..", "..", "engine", "containerd", "testdata", "nvidia")
	return read(t, filepath.Join(dir, prefix+"config.toml")), read(t, filepath.Join(dir, prefix+"99-nvidia.toml"))
}

// effectiveOf reads the node's containerd config as containerd 1.x does.
func effectiveOf(t *testing.T, root string) *containerd.Config {
	t.Helper()
	cfg, err := containerd.Load(context.Background(), DefaultContainerdConfig, containerd.LoadOptions{Root: root, Generation: containerd.Containerd1})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func handlerNames(cfg *containerd.Config) []string {
	var names []string
	for _, r := range cfg.Runtimes() {
		names = append(names, r.Name)
	}
	return names
}

// TestContainerdBesideNVIDIA: NVIDIA's toolkit manages containerd 1.6's
// config with a drop-in (conf.d/99-nvidia.toml, a copy of the CRI section
// with its nvidia handler as the default). An install that containerd
// would not see (in place, or into NVIDIA's conf.d, whose 99-nvidia.toml
// sorts after 99-gpurun.toml) is refused, naming the install that works;
// that one (a drop-in directory of gpurun's own) keeps the nvidia handler,
// makes gpurun the default and chains NVIDIA's runtime; its uninstall
// leaves the configuration as the toolkit alone had it. An install in
// place takes that way itself, saying so in one line, unless
// --no-auto-drop-in asks for the refusal.
func TestContainerdBesideNVIDIA(t *testing.T) {
	for _, tc := range []struct {
		name, dropIn string
		noAuto       bool
		refused      bool
		// said is a line the install must print, "" for none asked.
		said string
	}{
		{name: "in place, --no-auto-drop-in", noAuto: true, refused: true},
		{name: "in place: into its own drop-in directory, saying so", said: "conf.d/99-nvidia.toml would hide an install in place; installing into /etc/containerd/gpurun.d instead"},
		{name: "into NVIDIA's conf.d", dropIn: "/etc/containerd/conf.d", refused: true},
		{name: "a drop-in directory of its own", dropIn: "/etc/containerd/gpurun.d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			main, drop := nvidiaFiles(t, false)
			write(t, filepath.Join(root, "etc/containerd/config.toml"), main)
			write(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml"), drop)
			alone := effectiveOf(t, root).Tree()
			var out bytes.Buffer
			c := Containerd{Options: opts(root, &out), SetAsDefault: true, DropInDir: tc.dropIn, NoAutoDropIn: tc.noAuto}
			err := c.Install()
			if tc.said != "" && !strings.Contains(out.String(), tc.said) {
				t.Errorf("the install did not say %q:\n%s", tc.said, out.String())
			}
			if tc.refused {
				var hidden *HiddenError
				if !errors.As(err, &hidden) || !strings.Contains(hidden.Instead, "gpurun install containerd --set-as-default --drop-in /etc/containerd/gpurun.d") || !strings.Contains(err.Error(), "99-nvidia.toml") {
					t.Fatalf("want a refusal naming NVIDIA's drop-in and the install that works, got %v", err)
				}
				if read(t, filepath.Join(root, "etc/containerd/config.toml")) != main {
					t.Error("a refused install changed config.toml")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := effectiveOf(t, root)
			if got := handlerNames(cfg); !slices.Equal(got, []string{"gpurun", "nvidia", "runc"}) || cfg.DefaultRuntime() != RuntimeName {
				t.Errorf("handlers %v, default %s; want gpurun, nvidia, runc; gpurun", got, cfg.DefaultRuntime())
			}
			if pol := read(t, filepath.Join(root, "etc/gpurun/config.toml")); !strings.Contains(pol, `runtime = "/usr/bin/nvidia-container-runtime"`) {
				t.Errorf("policy does not chain NVIDIA's runtime:\n%s", pol)
			}
			out.Reset()
			if err := c.Uninstall(); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out.String())
			}
			if p, ok := cfgtree.Equal(effectiveOf(t, root).Tree(), alone); !ok {
				t.Errorf("after uninstall containerd reads another config than the toolkit left (differs at %v)", p)
			}
			if _, err := os.Stat(filepath.Join(root, "etc/containerd/gpurun.d/99-gpurun.toml")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the drop-in is still there: %v", err)
			}
		})
	}
}

// TestContainerdUninstallAfterNVIDIA: gpurun installed in place as the
// default, then nvidia-ctk (testdata, as v1.20.2 wrote it): config.toml
// rewritten without gpurun's marker, gpurun's handler copied into
// NVIDIA's drop-in. Uninstall takes the handler out of both and says so;
// containerd then reads the toolkit's configuration alone (nvidia the
// default, no gpurun). A second install in place is refused, naming the
// drop-in install that works.
func TestContainerdUninstallAfterNVIDIA(t *testing.T) {
	root := t.TempDir()
	cfgPath := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfgPath, read(t, filepath.Join("..", "..", "engine", "containerd", "testdata", "containerd-1.6.20-config-default.toml")))
	var out bytes.Buffer
	c := Containerd{Options: opts(root, &out), SetAsDefault: true, NoAutoDropIn: true}
	if err := c.Install(); err != nil {
		t.Fatal(err)
	}
	main, drop := nvidiaFiles(t, true)
	write(t, cfgPath, main)
	write(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml"), drop)
	if cfg := effectiveOf(t, root); cfg.DefaultRuntime() != "nvidia" {
		t.Fatalf("testdata: default %s, want nvidia", cfg.DefaultRuntime())
	}

	var hidden *HiddenError
	if err := c.Install(); !errors.As(err, &hidden) || !strings.Contains(hidden.Instead, "--drop-in /etc/containerd/gpurun.d") {
		t.Errorf("a second install in place: want a refusal naming the drop-in install, got %v", err)
	}

	out.Reset()
	if err := c.Uninstall(); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out.String())
	}
	for _, want := range []string{"config.toml: gpurun runtime removed", "conf.d/99-nvidia.toml: removed the copy of gpurun's runtime handler"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("uninstall output lacks %q:\n%s", want, out.String())
		}
	}
	cfg := effectiveOf(t, root)
	if got := handlerNames(cfg); !slices.Equal(got, []string{"nvidia", "runc"}) || cfg.DefaultRuntime() != "nvidia" {
		t.Errorf("after uninstall: handlers %v, default %s; want nvidia, runc; nvidia", got, cfg.DefaultRuntime())
	}
	if strings.Contains(read(t, cfgPath), "gpurun") {
		t.Errorf("config.toml still names gpurun:\n%s", read(t, cfgPath))
	}
	// nvidia-ctk copied gpurun's pod_annotations into its nvidia handler.
	if drop := read(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml")); strings.Contains(drop, "gpurun") {
		t.Errorf("NVIDIA's drop-in still names gpurun after uninstall:\n%s", drop)
	}
}

// TestContainerdRechains: gpurun installed first in its own drop-in
// directory, as the default, chaining nothing (runc is the default it
// stands in for); NVIDIA's toolkit comes second, its nvidia handler the
// default in a file read before gpurun's. Installing again chains NVIDIA's
// runtime — without it, GPU pods of the default handler would lose the
// runtime that gives them their GPU. With the toolkit gone, the next
// install unchains it, and the policy is as it was.
func TestContainerdRechains(t *testing.T) {
	root := t.TempDir()
	cfgPath := filepath.Join(root, "etc/containerd/config.toml")
	polPath := filepath.Join(root, "etc/gpurun/config.toml")
	original := read(t, filepath.Join("..", "..", "engine", "containerd", "testdata", "containerd-1.6.20-config-default.toml"))
	write(t, cfgPath, original)
	write(t, polPath, "# site policy\nmin = \"2g\"\n")
	var out bytes.Buffer
	c := Containerd{Options: opts(root, &out), SetAsDefault: true, DropInDir: "/etc/containerd/gpurun.d"}
	if err := c.Install(); err != nil {
		t.Fatal(err)
	}
	if pol := read(t, polPath); strings.Contains(pol, "runtime") {
		t.Fatalf("gpurun alone chains a runtime:\n%s", pol)
	}
	// The toolkit second: its glob goes before gpurun's own entry, as
	// nvidia-ctk appends it to imports.
	_, drop := nvidiaFiles(t, false)
	write(t, cfgPath, strings.Replace(read(t, cfgPath), "imports = [", "imports = [\"/etc/containerd/conf.d/*.toml\", ", 1))
	write(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml"), drop)
	if err := c.Install(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if pol := read(t, polPath); !strings.Contains(pol, `runtime = "/usr/bin/nvidia-container-runtime"`) {
		t.Errorf("installed again beside the toolkit: NVIDIA's runtime not chained:\n%s", pol)
	}
	cfg := effectiveOf(t, root)
	if got := handlerNames(cfg); !slices.Equal(got, []string{"gpurun", "nvidia", "runc"}) || cfg.DefaultRuntime() != RuntimeName {
		t.Errorf("handlers %v, default %s", got, cfg.DefaultRuntime())
	}
	// The toolkit goes (its drop-in removed; its glob stays, as
	// nvidia-ctk-installer's cleanup leaves it).
	if err := os.Remove(filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml")); err != nil {
		t.Fatal(err)
	}
	if err := c.Install(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if pol := read(t, polPath); pol != "# site policy\nmin = \"2g\"\n" {
		t.Errorf("the toolkit gone: the policy is not as it was:\n%s", pol)
	}
	if got := handlerNames(effectiveOf(t, root)); !slices.Equal(got, []string{"gpurun", "runc"}) {
		t.Errorf("the toolkit gone: handlers %v, want gpurun and runc (no copy of nvidia)", got)
	}
}
