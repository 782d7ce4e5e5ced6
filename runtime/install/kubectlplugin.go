package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// kubectl runs a plugin named NAME from an executable called kubectl-NAME
// on PATH (`kubectl gpurun doctor pod/x` runs `kubectl-gpurun doctor
// pod/x`), and completes its arguments with kubectl_complete-NAME, which it
// runs with the words typed so far. Both are gpurun under another name.
const (
	// KubectlPluginFile is the plugin: `kubectl gpurun ...`.
	KubectlPluginFile = "kubectl-gpurun"
	// KubectlCompleteFile answers kubectl's completion of the plugin's
	// arguments (as `gpurun __complete ...`).
	KubectlCompleteFile = "kubectl_complete-gpurun"
	// SystemKubectlPluginDir is where --system links the plugin.
	SystemKubectlPluginDir = "/usr/local/bin"
)

// IsKubectlComplete reports whether a process started as argv0 answers
// kubectl's completion of the plugin's arguments.
func IsKubectlComplete(argv0 string) bool {
	return filepath.Base(argv0) == KubectlCompleteFile
}

// KubectlPlugin installs gpurun as the kubectl plugin kubectl-gpurun, with
// its completion kubectl_complete-gpurun: symbolic links to the gpurun
// executable in a directory on PATH, so upgrading gpurun upgrades them.
type KubectlPlugin struct {
	// Dir is a directory on PATH.
	Dir string
	// Target is the gpurun executable the links point at.
	Target string
	// DryRun says what would change and changes nothing.
	DryRun bool
	// Out receives what was done.
	Out io.Writer
}

// Paths are the links: Dir/kubectl-gpurun and Dir/kubectl_complete-gpurun.
func (p KubectlPlugin) Paths() []string {
	return []string{filepath.Join(p.Dir, KubectlPluginFile), filepath.Join(p.Dir, KubectlCompleteFile)}
}

// Install links both files to Target, creating Dir. A link that already
// points at Target is left alone; a link elsewhere is replaced
// atomically; anything else at that path is an error, left untouched.
func (p KubectlPlugin) Install() error {
	if !filepath.IsAbs(p.Target) {
		return fmt.Errorf("kubectl plugin: target %q is not an absolute path", p.Target)
	}
	fi, err := os.Stat(p.Target)
	if err != nil {
		return fmt.Errorf("kubectl plugin: %w", err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("kubectl plugin: %s is not an executable file", p.Target)
	}
	for _, path := range p.Paths() {
		if err := p.link(path); err != nil {
			return err
		}
	}
	if !p.DryRun {
		fmt.Fprintf(p.Out, "try: kubectl gpurun doctor pod/NAME  (kubectl plugin list shows it when %s is on PATH)\n", p.Dir)
	}
	return nil
}

// link makes one link to Target.
func (p KubectlPlugin) link(path string) error {
	prev, err := os.Readlink(path)
	switch {
	case err == nil && prev == p.Target:
		fmt.Fprintf(p.Out, "%s -> %s: already installed\n", path, p.Target)
		return nil
	case err == nil:
		// A link to another gpurun: point it at this one.
	case errors.Is(err, fs.ErrNotExist):
		prev = ""
	default:
		if _, statErr := os.Lstat(path); statErr == nil {
			return fmt.Errorf("kubectl plugin: %s exists and is not a symbolic link; remove it first", path)
		}
		return fmt.Errorf("kubectl plugin: %w", err)
	}
	what := fmt.Sprintf("link %s -> %s", path, p.Target)
	if prev != "" {
		what += " (was -> " + prev + ")"
	}
	if p.DryRun {
		fmt.Fprintf(p.Out, "would %s\n", what)
		return nil
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return fmt.Errorf("kubectl plugin: %w", err)
	}
	tmp := filepath.Join(p.Dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(p.Target, tmp); err != nil {
		return fmt.Errorf("kubectl plugin: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("kubectl plugin: %w", err)
	}
	fmt.Fprintln(p.Out, what)
	return nil
}

// Uninstall removes both links; a missing one is not an error, and a
// file there that is not a link to a gpurun is left alone.
func (p KubectlPlugin) Uninstall() error {
	for _, path := range p.Paths() {
		fi, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(p.Out, "%s: not installed\n", path)
			continue
		case err != nil:
			return fmt.Errorf("kubectl plugin: %w", err)
		case fi.Mode()&fs.ModeSymlink == 0:
			return fmt.Errorf("kubectl plugin: %s is not a symbolic link; left alone", path)
		}
		if p.DryRun {
			fmt.Fprintf(p.Out, "would remove %s\n", path)
			continue
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("kubectl plugin: %w", err)
		}
		fmt.Fprintf(p.Out, "removed %s\n", path)
	}
	return nil
}
