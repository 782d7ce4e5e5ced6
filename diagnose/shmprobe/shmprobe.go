//go:build linux

// Package shmprobe proves what a /dev/shm can really hold by allocating it
// the way its users do, and frees everything it allocated before it
// returns.
//
//   - [Check] reserves a size in one file with fallocate, as a health check
//     (`gpurun doctor --probe SIZE`).
//   - [DataLoader] starts worker processes that each create a file, size it
//     with ftruncate, map it and touch every page, the way PyTorch DataLoader
//     workers pass batches; on a full tmpfs a worker dies of SIGBUS.
//   - [NCCL] reserves NCCL-sized segments with posix_fallocate semantics
//     (fallocate mode 0), the way NCCL's SHM transport does; on a full tmpfs
//     it fails with ENOSPC.
//
// Files are unlinked as soon as they are open, so a probe that is killed
// leaves nothing behind: the kernel frees the space when the last
// descriptor or mapping goes.
//
// tmpfs reserves nothing up front: what a probe allocates is charged to the
// memory cgroup of the process that allocates it while it is held, and
// beyond the cgroup's limit the kernel OOM-kills rather than refuses. Check
// therefore does not try a size its caller's memory cgroup has no room
// for; the DataLoader and NCCL probes, test workloads, do (their workers
// die of SIGKILL then).
package shmprobe

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/policy"
)

// Sizes the probes use unless told otherwise.
const (
	// NCCLSegmentSize is the size of one segment of NCCL's SHM transport
	// (per channel, per peer, per direction): LL 524,288 + LL128 4,915,200 +
	// SIMPLE 4 MiB + a 4 KiB header, as in the field reports'
	// "Error while creating shared memory segment ... (size 9637888)".
	NCCLSegmentSize int64 = 524288 + 4915200 + 4*policy.MiB + 4*policy.KiB
	// DefaultNCCLCount is how many segments the NCCL probe creates: more
	// than fit in an engine's default 64 MiB /dev/shm.
	DefaultNCCLCount = 8
	// DefaultWorkerSegment is what each DataLoader probe worker maps and
	// touches: a batch a little over two thirds of 64 MiB, so that the
	// second worker of a default /dev/shm runs out.
	DefaultWorkerSegment = 48 * policy.MiB
	// DefaultWorkers is the DataLoader probe's worker count, a common
	// num_workers.
	DefaultWorkers = 4
	// DefaultDir is the directory the probes allocate in.
	DefaultDir = "/dev/shm"
)

// Failure says how an allocation in /dev/shm failed.
type Failure string

// The values of Failure.
const (
	// FailureNone: everything requested was allocated.
	FailureNone Failure = ""
	// FailureSIGBUS: touching a mapped page of a full tmpfs raised SIGBUS
	// (what kills PyTorch DataLoader workers).
	FailureSIGBUS Failure = "SIGBUS"
	// FailureENOSPC: fallocate or ftruncate answered "no space left on
	// device" (what NCCL reports).
	FailureENOSPC Failure = "ENOSPC"
	// FailureOther: the allocation failed in another way (ENOMEM, EFBIG,
	// a worker killed by another signal, ...).
	FailureOther Failure = "other"
	// FailureMemory: Check did not try, because the size is more than the
	// caller's memory cgroup has left: tmpfs pages count against it, so
	// the allocation would get the caller OOM-killed instead of refused.
	FailureMemory Failure = "memory-limit"
	// FailureSetup: the probe could not start (the directory is missing or
	// not writable, a worker could not be started); nothing was learned
	// about the size.
	FailureSetup Failure = "setup"
)

// ExitStatus is the exit status a command reports for a probe that ended
// with f: 0 when everything was allocated, 1 when the allocation failed
// (SIGBUS, ENOSPC or another error), 2 when the probe could not run.
func ExitStatus(f Failure) int {
	switch f {
	case FailureNone:
		return 0
	case FailureSetup:
		return 2
	default:
		return 1
	}
}

// FS describes the filesystem a probe allocated in, as statfs saw it
// before the probe started.
type FS struct {
	// Tmpfs is true when the directory is on a tmpfs.
	Tmpfs bool `json:"tmpfs"`
	// Size and Free are in bytes; 0 when statfs failed.
	Size int64 `json:"size_bytes"`
	Free int64 `json:"free_bytes"`
}

func (fs FS) String() string {
	if fs.Size == 0 {
		return "size unknown"
	}
	kind := "tmpfs"
	if !fs.Tmpfs {
		kind = "not a tmpfs"
	}
	return fmt.Sprintf("%s %s, %s free", kind, policy.FormatSize(fs.Size), policy.FormatSize(fs.Free))
}

// StatFS returns what statfs says about dir; the zero FS when it fails.
func StatFS(dir string) FS {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return FS{}
	}
	return FS{
		Tmpfs: st.Type == unix.TMPFS_MAGIC,
		Size:  int64(st.Blocks) * int64(st.Bsize),
		Free:  int64(st.Bavail) * int64(st.Bsize),
	}
}

// Result is what Check found.
type Result struct {
	// Dir is the directory the probe allocated in.
	Dir string `json:"dir"`
	// FS is the directory's filesystem before the probe.
	FS FS `json:"fs"`
	// Requested and Allocated are in bytes. Allocated is what was held
	// when the probe stopped (all of Requested on success); it was freed
	// before Check returned.
	Requested int64 `json:"requested_bytes"`
	Allocated int64 `json:"allocated_bytes"`
	// Failure is empty on success.
	Failure Failure `json:"failure,omitempty"`
	// Err says what failed, naming the call.
	Err string `json:"error,omitempty"`
}

// OK reports whether everything requested was allocated.
func (r Result) OK() bool { return r.Failure == FailureNone }

// String is the one-line summary the CLI prints.
func (r Result) String() string {
	where := fmt.Sprintf("in %s (%s)", r.Dir, r.FS)
	if r.OK() {
		return fmt.Sprintf("size: ok: allocated %s of %s %s, then freed it", policy.FormatSize(r.Allocated), policy.FormatSize(r.Requested), where)
	}
	return fmt.Sprintf("size: %s: allocated %s of %s %s: %s", r.Failure, policy.FormatSize(r.Allocated), policy.FormatSize(r.Requested), where, r.Err)
}

// checkChunk is how much Check reserves per fallocate call: Allocated is
// exact to this much.
const checkChunk = policy.MiB

// Check proves that size bytes can be allocated in dir (normally
// /dev/shm): it reserves them in an unlinked file with fallocate, a chunk at
// a time, then frees them. Where the filesystem has no fallocate, it maps
// the file and touches every page instead, catching the SIGBUS of a full
// tmpfs. A size above what the caller's memory cgroup has left is not tried
// (FailureMemory): the kernel would OOM-kill the caller. Failures are
// reported in the Result, never as a panic.
func Check(dir string, size int64) Result {
	return check(dir, size, "/proc", "/sys")
}

func check(dir string, size int64, procRoot, sysRoot string) Result {
	r := Result{Dir: dir, FS: StatFS(dir), Requested: size}
	if size < 0 {
		r.Failure, r.Err = FailureSetup, fmt.Sprintf("negative size %d", size)
		return r
	}
	if room, ok := memoryHeadroom(procRoot, sysRoot); ok && size > room {
		r.Failure = FailureMemory
		r.Err = fmt.Sprintf("%s is more than the %s this process's memory cgroup has left (its limit less what it uses); "+
			"tmpfs pages count against that limit, so allocating them would get the process OOM-killed", policy.FormatSize(size), policy.FormatSize(max(room, 0)))
		return r
	}
	f, err := openUnlinked(dir, "gpurun-probe-check-")
	if err != nil {
		r.Failure, r.Err = FailureSetup, err.Error()
		return r
	}
	defer f.Close()
	for r.Allocated < size {
		n := min(checkChunk, size-r.Allocated)
		err := fallocate(f, r.Allocated, n)
		if errors.Is(err, unix.EOPNOTSUPP) {
			touched, fault, err := touchFile(f, r.Allocated, size, nil)
			r.Allocated += touched
			switch {
			case fault:
				r.Failure, r.Err = FailureSIGBUS, fmt.Sprintf("SIGBUS touching %s at offset %d", f.Name(), r.Allocated)
			case err != nil:
				r.Failure, r.Err = classify(err), err.Error()
			}
			return r
		}
		if err != nil {
			r.Failure, r.Err = classify(err), fmt.Sprintf("fallocate %s at offset %d: %v", f.Name(), r.Allocated, err)
			return r
		}
		r.Allocated += n
	}
	return r
}

// openUnlinked creates a file in dir, as shm_open does in /dev/shm, and
// unlinks it at once: its space lives as long as the descriptor (or a
// mapping of it).
func openUnlinked(dir, prefix string) (*os.File, error) {
	f, err := os.CreateTemp(dir, prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("create a file in %s: %w", dir, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("unlink %s: %w", f.Name(), err)
	}
	return f, nil
}

// fallocate reserves [off, off+n) of f the way posix_fallocate does
// (mode 0), retrying on EINTR.
func fallocate(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}

// classify maps an allocation error to a Failure.
func classify(err error) Failure {
	switch {
	case err == nil:
		return FailureNone
	case errors.Is(err, unix.ENOSPC):
		return FailureENOSPC
	default:
		return FailureOther
	}
}

// errnoName returns "ENOSPC" for an error wrapping unix.ENOSPC, and the
// error text otherwise.
func errnoName(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		if name := unix.ErrnoName(en); name != "" {
			return name
		}
	}
	return strings.TrimSpace(err.Error())
}
