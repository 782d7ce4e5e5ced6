package containerd

import (
	"github.com/gpurun/gpurun/internal/cfgtree"
)

// check checks, in one file, the kinds of the settings gpurun reads, so
// that a mistake is reported with its file, line and key.
func check(f file) error {
	version := f.version
	if version == 0 {
		version = 2
	}
	t := f.doc.Tree
	var err error
	want := func(kind string, path ...string) {
		if err != nil {
			return
		}
		v, ok := cfgtree.Get(t, path...)
		if !ok || kindMatches(v, kind) {
			return
		}
		err = f.typeError(path, v, kind)
	}
	want("a string", "root")
	want("a string", "state")
	want("an array of strings", "disabled_plugins")
	if version <= 3 {
		want("a table", "grpc")
		want("a string", "grpc", "address")
	}
	want("a table", "plugins")
	want("a table", "plugins", GRPCServerPlugin)
	want("a string", "plugins", GRPCServerPlugin, "address")
	rtp := RuntimePluginID(version)
	for _, id := range CRIPluginIDs(version) {
		want("a table", "plugins", id)
	}
	want("a table", "plugins", rtp, "containerd")
	want("a string", "plugins", rtp, "containerd", "default_runtime_name")
	want("a table", "plugins", rtp, "containerd", "runtimes")
	want("a table", "plugins", rtp, "cni")
	want("a string", "plugins", rtp, "cni", "bin_dir")
	want("an array of strings", "plugins", rtp, "cni", "bin_dirs")
	want("a string", "plugins", rtp, "cni", "conf_dir")
	if version <= 2 {
		want("a string", "plugins", CRIPluginV2, "sandbox_image")
	} else {
		want("a table", "plugins", CRIImagesPlugin, "pinned_images")
		want("a string", "plugins", CRIImagesPlugin, "pinned_images", "sandbox")
	}
	want("a table", "plugins", NRIPlugin)
	want("a boolean", "plugins", NRIPlugin, "disable")
	want("a string", "plugins", NRIPlugin, "socket_path")
	if err != nil {
		return err
	}
	rts := cfgtree.Table(t, "plugins", rtp, "containerd", "runtimes")
	for name := range rts {
		rt := []string{"plugins", rtp, "containerd", "runtimes", name}
		want("a table", rt...)
		want("a string", cfgtree.Join(rt, "runtime_type")...)
		want("an array of strings", cfgtree.Join(rt, "pod_annotations")...)
		want("a table", cfgtree.Join(rt, "options")...)
		want("a string", cfgtree.Join(rt, "options", "BinaryName")...)
	}
	return err
}

// kindMatches reports whether a decoded value is of the kind named as
// typeError names it.
func kindMatches(v any, kind string) bool {
	switch kind {
	case "an array of strings":
		list, ok := v.([]any)
		if !ok {
			return false
		}
		for _, e := range list {
			if _, ok := e.(string); !ok {
				return false
			}
		}
		return true
	}
	return kindOf(v) == kind
}
