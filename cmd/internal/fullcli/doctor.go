package fullcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/diagnose/doctor"
	"github.com/gpurun/gpurun/engine/criclient"
	"github.com/gpurun/gpurun/internal/exitcode"
)

const doctorLong = `Doctor checks /dev/shm where it runs, and says what is wrong and how to fix it.

  - Inside a container: what /dev/shm is (the engine's tmpfs, the host's,
    the user's), its size and use against what the policy gives this
    container, GPUs visible (device nodes, NVIDIA_VISIBLE_DEVICES,
    nvidia-smi), CPUs, the cgroup memory limit, NCCL_* variables, and the
    fix for docker run, compose and Kubernetes. --probe SIZE also allocates
    SIZE in /dev/shm (and frees it), to prove it can be had.
  - On a host: dockerd (daemon.json and what the daemon loaded: runtimes,
    default runtime, default-shm-size), containerd (config.toml with its
    imports, the gpurun runtime handler, its pod_annotations, what the
    running containerd loaded), the OCI hooks of Podman and CRI-O
    (hooks.d/gpurun.json), gpurun's policy file, the runtime gpurun-runtime
    hands over to, and the host's /dev/shm.
  - With CONTAINER (a Docker name or id, or with --cri a CRI container id):
    that container's IPC mode, /dev/shm size and use, GPU evidence, and
    what gpurun would do. Needs root on the host where it runs.
  - With --pod [NAMESPACE/]NAME (or kubectl's pod/NAME; --job NAME,
    --deployment NAME, job/NAME, statefulset/NAME, ...: the pods it owns,
    the worst first): a Kubernetes pod through the API server, with
    kubectl's kubeconfig, -n, --context and -c, and read access only: what
    gpurun decides for it and how it got its /dev/shm (the webhook's volume,
    a node door's Event, or nothing, naming the door missing on its node or
    namespace), its restarts and last terminations (SIGBUS, an OOM kill
    with the share of /dev/shm the node reported, a crashloop on what
    earlier instances left), its logs read by gpurun explain, gpurun's node
    agent on its node and the webhook. A check the API refuses says which
    permission it needs; the rest still runs. As a kubectl plugin:
    kubectl gpurun doctor pod/NAME (gpurun install kubectl-plugin).

Where it runs is told from the PID namespace and the engines' bind mounts;
--host and --container override. --host-root, --docker-config and
--containerd-config imply --host.

Exit status: 0 healthy, 1 a problem found, 2 something could not be checked.
--json prints {schema, mode, target, status, exit_code, checks: [{name,
status (ok|warn|problem|error), detail, fix, data}]}; see docs/doctor.md.`

// insideContainer is --container's value when it is given alone: doctor
// runs inside a container.
const insideContainer = "inside"

// containerFlag is doctor's -c, --container: alone, doctor checks from
// inside a container (as it always did); with a name, after --pod or
// TYPE/NAME, the pod's container to look at, as kubectl's -c. pflag gives
// a flag that may stand alone its value only as --container=NAME: a name
// after a space arrives as an argument, which podArgs takes back.
type containerFlag struct {
	set  bool
	name string
}

func (f *containerFlag) String() string { return f.name }
func (f *containerFlag) Type() string   { return "name" }
func (f *containerFlag) Set(v string) error {
	f.set, f.name = true, v
	return nil
}

// podArgs sorts doctor's arguments and --container into RunOptions:
// CONTAINER (or kubectl's TYPE/NAME), whether doctor runs inside a
// container, and the pod's container.
func podArgs(o *doctor.RunOptions, args []string, c containerFlag) error {
	var objects, others []string
	for _, a := range args {
		if _, _, ok := doctor.ParseObject(a); ok {
			objects = append(objects, a)
		} else {
			others = append(others, a)
		}
	}
	kube := o.Pod != "" || o.Job != "" || o.Deployment != "" || len(objects) > 0
	switch {
	case !kube && c.set && c.name != insideContainer:
		return fmt.Errorf("doctor: --container=%s names a container of --pod (or pod/NAME); alone, --container means doctor runs inside a container", c.name)
	case !kube:
		o.InContainer = c.set
	case c.set && c.name == insideContainer && len(others) > 0:
		o.PodContainer, others = others[0], others[1:]
	case c.set && c.name == insideContainer:
		return errors.New("doctor: -c/--container needs the name of the pod's container with --pod or TYPE/NAME (-c NAME)")
	case c.set:
		o.PodContainer = c.name
	}
	rest := append(objects, others...)
	if len(rest) > 1 {
		return fmt.Errorf("doctor: accepts at most 1 arg (CONTAINER or TYPE/NAME; the pod's container is -c NAME), got %q", rest)
	}
	if len(rest) == 1 {
		o.Container = rest[0]
	}
	return nil
}

func newDoctorCmd(g *cli.Globals) *cobra.Command {
	var o doctor.RunOptions
	var inside containerFlag
	cmd := &cobra.Command{
		Use:   "doctor [CONTAINER | TYPE/NAME]",
		Short: cli.DoctorShort,
		Long:  doctorLong,
		Example: `  # In a training container that died with "Bus error"
  gpurun doctor
  gpurun doctor --probe 8g

  # On the host: is gpurun installed and loaded in dockerd and containerd?
  sudo gpurun doctor --host

  # One container, from the host
  sudo gpurun doctor trainer
  sudo gpurun doctor --cri 3f2a9c1d --json

  # A Kubernetes pod, a Job's pods, from where kubectl works
  gpurun doctor --pod ml/train-0
  gpurun doctor pod/train-0 -n ml -c trainer --json
  gpurun doctor job/train --context gpu-cluster
  kubectl gpurun doctor deploy/vllm -n serving   # the kubectl plugin`,
		Args:              cobra.MaximumNArgs(2),
		ValidArgsFunction: completeObjects(&o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := podArgs(&o, args, inside); err != nil {
				return exitcode.New(2, err)
			}
			o.ConfigPath, o.Getenv, o.Out = g.ConfigPath, os.Getenv, cmd.OutOrStdout()
			return doctor.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.CRI, "cri", false, "CONTAINER is a CRI container id (Kubernetes), not a Docker container")
	f.StringVar(&o.Endpoint, "runtime-endpoint", "", fmt.Sprintf("CRI endpoint (default $%s, else %s)", criclient.EndpointEnv, criclient.DefaultEndpoint))
	f.BoolVar(&o.Host, "host", false, "check this host's engines, even if it looks like a container")
	cf := f.VarPF(&inside, "container", "c", "alone: check from inside a container, even if it looks like a host; -c NAME with --pod or TYPE/NAME: the pod's container")
	cf.NoOptDefVal = insideContainer
	f.StringVar(&o.HostRoot, "host-root", "", `the host's root filesystem, when it is mounted elsewhere (a DaemonSet: "/host")`)
	f.StringVar(&o.DockerConfig, "docker-config", "", "dockerd's daemon.json, a path on the host (default "+doctor.DefaultDockerConfig+")")
	f.StringVar(&o.ContainerdConfig, "containerd-config", "", "containerd's config.toml, a path on the host (default "+doctor.DefaultContainerdConfig+")")
	f.StringVar(&o.Probe, "probe", "", "inside a container: allocate SIZE in /dev/shm and free it again (8g, 8Gi)")
	f.BoolVar(&o.JSON, "json", false, "print the report as JSON (see docs/doctor.md)")
	f.StringVar(&o.Pod, "pod", "", "a Kubernetes pod, [NAMESPACE/]NAME, looked at through the API server (as pod/NAME)")
	f.StringVar(&o.Job, "job", "", "a Kubernetes Job: its pods, the worst first (as job/NAME)")
	f.StringVar(&o.Deployment, "deployment", "", "a Kubernetes Deployment: its pods, the worst first (as deployment/NAME)")
	f.StringVarP(&o.Kube.Namespace, "namespace", "n", "", "with --pod: the namespace (default: the kubeconfig context's)")
	f.StringVar(&o.Kube.Context, "context", "", "with --pod: the kubeconfig context (default: its current-context)")
	f.StringVar(&o.Kube.Kubeconfig, "kubeconfig", "", "with --pod: the kubeconfig file (default $KUBECONFIG, else ~/.kube/config, else the pod's service account)")
	f.StringVar(&o.GPURunNamespace, "gpurun-namespace", "", "with --pod: where gpurun's node agents and webhook run (default "+doctor.DefaultGPURunNamespace+")")
	for _, name := range []string{"pod", "job", "deployment"} {
		_ = cmd.RegisterFlagCompletionFunc(name, completeNames(&o, name))
	}
	_ = cmd.RegisterFlagCompletionFunc("namespace", completeNames(&o, "namespace"))
	return cmd
}

// completionTimeout bounds the API calls of a completion.
const completionTimeout = 3 * time.Second

// completeObjects completes doctor's TYPE/NAME: the types, then the names
// of that type in the namespace (-n, else the kubeconfig's).
func completeObjects(o *doctor.RunOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		typ, _, found := strings.Cut(toComplete, "/")
		if !found {
			return []string{"pod/", "job/", "deployment/", "statefulset/", "daemonset/", "replicaset/", "cronjob/"},
				cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
		}
		kind, _, ok := doctor.ParseObject(typ + "/x")
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := listNames(cmd.Context(), o, kind)
		out := make([]string, 0, len(names))
		for _, n := range names {
			out = append(out, typ+"/"+n)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNames completes a flag's value with the names of a kind.
func completeNames(o *doctor.RunOptions, kind string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		return listNames(cmd.Context(), o, kind), cobra.ShellCompDirectiveNoFileComp
	}
}

// listNames lists a kind's names for a completion; none when the cluster
// does not answer in time.
func listNames(ctx context.Context, o *doctor.RunOptions, kind string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	names, err := doctor.Names(ctx, o.Kube, kind)
	if err != nil {
		cobra.CompDebugln(err.Error(), true)
	}
	return names
}
