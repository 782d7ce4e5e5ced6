// Command gpurun-full is gpurun with every command in-process: what the
// lean gpurun (cmd/gpurun) runs itself, and plan, compose, doctor, stats,
// resize, node, nri, webhook and __gendocs, which gpurun hands to it.
// Install it next to gpurun; the Kubernetes DaemonSets, the NRI plugin
// directory and `gpurun node` run it directly.
package main

import (
	"os"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/cmd/internal/fullcli"
)

func main() {
	os.Exit(cli.Main(fullcli.Binary()))
}
