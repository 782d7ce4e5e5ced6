package containerd

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/internal/tomledit"
)

// dumpTimeout bounds containerd config dump.
const dumpTimeout = 20 * time.Second

// command runs the node's containerd binary (o.Containerd) with args as
// the node runs it (hostpath.Command: in /, chrooted into the root when
// there is one).
func (o LoadOptions) command(ctx context.Context, args ...string) *exec.Cmd {
	return hostpath.Command(ctx, o.Root, o.Containerd, args...)
}

// dump runs `containerd --config path config dump` (chrooted into the
// root when there is one, so that the node's paths mean what they mean to
// containerd) and returns its output.
func dump(ctx context.Context, o LoadOptions, path string) ([]byte, error) {
	if len(o.Overlay) > 0 || len(o.Exclude) > 0 {
		return nil, fmt.Errorf("containerd config dump reads every file on disk, not the overlay or the files excluded")
	}
	ctx, cancel := context.WithTimeout(ctx, dumpTimeout)
	defer cancel()
	bin := o.Containerd
	if o.hosted() && !strings.HasPrefix(bin, "/") {
		return nil, fmt.Errorf("containerd binary %q: want a node path", bin)
	}
	cmd := o.command(ctx, "--config", path, "config", "dump")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --config %s config dump: %w: %s", bin, path, err, lastLine(stderr.String()))
	}
	return out, nil
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// useDump replaces the view with the output of containerd config dump:
// containerd 1.x dumps version 2, containerd 2.x its current version.
func (c *Config) useDump(out []byte) error {
	tree, err := tomledit.Decode(out)
	if err != nil {
		return fmt.Errorf("containerd config dump: %w", err)
	}
	v, _ := tree["version"].(int64)
	switch {
	case v >= 2 && v <= 4:
	case v == 0 || v == 1:
		return fmt.Errorf("containerd config dump: version %d: a version 1 config", v)
	default:
		return fmt.Errorf("containerd config dump: unsupported version %d", v)
	}
	c.tree, c.layout, c.Dumped = tree, int(v), true
	c.Generation = Containerd1
	if v >= 3 {
		c.Generation = Containerd2
	}
	return nil
}
