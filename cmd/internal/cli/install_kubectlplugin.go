package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/execlink"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/node/install"
)

func newInstallKubectlPluginCmd(g *Globals, uninstall bool) *cobra.Command {
	var dir string
	var system bool
	short := "kubectl: link gpurun as kubectl-gpurun, so `kubectl gpurun doctor pod/NAME` works"
	long := `Install links this gpurun executable as the kubectl plugin "` + install.KubectlPluginFile + `",
and as "` + install.KubectlCompleteFile + `", which answers kubectl's shell completion
of the plugin's arguments, in a directory on PATH: the directory this gpurun
is in (default), --system ` + install.SystemKubectlPluginDir + `, or --dir another.
Then "kubectl gpurun doctor pod/NAME" is "gpurun doctor pod/NAME", and
"kubectl plugin list" lists it. kubectl hands a plugin neither its
--kubeconfig, --context nor -n: give them after the plugin's name
("kubectl gpurun doctor pod/NAME -n ml --context gpu"); $KUBECONFIG holds.
The .deb and .rpm, and make install, link both next to gpurun already.

The links follow gpurun: upgrading gpurun upgrades the plugin. Installing
again changes nothing; uninstall removes the links.`
	if uninstall {
		short = "kubectl: remove the kubectl-gpurun plugin"
		long = `Uninstall removes ` + install.KubectlPluginFile + ` and ` + install.KubectlCompleteFile + ` from the directory
this gpurun is in (default), --system ` + install.SystemKubectlPluginDir + `, or --dir another. A link that
is not there is not an error; a file there that is not a link is left alone.`
	}
	cmd := &cobra.Command{
		Use:   "kubectl-plugin",
		Short: short,
		Long:  long,
		Example: `  gpurun install kubectl-plugin
  kubectl gpurun doctor pod/train-0 -n ml
  sudo gpurun install kubectl-plugin --system
  gpurun install kubectl-plugin --dir ~/.local/bin --dry-run
  gpurun uninstall kubectl-plugin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return exitcode.New(1, fmt.Errorf("kubectl plugin: this executable: %w", err))
			}
			d, err := kubectlPluginDir(dir, system, self)
			if err != nil {
				return exitcode.New(2, err)
			}
			p := install.KubectlPlugin{Dir: d, Target: self, DryRun: g.DryRun, Out: cmd.OutOrStdout()}
			return installOrUninstall(uninstall, p.Install, p.Uninstall)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "a directory on PATH (default: the one this gpurun is in)")
	fl.BoolVar(&system, "system", false, "for every user: "+install.SystemKubectlPluginDir)
	return cmd
}

// kubectlPluginDir is where the plugin's links go: --dir, --system's, or
// the directory of this gpurun (on PATH, as kubectl needs).
func kubectlPluginDir(dir string, system bool, self string) (string, error) {
	return execlink.Dir(dir, system, install.SystemKubectlPluginDir, func() (string, error) { return filepath.Dir(self), nil })
}

// kubectlCompleteArgs turns the command line of kubectl_complete-gpurun,
// which kubectl runs with the words of `kubectl gpurun ...` typed so far
// (the last the one to complete), into gpurun's own completion request;
// any other command line is left as it is.
func kubectlCompleteArgs(argv0 string, args []string) []string {
	if !install.IsKubectlComplete(argv0) {
		return args
	}
	return append([]string{cobra.ShellCompRequestCmd}, args...)
}
