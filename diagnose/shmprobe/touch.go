//go:build linux

package shmprobe

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapFile sizes f to size with ftruncate (which allocates nothing on a
// tmpfs) and maps all of it shared, read-write: what PyTorch's
// shared-memory allocator does for every tensor it shares.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 {
		return nil, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("map %s: size %d too large", f.Name(), size)
	}
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("ftruncate %s to %d: %w", f.Name(), size, err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s (%d bytes): %w", f.Name(), size, err)
	}
	return b, nil
}

// touch writes one byte in every page of b from offset from on, which makes
// the kernel allocate each page. On a full tmpfs the kernel answers the
// write with SIGBUS; touch catches it and returns how many bytes it touched
// before the fault, with fault set. Any other panic is re-raised.
func touch(b []byte, from int) (touched int, fault bool) {
	page := os.Getpagesize()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	i := from - from%page
	func() {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if re, ok := v.(interface{ Addr() uintptr }); ok && len(b) > 0 {
				base := uintptr(unsafe.Pointer(&b[0]))
				if a := re.Addr(); a >= base && a < base+uintptr(len(b)) {
					fault = true
					return
				}
			}
			panic(v)
		}()
		for ; i < len(b); i += page {
			b[i] = 1
		}
	}()
	if !fault {
		i = len(b)
	}
	return max(i-from, 0), fault
}

// touchFile maps f at size, touches it from offset from, and unmaps it.
// It returns the bytes touched, whether a SIGBUS stopped it, and any
// error from sizing or mapping the file.
func touchFile(f *os.File, from, size int64, afterMap func(*os.File)) (touched int64, fault bool, err error) {
	b, err := mapFile(f, size)
	if err != nil {
		return 0, false, err
	}
	defer unix.Munmap(b)
	if afterMap != nil {
		afterMap(f)
	}
	n, fault := touch(b, int(from))
	return int64(n), fault, nil
}

// dieOf ends the process by sig with the signal's default action, so that
// its parent's wait status says "killed by signal" as it would for a C
// program (a Go program otherwise turns a fault into a panic and exit
// status 2). No core file is written.
func dieOf(sig unix.Signal) {
	runtime.LockOSThread()
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	// An all-zero struct sigaction is SIG_DFL with no flags and an empty
	// mask on every Linux architecture; 32 bytes cover the kernel's struct.
	var act [4]uint64
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	set := uint64(1) << (uint(sig) - 1)
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_UNBLOCK, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	// Not reached; should the signal not kill us, exit the way a shell
	// reports death by a signal.
	time.Sleep(time.Second)
	os.Exit(128 + int(sig))
}
