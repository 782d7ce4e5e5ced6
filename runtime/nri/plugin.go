// Package nri is gpurun's NRI plugin (Node Resource Interface: containerd
// 2.x, 1.7 when enabled, CRI-O). On every CreateContainer it turns what NRI
// says about the container into a runtime-spec Spec, asks the planner that
// the runtime shim and `gpurun plan` use (oci.Decide), and carries the plan
// out where NRI allows it:
//
//   - the container binds the pod's sandbox /dev/shm, a tmpfs the engine
//     mounted on the host: grow that tmpfs on the host (remount.Grow, with
//     its safety rules and the policy's engine_roots), so every container of
//     the pod sees the new size and they keep sharing one tmpfs;
//   - the container has its own tmpfs at /dev/shm: answer with a container
//     adjustment that replaces that mount by one of the planned size,
//     keeping its other options;
//   - other plans (inject a tmpfs, host IPC) are logged and left alone: NRI
//     cannot change a pod's IPC namespace, and a CRI container without a
//     /dev/shm is not one gpurun adds mounts to.
//
// The handler reads only the request, the policy and the host (statfs, one
// remount): no call to an engine's API, so it answers far inside NRI's 2 s
// request budget. It fails open: an error is logged and the container is
// created unchanged, unless the policy says fail_closed.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/remount"
	"github.com/gpurun/gpurun/runtime/sysinfo"
)

// Config sets up a Plugin.
type Config struct {
	// Policy is the policy from gpurun's config file (the defaults if nil).
	// A runtime that passes the plugin a configuration (containerd's
	// plugin_config_path drop-in for a pre-installed plugin) replaces it.
	Policy *policy.Policy
	// Logger receives one record per planned container (nil: discard).
	Logger *slog.Logger
	// HostMemory is the host's memory in bytes; 0 reads /proc/meminfo.
	HostMemory int64
	// Grow grows an engine-made host tmpfs (nil: remount.Grow).
	Grow func(path string, size int64, scope remount.Scope) (remount.Result, error)
	// TmpfsSize returns the current size of a host tmpfs (nil: sysinfo.TmpfsSize).
	TmpfsSize func(path string) (int64, error)
	// OnConfigure, if set, is called with the policy in force each time the
	// runtime has configured the plugin (Log.Settle moves the log there).
	OnConfigure func(*policy.Policy)
}

// Plugin handles NRI's CreateContainer requests. Its methods are safe for
// concurrent use.
type Plugin struct {
	log        *slog.Logger
	hostMemory int64
	grow       func(path string, size int64, scope remount.Scope) (remount.Result, error)
	tmpfsSize  func(path string) (int64, error)
	onConfig   func(*policy.Policy)

	mu      sync.RWMutex
	pol     *policy.Policy
	runtime string // the runtime's name from Configure: "containerd", "cri-o"
}

// New returns a Plugin. It reads the host's memory once, here, so that no
// request pays for it.
func New(cfg Config) *Plugin {
	p := &Plugin{
		log:        cfg.Logger,
		hostMemory: cfg.HostMemory,
		grow:       cfg.Grow,
		tmpfsSize:  cfg.TmpfsSize,
		onConfig:   cfg.OnConfigure,
		pol:        cfg.Policy,
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.pol == nil {
		p.pol = policy.Default()
	}
	if p.grow == nil {
		p.grow = remount.Grow
	}
	if p.tmpfsSize == nil {
		p.tmpfsSize = sysinfo.TmpfsSize
	}
	if p.hostMemory == 0 {
		mem, err := sysinfo.MemTotal()
		if err != nil {
			p.log.Warn("host memory unknown; containers without a memory limit are sized from min", "err", err.Error())
		}
		p.hostMemory = mem
	}
	return p
}

// Policy returns the policy in force.
func (p *Plugin) Policy() *policy.Policy {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pol
}

func (p *Plugin) state() (*policy.Policy, string) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pol, p.runtime
}

// Configure is NRI's first request after registration. It records the
// runtime's name and, when the runtime passes a configuration (containerd
// reads it for a pre-installed plugin from plugin_config_path, as
// <idx>-<name>.conf or <name>.conf), takes it as gpurun's policy file
// (TOML, the same keys as /etc/gpurun/config.toml): it then replaces the
// policy the plugin was started with. A bad configuration fails the
// registration, with the line and key in the error.
func (p *Plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	var pol *policy.Policy
	if config != "" {
		var err error
		pol, err = policy.Parse("NRI plugin configuration from "+runtime, []byte(config))
		if err != nil {
			p.log.Error("bad NRI plugin configuration", "runtime", runtime, "err", err.Error())
			return 0, err
		}
	}
	p.mu.Lock()
	p.runtime = runtime
	if pol != nil {
		p.pol = pol
	}
	inForce := p.pol
	p.mu.Unlock()
	if p.onConfig != nil {
		p.onConfig(inForce)
	}
	p.log.Info("configured by the runtime", "runtime", runtime, "runtime_version", version,
		"policy", policySource(inForce), "policy_from_runtime", pol != nil)
	return 0, nil // 0: the events the plugin implements (CreateContainer)
}

// Shutdown is NRI's notice that the runtime is shutting down.
func (p *Plugin) Shutdown(context.Context) {
	p.log.Info("the runtime is shutting down")
}

// Outcome is what the plugin did for one container.
type Outcome struct {
	// Plan is the planner's decision.
	Plan oci.Plan
	// Adjust is the adjustment returned to the runtime (set-size), or nil.
	Adjust *api.ContainerAdjustment
	// Grown is the remount of the pod's host tmpfs (remount), or nil.
	Grown *remount.Result
	// Skipped says why a plan was not carried out ("" when it was, or
	// when there was nothing to do).
	Skipped string
}

// CreateContainer is NRI's CreateContainer request: plan the container's
// /dev/shm and carry the plan out. On an error the container is created
// unchanged (the error is logged) unless the policy is fail_closed, which
// returns the error and so fails the container's creation.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	pol, runtime := p.state()
	out, err := p.handle(pol, runtime, pod, ctr)
	if err != nil {
		p.log.Error("could not size /dev/shm", append(containerAttrs(pod, ctr), "err", err.Error(), "fail_closed", pol.FailClosed)...)
		if pol.FailClosed {
			return nil, nil, fmt.Errorf("gpurun: /dev/shm of container %s in pod %s: %w (fail_closed is set in %s)",
				ctr.GetName(), podName(pod), err, policySource(pol))
		}
		return nil, nil, nil
	}
	return out.Adjust, nil, nil
}

// Handle plans one container with the policy in force and carries the plan
// out, like CreateContainer, but returns what it did and any error
// whatever fail_closed says.
func (p *Plugin) Handle(pod *api.PodSandbox, ctr *api.Container) (Outcome, error) {
	pol, runtime := p.state()
	return p.handle(pol, runtime, pod, ctr)
}

// handle turns a panic into an error (its stack goes to the log only), so
// that CreateContainer can fail open.
func (p *Plugin) handle(pol *policy.Policy, runtime string, pod *api.PodSandbox, ctr *api.Container) (out Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("panic while sizing /dev/shm", append(containerAttrs(pod, ctr), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))...)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if ctr == nil {
		return out, errors.New("the request has no container")
	}
	spec := ToSpec(runtime, pod, ctr)
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(spec), Policy: pol, Facts: oci.Facts{HostMemory: p.hostMemory, TmpfsSize: p.tmpfsSize}})
	out.Plan = pl
	attrs := append(containerAttrs(pod, ctr), "action", string(pl.Action), "size_bytes", pl.Size,
		"current_bytes", pl.Current, "gpu", pl.GPU, "reason", pl.Reason)
	switch pl.Action {
	case oci.ActionNone:
	case oci.ActionRemount:
		res, err := p.grow(pl.Shm.Source, pl.Size, remount.Scope{Roots: pol.EngineRoots})
		if err != nil {
			return out, fmt.Errorf("grow %s: %w", pl.Shm.Source, err)
		}
		out.Grown = &res
		attrs = append(attrs, "before_bytes", res.Before, "after_bytes", res.After, "changed", res.Changed)
	case oci.ActionSetSize:
		adj, err := Adjustment(spec, pl)
		if err != nil {
			return out, err
		}
		out.Adjust = adj
	default:
		out.Skipped = fmt.Sprintf("the NRI plugin does not carry out %q plans: NRI cannot change a pod's IPC namespace, and it adds no /dev/shm to a CRI container", pl.Action)
		attrs = append(attrs, "skipped", out.Skipped)
	}
	if pl.Action == oci.ActionNone && !pl.GPU {
		p.log.Debug("planned /dev/shm", attrs...)
	} else {
		p.log.Info("planned /dev/shm", attrs...)
	}
	return out, nil
}

// Adjustment returns the container adjustment that carries out a set-size
// plan for the spec it was made from: the mount at /dev/shm is removed and
// added again with the planned size, every other option kept (in the size
// option's own unit style). It returns nil for other actions.
func Adjustment(s *specs.Spec, pl oci.Plan) (*api.ContainerAdjustment, error) {
	if pl.Action != oci.ActionSetSize {
		return nil, nil
	}
	i := pl.Shm.Index
	if s == nil || i < 0 || i >= len(s.Mounts) {
		return nil, fmt.Errorf("adjust /dev/shm: no mount at index %d", i)
	}
	if pl.Size <= 0 {
		return nil, fmt.Errorf("adjust /dev/shm: planned size %d is not positive", pl.Size)
	}
	m := s.Mounts[i]
	opts := slices.Clone(m.Options)
	opt := policy.MountSizeOption(pl.Size, pl.Shm.SizeInKiB)
	if _, j := oci.SizeOption(opts); j >= 0 {
		opts[j] = opt
	} else {
		opts = append(opts, opt)
	}
	adj := &api.ContainerAdjustment{}
	adj.RemoveMount(m.Destination)
	adj.AddMount(&api.Mount{Destination: m.Destination, Type: m.Type, Source: m.Source, Options: opts})
	return adj, nil
}

func containerAttrs(pod *api.PodSandbox, ctr *api.Container) []any {
	return []any{"pod", podName(pod), "pod_id", pod.GetId(), "container", ctr.GetName(), "container_id", ctr.GetId()}
}

func podName(pod *api.PodSandbox) string {
	if pod.GetNamespace() == "" {
		return pod.GetName()
	}
	return pod.GetNamespace() + "/" + pod.GetName()
}

func policySource(pol *policy.Policy) string {
	if pol.Source == "" {
		return "(defaults)"
	}
	return pol.Source
}
