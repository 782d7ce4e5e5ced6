// Package execlink installs an executable under other names: symbolic
// links to it in a directory (the docker CLI plugin docker-gpurun, the
// kubectl plugin kubectl-gpurun and its completion), so that upgrading the
// executable upgrades them. A link that already points at the target is
// left alone, one elsewhere is replaced atomically, and anything at a
// link's path that is not a symbolic link is an error, left untouched.
package execlink

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Links are links to one executable.
type Links struct {
	// What names them in errors ("docker CLI plugin").
	What string
	// Dir is where the links go, made when missing.
	Dir string
	// Names are the links' file names in Dir.
	Names []string
	// Target is the absolute path of the executable they point at.
	Target string
	// DryRun says what would change and changes nothing.
	DryRun bool
	// Out receives a line for each link: what was done, or would be.
	Out io.Writer
}

// Paths are the links' paths.
func (l Links) Paths() []string {
	out := make([]string, len(l.Names))
	for i, n := range l.Names {
		out[i] = filepath.Join(l.Dir, n)
	}
	return out
}

// Install makes every link. It returns an error before making any when
// Target is not an absolute path of an executable file.
func (l Links) Install() error {
	if !filepath.IsAbs(l.Target) {
		return fmt.Errorf("%s: target %q is not an absolute path", l.What, l.Target)
	}
	fi, err := os.Stat(l.Target)
	if err != nil {
		return fmt.Errorf("%s: %w", l.What, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: %s is not an executable file", l.What, l.Target)
	}
	for _, path := range l.Paths() {
		if err := l.link(path); err != nil {
			return err
		}
	}
	return nil
}

// link makes one link to Target.
func (l Links) link(path string) error {
	prev, err := os.Readlink(path)
	switch {
	case err == nil && prev == l.Target:
		fmt.Fprintf(l.Out, "%s -> %s: already installed\n", path, l.Target)
		return nil
	case err == nil:
		// A link to another executable (another gpurun): point it here.
	case errors.Is(err, fs.ErrNotExist):
		prev = ""
	default:
		if _, statErr := os.Lstat(path); statErr == nil {
			return fmt.Errorf("%s: %s exists and is not a symbolic link; remove it first", l.What, path)
		}
		return fmt.Errorf("%s: %w", l.What, err)
	}
	what := fmt.Sprintf("link %s -> %s", path, l.Target)
	if prev != "" {
		what += " (was -> " + prev + ")"
	}
	if l.DryRun {
		fmt.Fprintf(l.Out, "would %s\n", what)
		return nil
	}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", l.What, err)
	}
	tmp := filepath.Join(l.Dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(l.Target, tmp); err != nil {
		return fmt.Errorf("%s: %w", l.What, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: %w", l.What, err)
	}
	fmt.Fprintln(l.Out, what)
	return nil
}

// Uninstall removes every link; a missing one is not an error, and a file
// there that is not a symbolic link is left alone, with an error.
func (l Links) Uninstall() error {
	for _, path := range l.Paths() {
		fi, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(l.Out, "%s: not installed\n", path)
			continue
		case err != nil:
			return fmt.Errorf("%s: %w", l.What, err)
		case fi.Mode()&fs.ModeSymlink == 0:
			return fmt.Errorf("%s: %s is not a symbolic link; left alone", l.What, path)
		}
		if l.DryRun {
			fmt.Fprintf(l.Out, "would remove %s\n", path)
			continue
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("%s: %w", l.What, err)
		}
		fmt.Fprintf(l.Out, "removed %s\n", path)
	}
	return nil
}

// Dir is the directory links go into, as the install commands' flags say:
// dir (--dir) made absolute, systemDir for system (--system), else what
// fallback returns (a tool's own per-user directory). Both flags at once
// are an error naming them.
func Dir(dir string, system bool, systemDir string, fallback func() (string, error)) (string, error) {
	switch {
	case dir != "" && system:
		return "", errors.New("--dir and --system: choose one")
	case dir != "":
		return filepath.Abs(dir)
	case system:
		return systemDir, nil
	}
	return fallback()
}
