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
		stream bool
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
segment") under vLLM, DeepSpeed or torchrun alike, Ray's object store falling
back to /tmp, Triton's Python backend, PostgreSQL's "could not resize shared
memory segment", Python multiprocessing, and the vaguer messages
("DataLoader worker exited unexpectedly", _queue.Empty, a bare NCCL
"unhandled system error") with the confidence they deserve: certain, likely
or possible. For each it prints the lines, the cause, how much /dev/shm the
message implies, and the fix, sized by gpurun's policy (--memory sizes it for
a container with that much memory, as gpurun run would). Look-alikes (CUDA
out of memory, too many open files, NCCL timeouts, ...) are named apart, as
what they are.

Standard input is read as a stream: each finding is printed as soon as its
line arrives (kubectl logs -f ... | gpurun explain -), and the fix once the
log ends. --stream=false waits for the end and prints the report sorted,
surest first, as for a file. With --json a stream prints one JSON object a
line: {"event":"finding","finding":{...}} for each finding as it arrives,
then {"event":"report","report":{...}}; otherwise --json prints the report
as one object.

Exit status: 0 nothing matched, 1 at least one /dev/shm failure found, 2 the
log or the policy could not be read.`,
		Example: `  gpurun explain train.log
  kubectl logs -f trainer-0 | gpurun explain -
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
			if !cmd.Flags().Changed("stream") {
				stream = src == "-"
			}
			out := cmd.OutOrStdout()
			opts := explain.Options{Source: src, Policy: pol, Memory: mem}
			var writeErr error
			if stream {
				shown := 0
				opts.OnFinding = func(f explain.Finding) {
					if writeErr != nil {
						return
					}
					if asJSON {
						writeErr = writeJSON(out, streamEvent{Event: "finding", Finding: &f})
						return
					}
					if f.Kind != explain.KindOther {
						shown++
					}
					writeErr = explain.WriteFinding(out, shown, f)
				}
			}
			rep, err := explain.Scan(in, opts)
			if err != nil {
				return &exitError{2, fmt.Errorf("explain: %w", err)}
			}
			switch {
			case writeErr != nil:
				err = writeErr
			case stream && asJSON:
				err = writeJSON(out, streamEvent{Event: "report", Report: rep})
			case stream:
				err = explain.WriteStreamEnd(out, rep)
			case asJSON:
				err = writeJSON(out, rep)
			default:
				err = explain.WriteText(out, rep)
			}
			if err != nil {
				return fmt.Errorf("explain: write: %w", err)
			}
			if rep.Found() {
				return &exitError{1, fmt.Errorf("explain: %d /dev/shm finding(s) in %s", len(rep.Findings), sourceName(src))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON: the report as one object, or (streaming) one object a line for each finding, then the report")
	f.BoolVar(&stream, "stream", false, "print each finding as soon as its line is read, the fix at the end (default: on for standard input)")
	f.StringVar(&memory, "memory", "", "the memory the job's container may use (e.g. 64g), to size the fix as gpurun run would (default: unknown, the policy minimum)")
	return cmd
}

// streamEvent is one line of explain --json on a stream.
type streamEvent struct {
	Event   string           `json:"event"` // "finding" or "report"
	Finding *explain.Finding `json:"finding,omitempty"`
	Report  *explain.Report  `json:"report,omitempty"`
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// sourceName is how messages name a log.
func sourceName(src string) string {
	if src == "-" {
		return "standard input"
	}
	return src
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
