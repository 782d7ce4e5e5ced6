package launch

import (
	"encoding/json"
	"fmt"

	"github.com/gpurun/gpurun/docker/cliplugin"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/version"
)

// FromDockerCLI reads a command line of gpurun run as docker-gpurun, the
// docker CLI plugin (cliplugin.IsCLIPlugin): it answers the docker CLI's
// metadata request on env.Stdout (short is the plugin's one-line
// description), and returns done; or it takes the docker CLI's global
// options off the front (into o.DockerGlobals, for the docker run gpurun
// execs, and into the environment, for gpurun's own Docker client) and
// returns gpurun's own arguments. Errors carry their exit status: 2 for a
// command line it cannot read.
func FromDockerCLI(args []string, o *Options, short string, env Env) (rest []string, done bool, err error) {
	call, err := cliplugin.ParseCLIPluginArgs(args, cliplugin.CLIPluginFromDocker(env.Getenv))
	if err != nil {
		return nil, true, exitcode.New(2, err)
	}
	if call.Metadata {
		enc := json.NewEncoder(env.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(cliplugin.NewCLIPluginMetadata(version.String(), short)); err != nil {
			return nil, true, exitcode.New(1, fmt.Errorf("docker CLI plugin metadata: %w", err))
		}
		return nil, true, nil
	}
	if err := cliplugin.ApplyCLIPluginEnv(call, DockerEnv); err != nil {
		return nil, true, exitcode.New(2, err)
	}
	o.DockerGlobals = call.DockerGlobals
	return call.Args, false, nil
}
