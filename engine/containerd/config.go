package containerd

import (
	"maps"
	"slices"
	"sort"

	"github.com/gpurun/gpurun/internal/cfgtree"
)

// containerd's defaults where a config sets nothing.
const (
	DefaultRoot           = "/var/lib/containerd"
	DefaultState          = "/run/containerd"
	DefaultAddress        = "/run/containerd/containerd.sock"
	DefaultRuntime        = "runc"
	DefaultCNIBinDir      = "/opt/cni/bin"
	DefaultCNIConfDir     = "/etc/cni/net.d"
	DefaultNRISocket      = "/var/run/nri/nri.sock"
	DefaultNRIPluginPath  = "/opt/nri/plugins"
	DefaultNRIPluginConfs = "/etc/nri/conf.d"
)

// Config is containerd's configuration: the merged view of its files.
type Config struct {
	// Path is the main config (a node path).
	Path string
	// Exists says the main config exists; without it containerd runs on
	// its defaults.
	Exists bool
	// Version is the main config's version: 2, 3 or 4 (2 for a file with
	// no settings), 0 when it does not exist.
	Version int
	// Generation is whose rules the files were merged by.
	Generation Generation
	// Release is the release of the containerd asked (LoadOptions.Containerd),
	// or LoadOptions.Release.
	Release string
	// Files are the files read, the main one first, in containerd's order.
	Files []string
	// Dumped says the view is containerd's own (containerd config dump),
	// not gpurun's reading of the files.
	Dumped bool
	// DumpErr says why a dump that LoadOptions.Containerd asked for is not
	// used.
	DumpErr error

	files  []file
	layout int // the version whose layout tree has: 2, 3 or 4
	tree   map[string]any
}

// Layout is the config version whose layout the merged view has: 2 for
// containerd 1.x, 4 (3 for a dump of containerd 2.0 to 2.2) for 2.x.
func (c *Config) Layout() int { return c.layout }

// Get returns the merged value at path (plugin ids as in Layout's
// version).
func (c *Config) Get(path ...string) (any, bool) {
	return cfgtree.Get(c.tree, path...)
}

// Tree returns a copy of the merged view.
func (c *Config) Tree() map[string]any {
	return cfgtree.Copy(c.tree).(map[string]any)
}

// RuntimePluginID is the plugin holding the runtime handlers in the view.
func (c *Config) RuntimePluginID() string { return RuntimePluginID(c.layout) }

// ImagesPluginID is the plugin holding the sandbox image in the view.
func (c *Config) ImagesPluginID() string { return ImagesPluginID(c.layout) }

func (c *Config) str(def string, path ...string) string {
	if s, ok := cfgtree.Get(c.tree, path...); ok {
		if s, ok := s.(string); ok && s != "" {
			return s
		}
	}
	return def
}

// Root is containerd's persistent directory.
func (c *Config) Root() string { return c.str(DefaultRoot, "root") }

// State is containerd's transient directory (sockets, shims' bundles).
func (c *Config) State() string { return c.str(DefaultState, "state") }

// Address is the gRPC socket containerd listens on.
func (c *Config) Address() string {
	if c.layout >= 4 {
		return c.str(DefaultAddress, "plugins", GRPCServerPlugin, "address")
	}
	return c.str(DefaultAddress, "grpc", "address")
}

// handlers is the CRI runtime plugin's containerd table.
func (c *Config) handlers() map[string]any {
	return cfgtree.Table(c.tree, "plugins", c.RuntimePluginID(), "containerd")
}

// DefaultRuntime is the CRI plugin's default runtime handler
// (default_runtime_name, else "runc").
func (c *Config) DefaultRuntime() string {
	if s, ok := c.handlers()["default_runtime_name"].(string); ok && s != "" {
		return s
	}
	return DefaultRuntime
}

// Runtime is a CRI runtime handler.
type Runtime struct {
	// Name is the handler's name (a RuntimeClass's handler).
	Name string
	// Type is its runtime_type: RuncV2 for runc-compatible runtimes.
	Type string
	// BinaryName is options.BinaryName: the runtime the runc shim runs
	// ("" for runc).
	BinaryName string
	// PodAnnotations are the pod annotations passed to the runtime.
	PodAnnotations []string
	// LoadOptions are its options, BinaryName included.
	LoadOptions map[string]any
	// Settings are all its settings, options included.
	Settings map[string]any
}

// Runtimes lists the runtime handlers the config defines, by name (a
// dump lists every one containerd has). containerd also has a built-in
// runc: containerd 2.x always, containerd 1.x only while the config
// defines no runtime.
func (c *Config) Runtimes() []Runtime {
	rts, _ := c.handlers()["runtimes"].(map[string]any)
	names := make([]string, 0, len(rts))
	for n := range rts {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Runtime, 0, len(names))
	for _, n := range names {
		m, _ := rts[n].(map[string]any)
		r := Runtime{Name: n, Settings: cfgtree.Copy(m).(map[string]any)}
		r.Type, _ = m["runtime_type"].(string)
		if o, ok := m["options"].(map[string]any); ok {
			r.LoadOptions = cfgtree.Copy(o).(map[string]any)
			r.BinaryName, _ = o["BinaryName"].(string)
		}
		if anns, ok := m["pod_annotations"].([]any); ok {
			for _, a := range anns {
				if s, ok := a.(string); ok {
					r.PodAnnotations = append(r.PodAnnotations, s)
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// Runtime returns the runtime handler name, if the config defines it.
func (c *Config) Runtime(name string) (Runtime, bool) {
	for _, r := range c.Runtimes() {
		if r.Name == name {
			return r, true
		}
	}
	return Runtime{}, false
}

// CRIDisabled reports whether disabled_plugins disables the CRI plugin
// (as the containerd of Docker's packages has it), and by which name.
func (c *Config) CRIDisabled() (string, bool) {
	list, _ := c.tree["disabled_plugins"].([]any)
	for _, v := range list {
		s, _ := v.(string)
		if s == "cri" || slices.Contains([]string{CRIPluginV2, CRIRuntimePlugin, CRIImagesPlugin}, s) {
			return s, true
		}
	}
	return "", false
}

// CNI is where the CRI plugin finds CNI plugins and network configs.
type CNI struct {
	BinDirs []string
	ConfDir string
}

// CNI returns the CRI plugin's CNI directories.
func (c *Config) CNI() CNI {
	cni := cfgtree.Table(c.tree, "plugins", c.RuntimePluginID(), "cni")
	out := CNI{ConfDir: DefaultCNIConfDir}
	if s, ok := cni["conf_dir"].(string); ok && s != "" {
		out.ConfDir = s
	}
	if dirs, ok := cni["bin_dirs"].([]any); ok && len(dirs) > 0 {
		for _, d := range dirs {
			if s, ok := d.(string); ok {
				out.BinDirs = append(out.BinDirs, s)
			}
		}
	} else if s, ok := cni["bin_dir"].(string); ok && s != "" {
		out.BinDirs = []string{s}
	}
	if len(out.BinDirs) == 0 {
		out.BinDirs = []string{DefaultCNIBinDir}
	}
	return out
}

// NRI is containerd's NRI plugin's configuration.
type NRI struct {
	// Enabled says containerd runs NRI: on by default in containerd 2.x;
	// containerd 1.7 has it off unless its section sets disable = false;
	// containerd 1.6 has no NRI (and a dump of it no section).
	Enabled bool
	// Socket is where NRI plugins connect.
	Socket string
	// PluginPath and PluginConfigPath are where pre-installed plugins and
	// their configs are.
	PluginPath, PluginConfigPath string
}

// NRI returns the NRI settings.
func (c *Config) NRI() NRI {
	sec := cfgtree.Table(c.tree, "plugins", NRIPlugin)
	ok := sec != nil
	n := NRI{Socket: DefaultNRISocket, PluginPath: DefaultNRIPluginPath, PluginConfigPath: DefaultNRIPluginConfs}
	disable, set := sec["disable"].(bool)
	switch {
	case set:
		n.Enabled = !disable
	case c.Dumped:
		n.Enabled = ok // a dump shows every plugin: no section, no NRI
	default:
		n.Enabled = c.Generation == Containerd2
	}
	if s, ok := sec["socket_path"].(string); ok && s != "" {
		n.Socket = s
	}
	if s, ok := sec["plugin_path"].(string); ok && s != "" {
		n.PluginPath = s
	}
	if s, ok := sec["plugin_config_path"].(string); ok && s != "" {
		n.PluginConfigPath = s
	}
	return n
}

// SandboxImage is the pod sandbox (pause) image the config names, or ""
// where it names none: containerd's built-in default then, which depends
// on its release.
func (c *Config) SandboxImage() string {
	if c.layout <= 2 {
		return c.str("", "plugins", CRIPluginV2, "sandbox_image")
	}
	return c.str("", "plugins", CRIImagesPlugin, "pinned_images", "sandbox")
}

// Defines returns the file (the last one, in merge order) and line that
// write the key or table at path (as the view lays it out, Layout's
// version; in a file of an older version, where that version has it);
// "" when no file does.
func (c *Config) Defines(path ...string) (string, int) {
	for i := len(c.files) - 1; i >= 0; i-- {
		f := c.files[i]
		if off := f.doc.Defines(inVersion(path, f.version)); off >= 0 {
			return f.path, f.doc.Line(off)
		}
	}
	return "", 0
}

// inVersion returns where a file of the version has the setting at path
// of a version 3 or 4 layout: the CRI plugins' settings in the CRI plugin
// of version 2, the gRPC server plugin's in [grpc] before version 4.
func inVersion(path []string, version int) []string {
	if version == 0 {
		version = 2
	}
	if len(path) < 2 || path[0] != "plugins" {
		return path
	}
	switch {
	case version <= 2 && path[1] == CRIImagesPlugin && len(path) >= 4 && path[2] == "pinned_images" && path[3] == "sandbox":
		return []string{"plugins", CRIPluginV2, "sandbox_image"}
	case version <= 2 && (path[1] == CRIRuntimePlugin || path[1] == CRIImagesPlugin):
		return append([]string{"plugins", CRIPluginV2}, path[2:]...)
	case version <= 3 && path[1] == GRPCServerPlugin:
		return append([]string{"grpc"}, path[2:]...)
	}
	return path
}

// lastDefining returns the last file, in merge order, whose own tree has
// the table at path (as that file's version names it), and whether there
// is one. Under containerd 1.x's rules that file's section of a plugin is
// the whole section containerd uses.
func (c *Config) lastDefining(path ...string) (file, bool) {
	for i := len(c.files) - 1; i >= 0; i-- {
		f := c.files[i]
		if v, ok := cfgtree.Get(f.doc.Tree, inVersion(path, f.version)...); ok {
			if _, isTable := v.(map[string]any); isTable {
				return f, true
			}
		}
	}
	return file{}, false
}

// DefinedIn lists the files (in merge order) that write the key or table
// at path (as the view lays it out), whether or not containerd ends up
// reading it from them.
func (c *Config) DefinedIn(path ...string) []string {
	var out []string
	for _, f := range c.files {
		if f.doc.Defines(inVersion(path, f.version)) >= 0 {
			out = append(out, f.path)
		}
	}
	return out
}

// HiddenRuntime is a runtime handler a file defines that containerd does
// not read: under containerd 1.x's rules a file read later replaces the
// whole CRI section (NVIDIA's toolkit's drop-in, or gpurun's, carries a
// copy of the section it saw when it was written).
type HiddenRuntime struct {
	// Name is the handler's name, File the file that defines it.
	Name, File string
	// By is the file whose CRI section containerd reads instead.
	By string
}

// HiddenRuntimes lists the runtime handlers the files define that the
// merged view lacks, by file and name.
func (c *Config) HiddenRuntimes() []HiddenRuntime {
	merged := c.handlers()["runtimes"]
	have, _ := merged.(map[string]any)
	by, _ := c.lastDefining("plugins", c.RuntimePluginID())
	var out []HiddenRuntime
	for _, f := range c.files {
		v, _ := cfgtree.Get(f.doc.Tree, inVersion([]string{"plugins", c.RuntimePluginID(), "containerd", "runtimes"}, f.version)...)
		rts, _ := v.(map[string]any)
		for _, name := range slices.Sorted(maps.Keys(rts)) {
			if _, ok := have[name]; !ok {
				out = append(out, HiddenRuntime{Name: name, File: f.path, By: by.path})
			}
		}
	}
	return out
}
