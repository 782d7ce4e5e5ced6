package dockerapi

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestShmCache(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := ShmCache{Path: filepath.Join(t.TempDir(), "gpurun", "daemon-shm.json"), Now: func() time.Time { return now }}
	if _, _, ok := c.Get("d1"); ok {
		t.Fatal("empty cache hit")
	}
	if err := c.Put("d1", 2<<30); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key   string
		after time.Duration
		want  int64
		ok    bool
	}{
		{"d1", 0, 2 << 30, true},
		{"d1", ShmCacheTTL - time.Second, 2 << 30, true},
		{"d1", ShmCacheTTL + time.Second, 0, false},
		{"d1", -time.Minute, 0, false}, // written in the future: the clock moved
		{"d2", 0, 0, false},
	}
	for _, tt := range tests {
		c2 := c
		c2.Now = func() time.Time { return now.Add(tt.after) }
		if n, _, ok := c2.Get(tt.key); n != tt.want || ok != tt.ok {
			t.Errorf("%s after %s: %d %v, want %d %v", tt.key, tt.after, n, ok, tt.want, tt.ok)
		}
	}
	if err := os.WriteFile(c.Path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Get("d1"); ok {
		t.Error("damaged cache hit")
	}
	if err := c.Put("d1", 1); err != nil {
		t.Errorf("Put over a damaged cache: %v", err)
	}
	if err := (ShmCache{}).Put("x", 1); err != nil {
		t.Errorf("no path: %v", err)
	}
	if got := DefaultShmCachePath(func(k string) string { return map[string]string{"HOME": "/h"}[k] }); got != "/h/.cache/gpurun/daemon-shm.json" {
		t.Errorf("DefaultShmCachePath = %q", got)
	}
}
