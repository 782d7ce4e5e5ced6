package shmstats

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/node/specfile"
)

// Specs keeps the runtime specs Collect reads, so that a sampler that
// collects every few seconds parses each running container's config.json
// once instead of at every sample (the parse was most of a sample's time).
// An engine writes config.json before the container starts (gpurun-runtime's
// rewrite included) and not again while it runs; an entry serves only while
// the file is the same one (device and inode), of the same size and
// modification time, and entries that a Collect did not use are dropped at
// its end. Specs is safe for concurrent use; a nil *Specs reads every time.
// The specs it returns are shared: Collect only reads them.
type Specs struct {
	mu sync.Mutex
	m  map[string]specEntry
}

// specEntry is one cached config.json: the file it was read from and its
// spec.
type specEntry struct {
	file fileVersion
	spec *specs.Spec
}

// fileVersion tells a version of a file from another: the file (its device
// and inode), its size and its modification time.
type fileVersion struct {
	fileID
	size  int64
	mtime int64 // ns since the epoch
}

// NewSpecs returns an empty cache.
func NewSpecs() *Specs { return &Specs{m: map[string]specEntry{}} }

// load returns the spec in the config.json at path, from the cache when the
// file has not changed since it was read. Its errors are specfile.Load's,
// or a stat error of the same form ("load spec: stat PATH: …").
func (s *Specs) load(path string) (*specs.Spec, error) {
	if s == nil {
		cfg, err := specfile.Load(path)
		if err != nil {
			return nil, err
		}
		return cfg.Spec, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	v := fileVersion{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.fileID = fileID{dev: st.Dev, ino: st.Ino}
	}
	s.mu.Lock()
	e, ok := s.m[path]
	s.mu.Unlock()
	if ok && e.file == v {
		return e.spec, nil
	}
	// Read after the stat: were the file replaced in between, the entry
	// would hold the newer spec under the older file's identity, and be
	// read again next time.
	cfg, err := specfile.Load(path)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.m[path] = specEntry{file: v, spec: cfg.Spec}
	s.mu.Unlock()
	return cfg.Spec, nil
}

// keep drops every entry whose path is not in used.
func (s *Specs) keep(used map[string]bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.m {
		if !used[p] {
			delete(s.m, p)
		}
	}
}
