//go:build !gpurun_lean

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/diagnose/doctor"
	"github.com/gpurun/gpurun/engine/criclient"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/policy"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var (
		cri, onHost, inContainer, asJSON bool
		endpoint, hostRoot, probe        string
		dockerConfig, containerdConfig   string
	)
	cmd := &cobra.Command{
		Use:   "doctor [CONTAINER]",
		Short: doctorShort,
		Long: `Doctor checks /dev/shm where it runs, and says what is wrong and how to fix it.

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

Where it runs is told from the PID namespace and the engines' bind mounts;
--host and --container override. --host-root, --docker-config and
--containerd-config imply --host.

Exit status: 0 healthy, 1 a problem found, 2 something could not be checked.
--json prints {schema, mode, target, status, exit_code, checks: [{name,
status (ok|warn|problem|error), detail, fix, data}]}; see docs/doctor.md.`,
		Example: `  # In a training container that died with "Bus error"
  gpurun doctor
  gpurun doctor --probe 8g

  # On the host: is gpurun installed and loaded in dockerd and containerd?
  sudo gpurun doctor --host

  # One container, from the host
  sudo gpurun doctor trainer
  sudo gpurun doctor --cri 3f2a9c1d --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if onHost && inContainer {
				return &exitError{2, fmt.Errorf("doctor: --host and --container exclude each other")}
			}
			hostFlags := hostRoot != "" || dockerConfig != "" || containerdConfig != ""
			if hostFlags && inContainer {
				return &exitError{2, fmt.Errorf("doctor: --host-root, --docker-config and --containerd-config look at a host; they do not go with --container")}
			}
			if len(args) == 1 && (onHost || inContainer || hostFlags || probe != "") {
				return &exitError{2, fmt.Errorf("doctor: CONTAINER does not go with --host, --container, --host-root, --docker-config, --containerd-config or --probe")}
			}
			if cri && len(args) == 0 {
				return &exitError{2, fmt.Errorf("doctor: --cri needs a CRI container id")}
			}
			var probeSize int64
			if probe != "" {
				n, err := policy.ParseAnySize(probe)
				if err != nil || n <= 0 {
					return &exitError{2, fmt.Errorf("doctor: --probe %q: want a positive size such as 8g or 8Gi", probe)}
				}
				probeSize = n
			}
			ctx, cancel := context.WithTimeout(cmdContext(cmd), 2*time.Minute)
			defer cancel()
			sys := doctor.Local()
			if hostRoot != "" {
				sys.Root = hostRoot
			}
			path, explicit := policy.ResolvePath(g.configPath, os.Getenv)
			pol := doctor.PolicySource{Path: path, Explicit: explicit}

			var rep *doctor.Report
			switch {
			case len(args) == 1 && cri:
				conn, err := criclient.Dial(criclient.Endpoint(endpoint, os.Getenv))
				if err != nil {
					return &exitError{2, fmt.Errorf("doctor: %w", err)}
				}
				defer conn.Close()
				rep = doctor.CRIContainer(ctx, sys, conn.Runtime, args[0], doctor.TargetOptions{Policy: pol})
			case len(args) == 1:
				c, err := dockerapi.NewClient(os.Getenv)
				if err != nil {
					return &exitError{2, fmt.Errorf("doctor: %w", err)}
				}
				defer c.Close()
				rep = doctor.DockerContainer(ctx, sys, c, args[0], doctor.TargetOptions{Policy: pol})
			default:
				where := doctor.Detect(sys)
				switch {
				case onHost:
					where = doctor.Where{Container: false, Evidence: []string{"--host"}}
				case hostFlags:
					where = doctor.Where{Container: false, Evidence: []string{"a host's configuration was named"}}
				case inContainer:
					where = doctor.Where{Container: true, Evidence: []string{"--container"}}
				}
				if probeSize > 0 && !where.Container {
					return &exitError{2, fmt.Errorf("doctor: --probe allocates in a container's /dev/shm; here is a host (use --container if it is not)")}
				}
				if where.Container {
					rep = doctor.Inside(ctx, sys, doctor.ContainerOptions{Policy: pol, Where: where, Probe: probeSize, Pod: kube.OwnPod})
					break
				}
				opts := doctor.HostOptions{Policy: pol, Where: where, DockerConfig: dockerConfig, ContainerdConfig: containerdConfig}
				// Under --host-root the engines' sockets are looked for
				// there, unless the environment or a flag names them.
				getenv := os.Getenv
				if hostRoot != "" && os.Getenv("DOCKER_HOST") == "" {
					getenv = func(k string) string {
						if k == "DOCKER_HOST" {
							return "unix://" + filepath.Join(hostRoot, "/var/run/docker.sock")
						}
						return os.Getenv(k)
					}
				}
				if ep, err := dockerapi.ResolveEndpoint(getenv); err == nil {
					opts.DockerHost = ep.Host
				}
				if c, err := dockerapi.NewClient(getenv); err == nil {
					defer c.Close()
					opts.Docker = c
				} else {
					opts.DockerErr = err
				}
				// Ask the running containerd what it loaded when its socket
				// is there (or the user named an endpoint).
				ep := criclient.Endpoint(endpoint, os.Getenv)
				if hostRoot != "" && endpoint == "" && os.Getenv(criclient.EndpointEnv) == "" {
					ep = "unix://" + filepath.Join(hostRoot, strings.TrimPrefix(criclient.DefaultEndpoint, "unix://"))
				}
				if endpoint != "" || socketExists(ep) {
					if conn, err := criclient.Dial(ep); err == nil {
						defer conn.Close()
						opts.CRI, opts.CRIEndpoint = conn.Runtime, ep
					}
				}
				rep = doctor.Host(ctx, sys, opts)
			}
			return writeReport(cmd.OutOrStdout(), rep, asJSON)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cri, "cri", false, "CONTAINER is a CRI container id (Kubernetes), not a Docker container")
	f.StringVar(&endpoint, "runtime-endpoint", "", fmt.Sprintf("CRI endpoint (default $%s, else %s)", criclient.EndpointEnv, criclient.DefaultEndpoint))
	f.BoolVar(&onHost, "host", false, "check this host's engines, even if it looks like a container")
	f.BoolVar(&inContainer, "container", false, "check from inside a container, even if it looks like a host")
	f.StringVar(&hostRoot, "host-root", "", `the host's root filesystem, when it is mounted elsewhere (a DaemonSet: "/host")`)
	f.StringVar(&dockerConfig, "docker-config", "", "dockerd's daemon.json, a path on the host (default "+doctor.DefaultDockerConfig+")")
	f.StringVar(&containerdConfig, "containerd-config", "", "containerd's config.toml, a path on the host (default "+doctor.DefaultContainerdConfig+")")
	f.StringVar(&probe, "probe", "", "inside a container: allocate SIZE in /dev/shm and free it again (8g, 8Gi)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON (see docs/doctor.md)")
	return cmd
}

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// socketExists reports whether a unix:// endpoint's socket exists.
func socketExists(endpoint string) bool {
	p := strings.TrimPrefix(endpoint, "unix://")
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// writeReport prints a report and turns its exit code into the command's.
func writeReport(out io.Writer, rep *doctor.Report, asJSON bool) error {
	var err error
	if asJSON {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out, useColor(out))
	}
	if err != nil {
		return &exitError{2, err}
	}
	switch rep.ExitCode {
	case 0:
		return nil
	case 1:
		return &exitError{1, fmt.Errorf("doctor: %d problem(s) found", rep.Count(doctor.Problem))}
	default:
		return &exitError{rep.ExitCode, fmt.Errorf("doctor: %d check(s) could not be made", rep.Count(doctor.Error))}
	}
}

// useColor says whether to colour: only on a terminal, and not when
// NO_COLOR is set (https://no-color.org) or TERM is dumb.
func useColor(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
