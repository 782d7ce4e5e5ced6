// Package logfile gives gpurun's components that sit on every container start
// (the runtime shim, the OCI hook) their log: JSON lines appended to the
// policy's log_file, opened only when the first record is written, and never
// able to fail a container start.
package logfile

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Open returns a JSON-lines logger writing to path, each record tagged with
// component and the process id, and a function that closes the file. The
// file (and its directory) is created on the first record, so invocations
// that log nothing never touch it; if it cannot be opened, records are
// dropped. An empty path discards every record.
func Open(path, component string) (*slog.Logger, func()) {
	if path == "" {
		return slog.New(slog.NewJSONHandler(io.Discard, nil)), func() {}
	}
	w := &lazyFile{path: path}
	return slog.New(slog.NewJSONHandler(w, nil)).With("component", component, "pid", os.Getpid()), w.close
}

// lazyFile is an append-only file opened on first write.
type lazyFile struct {
	path string
	f    *os.File
	err  error
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if l.f == nil && l.err == nil {
		l.f, l.err = os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if errors.Is(l.err, os.ErrNotExist) {
			if mkErr := os.MkdirAll(filepath.Dir(l.path), 0o755); mkErr == nil {
				l.f, l.err = os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
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
