package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/gpurun/gpurun/engine/hooksd"
	"github.com/gpurun/gpurun/node/hook"
)

// hooksCheck looks for gpurun's entry in the hooks.d directories Podman and
// CRI-O read, and reports every problem engine/hooksd finds in it, its
// binary checked on this host: a gpurun-runtime must have the hook mode.
func hooksCheck(sys *System) Check {
	c := Check{Name: "hooks", Status: OK}
	dirs := hooksd.Dirs()
	found := []string{}
	var problems []string
	binary := func(p string) error {
		if _, err := sys.resolveBinary(p); err != nil {
			return err
		}
		if path.Base(p) == "gpurun-runtime" {
			return runtimeHookMode(sys, p)
		}
		return nil
	}
	for _, dir := range dirs {
		p := path.Join(dir, hooksd.HookFileName)
		data, err := sys.readFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		found = append(found, p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("read %s: %v", p, err))
			continue
		}
		problems = append(problems, hooksd.Problems(p, data, binary)...)
	}
	c.Data = map[string]any{"files": found}
	switch {
	case len(found) == 0:
		c.Detail = fmt.Sprintf("no gpurun OCI hook for Podman or CRI-O (no %s in %s)", hooksd.HookFileName, strings.Join(dirs, ", "))
	case len(problems) > 0:
		c.Status = Problem
		c.Detail = strings.Join(problems, "; ") + ": Podman and CRI-O refuse a malformed hook or fail the containers it matches"
		c.Fix = "write it again: gpurun install podman|crio (or correct the file)"
	default:
		c.Detail = "gpurun OCI hook: " + strings.Join(found, ", ")
		if len(found) > 1 {
			c.Detail += fmt.Sprintf(" (the one in %s overrides the other)", dirs[len(dirs)-1])
		}
	}
	return c
}

// runtimeHookMode checks that the gpurun-runtime at node path p has the
// hook mode the entry runs (hook.CheckRuntimeMode), run as the system runs
// programs.
func runtimeHookMode(sys *System, p string) error {
	err := hook.CheckRuntimeMode(sys.path(p), func(name string, args ...string) ([]byte, error) {
		return sys.Output(context.Background(), name, args...)
	})
	if err != nil {
		return fmt.Errorf("%w, and the engine fails every container start on it", err)
	}
	return nil
}
