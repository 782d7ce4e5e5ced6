package nri

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/policy"
)

// TestLog: a long-running plugin logs text on stderr; a launched one holds
// its records until the runtime's configuration names the log file, or
// writes them to the file it started with when none comes.
func TestLog(t *testing.T) {
	// A launched plugin's records are timed in UTC, as every writer of
	// log_file times them, whatever the host's zone.
	local := time.Local
	time.Local = time.FixedZone("UTC+9", 9*3600)
	t.Cleanup(func() { time.Local = local })
	dir := t.TempDir()
	startFile := filepath.Join(dir, "start.log")
	configured := filepath.Join(dir, "sub", "configured.log")
	read := func(path string) string {
		data, _ := os.ReadFile(path)
		return string(data)
	}
	tests := []struct {
		name     string
		launched bool
		settle   string // "" = never configured
		stderr   bool   // the records end up on stderr
		file     string // or in this file
	}{
		{name: "long-running", launched: false, settle: configured, stderr: true},
		{name: "launched, configured", launched: true, settle: configured, file: configured},
		{name: "launched, never configured", launched: true, file: startFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []string{startFile, configured} {
				_ = os.Remove(f)
			}
			var stderr bytes.Buffer
			l := NewLog(tt.launched, startFile, &stderr)
			log := l.Logger(slog.LevelInfo)
			log.Info("before")
			if read(startFile) != "" || read(configured) != "" {
				t.Fatal("a file was written before the plugin was configured")
			}
			if tt.settle != "" {
				p := New(Config{Facts: testFacts(testHostMemory, nil), OnConfigure: func(pol *policy.Policy) { l.Settle(pol.LogFile) }})
				if _, err := p.Configure(t.Context(), "log_file = \""+tt.settle+"\"\n", "containerd", "v2"); err != nil {
					t.Fatal(err)
				}
			}
			log.Info("after")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			got := stderr.String()
			if !tt.stderr {
				got = read(tt.file)
				if stderr.Len() != 0 {
					t.Errorf("stderr %q, want nothing", stderr.String())
				}
			}
			if !strings.Contains(got, "before") || !strings.Contains(got, "after") || strings.Index(got, "before") > strings.Index(got, "after") {
				t.Errorf("records %q, want before then after", got)
			}
			if tt.launched && (!strings.Contains(got, `"component":"gpurun-nri"`) || strings.Count(got, `Z","level":`) != 2) {
				t.Errorf("records %q, want JSON lines timed in UTC", got)
			}
		})
	}
}
