package nri

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpurun/gpurun/internal/logfile"
)

// maxPending bounds the records a launched plugin keeps before it knows
// its log file.
const maxPending = 1 << 20

// Log is where the plugin's records go.
//
// A long-running plugin (systemd unit, DaemonSet) writes text records to
// stderr, where journald or the container log picks them up.
//
// A plugin the runtime launched from its plugin directory has its stderr
// discarded and its environment emptied, so it appends JSON lines to the
// policy's log_file (shared with gpurun-runtime and the hook). The runtime
// may pass it a policy that names another log_file, so its records are held
// in memory until Settle names the file of the policy in force (Plugin
// calls it through Config.OnConfigure), or until Close, which then uses the
// log_file it was created with.
type Log struct {
	mu       sync.Mutex
	launched bool
	stderr   io.Writer
	fallback string
	settled  bool
	path     string
	file     *os.File
	pending  []byte
	dropped  bool
}

// NewLog returns the plugin's log: records go to stderr unless launched,
// and logFile is the log_file of the policy the plugin starts with.
func NewLog(launched bool, logFile string, stderr io.Writer) *Log {
	return &Log{launched: launched, stderr: stderr, fallback: logFile}
}

// Logger returns a logger writing to l at level: text records on stderr,
// JSON lines timed in UTC in a launched plugin's log file.
func (l *Log) Logger(level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if !l.launched {
		return slog.New(slog.NewTextHandler(l, opts))
	}
	return slog.New(logfile.UTC(slog.NewJSONHandler(l, opts))).With("component", "gpurun-nri", "pid", os.Getpid())
}

// Write writes one record. It never fails: logging must not fail a
// container's creation.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.launched:
		_, _ = l.stderr.Write(p)
	case !l.settled:
		if len(l.pending)+len(p) <= maxPending {
			l.pending = append(l.pending, p...)
		} else {
			l.dropped = true
		}
	case l.file != nil:
		_, _ = l.file.Write(p)
	default:
		_, _ = l.stderr.Write(p)
	}
	return len(p), nil
}

// Settle names the log file of a launched plugin (the log_file of the
// policy in force once the runtime configured it) and writes the records
// held until now there. It does nothing for a long-running plugin, nor
// when the file stays the same.
func (l *Log) Settle(logFile string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle(logFile)
}

func (l *Log) settle(logFile string) {
	if !l.launched || (l.settled && logFile == l.path) {
		return
	}
	if l.file != nil {
		_ = l.file.Close()
		l.file = nil
	}
	l.settled, l.path = true, logFile
	if logFile != "" {
		if f, err := openAppend(logFile); err == nil {
			l.file = f
		}
	}
	w := l.stderr
	if l.file != nil {
		w = l.file
	}
	_, _ = w.Write(l.pending)
	if l.dropped {
		_, _ = io.WriteString(w, `{"level":"WARN","msg":"earlier records were dropped: too many before the runtime configured the plugin","component":"gpurun-nri"}`+"\n")
	}
	l.pending, l.dropped = nil, false
}

// Close writes records still held to the log file the plugin started
// with, and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.launched && !l.settled {
		l.settle(l.fallback)
	}
	if l.file != nil {
		err := l.file.Close()
		l.file = nil
		return err
	}
	return nil
}

func openAppend(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
}
