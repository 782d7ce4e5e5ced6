package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpurun/gpurun/docker/launch"
	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/internal/sysinfo"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// DockerEnv names the docker CLI gpurun runs, when it is not "docker" on PATH.
const DockerEnv = "GPURUN_DOCKER"

// daemonTimeout bounds what gpurun asks the daemon before handing over.
const daemonTimeout = 5 * time.Second

func newRunCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "run [DOCKER RUN OPTIONS] IMAGE [COMMAND] [ARG...]",
		Short: "docker run, with the /dev/shm gpurun's policy gives GPU containers",
		Long: `Run takes exactly the arguments of "docker run" and runs the docker CLI with
them, adding --shm-size=<bytes> right after "run" when the container uses a
GPU and its /dev/shm would be too small (or --ipc=host in mode ipc-host).
Everything else — flags, TTY, signals, exit status, DOCKER_HOST and contexts —
is docker's own: gpurun replaces itself with docker.

"gpurun IMAGE ..." and "gpurun -it IMAGE ..." mean "gpurun run ...".
gpurun's own options go before "run": --dry-run, -v, --config; or in the
environment: GPURUN_DRY_RUN=1, GPURUN_VERBOSE=1, GPURUN_CONFIG, GPURUN_DOCKER.`,
		Example: `  gpurun run --rm -it --gpus all nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py
  gpurun --dry-run run --rm -e NVIDIA_VISIBLE_DEVICES=all busybox df -k /dev/shm
  GPURUN_DOCKER=/usr/bin/docker gpurun -v run --rm --memory 2g my/trainer`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDocker(g, []string{"run"}, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func newCreateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "create [DOCKER CREATE OPTIONS] IMAGE [COMMAND] [ARG...]",
		Short: "docker create, with the /dev/shm gpurun's policy gives GPU containers",
		Long: `Create is run's twin for "docker create": it takes exactly the arguments of
"docker create", adds --shm-size=<bytes> (or --ipc=host) as run does, and
replaces itself with the docker CLI. "gpurun container create" and
"gpurun container run" are the same commands.`,
		Example: `  gpurun create --name trainer --gpus all nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py
  gpurun --dry-run container create -e NVIDIA_VISIBLE_DEVICES=all busybox`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDocker(g, []string{"create"}, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

// runDocker is `gpurun run ARGS` (or create, container run, container
// create: command holds those words as the user wrote them): decide, then
// exec docker (or print, with --dry-run). It returns only on --dry-run or
// when docker cannot be run.
func runDocker(g *globals, command, args []string, stdout, stderr io.Writer) error {
	dockerPath := os.Getenv(DockerEnv)
	if dockerPath == "" {
		dockerPath = "docker"
	}
	resolved, lookErr := exec.LookPath(dockerPath)

	pol, err := g.loadPolicy()
	if err != nil {
		return &exitError{2, err}
	}
	req := launch.Request{
		Args:       args,
		Policy:     pol,
		LookupEnv:  os.LookupEnv,
		ReadFile:   os.ReadFile,
		LocalFacts: sysinfo.Facts,
	}
	getenv, files, err := dockerClientEnv(g.dockerGlobals, os.Getenv)
	if err != nil && g.verbose {
		fmt.Fprintf(stderr, "gpurun: docker options %q: %v; asking the daemon the environment names\n", g.dockerGlobals, err)
	}
	if ep, err := dockerapi.ResolveEndpoint(getenv); err == nil && strings.HasPrefix(ep.Host, "unix://") {
		var why string
		if req.DaemonLocal, why = dockerapi.OnThisHost(ep.Host); !req.DaemonLocal && g.verbose {
			fmt.Fprintf(stderr, "gpurun: %s: asking the daemon for its host's memory\n", why)
		}
	}
	if d, err := dockerapi.NewAPIDaemon(getenv, files); err == nil {
		defer d.Close()
		d.Local = req.DaemonLocal
		d.Cache = dockerapi.ShmCache{Path: dockerapi.DefaultShmCachePath(os.Getenv)}
		req.Daemon = d
	} else if g.verbose {
		fmt.Fprintf(stderr, "gpurun: %v\n", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), daemonTimeout)
	res := launch.Prepare(ctx, req)
	cancel()

	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "gpurun: warning: %s\n", w)
	}
	if res.Skipped != "" {
		fmt.Fprintf(stderr, "gpurun: not carried out: %s\n", res.Skipped)
	}
	if g.verbose {
		for _, n := range res.Notes {
			fmt.Fprintf(stderr, "gpurun: %s\n", n)
		}
		fmt.Fprintf(stderr, "gpurun: %s\n", describe(res))
	}
	argv := make([]string, 0, 1+len(g.dockerGlobals)+len(command)+len(res.Args))
	argv = append(append(append(append(argv, dockerPath), g.dockerGlobals...), command...), res.Args...)
	if g.dryRun {
		fmt.Fprintln(stdout, launch.ShellQuote(argv))
		fmt.Fprintf(stdout, "# %s\n", describe(res))
		return nil
	}
	if lookErr != nil {
		return &exitError{127, fmt.Errorf("docker CLI not found (set %s): %w", DockerEnv, lookErr)}
	}
	argv[0] = resolved
	// Replace gpurun, so TTY, signals and the exit status are docker's own.
	if err := syscall.Exec(resolved, argv, os.Environ()); err != nil {
		return &exitError{126, fmt.Errorf("exec %s: %w", resolved, err)}
	}
	return nil
}

// dockerClientEnv returns the environment and TLS files gpurun's own Docker
// client uses so that it asks the daemon the docker CLI will: the one the
// docker options (-H, --context, --config, --tls...) name, else the one the
// environment names. Options it cannot read (a newer docker's, given to the
// CLI plugin) leave the environment as it is, with the error.
func dockerClientEnv(opts []string, getenv func(string) string) (func(string) string, dockerapi.TLSFiles, error) {
	if len(opts) == 0 {
		return getenv, dockerapi.TLSFiles{}, nil
	}
	dg, err := runargs.ParseGlobals(opts, nil)
	if err != nil {
		return getenv, dockerapi.TLSFiles{}, err
	}
	env, err := dg.Env(getenv)
	if err != nil {
		return getenv, dockerapi.TLSFiles{}, err
	}
	return env, dockerapi.TLSFiles{CACert: dg.TLSCACert, Cert: dg.TLSCert, Key: dg.TLSKey}, nil
}

// describe is the one-line answer for people.
func describe(res launch.Result) string {
	pl := res.Plan
	switch {
	case res.Skipped != "":
		return fmt.Sprintf("unchanged (the plan, %s to %s, is not docker run's to carry out): %s", pl.Action, policy.FormatSize(pl.Size), pl.Reason)
	}
	switch pl.Action {
	case oci.ActionNone:
		return "unchanged: " + pl.Reason
	case oci.ActionIPCHost:
		return "added --ipc=host: " + pl.Reason
	}
	return fmt.Sprintf("added %s (/dev/shm %s): %s", res.Added, policy.FormatSize(pl.Size), pl.Reason)
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

// splitGlobals separates the options before the command from the command:
// gpurun's own (--dry-run, -v, --policy, and --config naming a file) go
// into g; docker's global options (-H, --context, --config naming a
// directory, --tls..., see runargs.GlobalFlags) are appended, in order
// and as written, to g.dockerGlobals, for the docker CLI gpurun runs and for
// gpurun's own questions to the daemon. It stops at the first argument that
// is neither: the command, or, in the short form "gpurun -it IMAGE", the
// first option of docker run's; and at --help and --version, which are
// gpurun's.
func splitGlobals(args []string, g *globals) (rest []string, err error) {
	g.fromEnv(os.Getenv)
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
		o := dg.Occurrences[i]
		if span[1] > end {
			span[1] = end
		}
		switch o.Name {
		case "help", "version":
			return args[o.Index:], nil
		case "dry-run":
			g.dryRun = o.Value == "true"
		case "verbose":
			g.verbose = o.Value == "true"
		case "policy":
			g.configPath = o.Value
		case "config":
			if !isDir(o.Value) {
				// gpurun's --config FILE, as before --policy.
				g.configPath = o.Value
				continue
			}
			fallthrough // docker's --config DIR
		default:
			g.dockerGlobals = append(g.dockerGlobals, args[span[0]:span[1]]...)
		}
	}
	return args[end:], nil
}

// isDir reports whether path names a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// isRunInvocation says what a command line (after the options) asks for:
// a container command of docker's ("run", "create", "container run",
// "container create": command holds those words, args the rest), or, with
// ok false, one of gpurun's subcommands or help. "gpurun IMAGE ..." and
// "gpurun -it IMAGE ..." are a docker run. Any other docker command is an
// error, and so are docker's global options before one of gpurun's own
// subcommands, which never use them.
func isRunInvocation(root *cobra.Command, rest []string, g *globals) (command, args []string, ok bool, err error) {
	if len(rest) == 0 {
		if len(g.dockerGlobals) > 0 {
			return nil, nil, false, fmt.Errorf("docker options %s: no command follows them (gpurun runs docker run, create, container run and container create)", strings.Join(g.dockerGlobals, " "))
		}
		return nil, nil, false, nil
	}
	if n, _, isContainer := runargs.IsContainerCommand(rest); isContainer {
		return rest[:n], rest[n:], true, nil
	}
	first := rest[0]
	own := false
	switch first {
	case "-h", "--help", "help", "--version", "completion", "__complete", "__completeNoDesc":
		own = true
	}
	for _, c := range root.Commands() {
		if c.Name() == first || c.HasAlias(first) {
			own = true
		}
	}
	switch {
	case own && len(g.dockerGlobals) > 0:
		return nil, nil, false, fmt.Errorf("docker options %s: gpurun %s does not use them; they go before run, create, container run or container create", strings.Join(g.dockerGlobals, " "), first)
	case own:
		return nil, nil, false, nil
	case runargs.IsDockerCommand(first):
		what := first
		if first == "container" && len(rest) > 1 {
			what += " " + rest[1]
		}
		return nil, nil, false, fmt.Errorf("%q is a docker command gpurun does not wrap: run docker %s directly (gpurun wraps run, create, container run and container create; write \"gpurun run %s\" for an image named %s)", what, what, first, first)
	}
	return []string{"run"}, rest, true, nil
}

// fromEnv takes gpurun's own options from GPURUN_DRY_RUN and GPURUN_VERBOSE
// ("1", "true" or "yes"); flags given on the command line come after.
func (g *globals) fromEnv(getenv func(string) string) {
	on := func(k string) bool {
		switch strings.ToLower(getenv(k)) {
		case "1", "true", "yes":
			return true
		}
		return false
	}
	g.dryRun = g.dryRun || on("GPURUN_DRY_RUN")
	g.verbose = g.verbose || on("GPURUN_VERBOSE")
}
