package shmsweep

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pager reads which memory cgroup a page is charged to, through this
// process's page table (<proc>/self/pagemap) and the kernel's page
// table of memory cgroups (<proc>/kpagecgroup), both opened once a sweep.
type pager struct {
	proc        string
	pagemap     int
	kpagecgroup int
	size        int
}

// openPager opens <proc>/self/pagemap and <proc>/kpagecgroup; both need
// root (CAP_SYS_ADMIN, or pagemap gives no frame numbers).
func openPager(proc string) (*pager, error) {
	p := &pager{proc: proc, pagemap: -1, kpagecgroup: -1, size: unix.Getpagesize()}
	var err error
	if p.pagemap, err = openRead(filepath.Join(proc, "self", "pagemap")); err != nil {
		return nil, err
	}
	if p.kpagecgroup, err = openRead(filepath.Join(proc, "kpagecgroup")); err != nil {
		unix.Close(p.pagemap)
		return nil, err
	}
	return p, nil
}

// openRead opens path for reading.
func openRead(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// close closes both files.
func (p *pager) close() {
	unix.Close(p.pagemap)
	unix.Close(p.kpagecgroup)
}

// charge returns the inode of the memory cgroup that the first resident
// page of the file open as fd is charged to, and whether it has one. It
// touches only the page at the offset lseek(SEEK_DATA) gives, mapped alone,
// read-only and shared, and only when mincore says that page is in memory:
// a read fault on a hole would allocate a page, and one on a page swapped
// out would swap it in and charge it anew. A file without such a page
// (empty, sparse to its end, swapped out) has none: resident is false.
func (p *pager) charge(fd int) (memcg uint64, resident bool, err error) {
	off, err := unix.Seek(fd, 0, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lseek SEEK_DATA: %w", err)
	}
	off &^= int64(p.size - 1)
	mem, err := unix.Mmap(fd, off, p.size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, false, fmt.Errorf("mmap one page at %d: %w", off, err)
	}
	defer unix.Munmap(mem)
	if in, err := inCore(mem); err != nil || !in {
		return 0, false, err
	}
	pfn, err := p.frame(mem)
	if err != nil {
		return 0, false, err
	}
	memcg, err = p.memcg(pfn)
	return memcg, err == nil, err
}

// frame touches the mapped page mem and returns its page frame number from
// pagemap. It reads again, up to three times, a page reclaimed between the
// touch and the look-up.
func (p *pager) frame(mem []byte) (uint64, error) {
	const present, pfnMask = 1 << 63, 1<<55 - 1
	vaddr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	for range 3 {
		if !touch(mem) {
			return 0, fmt.Errorf("read of the page faulted (the file shrank meanwhile): %w", errChanged)
		}
		v, err := pread64(p.pagemap, int64(vaddr/uint64(p.size))*8)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Join(p.proc, "self", "pagemap"), err)
		}
		if v&present == 0 {
			continue
		}
		if v&pfnMask == 0 {
			return 0, fmt.Errorf("%s gives no page frame numbers (it needs CAP_SYS_ADMIN)", filepath.Join(p.proc, "self", "pagemap"))
		}
		return v & pfnMask, nil
	}
	return 0, fmt.Errorf("the page read is not present in %s", filepath.Join(p.proc, "self", "pagemap"))
}

// memcg returns the inode of the memory cgroup page frame pfn is charged
// to, from kpagecgroup (0 there: charged to none, which tells nothing).
func (p *pager) memcg(pfn uint64) (uint64, error) {
	path := filepath.Join(p.proc, "kpagecgroup")
	ino, err := pread64(p.kpagecgroup, int64(pfn)*8)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if ino == 0 {
		return 0, fmt.Errorf("%s: page frame %d is charged to no memory cgroup", path, pfn)
	}
	return ino, nil
}

// inCore tells whether the page mapped at mem is in memory, with
// mincore(2), which looks without faulting it in.
func inCore(mem []byte) (bool, error) {
	var vec [1]byte
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return false, fmt.Errorf("mincore: %w", errno)
	}
	return vec[0]&1 != 0, nil
}

// pread64 reads the 8-byte native-endian word at off of fd.
func pread64(fd int, off int64) (uint64, error) {
	var b [8]byte
	n, err := unix.Pread(fd, b[:], off)
	if err != nil {
		return 0, err
	}
	if n != len(b) {
		return 0, fmt.Errorf("read %d bytes at %d, want 8", n, off)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// touch reads the first word of mem, which the compiler cannot drop (an
// atomic load), so that the page is faulted into this process's page
// table. It tells whether the read worked: a file truncated below the page
// meanwhile makes it fault (SIGBUS), which it recovers from.
func touch(mem []byte) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			ok = false
		}
	}()
	_ = atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[0])))
	return true
}
