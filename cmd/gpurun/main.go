// Command gpurun gives GPU containers a /dev/shm big enough for real work.
// This is the lean launcher that every `gpurun run` and every OCI hook call
// starts: docker run and create, the OCI hook, install and uninstall,
// explain, shm-probe, completion and version run in it; the other commands
// (plan, compose, doctor, stats, resize, node, nri, webhook) are handed,
// whole command line and all, to gpurun-full installed next to it
// (cmd/gpurun-full). Its import graph holds none of the packages that are
// slow to start (TestLeanImportGraph).
package main

import (
	"os"

	"github.com/gpurun/gpurun/cmd/internal/cli"
)

func main() {
	os.Exit(cli.Main(cli.Lean()))
}
