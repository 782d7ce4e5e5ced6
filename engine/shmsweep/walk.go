package shmsweep

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// ShmPrefix is what File.Name starts with: the files are named as the
// containers see them.
const ShmPrefix = "/dev/shm/"

// maxDepth is how deep a walk descends below its directory; a file deeper
// is not seen (never a candidate). It bounds the descriptors a walk holds.
const maxDepth = 64

// File is a regular file in a pod's /dev/shm.
type File struct {
	// Name is its path as the containers see it, e.g. "/dev/shm/nccl-abc"
	// or "/dev/shm/ray/session/plasma".
	Name string
	// Bytes is what it holds in memory or swap: st_blocks × 512.
	Bytes int64
}

// rel is the file's path relative to the directory walked.
func (f File) rel() string { return strings.TrimPrefix(f.Name, ShmPrefix) }

// Walk returns the device of the directory dir and the regular files below
// it (at any depth, up to 64 levels) on that device, by inode number. It
// never follows a symbolic link (dir itself included) and never descends
// into another filesystem mounted below dir. A file or directory that goes
// away during the walk is left out; any other error fails the walk.
func Walk(dir string) (dev uint64, files map[uint64]File, err error) {
	fd, dev, err := openRoot(dir)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(fd)
	w, err := walkFD(fd, dir, dev, true, nil)
	if err != nil {
		return 0, nil, err
	}
	return dev, w.files, nil
}

// openRoot opens dir as a directory, not following a symbolic link at its
// end, and returns its descriptor and device.
func openRoot(dir string) (int, uint64, error) {
	fd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return -1, 0, &fs.PathError{Op: "open directory", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	return fd, st.Dev, nil
}

// walkFD walks the directory open as fd (named dir in errors). Unless
// sized, it takes a regular file's inode from its directory entry (on a
// tmpfs d_ino is st_ino) and stats none: its Bytes are 0, and a file
// mounted over one of them is not told apart. named says which files to
// name in walker.files (nil: all); walker.inos has every one's inode. A
// sweep's walk of 10,000 files it knows is then a few getdents(2) calls,
// no fstatat(2), and no name copied.
func walkFD(fd int, dir string, dev uint64, sized bool, named func(ino uint64) bool) (*walker, error) {
	w := &walker{dir: dir, dev: dev, sized: sized, named: named, files: map[uint64]File{}, buf: make([]byte, 64<<10)}
	if err := w.walk(fd, "", 0); err != nil {
		return nil, fmt.Errorf("walk %s: %w", dir, err)
	}
	return w, nil
}

// walker collects the regular files of one device below a directory.
type walker struct {
	dir   string
	dev   uint64
	sized bool
	named func(ino uint64) bool
	files map[uint64]File // the files named
	inos  []uint64        // the inode of every regular file seen (twice for a file linked twice)
	buf   []byte          // for getdents(2), reused
}

// walk reads the directory open as fd, at rel ("" or ending in "/"), then
// descends into its directories.
func (w *walker) walk(fd int, rel string, depth int) error {
	var subdirs []string
	var ferr error
	err := scanDirents(fd, w.buf, func(name []byte, ino uint64, typ uint8) bool {
		var dir bool
		if dir, ferr = w.entry(fd, rel, name, ino, typ); dir {
			subdirs = append(subdirs, string(name))
		}
		return ferr == nil
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return &fs.PathError{Op: "read directory", Path: w.dir + "/" + rel, Err: err}
	}
	for _, d := range subdirs {
		if err := w.descend(fd, rel, d, depth); err != nil {
			return err
		}
	}
	return nil
}

// entry records the entry name if it is a regular file of the device,
// and tells whether it is a directory to descend into.
func (w *walker) entry(fd int, rel string, name []byte, ino uint64, typ uint8) (bool, error) {
	switch typ {
	case unix.DT_DIR:
		return true, nil
	case unix.DT_REG:
		if !w.sized {
			w.add(ino, rel, name, 0)
			return false, nil
		}
	case unix.DT_UNKNOWN:
	default:
		return false, nil // a symbolic link, socket, fifo or device node
	}
	var st unix.Stat_t
	err := unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &fs.PathError{Op: "stat", Path: w.dir + "/" + rel + string(name), Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Dev == w.dev {
			w.add(st.Ino, rel, name, st.Blocks*512)
		}
	case unix.S_IFDIR:
		return true, nil
	}
	return false, nil
}

// add records a regular file, named if named says so.
func (w *walker) add(ino uint64, rel string, name []byte, size int64) {
	w.inos = append(w.inos, ino)
	if w.named == nil || w.named(ino) {
		w.files[ino] = File{Name: ShmPrefix + rel + string(name), Bytes: size}
	}
}

// descend walks the directory name in the directory open as fd, if it is
// on the device and not too deep.
func (w *walker) descend(fd int, rel, name string, depth int) error {
	if depth+1 >= maxDepth {
		return nil
	}
	sub, err := openDir(fd, name)
	if gone(err) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "open directory", Path: w.dir + "/" + rel + name, Err: err}
	}
	defer unix.Close(sub)
	var st unix.Stat_t
	if err := unix.Fstat(sub, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: w.dir + "/" + rel + name, Err: err}
	}
	if st.Dev != w.dev {
		return nil // another filesystem mounted there
	}
	return w.walk(sub, rel+name+"/", depth+1)
}

// gone tells whether err says that a name no longer is what a walk saw:
// removed, or replaced by a symbolic link or a non-directory.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)
}

// openDir opens name in the directory dirfd as a directory, not following
// a symbolic link at its end.
func openDir(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// dirent is a directory entry: its name, inode and type (unix.DT_*).
type dirent struct {
	name string
	ino  uint64
	typ  uint8
}

// readDirents returns the entries of the directory open as fd, "." and
// ".." left out, with getdents(2): no os.File, no sorting.
func readDirents(fd int) ([]dirent, error) {
	var out []dirent
	err := scanDirents(fd, make([]byte, 8<<10), func(name []byte, ino uint64, typ uint8) bool {
		out = append(out, dirent{name: string(name), ino: ino, typ: typ})
		return true
	})
	return out, err
}

// scanDirents calls fn for each entry of the directory open as fd, read
// with getdents64(2) into buf, "." and ".." and deleted entries left out,
// until fn returns false. name is valid during the call only.
func scanDirents(fd int, buf []byte, fn func(name []byte, ino uint64, typ uint8) bool) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 || !eachDirent(buf[:n], fn) {
			return nil
		}
	}
}

// eachDirent calls fn for the linux_dirent64 records of b: d_ino (8
// bytes), d_off (8), d_reclen (2), d_type (1), the name (NUL-terminated).
// It tells whether fn wants more.
func eachDirent(b []byte, fn func(name []byte, ino uint64, typ uint8) bool) bool {
	const nameOff = 19
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			break
		}
		ino, typ, name := binary.NativeEndian.Uint64(b[0:8]), b[18], b[nameOff:reclen]
		b = b[reclen:]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if ino == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		if !fn(name, ino, typ) {
			return false
		}
	}
	return true
}

// parentAt opens the directory that holds rel (a path relative to the
// directory open as root, "/"-separated), one component at a time from
// root, following no symbolic link and leaving no filesystem (dev), and
// returns its descriptor (root itself, not to be closed, when rel has no
// directory) and rel's last component.
func parentAt(root int, dev uint64, rel string) (fd int, base string, err error) {
	dir, base := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, base = rel[:i], rel[i+1:]
	}
	fd = root
	for c := range strings.SplitSeq(dir, "/") {
		if c == "" {
			continue
		}
		next, err := openDir(fd, c)
		if fd != root {
			unix.Close(fd)
		}
		if err != nil {
			return -1, "", err
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Dev != dev {
			unix.Close(fd)
			return -1, "", unix.EXDEV
		}
	}
	return fd, base, nil
}

// statAt returns the size of the regular file rel below the directory
// open as root (st_blocks × 512), reached as removeAt reaches it, or
// errChanged when its name no longer holds inode ino of device dev.
func statAt(root int, dev, ino uint64, rel string) (int64, error) {
	fd, base, err := parentAt(root, dev, rel)
	if err != nil {
		if gone(err) || errors.Is(err, unix.EXDEV) {
			return 0, errChanged
		}
		return 0, err
	}
	if fd != root {
		defer unix.Close(fd)
	}
	var st unix.Stat_t
	err = unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != dev || st.Ino != ino) {
		return 0, errChanged
	}
	if err != nil {
		return 0, &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	return st.Blocks * 512, nil
}

// errChanged is a candidate whose name no longer holds the inode judged.
var errChanged = fmt.Errorf("replaced since the walk: %w", fs.ErrNotExist)

// removeAt removes the regular file rel below the directory open as root,
// only if its name still holds inode ino of device dev. It tells whether it
// removed it; a file gone or replaced meanwhile is no error.
func removeAt(root int, dev, ino uint64, rel string) (bool, error) {
	fd, base, err := parentAt(root, dev, rel)
	if err != nil {
		if gone(err) || errors.Is(err, unix.EXDEV) {
			return false, nil
		}
		return false, err
	}
	if fd != root {
		defer unix.Close(fd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != dev || st.Ino != ino {
		return false, nil
	}
	if err := unix.Unlinkat(fd, base, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// openFileAt opens the regular file rel below the directory open as root
// for reading, as removeAt reaches it, and only if it still is inode ino of
// device dev (else an error matching fs.ErrNotExist), and returns its
// descriptor. O_NOATIME where allowed: reading a candidate changes nothing
// about it.
func openFileAt(root int, dev, ino uint64, rel string) (int, error) {
	fd, base, err := parentAt(root, dev, rel)
	if err != nil {
		if gone(err) || errors.Is(err, unix.EXDEV) {
			return -1, errChanged
		}
		return -1, err
	}
	if fd != root {
		defer unix.Close(fd)
	}
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	f, err := unix.Openat(fd, base, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		f, err = unix.Openat(fd, base, flags, 0)
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return -1, errChanged
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != dev || st.Ino != ino {
		unix.Close(f)
		return -1, errChanged
	}
	return f, nil
}
