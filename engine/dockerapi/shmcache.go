package dockerapi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/docker/docker/api/types/system"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// ShmCacheTTL is how long a daemon's default-shm-size, once learned, is
// used without asking again. A daemon restart (a new socket, for a local
// daemon), an upgrade or a different daemon ID asks again at once; a SIGHUP
// reload that changes default-shm-size is seen at once: a cached size is
// used only if the daemon reports no reload since it was learned (its
// events). A restart behind a socket that systemd holds (docker.socket) is
// seen only after the TTL.
const ShmCacheTTL = time.Hour

// shmCacheEntry is one daemon's default-shm-size as learned at At.
type shmCacheEntry struct {
	Size int64     `json:"size"`
	At   time.Time `json:"at"`
}

// ShmCache keeps each daemon's default-shm-size in a small JSON file, so
// that a GPU run does not create and remove a probe container each time.
// The zero value (no Path) caches nothing.
type ShmCache struct {
	// Path is the cache file ("" disables the cache).
	Path string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// DefaultShmCachePath is $XDG_CACHE_HOME/gpurun/daemon-shm.json, else
// ~/.cache/gpurun/daemon-shm.json; "" when neither can be found.
func DefaultShmCachePath(getenv func(string) string) string {
	dir := getenv("XDG_CACHE_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "gpurun", "daemon-shm.json")
}

func (c ShmCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c ShmCache) read() map[string]shmCacheEntry {
	m := map[string]shmCacheEntry{}
	if c.Path == "" {
		return m
	}
	if data, err := os.ReadFile(c.Path); err == nil {
		_ = json.Unmarshal(data, &m) // a damaged cache is an empty one
	}
	return m
}

// Get returns the cached size for key and when it was learned, if it is
// fresh.
func (c ShmCache) Get(key string) (int64, time.Time, bool) {
	e, ok := c.read()[key]
	if !ok || e.Size <= 0 || c.now().Sub(e.At) > ShmCacheTTL || e.At.After(c.now()) {
		return 0, time.Time{}, false
	}
	return e.Size, e.At, true
}

// Put records size for key, dropping stale entries.
func (c ShmCache) Put(key string, size int64) error {
	if c.Path == "" {
		return nil
	}
	m := c.read()
	for k, e := range m {
		if c.now().Sub(e.At) > ShmCacheTTL {
			delete(m, k)
		}
	}
	m[key] = shmCacheEntry{Size: size, At: c.now()}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("shm cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o700); err != nil {
		return fmt.Errorf("shm cache: %w", err)
	}
	if err := atomicfile.Write(c.Path, data, 0o600); err != nil {
		return fmt.Errorf("shm cache: %w", err)
	}
	return nil
}

// infoOnce asks the daemon's info once for all the methods of one APIDaemon.
type infoOnce struct {
	once sync.Once
	info system.Info
	err  error
}

func (o *infoOnce) get(ctx context.Context, d *APIDaemon) (system.Info, error) {
	o.once.Do(func() {
		o.info, o.err = d.c.Info(ctx)
		if o.err != nil {
			o.err = fmt.Errorf("docker info: %w", o.err)
		}
	})
	return o.info, o.err
}
