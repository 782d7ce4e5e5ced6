package atomicfile

import (
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// OpenFile opens path as os.OpenFile does (O_CLOEXEC added), but as a file
// the runtime's poller never sees: the first os.File that os.OpenFile
// makes in a process sets up the poller (epoll, an eventfd, a registration
// the kernel refuses for a regular file), which gpurun-runtime and the
// hook, reading two small files, appending one line and exiting, have no
// use for. The *os.File reads and writes as any other.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// ReadFile returns the whole content of path, as os.ReadFile does, with
// the same *fs.PathError errors, from a file OpenFile opens. Like
// os.ReadFile it sizes its buffer from fstat(2), one byte more than the
// file so that a second read sees the end: a 9 KB config.json on tmpfs is
// two reads, where io.ReadAll's growing buffer made ten. A file whose size
// stat does not tell (procfs) is read on until its end all the same.
func ReadFile(path string) ([]byte, error) {
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := 512
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() < 1<<30 {
		size = max(size, int(fi.Size())+1)
	}
	data := make([]byte, 0, size)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return data, err
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}
