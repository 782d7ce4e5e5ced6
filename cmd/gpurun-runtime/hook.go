package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpurun/gpurun/node/hook"
	"github.com/gpurun/gpurun/policy"
)

// hookCommand, as the first argument, makes gpurun-runtime gpurun's OCI
// hook: `gpurun-runtime hook [--stage S] [--config F]`, what `gpurun hook`
// does, from the small binary. No runtime gpurun-runtime wraps has a
// command of that name (runc, crun and NVIDIA's take global flags before
// theirs, and name none "hook"), so it shadows none.
const hookCommand = "hook"

// runHook runs the hook with args (those after hookCommand), the state on
// stdin: exit 0 when the container may start (sized, nothing to do, or an
// error the policy fails open on, which is logged), 1 when it must not
// (fail_closed), 2 for a command line it cannot read; --help prints the
// usage on stdout (naming hook.RuntimeUsage, which installers and doctor
// look for) and exits 0. The hooks.d entry
// `gpurun install podman|crio` writes runs it so: a hook sits on every
// container start, and this binary starts in a fraction of the CPU time
// the gpurun command (its CLI, the Docker and Kubernetes clients) needs.
func runHook(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(hook.RuntimeUsage, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the usage is printed below, where it belongs
	stage := fs.String("stage", "", `the hook stage the runtime runs it in, for the log ("createContainer": look in the hook's own mount namespace first)`)
	config := fs.String("config", "", fmt.Sprintf("gpurun's policy file (default: $%s, else %s)", policy.ConfigEnv, policy.DefaultConfigPath))
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", hook.Component, err)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: %s takes no arguments, got %q\n", hook.Component, hook.RuntimeUsage, fs.Args())
		return 2
	}
	h := hook.New(stdin)
	h.ConfigPath, h.Stage = *config, *stage
	if err := h.Run(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", hook.Component, err)
		return 1
	}
	return 0
}

// hookMain is main's hook mode: true, with the exit status, when the
// command line asks for it.
func hookMain(args []string) (int, bool) {
	if len(args) < 2 || args[1] != hookCommand {
		return 0, false
	}
	return runHook(args[2:], os.Stdin, os.Stdout, os.Stderr), true
}
