package install

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpurun/gpurun/atomicfile"
	"github.com/gpurun/gpurun/runtime/engineconf/docker"
	"github.com/gpurun/gpurun/runtime/restart"
)

// DefaultDockerConfig is dockerd's configuration file.
const DefaultDockerConfig = "/etc/docker/daemon.json"

// Docker registers gpurun-runtime in a dockerd's daemon.json.
type Docker struct {
	Options
	// ConfigPath is daemon.json (a node path).
	ConfigPath string
	// SetAsDefault makes gpurun the default runtime, so plain `docker run`
	// gets it.
	SetAsDefault bool
	// Reload sends SIGHUP to dockerd, which reloads runtimes and the default
	// runtime without a restart.
	Reload bool
	// PIDFile is dockerd's pid file; "" means daemon.json's "pidfile", else
	// /var/run/docker.pid.
	PIDFile string
}

func (d Docker) configPath() string {
	if d.ConfigPath == "" {
		return d.host(DefaultDockerConfig)
	}
	return d.host(d.ConfigPath)
}

func (d Docker) options() docker.Options {
	return docker.Options{Name: RuntimeName, Path: d.RuntimePath, SetAsDefault: d.SetAsDefault}
}

// Install registers gpurun-runtime. A second install changes nothing.
func (d Docker) Install() error {
	path := d.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return err
	}
	after, ch, err := docker.Install(before, d.options())
	if err != nil {
		return fmt.Errorf("install into %s: %w", path, err)
	}
	var pc *policyChange
	var polBefore, polAfter []byte
	if ch.Chain != "" {
		if pc, polBefore, polAfter, err = d.chain(ch.Chain); err != nil {
			return err
		}
	}
	if d.DryRun {
		d.showDiff(path, before, after)
		if pc != nil {
			d.showDiff(d.policyPath(), polBefore, polAfter)
		}
		return nil
	}
	if !ch.Changed {
		fmt.Fprintf(d.Out, "%s: gpurun runtime already registered; nothing to do\n", path)
		return d.reload(after)
	}
	st, err := loadState(d.statePath())
	if err != nil {
		return err
	}
	backup, err := d.writeConfig(path, before, existed, after, st["docker"][path].Backup)
	if err != nil {
		return err
	}
	if pc != nil {
		if err := d.writePolicy(polAfter); err != nil {
			return err
		}
		fmt.Fprintf(d.Out, "%s: runtime = %q (gpurun-runtime hands over to the runtime that was the default)\n", d.policyPath(), ch.Chain)
	}
	raw, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	if st["docker"] == nil {
		st["docker"] = map[string]record{}
	}
	old, hadOld := st["docker"][path]
	merged, err := mergeRecord(old, hadOld, ch, mergeDocker, record{Change: raw, Policy: pc, Backup: backup, InstalledAt: d.now().UTC()})
	if err != nil {
		return fmt.Errorf("install state %s: %w", d.statePath(), err)
	}
	st["docker"][path] = merged
	if err := st.save(d.statePath()); err != nil {
		return err
	}
	what := "registered runtime " + RuntimeName
	if ch.SetDefault {
		what += " as the default runtime"
	}
	fmt.Fprintf(d.Out, "%s: %s (%s)", path, what, d.RuntimePath)
	if backup != "" {
		fmt.Fprintf(d.Out, "; backup %s", backup)
	}
	fmt.Fprintln(d.Out)
	return d.reload(after)
}

// Uninstall undoes what Install recorded for this daemon.json.
func (d Docker) Uninstall() error {
	path := d.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return err
	}
	if !existed {
		fmt.Fprintf(d.Out, "%s: does not exist; nothing to do\n", path)
		return nil
	}
	st, rec, ch, recorded, err := recordFor[docker.Change](d.Options, "docker", path)
	if err != nil {
		return err
	}
	if !recorded {
		// No record (a lost state file): remove the runtime gpurun's name
		// stands for, and the default if it names it.
		ch = docker.Change{Changed: true, AddedRuntime: true, SetDefault: true}
		fmt.Fprintf(d.Out, "%s: no install recorded in %s; removing the %q runtime\n", path, d.statePath(), RuntimeName)
	}
	after, changed, err := docker.Uninstall(before, docker.Options{Name: RuntimeName, Path: d.RuntimePath}, ch)
	if err != nil {
		return fmt.Errorf("uninstall from %s: %w", path, err)
	}
	if d.DryRun {
		d.showDiff(path, before, after)
		return nil
	}
	if changed {
		if err := atomicfile.Write(path, after, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(d.Out, "%s: gpurun runtime removed\n", path)
	} else {
		fmt.Fprintf(d.Out, "%s: gpurun runtime not registered; nothing to do\n", path)
	}
	if err := d.forget(st, "docker", path, rec, recorded); err != nil {
		return err
	}
	if changed && (ch.CreatedRuntimes || (ch.SetDefault && !ch.PreviousDefaultSet)) {
		// moby's reload only applies keys present in daemon.json: with
		// "runtimes" or "default-runtime" gone, a SIGHUP keeps the old ones.
		fmt.Fprintln(d.Out, "note: dockerd keeps the gpurun runtime loaded until it restarts (a reload does not drop keys that are no longer in daemon.json): systemctl restart docker")
	}
	return d.reload(after)
}

// reload signals dockerd when asked to, else says how.
func (d Docker) reload(config []byte) error {
	pidFile := d.PIDFile
	if pidFile == "" {
		pidFile = docker.PIDFile(config)
	}
	pidFile = d.host(pidFile)
	if !d.Reload {
		fmt.Fprintf(d.Out, "reload dockerd to apply: kill -HUP $(cat %s)  (or: systemctl reload docker)\n", pidFile)
		return nil
	}
	if d.HostRoot != "" && d.HostRoot != "/" {
		// The pid file's pid is the node's: signal it only from the node's
		// PID namespace (a pod with hostPID).
		if err := restart.SamePIDNamespace(d.HostRoot); err != nil {
			return fmt.Errorf("reload dockerd: %w", err)
		}
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("reload dockerd: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("reload dockerd: %s holds no pid: %q", pidFile, data)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload dockerd (pid %d): %w", pid, err)
	}
	fmt.Fprintf(d.Out, "sent SIGHUP to dockerd (pid %d): runtimes reload without a restart\n", pid)
	return nil
}
