package doctor

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/nvidia"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/node/shim"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/policy"
)

// nvidiaLowLevel returns the low-level runtimes NVIDIA's config lists and
// the first of them that the node has, resolved.
func nvidiaLowLevel(sys *System, config string) (listed []string, first string, err error) {
	listed, err = nvidia.LowLevel(sys.Root, config)
	if err != nil {
		return nil, "", err
	}
	for _, r := range listed {
		if p, err := sys.resolveBinary(r); err == nil {
			return listed, p, nil
		}
	}
	return listed, "", nil
}

// containerdEnv is the environment of the containerd that reads the
// config at cfgPath (a node path): NVIDIA's runtime, run by its shim,
// reads its config from there when nothing else names it.
func containerdEnv(sys *System, cfgPath string) map[string]string {
	want, err := os.Stat(sys.path(cfgPath))
	if err != nil {
		return nil
	}
	procs, err := restart.ListContainerd(sys.Root)
	if err != nil {
		return nil
	}
	for _, p := range procs {
		if !p.Reads(context.Background(), want) {
			continue
		}
		data, err := sys.readFile(fmt.Sprintf("/proc/%d/environ", p.PID))
		if err != nil {
			return nil
		}
		env := map[string]string{}
		for _, kv := range strings.Split(string(data), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		return env
	}
	return nil
}

// gpurunNRIPlugin is a running `gpurun nri`.
type gpurunNRIPlugin struct {
	pid    int
	socket string
}

// gpurunNRIPlugins lists the gpurun NRI plugins running on the machine
// (their process's command line: a gpurun binary with the nri command,
// and its --socket).
func gpurunNRIPlugins(sys *System) []gpurunNRIPlugin {
	ents, err := os.ReadDir(sys.path("/proc"))
	if err != nil {
		return nil
	}
	var out []gpurunNRIPlugin
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := sys.readFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(data) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if !strings.HasPrefix(path.Base(argv[0]), "gpurun") || !slices.Contains(argv[1:], "nri") {
			continue
		}
		p := gpurunNRIPlugin{pid: pid, socket: containerd.DefaultNRISocket}
		for i, a := range argv {
			if v, ok := strings.CutPrefix(a, "--socket="); ok {
				p.socket = v
			} else if a == "--socket" && i+1 < len(argv) {
				p.socket = argv[i+1]
			}
		}
		out = append(out, p)
	}
	return out
}

// nriPluginOf returns the gpurun NRI plugin connected to the containerd
// of cfg, when NRI is on there.
func nriPluginOf(sys *System, cfg *containerd.Config) (gpurunNRIPlugin, bool) {
	nri := cfg.NRI()
	if !nri.Enabled {
		return gpurunNRIPlugin{}, false
	}
	for _, p := range gpurunNRIPlugins(sys) {
		if path.Clean(p.socket) == path.Clean(nri.Socket) || sameSocket(sys, p, nri.Socket) {
			return p, true
		}
	}
	return gpurunNRIPlugin{}, false
}

// sameSocket reports whether plugin p's --socket, a path in its own mount
// namespace (a pod's, where the node's NRI directory may be mounted
// elsewhere), is the file socket is on the machine: the same file through
// /proc/<pid>/root.
func sameSocket(sys *System, p gpurunNRIPlugin, socket string) bool {
	theirs, err := os.Stat(sys.path(fmt.Sprintf("/proc/%d/root", p.pid) + path.Clean("/"+p.socket)))
	if err != nil {
		return false
	}
	ours, err := os.Stat(sys.path(socket))
	return err == nil && os.SameFile(theirs, ours)
}

// handlersCheck looks at the runtime handlers beside gpurun's: the ones
// a file defines that containerd 1.x does not read (a CRI section read
// later replaces them), and those that run NVIDIA's runtime without
// gpurun-runtime in front of it.
func handlersCheck(cfg *containerd.Config, name string, isDefault, nri bool, configPath string) (Check, bool) {
	c := Check{Name: "containerd.handlers", Status: OK}
	hidden := cfg.HiddenRuntimes()
	var bypass []string
	for _, rt := range cfg.Runtimes() {
		if rt.Name != name && nvidia.IsRuntime(rt.BinaryName) {
			bypass = append(bypass, rt.Name)
		}
	}
	if len(hidden) == 0 && len(bypass) == 0 {
		return c, false
	}
	if len(hidden) > 0 {
		var names []string
		ours := false
		for _, h := range hidden {
			names = append(names, fmt.Sprintf("%s (defined in %s)", h.Name, h.File))
			ours = ours || strings.HasSuffix(h.By, "/99-gpurun.toml")
		}
		c.Status = Problem
		c.Detail = fmt.Sprintf("containerd (%s) does not read handlers %s: the CRI section of %s, read after them, replaces the whole section; pods with those RuntimeClasses fail (no runtime for ... is configured)", cfg.Generation, strings.Join(names, ", "), hidden[0].By)
		c.Data = map[string]any{"hidden": names}
		if ours {
			c.Fix = fmt.Sprintf("run gpurun install containerd again (same flags): its drop-in then carries the section containerd reads before it, every handler included; then restart containerd (%s)", configPath)
		} else {
			c.Fix = fmt.Sprintf("define the handlers in %s, or remove its CRI section; then restart containerd", hidden[0].By)
		}
		return c, true
	}
	c.Data = map[string]any{"bypass": bypass}
	if nri {
		c.Detail = fmt.Sprintf("handlers %s run NVIDIA's runtime; gpurun's NRI plugin sizes their pods too", strings.Join(bypass, ", "))
		return c, true
	}
	c.Status = Warn
	if name == "" || !isDefault {
		c.Status = OK
	}
	c.Detail = fmt.Sprintf("handlers %s run NVIDIA's runtime without gpurun-runtime in front of it: pods with those RuntimeClasses (the GPU Operator's own pods use nvidia) get containerd's 64MiB /dev/shm", strings.Join(bypass, ", "))
	c.Fix = "give GPU pods runtimeClassName: " + or(name, RuntimeName) + " or the default handler, or run gpurun's NRI plugin, which sizes pods of every handler (containerd 2.x; docs/nvidia.md)"
	return c, true
}

// nvidiaDefaultCheck looks at NVIDIA's intent where gpurun is the
// default handler: a file that makes an NVIDIA runtime the default
// (NVIDIA's toolkit in its legacy mode gives pods their GPUs that way),
// read before gpurun's, loses to gpurun, so gpurun-runtime must hand over
// to that runtime, or GPU pods of the default handler lose their GPUs.
func nvidiaDefaultCheck(sys *System, cfg *containerd.Config, pol *policy.Policy, policyPath string) (Check, bool) {
	defPath := []string{"plugins", cfg.RuntimePluginID(), "containerd", "default_runtime_name"}
	var wants []string
	for _, f := range cfg.DefinedIn(defPath...) {
		fc, err := containerd.Load(context.Background(), f, containerd.LoadOptions{Root: sys.Root, Generation: cfg.Generation, Exclude: cfg.Files})
		if err != nil {
			continue
		}
		if def := fc.DefaultRuntime(); def != RuntimeName {
			if rt, ok := cfg.Runtime(def); ok && nvidia.IsRuntime(rt.BinaryName) {
				wants = append(wants, fmt.Sprintf("%s (%s)", def, f))
			}
		}
	}
	if len(wants) == 0 {
		return Check{}, false
	}
	c := Check{Name: "runtime.nvidia-default", Status: OK}
	chained, _ := sys.resolveBinary(pol.Runtime)
	if nvidia.IsRuntime(chained) {
		c.Detail = fmt.Sprintf("NVIDIA's toolkit makes %s the default; gpurun is, and hands over to %s, so GPU pods still get NVIDIA's runtime", strings.Join(wants, ", "), chained)
		return c, true
	}
	c.Status = Problem
	c.Detail = fmt.Sprintf("NVIDIA's toolkit makes %s the default handler, but containerd reads gpurun's default after it, and gpurun-runtime hands over to %q, not to NVIDIA's runtime: GPU pods of the default handler no longer get their GPUs from it", strings.Join(wants, ", "), pol.Runtime)
	c.Fix = fmt.Sprintf("run gpurun install containerd --set-as-default again (same flags): it chains the runtime that is the default without it (runtime in %s); then restart containerd", policyPath)
	return c, true
}

// cycleCheck looks at the low-level runtimes of the NVIDIA runtime
// gpurun-runtime hands over to: listing gpurun-runtime (the GPU
// Operator's toolkit lists containerd's default runtime binary, once it
// starts while gpurun is the default) makes the two call each other;
// gpurun-runtime then runs runc itself and logs each time (shim.MsgCycle).
// Such records written after NVIDIA's config last changed count too.
func cycleCheck(sys *System, pol *policy.Policy, gpurunBinary string, env map[string]string) (Check, bool) {
	chained, err := sys.resolveBinary(pol.Runtime)
	if err != nil || !nvidia.IsRuntime(chained) {
		return Check{}, false
	}
	c := Check{Name: "runtime.cycle", Status: OK}
	config := nvidia.RuntimeConfig(sys.Root, chained, env)
	listed, first, err := nvidiaLowLevel(sys, config)
	if err != nil {
		c.Status = Error
		c.Detail = fmt.Sprintf("cannot read the config of NVIDIA's runtime %s: %v", chained, err)
		return c, true
	}
	c.Data = map[string]any{"nvidia_runtime": chained, "nvidia_config": config, "runtimes": listed, "runs": first}
	calls := first != "" && (path.Base(first) == runtimeBinary || gpurunBinary != "" && sameFile(sys, first, gpurunBinary))
	var since time.Time
	if fi, err := os.Stat(sys.path(config)); err == nil {
		since = fi.ModTime()
	}
	broken := 0
	if pol.LogFile != "" {
		if lines, err := readLog(sys, pol.LogFile); err == nil {
			for _, l := range lines {
				if msg, at, err := records.Message(l); err == nil && msg == shim.MsgCycle && !at.Before(since) {
					broken++
				}
			}
		}
	}
	c.Data["cycles_logged"] = broken
	fix := fmt.Sprintf("make NVIDIA's runtime run runc: on the GPU Operator, set %s=runc,crun in the toolkit's environment (ClusterPolicy toolkit.env) — its installer rewrites %s each time its pod starts; elsewhere, runtimes = [\"runc\", \"crun\"] under [nvidia-container-runtime] in %s", nvidia.RuntimesEnv, config, config)
	switch {
	case calls:
		c.Status = Problem
		c.Detail = fmt.Sprintf("gpurun-runtime hands over to NVIDIA's runtime %s, whose config %s lists %s first among its low-level runtimes (%s): the two call each other; gpurun-runtime, called back, runs runc itself and logs it (%d time(s) since that config changed)", chained, config, first, strings.Join(listed, ", "), broken)
		c.Fix = fix
	case broken > 0:
		c.Status = Problem
		c.Detail = fmt.Sprintf("gpurun's log %s has %d record(s) of NVIDIA's runtime %s calling gpurun-runtime back since its config %s changed", pol.LogFile, broken, chained, config)
		c.Fix = fix
	default:
		c.Detail = fmt.Sprintf("gpurun-runtime hands over to NVIDIA's runtime %s, which runs %s (its config %s lists %s)", chained, or(first, "none of its runtimes: containers fail"), config, strings.Join(listed, ", "))
		if first == "" {
			c.Status = Problem
			c.Fix = fix
		}
	}
	return c, true
}

// sameFile reports whether two node paths are one file.
func sameFile(sys *System, a, b string) bool {
	x, errA := os.Stat(sys.path(a))
	y, errB := os.Stat(sys.path(b))
	return errA == nil && errB == nil && os.SameFile(x, y)
}
