package shmsweep

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"

	"golang.org/x/sys/unix"
)

// ID is a file's identity: its device and inode number.
type ID struct{ Dev, Ino uint64 }

// Held returns which of files (by device, then inode number, as Walk gives
// them) some process under proc holds: has open (every descriptor in
// /proc/<pid>/fd, whose stat follows the magic link to the file, in
// whatever mount namespace) or mapped (/proc/<pid>/maps names the device
// and inode of every mapped file). A process that exits during the scan is
// left out. One that cannot be read for another reason (no privilege) is
// skipped too, and the error, an *UnreadError, names them all: the map then
// holds what the others hold, and a caller that must not miss a holder
// either treats the scan as failed or rules those processes out itself.
//
// It reads every process: a scan of a node costs milliseconds to tens of
// them, so callers scan only when there is something to ask about.
func Held(proc string, files map[uint64]map[uint64]File) (map[ID]bool, error) {
	sc := scanner{files: files, held: map[ID]bool{}, buf: make([]byte, 8<<10)}
	fd, err := openDir(unix.AT_FDCWD, proc)
	if err != nil {
		return sc.held, fmt.Errorf("held files: %w", &fs.PathError{Op: "open directory", Path: proc, Err: err})
	}
	ents, err := readDirents(fd)
	unix.Close(fd)
	if err != nil {
		return sc.held, fmt.Errorf("held files: %w", &fs.PathError{Op: "read directory", Path: proc, Err: err})
	}
	var unread UnreadError
	for _, e := range ents {
		if !isPID(e.name) {
			continue
		}
		if err := sc.process(proc + "/" + e.name); err != nil {
			unread.PIDs = append(unread.PIDs, e.name)
			if unread.Err == nil {
				unread.Err = err
			}
		}
	}
	if unread.Err != nil {
		return sc.held, &unread
	}
	return sc.held, nil
}

// UnreadError is a scan of the processes that could not read some of them
// (Held): their pids, and the first reason.
type UnreadError struct {
	PIDs []string
	Err  error
}

func (e *UnreadError) Error() string {
	return fmt.Sprintf("held files: %d process(es) not readable (pid %s): %v", len(e.PIDs), strings.Join(e.PIDs, ", "), e.Err)
}

func (e *UnreadError) Unwrap() error { return e.Err }

// scanner is one scan of the processes: what it asks about, what it
// found, and the buffers it reuses from one process to the next.
type scanner struct {
	files map[uint64]map[uint64]File
	held  map[ID]bool
	buf   []byte // for getdents(2)
	maps  []byte // for /proc/<pid>/maps
}

// isPID tells whether a name in /proc is a process's.
func isPID(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return name != ""
}

// exited tells whether err says the process went away.
func exited(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// has tells whether id is among files.
func has(files map[uint64]map[uint64]File, id ID) bool {
	_, ok := files[id.Dev][id.Ino]
	return ok
}

// process marks the files the process at pdir (/proc/<pid>) holds.
func (sc *scanner) process(pdir string) error {
	if err := sc.opened(pdir + "/fd"); err != nil {
		return err
	}
	err := sc.readMaps(pdir + "/maps")
	if exited(err) {
		return nil
	}
	if err != nil {
		return err
	}
	markMapped(sc.maps, sc.files, sc.held)
	return nil
}

// readMaps reads the maps file path whole into sc.maps.
func (sc *scanner) readMaps(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	sc.maps = sc.maps[:0]
	for {
		if len(sc.maps) == cap(sc.maps) {
			sc.maps = append(sc.maps, make([]byte, max(16<<10, cap(sc.maps)))...)[:len(sc.maps)]
		}
		n, err := unix.Read(fd, sc.maps[len(sc.maps):cap(sc.maps)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n <= 0 {
			return nil
		}
		sc.maps = sc.maps[:len(sc.maps)+n]
	}
}

// opened marks the files open in the descriptor directory dir: statx of
// each entry, which follows the magic link.
func (sc *scanner) opened(dir string) error {
	fd, err := openDir(unix.AT_FDCWD, dir)
	if exited(err) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "open directory", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var serr error
	err = scanDirents(fd, sc.buf, func(name []byte, _ uint64, _ uint8) bool {
		id, err := statID(fd, string(name))
		if err != nil && !exited(err) { // exited: closed meanwhile
			serr = &fs.PathError{Op: "stat", Path: dir + "/" + string(name), Err: err}
			return false
		}
		if err == nil && has(sc.files, id) {
			sc.held[id] = true
		}
		return true
	})
	if serr != nil {
		return serr
	}
	if err != nil && !exited(err) {
		return &fs.PathError{Op: "read directory", Path: dir, Err: err}
	}
	return nil
}

// statID returns the identity of the file that the entry name of the
// directory dirfd leads to (a descriptor's magic link followed), with
// statx(AT_STATX_DONT_SYNC): a descriptor of a file on a network
// filesystem costs no round trip.
func statID(dirfd int, name string) (ID, error) {
	var sx unix.Statx_t
	err := unix.Statx(dirfd, name, unix.AT_STATX_DONT_SYNC, unix.STATX_INO, &sx)
	if errors.Is(err, unix.ENOSYS) {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, 0); err != nil {
			return ID{}, err
		}
		return ID{st.Dev, st.Ino}, nil
	}
	if err != nil {
		return ID{}, err
	}
	return ID{unix.Mkdev(sx.Dev_major, sx.Dev_minor), sx.Ino}, nil
}

// markMapped marks in held the files that the lines of a /proc/<pid>/maps
// ("addr perms offset maj:min inode path", the device in hexadecimal) map.
func markMapped(data []byte, files map[uint64]map[uint64]File, held map[ID]bool) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if id, ok := parseMapsLine(line); ok && has(files, id) {
			held[id] = true
		}
	}
}

// parseMapsLine returns the device and inode a maps line names; false for
// an anonymous mapping (inode 0) or a line it does not understand.
func parseMapsLine(line []byte) (ID, bool) {
	var f [5][]byte
	for i := range f {
		line = bytes.TrimLeft(line, " ")
		j := bytes.IndexByte(line, ' ')
		if j < 0 {
			j = len(line)
		}
		f[i], line = line[:j], line[j:]
	}
	maj, min, ok := bytes.Cut(f[3], []byte{':'})
	if !ok {
		return ID{}, false
	}
	ma, ok1 := parseUint(maj, 16)
	mi, ok2 := parseUint(min, 16)
	ino, ok3 := parseUint(f[4], 10)
	if !ok1 || !ok2 || !ok3 || ino == 0 || ma > 1<<32-1 || mi > 1<<32-1 {
		return ID{}, false
	}
	return ID{unix.Mkdev(uint32(ma), uint32(mi)), ino}, true
}

// parseUint parses b as an unsigned number in base 10 or 16, without the
// allocation of a string.
func parseUint(b []byte, base uint64) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if n > (math.MaxUint64-d)/base {
			return 0, false // overflows
		}
		n = n*base + d
	}
	return n, true
}
