package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/docker"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/policy"
)

// DefaultDockerConfig is dockerd's configuration file.
const DefaultDockerConfig = docker.DefaultConfigFile

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
	// DataRoot is dockerd's data-root (a node path); "" learns it: the
	// running dockerd's (Daemon) when it reads ConfigPath, else what
	// ConfigPath says (docker.Daemon.Root: "data-root", else
	// /var/lib/docker, links resolved and userns-remap's subdirectory
	// added as dockerd does).
	DataRoot string
	// Daemon asks the running dockerd where it keeps its containers; nil,
	// or an error, when none answers.
	Daemon func() (RunningDockerd, error)
}

// RunningDockerd is what the dockerd answering on the Docker socket says
// of itself.
type RunningDockerd struct {
	// DataRoot is its DockerRootDir (docker info): the directory that
	// holds containers/, userns-remap's subdirectory included.
	DataRoot string
	// PID is the dockerd serving the socket and Args its command line,
	// from which the daemon.json it reads is known (docker.ParseFlags); 0
	// and nil when unknown (a socket served from another PID namespace,
	// or held by systemd with more than one dockerd running).
	PID  int
	Args []string
}

func (d Docker) configPath() string {
	return d.host(d.configNode())
}

// configNode is daemon.json's node path.
func (d Docker) configNode() string {
	if d.ConfigPath == "" {
		return DefaultDockerConfig
	}
	return d.ConfigPath
}

func (d Docker) options() docker.Options {
	return docker.Options{Name: RuntimeName, Path: d.RuntimePath, SetAsDefault: d.SetAsDefault}
}

// dataRoot returns the directory dockerd keeps its containers under, as
// dockerd itself uses it (the running daemon's, when it answers and reads
// this daemon.json), and says where it learned it and what would make
// gpurun-runtime refuse to grow a shareable IPC group's /dev/shm. It
// returns "" when the data-root cannot be passed to gpurun-runtime.
func (d Docker) dataRoot(cfg docker.Daemon) string {
	file, fileErr := cfg.Root(d.HostRoot)
	from := "daemon.json"
	if !file.Set && file.Remap == "" {
		from = "Docker's default"
	}
	live, liveErr := RunningDockerd{}, errors.New("not asked")
	if d.Daemon != nil {
		live, liveErr = d.Daemon()
	}
	other := ""
	if liveErr == nil && live.Args != nil {
		other = d.readsOther(live)
	}
	var root string
	switch {
	case d.DataRoot != "":
		root, from = d.DataRoot, "--data-root"
	case liveErr == nil && live.DataRoot != "" && other == "":
		root = live.DataRoot
		// daemon.json silent and dockerd elsewhere: a --data-root flag,
		// which is dockerd's to know. daemon.json saying another: a
		// restart will move it.
		if live.DataRoot != file.Dir && file.Set && fileErr == nil {
			fmt.Fprintf(d.Out, "warning: the running dockerd uses data-root %s, but %s says %s (a --data-root flag?): gpurun-runtime is told %s; run gpurun install docker again if dockerd restarts with another\n", live.DataRoot, from, file.Dir, live.DataRoot)
		}
		from = "the running dockerd"
	default:
		root = file.Dir
		why := fmt.Sprint(liveErr)
		if other != "" {
			why = fmt.Sprintf("the dockerd answering (pid %d) reads %s", live.PID, other)
			fmt.Fprintf(d.Out, "warning: the dockerd answering on the Docker socket (pid %d) reads %s, not %s: gpurun-runtime is told the data-root %s gives; point DOCKER_HOST at the dockerd started with --config-file %s, or pass --data-root DIR\n", live.PID, other, d.configNode(), d.configNode(), d.configNode())
		}
		if fileErr != nil {
			fmt.Fprintf(d.Out, "warning: %v: dockerd keeps containers in a subdirectory of %s that only the running daemon names, and none that reads %s answered (%s): run gpurun install docker while dockerd runs, or --data-root DIR\n", fileErr, root, d.configNode(), why)
		}
	}
	if err := dirs.CheckDockerRoot(root); err != nil {
		fmt.Fprintf(d.Out, "warning: %v: gpurun-runtime is not told it, and grows a --ipc shareable group's /dev/shm only under the policy's engine_roots%s\n", err, d.coveredNote(root))
		return ""
	}
	fmt.Fprintf(d.Out, "dockerd data-root %s (from %s): passed to gpurun-runtime in runtimeArgs (%s)\n", root, from, dirs.DockerRootFlag)
	return root
}

// readsOther returns the daemon.json the running dockerd reads when that
// is not this one (its --config-file, else the default), "" when it is.
func (d Docker) readsOther(live RunningDockerd) string {
	reads := docker.ParseFlags(live.Args).ConfigFile
	mine := d.configNode()
	if filepath.Clean(reads) == filepath.Clean(mine) {
		return ""
	}
	a, errA := os.Stat(d.host(reads))
	b, errB := os.Stat(d.host(mine))
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return ""
	}
	return reads
}

// coveredNote says whether the policy's engine_roots cover root.
func (d Docker) coveredNote(root string) string {
	pol, err := policy.Load(d.policyPath(), false)
	if err != nil {
		return ""
	}
	if underAny(root, pol.EngineRoots) {
		return fmt.Sprintf(" (%s covers %s)", d.policyPath(), root)
	}
	return fmt.Sprintf(", which do not cover %s: it will be refused; add %q to engine_roots in %s", root, root, d.policyPath())
}

// Install registers gpurun-runtime, telling it dockerd's data-root. A
// second install changes nothing.
func (d Docker) Install() error { return install[docker.Change](d.Options, d) }

// Uninstall undoes what Install recorded for this daemon.json.
func (d Docker) Uninstall() error { return uninstall[dockerUndo](d.Options, d) }

// key is daemon.json's engine in the state file.
func (Docker) key() string { return "docker" }

// edit works the install out on daemon.json with docker's editor. dockerd
// passes a runtime's runtimeArgs on every call, ahead of its own arguments
// (it writes them into a wrapper script it runs instead of the runtime's
// path): so dockerd itself names its data-root to gpurun-runtime each
// time, and the shim knows exactly where a --ipc shareable group's tmpfs
// may be, wherever the data-root is.
func (d Docker) edit(state) (change[docker.Change], error) {
	path := d.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return change[docker.Change]{}, err
	}
	opts := d.options()
	cfg, err := docker.ReadDaemonJSON(path, before)
	if err != nil {
		return change[docker.Change]{}, fmt.Errorf("install docker runtime: %w", err)
	}
	if root := d.dataRoot(cfg); root != "" {
		opts.RuntimeArgs = []string{dirs.DockerRootFlag + "=" + root}
	}
	after, ch, err := docker.Install(before, opts)
	if err != nil {
		return change[docker.Change]{}, fmt.Errorf("install into %s: %w", path, err)
	}
	return change[docker.Change]{path: path, files: []fileDiff{{path, before, after, existed}}, chain: ch.Chain, changed: ch.Changed, own: ch}, nil
}

// unchanged is Options.nothingToDo.
func (d Docker) unchanged(st state, ch change[docker.Change]) error {
	return d.nothingToDo(st, d.key(), ch.path, ch.old, ch.hadOld)
}

// keep backs daemon.json up before its first change and merges the
// change with the recorded one.
func (d Docker) keep(ch change[docker.Change]) (record, error) {
	f := ch.files[0]
	return newRecord(d.Options, ch.path, f.before, f.existed, ch.old, ch.hadOld, ch.own, mergeDocker, record{Policy: ch.pol.change})
}

// report says what was registered.
func (d Docker) report(_ state, ch change[docker.Change], rec record) error {
	what := "registered runtime " + RuntimeName
	if ch.own.SetDefault {
		what += " as the default runtime"
	}
	d.reportLine(ch.path, fmt.Sprintf("%s (%s)", what, d.RuntimePath), rec.Backup)
	return nil
}

// apply reloads dockerd (or says how) after an install.
func (d Docker) apply(ch change[docker.Change], dryRun bool) error {
	if dryRun {
		return nil
	}
	return d.reload(ch.files[0].after)
}

// dockerUndo is what an uninstall from daemon.json did, for undone.
type dockerUndo struct {
	ch      docker.Change
	changed bool
	after   []byte
}

// undo works the uninstall out with docker's editor: what the record
// says was added, or, with no record (a lost state file), the runtime
// gpurun's name stands for, and the default if it names it.
func (d Docker) undo() (*undoPlan[dockerUndo], error) {
	path := d.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	if !existed {
		fmt.Fprintf(d.Out, "%s: does not exist; nothing to do\n", path)
		return nil, nil
	}
	st, rec, ch, recorded, err := recordFor[docker.Change](d.Options, d.key(), path)
	if err != nil {
		return nil, err
	}
	if !recorded {
		ch = docker.Change{Changed: true, AddedRuntime: true, SetDefault: true}
		fmt.Fprintf(d.Out, "%s: no install recorded in %s; removing the %q runtime\n", path, d.statePath(), RuntimeName)
	}
	after, changed, err := docker.Uninstall(before, docker.Options{Name: RuntimeName, Path: d.RuntimePath}, ch)
	if err != nil {
		return nil, fmt.Errorf("uninstall from %s: %w", path, err)
	}
	f := fileUndo{path: path, before: before, after: after, write: changed, done: path + ": gpurun runtime not registered; nothing to do"}
	if changed {
		f.done = path + ": gpurun runtime removed"
	}
	return &undoPlan[dockerUndo]{st: st, path: path, rec: rec, recorded: recorded, files: []fileUndo{f}, own: dockerUndo{ch, changed, after}}, nil
}

// undone says what dockerd keeps until it restarts, and reloads it
// unless a reload would break it.
func (d Docker) undone(u *undoPlan[dockerUndo]) error {
	ch, changed := u.own.ch, u.own.changed
	if changed && (ch.CreatedRuntimes || (ch.SetDefault && !ch.PreviousDefaultSet)) {
		// moby's reload only applies keys present in daemon.json: with
		// "runtimes" or "default-runtime" gone, a SIGHUP keeps the old ones.
		fmt.Fprintln(d.Out, "note: dockerd keeps the gpurun runtime loaded until it restarts (a reload does not drop keys that are no longer in daemon.json): systemctl restart docker")
	}
	if changed && d.Reload && ch.SetDefault && !ch.PreviousDefaultSet && !ch.CreatedRuntimes {
		// The reload would keep "gpurun" the default (its key is gone)
		// and take the runtimes the file still lists, gpurun's not among
		// them: dockerd 20.10 then panics on its next `docker info`
		// (a default runtime it does not have). Only a restart applies
		// this file.
		fmt.Fprintf(d.Out, "not reloading dockerd: its default runtime stays gpurun until it restarts, and a reload would drop gpurun's runtime under it; restart it: systemctl restart docker\n")
		return nil
	}
	return d.reload(u.own.after)
}

// reload signals dockerd when asked to, else says how.
func (d Docker) reload(config []byte) error {
	pidFile := d.PIDFile
	if pidFile == "" {
		// A daemon.json that does not read leaves dockerd's default.
		cfg, _ := docker.ReadDaemonJSON(d.configPath(), config)
		pidFile = cfg.PIDFilePath()
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
