package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// readCgroups returns every directory below root (the cgroup hierarchies
// and the cgroups in them), relative to root and sorted, leaving out what
// ignoredCgroup says is the system's own business. Symbolic links (cgroup
// v1's "cpu,cpuacct" aliases) are not followed.
func readCgroups(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != root {
				return nil // removed while we walked
			}
			return err
		}
		if !d.IsDir() || p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if ignoredCgroup(d.Name()) {
			return fs.SkipDir
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cgroups under %s: %w", root, err)
	}
	sort.Strings(out)
	return out, nil
}

// ignoredCgroup reports whether the cgroup directory called name, and all
// below it, come and go with the system rather than with the tests: logins
// (systemd's user.slice) and systemd services (timers start them) that are
// no container engine's.
func ignoredCgroup(name string) bool {
	if name == "user.slice" {
		return true
	}
	if !strings.HasSuffix(name, ".service") {
		return false
	}
	for _, engine := range []string{"docker", "containerd", "crio", "podman", "kube", "gpurun"} {
		if strings.Contains(name, engine) {
			return false
		}
	}
	return true
}
