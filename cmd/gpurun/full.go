//go:build !gpurun_lean

package main

import (
	"os"

	"github.com/spf13/cobra"
)

// addFullCmds adds the commands only gpurun-full has (fullCommands),
// __gendocs last: it documents the whole tree.
func addFullCmds(root *cobra.Command, g *globals) {
	root.AddCommand(newPlanCmd(g), newResizeCmd(g), newNodeCmd(g), newNRICmd(g), newWebhookCmd(g), newDoctorCmd(g), newStatsCmd(g), newComposeCmd(g))
	root.AddCommand(newGenDocsCmd(root))
}

// dispatch returns the arguments for the command tree: gpurun-full runs
// every command itself, and the NRI plugin when the runtime launched it
// with none.
func dispatch(args, rest []string) (cobraArgs []string, handled bool, err error) {
	return launchedNRI(args, rest, os.Getenv), false, nil
}
