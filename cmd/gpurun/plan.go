package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/sysinfo"
)

func newPlanCmd(g *globals) *cobra.Command {
	var (
		specPath   string
		hostMemory string
		hostGPUs   int
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "plan --spec config.json",
		Short: "Show what /dev/shm a container's OCI spec should get, and why",
		Long: `Plan reads a bundle's config.json (the OCI spec an engine hands to runc) and
prints what gpurun would do to its /dev/shm: the action (none, set-size,
remount, inject, ipc-host), the size before and after, the GPU evidence, and
the reason. It changes nothing.

Exit status: 0 on a plan, 2 on bad input (unreadable or malformed spec, bad
policy file).`,
		Example: `  gpurun plan --spec /run/containerd/io.containerd.runtime.v2.task/k8s.io/ID/config.json
  gpurun plan --spec config.json --host-memory 256g --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if specPath == "" {
				return &exitError{2, fmt.Errorf("plan: --spec is required")}
			}
			pol, err := g.loadPolicy()
			if err != nil {
				return &exitError{2, err}
			}
			cfg, err := oci.LoadConfig(specPath)
			if err != nil {
				return &exitError{2, err}
			}
			facts, factsErr := sysinfo.Facts()
			if hostMemory != "" {
				if facts.HostMemory, err = policy.ParseSize(hostMemory); err != nil {
					return &exitError{2, fmt.Errorf("--host-memory: %w", err)}
				}
			} else if facts.HostMemory == 0 {
				return &exitError{2, factsErr}
			}
			if cmd.Flags().Changed("host-gpus") {
				facts.HostGPUs = hostGPUs
			}
			pl := oci.Decide(oci.Input{Container: oci.FromSpec(cfg.Spec), Policy: pol, Facts: facts})
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				return enc.Encode(pl)
			}
			_, err = fmt.Fprint(out, formatPlan(pl))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&specPath, "spec", "", "the bundle's config.json")
	f.StringVar(&hostMemory, "host-memory", "", "the host's memory (default: this host's MemTotal), e.g. 64g")
	f.IntVar(&hostGPUs, "host-gpus", 0, "the host's GPU count, for containers that ask for all GPUs (default: this host's GPU device nodes)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object: action, size_bytes, current_bytes, gpu, gpus, reason")
	return cmd
}

// formatPlan renders a plan for people.
func formatPlan(pl oci.Plan) string {
	var b strings.Builder
	size := func(n int64) string {
		if n == 0 {
			return "unknown"
		}
		return policy.FormatSize(n)
	}
	fmt.Fprintf(&b, "action:   %s\n", pl.Action)
	fmt.Fprintf(&b, "/dev/shm: %s -> %s\n", size(pl.Current), size(pl.Size))
	shm := string(pl.Shm.Kind)
	if pl.Shm.Source != "" {
		shm += fmt.Sprintf(" (%s %s)", pl.Shm.Type, pl.Shm.Source)
	}
	fmt.Fprintf(&b, "mount:    %s\n", shm)
	if pl.GPU {
		n := "count unknown"
		if pl.GPUs > 0 {
			n = fmt.Sprintf("%d", pl.GPUs)
		}
		fmt.Fprintf(&b, "gpu:      yes, %s (%s)\n", n, strings.Join(pl.Evidence, ", "))
	} else {
		fmt.Fprintf(&b, "gpu:      no\n")
	}
	if pl.Pod.Engine != "" {
		role := "container"
		if pl.Pod.Sandbox {
			role = "sandbox"
		}
		fmt.Fprintf(&b, "pod:      %s %s of sandbox %s\n", pl.Pod.Engine, role, pl.Pod.SandboxID)
	}
	fmt.Fprintf(&b, "reason:   %s\n", pl.Reason)
	return b.String()
}
