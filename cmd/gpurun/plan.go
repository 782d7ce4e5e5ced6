//go:build !gpurun_lean

package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/sysinfo"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/specfile"
)

func newPlanCmd(g *globals) *cobra.Command {
	var (
		specPath   string
		podPath    string
		hostMemory string
		hostGPUs   int
		asJSON     bool
		peakFlag   string
	)
	cmd := &cobra.Command{
		Use:   "plan --spec config.json | --pod pod.yaml",
		Short: planShort,
		Long: `Plan reads a bundle's config.json (the OCI spec an engine hands to runc) and
prints what gpurun would do to its /dev/shm: the action (none, set-size,
remount, inject, ipc-host), the size before and after, the GPU evidence, and
the reason. It changes nothing.

With --pod, it reads a Kubernetes Pod (or the pod template of a
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob; "-" for
standard input) and prints what gpurun webhook decides for it at
admission: the pod's action (emptydir SIZE, host-ipc, none), why, and each
container's plan. The memory is the pod's limits; with none, the node is
not known at admission and the policy's compose_default is the target.

With --measured-peak SIZE (the peak /dev/shm use of the job, as gpurun
stats reports it), it also prints the size that holds that peak with
headroom when the planned size is near it or far above it, and the setting
that gives it (docs/observe.md has the rule).

Exit status: 0 on a plan, 2 on bad input (unreadable or malformed spec, bad
policy file).`,
		Example: `  gpurun plan --spec /run/containerd/io.containerd.runtime.v2.task/k8s.io/ID/config.json
  gpurun plan --spec config.json --host-memory 256g --json
  gpurun plan --pod trainer-job.yaml
  gpurun plan --pod trainer-job.yaml --measured-peak 1900Mi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (specPath == "") == (podPath == "") {
				return &exitError{2, fmt.Errorf("plan: give one of --spec and --pod")}
			}
			pol, err := g.loadPolicy()
			if err != nil {
				return &exitError{2, err}
			}
			var peak int64
			if peakFlag != "" {
				if peak, err = policy.ParseAnySize(peakFlag); err != nil || peak <= 0 {
					return &exitError{2, fmt.Errorf("plan: --measured-peak %q: want a positive size such as 1900Mi or 2g", peakFlag)}
				}
			}
			if podPath != "" {
				return planPod(cmd, pol, podPath, asJSON, peak)
			}
			cfg, err := specfile.Load(specPath)
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
			var m *shmstats.Measured
			if peak > 0 {
				m = &shmstats.Measured{Peak: peak, Size: cmp.Or(pl.Size, pl.Current), Pod: pl.Pod.Engine != "" && !pl.Pod.Sandbox,
					Kind: string(pl.Shm.Kind), Sized: pl.Applies, GPUs: pl.GPUs, Target: pl.Target}
				if pl.Shm.Engine == oci.EngineDocker {
					m.Engine = shmstats.EngineDocker
				}
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				if m != nil {
					return enc.Encode(struct {
						oci.Plan
						Suggestion *shmstats.Suggestion `json:"suggestion"`
					}{pl, shmstats.SuggestFor(*m, pol)})
				}
				return enc.Encode(pl)
			}
			text := formatPlan(pl)
			if m != nil {
				text += formatMeasured(*m, pol)
			}
			_, err = fmt.Fprint(out, text)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&specPath, "spec", "", "the bundle's config.json")
	f.StringVar(&podPath, "pod", "", "a Kubernetes Pod, or a workload with a pod template, in YAML or JSON (- for stdin): what gpurun webhook decides")
	f.StringVar(&hostMemory, "host-memory", "", "the host's memory (default: this host's MemTotal), e.g. 64g")
	f.IntVar(&hostGPUs, "host-gpus", 0, "the host's GPU count, for containers that ask for all GPUs (default: this host's GPU device nodes)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object: action, size_bytes, current_bytes, gpu, gpus, reason (and suggestion with --measured-peak)")
	f.StringVar(&peakFlag, "measured-peak", "", "the job's measured peak /dev/shm use (gpurun stats' PEAK), e.g. 1900Mi: suggest the size that holds it")
	return cmd
}

// planPod prints the webhook's decision for the pod in path.
func planPod(cmd *cobra.Command, pol *policy.Policy, path string, asJSON bool, peak int64) error {
	var stdin []byte
	if path == "-" {
		b, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return &exitError{2, fmt.Errorf("plan: read standard input: %w", err)}
		}
		stdin = b
	}
	pod, err := podspec.LoadFile(path, stdin)
	if err != nil {
		return &exitError{2, fmt.Errorf("plan: %w", err)}
	}
	d, err := podspec.Decide(pod, pol)
	if err != nil {
		return &exitError{2, fmt.Errorf("plan: %s: %w", path, err)}
	}
	out := cmd.OutOrStdout()
	var m *shmstats.Measured
	if peak > 0 {
		// Without an emptyDir the pod gets its runtime's /dev/shm: 64 MiB
		// from containerd and CRI-O, unless a node front door sizes it.
		m = &shmstats.Measured{Peak: peak, Size: policy.EngineDefaultShm, Pod: true, Sized: d.GPU}
		if d.Action == podspec.ActionEmptyDir {
			m.Size = d.Size
		}
		for _, c := range d.Plans {
			m.GPUs = max(m.GPUs, c.GPUs)
		}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		if m != nil {
			return enc.Encode(struct {
				podspec.Decision
				Suggestion *shmstats.Suggestion `json:"suggestion"`
			}{d, shmstats.SuggestFor(*m, pol)})
		}
		return enc.Encode(d)
	}
	var b strings.Builder
	head := string(d.Action)
	if d.Action == podspec.ActionEmptyDir {
		head += fmt.Sprintf(" (medium Memory, sizeLimit %s, at /dev/shm in every container)", policy.FormatQuantity(d.Size))
	}
	fmt.Fprintf(&b, "action:   %s\n", head)
	fmt.Fprintf(&b, "gpu:      %v\n", map[bool]string{true: "yes", false: "no"}[d.GPU])
	fmt.Fprintf(&b, "reason:   %s\n", d.Reason)
	for _, c := range d.Plans {
		kind := "container"
		if c.Init {
			kind = "init container"
		}
		gpu := "no GPU"
		if c.GPU {
			gpu = "GPU (" + strings.Join(c.Evidence, ", ") + ")"
		}
		fmt.Fprintf(&b, "  %s %s: %s, %s: %s\n", kind, c.Name, c.Action, gpu, c.Reason)
	}
	if m != nil {
		b.WriteString(formatMeasured(*m, pol))
	}
	_, err = fmt.Fprint(out, b.String())
	return err
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

// formatMeasured renders the suggestion for a measured peak.
func formatMeasured(m shmstats.Measured, pol *policy.Policy) string {
	s := shmstats.SuggestFor(m, pol)
	if s == nil {
		return fmt.Sprintf("measured: peak %s fits the %s /dev/shm (neither within %d%% of it nor far below it): no change\n",
			policy.FormatSize(m.Peak), policy.FormatSize(m.Size), shmstats.NearCeilingPercent)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "measured: suggest %s: %s\n", policy.FormatSize(s.Size), s.Why)
	for _, set := range s.Settings {
		fmt.Fprintf(&b, "  - %s\n", set)
	}
	return b.String()
}
