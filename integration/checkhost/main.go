// Command checkhost checks that gpurun's tests leave the machine as they
// found it. It is test tooling (`make host-snapshot`, `make check-host`,
// .ci/run), not part of gpurun's binaries.
//
//	checkhost snapshot FILE       record the host in FILE (JSON)
//	checkhost compare FILE        compare the host now with FILE; exit 1 naming each change
//	checkhost diff BEFORE AFTER   compare two snapshot files
//
// It records the network interfaces (docker0 above all: a dockerd started
// with --bridge=none in the host's network namespace deletes it), the
// engines' configuration and hooks directories and gpurun's install paths
// (every file hashed), the mount table, the cgroup directories, the
// processes of container engines, Kubernetes and gpurun, and the harness's
// directories in /tmp. It runs as root: most of that is root's to read.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

const usage = `usage:
  checkhost snapshot FILE       record the host in FILE
  checkhost compare FILE        compare the host now with FILE; exit 1 naming each change
  checkhost diff BEFORE AFTER   compare two snapshot files
`

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "checkhost: needs root to read the engines' files and every process (sudo make host-snapshot, sudo make check-host)")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1:], HostSources(), os.Stdout, os.Stderr))
}

// run is the command: exit status 0 when nothing changed (or a snapshot
// was written), 1 when something changed, 2 on a usage or read error.
func run(args []string, src Sources, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "checkhost: %v\n", err)
		return 2
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch cmd := args[0]; {
	case cmd == "snapshot" && len(args) == 2:
		s, err := Take(src)
		if err != nil {
			return fail(err)
		}
		if err := writeSnapshot(args[1], s); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "checkhost: snapshot of the host in %s (%d interfaces, %d files, %d mounts, %d cgroups, %d engine processes, %d harness entries in /tmp)\n",
			args[1], len(s.Interfaces), len(s.Files), len(s.Mounts), len(s.Cgroups), len(s.Processes), len(s.Tmp))
		return 0
	case cmd == "compare" && len(args) == 2:
		before, err := readSnapshot(args[1])
		if err != nil {
			return fail(fmt.Errorf("%w (take one with `make host-snapshot` before the tests)", err))
		}
		now, err := Take(src)
		if err != nil {
			return fail(err)
		}
		return report(stdout, args[1], before, now)
	case cmd == "diff" && len(args) == 3:
		before, err := readSnapshot(args[1])
		if err != nil {
			return fail(err)
		}
		after, err := readSnapshot(args[2])
		if err != nil {
			return fail(err)
		}
		return report(stdout, args[1], before, after)
	}
	fmt.Fprint(stderr, usage)
	return 2
}

// report prints the changes from before to after and returns the exit
// status.
func report(w io.Writer, name string, before, after *Snapshot) int {
	changes := Compare(before, after)
	if len(changes) == 0 {
		fmt.Fprintf(w, "checkhost: the host is as the snapshot %s (%s) found it\n", name, before.Taken.Format("2006-01-02 15:04:05Z"))
		return 0
	}
	fmt.Fprintf(w, "checkhost: the host changed since the snapshot %s (%s): %d change(s)\n", name, before.Taken.Format("2006-01-02 15:04:05Z"), len(changes))
	for _, c := range changes {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintln(w, "(anything else that ran on this machine meanwhile — another test run, an engine of its own — shows here too)")
	return 1
}

func writeSnapshot(path string, s *Snapshot) error {
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

func readSnapshot(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no snapshot at %s", path)
		}
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return &s, nil
}
