package shmsweep

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// shmDirFile is the file in a sandbox's state directory that names its
// ShmDir. Its leading dot keeps it apart from container names, which
// cannot start with one.
const shmDirFile = ".shmdir"

// recordMagic starts every record: what it is, and its format's version.
const recordMagic = "gpurun-shmsweep 2\n"

// ErrBadName is a sandbox id or container name that is not a path
// component the state directory can use.
var ErrBadName = errors.New("not usable as a name in the state directory")

// checkName refuses a name that is not one plain path component: empty,
// with a "/" or a NUL, longer than NAME_MAX, or starting with a dot ("."
// and ".." and the package's own files).
func checkName(what, name string) error {
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("%s %q: %w", what, name, ErrBadName)
	}
	return nil
}

// record is one container's snapshot: the device of the pod's /dev/shm
// and the inode numbers of its regular files when the container started,
// sorted; and what the sweeps at its restarts have removed so far.
type record struct {
	dev    uint64
	inodes []uint64
	swept  Totals
}

// Totals are what the sweeps removed from a pod's /dev/shm so far.
type Totals struct {
	Bytes, Files int64
}

// encode writes r compactly: the magic line, then as unsigned varints the
// swept bytes and files, the device, the count and the inodes' differences
// (consecutive inodes, as tmpfs hands them out, take a byte each).
func (r record) encode() []byte {
	b := make([]byte, 0, len(recordMagic)+4*binary.MaxVarintLen64+2*len(r.inodes))
	b = append(b, recordMagic...)
	b = binary.AppendUvarint(b, uint64(r.swept.Bytes))
	b = binary.AppendUvarint(b, uint64(r.swept.Files))
	b = binary.AppendUvarint(b, r.dev)
	b = binary.AppendUvarint(b, uint64(len(r.inodes)))
	prev := uint64(0)
	for _, ino := range r.inodes {
		b = binary.AppendUvarint(b, ino-prev)
		prev = ino
	}
	return b
}

// decodeRecord reads what encode wrote.
func decodeRecord(b []byte) (record, error) {
	rest, ok := bytes.CutPrefix(b, []byte(recordMagic))
	if !ok {
		return record{}, fmt.Errorf("not a %s record", strings.TrimSpace(recordMagic))
	}
	var v [4]uint64 // swept bytes, swept files, device, count
	for i := range v {
		n := 0
		if v[i], n = binary.Uvarint(rest); n <= 0 {
			return record{}, errors.New("truncated record")
		}
		rest = rest[n:]
	}
	if v[3] > uint64(len(rest)) || v[0] > 1<<62 || v[1] > 1<<62 {
		return record{}, errors.New("truncated record")
	}
	r := record{swept: Totals{Bytes: int64(v[0]), Files: int64(v[1])}, dev: v[2], inodes: make([]uint64, 0, v[3])}
	prev := uint64(0)
	for range v[3] {
		d, n := binary.Uvarint(rest)
		if n <= 0 || (len(r.inodes) > 0 && d == 0) {
			return record{}, errors.New("truncated or unsorted record")
		}
		rest, prev = rest[n:], prev+d
		r.inodes = append(r.inodes, prev)
	}
	if len(rest) != 0 {
		return record{}, errors.New("trailing bytes after the record")
	}
	return r, nil
}

// store is where one container's record lives.
type store struct {
	dir       string // Options.StateDir
	sandbox   string
	container string
}

// sandboxDir is the directory of the sandbox's records.
func (s store) sandboxDir() string { return filepath.Join(s.dir, s.sandbox) }

// path is the container's record.
func (s store) path() string { return filepath.Join(s.dir, s.sandbox, s.container) }

// ensureSandbox makes the sandbox's directory and its .shmdir naming
// shmDir, unless they are there already (one read on the common path).
// It tells whether it made the directory: the sandbox's first record.
func (s store) ensureSandbox(shmDir string) (created bool, err error) {
	name := filepath.Join(s.sandboxDir(), shmDirFile)
	if b, err := atomicfile.ReadFile(name); err == nil && string(b) == shmDir {
		return false, nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return false, fmt.Errorf("state directory: %w", err)
	}
	switch err := unix.Mkdir(s.sandboxDir(), 0o700); {
	case err == nil:
		created = true
	case !errors.Is(err, unix.EEXIST):
		return false, fmt.Errorf("state directory: %w", &fs.PathError{Op: "mkdir", Path: s.sandboxDir(), Err: err})
	}
	if err := atomicfile.Write(name, []byte(shmDir), 0o600); err != nil {
		return created, fmt.Errorf("state directory: %w", err)
	}
	return created, nil
}

// read returns the container's record, and whether there is one.
func (s store) read() (record, bool, error) {
	b, err := atomicfile.ReadFile(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("read record: %w", err)
	}
	r, err := decodeRecord(b)
	if err != nil {
		return record{}, false, fmt.Errorf("read record %s: %w", s.path(), err)
	}
	return r, true, nil
}

// write replaces the container's record with r, atomically.
func (s store) write(r record) error {
	if err := atomicfile.Write(s.path(), r.encode(), 0o600); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// Forget drops every record of the sandbox sandboxID: the caller calls it
// when the sandbox is deleted. A sandbox without records is no error.
func Forget(o Options, sandboxID string) error {
	o = o.withDefaults()
	if err := checkName("sandbox id", sandboxID); err != nil {
		return err
	}
	dir := filepath.Join(o.StateDir, sandboxID)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("forget sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// GC drops the records of every sandbox whose recorded ShmDir no longer
// exists (a pod deleted while nothing called Forget), and returns how many
// sandboxes it dropped. The caller runs it when a sandbox's first record is
// made (Result.NewSandbox). A sandbox directory without its ShmDir
// recorded (one being made now) is left alone; Forget drops it.
func GC(o Options) (removed int, err error) {
	o = o.withDefaults()
	fd, err := openDir(unix.AT_FDCWD, o.StateDir)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("gc %s: %w", o.StateDir, err)
	}
	ents, err := readDirents(fd)
	unix.Close(fd)
	if err != nil {
		return 0, fmt.Errorf("gc %s: %w", o.StateDir, err)
	}
	var errs []error
	for _, e := range ents {
		if (e.typ != unix.DT_DIR && e.typ != unix.DT_UNKNOWN) || checkName("sandbox id", e.name) != nil {
			continue
		}
		dir := filepath.Join(o.StateDir, e.name)
		if !shmDirGone(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("gc %s: %w", o.StateDir, err)
	}
	return removed, nil
}

// GCInterval is how often GCDue runs GC at most: a pod gone meanwhile
// keeps its records (a few hundred bytes in a tmpfs) that much longer,
// and a node starting a hundred pods at once reads every pod's records
// once, not at each pod's first start.
const GCInterval = time.Minute

// gcStamp, in the state dir, is when GCDue last ran GC (its mtime).
const gcStamp = ".gc"

// GCDue runs GC when none has run for every (by the state dir's stamp,
// which it then sets to now), and says whether it ran. Its caller calls it
// at a sandbox's first start, as it would GC.
func GCDue(o Options, every time.Duration, now time.Time) (removed int, ran bool, err error) {
	o = o.withDefaults()
	stamp := filepath.Join(o.StateDir, gcStamp)
	var st unix.Stat_t
	if err := unix.Stat(stamp, &st); err == nil && now.Sub(time.Unix(st.Mtim.Unix())) < every {
		return 0, false, nil
	}
	if err := setMtime(stamp, now); err != nil {
		return 0, false, fmt.Errorf("gc %s: %w", o.StateDir, err)
	}
	removed, err = GC(o)
	return removed, true, err
}

// setMtime sets file's mtime to t, creating it (empty) where it is not.
func setMtime(file string, t time.Time) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(file, t, t)
}

// shmDirGone tells whether the sandbox directory dir records a ShmDir
// that no longer exists.
func shmDirGone(dir string) bool {
	b, err := atomicfile.ReadFile(filepath.Join(dir, shmDirFile))
	if err != nil || !filepath.IsAbs(string(b)) {
		return false
	}
	_, err = os.Lstat(string(b))
	return errors.Is(err, fs.ErrNotExist)
}

// Swept returns what the sweeps have removed from the pod sandboxID's
// /dev/shm so far, over its containers' records: for `gpurun stats`. A
// sandbox without records has swept nothing (no error); a record that
// cannot be read is left out, and its error returned with the rest.
func Swept(o Options, sandboxID string) (Totals, error) {
	o = o.withDefaults()
	if err := checkName("sandbox id", sandboxID); err != nil {
		return Totals{}, err
	}
	dir := filepath.Join(o.StateDir, sandboxID)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Totals{}, nil
	}
	if err != nil {
		return Totals{}, fmt.Errorf("sweep records: %w", err)
	}
	var t Totals
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		r, found, err := store{dir: o.StateDir, sandbox: sandboxID, container: e.Name()}.read()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if found {
			t.Bytes += r.swept.Bytes
			t.Files += r.swept.Files
		}
	}
	return t, errors.Join(errs...)
}
