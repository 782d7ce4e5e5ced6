package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/criclient"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/policy"
)

// RunOptions are gpurun doctor's: what to check and how to print.
type RunOptions struct {
	// Container is the container to check from the host (a Docker name or
	// id, with CRI a CRI container id); "" checks where doctor runs.
	Container string
	CRI       bool
	// Endpoint is the CRI endpoint ("" for $CONTAINER_RUNTIME_ENDPOINT,
	// else the default).
	Endpoint string
	// Host and InContainer override where doctor thinks it runs.
	Host, InContainer bool
	// HostRoot is the host's root filesystem when mounted elsewhere.
	HostRoot string
	// DockerConfig and ContainerdConfig are the engines' configuration
	// files (host paths; "" for the defaults).
	DockerConfig, ContainerdConfig string
	// Probe is a size to allocate in a container's /dev/shm ("" none).
	Probe string
	// ConfigPath is gpurun's --config ("" for $GPURUN_CONFIG, else the
	// default path).
	ConfigPath string
	// Pod, Job and Deployment name a Kubernetes pod ([NAMESPACE/]NAME) or
	// owner to look at through the API server (as does a CONTAINER of
	// kubectl's TYPE/NAME form); Kube says which cluster, PodContainer
	// which container of the pod, GPURunNamespace where gpurun runs.
	Pod, Job, Deployment string
	Kube                 KubeOptions
	PodContainer         string
	GPURunNamespace      string
	// JSON prints the report as JSON.
	JSON bool
	// Getenv reads the environment (os.Getenv).
	Getenv func(string) string
	Out    io.Writer
}

// runTimeout bounds a whole doctor run.
const runTimeout = 2 * time.Minute

// Run is gpurun doctor: it checks /dev/shm where it runs (a container or a
// host) or one container from the host, and prints the report. Its error
// carries the exit status (exitcode): 1 a problem found, 2 a bad flag or a
// check that could not be made.
func Run(ctx context.Context, o RunOptions) error {
	kind, name, isKube, err := o.kubeObject()
	if err != nil {
		return exitcode.New(2, err)
	}
	if isKube {
		ctx, cancel := context.WithTimeout(ctx, runTimeout)
		defer cancel()
		return o.runPod(ctx, kind, name)
	}
	probeSize, err := o.check()
	if err != nil {
		return exitcode.New(2, err)
	}
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	sys := Local()
	if o.HostRoot != "" {
		sys.Root = o.HostRoot
	}
	path, explicit := policy.ResolvePath(o.ConfigPath, o.Getenv)
	pol := PolicySource{Path: path, Explicit: explicit}
	var rep *Report
	switch {
	case o.Container != "" && o.CRI:
		conn, err := criclient.Dial(criclient.Endpoint(o.Endpoint, o.Getenv))
		if err != nil {
			return exitcode.New(2, fmt.Errorf("doctor: %w", err))
		}
		defer conn.Close()
		rep = CRIContainer(ctx, sys, conn.Runtime, o.Container, TargetOptions{Policy: pol})
	case o.Container != "":
		c, err := dockerapi.NewClient(o.Getenv)
		if err != nil {
			return exitcode.New(2, fmt.Errorf("doctor: %w", err))
		}
		defer c.Close()
		rep = DockerContainer(ctx, sys, c, o.Container, TargetOptions{Policy: pol})
	default:
		where := o.where(sys)
		if probeSize > 0 && !where.Container {
			return exitcode.New(2, errors.New("doctor: --probe allocates in a container's /dev/shm; here is a host (use --container if it is not)"))
		}
		if where.Container {
			rep = Inside(ctx, sys, ContainerOptions{Policy: pol, Where: where, Probe: probeSize, Pod: kube.OwnPod})
			break
		}
		ho, done := o.hostOptions(pol, where)
		defer done()
		rep = Host(ctx, sys, ho)
	}
	return WriteReport(o.Out, rep, o.JSON)
}

// hostFlags says whether a flag names a host's configuration.
func (o RunOptions) hostFlags() bool {
	return o.HostRoot != "" || o.DockerConfig != "" || o.ContainerdConfig != ""
}

// check refuses flags that do not go together, and returns --probe's size.
func (o RunOptions) check() (probeSize int64, err error) {
	switch {
	case o.Host && o.InContainer:
		return 0, errors.New("doctor: --host and --container exclude each other")
	case o.hostFlags() && o.InContainer:
		return 0, errors.New("doctor: --host-root, --docker-config and --containerd-config look at a host; they do not go with --container")
	case o.Container != "" && (o.Host || o.InContainer || o.hostFlags() || o.Probe != ""):
		return 0, errors.New("doctor: CONTAINER does not go with --host, --container, --host-root, --docker-config, --containerd-config or --probe")
	case o.CRI && o.Container == "":
		return 0, errors.New("doctor: --cri needs a CRI container id")
	}
	if o.Probe == "" {
		return 0, nil
	}
	n, err := policy.ParseAnySize(o.Probe)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("doctor: --probe %q: want a positive size such as 8g or 8Gi", o.Probe)
	}
	return n, nil
}

// where is where doctor runs: as detected, unless a flag says.
func (o RunOptions) where(sys *System) Where {
	switch {
	case o.Host:
		return Where{Container: false, Evidence: []string{"--host"}}
	case o.hostFlags():
		return Where{Container: false, Evidence: []string{"a host's configuration was named"}}
	case o.InContainer:
		return Where{Container: true, Evidence: []string{"--container"}}
	}
	return Detect(sys)
}

// hostOptions connects to the host's engines that answer: dockerd at
// DOCKER_HOST (under HostRoot, its socket there), and the running
// containerd when its socket is there or an endpoint was named. done
// closes the connections.
func (o RunOptions) hostOptions(pol PolicySource, where Where) (opts HostOptions, done func()) {
	opts = HostOptions{Policy: pol, Where: where, DockerConfig: o.DockerConfig, ContainerdConfig: o.ContainerdConfig}
	var closers []func() error
	done = func() {
		for _, c := range closers {
			c()
		}
	}
	// Under --host-root the engines' sockets are looked for there, unless
	// the environment or a flag names them.
	getenv := o.Getenv
	if o.HostRoot != "" && o.Getenv("DOCKER_HOST") == "" {
		getenv = func(k string) string {
			if k == "DOCKER_HOST" {
				return "unix://" + filepath.Join(o.HostRoot, "/var/run/docker.sock")
			}
			return o.Getenv(k)
		}
	}
	if ep, err := dockerapi.ResolveEndpoint(getenv); err == nil {
		opts.DockerHost = ep.Host
	}
	if c, err := dockerapi.NewClient(getenv); err == nil {
		closers = append(closers, c.Close)
		opts.Docker = c
	} else {
		opts.DockerErr = err
	}
	ep := criclient.Endpoint(o.Endpoint, o.Getenv)
	if o.HostRoot != "" && o.Endpoint == "" && o.Getenv(criclient.EndpointEnv) == "" {
		ep = "unix://" + filepath.Join(o.HostRoot, strings.TrimPrefix(criclient.DefaultEndpoint, "unix://"))
	}
	if o.Endpoint != "" || socketExists(ep) {
		if conn, err := criclient.Dial(ep); err == nil {
			closers = append(closers, conn.Close)
			opts.CRI, opts.CRIEndpoint = conn.Runtime, ep
		}
	}
	return opts, done
}

// socketExists reports whether a unix:// endpoint's socket exists.
func socketExists(endpoint string) bool {
	p := strings.TrimPrefix(endpoint, "unix://")
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// WriteReport prints a report (as JSON, or as text, coloured on a
// terminal) and turns its exit code into an error that carries it
// (exitcode): nil when healthy.
func WriteReport(out io.Writer, rep *Report, asJSON bool) error {
	var err error
	if asJSON {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out, useColor(out))
	}
	if err != nil {
		return exitcode.New(2, fmt.Errorf("doctor: write the report: %w", err))
	}
	switch rep.ExitCode {
	case 0:
		return nil
	case 1:
		return exitcode.New(1, fmt.Errorf("doctor: %d problem(s) found", rep.Count(Problem)))
	default:
		return exitcode.New(rep.ExitCode, fmt.Errorf("doctor: %d check(s) could not be made", rep.Count(Error)))
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
