package launch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// DockerEnv names the docker CLI gpurun runs, when it is not "docker" on PATH.
const DockerEnv = "GPURUN_DOCKER"

// Options are gpurun's own options, given before the command, and the
// docker CLI's global options given among them.
type Options struct {
	// ConfigPath is gpurun's policy file (--config FILE, --policy); ""
	// means $GPURUN_CONFIG, else the default path.
	ConfigPath string
	// Verbose says why on stderr (-v, --verbose, GPURUN_VERBOSE).
	Verbose bool
	// DryRun prints what would be run, and why (--dry-run, GPURUN_DRY_RUN).
	DryRun bool
	// DockerGlobals are the docker CLI's global options (-H, --context,
	// --config DIR, ...), in order and as written: the docker run gpurun
	// execs gets them again, and gpurun's own questions to the daemon go
	// where they point.
	DockerGlobals []string
}

// LoadPolicy loads the policy named by ConfigPath, GPURUN_CONFIG (read
// with getenv) or the default path.
func (o *Options) LoadPolicy(getenv func(string) string) (*policy.Policy, error) {
	path, explicit := policy.ResolvePath(o.ConfigPath, getenv)
	return policy.Load(path, explicit)
}

// FromEnv takes gpurun's own options from GPURUN_DRY_RUN and GPURUN_VERBOSE
// ("1", "true" or "yes"); flags given on the command line come after.
func (o *Options) FromEnv(getenv func(string) string) {
	on := func(k string) bool {
		switch strings.ToLower(getenv(k)) {
		case "1", "true", "yes":
			return true
		}
		return false
	}
	o.DryRun = o.DryRun || on("GPURUN_DRY_RUN")
	o.Verbose = o.Verbose || on("GPURUN_VERBOSE")
}

// Env is the process a docker run is dispatched in: its environment, its
// files, its output and its exec. OSEnv is the real one; tests replace
// fields.
type Env struct {
	Getenv    func(string) string
	LookupEnv func(string) (string, bool)
	Environ   func() []string
	// Stat tells --config DIR (docker's) from --config FILE (gpurun's).
	Stat func(string) (fs.FileInfo, error)
	// ReadFile reads docker run's --env-file files.
	ReadFile func(string) ([]byte, error)
	// LocalFacts are this host's memory and GPUs (sysinfo.Facts).
	LocalFacts func() (oci.Facts, error)
	// LookPath finds the docker CLI (exec.LookPath).
	LookPath func(string) (string, error)
	// Exec replaces the process with the docker CLI (syscall.Exec).
	Exec   func(path string, argv, env []string) error
	Stdout io.Writer
	Stderr io.Writer
}

// OSEnv returns this process's Env.
func OSEnv() Env {
	return Env{
		Getenv: os.Getenv, LookupEnv: os.LookupEnv, Environ: os.Environ, Stat: os.Stat,
		ReadFile: os.ReadFile, LocalFacts: sysinfo.Facts, LookPath: exec.LookPath, Exec: syscall.Exec,
		Stdout: os.Stdout, Stderr: os.Stderr,
	}
}

// Invocation is a docker container command: the words that name it as the
// user wrote them ("run", "create", "container run", "container create")
// and docker's arguments after them.
type Invocation struct {
	Command []string
	Args    []string
}

// Dispatch is a gpurun command line's docker part: it reads the options
// before the command into o (ParseOptions) and, when the command is a
// docker container command (ParseCommand), runs it (Run) and returns
// handled true. Otherwise rest is the command line after the options, for
// gpurun's own subcommands, which subcommand names. Errors carry their exit
// status (exitcode): 2 for a command line gpurun cannot take.
func Dispatch(args []string, o *Options, subcommand func(string) bool, env Env) (rest []string, handled bool, err error) {
	rest, err = ParseOptions(args, o, env)
	if err != nil {
		return nil, false, exitcode.New(2, err)
	}
	inv, ok, err := ParseCommand(rest, *o, subcommand)
	if err != nil {
		return nil, false, exitcode.New(2, err)
	}
	if !ok {
		return rest, false, nil
	}
	return nil, true, Run(inv, *o, env)
}

// ownOptions are gpurun's own options that may come before the command,
// mixed with docker's global options. gpurun's -v is --verbose (docker's
// -v, --version, would only print docker's version).
func ownOptions() []runargs.Flag {
	return []runargs.Flag{
		{Name: "dry-run", Type: "bool"},
		{Name: "verbose", Shorthand: "v", Type: "bool"},
		{Name: "policy", Type: "string"},
	}
}

// ParseOptions separates the options before the command from the command:
// gpurun's own (--dry-run, -v, --policy, and --config naming a file, after
// GPURUN_DRY_RUN and GPURUN_VERBOSE) go into o; docker's global options
// (-H, --context, --config naming a directory, --tls..., see
// runargs.GlobalFlags) are appended, in order and as written, to
// o.DockerGlobals. It stops at the first argument that is neither: the
// command, or, in the short form "gpurun -it IMAGE", the first option of
// docker run's; and at --help and --version, which are gpurun's.
func ParseOptions(args []string, o *Options, env Env) (rest []string, err error) {
	o.FromEnv(env.Getenv)
	dg, err := runargs.ParseGlobals(args, ownOptions())
	end := dg.Command
	if err != nil {
		fe, ok := errors.AsType[*runargs.FlagError](err)
		if !ok {
			return nil, err
		}
		if _, unknown := errors.AsType[*pflag.NotExistError](fe.Err); !unknown {
			return nil, fmt.Errorf("%s: %s", fe.Flag, fe.Msg)
		}
		end = fe.Index // "gpurun -it img": docker run's options start here
	}
	for i, span := range dg.Spans() {
		opt := dg.Occurrences[i]
		if span[1] > end {
			span[1] = end
		}
		switch opt.Name {
		case "help", "version":
			return args[opt.Index:], nil
		case "dry-run":
			o.DryRun = opt.Value == "true"
		case "verbose":
			o.Verbose = opt.Value == "true"
		case "policy":
			o.ConfigPath = opt.Value
		case "config":
			if fi, err := env.Stat(opt.Value); err != nil || !fi.IsDir() {
				// gpurun's --config FILE, as before --policy.
				o.ConfigPath = opt.Value
				continue
			}
			fallthrough // docker's --config DIR
		default:
			o.DockerGlobals = append(o.DockerGlobals, args[span[0]:span[1]]...)
		}
	}
	return args[end:], nil
}

// ParseCommand says what a command line (after the options) asks for: a
// container command of docker's ("run", "create", "container run",
// "container create"), or, with ok false, one of gpurun's subcommands (a
// name subcommand knows) or help. "gpurun IMAGE ..." and "gpurun -it IMAGE
// ..." are a docker run. Any other docker command is an error, and so are
// docker's global options before one of gpurun's own subcommands, which
// never use them.
func ParseCommand(rest []string, o Options, subcommand func(string) bool) (inv Invocation, ok bool, err error) {
	if len(rest) == 0 {
		if len(o.DockerGlobals) > 0 {
			return Invocation{}, false, fmt.Errorf("docker options %s: no command follows them (gpurun runs docker run, create, container run and container create)", strings.Join(o.DockerGlobals, " "))
		}
		return Invocation{}, false, nil
	}
	if n, _, isContainer := runargs.IsContainerCommand(rest); isContainer {
		return Invocation{Command: rest[:n], Args: rest[n:]}, true, nil
	}
	first := rest[0]
	own := subcommand(first)
	switch first {
	case "-h", "--help", "help", "--version", "completion", "__complete", "__completeNoDesc":
		own = true
	}
	switch {
	case own && len(o.DockerGlobals) > 0:
		return Invocation{}, false, fmt.Errorf("docker options %s: gpurun %s does not use them; they go before run, create, container run or container create", strings.Join(o.DockerGlobals, " "), first)
	case own:
		return Invocation{}, false, nil
	case runargs.IsDockerCommand(first):
		what := first
		if first == "container" && len(rest) > 1 {
			what += " " + rest[1]
		}
		return Invocation{}, false, fmt.Errorf("%q is a docker command gpurun does not wrap: run docker %s directly (gpurun wraps run, create, container run and container create; write \"gpurun run %s\" for an image named %s)", what, what, first, first)
	}
	return Invocation{Command: []string{"run"}, Args: rest}, true, nil
}
