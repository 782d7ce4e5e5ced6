package resize

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/criclient"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/policy"
)

// RunOptions are gpurun resize's.
type RunOptions struct {
	// Container is a Docker name or id, or with CRI a CRI container id.
	Container string
	// Size is the new size, in Docker units (2g) or Kubernetes quantities
	// (2Gi).
	Size string
	CRI  bool
	// Endpoint is the CRI endpoint ("" for $CONTAINER_RUNTIME_ENDPOINT,
	// else the default).
	Endpoint string
	// Force allows a size above the policy's max.
	Force bool
	// DryRun says what would be resized, and changes nothing.
	DryRun bool
	// Pod says Container is a Kubernetes pod, [NAMESPACE/]NAME, whose
	// Memory emptyDir at /dev/shm (gpurun webhook's) gets the new
	// sizeLimit through the API server (KEP-6030), from the cluster Kube
	// names; Wait bounds the wait for its kubelet to confirm the resize
	// (0: no wait), read every Poll (0: a second). KubeClient, when set,
	// stands for the cluster (tests).
	Pod        bool
	Kube       kube.KubeconfigOptions
	Wait, Poll time.Duration
	KubeClient *kube.Kube
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Getenv reads the environment (os.Getenv): DOCKER_HOST and the CRI
	// endpoint.
	Getenv func(string) string
	Out    io.Writer
}

// Run is gpurun resize: it finds the container's /dev/shm tmpfs through
// its engine, remounts it at the new size (Apply) and says what it did.
// Errors for bad input and unreachable engines carry exit status 2
// (exitcode).
func Run(ctx context.Context, o RunOptions) error {
	size, err := policy.ParseAnySize(o.Size)
	if err != nil {
		return exitcode.New(2, fmt.Errorf("SIZE: %w", err))
	}
	pol, err := o.LoadPolicy()
	if err != nil {
		return exitcode.New(2, err)
	}
	if err := Check(size, pol, o.Force); err != nil {
		return exitcode.New(2, err)
	}
	if o.Pod {
		return runPod(ctx, o, size)
	}
	t, done, err := o.target(ctx)
	if err != nil {
		return err
	}
	defer done()
	where := DescribeTarget(t)
	if o.DryRun {
		_, err := fmt.Fprintf(o.Out, "would resize /dev/shm of %s to %s (%s)\n", t.Name, policy.FormatSize(size), where)
		return err
	}
	res, err := Apply(t, size, Options{Policy: pol, Force: o.Force})
	if err != nil {
		return fmt.Errorf("resize /dev/shm of %s: %w", t.Name, err)
	}
	verb := "resized"
	if !res.Changed {
		verb = "left"
	}
	fmt.Fprintf(o.Out, "%s /dev/shm of %s: %s -> %s (%s)\n", verb, t.Name,
		policy.FormatSize(res.Before), policy.FormatSize(res.After), where)
	if t.SharedWith != "" {
		fmt.Fprintf(o.Out, "shared with: %s\n", t.SharedWith)
	}
	_, err = fmt.Fprintf(o.Out, "note: %s\n", t.Note)
	return err
}

// target finds the container through the CRI or dockerd; done closes the
// connection.
func (o RunOptions) target(ctx context.Context) (t Target, done func(), err error) {
	if o.CRI {
		conn, err := criclient.Dial(criclient.Endpoint(o.Endpoint, o.Getenv))
		if err != nil {
			return Target{}, nil, exitcode.New(2, err)
		}
		t, err := CRITarget(ctx, conn.Runtime, o.Container)
		if err != nil {
			conn.Close()
			return Target{}, nil, err
		}
		return t, func() { conn.Close() }, nil
	}
	c, err := dockerapi.NewClient(o.Getenv)
	if err != nil {
		return Target{}, nil, exitcode.New(2, err)
	}
	t, err = DockerTarget(ctx, c, o.Container)
	if err != nil {
		c.Close()
		return Target{}, nil, err
	}
	return t, func() { c.Close() }, nil
}

// DescribeTarget says where the tmpfs is remounted.
func DescribeTarget(t Target) string {
	id := t.Container
	if len(id) > 12 {
		id = id[:12]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s container %s, ", t.Engine, id)
	switch t.Kind {
	case HostTmpfs:
		fmt.Fprintf(&b, "host tmpfs %s", t.Path)
	default:
		fmt.Fprintf(&b, "tmpfs %s in the mount namespace of pid %d", t.Path, t.PID)
	}
	return b.String()
}
