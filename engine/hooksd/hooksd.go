// Package hooksd reads, checks and writes OCI hook definitions in the
// hooks.d directories Podman and CRI-O load (oci-hooks(5), schema 1.0.0):
// gpurun's own entry, and every entry doctor looks at.
package hooksd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/internal/textpos"
)

// HookFileName is the name of gpurun's hook definition in a hooks.d
// directory (oci-hooks(5)).
const HookFileName = "gpurun.json"

// The hooks.d directories Podman and CRI-O read (oci-hooks(5)).
const (
	// HooksDirShare is the packaged hooks.d: Podman (as root, without
	// --hooks-dir) and CRI-O (its default hooks_dir) both read it.
	HooksDirShare = "/usr/share/containers/oci/hooks.d"
	// HooksDirEtc is the administrator's hooks.d: Podman (as root, without
	// --hooks-dir) reads it after HooksDirShare, a file there masking one of
	// the same name in HooksDirShare; CRI-O reads it only where its
	// hooks_dir lists it (older releases did by default).
	HooksDirEtc = "/etc/containers/oci/hooks.d"
)

// HookStage is the one OCI hook stage gpurun's hooks.d entry runs in.
// createRuntime runs after the runtime has set up the container's mounts,
// /dev/shm included, and before pivot_root and the container's process: the
// hook sees the container's own tmpfs at <rootfs>/dev/shm in the container's
// mount namespace and the engine's host tmpfs on the host, and no
// application code has run yet. prestart runs at the same point but is
// deprecated in the runtime spec; createContainer runs inside the
// container's namespaces, where host paths are not guaranteed.
const HookStage = "createRuntime"

// HookOptions describe gpurun's hooks.d entry.
type HookOptions struct {
	// Path is the hook's program, absolute, on the node, as the runtime
	// execs it: gpurun-runtime (its hook mode) or gpurun.
	Path string
	// PolicyPath, when set, is passed to the hook as --config: runtimes run
	// a hook with the entry's env only, so the engine's $GPURUN_CONFIG
	// never reaches it.
	PolicyPath string
}

// hookFile is the 1.0.0 hooks.d schema, as far as gpurun writes it.
type hookFile struct {
	Version string   `json:"version"`
	Hook    hookSpec `json:"hook"`
	When    hookWhen `json:"when"`
	Stages  []string `json:"stages"`
}

type hookSpec struct {
	Path    string   `json:"path"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Timeout *int     `json:"timeout,omitempty"`
}

type hookWhen struct {
	Always        *bool             `json:"always,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
	Commands      []string          `json:"commands,omitempty"`
	HasBindMounts *bool             `json:"hasBindMounts,omitempty"`
}

// HookJSON returns gpurun's hooks.d entry (oci-hooks(5), schema 1.0.0):
// `gpurun-runtime hook --stage createRuntime [--config POLICY]` (or
// `gpurun hook`, which takes the same arguments) in the createRuntime
// stage of every container ("when": {"always": true}). The hook itself
// decides which containers to size: `when` can match annotations and the
// command, not the environment, and most GPU containers show their GPU only
// there (NVIDIA_VISIBLE_DEVICES, which CUDA images set).
func HookJSON(o HookOptions) ([]byte, error) {
	if !filepath.IsAbs(o.Path) || filepath.Clean(o.Path) != o.Path {
		return nil, fmt.Errorf("hook path %q: want the clean absolute path of gpurun-runtime or gpurun on the node", o.Path)
	}
	if !hookProgram(o.Path) {
		return nil, fmt.Errorf("hook path %q: want gpurun-runtime or gpurun (a program of another name would not be known as gpurun's hook)", o.Path)
	}
	if o.PolicyPath != "" && !filepath.IsAbs(o.PolicyPath) {
		return nil, fmt.Errorf("policy path %q: want an absolute path on the node", o.PolicyPath)
	}
	always := true
	h := hookFile{
		Version: "1.0.0",
		Hook:    hookSpec{Path: o.Path, Args: []string{filepath.Base(o.Path), "hook", "--stage", HookStage}},
		When:    hookWhen{Always: &always},
		Stages:  []string{HookStage},
	}
	if o.PolicyPath != "" {
		h.Hook.Args = append(h.Hook.Args, "--config", o.PolicyPath)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("hook JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// IsGPURunHook reports whether data is a hooks.d entry that runs gpurun's
// hook: a 1.0.0 entry whose args are gpurun's and whose path is a file
// named gpurun-runtime or gpurun (what earlier installs wrote). It tells
// gpurun's own file from someone else's.
func IsGPURunHook(data []byte) bool {
	var h hookFile
	if err := json.Unmarshal(data, &h); err != nil {
		return false
	}
	return h.Version == "1.0.0" && hookProgram(h.Hook.Path) &&
		len(h.Hook.Args) >= 2 && h.Hook.Args[1] == "hook"
}

// hookProgram says whether path names a program that runs gpurun's hook.
func hookProgram(path string) bool {
	base := filepath.Base(path)
	return base == "gpurun-runtime" || base == "gpurun"
}

// Dirs returns the hooks.d directories Podman (as root, without
// --hooks-dir) reads, in the order it reads them: a file in a later one
// masks one of the same name in an earlier one. CRI-O reads the first by
// default.
func Dirs() []string {
	return []string{HooksDirShare, HooksDirEtc}
}

// knownStage reports whether a 1.0.0 hooks.d entry may name the OCI
// stage s (containers/common pkg/hooks/1.0.0, Hook.Validate).
func knownStage(s string) bool {
	switch s {
	case "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop":
		return true
	}
	return false
}

// Problems returns every problem of the hooks.d entry data, each a message
// naming the file name, or none:
//
//   - what Podman and CRI-O refuse when they load an entry
//     (containers/common pkg/hooks, schema 1.0.0): JSON that does not
//     decode (its line and column), a version other than 1.0.0, an empty
//     hook.path or one that is not there, a when.annotations or
//     when.commands pattern that is not a regular expression, no stages,
//     an unknown stage;
//   - what they would load but never run as written: a hook.path that is
//     not absolute (they stat it from their own working directory), a
//     "when" that matches no container, a key the schema does not have
//     (they ignore it, so it does not do what it says).
//
// binary checks that the hook's absolute path is a program that can run
// (on the node); nil skips that check, for an entry that is not on the
// node yet.
func Problems(name string, data []byte, binary func(path string) error) []string {
	var h hookFile
	if err := json.Unmarshal(data, &h); err != nil {
		return []string{textpos.JSONError(name, data, err).Error()}
	}
	var out []string
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(hookFile)); err != nil {
		out = append(out, textpos.JSONError(name, data, err).Error())
	}
	if h.Version != "1.0.0" {
		out = append(out, fmt.Sprintf("%s: version %q, want \"1.0.0\"", name, h.Version))
	}
	switch {
	case h.Hook.Path == "":
		out = append(out, name+": hook.path is empty")
	case !filepath.IsAbs(h.Hook.Path):
		out = append(out, fmt.Sprintf("%s: hook.path %q is not absolute", name, h.Hook.Path))
	case binary != nil:
		if err := binary(h.Hook.Path); err != nil {
			out = append(out, fmt.Sprintf("%s: hook.path: %v", name, err))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h.When.Annotations)) {
		for _, re := range []string{k, h.When.Annotations[k]} {
			if _, err := regexp.Compile(re); err != nil {
				out = append(out, fmt.Sprintf("%s: when.annotations %q: %v", name, re, err))
			}
		}
	}
	for _, c := range h.When.Commands {
		if _, err := regexp.Compile(c); err != nil {
			out = append(out, fmt.Sprintf("%s: when.commands %q: %v", name, c, err))
		}
	}
	w := h.When
	if (w.Always == nil || !*w.Always) && len(w.Annotations) == 0 && len(w.Commands) == 0 && (w.HasBindMounts == nil || !*w.HasBindMounts) {
		out = append(out, name+": \"when\" matches nothing (set always, annotations, commands or hasBindMounts)")
	}
	if len(h.Stages) == 0 {
		out = append(out, name+": no stages")
	}
	for _, s := range h.Stages {
		if !knownStage(s) {
			out = append(out, fmt.Sprintf("%s: unknown stage %q", name, s))
		}
	}
	return out
}

// ValidateHookJSON returns Problems without the check of the hook's
// binary, as one error; nil when there are none.
func ValidateHookJSON(name string, data []byte) error {
	if p := Problems(name, data, nil); len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}
