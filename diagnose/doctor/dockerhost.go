package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/system"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/docker"
	"github.com/gpurun/gpurun/node/shim"
	"github.com/gpurun/gpurun/policy"
)

// readDaemonJSON reads daemon.json at a path under the System's root
// (engine/docker's reader); a missing file is not an error (exists false).
func readDaemonJSON(sys *System, nodePath string) (cfg docker.Daemon, exists bool, err error) {
	data, err := sys.readFile(nodePath)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, false, nil
	}
	if err != nil {
		return cfg, true, fmt.Errorf("read %s: %w", nodePath, err)
	}
	cfg, err = docker.ReadDaemonJSON(nodePath, data)
	return cfg, true, err
}

// runtimePaths returns daemon.json's runtimes: name -> path.
func runtimePaths(cfg docker.Daemon) map[string]string {
	out := map[string]string{}
	for n, rt := range cfg.Runtimes {
		out[n] = rt.Path
	}
	return out
}

func liveRuntimePaths(info system.Info) map[string]string {
	out := map[string]string{}
	for n, rt := range info.Runtimes {
		out[n] = rt.Path
	}
	return out
}

func sortedNames(m map[string]string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// dockerChecks looks at dockerd: its daemon.json and, when it answers,
// what it loaded.
func dockerChecks(ctx context.Context, sys *System, o HostOptions, pol *policy.Policy) installed {
	cfgPath := o.DockerConfig
	if cfgPath == "" {
		cfgPath = DefaultDockerConfig
	}
	cfg, exists, cfgErr := readDaemonJSON(sys, cfgPath)
	var info system.Info
	infoErr := o.DockerErr
	if o.Docker != nil {
		info, infoErr = o.Docker.Info(ctx)
	} else if infoErr == nil {
		infoErr = errors.New("no Docker client")
	}
	live := infoErr == nil
	var out installed
	if !exists && !live && !sys.exists("/var/run/docker.sock") && !sys.exists("/run/docker.sock") {
		out.checks = append(out.checks, Check{Name: "docker", Status: OK,
			Detail: fmt.Sprintf("no Docker here: no %s and no daemon answering at %s", cfgPath, o.DockerHost)})
		return out
	}

	// daemon.json
	cc := Check{Name: "docker.config", Status: OK}
	switch {
	case cfgErr != nil:
		cc.Status = Problem
		cc.Detail = fmt.Sprintf("%v: dockerd does not start with a daemon.json it cannot read", cfgErr)
		cc.Fix = "correct the file, then: systemctl restart docker"
	case !exists:
		cc.Detail = fmt.Sprintf("no %s: Docker's defaults (runtime runc, /dev/shm 64MiB)", cfgPath)
	default:
		def := cfg.DefaultRuntime
		if def == "" {
			def = "runc (not set)"
		}
		rts := sortedNames(runtimePaths(cfg))
		if rts == "" {
			rts = "none"
		}
		cc.Detail = fmt.Sprintf("%s: default-runtime %s; runtimes: %s", cfgPath, def, rts)
	}
	out.checks = append(out.checks, cc)

	// The daemon.
	dc := Check{Name: "docker.daemon", Status: OK}
	if live {
		dc.Detail = fmt.Sprintf("dockerd %s at %s: default runtime %s; runtimes: %s", info.ServerVersion, o.DockerHost, info.DefaultRuntime, sortedNames(liveRuntimePaths(info)))
		dc.Data = map[string]any{"version": info.ServerVersion, "default_runtime": info.DefaultRuntime}
	} else {
		dc.Status = Warn
		dc.Detail = fmt.Sprintf("cannot reach dockerd at %s (%v): what it loaded is unknown; checked %s only", o.DockerHost, infoErr, cfgPath)
	}
	out.checks = append(out.checks, dc)

	// gpurun-runtime in dockerd.
	out.checks = append(out.checks, dockerRuntimeCheck(sys, cfg, cfgPath, cfgErr == nil, info, live, &out))
	if out.name != "" && cfgErr == nil {
		out.checks = append(out.checks, dockerDataRootCheck(sys, cfg, cfgPath, out.name, info, live, pol))
	}

	// default-shm-size.
	sc := Check{Name: "docker.default-shm-size", Status: OK}
	switch {
	case cfgErr != nil:
		sc.Status = Error
		sc.Detail = "unknown: daemon.json cannot be read"
	case cfg.DefaultShmSize == "":
		sc.Detail = "not set: containers without --shm-size get Docker's 64MiB"
		sc.Data = map[string]any{"size_bytes": policy.EngineDefaultShm}
	default:
		n, err := policy.ParseSize(cfg.DefaultShmSize)
		switch {
		case err != nil:
			sc.Status = Problem
			sc.Detail = fmt.Sprintf("%s: default-shm-size %q: %v", cfgPath, cfg.DefaultShmSize, err)
			sc.Fix = `write it in Docker's units ("2g", "512m")`
		case n < pol.Min && !pol.EnforceMin:
			sc.Status = Warn
			sc.Data = map[string]any{"size_bytes": n}
			sc.Detail = fmt.Sprintf("%s: every container without --shm-size gets %s, below the policy minimum %s; gpurun-runtime takes a size other than 64MiB as chosen and leaves it", cfgPath, policy.FormatSize(n), policy.FormatSize(pol.Min))
			sc.Fix = fmt.Sprintf(`raise "default-shm-size" to at least %q, or remove it and let gpurun size GPU containers`, policy.FormatDocker(pol.Min))
		default:
			sc.Data = map[string]any{"size_bytes": n}
			sc.Detail = fmt.Sprintf("%s: every container without --shm-size gets %s", cfgPath, policy.FormatSize(n))
		}
	}
	out.checks = append(out.checks, sc)
	return out
}

func dockerRuntimeCheck(sys *System, cfg docker.Daemon, cfgPath string, cfgOK bool, info system.Info, live bool, out *installed) Check {
	c := Check{Name: "docker.runtime", Status: OK}
	fileRT := runtimePaths(cfg)
	fileName, filePath := findRuntime(fileRT)
	liveName, livePath := "", ""
	if live {
		liveName, livePath = findRuntime(liveRuntimePaths(info))
	}
	name := fileName
	if name == "" {
		name = liveName
	}
	out.name = name
	out.nvidia = nvidiaRuntime(fileRT)
	fileDefault := name != "" && cfg.DefaultRuntime == name
	liveDefault := live && name != "" && info.DefaultRuntime == name
	out.isDefault = fileDefault || liveDefault
	c.Data = map[string]any{"registered": fileName != "", "default": fileDefault, "loaded": liveName != "", "loaded_default": liveDefault, "path": filePath}
	reload := reloadFix(cfg)

	if name == "" {
		c.Status = Warn
		c.Detail = "gpurun-runtime is not registered with dockerd: GPU containers started with plain docker run get the daemon's default /dev/shm"
		c.Fix = "sudo gpurun install docker --set-as-default --reload   (or start GPU containers with gpurun run)"
		return c
	}
	var problems []string
	if fileName != "" {
		if _, err := sys.resolveBinary(filePath); err != nil {
			problems = append(problems, fmt.Sprintf("runtimes.%s.path in %s: %v, so containers started with it fail", fileName, cfgPath, err))
		}
	}
	if live && cfgOK {
		switch {
		case fileName != "" && liveName == "":
			problems = append(problems, fmt.Sprintf("%s registers runtime %s, but the running dockerd has not loaded it", cfgPath, fileName))
		case fileDefault && !liveDefault:
			problems = append(problems, fmt.Sprintf("%s makes %s the default runtime, but the running dockerd's default is %s", cfgPath, name, info.DefaultRuntime))
		}
	}
	if len(problems) > 0 {
		c.Status = Problem
		c.Detail = strings.Join(problems, "; ")
		c.Fix = reload
		if fileName != "" {
			if _, err := sys.resolveBinary(filePath); err != nil {
				c.Fix = "install gpurun-runtime there, or register it where it is: sudo gpurun install docker --runtime-path PATH --reload"
			}
		}
		return c
	}
	where := filePath
	if where == "" {
		where = livePath
	}
	switch {
	case fileName == "" && liveName != "":
		c.Status = Warn
		c.Detail = fmt.Sprintf("the running dockerd still has runtime %s (%s), but %s no longer registers it: it goes at dockerd's next restart", liveName, livePath, cfgPath)
		c.Fix = "sudo gpurun install docker --reload to keep it, or systemctl restart docker to drop it"
	case out.isDefault:
		c.Detail = fmt.Sprintf("registered as runtime %s (%s) and dockerd's default: every container goes through it", name, where)
	default:
		c.Detail = fmt.Sprintf("registered as runtime %s (%s), not the default: containers started with --runtime %s get the policy's /dev/shm; plain docker run does not (sudo gpurun install docker --set-as-default --reload would)", name, where, name)
	}
	if path.Base(where) != runtimeBinary && where != "" {
		c.Detail += fmt.Sprintf("; its binary is %s, not %s", path.Base(where), runtimeBinary)
	}
	return c
}

// toldDataRoot returns the data-root in gpurun-runtime's runtimeArgs
// (dirs.DockerRootFlag), read as gpurun-runtime reads them; "" when none.
func toldDataRoot(args []string) string {
	return shim.ParseArgs(args, "").DockerRoot
}

// dockerDataRootCheck compares the data-root gpurun-runtime is told in its
// runtimeArgs with the one dockerd uses: the running daemon's, else
// daemon.json's as dockerd works it out (docker.Daemon.Root: links
// resolved, userns-remap's subdirectory). A shareable IPC group's tmpfs is
// <data-root>/containers/<id>/mounts/shm; told another root, or none that
// the policy's engine_roots cover, the shim refuses to grow it and the
// group keeps 64MiB.
func dockerDataRootCheck(sys *System, cfg docker.Daemon, cfgPath, name string, info system.Info, live bool, pol *policy.Policy) Check {
	c := Check{Name: "docker.data-root", Status: OK}
	told := toldDataRoot(cfg.Runtimes[name].Args)
	file, fileErr := cfg.Root(sys.Root)
	actual, from := file.Dir, cfgPath
	if !file.Set && file.Remap == "" {
		from = "Docker's default"
	}
	if live && info.DockerRootDir != "" {
		actual, from, fileErr = info.DockerRootDir, "the running dockerd", nil
	}
	c.Data = map[string]any{"told": told, "data_root": actual}
	fix := "sudo gpurun install docker --reload   (it tells gpurun-runtime the running dockerd's data-root)"
	switch {
	case fileErr != nil:
		c.Status = Warn
		c.Data["data_root"] = ""
		c.Detail = fmt.Sprintf("%s: %v, and no running dockerd names the directory it keeps containers in (a subdirectory of %s): whether gpurun-runtime's data-root (%s) is dockerd's is unknown", cfgPath, fileErr, actual, orNone(told))
		c.Fix = "run doctor while dockerd runs; if the data-root is not dockerd's: " + fix
	case told == "" && underRoots(actual, pol.EngineRoots):
		c.Status = Warn
		c.Detail = fmt.Sprintf("gpurun-runtime is not told dockerd's data-root (runtimes.%s.runtimeArgs in %s has no %s): it grows a --ipc shareable group's /dev/shm only under the policy's engine_roots, which cover %s (from %s)", name, cfgPath, dirs.DockerRootFlag, actual, from)
		c.Fix = fix
	case told == "":
		c.Status = Problem
		c.Detail = fmt.Sprintf("gpurun-runtime is not told dockerd's data-root %s (from %s), and the policy's engine_roots (%s) do not cover it: every --ipc shareable container and its container: peers keep 64MiB (their remount is refused)", actual, from, strings.Join(pol.EngineRoots, ", "))
		c.Fix = fix
	case told != actual:
		c.Status = Problem
		c.Detail = fmt.Sprintf("gpurun-runtime is told data-root %s, but dockerd uses %s (from %s): every --ipc shareable container and its container: peers keep 64MiB (their remount is refused)", told, actual, from)
		c.Fix = fix
	default:
		c.Detail = fmt.Sprintf("gpurun-runtime is told dockerd's data-root %s (from %s), where --ipc shareable groups' /dev/shm tmpfs are", told, from)
	}
	if live && c.Status == OK {
		if loaded, ok := info.Runtimes[name]; ok && toldDataRoot(loaded.Args) != told {
			c.Status = Problem
			c.Detail = fmt.Sprintf("%s tells gpurun-runtime data-root %s, but the running dockerd still passes %q", cfgPath, told, strings.Join(loaded.Args, " "))
			c.Fix = reloadFix(cfg)
		}
	}
	return c
}

// reloadFix says how to make dockerd reload daemon.json.
func reloadFix(cfg docker.Daemon) string {
	return fmt.Sprintf("reload dockerd: kill -HUP $(cat %s)  (or: systemctl reload docker)", cfg.PIDFilePath())
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// underRoots reports whether dir is strictly below one of roots.
func underRoots(dir string, roots []string) bool {
	for _, r := range roots {
		r = path.Clean(r)
		if r != "/" && strings.HasPrefix(dir+"/", r+"/") {
			return true
		}
	}
	return false
}

// fileExists reports whether a regular file exists under the root.
func (s *System) fileExists(p string) bool {
	fi, err := os.Stat(s.path(p))
	return err == nil && !fi.IsDir()
}
