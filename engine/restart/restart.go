// Package restart makes a node's containerd read its configuration again.
// containerd reads config.toml only when it starts and has no reload
// signal, so after gpurun install (or uninstall) it must be restarted;
// running containers keep running, since their shims are separate
// processes. Three modes, all opt-in:
//
//   - none: nothing is restarted; the command to run is printed.
//   - systemd: the node's systemd restarts containerd.service. On this host
//     that is `systemctl restart containerd.service`; through a host root (a
//     DaemonSet with hostPID that mounts the node's / at /host) it is
//     `nsenter --target 1 --mount -- systemctl restart containerd.service`
//     run chrooted into the host root, so the node's own nsenter and
//     systemctl talk to its systemd, exactly as an administrator would.
//   - signal: SIGTERM to the containerd process that reads the config (found
//     in the node's /proc), which stops cleanly; whatever supervises it
//     (systemd's Restart=always in containerd.service) starts it again, and
//     Restart waits until a new containerd answers on its socket. SIGHUP is
//     not used: containerd does not handle it, so it would die uncleanly
//     rather than reload. Where nothing supervises containerd, signal leaves
//     the node without containerd, and Restart says so.
package restart

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/internal/hostpath"
)

// Mode says how containerd is restarted.
type Mode string

// The modes.
const (
	None    Mode = "none"
	Signal  Mode = "signal"
	Systemd Mode = "systemd"
)

// Modes lists the modes, for help texts.
const Modes = "none|signal|systemd"

// ParseMode checks a mode; "" means None.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", None:
		return None, nil
	case Signal, Systemd:
		return Mode(s), nil
	}
	return "", fmt.Errorf("restart mode %q: want one of %s", s, Modes)
}

// DefaultUnit is containerd's systemd unit.
const DefaultUnit = "containerd.service"

// DefaultTimeout bounds how long a restart may take.
const DefaultTimeout = 2 * time.Minute

// Containerd restarts a node's containerd.
type Containerd struct {
	// HostRoot is where the node's root is mounted ("" or "/": this host).
	HostRoot string
	// Mode is how; "" means None.
	Mode Mode
	// ConfigPath is the config.toml containerd reads (a node path; ""
	// means DefaultContainerdConfig). It identifies the process to signal
	// and names the socket to wait for.
	ConfigPath string
	// Unit is the systemd unit ("" means DefaultUnit).
	Unit string
	// Timeout bounds the restart (0 means DefaultTimeout).
	Timeout time.Duration
	// Out receives what was done.
	Out io.Writer
}

func (c Containerd) hosted() bool { return c.HostRoot != "" && c.HostRoot != "/" }

func (c Containerd) config() string {
	if c.ConfigPath == "" {
		return DefaultContainerdConfig
	}
	return c.ConfigPath
}

func (c Containerd) unit() string {
	if c.Unit == "" {
		return DefaultUnit
	}
	return c.Unit
}

func (c Containerd) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

func (c Containerd) out() io.Writer {
	if c.Out == nil {
		return io.Discard
	}
	return c.Out
}

// Restart restarts containerd as Mode says, or with None prints how to.
func (c Containerd) Restart(ctx context.Context) error {
	mode, err := ParseMode(string(c.Mode))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	switch mode {
	case Systemd:
		return c.systemd(ctx)
	case Signal:
		return c.signal(ctx)
	}
	fmt.Fprintf(c.out(), "restart containerd to apply: systemctl restart %s  (running containers keep running)\n", strings.TrimSuffix(c.unit(), ".service"))
	return nil
}

// systemd asks the node's systemd to restart the unit; systemctl returns
// when the unit is up again (containerd.service is Type=notify).
func (c Containerd) systemd(ctx context.Context) error {
	var cmd *exec.Cmd
	if !c.hosted() {
		cmd = exec.CommandContext(ctx, "systemctl", "restart", c.unit())
	} else {
		if err := c.checkHostSystemd(); err != nil {
			return fmt.Errorf("restart containerd: %w", err)
		}
		nsenter, err := c.hostBinary("nsenter")
		if err != nil {
			return fmt.Errorf("restart containerd: %w", err)
		}
		cmd = hostpath.Command(ctx, c.HostRoot, nsenter, "--target", "1", "--mount", "--", "systemctl", "restart", c.unit())
		cmd.Env = append(cmd.Env, "LANG=C")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("restart containerd: %s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	how := "systemctl restart " + c.unit()
	if c.hosted() {
		how = "the node's systemd (" + how + " in PID 1's mount namespace)"
	}
	fmt.Fprintf(c.out(), "restarted containerd through %s\n", how)
	return nil
}

// checkHostSystemd checks that the node's PID 1, seen through the host
// root, is systemd and is the PID 1 of this process's namespace.
func (c Containerd) checkHostSystemd() error {
	if err := SamePIDNamespace(c.HostRoot); err != nil {
		return err
	}
	comm, err := os.ReadFile(filepath.Join(ProcDir(c.HostRoot), "1", "comm"))
	if err != nil {
		return fmt.Errorf("the node's PID 1: %w", err)
	}
	if name := strings.TrimSpace(string(comm)); name != "systemd" {
		return fmt.Errorf("the node's PID 1 is %q, not systemd: use restart mode signal or none", name)
	}
	return nil
}

// hostBinary finds a program in the node's usual directories and returns
// its path inside the host root.
func (c Containerd) hostBinary(name string) (string, error) {
	for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(filepath.Join(c.HostRoot, p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on the node (under %s: /usr/bin, /bin, /usr/sbin, /sbin)", name, c.HostRoot)
}

// signal stops containerd with SIGTERM and waits for its supervisor to
// start a new one that answers on its socket.
func (c Containerd) signal(ctx context.Context) error {
	if err := SamePIDNamespace(c.HostRoot); err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	old, err := c.running()
	if err != nil {
		return err
	}
	procDir := ProcDir(c.HostRoot)
	if err := syscall.Kill(old.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("restart containerd: SIGTERM to pid %d: %w", old.PID, err)
	}
	fmt.Fprintf(c.out(), "sent SIGTERM to containerd (pid %d); waiting for its supervisor to start it again\n", old.PID)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	wait := func(what string, done func() (bool, error)) error {
		for {
			ok, err := done()
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("restart containerd: %s within %s: %w", what, c.timeout(), ctx.Err())
			case <-tick.C:
			}
		}
	}
	if err := wait(fmt.Sprintf("containerd (pid %d) did not stop", old.PID), func() (bool, error) {
		return !alive(procDir, old.PID, old.StartTicks), nil
	}); err != nil {
		return err
	}
	var fresh Process
	if err := wait("no new containerd started (nothing supervises it? start it on the node now: systemctl start containerd)", func() (bool, error) {
		procs, err := FindContainerd(c.HostRoot, c.config())
		if err != nil {
			return false, nil // the config may be replaced right now
		}
		for _, p := range procs {
			if p.PID != old.PID || p.StartTicks != old.StartTicks {
				fresh = p
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	socket, err := socketOf(ctx, c.HostRoot, c.config())
	if err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	if err := wait(fmt.Sprintf("the new containerd (pid %d) did not answer on %s", fresh.PID, socket), func() (bool, error) {
		conn, err := net.DialTimeout("unix", socket, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(c.out(), "containerd restarted (pid %d), answering on %s\n", fresh.PID, socket)
	return nil
}

// running is the one running containerd that reads c's config.
func (c Containerd) running() (Process, error) {
	procs, err := FindContainerd(c.HostRoot, c.config())
	if err != nil {
		return Process{}, fmt.Errorf("restart containerd: %w", err)
	}
	switch len(procs) {
	case 0:
		return Process{}, fmt.Errorf("restart containerd: no running containerd reads %s", c.config())
	case 1:
		return procs[0], nil
	}
	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = fmt.Sprint(p.PID)
	}
	return Process{}, fmt.Errorf("restart containerd: %d containerd processes read %s (pids %s): restart the right one by hand", len(procs), c.config(), strings.Join(pids, ", "))
}

// socketOf returns the gRPC socket of the containerd that reads config (a
// node path; its imports included), as a path here.
func socketOf(ctx context.Context, hostRoot, config string) (string, error) {
	c, err := containerd.Load(ctx, config, containerd.LoadOptions{Root: hostRoot})
	if err != nil {
		return "", fmt.Errorf("the socket containerd listens on: %w", err)
	}
	return filepath.Join(orSlash(hostRoot), c.Address()), nil
}
