package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/docker/cliplugin"
	"github.com/gpurun/gpurun/internal/exitcode"
)

func newInstallCLIPluginCmd(g *Globals, uninstall bool) *cobra.Command {
	var dir string
	var system bool
	short := "the docker CLI: link gpurun as docker-gpurun, so `docker gpurun run ...` works"
	long := `Install links this gpurun executable as the docker CLI plugin
"docker-gpurun" in the docker CLI's plugin directory: $DOCKER_CONFIG/cli-plugins,
else ~/.docker/cli-plugins (just for you); --system uses
` + cliplugin.SystemCLIPluginDir + ` (every user); --dir names another.
Then "docker gpurun run ..." is "gpurun run ...", and docker's own global
options (-H, --context, --config, --tls*) apply to it: "docker --context gpu1
gpurun run ..." runs "docker --context gpu1 run --shm-size=... ...".
The .deb and .rpm packages link it in ` + cliplugin.PackageCLIPluginDir + ` already.

The link follows gpurun: upgrading gpurun upgrades the plugin. Installing
again changes nothing; uninstall removes the link.`
	if uninstall {
		short = "the docker CLI: remove the docker-gpurun plugin"
		long = `Uninstall removes docker-gpurun from the docker CLI's plugin directory:
$DOCKER_CONFIG/cli-plugins, else ~/.docker/cli-plugins; --system
` + cliplugin.SystemCLIPluginDir + `; --dir another. A plugin that is not
there is not an error. The link the .deb and .rpm ship in
` + cliplugin.PackageCLIPluginDir + ` goes with the package.`
	}
	cmd := &cobra.Command{
		Use:   "docker-cli-plugin",
		Short: short,
		Long:  long,
		Example: `  gpurun install docker-cli-plugin
  docker gpurun run --rm -it --gpus all nvidia/cuda:12.4.1-runtime-ubuntu22.04 nvidia-smi
  sudo gpurun install docker-cli-plugin --system
  gpurun install docker-cli-plugin --dir ~/.docker/cli-plugins --dry-run
  gpurun uninstall docker-cli-plugin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := cliplugin.CLIPluginDir(dir, system, os.Getenv)
			if err != nil {
				return exitcode.New(2, err)
			}
			self, err := os.Executable()
			if err != nil {
				return exitcode.New(1, fmt.Errorf("docker CLI plugin: this executable: %w", err))
			}
			p := cliplugin.CLIPlugin{Dir: d, Target: self, DryRun: g.DryRun, Out: cmd.OutOrStdout()}
			return installOrUninstall(uninstall, p.Install, p.Uninstall)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "the cli-plugins directory (default $DOCKER_CONFIG/cli-plugins, else ~/.docker/cli-plugins)")
	fl.BoolVar(&system, "system", false, "for every user: "+cliplugin.SystemCLIPluginDir)
	return cmd
}
