package shmsweep

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// DefaultStateDir is where the records are kept when Options.StateDir is
// empty: a tmpfs, which goes with the node's reboot as the pods do.
const DefaultStateDir = "/run/gpurun/sweep"

// Why a candidate was kept: Kept.Why.
const (
	// KeptHeld: a live process has it open or mapped (rule 3).
	KeptHeld = "held"
	// KeptSibling: its first resident page is charged to the cgroup of a
	// live sibling container of the pod (rule 4).
	KeptSibling = "sibling"
	// KeptUnknownWriter: it has no resident page to tell its writer by,
	// and another container of the pod is live (rule 5).
	KeptUnknownWriter = "unknown-writer"
	// KeptUnattributed: attribution could not be made at all
	// (Result.NoAttribution says why; rule 6).
	KeptUnattributed = "unattributed"
)

// ErrRefused is a ShmDir the sweep will not touch: not a tmpfs, or the
// host's /dev/shm.
var ErrRefused = errors.New("refused")

// Options says where the sweep finds the node's processes, its cgroups and
// its own records. The zero value is the node's defaults.
type Options struct {
	// Proc is the procfs of the host's PID namespace ("" = "/proc"):
	// every process of the node must be under it.
	Proc string
	// CgroupRoot is the host's cgroup hierarchy ("" = "/sys/fs/cgroup").
	CgroupRoot string
	// StateDir holds the records ("" = DefaultStateDir).
	StateDir string
	// Charge, when set, replaces the pagemap/kpagecgroup reading (tests):
	// the inode of the memory cgroup that the first resident page of the
	// file at path is charged to, and whether it has one. An error that
	// matches fs.ErrNotExist is a file gone meanwhile (neither swept nor
	// kept); any other makes attribution impossible (rule 6).
	Charge func(path string) (memcg uint64, resident bool, err error)
	// TmpfsMagic is the statfs(2) f_type ShmDir must have (0 =
	// unix.TMPFS_MAGIC). For tests only, whose ShmDir is a plain
	// temporary directory: they set their filesystem's type.
	TmpfsMagic int64
}

// withDefaults fills the empty fields.
func (o Options) withDefaults() Options {
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.TmpfsMagic == 0 {
		o.TmpfsMagic = unix.TMPFS_MAGIC
	}
	return o
}

// Start is one start of a container in a pod, as its OCI spec and its
// annotations name it.
type Start struct {
	// ShmDir is the pod's /dev/shm tmpfs as this process reaches it (a
	// host path, absolute).
	ShmDir string
	// SandboxID is the pod sandbox's id (io.kubernetes.cri.sandbox-id,
	// io.kubernetes.cri-o.SandboxID).
	SandboxID string
	// Container is the container's name in the pod spec
	// (io.kubernetes.cri.container-name, io.kubernetes.container.name).
	Container string
	// ContainerID is the starting container's id.
	ContainerID string
	// CgroupsPath is the starting container's linux.cgroupsPath.
	CgroupsPath string
}

// check refuses a Start whose names cannot name records.
func (s Start) check() error {
	if err := checkName("sandbox id", s.SandboxID); err != nil {
		return err
	}
	if err := checkName("container name", s.Container); err != nil {
		return err
	}
	if !filepath.IsAbs(s.ShmDir) {
		return fmt.Errorf("shm dir %q: not an absolute path", s.ShmDir)
	}
	return nil
}

// Kept is a candidate the sweep left, and why (KeptHeld, KeptSibling,
// KeptUnknownWriter, KeptUnattributed).
type Kept struct {
	File
	Why string
}

// Result is what one sweep found and did.
type Result struct {
	// Restart: an earlier instance's record was found; false on a first
	// start, where nothing is removed.
	Restart bool
	// NewSandbox: the sandbox had no records before this start, which
	// made its first: the time for the caller to run GC.
	NewSandbox bool
	// Swept are the files removed, sorted by name, and SweptBytes their
	// bytes.
	Swept      []File
	SweptBytes int64
	// Kept are the candidates left, sorted by name, each with why, and
	// KeptBytes their bytes.
	Kept      []Kept
	KeptBytes int64
	// NoAttribution says why nothing was removed when attribution could
	// not be made at all (rule 6); "" otherwise.
	NoAttribution string
}

// keep adds f to the kept files.
func (r *Result) keep(f File, why string) {
	r.Kept = append(r.Kept, Kept{File: f, Why: why})
	r.KeptBytes += f.Bytes
}

// Sweep carries out the package's rules for one start of a container: on a
// restart it removes the earlier instance's leftovers from the pod's
// /dev/shm, and it records what is there for the next. It returns what it
// did; an error with it says what failed (the Result still tells what was
// removed before). Sweeps of different containers may run at once, in one
// process or several; one container's starts come one at a time.
func Sweep(o Options, s Start) (Result, error) {
	o = o.withDefaults()
	if err := s.check(); err != nil {
		return Result{}, fmt.Errorf("sweep: %w", err)
	}
	root, err := openShm(o, s.ShmDir)
	if err != nil {
		return Result{}, fmt.Errorf("sweep %s: %w", s.ShmDir, err)
	}
	defer unix.Close(root.fd)
	st := store{dir: o.StateDir, sandbox: s.SandboxID, container: s.Container}
	var res Result
	if res.NewSandbox, err = st.ensureSandbox(s.ShmDir); err != nil {
		return res, fmt.Errorf("sweep %s: %w", s.ShmDir, err)
	}
	rec, found, rerr := st.read()
	if !found || rec.dev != root.dev {
		// A first start (or a record unreadable, or made for another
		// tmpfs): the snapshot alone.
		return res, wrapSweep(s.ShmDir, errors.Join(rerr, root.record(st)))
	}
	res.Restart = true
	w, err := walkFD(root.fd, root.dir, root.dev, false, func(ino uint64) bool {
		_, known := slices.BinarySearch(rec.inodes, ino)
		return !known
	})
	if err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	now := sortedUnique(w.inos, nil)
	if len(w.files) == 0 && slices.Equal(now, rec.inodes) {
		return res, nil // nothing new, nothing gone: the record stands
	}
	drop, err := root.sweep(o, s, w.files, &res)
	swept := Totals{Bytes: rec.swept.Bytes + res.SweptBytes, Files: rec.swept.Files + int64(len(res.Swept))}
	if next := sortedUnique(w.inos, drop); !slices.Equal(next, rec.inodes) || swept != rec.swept {
		if werr := st.write(record{dev: root.dev, inodes: next, swept: swept}); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return res, wrapSweep(s.ShmDir, err)
}

// record writes the snapshot of a first start: the inodes of the regular
// files now, none named.
func (r shmRoot) record(st store) error {
	w, err := walkFD(r.fd, r.dir, r.dev, false, func(uint64) bool { return false })
	if err != nil {
		return err
	}
	return st.write(record{dev: r.dev, inodes: sortedUnique(w.inos, nil)})
}

// wrapSweep gives err its context.
func wrapSweep(dir string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sweep %s: %w", dir, err)
}

// shmRoot is the pod's /dev/shm, open.
type shmRoot struct {
	dir string
	fd  int
	dev uint64
}

// openShm opens the ShmDir dir and refuses it unless it is a tmpfs other
// than the host's /dev/shm (rule 8): PID 1's, and this process's own
// (the host's too when this process runs on the host; when it runs in a
// container, its own pod's, never one to sweep), which still answers when
// PID 1's root cannot be read.
func openShm(o Options, dir string) (shmRoot, error) {
	fd, dev, err := openRoot(dir)
	if err != nil {
		return shmRoot{}, err
	}
	r := shmRoot{dir: dir, fd: fd, dev: dev}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		unix.Close(fd)
		return shmRoot{}, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	if int64(sfs.Type) != o.TmpfsMagic {
		unix.Close(fd)
		return shmRoot{}, fmt.Errorf("not a tmpfs (filesystem type %#x): %w", sfs.Type, ErrRefused)
	}
	for _, host := range []string{filepath.Join(o.Proc, "1", "root", "dev", "shm"), "/dev/shm"} {
		var st unix.Stat_t
		if unix.Stat(host, &st) == nil && st.Dev == dev {
			unix.Close(fd)
			return shmRoot{}, fmt.Errorf("the host's /dev/shm (%s): %w", host, ErrRefused)
		}
	}
	return r, nil
}

// sortedUnique returns inos sorted, each once, less those in drop.
func sortedUnique(inos []uint64, drop map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(inos))
	for _, ino := range inos {
		if !drop[ino] {
			out = append(out, ino)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
