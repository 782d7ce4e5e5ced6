package explain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzScan: any input scans without panicking, and what a report says
// stays within the log: line numbers exist, counts cover the kept lines.
func FuzzScan(f *testing.F) {
	for _, tt := range corpus {
		if data, err := os.ReadFile(filepath.Join("testdata", tt.file)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("\x1b[31m" + busError + "\r\n_queue\n.\nEmpty\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Scan(strings.NewReader(string(data)), Options{Source: "fuzz"})
		if err != nil {
			if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
				return // not really gzip
			}
			t.Fatalf("Scan: %v", err)
		}
		for _, fd := range r.Findings {
			if len(fd.Lines) == 0 || len(fd.Lines) > MaxLines || fd.Count < 1 {
				t.Fatalf("finding %s: %d lines, count %d", fd.Signature, len(fd.Lines), fd.Count)
			}
			for _, l := range fd.Lines {
				if l.N < 1 || l.N > r.Lines {
					t.Fatalf("finding %s names line %d of %d", fd.Signature, l.N, r.Lines)
				}
			}
		}
		if r.Found() != (r.Fix != nil) {
			t.Fatalf("findings %d, fix %v", len(r.Findings), r.Fix)
		}
	})
}
