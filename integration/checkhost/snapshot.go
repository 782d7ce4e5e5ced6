package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Snapshot is what the host looked like at one moment, in the parts the
// tests could change. It is written as JSON between `checkhost snapshot`
// and `checkhost compare`.
type Snapshot struct {
	// Taken is when the snapshot was taken.
	Taken time.Time `json:"taken"`
	// Interfaces are the network interfaces of the checker's network
	// namespace, by name.
	Interfaces map[string]Interface `json:"interfaces"`
	// Files describe every entry below the watched paths (Sources.Trees),
	// by path: see describeEntry.
	Files map[string]string `json:"files"`
	// Mounts is the mount table of the checker's mount namespace.
	Mounts []Mount `json:"mounts"`
	// Cgroups are the cgroup directories below Sources.CgroupRoot, as paths
	// relative to it.
	Cgroups []string `json:"cgroups"`
	// Processes are the running processes that belong to container engines,
	// Kubernetes or gpurun, or that name a harness directory (see watched).
	Processes []Process `json:"processes"`
	// Tmp are the paths of the entries of Sources.TmpDir whose names start
	// with one of Sources.TmpPrefixes.
	Tmp []string `json:"tmp"`
	// Stale are the entries of Tmp that a killed test run left: a harness
	// directory holding an owner file whose process was gone when the
	// snapshot was taken. The next run's harness removes them (its sweep
	// of what a killed run left), so their mounts and processes going is
	// not a change.
	Stale []string `json:"stale,omitempty"`
}

// Sources says where a snapshot is read from. [HostSources] is the machine
// itself; tests point the parts they change at private namespaces and
// temporary directories.
type Sources struct {
	// Trees are files and directories whose every entry is recorded (a
	// file's content as its SHA-256). A path may be a glob pattern
	// (filepath.Match syntax), matched when the snapshot is taken.
	Trees []string
	// Mountinfo is the mountinfo file to read (/proc/self/mountinfo).
	Mountinfo string
	// CgroupRoot is where the cgroup hierarchies are mounted.
	CgroupRoot string
	// Proc is the proc filesystem.
	Proc string
	// TmpDir and TmpPrefixes: entries of TmpDir whose names start with one
	// of the prefixes are recorded.
	TmpDir      string
	TmpPrefixes []string
	// Interfaces lists the network interfaces; nil skips them.
	Interfaces func() (map[string]Interface, error)
	// Self is the checker's own pid; it and its ancestors are never
	// recorded as processes (0: os.Getpid()).
	Self int
}

// HarnessPrefix starts the name of every directory the integration tests'
// harness and built binaries leave in /tmp while they run
// (integration/harness.DirPrefix is "gpurun-h"; the test binaries are built
// into /tmp/gpurun-bin-*; hack/capture-fixtures.sh uses /tmp/gpurun-capture.*).
const HarnessPrefix = "gpurun-"

// hostTrees are the paths whose contents the tests must leave as they found
// them: the engines' configurations and hooks, gpurun's own files where an
// install would put them, CNI configuration, the sockets containerd's shims
// keep outside any state directory (a shim killed without its cleanup
// leaves one), named network namespaces.
func hostTrees() []string {
	return []string{
		"/etc/docker",
		"/etc/containerd",
		"/etc/containers",
		"/usr/share/containers/oci/hooks.d",
		"/etc/crio",
		"/etc/nri",
		"/opt/nri",
		"/etc/cni/net.d",
		"/etc/gpurun",
		"/var/lib/gpurun",
		"/var/log/gpurun.log",
		"/usr/local/bin",
		"/usr/bin/gpurun*",
		"/usr/local/lib/docker/cli-plugins",
		"/usr/libexec/docker/cli-plugins",
		// Their contents only: the directories themselves are any engine's
		// (every containerd shim and ip netns make them).
		"/run/containerd/s/*",
		"/run/netns/*",
	}
}

// HostSources returns the sources of the machine itself.
func HostSources() Sources {
	trees := hostTrees()
	if home, err := os.UserHomeDir(); err == nil && home != "" && home != "/" {
		trees = append(trees, filepath.Join(home, ".docker"))
	}
	return Sources{
		Trees:       trees,
		Mountinfo:   "/proc/self/mountinfo",
		CgroupRoot:  "/sys/fs/cgroup",
		Proc:        "/proc",
		TmpDir:      "/tmp",
		TmpPrefixes: []string{HarnessPrefix},
		Interfaces:  systemInterfaces,
	}
}

// Take reads a snapshot from src. Parts that cannot be read at all are
// errors (a check that silently saw nothing could not fail); entries that
// vanish while they are read are skipped.
func Take(src Sources) (*Snapshot, error) {
	s := &Snapshot{Taken: time.Now().UTC()}
	var errs []error
	if src.Interfaces != nil {
		ifs, err := src.Interfaces()
		if err != nil {
			errs = append(errs, fmt.Errorf("network interfaces: %w", err))
		}
		s.Interfaces = ifs
	}
	files, err := readTrees(src.Trees)
	if err != nil {
		errs = append(errs, err)
	}
	s.Files = files
	if src.Mountinfo != "" {
		data, err := os.ReadFile(src.Mountinfo)
		if err != nil {
			errs = append(errs, fmt.Errorf("mount table: %w", err))
		} else if s.Mounts, err = parseMountinfo(data); err != nil {
			errs = append(errs, fmt.Errorf("mount table %s: %w", src.Mountinfo, err))
		}
	}
	if src.CgroupRoot != "" {
		if s.Cgroups, err = readCgroups(src.CgroupRoot); err != nil {
			errs = append(errs, err)
		}
	}
	if src.Proc != "" {
		self := src.Self
		if self == 0 {
			self = os.Getpid()
		}
		if s.Processes, err = readProcesses(src.Proc, self); err != nil {
			errs = append(errs, err)
		}
	}
	if src.TmpDir != "" {
		if s.Tmp, err = readTmp(src.TmpDir, src.TmpPrefixes); err != nil {
			errs = append(errs, err)
		}
		s.Stale = staleDirs(s.Tmp)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}
