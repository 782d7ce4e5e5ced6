package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/internal/textpos"
)

// hookEntry is a hooks.d file (version 1.0.0 of the format Podman and
// CRI-O read).
type hookEntry struct {
	Version string `json:"version"`
	Hook    struct {
		Path    string   `json:"path"`
		Args    []string `json:"args"`
		Timeout *int     `json:"timeout"`
	} `json:"hook"`
	When struct {
		Always        *bool             `json:"always"`
		Annotations   map[string]string `json:"annotations"`
		Commands      []string          `json:"commands"`
		HasBindMounts *bool             `json:"hasBindMounts"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// hookStages are the stages a hooks.d entry may name.
var hookStages = []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}

// hooksCheck looks for gpurun's entry in the hooks.d directories Podman and
// CRI-O read, and checks that it is well formed and its binary is there.
func hooksCheck(sys *System) Check {
	c := Check{Name: "hooks", Status: OK}
	found := []string{}
	var problems []string
	for _, dir := range HooksDirs {
		p := path.Join(dir, HookFile)
		data, err := sys.readFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		found = append(found, p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("read %s: %v", p, err))
			continue
		}
		var h hookEntry
		if err := json.Unmarshal(data, &h); err != nil {
			problems = append(problems, textpos.JSONError(p, data, err).Error())
			continue
		}
		problems = append(problems, checkHook(sys, p, h)...)
	}
	c.Data = map[string]any{"files": found}
	switch {
	case len(found) == 0:
		c.Detail = fmt.Sprintf("no gpurun OCI hook for Podman or CRI-O (no %s in %s)", HookFile, strings.Join(HooksDirs, ", "))
	case len(problems) > 0:
		c.Status = Problem
		c.Detail = strings.Join(problems, "; ") + ": Podman and CRI-O refuse a malformed hook or fail the containers it matches"
		c.Fix = "write it again: gpurun install podman|crio (or correct the file)"
	default:
		c.Detail = "gpurun OCI hook: " + strings.Join(found, ", ")
		if len(found) > 1 {
			c.Detail += fmt.Sprintf(" (the one in %s overrides the other)", HooksDirs[len(HooksDirs)-1])
		}
	}
	return c
}

func checkHook(sys *System, file string, h hookEntry) []string {
	var out []string
	if h.Version != "1.0.0" {
		out = append(out, fmt.Sprintf("%s: version %q, want \"1.0.0\"", file, h.Version))
	}
	switch {
	case h.Hook.Path == "":
		out = append(out, file+": hook.path is empty")
	case !path.IsAbs(h.Hook.Path):
		out = append(out, fmt.Sprintf("%s: hook.path %q is not absolute", file, h.Hook.Path))
	default:
		if _, err := sys.resolveBinary(h.Hook.Path); err != nil {
			out = append(out, fmt.Sprintf("%s: hook.path: %v", file, err))
		}
	}
	if len(h.Stages) == 0 {
		out = append(out, file+": no stages")
	}
	for _, s := range h.Stages {
		if !slices.Contains(hookStages, s) {
			out = append(out, fmt.Sprintf("%s: unknown stage %q", file, s))
		}
	}
	w := h.When
	if (w.Always == nil || !*w.Always) && len(w.Annotations) == 0 && len(w.Commands) == 0 && (w.HasBindMounts == nil || !*w.HasBindMounts) {
		out = append(out, file+": \"when\" matches nothing (set always, annotations, commands or hasBindMounts)")
	}
	return out
}
