package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/dockercli"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/sysinfo"
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
			return runDocker(g, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

// runDocker is `gpurun run ARGS`: decide, then exec docker (or print, with
// --dry-run). It returns only on --dry-run or when docker cannot be run.
func runDocker(g *globals, args []string, stdout, stderr io.Writer) error {
	dockerPath := os.Getenv(DockerEnv)
	if dockerPath == "" {
		dockerPath = "docker"
	}
	resolved, lookErr := exec.LookPath(dockerPath)

	pol, err := g.loadPolicy()
	if err != nil {
		return &exitError{2, err}
	}
	req := dockercli.Request{
		Args:       args,
		Policy:     pol,
		LookupEnv:  os.LookupEnv,
		ReadFile:   os.ReadFile,
		LocalFacts: sysinfo.Facts,
	}
	if ep, err := dockercli.ResolveEndpoint(os.Getenv); err == nil {
		req.DaemonLocal = strings.HasPrefix(ep.Host, "unix://")
	}
	if d, err := dockercli.NewAPIDaemon(os.Getenv); err == nil {
		defer d.Close()
		req.Daemon = d
	} else if g.verbose {
		fmt.Fprintf(stderr, "gpurun: %v\n", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), daemonTimeout)
	res := dockercli.Prepare(ctx, req)
	cancel()

	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "gpurun: warning: %s\n", w)
	}
	if g.verbose {
		for _, n := range res.Notes {
			fmt.Fprintf(stderr, "gpurun: %s\n", n)
		}
		fmt.Fprintf(stderr, "gpurun: %s\n", describe(res))
	}
	argv := append(append(append([]string{dockerPath}, g.dockerGlobals...), "run"), res.Args...)
	if g.dryRun {
		fmt.Fprintln(stdout, dockercli.ShellQuote(argv))
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

// describe is the one-line answer for people.
func describe(res dockercli.Result) string {
	pl := res.Plan
	switch pl.Action {
	case oci.ActionNone:
		return "unchanged: " + pl.Reason
	case oci.ActionIPCHost:
		return "added --ipc=host: " + pl.Reason
	}
	return fmt.Sprintf("added %s (/dev/shm %s): %s", res.Added, policy.FormatSize(pl.Size), pl.Reason)
}

// splitGlobals separates gpurun's own leading options from the rest of the
// command line, so "gpurun --dry-run -it img" and "gpurun -v run img" work.
// It stops at the first argument that is not one of gpurun's options.
func splitGlobals(args []string, g *globals) (rest []string, err error) {
	g.fromEnv(os.Getenv)
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--dry-run":
			g.dryRun = true
		case a == "-v" || a == "--verbose":
			g.verbose = true
		case a == "--config":
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag needs an argument: --config")
			}
			i++
			g.configPath = args[i]
		case strings.HasPrefix(a, "--config="):
			g.configPath = strings.TrimPrefix(a, "--config=")
		default:
			return args[i:], nil
		}
	}
	return nil, nil
}

// isRunInvocation reports whether a command line (after gpurun's own
// options) is a docker run: "run ...", or anything that is not one of
// gpurun's subcommands or help.
func isRunInvocation(root *cobra.Command, rest []string) (args []string, ok bool) {
	if len(rest) == 0 {
		return nil, false
	}
	first := rest[0]
	if first == "run" {
		return rest[1:], true
	}
	switch first {
	case "-h", "--help", "help", "--version", "completion", "__complete", "__completeNoDesc":
		return nil, false
	}
	for _, c := range root.Commands() {
		if c.Name() == first || c.HasAlias(first) {
			return nil, false
		}
	}
	return rest, true
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
