package hook

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/remount"
)

// Target says where a container's own /dev/shm tmpfs is while a hook runs.
type Target struct {
	// Pid is the state's pid: the container's init as the runtime names it
	// (createRuntime, prestart), or as the container's PID namespace does
	// (createContainer, which runs inside the container: often 1).
	Pid int
	// Rootfs is the container's root filesystem as the runtime sees it
	// before pivot_root (absolute; see Rootfs).
	Rootfs string
	// Stage is the hook stage, when known.
	Stage string
}

// Rootfs returns the container's root directory: root.path, relative to the
// bundle when not absolute (as runc reads it), with symbolic links resolved
// where it exists, since mount tables show resolved paths.
func Rootfs(root *specs.Root, bundle string) string {
	p := "rootfs"
	if root != nil && root.Path != "" {
		p = root.Path
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(bundle, p)
	}
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p
}

// Namespaces finds and grows a container's own tmpfs from a hook. Its
// fields are effects; the zero value uses /proc and remount.GrowInNamespace.
type Namespaces struct {
	// MountNS names the mount namespace of pid (0: this process).
	MountNS func(pid int) (string, error)
	// GrowIn is remount.GrowInNamespace (pid 0: this process's namespace).
	GrowIn func(pid int, path string, size int64) (remount.Result, error)
}

// candidate is a mount namespace (by a process in it) and a path there.
type candidate struct {
	pid  int
	path string
}

// Grow grows the container's /dev/shm tmpfs to size, trying, in order:
//
//  1. <rootfs>/dev/shm in the mount namespace of the state's pid: the
//     container's init before pivot_root, seen from the runtime's namespace
//     (createRuntime, prestart);
//  2. <rootfs>/dev/shm in the hook's own mount namespace, when it differs:
//     a createContainer hook already runs inside the container's namespace,
//     where the state's pid (the container's own numbering) may name another
//     process (tried first when Stage says createContainer);
//  3. /dev/shm in the mount namespace of the state's pid, when it differs
//     from the hook's: a container that has already pivoted (a runtime that
//     runs the hook late).
//
// Each try is a remount.GrowInNamespace, which refuses anything that is not
// a tmpfs mount point there, the host's /dev/shm, or a path through a link;
// the first that succeeds wins. It returns the result and where ("pid N:
// path"), or every try's error.
func (n Namespaces) Grow(t Target, size int64) (remount.Result, string, error) {
	n = n.withDefaults()
	shm := filepath.Join(t.Rootfs, "dev", "shm")
	cands := []candidate{{t.Pid, shm}}
	selfNS, errSelf := n.MountNS(0)
	pidNS, errPid := n.MountNS(t.Pid)
	differ := errSelf != nil || errPid != nil || selfNS != pidNS
	if differ {
		own := candidate{0, shm}
		if t.Stage == "createContainer" {
			cands = []candidate{own, cands[0]}
		} else {
			cands = append(cands, own)
		}
		cands = append(cands, candidate{t.Pid, "/dev/shm"})
	}
	var errs []any
	for _, c := range cands {
		res, err := n.GrowIn(c.pid, c.path, size)
		where := fmt.Sprintf("pid %d: %s", c.pid, c.path)
		if c.pid == 0 {
			where = "own namespace: " + c.path
		}
		if err == nil {
			return res, where, nil
		}
		errs = append(errs, err)
	}
	// One line (for the log), every error still wrapped.
	format := "no tmpfs could be grown: " + strings.TrimSuffix(strings.Repeat("%w; ", len(errs)), "; ")
	return remount.Result{}, "", fmt.Errorf(format, errs...)
}

func (n Namespaces) withDefaults() Namespaces {
	if n.MountNS == nil {
		n.MountNS = procMountNS
	}
	if n.GrowIn == nil {
		n.GrowIn = remount.GrowInNamespace
	}
	return n
}

// procMountNS reads the mount namespace link of pid (0: this thread, which,
// unlike /proc/self's main thread, is never one parked in another namespace).
func procMountNS(pid int) (string, error) {
	p := "/proc/thread-self/ns/mnt"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/ns/mnt"
	}
	ns, err := os.Readlink(p)
	if err != nil {
		return "", fmt.Errorf("mount namespace: %w", err)
	}
	return ns, nil
}
