// Package logfile gives gpurun's components that sit on every container start
// (the runtime shim, the OCI hook) their log: JSON lines appended to the
// policy's log_file, opened only when the first record is written, and never
// able to fail a container start.
package logfile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Open returns a JSON-lines logger writing to path, each record tagged with
// component and the process id and timed in UTC, and a function that
// closes the file. The file (and its directory) is created on the first
// record, so invocations that log nothing never touch it; if it cannot be
// opened, records are dropped. An empty path discards every record.
func Open(path, component string) (*slog.Logger, func()) {
	if path == "" {
		return slog.New(slog.NewJSONHandler(io.Discard, nil)), func() {}
	}
	w := &lazyFile{path: path, fd: -1}
	return slog.New(UTC(slog.NewJSONHandler(w, nil))).With("component", component, "pid", os.Getpid()), w.close
}

// UTC returns h with each record's time in UTC, as every writer of the
// policy's log_file records it. Besides reading the same on every node, it
// spares a process that writes one record and exits loading the local
// time zone (reading and parsing /etc/localtime, ~40 µs of a cold
// gpurun-runtime).
func UTC(h slog.Handler) slog.Handler { return utc{h} }

// utc is UTC's handler.
type utc struct{ slog.Handler }

func (h utc) Handle(ctx context.Context, r slog.Record) error {
	r.Time = r.Time.UTC()
	return h.Handler.Handle(ctx, r)
}

func (h utc) WithAttrs(attrs []slog.Attr) slog.Handler { return utc{h.Handler.WithAttrs(attrs)} }

func (h utc) WithGroup(name string) slog.Handler { return utc{h.Handler.WithGroup(name)} }

// lazyFile is an append-only file opened on first write. It makes its
// system calls itself rather than through os.File, whose poller set-up is
// on the path of every container start for nothing: the file is regular.
type lazyFile struct {
	path string
	fd   int // -1 until opened
	err  error
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if l.fd < 0 && l.err == nil {
		l.fd, l.err = openAppend(l.path)
		if errors.Is(l.err, unix.ENOENT) {
			if mkErr := os.MkdirAll(filepath.Dir(l.path), 0o755); mkErr == nil {
				l.fd, l.err = openAppend(l.path)
			}
		}
	}
	if l.err != nil {
		return len(p), nil // logging must never fail a container start
	}
	for n := 0; n < len(p); {
		m, err := unix.Write(l.fd, p[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return len(p), nil
}

func openAppend(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC, 0o640)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

func (l *lazyFile) close() {
	if l.fd >= 0 {
		_ = unix.Close(l.fd)
		l.fd = -1
	}
}
