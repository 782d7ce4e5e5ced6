package shmstats

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// DefaultPeaksPath is where `gpurun stats` keeps the peaks it saw, so that
// successive runs (and the node agent) share them.
const DefaultPeaksPath = "/run/gpurun/shm-peaks.json"

// PeaksMaxAge is how long Save keeps a peak whose tmpfs nobody saw since:
// a tmpfs that went away leaves the file after that.
const PeaksMaxAge = 7 * 24 * time.Hour

// peaksVersion is the file format's version.
const peaksVersion = 1

// Peak is the highest use seen of one tmpfs.
type Peak struct {
	// Bytes is the highest Used seen.
	Bytes int64 `json:"bytes"`
	// At is when that was seen, Seen when the tmpfs was last seen at all.
	At   time.Time `json:"at"`
	Seen time.Time `json:"seen"`
}

// Peaks is a store of the highest /dev/shm use seen, keyed by the identity
// of the tmpfs (PeakKey: its owner — the pod sandbox, the IPC donor, the
// container — and its device), so that a container restarted in the same
// pod keeps its pod's peak. It is safe for concurrent use. With a path it
// is kept in a file (Save), which several processes may share.
type Peaks struct {
	mu   sync.Mutex
	path string
	m    map[string]Peak
	now  func() time.Time
}

// NewPeaks returns an empty store kept in memory only.
func NewPeaks() *Peaks {
	return &Peaks{m: map[string]Peak{}, now: time.Now}
}

// OpenPeaks returns a store kept in the file at path, loaded with what the
// file holds. A missing file is an empty store. A file that cannot be
// parsed gives an empty store too (Save replaces it) and an error naming
// the file, for the caller to warn about.
func OpenPeaks(path string) (*Peaks, error) {
	p := NewPeaks()
	p.path = path
	m, err := readPeaks(path)
	if err != nil {
		return p, err
	}
	p.m = m
	return p, nil
}

// PeakKey is the key of a tmpfs in Peaks: its owner's id (the pod sandbox,
// the container whose IPC namespace others join, else the container) and
// its device number.
func PeakKey(owner, device string) string {
	return owner + "@" + device
}

// Observe records that the tmpfs key holds used bytes now and returns the
// highest use seen of it, used included.
func (p *Peaks) Observe(key string, used int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	e := p.m[key]
	if used > e.Bytes || e.At.IsZero() {
		e.Bytes, e.At = max(used, e.Bytes), now
	}
	e.Seen = now
	p.m[key] = e
	return e.Bytes
}

// Get returns the peak recorded for key.
func (p *Peaks) Get(key string) (Peak, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[key]
	return e, ok
}

// Forget drops the keys for which keep returns false (tmpfs that went
// away, for a sampler that holds peaks in memory only).
func (p *Peaks) Forget(keep func(key string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.m {
		if !keep(k) {
			delete(p.m, k)
		}
	}
}

// Save writes the store to its file (a store without a path saves
// nothing). It holds an flock on <path>.lock while it merges what the file
// holds now — another process may have saved since Open — keeping the
// higher of each peak, drops peaks not seen for PeaksMaxAge, and replaces
// the file atomically. A corrupt file is replaced.
func (p *Peaks) Save() error {
	if p.path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o755); err != nil {
		return fmt.Errorf("save peaks: %w", err)
	}
	lock, err := os.OpenFile(p.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("save peaks: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("save peaks: lock %s: %w", lock.Name(), err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN) //nolint:errcheck // closing unlocks too

	disk, _ := readPeaks(p.path) // a corrupt file is replaced
	p.mu.Lock()
	defer p.mu.Unlock()
	cutoff := p.now().Add(-PeaksMaxAge)
	for k, d := range disk {
		e, ok := p.m[k]
		if !ok {
			p.m[k] = d
			continue
		}
		if d.Bytes > e.Bytes {
			e.Bytes, e.At = d.Bytes, d.At
		}
		if d.Seen.After(e.Seen) {
			e.Seen = d.Seen
		}
		p.m[k] = e
	}
	for k, e := range p.m {
		if e.Seen.Before(cutoff) {
			delete(p.m, k)
		}
	}
	data, err := json.MarshalIndent(peaksFile{Version: peaksVersion, Peaks: p.m}, "", "  ")
	if err != nil {
		return fmt.Errorf("save peaks: %w", err)
	}
	if err := atomicfile.Write(p.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("save peaks %s: %w", p.path, err)
	}
	return nil
}

// peaksFile is the file's form.
type peaksFile struct {
	Version int             `json:"version"`
	Peaks   map[string]Peak `json:"peaks"`
}

// readPeaks reads a peaks file; a missing one is empty.
func readPeaks(path string) (map[string]Peak, error) {
	m := map[string]Peak{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read peaks: %w", err)
	}
	var f peaksFile
	if err := json.Unmarshal(data, &f); err != nil {
		return m, fmt.Errorf("read peaks %s: %w (it is replaced on the next save)", path, err)
	}
	if f.Version != peaksVersion {
		return m, fmt.Errorf("read peaks %s: version %d, want %d (it is replaced on the next save)", path, f.Version, peaksVersion)
	}
	for k, e := range f.Peaks {
		if e.Bytes >= 0 {
			m[k] = e
		}
	}
	return m, nil
}
