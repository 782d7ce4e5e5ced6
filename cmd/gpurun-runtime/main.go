// Command gpurun-runtime is an OCI runtime for containerd and dockerd: it
// takes runc's command line, gives a GPU container the /dev/shm gpurun's
// policy decides on create and run, and execs the low-level runtime
// (runc by default) with the command line, less its own flags.
package main

import "os"

func main() {
	os.Exit(newShim().Main())
}
