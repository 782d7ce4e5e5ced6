package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/diagnose/explain"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

const explainLong = `Explain reads a job's log (FILE, or standard input when FILE is "-" or
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
log or the policy could not be read.`

func newExplainCmd(g *Globals) *cobra.Command {
	var (
		o      explain.RunOptions
		stream bool
		memory string
	)
	cmd := &cobra.Command{
		Use:   "explain [FILE|-]",
		Short: "Name the /dev/shm failures in a job's log, and the fix",
		Long:  explainLong,
		Example: `  gpurun explain train.log
  kubectl logs -f trainer-0 | gpurun explain -
  docker logs trainer 2>&1 | gpurun explain --memory 64g
  gpurun explain --json job.log.gz`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Policy, err = g.Policy(); err != nil {
				return exitcode.New(2, err)
			}
			if memory != "" {
				if o.Memory, err = policy.ParseSize(memory); err != nil {
					return exitcode.New(2, fmt.Errorf("--memory: %w", err))
				}
			}
			if len(args) == 1 {
				o.Path = args[0]
			}
			if cmd.Flags().Changed("stream") {
				o.Stream = &stream
			}
			o.In, o.Out, o.Err = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			return explain.Run(o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.JSON, "json", false, "print JSON: the report as one object, or (streaming) one object a line for each finding, then the report")
	f.BoolVar(&stream, "stream", false, "print each finding as soon as its line is read, the fix at the end (default: on for standard input)")
	f.StringVar(&memory, "memory", "", "the memory the job's container may use (e.g. 64g), to size the fix as gpurun run would (default: unknown, the policy minimum)")
	return cmd
}
