//go:build gpurun_lean

package main

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"
)

// addFullCmds adds gpurun's stubs for the commands of gpurun-full.
func addFullCmds(root *cobra.Command, _ *globals) {
	root.AddCommand(stubCmds()...)
}

// dispatch hands a command line for gpurun-full (a command of its, help or
// completion for one, or the NRI plugin launched by the runtime with no
// arguments) to gpurun-full, which replaces this process; it returns only
// when that fails. Every other command line goes to the command tree.
func dispatch(args, rest []string) (cobraArgs []string, handled bool, err error) {
	if !delegated(rest) && (len(rest) > 0 || os.Getenv(nriPluginSocketEnv) == "") {
		return args, false, nil
	}
	d := delegator{Executable: os.Executable, LookPath: exec.LookPath, Exec: syscall.Exec, Environ: os.Environ()}
	return nil, true, d.run(args)
}
