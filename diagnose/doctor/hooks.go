package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/engine/hooksd"
	"github.com/gpurun/gpurun/node/hook"
)

// hooksCheck looks for gpurun's entry in the hooks.d directories Podman and
// CRI-O read, as their configuration files say (hooks_dir in
// containers.conf, crio.conf and their drop-ins, else the defaults), and
// in the default directories besides; it reports every problem
// engine/hooksd finds in an entry, its binary checked on this host (a
// gpurun-runtime must have the hook mode), and an entry in a directory
// neither engine reads: its hook never runs.
func hooksCheck(sys *System) Check {
	c := Check{Name: "hooks", Status: OK}
	var problems []string
	engines := []struct {
		name, binary string
		read         func(string) (hooksd.Configured, error)
		dirs         hooksd.Configured
		installed    bool
	}{{name: "Podman", binary: "podman", read: hooksd.PodmanDirs}, {name: "CRI-O", binary: "crio", read: hooksd.CRIODirs}}
	dirs := hooksd.Dirs()
	some := false
	for i := range engines {
		e := &engines[i]
		_, err := sys.resolveBinary(e.binary)
		e.installed = err == nil
		some = some || e.installed
	}
	for i := range engines {
		e := &engines[i]
		// Where neither engine's binary is found, both count.
		e.installed = e.installed || !some
		var err error
		if e.dirs, err = e.read(sys.Root); err != nil {
			problems = append(problems, fmt.Sprintf("%s's hooks_dir: %v", e.name, err))
			continue
		}
		for _, d := range e.dirs.Dirs {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	binary := func(p string) error {
		if _, err := sys.resolveBinary(p); err != nil {
			return err
		}
		if path.Base(p) == "gpurun-runtime" {
			return runtimeHookMode(sys, p)
		}
		return nil
	}
	found, read := []string{}, 0
	var described, unread []string
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
		var readers []string
		for _, e := range engines {
			if e.installed && slices.Contains(e.dirs.Dirs, dir) {
				readers = append(readers, e.name)
			}
		}
		if len(readers) == 0 {
			unread = append(unread, p)
			continue
		}
		read++
		described = append(described, fmt.Sprintf("%s (read by %s)", p, strings.Join(readers, ", ")))
	}
	c.Data = map[string]any{"files": found}
	// readBy says where each engine here reads hooks.d, and why.
	readBy := func() string {
		var out []string
		for _, e := range engines {
			switch {
			case !e.installed:
			case e.dirs.From != "":
				out = append(out, fmt.Sprintf("%s reads %s, as hooks_dir in %s says", e.name, strings.Join(e.dirs.Dirs, ", "), e.dirs.From))
			default:
				out = append(out, fmt.Sprintf("%s reads %s", e.name, strings.Join(e.dirs.Dirs, ", ")))
			}
		}
		return strings.Join(out, "; ")
	}
	switch {
	case len(problems) > 0:
		c.Status = Problem
		c.Detail = strings.Join(problems, "; ") + ": Podman and CRI-O refuse a malformed hook or fail the containers it matches"
		c.Fix = "write it again: gpurun install podman|crio (or correct the file)"
	case len(found) == 0:
		c.Detail = fmt.Sprintf("no gpurun OCI hook for Podman or CRI-O (no %s in %s)", hooksd.HookFileName, strings.Join(dirs, ", "))
	case read == 0:
		c.Status = Problem
		c.Detail = fmt.Sprintf("%s: in no directory the engines here read (%s), so its hook never runs and GPU containers keep their /dev/shm", strings.Join(unread, ", "), readBy())
		c.Fix = "gpurun uninstall podman|crio, then gpurun install podman|crio: install writes where hooks_dir says"
	default:
		c.Detail = "gpurun OCI hook: " + strings.Join(described, ", ")
		// Podman reads its directories in order, a later entry of the
		// same name masking an earlier one.
		var podman []string
		for _, d := range engines[0].dirs.Dirs {
			if p := path.Join(d, hooksd.HookFileName); engines[0].installed && slices.Contains(found, p) {
				podman = append(podman, p)
			}
		}
		if len(podman) > 1 {
			c.Detail += fmt.Sprintf(" (for Podman, %s overrides the others)", podman[len(podman)-1])
		}
		if len(unread) > 0 {
			c.Status = Warn
			c.Detail += fmt.Sprintf("; %s is in no directory the engines here read (%s): left from an earlier install?", strings.Join(unread, ", "), readBy())
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
