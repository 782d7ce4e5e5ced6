package install

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/gpurun/gpurun/internal/execlink"
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
func (p KubectlPlugin) Paths() []string { return p.links().Paths() }

// links are the plugin's two links.
func (p KubectlPlugin) links() execlink.Links {
	return execlink.Links{What: "kubectl plugin", Dir: p.Dir, Names: []string{KubectlPluginFile, KubectlCompleteFile}, Target: p.Target, DryRun: p.DryRun, Out: p.Out}
}

// Install links both files to Target, creating Dir. A link that already
// points at Target is left alone; a link elsewhere is replaced
// atomically; anything else at that path is an error, left untouched.
func (p KubectlPlugin) Install() error {
	if err := p.links().Install(); err != nil {
		return err
	}
	if !p.DryRun {
		fmt.Fprintf(p.Out, "try: kubectl gpurun doctor pod/NAME  (kubectl plugin list shows it when %s is on PATH)\n", p.Dir)
	}
	return nil
}

// Uninstall removes both links; a missing one is not an error, and a
// file there that is not a symbolic link is left alone.
func (p KubectlPlugin) Uninstall() error { return p.links().Uninstall() }
