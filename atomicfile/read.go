package atomicfile

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// ReadFile returns the whole content of path, as os.ReadFile does, and its
// errors are *fs.PathError as os.ReadFile's (errors.Is(err,
// fs.ErrNotExist) holds for a missing file). It makes its system calls
// itself: the first os.File of a process sets up the runtime's poller
// (epoll, an eventfd, a registration refused for a regular file), which
// gpurun-runtime, reading two small files and exiting, has no use for.
func ReadFile(path string) ([]byte, error) {
	fd, err := openRead(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	size := 512 // files of /proc and /sys say 0
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Size > 0 {
		size = int(st.Size) + 1 // one more, to see the end in one read
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

func openRead(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
