package fullcli

import (
	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/diagnose/plan"
	"github.com/gpurun/gpurun/engine/sysinfo"
)

const planLong = `Plan reads a bundle's config.json (the OCI spec an engine hands to runc) and
prints what gpurun would do to its /dev/shm: the action (none, set-size,
remount, inject, ipc-host), the size before and after, the GPU evidence, and
the reason. It changes nothing.

With --pod, it reads a Kubernetes Pod (or the pod template of a
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob; "-" for
standard input) and prints what gpurun webhook decides for it at
admission: the pod's action (emptydir SIZE, host-ipc, none), why, and each
container's plan. The memory is the pod's limits; with none, the node is
not known at admission and the policy's compose_default is the target.
--pod takes a file of several documents, or a directory (its .yaml, .yml
and .json files, as kubectl apply -f DIR), and decides every pod in it.

DRA: a pod's resource claims are resolved as the webhook resolves them,
from the ResourceClaims, ResourceClaimTemplates and DeviceClasses in the
files of --pod and -f (more files or directories, repeatable), and with
--from-cluster from the cluster (--kubeconfig, --context, -n as kubectl's;
read access to resource.k8s.io's objects). Each container's evidence
names the claim, the request and the device class that made it a GPU
container. A claim that cannot be resolved is judged by the policy's
unresolved_claims and named in a warning.

With --measured-peak SIZE (the peak /dev/shm use of the job, as gpurun
stats reports it), it also prints the size that holds that peak with
headroom when the planned size is near it or far above it, and the setting
that gives it (docs/observe.md has the rule).

Exit status: 0 on a plan, 2 on bad input (unreadable or malformed spec, bad
policy file).`

func newPlanCmd(g *cli.Globals) *cobra.Command {
	var (
		o        plan.Options
		hostGPUs int
	)
	cmd := &cobra.Command{
		Use:   "plan --spec config.json | --pod pod.yaml [-f claims.yaml]... [--from-cluster]",
		Short: cli.PlanShort,
		Long:  planLong,
		Example: `  gpurun plan --spec /run/containerd/io.containerd.runtime.v2.task/k8s.io/ID/config.json
  gpurun plan --spec config.json --host-memory 256g --json
  gpurun plan --pod trainer-job.yaml
  gpurun plan --pod trainer-job.yaml --measured-peak 1900Mi
  gpurun plan --pod gpu-test1.yaml                        # the pods and the claim templates of one file
  gpurun plan --pod pod.yaml -f templates/ -f classes.yaml
  gpurun plan --pod pod.yaml --from-cluster -n ml --context gpu-cluster`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("host-gpus") {
				o.HostGPUs = &hostGPUs
			}
			o.LoadPolicy, o.Facts = g.Policy, sysinfo.Facts
			o.In, o.Out = cmd.InOrStdin(), cmd.OutOrStdout()
			return plan.Run(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.SpecPath, "spec", "", "the bundle's config.json")
	f.StringVar(&o.PodPath, "pod", "", "a Kubernetes Pod, or a workload with a pod template, in YAML or JSON (- for stdin; a file of several, or a directory: each pod): what gpurun webhook decides")
	f.StringArrayVarP(&o.Files, "filename", "f", nil, "with --pod: more files or directories (- for stdin) with the ResourceClaims, ResourceClaimTemplates and DeviceClasses the pods' claims name; repeatable")
	f.BoolVar(&o.FromCluster, "from-cluster", false, "with --pod: resolve the claims the files do not from the cluster (read access to resource.k8s.io)")
	f.StringVar(&o.Kube.Kubeconfig, "kubeconfig", "", "with --from-cluster: the kubeconfig file (default $KUBECONFIG, else ~/.kube/config, else the pod's service account)")
	f.StringVar(&o.Kube.Context, "context", "", "with --from-cluster: the kubeconfig context (default: its current-context)")
	f.StringVarP(&o.Kube.Namespace, "namespace", "n", "", "the namespace of a pod that names none (default with --from-cluster: the context's)")
	f.StringVar(&o.HostMemory, "host-memory", "", "the host's memory (default: this host's MemTotal), e.g. 64g")
	f.IntVar(&hostGPUs, "host-gpus", 0, "the host's GPU count, for containers that ask for all GPUs (default: this host's GPU device nodes)")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object: action, size_bytes, current_bytes, gpu, gpus, reason (and suggestion with --measured-peak)")
	f.StringVar(&o.MeasuredPeak, "measured-peak", "", "the job's measured peak /dev/shm use (gpurun stats' PEAK), e.g. 1900Mi: suggest the size that holds it")
	return cmd
}
