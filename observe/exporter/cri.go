package exporter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/engine/criclient"
	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// criTimeout bounds one ContainerStatus call: the sampler waits for it.
const criTimeout = 5 * time.Second

// criExits tells how a container ended from containerd's CRI, asking each
// of its sockets in turn until one knows the container: the socket
// containerd keeps in its state dir (<state>/containerd.sock: the node's
// /run/containerd/containerd.sock, k3s' /run/k3s/containerd/containerd.sock),
// for each state dir the sampler reads, under the host root. The node agent
// reaches them under /host; the NRI plugin's DaemonSet mounts
// /run/containerd. It is safe for concurrent use.
type criExits struct {
	sockets []string // as this process reaches them

	mu    sync.Mutex
	conns map[string]*criclient.Conn
}

// newCRIExits returns the criExits of where stats looks, or of the
// endpoints given (unix:// or a path, as this process reaches them).
func newCRIExits(stats shmstats.Options, endpoints []string) *criExits {
	c := &criExits{conns: map[string]*criclient.Conn{}}
	if endpoints != nil {
		for _, e := range endpoints {
			c.sockets = append(c.sockets, strings.TrimPrefix(e, "unix://"))
		}
		return c
	}
	states := stats.Containerd
	if states == nil {
		states = shmstats.DefaultContainerdStates
	}
	for _, s := range states {
		p := filepath.Join(s, "containerd.sock")
		if stats.HostRoot != "" && stats.HostRoot != "/" {
			p = filepath.Join(stats.HostRoot, p)
		}
		c.sockets = append(c.sockets, p)
	}
	return c
}

// Exit is metrics.Exits'.
func (c *criExits) Exit(ctx context.Context, id string) (metrics.Exit, error) {
	var errs []error
	asked := false
	for _, sock := range c.sockets {
		if _, err := os.Stat(sock); err != nil {
			continue // no containerd there
		}
		conn, err := c.conn(sock)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		asked = true
		cctx, cancel := context.WithTimeout(ctx, criTimeout)
		resp, err := conn.Runtime.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		cancel()
		switch {
		case status.Code(err) == codes.NotFound:
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("CRI ContainerStatus at %s: %w", sock, err))
			continue
		}
		return exitOf(resp.GetStatus()), nil
	}
	if len(errs) > 0 {
		return metrics.Exit{}, errors.Join(errs...)
	}
	if !asked {
		return metrics.Exit{}, fmt.Errorf("no containerd socket at %s", strings.Join(c.sockets, ", "))
	}
	return metrics.Exit{}, metrics.ErrNoSuchContainer
}

// exitOf reads how a container ended from its CRI status; one not exited
// (created, running, unknown) has not ended as far as the CRI knows.
func exitOf(st *runtimeapi.ContainerStatus) metrics.Exit {
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return metrics.Exit{Running: true}
	}
	ex := metrics.Exit{Reason: st.GetReason(), ExitCode: st.GetExitCode()}
	if f := st.GetFinishedAt(); f > 0 {
		ex.FinishedAt = time.Unix(0, f)
	}
	return ex
}

// conn returns the connection to a socket, made once.
func (c *criExits) conn(sock string) (*criclient.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[sock]; ok {
		return conn, nil
	}
	conn, err := criclient.Dial("unix://" + sock)
	if err != nil {
		return nil, err
	}
	c.conns[sock] = conn
	return conn, nil
}

// Close closes the connections.
func (c *criExits) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sock, conn := range c.conns {
		_ = conn.Close()
		delete(c.conns, sock)
	}
}
