package compose

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aymanbagabas/go-udiff"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// Diff returns a unified diff of the file's change ("" when none), as
// "git apply" and "patch -p1" take it.
func (f *File) Diff() string {
	if !f.Changed() {
		return ""
	}
	old, new := string(f.Old), string(f.New)
	u, err := udiff.ToUnifiedDiff("a/"+filepath.ToSlash(f.Path), "b/"+filepath.ToSlash(f.Path), old, udiff.Lines(old, new), udiff.DefaultContextLines)
	if err != nil {
		return udiff.Unified("a/"+filepath.ToSlash(f.Path), "b/"+filepath.ToSlash(f.Path), old, new)
	}
	// go-udiff v0.4.1 does not count the unchanged lines inside a hunk when
	// it numbers the new side of the hunks after it: number them from the
	// old side and the lines added and removed before.
	delta := 0
	for _, h := range u.Hunks {
		h.ToLine = h.FromLine + delta
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Insert:
				delta++
			case udiff.Delete:
				delta--
			}
		}
	}
	return u.String()
}

// Write replaces every changed file atomically, keeping its mode (through
// a symlink, the file it points to); with backup, FILE.bak first gets the
// original content. A file that cannot be written stays as it was; files
// already written stay written, and the error names the file.
func (r *Result) Write(backup bool) error {
	for _, f := range r.Files {
		if !f.Changed() {
			continue
		}
		path, err := filepath.EvalSymlinks(f.abs)
		if err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		current, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		if string(current) != string(f.Old) {
			return fmt.Errorf("write %s: the file changed since it was read; run again", f.Path)
		}
		if backup {
			if err := atomicfile.Write(path+".bak", f.Old, fi.Mode().Perm()); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
		}
		if err := atomicfile.Write(path, f.New, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
