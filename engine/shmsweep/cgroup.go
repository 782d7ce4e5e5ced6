package shmsweep

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// maxCgroupDepth is how deep below a sibling container's cgroup the
// sweep looks for processes and directories (a container that runs
// systemd or its own containers makes cgroups of its own).
const maxCgroupDepth = 8

// podCgroup is where a container's cgroupsPath puts its pod and the
// container itself.
type podCgroup struct {
	pod string // the pod's cgroup, relative to a hierarchy's root, e.g. "kubepods/burstable/pod<uid>"
	own string // the container's own directory's name in it
}

// parseCgroupsPath reads a linux.cgroupsPath in runc's two forms: cgroupfs
// ("/kubepods/burstable/pod<uid>/<container-id>": the pod's cgroup is the
// parent directory) and systemd ("slice:prefix:name": the pod's cgroup is
// the slice expanded, the container's "<prefix>-<name>.scope").
func parseCgroupsPath(p string) (podCgroup, error) {
	if parts := strings.Split(p, ":"); len(parts) == 3 && !strings.HasPrefix(p, "/") {
		return parseSystemd(parts[0], parts[1], parts[2])
	}
	if !filepath.IsAbs(p) {
		return podCgroup{}, fmt.Errorf("cgroupsPath %q: neither an absolute cgroupfs path nor slice:prefix:name", p)
	}
	c := filepath.Clean(p)
	pod, own := filepath.Dir(c), filepath.Base(c)
	if pod == "/" || own == "/" {
		return podCgroup{}, fmt.Errorf("cgroupsPath %q names no pod cgroup above the container's", p)
	}
	return podCgroup{pod: strings.TrimPrefix(pod, "/"), own: own}, nil
}

// parseSystemd reads the systemd form's three parts as runc does.
func parseSystemd(slice, prefix, name string) (podCgroup, error) {
	if slice == "" {
		slice = "system.slice"
	}
	pod, err := expandSlice(slice)
	if err != nil {
		return podCgroup{}, err
	}
	if pod == "" {
		return podCgroup{}, fmt.Errorf("cgroupsPath slice %q is the root: no pod cgroup", slice)
	}
	if name == "" || strings.Contains(name, "/") {
		return podCgroup{}, fmt.Errorf("cgroupsPath unit name %q: not a unit name", name)
	}
	own := name
	if !strings.HasSuffix(name, ".slice") {
		own = prefix + "-" + name + ".scope"
	}
	return podCgroup{pod: pod, own: own}, nil
}

// expandSlice expands a systemd slice name into its path below the root,
// as systemd (and runc) do: "a-b-c.slice" is "a.slice/a-b.slice/a-b-c.slice",
// "-.slice" the root ("").
func expandSlice(slice string) (string, error) {
	const suffix = ".slice"
	name, ok := strings.CutSuffix(slice, suffix)
	if !ok || name == "" || strings.Contains(slice, "/") {
		return "", fmt.Errorf("cgroupsPath slice %q: not a slice name", slice)
	}
	if name == "-" {
		return "", nil
	}
	var path []string
	prefix := ""
	for c := range strings.SplitSeq(name, "-") {
		if c == "" {
			return "", fmt.Errorf("cgroupsPath slice %q: not a slice name", slice)
		}
		path = append(path, prefix+c+suffix)
		prefix += c + "-"
	}
	return strings.Join(path, "/"), nil
}

// memoryRoot is the memory controller's hierarchy under root: root itself
// on cgroup v2 (root/cgroup.controllers exists), else v1's root/memory.
func memoryRoot(root string) string {
	var st unix.Stat_t
	if unix.Stat(filepath.Join(root, "cgroup.controllers"), &st) == nil {
		return root
	}
	return filepath.Join(root, "memory")
}

// pod is what a sweep needs to know of a pod's memory cgroups.
type pod struct {
	dir     string          // the pod's memory cgroup directory
	sibling map[uint64]bool // the inodes of the directories of live sibling containers, and of the directories below them
	anyLive bool            // some sibling container holds a process
}

// loadPod reads the pod's memory cgroup that the starting container s's
// cgroupsPath names: its children other than the sandbox's and s's own,
// which of them hold a process, and their directories' inodes.
func loadPod(o Options, s Start) (pod, error) {
	pc, err := parseCgroupsPath(s.CgroupsPath)
	if err != nil {
		return pod{}, err
	}
	p := pod{dir: filepath.Join(memoryRoot(o.CgroupRoot), pc.pod), sibling: map[uint64]bool{}}
	fd, err := openDir(unix.AT_FDCWD, p.dir)
	if err != nil {
		return pod{}, fmt.Errorf("the pod's memory cgroup: %w", &fs.PathError{Op: "open directory", Path: p.dir, Err: err})
	}
	ents, err := readDirents(fd)
	unix.Close(fd)
	if err != nil {
		return pod{}, fmt.Errorf("the pod's memory cgroup: %w", &fs.PathError{Op: "read directory", Path: p.dir, Err: err})
	}
	for _, e := range ents {
		if e.typ != unix.DT_DIR || ownCgroup(e.name, s, pc.own) {
			continue
		}
		inos, live, err := subtree(filepath.Join(p.dir, e.name), 0)
		if err != nil {
			return pod{}, fmt.Errorf("the pod's memory cgroup: %w", err)
		}
		if live {
			p.anyLive = true
			for _, ino := range inos {
				p.sibling[ino] = true
			}
		}
	}
	return p, nil
}

// ownCgroup tells whether the pod's child cgroup name is the sandbox's
// (its name holds the sandbox id: "<id>", "cri-containerd-<id>.scope",
// "crio-<id>.scope") or the starting container's own (the name its
// cgroupsPath gives, or one holding its container id, such as CRI-O's
// "crio-conmon-<id>.scope").
func ownCgroup(name string, s Start, own string) bool {
	return strings.Contains(name, s.SandboxID) || name == own ||
		(s.ContainerID != "" && strings.Contains(name, s.ContainerID))
}

// subtree returns the inodes of the cgroup directory dir and of the
// directories below it, and whether any of them holds a process. A
// directory removed meanwhile counts as nothing.
func subtree(dir string, depth int) (inos []uint64, live bool, err error) {
	fd, err := openDir(unix.AT_FDCWD, dir)
	if gone(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, &fs.PathError{Op: "open directory", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	inos = []uint64{st.Ino}
	procs, err := atomicfile.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	live = len(bytes.TrimSpace(procs)) > 0
	if depth+1 >= maxCgroupDepth {
		return inos, live, nil
	}
	ents, err := readDirents(fd)
	if err != nil {
		return nil, false, &fs.PathError{Op: "read directory", Path: dir, Err: err}
	}
	for _, e := range ents {
		if e.typ != unix.DT_DIR {
			continue
		}
		sub, l, err := subtree(filepath.Join(dir, e.name), depth+1)
		if err != nil {
			return nil, false, err
		}
		inos, live = append(inos, sub...), live || l
	}
	return inos, live, nil
}
