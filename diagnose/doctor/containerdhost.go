package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/engineconf/containerd"
)

// ctdRuncV2 is the shim type a runc-compatible runtime (gpurun-runtime)
// needs.
const ctdRuncV2 = "io.containerd.runc.v2"

// ctdConfig is a containerd configuration with its imports merged the way
// containerd merges them.
type ctdConfig struct {
	version int
	tree    map[string]any
	// files are the files read, the main one first.
	files []string
}

// ctdRuntime is one CRI runtime handler.
type ctdRuntime struct {
	Type           string
	BinaryName     string
	PodAnnotations []string
}

// cri returns the CRI plugin's default runtime name ("runc" when unset) and
// runtime handlers: plugins."io.containerd.grpc.v1.cri".containerd in a
// version 2 config (containerd 1.x), plugins."io.containerd.cri.v1.runtime"
// .containerd in versions 3 and 4 (containerd 2.x).
func (c ctdConfig) cri() (string, map[string]ctdRuntime) {
	plugin := "io.containerd.cri.v1.runtime"
	if c.version == 2 {
		plugin = "io.containerd.grpc.v1.cri"
	}
	section, _ := lookup(c.tree, "plugins", plugin, "containerd").(map[string]any)
	def, _ := section["default_runtime_name"].(string)
	if def == "" {
		def = "runc"
	}
	out := map[string]ctdRuntime{}
	rts, _ := section["runtimes"].(map[string]any)
	for name, v := range rts {
		m, _ := v.(map[string]any)
		rt := ctdRuntime{}
		rt.Type, _ = m["runtime_type"].(string)
		rt.BinaryName, _ = lookup(m, "options", "BinaryName").(string)
		if anns, ok := m["pod_annotations"].([]any); ok {
			for _, a := range anns {
				if s, ok := a.(string); ok {
					rt.PodAnnotations = append(rt.PodAnnotations, s)
				}
			}
		}
		out[name] = rt
	}
	return def, out
}

// criDisabled reports whether the config disables the CRI plugin (as
// the containerd that Docker's packages install does) and by which name.
func (c ctdConfig) criDisabled() (string, bool) {
	list, _ := c.tree["disabled_plugins"].([]any)
	for _, v := range list {
		switch s, _ := v.(string); s {
		case "cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime":
			return s, true
		}
	}
	return "", false
}

func lookup(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// loadContainerd reads a containerd config under the System's root and
// the files it imports (globs, relative to the importing file's
// directory), merged as containerd merges them: containerd 1.x (version 2)
// replaces a plugin's whole section with an imported file's, containerd
// 2.x merges key by key.
func loadContainerd(sys *System, nodePath string) (ctdConfig, bool, error) {
	data, err := sys.readFile(nodePath)
	if errors.Is(err, fs.ErrNotExist) {
		return ctdConfig{}, false, nil
	}
	if err != nil {
		return ctdConfig{}, true, fmt.Errorf("read %s: %w", nodePath, err)
	}
	tree, err := decodeTOML(nodePath, data)
	if err != nil {
		return ctdConfig{}, true, err
	}
	if _, ok := tree["version"]; !ok && len(tree) > 0 {
		return ctdConfig{version: 1, tree: tree, files: []string{nodePath}}, true, nil
	}
	version, err := containerd.Version(data)
	if err != nil {
		return ctdConfig{}, true, fmt.Errorf("%s: %w", nodePath, err)
	}
	c := ctdConfig{version: version, tree: tree, files: []string{nodePath}}
	seen := map[string]bool{nodePath: true}
	pending := importsOf(tree, nodePath)
	for len(pending) > 0 {
		pattern := pending[0]
		pending = pending[1:]
		matches, err := filepath.Glob(sys.path(pattern))
		if err != nil {
			return c, true, fmt.Errorf("%s: imports %q: %w", nodePath, pattern, err)
		}
		if len(matches) == 0 && !strings.ContainsAny(pattern, "*?[") {
			return c, true, fmt.Errorf("%s imports %s, which does not exist: containerd does not start", nodePath, pattern)
		}
		sort.Strings(matches)
		for _, m := range matches {
			node := "/" + strings.TrimPrefix(strings.TrimPrefix(m, sys.path("/")), "/")
			if seen[node] {
				continue
			}
			seen[node] = true
			idata, err := sys.readFile(node)
			if err != nil {
				return c, true, fmt.Errorf("read %s: %w", node, err)
			}
			itree, err := decodeTOML(node, idata)
			if err != nil {
				return c, true, err
			}
			c.files = append(c.files, node)
			mergeCtd(c.tree, itree, c.version)
			pending = append(pending, importsOf(itree, node)...)
		}
	}
	return c, true, nil
}

func decodeTOML(name string, data []byte) (map[string]any, error) {
	tree := map[string]any{}
	if err := toml.Unmarshal(data, &tree); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("%s:%d:%d: %s", name, row, col, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return tree, nil
}

func importsOf(tree map[string]any, file string) []string {
	list, _ := tree["imports"].([]any)
	var out []string
	for _, v := range list {
		s, ok := v.(string)
		if !ok || s == "" {
			continue
		}
		if !path.IsAbs(s) {
			s = path.Join(path.Dir(file), s)
		}
		out = append(out, s)
	}
	return out
}

// mergeCtd merges an imported tree into dst.
func mergeCtd(dst, src map[string]any, version int) {
	for k, v := range src {
		if k == "imports" || k == "version" {
			continue
		}
		if k == "plugins" && version == 2 {
			plugins, ok := dst["plugins"].(map[string]any)
			sp, sok := v.(map[string]any)
			if !ok || !sok {
				dst[k] = v
				continue
			}
			for id, sec := range sp {
				plugins[id] = sec // 1.x: the imported section replaces the whole section
			}
			continue
		}
		deepMerge(dst, k, v)
	}
}

func deepMerge(dst map[string]any, k string, v any) {
	sv, sok := v.(map[string]any)
	dv, dok := dst[k].(map[string]any)
	if !sok || !dok {
		dst[k] = v
		return
	}
	for kk, vv := range sv {
		deepMerge(dv, kk, vv)
	}
}

// containerdChecks looks at containerd: its config (with imports) and,
// when it answers, what its CRI plugin loaded.
func containerdChecks(ctx context.Context, sys *System, o HostOptions, pol *policy.Policy) installed {
	cfgPath := o.ContainerdConfig
	if cfgPath == "" {
		cfgPath = DefaultContainerdConfig
	}
	var out installed
	cfg, exists, err := loadContainerd(sys, cfgPath)
	present := exists || o.CRI != nil || sys.exists("/run/containerd/containerd.sock") ||
		slices.ContainsFunc([]string{"/usr/bin/containerd", "/usr/local/bin/containerd"}, sys.fileExists)
	if !present {
		out.checks = append(out.checks, Check{Name: "containerd", Status: OK, Detail: fmt.Sprintf("no containerd here: no %s, no binary, no socket", cfgPath)})
		return out
	}
	cc := Check{Name: "containerd.config", Status: OK}
	switch {
	case err != nil:
		cc.Status = Problem
		cc.Detail = fmt.Sprintf("%v: containerd does not start with a config it cannot read", err)
		cc.Fix = "correct the file, then: systemctl restart containerd"
		out.checks = append(out.checks, cc)
		return out
	case !exists:
		cc.Detail = fmt.Sprintf("no %s: containerd's defaults (runtime runc, pods get a 64MiB /dev/shm)", cfgPath)
		cfg = ctdConfig{version: 2, tree: map[string]any{}}
	case cfg.version == 1:
		cc.Status = Warn
		cc.Detail = fmt.Sprintf("%s has no version key: a version 1 config, which containerd 2.x no longer reads and gpurun install does not edit", cfgPath)
		cc.Fix = "convert it: containerd config migrate > config.toml.new (containerd 2.x), or start from containerd config default"
		out.checks = append(out.checks, cc)
		return out
	default:
		cc.Detail = fmt.Sprintf("%s: version %d", cfgPath, cfg.version)
		if len(cfg.files) > 1 {
			cc.Detail += ", with " + strings.Join(cfg.files[1:], ", ")
		}
		cc.Data = map[string]any{"version": cfg.version, "files": cfg.files}
	}
	out.checks = append(out.checks, cc)

	if p, ok := cfg.criDisabled(); ok {
		out.checks = append(out.checks, Check{Name: "containerd.runtime", Status: OK,
			Detail: fmt.Sprintf("the CRI plugin is disabled (disabled_plugins has %q): this containerd runs no Kubernetes pods", p)})
		return out
	}
	def, rts := cfg.cri()
	paths := map[string]string{}
	for n, rt := range rts {
		paths[n] = rt.BinaryName
	}
	name, _ := findRuntime(paths)
	out.name, out.isDefault = name, name != "" && def == name
	out.nvidia = nvidiaRuntime(paths)

	rc := Check{Name: "containerd.runtime", Status: OK, Data: map[string]any{"registered": name != "", "default": out.isDefault, "default_runtime": def}}
	if name == "" {
		rc.Status = Warn
		rc.Detail = fmt.Sprintf("no gpurun runtime handler (default handler %s): pods get containerd's 64MiB /dev/shm", def)
		rc.Fix = "sudo gpurun install containerd --set-as-default --restart   (or without --set-as-default, and runtimeClassName: gpurun in the pods that need it)"
		out.checks = append(out.checks, rc)
	} else {
		rt := rts[name]
		rc.Data["binary"] = rt.BinaryName
		var problems []string
		if rt.Type != ctdRuncV2 {
			problems = append(problems, fmt.Sprintf("runtime_type is %q: gpurun-runtime is a runc-compatible binary, run by %s with options.BinaryName", rt.Type, ctdRuncV2))
		}
		if rt.BinaryName == "" {
			problems = append(problems, "options.BinaryName is not set: containerd would run plain runc")
		} else if _, err := sys.resolveBinary(rt.BinaryName); err != nil {
			problems = append(problems, fmt.Sprintf("options.BinaryName: %v, so pods with this handler fail to start", err))
		}
		if len(problems) > 0 {
			rc.Status = Problem
			rc.Detail = fmt.Sprintf("runtime handler %s: %s", name, strings.Join(problems, "; "))
			rc.Fix = "sudo gpurun install containerd --restart   (it sets runtime_type and options.BinaryName)"
		} else if out.isDefault {
			rc.Detail = fmt.Sprintf("runtime handler %s (%s) is the default: every pod goes through it", name, rt.BinaryName)
		} else {
			rc.Detail = fmt.Sprintf("runtime handler %s (%s), not the default (%s): pods with runtimeClassName: %s (a RuntimeClass with handler %s) get the policy's /dev/shm", name, rt.BinaryName, def, name, name)
		}
		out.checks = append(out.checks, rc)
		out.checks = append(out.checks, podAnnotationsCheck(name, rt, pol))
	}
	if c, ok := loadedCheck(ctx, o, name, out.isDefault); ok {
		out.checks = append(out.checks, c)
	}
	return out
}

// podAnnotationsCheck says whether the pod annotations the policy reads
// reach gpurun-runtime: containerd passes only those its runtime's
// pod_annotations list.
func podAnnotationsCheck(name string, rt ctdRuntime, pol *policy.Policy) Check {
	c := Check{Name: "containerd.pod_annotations", Status: OK, Data: map[string]any{"pod_annotations": rt.PodAnnotations}}
	var missing []string
	for _, a := range pol.AllowedAnnotations {
		if !slices.ContainsFunc(rt.PodAnnotations, func(p string) bool { ok, _ := path.Match(p, a); return ok }) {
			missing = append(missing, a)
		}
	}
	list := strings.Join(rt.PodAnnotations, ", ")
	if list == "" {
		list = "none"
	}
	if len(missing) > 0 {
		c.Status = Warn
		c.Detail = fmt.Sprintf("runtime handler %s passes pod annotations %s; not %s, which the policy reads: pods cannot ask for a /dev/shm size", name, list, strings.Join(missing, ", "))
		c.Fix = fmt.Sprintf("add %q to pod_annotations of runtime %s (gpurun install containerd sets gpurun.io/* and cdi.k8s.io/*), then restart containerd", missing[0], name)
		return c
	}
	c.Detail = fmt.Sprintf("runtime handler %s passes pod annotations %s", name, list)
	return c
}

// criConfig is the part of the CRI plugin's configuration that
// containerd's verbose Status reports under "config".
type criConfig struct {
	Containerd struct {
		DefaultRuntimeName string                     `json:"defaultRuntimeName"`
		Runtimes           map[string]json.RawMessage `json:"runtimes"`
	} `json:"containerd"`
}

// loadedCheck compares the config with what the running containerd's CRI
// plugin loaded.
func loadedCheck(ctx context.Context, o HostOptions, name string, isDefault bool) (Check, bool) {
	if o.CRI == nil {
		return Check{}, false
	}
	c := Check{Name: "containerd.loaded", Status: OK}
	resp, err := o.CRI.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if status.Code(err) == codes.Unimplemented {
		c.Detail = fmt.Sprintf("containerd at %s serves no CRI (its CRI plugin is disabled): no Kubernetes pods here", o.CRIEndpoint)
		return c, true
	}
	if err != nil {
		c.Status = Warn
		c.Detail = fmt.Sprintf("cannot ask containerd at %s (%v): whether it loaded the config is unknown", o.CRIEndpoint, err)
		return c, true
	}
	raw, ok := resp.GetInfo()["config"]
	var cfg criConfig
	if !ok || json.Unmarshal([]byte(raw), &cfg) != nil || cfg.Containerd.Runtimes == nil {
		c.Detail = fmt.Sprintf("containerd at %s does not report its CRI configuration", o.CRIEndpoint)
		return c, true
	}
	_, loaded := cfg.Containerd.Runtimes[RuntimeName]
	if name != "" {
		_, loaded = cfg.Containerd.Runtimes[name]
	}
	c.Data = map[string]any{"loaded": loaded, "default_runtime": cfg.Containerd.DefaultRuntimeName}
	restart := "restart containerd so it reads its config: systemctl restart containerd  (running containers keep running)"
	switch {
	case name != "" && !loaded:
		c.Status = Problem
		c.Detail = fmt.Sprintf("the config registers runtime handler %s, but containerd at %s has not loaded it (started before the change?)", name, o.CRIEndpoint)
		c.Fix = restart
	case name != "" && isDefault && cfg.Containerd.DefaultRuntimeName != name:
		c.Status = Problem
		c.Detail = fmt.Sprintf("the config makes %s the default handler, but containerd at %s runs with default %s", name, o.CRIEndpoint, cfg.Containerd.DefaultRuntimeName)
		c.Fix = restart
	case name == "" && loaded:
		c.Status = Warn
		c.Detail = fmt.Sprintf("containerd at %s still has runtime handler %s loaded, but the config no longer has it: it goes at the next restart", o.CRIEndpoint, RuntimeName)
		c.Fix = restart
	default:
		c.Detail = fmt.Sprintf("containerd at %s runs with this config (default handler %s)", o.CRIEndpoint, cfg.Containerd.DefaultRuntimeName)
	}
	return c, true
}
