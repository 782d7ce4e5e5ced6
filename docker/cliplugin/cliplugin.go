// Package cliplugin is gpurun as the docker CLI plugin docker-gpurun
// (`docker gpurun run ...`): the plugin protocol — the metadata the docker
// CLI asks for, the command line and environment it runs the plugin with —
// and the link that installs it in a cli-plugins directory.
package cliplugin

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/internal/execlink"
)

// The docker CLI runs a plugin named NAME from an executable called
// docker-NAME in its cli-plugins directories: `docker gpurun ...` runs
// docker-gpurun, which is gpurun itself under another name.
const (
	// CLIPluginName is the docker subcommand: `docker gpurun`.
	CLIPluginName = "gpurun"
	// CLIPluginFile is the plugin's file name in a cli-plugins directory.
	CLIPluginFile = "docker-" + CLIPluginName
	// CLIPluginMetadataCommand is the argument with which the docker CLI
	// asks a plugin for its metadata.
	CLIPluginMetadataCommand = "docker-cli-plugin-metadata"
	// SystemCLIPluginDir is where `--system` installs the plugin: the
	// docker CLI's directory for plugins an administrator adds by hand.
	SystemCLIPluginDir = "/usr/local/lib/docker/cli-plugins"
	// PackageCLIPluginDir is where gpurun's .deb and .rpm put the plugin
	// link: the docker CLI's directory for packaged plugins.
	PackageCLIPluginDir = "/usr/libexec/docker/cli-plugins"
	// CLIPluginURL is the plugin's homepage in its metadata.
	CLIPluginURL = "https://github.com/gpurun/gpurun"
)

// The docker CLI sets these in a plugin's environment: the command that ran
// docker, and the socket of its plugin signal protocol.
const (
	cliPluginOrigCommandEnv = "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND"
	cliPluginSocketEnv      = "DOCKER_CLI_PLUGIN_SOCKET"
)

// CLIPluginMetadata is the JSON object a docker CLI plugin prints for
// `docker-NAME docker-cli-plugin-metadata`. SchemaVersion ("0.1.0") and
// Vendor are mandatory: the docker CLI ignores a plugin without them.
type CLIPluginMetadata struct {
	SchemaVersion    string
	Vendor           string
	Version          string `json:",omitempty"`
	ShortDescription string `json:",omitempty"`
	URL              string `json:",omitempty"`
}

// NewCLIPluginMetadata returns gpurun's plugin metadata.
func NewCLIPluginMetadata(version, short string) CLIPluginMetadata {
	return CLIPluginMetadata{
		SchemaVersion:    "0.1.0",
		Vendor:           "gpurun",
		Version:          version,
		ShortDescription: short,
		URL:              CLIPluginURL,
	}
}

// IsCLIPlugin reports whether a process started as argv0 runs as the docker
// CLI plugin (its file name is docker-gpurun).
func IsCLIPlugin(argv0 string) bool {
	return filepath.Base(argv0) == CLIPluginFile
}

// CLIPluginCall is what a docker-gpurun command line asks for.
type CLIPluginCall struct {
	// Metadata is set for `docker-gpurun docker-cli-plugin-metadata`.
	Metadata bool
	// DockerGlobals are the docker CLI's global options given before the
	// plugin's name (`docker -H ssh://gpu1 gpurun run ...`), as given; the
	// docker CLI that gpurun runs gets them again, before `run`.
	DockerGlobals []string
	// Env is what those options mean for the Docker API client gpurun
	// itself uses: KEY=VALUE to set, KEY alone to unset. The last one wins.
	Env []string
	// Args is gpurun's own command line.
	Args []string
}

// dockerGlobalFlag describes one of the docker CLI's global options.
type dockerGlobalFlag struct {
	takesValue bool
	// env maps the option's value to the environment of gpurun's own
	// Docker API client, which resolves the endpoint as the docker CLI
	// does (DOCKER_HOST, DOCKER_CONTEXT, DOCKER_CONFIG, DOCKER_TLS_VERIFY).
	env func(value string) []string
}

// dockerGlobalFlags are the docker CLI's global options (docker --help,
// "Options:"; the same in docker 20.10 and 28), long and short names.
func dockerGlobalFlags(name string) (dockerGlobalFlag, bool) {
	switch name {
	case "--config":
		return dockerGlobalFlag{true, func(v string) []string { return []string{"DOCKER_CONFIG=" + v} }}, true
	case "-c", "--context":
		// A context named on the command line wins over DOCKER_HOST.
		return dockerGlobalFlag{true, func(v string) []string { return []string{"DOCKER_HOST", "DOCKER_CONTEXT=" + v} }}, true
	case "-H", "--host":
		return dockerGlobalFlag{true, func(v string) []string { return []string{"DOCKER_HOST=" + v} }}, true
	case "--tlsverify":
		return dockerGlobalFlag{false, func(v string) []string {
			if v == "false" {
				return []string{"DOCKER_TLS_VERIFY"}
			}
			return []string{"DOCKER_TLS_VERIFY=1"}
		}}, true
	case "-l", "--log-level", "--tlscacert", "--tlscert", "--tlskey":
		return dockerGlobalFlag{takesValue: true}, true
	case "-D", "--debug", "--tls":
		return dockerGlobalFlag{}, true
	}
	return dockerGlobalFlag{}, false
}

// ParseCLIPluginArgs reads the arguments (after argv[0]) of docker-gpurun;
// fromDocker says the docker CLI ran it (DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND
// is set). The docker CLI runs a plugin with its own arguments unchanged:
// its global options, the plugin's name, the plugin's arguments
// (`docker -H X gpurun run img` runs `docker-gpurun -H X gpurun run img`);
// `docker help gpurun` runs `docker-gpurun help gpurun`, and shell
// completion `docker-gpurun __complete gpurun ...`. Run by hand,
// docker-gpurun is plain gpurun.
func ParseCLIPluginArgs(args []string, fromDocker bool) (CLIPluginCall, error) {
	if len(args) > 0 && args[0] == CLIPluginMetadataCommand {
		return CLIPluginCall{Metadata: true}, nil
	}
	if !fromDocker {
		return CLIPluginCall{Args: args}, nil
	}
	var call CLIPluginCall
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			break
		}
		name, value, hasValue := splitFlag(a)
		f, known := dockerGlobalFlags(name)
		if !known {
			break // a newer docker's option: kept as it is, below
		}
		n := 1
		if f.takesValue && !hasValue {
			if i+1 >= len(args) {
				return CLIPluginCall{}, fmt.Errorf("%s: docker option %s needs a value", CLIPluginFile, name)
			}
			value, n = args[i+1], 2
		}
		call.DockerGlobals = append(call.DockerGlobals, args[i:i+n]...)
		if f.env != nil {
			call.Env = append(call.Env, f.env(value)...)
		}
		i += n - 1
	}
	rest := args[i:]
	switch {
	case len(rest) > 1 && rest[0] == "help" && rest[1] == CLIPluginName:
		// `docker help gpurun [COMMAND]`: gpurun's own help.
		call.Args = append([]string{"help"}, rest[2:]...)
	case len(rest) > 1 && strings.HasPrefix(rest[0], "__complete") && rest[1] == CLIPluginName:
		// The docker CLI completing `docker gpurun ...`.
		call.Args = append([]string{rest[0]}, rest[2:]...)
	default:
		j := slices.Index(rest, CLIPluginName)
		if j < 0 {
			return CLIPluginCall{}, fmt.Errorf("%s: the docker CLI's arguments %q do not name the plugin %q", CLIPluginFile, args, CLIPluginName)
		}
		// Options before the name that gpurun does not know are a newer
		// docker's: they go back to docker as they are.
		call.DockerGlobals = append(call.DockerGlobals, rest[:j]...)
		call.Args = rest[j+1:]
	}
	return call, nil
}

// CLIPluginFromDocker reports whether the docker CLI ran this process as
// its plugin, from the variable it sets for plugins.
func CLIPluginFromDocker(getenv func(string) string) bool {
	return getenv(cliPluginOrigCommandEnv) != ""
}

// splitFlag splits "--name=value", "-Hvalue" and "-H=value" into the
// option's name and its value.
func splitFlag(a string) (name, value string, hasValue bool) {
	if strings.HasPrefix(a, "--") {
		return strings.Cut(a, "=")
	}
	if len(a) > 2 {
		return a[:2], strings.TrimPrefix(a[2:], "="), true
	}
	return a, "", false
}

// ApplyCLIPluginEnv prepares the process environment for a docker-gpurun
// call: the Docker client settings its docker options imply, the docker CLI
// that ran the plugin as the one gpurun runs (unless dockerEnv, gpurun's
// GPURUN_DOCKER, names one), and without the plugin protocol's variables, so
// that the docker CLI gpurun execs runs as a top-level command.
func ApplyCLIPluginEnv(call CLIPluginCall, dockerEnv string) error {
	if orig := os.Getenv(cliPluginOrigCommandEnv); orig != "" && os.Getenv(dockerEnv) == "" {
		if err := os.Setenv(dockerEnv, orig); err != nil {
			return fmt.Errorf("set %s: %w", dockerEnv, err)
		}
	}
	for _, k := range []string{cliPluginOrigCommandEnv, cliPluginSocketEnv} {
		if err := os.Unsetenv(k); err != nil {
			return fmt.Errorf("unset %s: %w", k, err)
		}
	}
	for _, kv := range call.Env {
		k, v, set := strings.Cut(kv, "=")
		var err error
		if set {
			err = os.Setenv(k, v)
		} else {
			err = os.Unsetenv(k)
		}
		if err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
	}
	return nil
}

// CLIPluginDir returns the cli-plugins directory to install into: dir when
// given, SystemCLIPluginDir for system, else the docker CLI's own
// configuration directory ($DOCKER_CONFIG, else ~/.docker) + /cli-plugins,
// which the docker CLI searches first.
func CLIPluginDir(dir string, system bool, getenv func(string) string) (string, error) {
	return execlink.Dir(dir, system, SystemCLIPluginDir, func() (string, error) {
		cfg := getenv("DOCKER_CONFIG")
		if cfg == "" {
			home := getenv("HOME")
			if home == "" {
				return "", fmt.Errorf("docker CLI plugin directory: neither DOCKER_CONFIG nor HOME is set; use --dir")
			}
			cfg = filepath.Join(home, ".docker")
		}
		return filepath.Join(cfg, "cli-plugins"), nil
	})
}

// CLIPlugin installs gpurun as the docker CLI plugin docker-gpurun: a
// symbolic link to the gpurun executable, so upgrading gpurun upgrades the
// plugin.
type CLIPlugin struct {
	// Dir is the cli-plugins directory (see CLIPluginDir).
	Dir string
	// Target is the gpurun executable the link points at.
	Target string
	// DryRun says what would change and changes nothing.
	DryRun bool
	// Out receives what was done.
	Out io.Writer
}

// Path is the plugin's path: Dir/docker-gpurun.
func (p CLIPlugin) Path() string { return filepath.Join(p.Dir, CLIPluginFile) }

// links are the plugin's one link.
func (p CLIPlugin) links() execlink.Links {
	return execlink.Links{What: "docker CLI plugin", Dir: p.Dir, Names: []string{CLIPluginFile}, Target: p.Target, DryRun: p.DryRun, Out: p.Out}
}

// Install links Dir/docker-gpurun to Target, creating Dir. A link that
// already points at Target is left alone; a link elsewhere is replaced
// atomically; anything else at that path is an error, left untouched.
func (p CLIPlugin) Install() error {
	if err := p.links().Install(); err != nil {
		return err
	}
	if !p.DryRun {
		fmt.Fprintf(p.Out, "try: docker %s --help\n", CLIPluginName)
	}
	return nil
}

// Uninstall removes Dir/docker-gpurun; a missing plugin is not an error,
// and a file there that is not a symbolic link is left alone.
func (p CLIPlugin) Uninstall() error { return p.links().Uninstall() }
