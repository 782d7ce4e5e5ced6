// Command gpurun gives GPU containers a /dev/shm big enough for real work:
// `gpurun plan` shows the decision for a bundle's config.json, and later
// subcommands carry it out through every front door (docker run, compose,
// the runtime shim, hooks, NRI).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpurun/gpurun/runtime/install"
)

func main() {
	g := &globals{}
	args := os.Args[1:]
	if install.IsCLIPlugin(os.Args[0]) {
		// Run by the docker CLI as docker-gpurun (`docker gpurun ...`).
		rest, code, done := fromDockerCLI(g, args, os.Stdout, os.Stderr)
		if done {
			os.Exit(code)
		}
		args = rest
	}
	os.Exit(run(g, args))
}

// run dispatches a command line: a docker run (with gpurun's own options
// before it) goes straight to the launcher with its arguments untouched;
// everything else goes to the subcommands.
func run(g *globals, args []string) int {
	root := newRootCmd(g)
	err := func() error {
		rest, err := splitGlobals(args, g)
		if err != nil {
			return &exitError{2, err}
		}
		command, dockerArgs, ok, err := isRunInvocation(root, rest, g)
		if err != nil {
			return &exitError{2, err}
		}
		if ok {
			return runDocker(g, command, dockerArgs, os.Stdout, os.Stderr)
		}
		cobraArgs, handled, err := dispatch(args, rest)
		if handled {
			return err
		}
		root.SetArgs(cobraArgs)
		return root.Execute()
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpurun: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 2
	}
	return 0
}

// exitError carries the exit status a command wants.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
