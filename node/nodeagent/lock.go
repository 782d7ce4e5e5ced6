package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockNode takes the node-wide lock that orders agents on one node: during
// a DaemonSet rollout the old pod uninstalls (on SIGTERM) while the new pod
// already installs, and both read and write the same record, config and
// binaries. The lock is flock(2) on the node's root directory as the agent
// sees it (--host-root), so it needs no file of its own and leaves
// nothing behind; a process that dies drops it. It waits until ctx ends.
func (a *Agent) lockNode(ctx context.Context) (unlock func(), err error) {
	root := a.host("/")
	f, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("lock the node (%s): %w", root, err)
	}
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock the node (%s): %w", root, err)
		}
		if !logged {
			a.log().Info("waiting for another gpurun node agent on this node (a rollout: the old pod is uninstalling)")
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock the node (%s): %w", root, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
