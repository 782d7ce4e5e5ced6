package records

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Pos is a place in a log file: its inode and a byte offset just after a
// whole line. A saved Pos lets a restarted reader go on where it stopped.
type Pos struct {
	Inode  uint64 `json:"inode"`
	Offset int64  `json:"offset"`
}

// maxLine bounds one record's line; a longer one is dropped.
const maxLine = 1 << 20

// Tail follows a log_file that per-start front doors append to and that
// logrotate may rotate (rename and create, or copytruncate). It reads only
// whole lines, so a record being written is read once it is complete, and
// never reads a line twice. It is not safe for concurrent use.
type Tail struct {
	path    string
	f       *os.File
	ino     uint64
	off     int64
	partial []byte
	skip    bool // dropping the rest of an over-long line
}

// NewTail returns a Tail of path that starts at from when it is a place in
// the file now at path (same inode, not beyond its end), else at the end of
// the file: records written before are not read. The file is opened here,
// so a rotation before the first Read loses nothing. A missing file is read
// from its start once it appears.
func NewTail(path string, from *Pos) *Tail {
	t := &Tail{path: path}
	f, err := os.Open(path)
	if err != nil {
		return t
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return t
	}
	t.f = f
	ino := inode(fi)
	t.ino, t.off = ino, fi.Size()
	if from != nil && from.Inode == ino && from.Offset <= fi.Size() {
		t.off = from.Offset
	}
	return t
}

// Pos returns the place after the last whole line read.
func (t *Tail) Pos() Pos { return Pos{Inode: t.ino, Offset: t.off - int64(len(t.partial))} }

// Read reads the whole lines appended since the last Read and hands each
// record to fn. After a rotation it finishes the old file before it reads
// the new one from its start; after a truncation it starts again at the
// start. Lines that are not records are skipped; bad lines are counted in
// the returned error, which does not stop the reading.
func (t *Tail) Read(fn func(Record)) error {
	var bad int
	emit := func(l []byte) {
		if len(bytes.TrimSpace(l)) == 0 {
			return
		}
		r, ok, err := Parse(l)
		switch {
		case err != nil:
			bad++
		case ok:
			fn(r)
		}
	}
	for {
		fi, err := os.Stat(t.path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tail %s: %w", t.path, err)
		}
		if t.f == nil {
			if err != nil {
				return nil // not there yet
			}
			f, err := os.Open(t.path)
			if err != nil {
				return fmt.Errorf("tail %s: %w", t.path, err)
			}
			ofi, err := f.Stat()
			if err != nil {
				f.Close()
				return fmt.Errorf("tail %s: %w", t.path, err)
			}
			if inode(ofi) != t.ino {
				t.ino, t.off, t.partial = inode(ofi), 0, nil // a file we have not read
			}
			t.f = f
		}
		// The open file: truncated in place?
		ofi, serr := t.f.Stat()
		if serr == nil && ofi.Size() < t.off {
			t.off, t.partial, t.skip = 0, nil, false
		}
		if err := t.drain(emit); err != nil {
			return err
		}
		// Renamed away with no new file yet (err != nil): the old file is
		// kept open and read again until a new one appears.
		if err != nil || inode(fi) == t.ino {
			return badLines(t.path, bad)
		}
		// Rotated: the old file is finished; the new one is read from its
		// start. A partial last line of the old file is dropped.
		t.f.Close()
		t.f, t.ino, t.off, t.partial, t.skip = nil, 0, 0, nil, false
	}
}

// drain reads the open file from t.off to its end.
func (t *Tail) drain(emit func([]byte)) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := t.f.ReadAt(buf, t.off)
		if n > 0 {
			t.off += int64(n)
			t.consume(buf[:n], emit)
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tail %s: %w", t.path, err)
		}
	}
}

// consume splits data into lines, keeping an incomplete last one.
func (t *Tail) consume(data []byte, emit func([]byte)) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !t.skip {
				t.partial = append(t.partial, data...)
				if len(t.partial) > maxLine {
					t.partial, t.skip = nil, true
				}
			}
			return
		}
		if !t.skip {
			if len(t.partial) > 0 {
				emit(append(t.partial, data[:i]...))
			} else {
				emit(data[:i])
			}
		}
		t.partial, t.skip = t.partial[:0], false
		data = data[i+1:]
	}
}

// Close closes the file.
func (t *Tail) Close() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f = nil
	return err
}

func badLines(path string, n int) error {
	if n == 0 {
		return nil
	}
	return fmt.Errorf("tail %s: %d lines are not JSON records", path, n)
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
