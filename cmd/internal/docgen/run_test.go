package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/exitcode"
)

func TestRun(t *testing.T) {
	root := &cobra.Command{Use: "gpurun", Short: "s", Long: "l"}
	root.AddCommand(&cobra.Command{Use: "version", Short: "v", Run: func(*cobra.Command, []string) {}})
	getenv := func(k string) string { return map[string]string{"SOURCE_DATE_EPOCH": "1767225600"}[k] }
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		o        RunOptions
		wantCode int
		want     string // an error's text, or a file Run writes
	}{
		{"nothing to write", RunOptions{}, 2, "--out DIR and/or --config-md FILE"},
		{"a bad SOURCE_DATE_EPOCH", RunOptions{Out: dir, Getenv: func(string) string { return "yesterday" }}, 2, "SOURCE_DATE_EPOCH"},
		{"the config reference", RunOptions{ConfigMD: filepath.Join(dir, "docs", "config.md"), Getenv: getenv}, 0, filepath.Join(dir, "docs", "config.md")},
		{"man pages", RunOptions{Out: dir, Version: "v1", Getenv: getenv}, 0, filepath.Join(dir, "man", "man1", "gpurun-version.1.gz")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(root, tc.o)
			if exitcode.Of(err) != tc.wantCode {
				t.Fatalf("Run: %v (exit %d), want exit %d", err, exitcode.Of(err), tc.wantCode)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q lacks %q", err, tc.want)
				}
				return
			}
			if _, err := os.Stat(tc.want); err != nil {
				t.Error(err)
			}
		})
	}
	md, err := ConfigMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "docs", "config.md")); err != nil || !bytes.Equal(got, md) {
		t.Errorf("config.md is not ConfigMarkdown's: %v", err)
	}
}
