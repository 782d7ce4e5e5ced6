package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/diagnose/explain"
	"github.com/gpurun/gpurun/policy"
)

func newExplainCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		memory string
	)
	cmd := &cobra.Command{
		Use:   "explain [FILE|-]",
		Short: "Name the /dev/shm failures in a job's log, and the fix",
		Long: `Explain reads a job's log (FILE, or standard input when FILE is "-" or
missing; gzip-compressed logs too) and names the /dev/shm failures in it:
PyTorch DataLoader workers killed by "Bus error", shared tensors that did not
fit ("unable to write to file </torch_...>"), NCCL segments that could not be
created ("posix_fallocate failed", "Error while creating shared memory
segment"), and the vaguer messages ("DataLoader worker exited unexpectedly",
_queue.Empty, ncclSystemError) when the lines around them tie them to
/dev/shm. For each it prints the lines, the cause, how much /dev/shm the
message implies, and the fix, sized by gpurun's policy (--memory sizes it for
a container with that much memory, as gpurun run would).

Exit status: 0 nothing matched, 1 at least one /dev/shm failure found, 2 the
log or the policy could not be read.`,
		Example: `  gpurun explain train.log
  kubectl logs trainer-0 | gpurun explain
  docker logs trainer 2>&1 | gpurun explain --memory 64g
  gpurun explain --json job.log.gz`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pol, err := g.loadPolicy()
			if err != nil {
				return &exitError{2, err}
			}
			var mem int64
			if memory != "" {
				if mem, err = policy.ParseSize(memory); err != nil {
					return &exitError{2, fmt.Errorf("--memory: %w", err)}
				}
			}
			src, in := "-", cmd.InOrStdin()
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return &exitError{2, fmt.Errorf("explain: %w", err)}
				}
				defer f.Close()
				src, in = args[0], f
			} else if isTerminal(in) {
				fmt.Fprintln(cmd.ErrOrStderr(), "gpurun explain: reading the log from standard input (end it with Ctrl-D)")
			}
			rep, err := explain.Scan(in, explain.Options{Source: src, Policy: pol, Memory: mem})
			if err != nil {
				return &exitError{2, fmt.Errorf("explain: %w", err)}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				err = enc.Encode(rep)
			} else {
				err = explain.WriteText(out, rep)
			}
			if err != nil {
				return err
			}
			if rep.Found() {
				if src == "-" {
					src = "standard input"
				}
				return &exitError{1, fmt.Errorf("explain: %d /dev/shm finding(s) in %s", len(rep.Findings), src)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object: source, lines, findings, fix")
	f.StringVar(&memory, "memory", "", "the memory the job's container may use (e.g. 64g), to size the fix as gpurun run would (default: unknown, the policy minimum)")
	return cmd
}

// isTerminal reports whether r is a terminal (so that a user who typed
// `gpurun explain` alone learns that it waits for input).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
