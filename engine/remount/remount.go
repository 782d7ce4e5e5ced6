// Package remount grows an engine-made host tmpfs in place (MS_REMOUNT with
// a new size=), for /dev/shm that a pod's containers or a Docker IPC group
// share: every container bound to it sees the new size at once, and they
// keep sharing one tmpfs (NCCL's SHM transport needs the same st_dev).
package remount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/oci"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// ErrUnsafe is matched (errors.Is) by every refusal of a path the rules do
// not allow: a *RefusalError.
var ErrUnsafe = errors.New("refused")

// The rules a refusal breaks: a *RefusalError matches its rule with
// errors.Is, as well as ErrUnsafe. Callers choose what to say by rule,
// never by the message.
var (
	// ErrUnclean: the path is not absolute and clean (or has a ..).
	ErrUnclean = errors.New("not a clean absolute path")
	// ErrHostShm: the path is, or its tmpfs is, the host's /dev/shm.
	ErrHostShm = errors.New("the host's /dev/shm")
	// ErrOutsideScope: the engine named a tmpfs for the container, and
	// the path is another.
	ErrOutsideScope = errors.New("not the tmpfs the engine named")
	// ErrSymlink: the path goes through a symbolic link.
	ErrSymlink = errors.New("through a symbolic link")
	// ErrNotUnderRoot: the engine named nothing, and the path is under
	// none of the engine roots.
	ErrNotUnderRoot = errors.New("not under an engine root")
	// ErrNotTmpfs: no tmpfs is mounted at the path.
	ErrNotTmpfs = errors.New("not a tmpfs mount point")
	// ErrSwapped: what the path reaches is not the tmpfs the mount table
	// showed (a directory of it was replaced in between).
	ErrSwapped = errors.New("not the tmpfs the mount table shows")
	// ErrNotPods: the tmpfs is not the filesystem of the pod's own
	// /dev/shm (Scope.SameAs).
	ErrNotPods = errors.New("not the pod's own /dev/shm")
	// ErrUnproven: a tmpfs under no engine root whose owner's /dev/shm
	// could not be read to prove it (a pid that gpurun, outside the
	// host's PID namespace, cannot see).
	ErrUnproven = errors.New("not proven to be the pod's tmpfs")
)

// RefusalError is a path the rules do not allow. Its message is
// "refused: " and the detail.
type RefusalError struct {
	// Rule is the rule the path breaks, one of the Err variables above.
	Rule error
	// Path is the path refused.
	Path string
	// Detail says what is wrong with it, for people.
	Detail string
	// Err is the error that kept a rule from being proven, if any (the
	// proof's stat error under ErrUnproven).
	Err error
}

func (e *RefusalError) Error() string { return ErrUnsafe.Error() + ": " + e.Detail }

// Unwrap returns ErrUnsafe, the rule and Err, so that errors.Is matches
// each.
func (e *RefusalError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnsafe, e.Rule}
	}
	return []error{ErrUnsafe, e.Rule, e.Err}
}

// refuse returns the refusal of path by rule; format and args make the
// detail.
func refuse(rule error, path, format string, args ...any) error {
	return &RefusalError{Rule: rule, Path: path, Detail: fmt.Sprintf(format, args...)}
}

// Result says what Grow found and did.
type Result struct {
	Before, After int64
	Changed       bool
}

// Scope says which engine-made tmpfs a remount may touch.
type Scope struct {
	// Named is the host tmpfs the engine itself named for the container —
	// derived from the bundle path it handed over and the sandbox id it
	// wrote (engine/dirs) — or "" when it named none. When set, it
	// is the only path allowed.
	Named string
	// Roots are directories under which an engine-made tmpfs may be when
	// the engine named none: the policy's engine_roots, and roots a running
	// engine reported.
	Roots []string
	// SameAs, when set, is a path whose filesystem the tmpfs must be (the
	// same device): the pod sandbox's own /dev/shm as the host sees it
	// (/proc/<pid>/root/dev/shm), proof that a tmpfs an NRI request named
	// outside the known engine dirs is the pod's. It is compared with the
	// mount table's entry, and growMounted compares the directory it opens
	// with that entry.
	SameAs string
}

// String describes the scope for errors and logs.
func (s Scope) String() string {
	if s.Named != "" && s.SameAs != "" {
		return "named " + s.Named + " (the filesystem of " + s.SameAs + ")"
	}
	if s.Named != "" {
		return "named " + s.Named
	}
	return "engine roots " + strings.Join(s.Roots, ", ")
}

// CheckPath applies the rules that do not need the mount table: path is
// absolute and clean, is not the host's /dev/shm, contains no symbolic link,
// and is the scope's named tmpfs — or, when the scope names none, lies
// strictly under one of its roots (each taken as it is and with its own
// symbolic links resolved, since /var/run is often a link to /run).
func CheckPath(path string, scope Scope) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return refuse(ErrUnclean, path, "%q is not a clean absolute path", path)
	}
	if slices.Contains(oci.HostShmPaths(), path) {
		return refuse(ErrHostShm, path, "%s is the host's /dev/shm", path)
	}
	if scope.Named != "" && path != scope.Named {
		return refuse(ErrOutsideScope, path, "%s is not the tmpfs the engine named for this container (%s)", path, scope.Named)
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", path, err)
	}
	if resolved != path {
		return refuse(ErrSymlink, path, "%s goes through a symbolic link (to %s)", path, resolved)
	}
	for _, hs := range oci.HostShmPaths() {
		if r, err := filepath.EvalSymlinks(hs); err == nil && r == path {
			return refuse(ErrHostShm, path, "%s is the host's /dev/shm", path)
		}
	}
	if scope.Named != "" {
		return nil
	}
	for _, root := range scope.Roots {
		candidates := []string{filepath.Clean(root)}
		if r, err := filepath.EvalSymlinks(root); err == nil && r != candidates[0] {
			candidates = append(candidates, r)
		}
		for _, c := range candidates {
			if c != "/" && strings.HasPrefix(path, c+"/") {
				return nil
			}
		}
	}
	return refuse(ErrNotUnderRoot, path, "%s is not under an engine root (%s)", path, strings.Join(scope.Roots, ", "))
}

// TmpfsMount returns the mount table entry of the tmpfs mounted at path —
// the top one, where mounts are stacked — or an error. The table is the
// calling thread's (/proc/thread-self), so it is right even if the main
// thread has been parked in another namespace.
func TmpfsMount(path string) (*mountinfo.Info, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	return topTmpfsAt(f, path)
}

// Size returns the size of the filesystem at path in bytes.
func Size(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * int64(st.Bsize), nil
}

// Grow makes the engine-made tmpfs at path at least size bytes. It checks
// CheckPath's rules for scope and that path is a tmpfs mount point that is
// not the host's /dev/shm, never shrinks, and keeps the mount's flags
// (nosuid, nodev, noexec, ro, atime) as they are.
//
// The checks are not trusted to still hold when the remount happens: a
// directory of the path may be swapped for a symbolic link in between (to
// /dev, say, so that the path names the host's /dev/shm). So the path is
// then opened component by component without following any link, the
// directory reached must be the tmpfs the mount table showed (same
// device), and the remount is made through that open directory — never
// through the path again (see growMounted).
func Grow(path string, size int64, scope Scope) (Result, error) {
	return resize(path, size, scope, false)
}

// resize carries out Grow and Set on the host (the caller's mount
// namespace).
func resize(path string, size int64, scope Scope, shrink bool) (Result, error) {
	if err := CheckPath(path, scope); err != nil {
		return Result{}, err
	}
	m, err := TmpfsMount(path)
	if err != nil {
		return Result{}, err
	}
	if err := notHostShm(m, hostShmDevs()); err != nil {
		return Result{}, err
	}
	if err := sameAs(path, m, scope.SameAs); err != nil {
		return Result{}, err
	}
	// The remount goes through the thread's working directory, so the
	// thread gets filesystem attributes of its own (see inNamespaceThread).
	return inNamespaceThread(-1, func() (Result, error) {
		return growMounted(path, m, size, shrink)
	})
}

// sameAs checks that the tmpfs m at path is the filesystem at proof (when
// proof is not ""), by device number.
func sameAs(path string, m *mountinfo.Info, proof string) error {
	if proof == "" {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(proof, &st); err != nil {
		return &RefusalError{Rule: ErrUnproven, Path: path, Err: err,
			Detail: fmt.Sprintf("%s is not under an engine root, and the pod's own /dev/shm (%s) cannot be read to prove it is the pod's tmpfs (%v): %v", path, proof, ErrUnproven, err)}
	}
	if major, minor := unix.Major(st.Dev), unix.Minor(st.Dev); int(major) != m.Major || int(minor) != m.Minor {
		return refuse(ErrNotPods, path, "%s (device %d:%d) is not the pod's own /dev/shm (%s, device %d:%d)", path, m.Major, m.Minor, proof, major, minor)
	}
	return nil
}

// Usage returns the size of the filesystem at path and the bytes in use.
func Usage(path string) (size, used int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Blocks-st.Bfree) * int64(st.Bsize), nil
}

// ErrInUse is wrapped when a smaller size would not hold what the tmpfs
// already holds.
var ErrInUse = errors.New("in use")

// Set makes the engine-made tmpfs at path size bytes, with Grow's rules.
// Unlike Grow it may shrink the tmpfs, but never below the bytes it holds
// (an error wrapping ErrInUse).
func Set(path string, size int64, scope Scope) (Result, error) {
	return resize(path, size, scope, true)
}

// mountFlags turns per-mount options from the mount table into the flags a
// remount must repeat so that it does not drop them.
func mountFlags(options string) uintptr {
	var f uintptr
	for _, o := range strings.Split(options, ",") {
		switch o {
		case "ro":
			f |= unix.MS_RDONLY
		case "nosuid":
			f |= unix.MS_NOSUID
		case "nodev":
			f |= unix.MS_NODEV
		case "noexec":
			f |= unix.MS_NOEXEC
		case "noatime":
			f |= unix.MS_NOATIME
		case "nodiratime":
			f |= unix.MS_NODIRATIME
		case "relatime":
			f |= unix.MS_RELATIME
		case "strictatime":
			f |= unix.MS_STRICTATIME
		case "sync":
			f |= unix.MS_SYNCHRONOUS
		case "dirsync":
			f |= unix.MS_DIRSYNC
		}
	}
	return f
}
