//go:build !gpurun_lean

package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/engine/criclient"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/engine/resize"
	"github.com/gpurun/gpurun/policy"
)

func newResizeCmd(g *globals) *cobra.Command {
	var (
		cri      bool
		endpoint string
		force    bool
	)
	cmd := &cobra.Command{
		Use:   "resize CONTAINER SIZE",
		Short: resizeShort,
		Long: `Resize changes the size of a running container's /dev/shm in place. The
processes inside see the new size at once; nothing restarts.

  - Docker --ipc shareable (and every container joined to it with
    --ipc container:X), and a Kubernetes pod's sandbox shm: the tmpfs the
    engine mounted on the host is remounted there, so every container that
    shares it sees the new size and they keep sharing it.
  - Docker private IPC (the default), or a --tmpfs /dev/shm: the tmpfs is
    remounted inside the container's mount namespace.

Safety: the host's /dev/shm is never touched (--ipc host is refused), only a
tmpfs the engine made under its own directories is remounted, the size never
goes below what /dev/shm holds, and not above the policy's max without
--force. Nothing else changes: Docker's own record (HostConfig.ShmSize) keeps
the old size, so a restart returns to it unless the container is recreated
with --shm-size (or started with gpurun run).

SIZE takes Docker units (2g, 512m) or Kubernetes quantities (2Gi, 512Mi).
Needs root (or CAP_SYS_ADMIN) on the host where the container runs.`,
		Example: `  # A training job hit "Bus error": give it 8 GiB of /dev/shm now
  sudo gpurun resize trainer 8g

  # A CRI container (Kubernetes node), by id as crictl ps shows it
  sudo gpurun resize --cri 3f2a9c1d 16Gi

  # Beyond the policy's max
  sudo gpurun resize --force trainer 300g`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, sizeArg := args[0], args[1]
			size, err := policy.ParseAnySize(sizeArg)
			if err != nil {
				return &exitError{2, fmt.Errorf("SIZE: %w", err)}
			}
			pol, err := g.loadPolicy()
			if err != nil {
				return &exitError{2, err}
			}
			if err := resize.Check(size, pol, force); err != nil {
				return &exitError{2, err}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			var t resize.Target
			if cri {
				conn, err := criclient.Dial(criclient.Endpoint(endpoint, os.Getenv))
				if err != nil {
					return &exitError{2, err}
				}
				defer conn.Close()
				t, err = resize.CRITarget(ctx, conn.Runtime, ref)
				if err != nil {
					return err
				}
			} else {
				c, err := dockerapi.NewClient(os.Getenv)
				if err != nil {
					return &exitError{2, err}
				}
				defer c.Close()
				t, err = resize.DockerTarget(ctx, c, ref)
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			where := describeTarget(t)
			if g.dryRun {
				_, err := fmt.Fprintf(out, "would resize /dev/shm of %s to %s (%s)\n", t.Name, policy.FormatSize(size), where)
				return err
			}
			res, err := resize.Apply(t, size, resize.Options{Policy: pol, Force: force})
			if err != nil {
				return fmt.Errorf("resize /dev/shm of %s: %w", t.Name, err)
			}
			verb := "resized"
			if !res.Changed {
				verb = "left"
			}
			fmt.Fprintf(out, "%s /dev/shm of %s: %s -> %s (%s)\n", verb, t.Name,
				policy.FormatSize(res.Before), policy.FormatSize(res.After), where)
			if t.SharedWith != "" {
				fmt.Fprintf(out, "shared with: %s\n", t.SharedWith)
			}
			_, err = fmt.Fprintf(out, "note: %s\n", t.Note)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cri, "cri", false, "CONTAINER is a CRI container id (Kubernetes), not a Docker container")
	f.StringVar(&endpoint, "runtime-endpoint", "", fmt.Sprintf("CRI endpoint with --cri (default $%s, else %s)", criclient.EndpointEnv, criclient.DefaultEndpoint))
	f.BoolVar(&force, "force", false, "allow a size above the policy's max")
	return cmd
}

// describeTarget says where the tmpfs is remounted.
func describeTarget(t resize.Target) string {
	id := t.Container
	if len(id) > 12 {
		id = id[:12]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s container %s, ", t.Engine, id)
	switch t.Kind {
	case resize.HostTmpfs:
		fmt.Fprintf(&b, "host tmpfs %s", t.Path)
	default:
		fmt.Fprintf(&b, "tmpfs %s in the mount namespace of pid %d", t.Path, t.PID)
	}
	return b.String()
}
