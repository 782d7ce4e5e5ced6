// Package atomicfile replaces files so that readers never see half of one,
// and reads them whole, with direct system calls: it is on the path of every
// container start (gpurun-runtime, the OCI hook).
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Write replaces path with data atomically: a temporary file in the same
// directory, fsync, the mode of the file it replaces (else mode), rename
// over path, then fsync of the directory. A reader sees the old file or the
// new one, never a part. A failure before the rename leaves the old file as
// it was; a failed fsync of the directory after it is returned too: the new
// file is in place, but its name may not survive a crash.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFrom(path, bytes.NewReader(data), mode)
}

// WriteFrom is Write with the content streamed from r, for files too large
// to hold in memory at once (a binary copied onto a node).
//
// It makes its system calls itself rather than through os.File: on the
// path of every container start (gpurun-runtime rewrites config.json),
// os.CreateTemp and the files' poller set-up were ~30 µs of a cold start.
func WriteFrom(path string, r io.Reader, mode os.FileMode) (err error) {
	perm := uint32(mode.Perm())
	var st unix.Stat_t
	if unix.Stat(path, &st) == nil {
		perm = st.Mode & 0o777
	}
	dir := filepath.Dir(path)
	fd, tmp, err := createTemp(dir, "."+filepath.Base(path)+".gpurun-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		if err != nil {
			_ = unix.Unlink(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if _, err = io.Copy(fdWriter(fd), r); err != nil {
		return err
	}
	if err = unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: tmp, Err: err}
	}
	if err = unix.Fchmod(fd, perm); err != nil {
		return &os.PathError{Op: "chmod", Path: tmp, Err: err}
	}
	err, fd = unix.Close(fd), -1
	if err != nil {
		return &os.PathError{Op: "close", Path: tmp, Err: err}
	}
	if err = unix.Rename(tmp, path); err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err}
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable: fsync(2) of the directory.
func syncDir(dir string) error {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open directory to fsync", Path: dir, Err: err}
	}
	err = unix.Fsync(dfd)
	if cerr := unix.Close(dfd); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// createTemp creates a new file, mode 0600, named prefix and a random
// number in dir, and returns its descriptor and path.
func createTemp(dir, prefix string) (int, string, error) {
	for range 1000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		fd, err := unix.Open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return -1, "", &os.PathError{Op: "create temporary file", Path: name, Err: err}
		}
		return fd, name, nil
	}
	return -1, "", &os.PathError{Op: "create temporary file", Path: filepath.Join(dir, prefix+"*"), Err: unix.EEXIST}
}

// fdWriter writes to a file descriptor.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "write", Path: "temporary file", Err: err}
		}
		n += m
	}
	return n, nil
}
