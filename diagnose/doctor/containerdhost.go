package doctor

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/nvidia"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// loadContainerd reads containerd's config under the System's root, with
// the files it imports, merged as containerd merges them (runtime/
// containerdconf): a missing config gives containerd's defaults.
func loadContainerd(sys *System, nodePath string) (*containerd.Config, error) {
	return containerd.Load(context.Background(), nodePath, containerd.LoadOptions{Root: sys.Root})
}

// containerdChecks looks at containerd: its config (with imports) and,
// when it answers, what its CRI plugin loaded.
func containerdChecks(ctx context.Context, sys *System, o HostOptions, pol *policy.Policy) installed {
	cfgPath := o.ContainerdConfig
	if cfgPath == "" {
		cfgPath = DefaultContainerdConfig
	}
	var out installed
	cfg, err := loadContainerd(sys, cfgPath)
	var v1 *containerd.UnsupportedVersionError
	exists := err != nil || cfg.Exists
	present := exists || o.CRI != nil || sys.exists("/run/containerd/containerd.sock") ||
		slices.ContainsFunc([]string{"/usr/bin/containerd", "/usr/local/bin/containerd"}, sys.fileExists)
	if !present {
		out.checks = append(out.checks, Check{Name: "containerd", Status: OK, Detail: fmt.Sprintf("no containerd here: no %s, no binary, no socket", cfgPath)})
		return out
	}
	cc := Check{Name: "containerd.config", Status: OK}
	switch {
	case errors.As(err, &v1):
		cc.Status = Warn
		cc.Detail = fmt.Sprintf("%s has no version key: a version 1 config, which containerd 2.x no longer reads and gpurun install does not edit", cfgPath)
		cc.Fix = "convert it: containerd config migrate > config.toml.new (containerd 2.x), or start from containerd config default"
		out.checks = append(out.checks, cc)
		return out
	case err != nil:
		cc.Status = Problem
		cc.Detail = fmt.Sprintf("%v: containerd does not start with a config it cannot read", err)
		cc.Fix = "correct the file, then: systemctl restart containerd"
		out.checks = append(out.checks, cc)
		return out
	case !cfg.Exists:
		cc.Detail = fmt.Sprintf("no %s: containerd's defaults (runtime runc, pods get a 64MiB /dev/shm)", cfgPath)
	default:
		cc.Detail = fmt.Sprintf("%s: version %d", cfgPath, cfg.Version)
		if len(cfg.Files) > 1 {
			cc.Detail += ", with " + strings.Join(cfg.Files[1:], ", ")
		}
		cc.Data = map[string]any{"version": cfg.Version, "files": cfg.Files}
	}
	out.checks = append(out.checks, cc)

	if p, ok := cfg.CRIDisabled(); ok {
		out.checks = append(out.checks, Check{Name: "containerd.runtime", Status: OK,
			Detail: fmt.Sprintf("the CRI plugin is disabled (disabled_plugins has %q): this containerd runs no Kubernetes pods", p)})
		return out
	}
	def := cfg.DefaultRuntime()
	rts := map[string]containerd.Runtime{}
	paths := map[string]string{}
	for _, rt := range cfg.Runtimes() {
		rts[rt.Name] = rt
		paths[rt.Name] = rt.BinaryName
	}
	name, _ := findRuntime(paths)
	out.name, out.isDefault = name, name != "" && def == name
	out.nvidia = nvidiaRuntime(paths)

	rc := Check{Name: "containerd.runtime", Status: OK, Data: map[string]any{"registered": name != "", "default": out.isDefault, "default_runtime": def}}
	plugin, nri := nriPluginOf(sys, cfg)
	switch {
	case name == "" && nri:
		rc.Detail = fmt.Sprintf("no gpurun runtime handler, none needed: gpurun's NRI plugin (pid %d) is connected to containerd's NRI socket %s and sizes the pods of every handler", plugin.pid, plugin.socket)
		rc.Data["nri_plugin_pid"] = plugin.pid
		out.checks = append(out.checks, rc)
	case name == "":
		rc.Status = Warn
		rc.Detail = fmt.Sprintf("no gpurun runtime handler (default handler %s): pods get containerd's 64MiB /dev/shm", def)
		rc.Fix = "sudo gpurun install containerd --set-as-default --restart   (or without --set-as-default, and runtimeClassName: gpurun in the pods that need it; beside NVIDIA's toolkit see docs/nvidia.md)"
		if cfg.NRI().Enabled {
			rc.Fix += "; or run gpurun's NRI plugin (containerd's NRI is on: deploy/kubernetes/overlays/nri)"
		}
		out.checks = append(out.checks, rc)
	default:
		rt := rts[name]
		rc.Data["binary"] = rt.BinaryName
		var problems []string
		if rt.Type != containerd.RuncV2 {
			problems = append(problems, fmt.Sprintf("runtime_type is %q: gpurun-runtime is a runc-compatible binary, run by %s with options.BinaryName", rt.Type, containerd.RuncV2))
		}
		if rt.BinaryName == "" {
			problems = append(problems, "options.BinaryName is not set: containerd would run plain runc")
		} else if _, err := sys.resolveBinary(rt.BinaryName); err != nil {
			problems = append(problems, fmt.Sprintf("options.BinaryName: %v, so pods with this handler fail to start", err))
		}
		if len(problems) > 0 {
			rc.Status = Problem
			rc.Detail = fmt.Sprintf("runtime handler %s: %s", name, strings.Join(problems, "; "))
			rc.Fix = "sudo gpurun install containerd --restart   (it sets runtime_type and options.BinaryName)"
		} else if out.isDefault {
			rc.Detail = fmt.Sprintf("runtime handler %s (%s) is the default: every pod goes through it", name, rt.BinaryName)
		} else {
			rc.Detail = fmt.Sprintf("runtime handler %s (%s), not the default (%s): pods with runtimeClassName: %s (a RuntimeClass with handler %s) get the policy's /dev/shm", name, rt.BinaryName, def, name, name)
			if rec, ok := recordedDefault(sys, o, cfgPath); ok {
				// What the admin asked for no longer holds: another tool
				// (nvidia-ctk runtime configure --set-as-default) made
				// another handler the default since.
				file, line := cfg.Defines("plugins", cfg.RuntimePluginID(), "containerd", "default_runtime_name")
				rc.Status = Problem
				rc.Detail += fmt.Sprintf("; gpurun install made %s the default (recorded %s) and that no longer holds: %s is, set in %s:%d, so pods without a runtimeClassName keep containerd's 64MiB", name, rec.InstalledAt.Format(time.DateOnly), def, file, line)
				rc.Fix = "sudo gpurun install containerd --set-as-default --restart   (makes gpurun the default again, in a drop-in directory of its own where another file would hide it; gpurun chains the runtime that is the default now)"
				rc.Data["recorded_default"] = true
			} else if d, ok := rts[def]; ok && nvidia.IsRuntime(d.BinaryName) && !nri {
				file, line := cfg.Defines("plugins", cfg.RuntimePluginID(), "containerd", "default_runtime_name")
				rc.Status = Warn
				rc.Detail += fmt.Sprintf("; GPU pods without it go through NVIDIA's runtime (%s, the default set in %s:%d) and get containerd's 64MiB", d.BinaryName, file, line)
				rc.Fix = fmt.Sprintf("to size every GPU pod: sudo gpurun install containerd --set-as-default --drop-in %s --restart (read after NVIDIA's drop-in; gpurun chains NVIDIA's runtime), or gpurun's NRI plugin (docs/nvidia.md)", install.OwnDropInDir(cfgPath))
			}
		}
		out.checks = append(out.checks, rc)
		out.checks = append(out.checks, podAnnotationsCheck(name, rt, pol))
	}
	if c, ok := handlersCheck(cfg, name, out.isDefault, nri, cfgPath); ok {
		out.checks = append(out.checks, c)
	}
	if name != "" && out.isDefault {
		if c, ok := nvidiaDefaultCheck(sys, cfg, pol, policyPathOf(o)); ok {
			out.checks = append(out.checks, c)
		}
	}
	if name != "" {
		if c, ok := cycleCheck(sys, pol, rts[name].BinaryName, containerdEnv(sys, cfgPath)); ok {
			out.checks = append(out.checks, c)
		}
	}
	c, ok := loadedCheck(ctx, o, name, out.isDefault)
	if ok {
		out.checks = append(out.checks, c)
	}
	if ok && c.Status != Problem {
		if c, ok := podsCheck(ctx, sys, o, pol, name); ok {
			out.checks = append(out.checks, c)
		}
	}
	return out
}

// podAnnotationsCheck says whether the pod annotations the policy reads
// reach gpurun-runtime: containerd passes only those its runtime's
// pod_annotations list.
func podAnnotationsCheck(name string, rt containerd.Runtime, pol *policy.Policy) Check {
	c := Check{Name: "containerd.pod_annotations", Status: OK, Data: map[string]any{"pod_annotations": rt.PodAnnotations}}
	var missing []string
	for _, a := range pol.AllowedAnnotations {
		if !slices.ContainsFunc(rt.PodAnnotations, func(p string) bool { ok, _ := path.Match(p, a); return ok }) {
			missing = append(missing, a)
		}
	}
	list := strings.Join(rt.PodAnnotations, ", ")
	if list == "" {
		list = "none"
	}
	if len(missing) > 0 {
		c.Status = Warn
		c.Detail = fmt.Sprintf("runtime handler %s passes pod annotations %s; not %s, which the policy reads: pods cannot ask for a /dev/shm size", name, list, strings.Join(missing, ", "))
		c.Fix = fmt.Sprintf("add %q to pod_annotations of runtime %s (gpurun install containerd sets gpurun.io/* and cdi.k8s.io/*), then restart containerd", missing[0], name)
		return c
	}
	c.Detail = fmt.Sprintf("runtime handler %s passes pod annotations %s", name, list)
	return c
}

// loadedCheck compares the config with what the running containerd's CRI
// plugin loaded.
func loadedCheck(ctx context.Context, o HostOptions, name string, isDefault bool) (Check, bool) {
	if o.CRI == nil {
		return Check{}, false
	}
	c := Check{Name: "containerd.loaded", Status: OK}
	sctx, cancel := context.WithTimeout(ctx, criCallTimeout)
	defer cancel()
	resp, err := o.CRI.Status(sctx, &runtimeapi.StatusRequest{Verbose: true})
	switch code := status.Code(err); {
	case code == codes.Unimplemented:
		c.Detail = fmt.Sprintf("containerd at %s serves no CRI (its CRI plugin is disabled): no Kubernetes pods here", o.CRIEndpoint)
		return c, true
	case code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) || code == codes.Unavailable:
		// A containerd that does not answer starts and stops no pod: a
		// runtime that loops (two runtimes calling each other) can hang
		// it, as can a config it chokes on.
		c.Status = Problem
		c.Detail = fmt.Sprintf("containerd at %s does not answer its CRI (%v): the node starts and stops no pod", o.CRIEndpoint, err)
		c.Fix = "look at containerd's log (journalctl -u containerd) and at its runtimes' processes (ps -ef | grep -e gpurun-runtime -e nvidia-container-runtime: a runtime cycle piles them up), then: systemctl restart containerd"
		return c, true
	case err != nil:
		c.Status = Warn
		c.Detail = fmt.Sprintf("cannot ask containerd at %s (%v): whether it loaded the config is unknown", o.CRIEndpoint, err)
		return c, true
	}
	cfg, ok := containerd.ReadRunning(resp.GetInfo())
	if !ok || cfg.Runtimes == nil {
		c.Detail = fmt.Sprintf("containerd at %s does not report its CRI configuration", o.CRIEndpoint)
		return c, true
	}
	_, loaded := cfg.Runtimes[RuntimeName]
	if name != "" {
		_, loaded = cfg.Runtimes[name]
	}
	c.Data = map[string]any{"loaded": loaded, "default_runtime": cfg.DefaultRuntime}
	restart := "restart containerd so it reads its config: systemctl restart containerd  (running containers keep running)"
	switch {
	case name != "" && !loaded:
		c.Status = Problem
		c.Detail = fmt.Sprintf("the config registers runtime handler %s, but containerd at %s has not loaded it (started before the change?)", name, o.CRIEndpoint)
		c.Fix = restart
	case name != "" && isDefault && cfg.DefaultRuntime != name:
		c.Status = Problem
		c.Detail = fmt.Sprintf("the config makes %s the default handler, but containerd at %s runs with default %s", name, o.CRIEndpoint, cfg.DefaultRuntime)
		c.Fix = restart
	case name == "" && loaded:
		c.Status = Warn
		c.Detail = fmt.Sprintf("containerd at %s still has runtime handler %s loaded, but the config no longer has it: it goes at the next restart", o.CRIEndpoint, RuntimeName)
		c.Fix = restart
	default:
		c.Detail = fmt.Sprintf("containerd at %s runs with this config (default handler %s)", o.CRIEndpoint, cfg.DefaultRuntime)
	}
	return c, true
}

// policyPathOf is the policy file doctor read, as a node path.
func policyPathOf(o HostOptions) string {
	if o.Policy.Path != "" {
		return o.Policy.Path
	}
	return policy.DefaultConfigPath
}

// recordedDefault returns gpurun install's record for the containerd
// config at cfgPath when it made gpurun the default runtime; a state file
// that is missing or unreadable is no record (the check it feeds speaks
// only of what it knows).
func recordedDefault(sys *System, o HostOptions, cfgPath string) (install.Recorded, bool) {
	statePath := o.InstallState
	if statePath == "" {
		statePath = install.DefaultStatePath
	}
	data, err := sys.readFile(statePath)
	if err != nil {
		return install.Recorded{}, false
	}
	rec, ok, err := install.ContainerdRecord(data, cfgPath)
	return rec, ok && err == nil && rec.SetAsDefault
}
