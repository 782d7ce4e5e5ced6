package restart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
)

// DefaultContainerdConfig is the config containerd reads without --config.
const DefaultContainerdConfig = containerd.DefaultConfigPath

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// StartUncertainty bounds how far Process.Started and a file's mtime may be
// off against each other: the start time is counted in 10 ms clock ticks
// and read back truncated, /proc/uptime has 10 ms steps, and the kernel
// stamps mtimes from its coarse clock, up to a jiffy behind. A start within
// this of a change cannot be ordered before or after it.
const StartUncertainty = 50 * time.Millisecond

// Process is a containerd process on the node.
type Process struct {
	// PID is its process id in the namespace of the /proc it was read from.
	PID int
	// StartTicks is its start time in clock ticks after boot (field 22 of
	// /proc/<pid>/stat); with PID it identifies one run of containerd.
	StartTicks uint64
	// Started is when it started, from StartTicks and /proc/uptime, to
	// within StartUncertainty.
	Started time.Time
	// Config is its main config file: its --config (or the default),
	// made absolute against its working directory, as it sees it.
	Config string
	// Root is its root directory, seen from here (/proc/<pid>/root): where
	// its Config and the files that imports are.
	Root string
}

// ConfigFiles returns the files its config reads (its Config and what that
// imports), as it sees them, read as containerdconf reads them.
func (p Process) ConfigFiles(ctx context.Context) ([]string, error) {
	c, err := containerd.Load(ctx, p.Config, containerd.LoadOptions{Root: p.Root})
	if err != nil {
		return nil, err
	}
	if !c.Exists {
		return nil, nil
	}
	return c.Files, nil
}

// Reads reports whether the process reads the file want (os.Stat's info of
// it): its main config, or a file that imports. When its config cannot be
// read, only its main config counts.
func (p Process) Reads(ctx context.Context, want fs.FileInfo) bool {
	files, err := p.ConfigFiles(ctx)
	if err != nil {
		files = []string{p.Config}
	}
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(p.Root, f)); err == nil && os.SameFile(st, want) {
			return true
		}
	}
	return false
}

// ProcDir is where the node's processes are listed: hostRoot/proc, or /proc
// for this host.
func ProcDir(hostRoot string) string {
	return filepath.Join(orSlash(hostRoot), "proc")
}

func orSlash(hostRoot string) string {
	if hostRoot == "" {
		return "/"
	}
	return hostRoot
}

// FindContainerd returns the containerd processes that read the config file
// at the node path config: containerd daemons whose --config (or the
// default), or a file it imports, is, seen from their own root, the same
// file as hostRoot/config. Processes of other mount namespaces reading a
// file of the same name (containerd in a kind node, say) do not count.
func FindContainerd(hostRoot, config string) ([]Process, error) {
	if config == "" {
		config = DefaultContainerdConfig
	}
	want, err := os.Stat(filepath.Join(orSlash(hostRoot), config))
	if err != nil {
		return nil, fmt.Errorf("find containerd: %w", err)
	}
	all, err := ListContainerd(hostRoot)
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, p := range all {
		if p.Reads(context.Background(), want) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ListContainerd returns the containerd daemons running on the node:
// processes named containerd that run no subcommand (config dump, ...).
func ListContainerd(hostRoot string) ([]Process, error) {
	procDir := ProcDir(hostRoot)
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("find containerd: list processes: %w", err)
	}
	uptime, now, err := readUptime(procDir)
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		p, ok := containerdProcess(procDir, pid)
		if !ok {
			continue
		}
		p.Started = now.Add(-(uptime - time.Duration(p.StartTicks)*time.Second/clockTicks))
		out = append(out, p)
	}
	return out, nil
}

// containerdProcess reads one process and reports whether it is a
// containerd daemon.
func containerdProcess(procDir string, pid int) (Process, bool) {
	dir := filepath.Join(procDir, strconv.Itoa(pid))
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil || strings.TrimSpace(string(comm)) != "containerd" {
		return Process{}, false
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return Process{}, false
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	config, ok := configArg(args)
	if !ok {
		return Process{}, false
	}
	if !filepath.IsAbs(config) {
		cwd, err := os.Readlink(filepath.Join(dir, "cwd"))
		if err != nil {
			return Process{}, false
		}
		config = filepath.Join(cwd, config)
	}
	ticks, err := startTicks(dir)
	if err != nil {
		return Process{}, false
	}
	return Process{PID: pid, StartTicks: ticks, Config: config, Root: filepath.Join(dir, "root")}, true
}

// configArg returns the config file of a containerd command line: its
// --config/-c, else the default. Subcommands other than the daemon's own
// (containerd config dump, ...) are not the daemon.
func configArg(args []string) (string, bool) {
	config := DefaultContainerdConfig
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--config" || a == "-c" || a == "-config":
			if i+1 < len(args) {
				config = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--config="):
			config = strings.TrimPrefix(a, "--config=")
		case strings.HasPrefix(a, "-c="):
			config = strings.TrimPrefix(a, "-c=")
		case strings.HasPrefix(a, "-"):
			// A flag; those with a separate value (--log-level debug) are
			// followed by a word that is not a subcommand either.
			if !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !isSubcommand(args[i+1]) {
				i++
			}
		default:
			if isSubcommand(a) {
				return "", false
			}
		}
	}
	return config, true
}

// isSubcommand reports whether a word is one of containerd's subcommands,
// which are not the daemon.
func isSubcommand(a string) bool {
	switch a {
	case "config", "publish", "oci-hook", "help", "h":
		return true
	}
	return false
}

// startTicks reads field 22 (starttime) of /proc/<pid>/stat.
func startTicks(dir string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s/stat: no command name", dir)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0, fmt.Errorf("%s/stat: %d fields", dir, len(fields)+2)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// readUptime returns the time since boot from /proc/uptime and the wall
// clock at that moment.
func readUptime(procDir string) (time.Duration, time.Time, error) {
	now := time.Now()
	data, err := os.ReadFile(filepath.Join(procDir, "uptime"))
	if err != nil {
		return 0, now, fmt.Errorf("read uptime: %w", err)
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, now, fmt.Errorf("read uptime: %s/uptime is empty", procDir)
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, now, fmt.Errorf("read uptime: %s/uptime: %w", procDir, err)
	}
	return time.Duration(secs * float64(time.Second)), now, nil
}

// errForeignPIDs says the node's processes are in another PID namespace.
var errForeignPIDs = errors.New("the node's processes are in another PID namespace: run with hostPID (a DaemonSet needs hostPID: true)")

// SamePIDNamespace reports, with an error saying why not, whether this
// process shares the PID namespace of the node's /proc, so that the pids
// read there can be signalled: /proc/self there must be this process.
func SamePIDNamespace(hostRoot string) error {
	procDir := ProcDir(hostRoot)
	self, err := os.Readlink(filepath.Join(procDir, "self"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(procDir); serr != nil {
				return fmt.Errorf("%s: %w (mount the node's root, /proc included)", procDir, serr)
			}
			return errForeignPIDs
		}
		return fmt.Errorf("%s/self: %w", procDir, err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("%s/self is pid %s, this process is %d: %w", procDir, self, os.Getpid(), errForeignPIDs)
	}
	return nil
}

// alive reports whether the process pid with start time ticks still runs.
func alive(procDir string, pid int, ticks uint64) bool {
	got, err := startTicks(filepath.Join(procDir, strconv.Itoa(pid)))
	if err != nil || got != ticks {
		return false
	}
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}
