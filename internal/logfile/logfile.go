// Package logfile gives gpurun's components that sit on every container start
// (the runtime shim, the OCI hook) their log: JSON lines appended to the
// policy's log_file, opened only when the first record is written, and never
// able to fail a container start.
package logfile

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// Open returns a JSON-lines logger writing to path, each record tagged with
// component and the process id and timed in UTC, and a function that
// closes the file. The file (and its directory) is created on the first
// record, so invocations that log nothing never touch it; if it cannot be
// opened, records are dropped. An empty path discards every record.
func Open(path, component string) (*slog.Logger, func()) {
	if path == "" {
		return slog.New(slog.DiscardHandler), func() {}
	}
	w := &lazyFile{path: path}
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

// lazyFile is an append-only file opened on first write, by
// atomicfile.OpenFile: the runtime's poller is not set up for it.
type lazyFile struct {
	path string
	f    *os.File
	err  error
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if l.f == nil && l.err == nil {
		l.f, l.err = atomicfile.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if errors.Is(l.err, os.ErrNotExist) {
			if mkErr := os.MkdirAll(filepath.Dir(l.path), 0o755); mkErr == nil {
				l.f, l.err = atomicfile.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
			}
		}
	}
	if l.err != nil {
		return len(p), nil // logging must never fail a container start
	}
	return l.f.Write(p)
}

func (l *lazyFile) close() {
	if l.f != nil {
		_ = l.f.Close()
	}
}
