package logfile

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOpen(t *testing.T) {
	tests := []struct {
		name    string
		path    func(dir string) string
		records int
		want    bool // a file with the records exists afterwards
	}{
		{"records are appended as JSON lines, directory created", func(d string) string { return filepath.Join(d, "sub", "gpurun.log") }, 2, true},
		{"no record, no file", func(d string) string { return filepath.Join(d, "gpurun.log") }, 0, false},
		{"unopenable path drops records", func(d string) string { return filepath.Join(d, "file", "gpurun.log") }, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			path := tt.path(dir)
			log, closeLog := Open(path, "test-component")
			for i := 0; i < tt.records; i++ {
				log.Info("record", "i", i)
			}
			closeLog()
			data, err := os.ReadFile(path)
			if !tt.want {
				if err == nil {
					t.Fatalf("%s exists: %q", path, data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) != tt.records {
				t.Fatalf("%d lines, want %d: %q", len(lines), tt.records, data)
			}
			for i, l := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(l), &rec); err != nil {
					t.Fatalf("line %d is not JSON: %v", i, err)
				}
				if rec["component"] != "test-component" || rec["msg"] != "record" || rec["pid"] != float64(os.Getpid()) {
					t.Errorf("line %d = %v", i, rec)
				}
			}
		})
	}
}

func TestOpenEmptyPathDiscards(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	log, closeLog := Open("", "x")
	if log.Enabled(context.Background(), slog.LevelError) {
		t.Error("a logger for no path takes records")
	}
	log.Error("dropped")
	closeLog()
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		t.Errorf("a logger for no path wrote %v (%v)", ents, err)
	}
}

// TestOpenUTC: records are timed in UTC whatever the host's zone.
func TestOpenUTC(t *testing.T) {
	local := time.Local
	time.Local = time.FixedZone("UTC+9", 9*3600)
	t.Cleanup(func() { time.Local = local })
	path := filepath.Join(t.TempDir(), "gpurun.log")
	log, closeLog := Open(path, "test-component")
	log.Info("record", "nested", slog.GroupValue(slog.String("k", "v")))
	log.WithGroup("g").With("a", 1).Info("in a group")
	closeLog()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), data)
	}
	for _, l := range lines {
		var rec struct{ Time string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		if tm, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil || !strings.HasSuffix(rec.Time, "Z") || time.Since(tm) > time.Minute {
			t.Errorf("time %q (%v): want now, in UTC", rec.Time, err)
		}
	}
	if !strings.Contains(lines[1], `"g":{"a":1`) {
		t.Errorf("group lost: %s", lines[1])
	}
}
