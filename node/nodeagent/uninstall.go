package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gpurun/gpurun/engine/restart"
)

// Uninstall undoes what Install recorded: it takes the runtime handler out
// of containerd's config (restoring it byte for byte), restarts containerd
// as the restart mode says, restores the policy file, and removes the
// binaries (putting back files they replaced) and the directories it
// created. gpurun-runtime stays, with gpurun, while a running container's
// shim calls it or while containerd still runs with the old configuration;
// the record then says so, and a later Uninstall finishes.
func (a *Agent) Uninstall(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	rec, statePath, unlock, err := a.lockAndLoad(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if rec == nil {
		a.log().Info("no record of an install by gpurun node; removing a registration gpurun's marker shows, if any", "record", a.statePath())
		dist := a.distribution()
		if !dist.Templated() {
			dist = ""
		}
		rec = &Record{BinDir: a.binDir(), Containerd: ContainerdRecord{
			Distribution: dist, Config: a.containerdConfig(dist), DropInDir: a.dropInDir(dist), RuntimePath: filepath.Join(a.binDir(), RuntimeBinary),
			Policy: a.policyPath(), InstallState: a.installState(), Restart: a.Restart,
		}}
		return a.containerd(rec, a.lineLog("uninstall")).Uninstall()
	}
	// The restart mode is the one given now: an uninstall may restart
	// where the install did not.
	rec.Containerd.Restart = a.Restart
	// The containerd run that has read gpurun's configuration, recorded
	// before it is taken out: the next agent of a rollout installs the same
	// configuration again and so knows this run has it, with no restart.
	if ctd, err := a.containerdState(rec); err == nil && ctd.loaded && ctd.proc != nil {
		rec.Loaded = ctd.loadedRecord()
	}
	edited, backup := a.configBackup(rec)
	if err := a.containerd(rec, a.lineLog("uninstall")).Uninstall(); err != nil {
		return err
	}
	a.removeBackupIfRestored(edited, backup)
	held, err := a.unload(ctx, rec)
	if err != nil {
		return err
	}
	if err := a.restorePolicy(rec); err != nil {
		return errors.Join(err, rec.save(statePath))
	}
	if held == "" {
		held, err = a.runtimeInUse(rec)
		if err != nil {
			return errors.Join(err, rec.save(statePath))
		}
	}
	if held != "" {
		rec.Pending = fmt.Sprintf("%s, %s and %s stay on the node: %s; run `gpurun node uninstall` again later", rec.Containerd.RuntimePath, CLIBinary, FullCLIBinary, held)
		a.log().Warn("uninstalled, but gpurun-runtime stays on the node", "why", held, "record", a.statePath())
		return rec.save(statePath)
	}
	for _, b := range rec.Binaries {
		if err := a.removeFile(b.Path, b.Backup); err != nil {
			return errors.Join(err, rec.save(statePath))
		}
	}
	if rec.Containerd.CreatedInstallState {
		if err := a.removeEmptyInstallState(rec.Containerd.InstallState); err != nil {
			return err
		}
	}
	if err := os.Remove(statePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", statePath, err)
	}
	a.removeDirs(rec.Dirs)
	a.log().Info("uninstalled gpurun from the node")
	return nil
}

// unload makes containerd drop the registration (restarting it as the mode
// says) and returns why gpurun-runtime must stay, or "".
func (a *Agent) unload(ctx context.Context, rec *Record) (string, error) {
	ctd, err := a.containerdState(rec)
	switch {
	case err != nil && rec.Containerd.Restart != restart.Systemd:
		return "cannot tell whether containerd still runs with gpurun: " + err.Error(), nil
	case err == nil && ctd.proc == nil:
		return "", nil
	case err == nil && ctd.loaded:
		return "", nil
	case rec.Containerd.Restart == restart.None || rec.Containerd.Restart == "":
		return fmt.Sprintf("containerd (pid %d) still runs with gpurun registered until it restarts (%s)", ctd.proc.PID, a.restartHint(rec)), nil
	}
	if err := a.restarter(rec).Restart(ctx); err != nil {
		return "", err
	}
	return "", nil
}

// runtimeInUse says which running containers' shims call gpurun-runtime,
// or "".
func (a *Agent) runtimeInUse(rec *Record) (string, error) {
	// A shim knows the binary by its node path; a containerd running in
	// the agent's own mount namespace (tests) by the path seen from here.
	ids, err := a.runningWith(a.containerdStateDir(rec), rec.Containerd.RuntimePath, a.host(rec.Containerd.RuntimePath))
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", nil
	}
	short := make([]string, len(ids))
	for i, id := range ids {
		short[i] = id[:min(12, len(id))]
	}
	return fmt.Sprintf("%d running container(s) use it (%s)", len(ids), strings.Join(short, ", ")), nil
}

// restorePolicy undoes the agent's policy file.
func (a *Agent) restorePolicy(rec *Record) error {
	if rec.Policy == nil {
		return nil
	}
	if err := a.removeFile(rec.Policy.Path, rec.Policy.Backup); err != nil {
		return err
	}
	rec.Policy = nil
	return nil
}

// removeFile removes a node file the agent wrote, or puts back the file it
// replaced.
func (a *Agent) removeFile(node, backup string) error {
	if backup != "" {
		mode := modeOf(a.host(backup))
		if err := copyFile(a.host(backup), a.host(node), mode); err != nil {
			return fmt.Errorf("restore %s: %w", node, err)
		}
		// atomicfile keeps the mode of the file it replaces: give the backup's.
		if err := os.Chmod(a.host(node), mode); err != nil {
			return fmt.Errorf("restore %s: %w", node, err)
		}
		if err := os.Remove(a.host(backup)); err != nil {
			return fmt.Errorf("remove %s: %w", a.host(backup), err)
		}
		a.log().Info("restored the file gpurun had replaced", "path", node)
		return nil
	}
	if err := os.Remove(a.host(node)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", a.host(node), err)
	}
	a.log().Info("removed", "path", node)
	return nil
}

// removeEmptyInstallState removes gpurun install's state file when the
// agent's install created it and it records nothing any more.
func (a *Agent) removeEmptyInstallState(node string) error {
	path := a.host(node)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var st map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &st); err != nil {
		return nil // not ours to judge
	}
	for _, recs := range st {
		if len(recs) > 0 {
			return nil
		}
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// removeDirs removes the directories the agent created, deepest first,
// where they are empty.
func (a *Agent) removeDirs(dirs []string) {
	sorted := append([]string(nil), dirs...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	for _, d := range sorted {
		if err := os.Remove(a.host(d)); err == nil {
			a.log().Info("removed directory", "path", d)
		}
	}
}

// configBackup returns the file gpurun install edited and the backup it
// took of it (paths here), from its state file; backup is "" without one.
// For k3s and RKE2 the file is their template.
func (a *Agent) configBackup(rec *Record) (edited, backup string) {
	edited, backup, _ = a.containerd(rec, io.Discard).ConfigRecord()
	return edited, backup
}

// removeBackupIfRestored removes install's backup of the config (a path
// here) once the config is restored to exactly that content: it is a copy
// of the file.
func (a *Agent) removeBackupIfRestored(config, backup string) {
	if backup == "" || config == "" {
		return
	}
	b, err1 := os.ReadFile(backup)
	c, err2 := os.ReadFile(config)
	if err1 != nil || err2 != nil || !bytes.Equal(b, c) {
		return
	}
	if err := os.Remove(backup); err == nil {
		a.log().Info("removed the backup of the restored config", "path", backup)
	}
}
