// Package fullcli is gpurun-full's own commands: plan, resize, node, nri,
// webhook, doctor, stats, compose and __gendocs, which the lean gpurun
// hands to gpurun-full. Each fills a package's options from its flags and
// calls it. Here, and only here and in cmd/gpurun-full, come the packages
// that are slow to start (compose-go, the Kubernetes API types, gRPC/CRI,
// NRI, man pages, metrics).
package fullcli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/node/nri"
)

// Binary is gpurun-full: every command in-process.
func Binary() cli.Binary {
	return cli.Binary{
		AddCommands: AddCommands,
		Dispatch: func(args, rest []string) ([]string, bool, error) {
			return launchedNRI(args, rest, os.Getenv), false, nil
		},
	}
}

// AddCommands adds the commands only gpurun-full has (cli.FullCommands) to
// root, __gendocs last: it documents the whole tree.
func AddCommands(root *cobra.Command, g *cli.Globals) {
	root.AddCommand(newPlanCmd(g), newResizeCmd(g), newNodeCmd(g), newNRICmd(g), newWebhookCmd(g), newDoctorCmd(g), newStatsCmd(g), newComposeCmd(g))
	root.AddCommand(newGenDocsCmd(root))
}

// launchedNRI returns the command line to run: args, with "nri" added when
// there is no command (rest is args without gpurun's own options) and a
// runtime launched this binary as a pre-installed NRI plugin, which it
// does without arguments.
func launchedNRI(args, rest []string, getenv func(string) string) []string {
	if len(rest) == 0 && nri.Launched(getenv) {
		return append(args[:len(args):len(args)], "nri")
	}
	return args
}

// signalContext ends when the process gets SIGTERM or SIGINT.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
}
