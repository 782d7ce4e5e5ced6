package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/policy"
)

// newShmProbeCmd is the hidden `gpurun shm-probe`: allocations in /dev/shm
// the way PyTorch DataLoader workers and NCCL make them, for the
// end-to-end checks and for looking at a container by hand. It runs inside
// the container (gpurun is one static binary).
func newShmProbeCmd() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
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
	pf.StringVar(&dir, "dir", shmprobe.DefaultDir, "directory to allocate in")
	pf.BoolVar(&asJSON, "json", false, "print one JSON object instead of a line")
	report := func(out io.Writer, v fmt.Stringer, failure shmprobe.Failure) error {
		if asJSON {
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v); err != nil {
				return err
			}
		} else if _, err := fmt.Fprintln(out, v.String()); err != nil {
			return err
		}
		if code := shmprobe.ExitStatus(failure); code != 0 {
			return &exitError{code, fmt.Errorf("shm-probe: %s", failure)}
		}
		return nil
	}

	var (
		workers int
		wseg    string
	)
	dataloader := &cobra.Command{
		Use:   "dataloader",
		Short: "Workers that map and touch segments, like PyTorch DataLoader workers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			seg, err := policy.ParseSize(wseg)
			if err != nil {
				return &exitError{2, fmt.Errorf("--segment-size: %w", err)}
			}
			self, err := os.Executable()
			if err != nil {
				return &exitError{2, fmt.Errorf("shm-probe: find own binary: %w", err)}
			}
			r, err := shmprobe.DataLoader(cmd.Context(), shmprobe.DataLoaderOptions{
				Dir: dir, Workers: workers, SegmentSize: seg,
				Command: func(args []string) *exec.Cmd {
					return exec.Command(self, append([]string{"shm-probe", "worker", "--"}, args...)...)
				},
			})
			if err != nil {
				return &exitError{2, err}
			}
			return report(cmd.OutOrStdout(), r, r.Failure)
		},
	}
	dataloader.Flags().IntVar(&workers, "workers", shmprobe.DefaultWorkers, "worker processes, all holding their segment at once")
	dataloader.Flags().StringVar(&wseg, "segment-size", policy.FormatDocker(shmprobe.DefaultWorkerSegment), "what each worker maps and touches")

	var (
		count int
		nseg  string
	)
	nccl := &cobra.Command{
		Use:   "nccl",
		Short: "Segments reserved with posix_fallocate, like NCCL's SHM transport",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			seg, err := policy.ParseSize(nseg)
			if err != nil {
				return &exitError{2, fmt.Errorf("--segment-size: %w", err)}
			}
			r := shmprobe.NCCL(shmprobe.NCCLOptions{Dir: dir, SegmentSize: seg, Count: count})
			return report(cmd.OutOrStdout(), r, r.Failure)
		},
	}
	nccl.Flags().IntVar(&count, "count", shmprobe.DefaultNCCLCount, "segments to create")
	nccl.Flags().StringVar(&nseg, "segment-size", fmt.Sprint(shmprobe.NCCLSegmentSize), "bytes per segment")

	size := &cobra.Command{
		Use:   "size SIZE",
		Short: "Reserve SIZE in one file, then free it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := policy.ParseAnySize(args[0])
			if err != nil {
				return &exitError{2, fmt.Errorf("SIZE: %w", err)}
			}
			r := shmprobe.Check(dir, n)
			return report(cmd.OutOrStdout(), r, r.Failure)
		},
	}

	worker := &cobra.Command{
		Use:    "worker DIR SIZE INDEX",
		Short:  "One DataLoader probe worker (run by shm-probe dataloader)",
		Hidden: true,
		Args:   cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := shmprobe.RunWorker(args, cmd.InOrStdin(), cmd.OutOrStdout()); err != nil {
				return &exitError{1, err}
			}
			return nil
		},
	}
	cmd.AddCommand(dataloader, nccl, size, worker)
	return cmd
}
