package cli

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// probeFlags are shm-probe's persistent flags.
type probeFlags struct {
	dir    string
	asJSON bool
}

// newShmProbeCmd is the hidden `gpurun shm-probe`: allocations in /dev/shm
// the way PyTorch DataLoader workers and NCCL make them, for the
// end-to-end checks and for looking at a container by hand. It runs inside
// the container (gpurun is one static binary).
func newShmProbeCmd() *cobra.Command {
	var f probeFlags
	cmd := &cobra.Command{
		Use:    "shm-probe dataloader|nccl|size",
		Short:  "Allocate in /dev/shm the way DataLoader workers and NCCL do (for tests)",
		Hidden: true,
		Long: `shm-probe allocates in /dev/shm (or --dir) the way its users do, prints one
line saying what happened (or one JSON object with --json), and frees
everything before it exits.

  dataloader  worker processes that each map and touch a segment, as PyTorch
              DataLoader workers do: on a full tmpfs they die of SIGBUS
  nccl        segments reserved with posix_fallocate, as NCCL's SHM transport
              does: on a full tmpfs it fails with ENOSPC
  size SIZE   reserve SIZE in one file, then free it

Exit status: 0 all allocated, 1 the allocation failed (SIGBUS, ENOSPC or
another error), 2 the probe could not run.`,
		Example: `  docker run --rm IMAGE shm-probe dataloader --workers 4 --segment-size 48m
  docker run --rm IMAGE shm-probe nccl --count 8
  gpurun shm-probe size 2g --json`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.dir, "dir", shmprobe.DefaultDir, "directory to allocate in")
	pf.BoolVar(&f.asJSON, "json", false, "print one JSON object instead of a line")
	cmd.AddCommand(newProbeDataLoaderCmd(&f), newProbeNCCLCmd(&f), newProbeSizeCmd(&f), newProbeWorkerCmd())
	return cmd
}

func newProbeDataLoaderCmd(f *probeFlags) *cobra.Command {
	var (
		workers int
		seg     string
	)
	cmd := &cobra.Command{
		Use:   "dataloader",
		Short: "Workers that map and touch segments, like PyTorch DataLoader workers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := policy.ParseSize(seg)
			if err != nil {
				return exitcode.New(2, fmt.Errorf("--segment-size: %w", err))
			}
			self, err := os.Executable()
			if err != nil {
				return exitcode.New(2, fmt.Errorf("shm-probe: find own binary: %w", err))
			}
			r, err := shmprobe.DataLoader(cmd.Context(), shmprobe.DataLoaderOptions{
				Dir: f.dir, Workers: workers, SegmentSize: size,
				Command: func(args []string) *exec.Cmd {
					return exec.Command(self, append([]string{"shm-probe", "worker", "--"}, args...)...)
				},
			})
			if err != nil {
				return exitcode.New(2, err)
			}
			return shmprobe.Print(cmd.OutOrStdout(), r, r.Failure, f.asJSON)
		},
	}
	cmd.Flags().IntVar(&workers, "workers", shmprobe.DefaultWorkers, "worker processes, all holding their segment at once")
	cmd.Flags().StringVar(&seg, "segment-size", policy.FormatDocker(shmprobe.DefaultWorkerSegment), "what each worker maps and touches")
	return cmd
}

func newProbeNCCLCmd(f *probeFlags) *cobra.Command {
	var (
		count int
		seg   string
	)
	cmd := &cobra.Command{
		Use:   "nccl",
		Short: "Segments reserved with posix_fallocate, like NCCL's SHM transport",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := policy.ParseSize(seg)
			if err != nil {
				return exitcode.New(2, fmt.Errorf("--segment-size: %w", err))
			}
			r := shmprobe.NCCL(shmprobe.NCCLOptions{Dir: f.dir, SegmentSize: size, Count: count})
			return shmprobe.Print(cmd.OutOrStdout(), r, r.Failure, f.asJSON)
		},
	}
	cmd.Flags().IntVar(&count, "count", shmprobe.DefaultNCCLCount, "segments to create")
	cmd.Flags().StringVar(&seg, "segment-size", fmt.Sprint(shmprobe.NCCLSegmentSize), "bytes per segment")
	return cmd
}

func newProbeSizeCmd(f *probeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "size SIZE",
		Short: "Reserve SIZE in one file, then free it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := policy.ParseAnySize(args[0])
			if err != nil {
				return exitcode.New(2, fmt.Errorf("SIZE: %w", err))
			}
			r := shmprobe.Check(f.dir, n)
			return shmprobe.Print(cmd.OutOrStdout(), r, r.Failure, f.asJSON)
		},
	}
}

func newProbeWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "worker DIR SIZE INDEX",
		Short:  "One DataLoader probe worker (run by shm-probe dataloader)",
		Hidden: true,
		Args:   cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := shmprobe.RunWorker(args, cmd.InOrStdin(), cmd.OutOrStdout()); err != nil {
				return exitcode.New(1, err)
			}
			return nil
		},
	}
}
