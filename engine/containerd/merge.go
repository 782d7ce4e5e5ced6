package containerd

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/internal/cfgtree"
)

// UnsupportedVersionError is a main config of a version gpurun does not
// read: version 1 (no version key), which containerd 1.x reads with other
// plugin names and containerd 2.x migrates.
type UnsupportedVersionError struct {
	File    string
	Version int
}

// Error says what to do.
func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("%s: no version key: a version %d config, which gpurun does not read; run containerd config migrate", e.File, e.Version)
}

// merge merges the files read (the main one first) by the generation's
// rules.
func merge(path string, files []file, g Generation) (*Config, error) {
	main := files[0]
	version := main.version
	if version == 0 {
		if !main.doc.Empty() {
			return nil, &UnsupportedVersionError{File: path, Version: 1}
		}
		version = 2 // no settings: containerd's defaults, in the version both generations read
	}
	if version == 1 {
		return nil, &UnsupportedVersionError{File: path, Version: 1}
	}
	if g == InferGeneration {
		g = Containerd1
		if version >= 3 {
			g = Containerd2
		}
	}
	c := &Config{Path: path, Exists: true, Version: version, Generation: g, tree: map[string]any{}}
	for _, f := range files {
		if err := check(f); err != nil {
			return nil, err
		}
		c.Files = append(c.Files, f.path)
		c.files = append(c.files, f)
	}
	switch g {
	case Containerd1:
		c.layout = 2
		for _, f := range files {
			mergeV1(c.tree, cfgtree.Copy(f.doc.Tree).(map[string]any))
		}
	default:
		c.layout = 4
		for _, f := range files {
			t := cfgtree.Copy(f.doc.Tree).(map[string]any)
			migrate(t, f.version)
			mergeV2(c.tree, t)
		}
	}
	c.tree["version"] = int64(c.layout)
	return c, nil
}

// sectionKeys are the top-level keys whose values are maps that containerd
// merges entry by entry, each entry replaced whole.
func sectionKeys(k string) bool {
	switch k {
	case "proxy_plugins", "stream_processors", "timeouts":
		return true
	}
	return false
}

// mergeV1 merges src into dst as containerd 1.x does (mergo's override and
// append-slice rules over its Config struct, then whole sections): a
// plugin's section replaces the one before, as do the entries of
// proxy_plugins, stream_processors and timeouts; arrays are appended to;
// a setting overrides only when it is set (not "", 0 or false), in the
// server tables ([grpc], [debug], ...) too.
func mergeV1(dst, src map[string]any) {
	for k, v := range src {
		switch {
		case k == "plugins" || sectionKeys(k):
			mergeEntries(dst, k, v)
		default:
			overrideSet(dst, k, v, true)
		}
	}
}

// mergeV2 merges src into dst as containerd 2.x does: plugins' sections
// are merged key by key (tables recursively; any other value, arrays and
// zero values included, replaces the one before); entries of proxy_plugins,
// stream_processors and timeouts replace the ones before; other top-level
// settings override when set, arrays are appended to without repeating an
// element.
func mergeV2(dst, src map[string]any) {
	for k, v := range src {
		switch {
		case k == "plugins":
			sm, ok := v.(map[string]any)
			dm, dok := dst[k].(map[string]any)
			if !ok || !dok {
				dst[k] = v
				continue
			}
			deepMerge(dm, sm)
		case sectionKeys(k):
			mergeEntries(dst, k, v)
		default:
			overrideSet(dst, k, v, false)
		}
	}
}

// mergeEntries replaces dst[k]'s entries with src's.
func mergeEntries(dst map[string]any, k string, v any) {
	sm, ok := v.(map[string]any)
	dm, dok := dst[k].(map[string]any)
	if !ok || !dok {
		dst[k] = v
		return
	}
	maps.Copy(dm, sm)
}

// overrideSet merges a struct-like setting: a value that is set replaces
// the one before, tables are merged field by field, arrays appended to
// (with repeats, as containerd 1.x does, or without).
func overrideSet(dst map[string]any, k string, v any, repeats bool) {
	switch sv := v.(type) {
	case map[string]any:
		dm, ok := dst[k].(map[string]any)
		if !ok {
			dst[k] = sv
			return
		}
		for kk, vv := range sv {
			overrideSet(dm, kk, vv, repeats)
		}
	case []any:
		da, _ := dst[k].([]any)
		for _, e := range sv {
			if repeats || !slices.ContainsFunc(da, func(x any) bool { return reflect.DeepEqual(x, e) }) {
				da = append(da, e)
			}
		}
		if da != nil || dst[k] == nil {
			dst[k] = da
		}
	default:
		if !isZero(v) {
			dst[k] = v
		} else if _, ok := dst[k]; !ok {
			dst[k] = v
		}
	}
}

// isZero reports whether mergo takes a value as unset.
func isZero(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case int64:
		return v == 0
	case float64:
		return v == 0
	case bool:
		return !v
	}
	return v == nil
}

// deepMerge merges src's keys into dst: tables into tables, every other
// value replacing the one before.
func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		sm, ok := v.(map[string]any)
		dm, dok := dst[k].(map[string]any)
		if ok && dok {
			deepMerge(dm, sm)
			continue
		}
		dst[k] = v
	}
}

// migrate moves a file's settings to where version 4 has them, as
// containerd 2.3 and later do with each file before merging it.
func migrate(t map[string]any, version int) {
	if version <= 1 {
		migrateV1(t)
	}
	if version <= 2 {
		migrateCRI(t)
	}
	if version <= 3 {
		migrateServer(t)
	}
	t["version"] = int64(4)
}

// migrateV1 names plugins by their ids: a version 1 file (a drop-in without
// a version key) names them by short name.
func migrateV1(t map[string]any) {
	rename := func(name string) string {
		if strings.Contains(name, ".") {
			return name
		}
		return v1Plugin(name)
	}
	if plugins, ok := t["plugins"].(map[string]any); ok {
		renamed := make(map[string]any, len(plugins))
		for k, v := range plugins {
			renamed[rename(k)] = v
		}
		t["plugins"] = renamed
	}
	for _, key := range []string{"disabled_plugins", "required_plugins"} {
		if list, ok := t[key].([]any); ok {
			for i, v := range list {
				if s, ok := v.(string); ok {
					list[i] = rename(s)
				}
			}
		}
	}
}

// v1Plugin returns the id of a plugin a version 1 config names by its
// short name, as containerd 2.x's migration does.
func v1Plugin(name string) string {
	switch name {
	case "cri":
		return CRIPluginV2
	case "nri":
		return NRIPlugin
	case "task":
		return "io.containerd.runtime.v2.task"
	case "opt":
		return "io.containerd.internal.v1.opt"
	case "cgroups":
		return "io.containerd.monitor.v1.cgroups"
	case "scheduler":
		return "io.containerd.gc.v1.scheduler"
	case "bolt":
		return "io.containerd.metadata.v1.bolt"
	case "overlayfs", "native", "btrfs", "zfs", "devmapper", "aufs":
		return "io.containerd.snapshotter.v1." + name
	}
	return "io.containerd.grpc.v1." + name
}

// criKey says where migrateCRI puts a key of a version 2 CRI section that
// is not a table it treats on its own: "images", "server" (it stays in
// the version 2 plugin, holding the streaming server's settings), "drop"
// or "runtime".
func criKey(k string) string {
	switch k {
	case "registry", "image_decryption", "max_concurrent_downloads", "image_pull_progress_timeout", "image_pull_with_sync_fs", "stats_collect_period":
		return "images"
	case "disable_tcp_service", "stream_server_address", "stream_server_port", "stream_idle_timeout", "enable_tls_streaming", "x509_key_pair_streaming":
		return "server"
	case "enable_cdi":
		return "drop"
	}
	return "runtime"
}

// migrateCRI moves the settings of a version 2 CRI plugin section to the
// runtime and images plugins of version 3: runtimes, CNI (bin_dir becomes
// bin_dirs) and the rest to the runtime plugin, the sandbox image and
// registry settings to the images plugin; a setting already there wins.
func migrateCRI(t map[string]any) {
	plugins, _ := t["plugins"].(map[string]any)
	src, ok := plugins[CRIPluginV2].(map[string]any)
	if !ok {
		return
	}
	rt, img := tableOf(plugins, CRIRuntimePlugin), tableOf(plugins, CRIImagesPlugin)
	server := map[string]any{}
	for k, v := range src {
		switch {
		case k == "cni":
			rt["cni"] = migrateCNI(v, tableOf(rt, "cni"))
		case k == "containerd":
			rt["containerd"] = migrateContainerd(v, tableOf(rt, "containerd"))
		case k == "sandbox_image":
			pinned := tableOf(img, "pinned_images")
			pinned["sandbox"] = v
			img["pinned_images"] = pinned
		case criKey(k) == "images":
			img[k] = v
		case criKey(k) == "server":
			server[k] = v
		case criKey(k) == "runtime":
			setDefault(rt, k, v)
		}
	}
	plugins[CRIRuntimePlugin] = rt
	if len(img) > 0 {
		plugins[CRIImagesPlugin] = img
	}
	plugins[CRIPluginV2] = server
}

// tableOf is the table m[k], a new empty one when there is none.
func tableOf(m map[string]any, k string) map[string]any {
	if t, _ := m[k].(map[string]any); t != nil {
		return t
	}
	return map[string]any{}
}

// setDefault sets m[k] to v unless m has k: a setting already there wins.
func setDefault(m map[string]any, k string, v any) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// migrateCNI moves version 2's cni table (v) into version 3's (dst):
// bin_dir becomes bin_dirs.
func migrateCNI(v any, dst map[string]any) map[string]any {
	cni, _ := v.(map[string]any)
	for ck, cv := range cni {
		if ck == "bin_dir" {
			if dirs, _ := dst["bin_dirs"].([]any); len(dirs) == 0 {
				dst["bin_dirs"] = []any{cv}
			}
			continue
		}
		setDefault(dst, ck, cv)
	}
	return dst
}

// migrateContainerd moves version 2's containerd table (v) into version
// 3's runtime plugin's (dst): the snapshotter settings stay behind (the
// images plugin's in 3), and a runtime's sandbox_mode becomes sandboxer.
func migrateContainerd(v any, dst map[string]any) map[string]any {
	ctr, _ := v.(map[string]any)
	for ck, cv := range ctr {
		switch ck {
		case "snapshotter", "disable_snapshot_annotations", "discard_unpacked_layers":
		default:
			setDefault(dst, ck, cv)
		}
	}
	if rts, ok := dst["runtimes"].(map[string]any); ok {
		for _, r := range rts {
			if m, ok := r.(map[string]any); ok {
				if mode, ok := m["sandbox_mode"]; ok {
					if _, has := m["sandboxer"]; !has {
						m["sandboxer"] = mode
						delete(m, "sandbox_mode")
					}
				}
			}
		}
	}
	return dst
}

// migrateServer moves the server settings of a version 3 (or 2) file to
// the server plugins of version 4, unless the file configures the plugin
// itself: [grpc] to the gRPC plugin (and, without an address of its own,
// the ttrpc socket next to it), [ttrpc], [debug] and [metrics] likewise.
func migrateServer(t map[string]any) {
	plugins, _ := t["plugins"].(map[string]any)
	if plugins == nil {
		plugins = map[string]any{}
	}
	grpc, _ := t["grpc"].(map[string]any)
	addr, _ := grpc["address"].(string)
	if len(grpc) > 0 {
		if _, ok := plugins[GRPCServerPlugin]; !ok {
			m := map[string]any{}
			for _, k := range []string{"address", "uid", "gid", "max_recv_message_size", "max_send_message_size"} {
				if v, ok := grpc[k]; ok && !isZero(v) {
					m[k] = v
				}
			}
			if len(m) > 0 {
				plugins[GRPCServerPlugin] = m
			}
		}
		if tcp, _ := grpc["tcp_address"].(string); tcp != "" {
			if _, ok := plugins[GRPCTCPServerPlugin]; !ok {
				plugins[GRPCTCPServerPlugin] = map[string]any{"address": tcp}
			}
		}
		delete(t, "grpc")
	}
	if _, ok := plugins[TTRPCServerPlugin]; !ok {
		ttrpc, _ := t["ttrpc"].(map[string]any)
		taddr, _ := ttrpc["address"].(string)
		if taddr == "" && addr != "" {
			taddr = addr + ".ttrpc"
		}
		if taddr != "" {
			plugins[TTRPCServerPlugin] = map[string]any{"address": taddr}
		}
	}
	delete(t, "ttrpc")
	if debug, ok := t["debug"].(map[string]any); ok {
		if a, _ := debug["address"].(string); a != "" {
			if _, ok := plugins[DebugServerPlugin]; !ok {
				plugins[DebugServerPlugin] = map[string]any{"address": a}
			}
			delete(debug, "address")
		}
	}
	if metrics, ok := t["metrics"].(map[string]any); ok {
		if a, _ := metrics["address"].(string); a != "" {
			if _, ok := plugins[MetricsServerPlugin]; !ok {
				plugins[MetricsServerPlugin] = map[string]any{"address": a}
			}
		}
		delete(t, "metrics")
	}
	if len(plugins) > 0 {
		t["plugins"] = plugins
	}
}
