// Package nri is gpurun's NRI plugin (Node Resource Interface: containerd
// 2.x, 1.7 when enabled, CRI-O). On every CreateContainer (and for every
// running container when it registers: Synchronize) it turns what NRI
// says about the container into a runtime-spec Spec (ToSpec) and hands it
// to the enforcer (node/enforce) that gpurun-runtime and the hook use,
// which plans with the shared planner and carries the plan out where NRI
// allows it:
//
//   - the container binds the pod's sandbox /dev/shm, a tmpfs the engine
//     mounted on the host: the enforcer grows that tmpfs on the host, so
//     every container of the pod sees the new size and they keep sharing
//     one tmpfs. The path comes from the container's mounts, which the
//     engine made, and must be exactly the engine's tmpfs for NRI's pod:
//     …/io.containerd.grpc.v1.cri/sandboxes/<pod id>/shm (containerd),
//     …/overlay-containers/<pod id>/userdata/shm (CRI-O);
//   - the container has its own tmpfs at /dev/shm: the plugin answers with a
//     container adjustment that replaces that mount by one of the planned
//     size, keeping its other options;
//   - other plans (inject a tmpfs, host IPC) are logged and left alone: NRI
//     cannot change a pod's IPC namespace, and a CRI container without a
//     /dev/shm is not one gpurun adds mounts to.
//
// The handler reads only the request, the policy and the host (the facts
// once at start, statfs, one remount): no call to an engine's API, so it
// answers far inside NRI's 2 s request budget. It fails open: an error is
// logged and the container is created unchanged, unless the policy says
// fail_closed.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Component names the plugin in fail-closed errors.
const Component = "gpurun-nri"

// Config sets up a Plugin.
type Config struct {
	// Policy is the policy from gpurun's config file (the defaults if nil).
	// A runtime that passes the plugin a configuration (containerd's
	// plugin_config_path drop-in for a pre-installed plugin) replaces it.
	Policy *policy.Policy
	// Logger receives one record per planned container (nil: discard).
	Logger *slog.Logger
	// Facts returns the host's facts (nil: sysinfo.Facts). New reads them
	// once, so that no request pays for it.
	Facts func() (oci.Facts, error)
	// Grow grows an engine-made host tmpfs (nil: remount.Grow).
	Grow func(path string, size int64, scope remount.Scope) (remount.Result, error)
	// OnConfigure, if set, is called with the policy in force each time the
	// runtime has configured the plugin (Log.Settle moves the log there).
	OnConfigure func(*policy.Policy)
	// Observe, if set, gets every container's outcome (enforce.Config's
	// Observe: the metrics' counters and the Kubernetes Events).
	Observe func(enforce.Subject, enforce.Result)
	// Sweep says where the restart sweep keeps its records and finds the
	// node's processes and cgroups (enforce.Config's SweepOptions).
	Sweep shmsweep.Options
}

// Plugin handles NRI's CreateContainer requests. Its methods are safe for
// concurrent use.
type Plugin struct {
	log      *slog.Logger
	facts    func() (oci.Facts, error)
	grow     func(path string, size int64, scope remount.Scope) (remount.Result, error)
	onConfig func(*policy.Policy)
	observe  func(enforce.Subject, enforce.Result)
	sweep    shmsweep.Options

	mu      sync.RWMutex
	enf     *enforce.Enforcer // for the policy in force
	runtime string            // the runtime's name from Configure: "containerd", "cri-o"
}

// New returns a Plugin. It reads the host's facts once, here.
func New(cfg Config) *Plugin {
	p := &Plugin{log: cfg.Logger, grow: cfg.Grow, onConfig: cfg.OnConfigure, observe: cfg.Observe, sweep: cfg.Sweep}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	read := cfg.Facts
	if read == nil {
		read = sysinfo.Facts
	}
	facts, err := read()
	if err != nil {
		p.log.Warn("host facts incomplete; containers without a memory limit are sized from min", "err", err.Error())
	}
	p.facts = func() (oci.Facts, error) { return facts, nil }
	p.enf = p.enforcer(cfg.Policy)
	return p
}

// enforcer returns the enforcer for pol.
func (p *Plugin) enforcer(pol *policy.Policy) *enforce.Enforcer {
	return enforce.New(enforce.Config{Component: Component, Policy: pol, Facts: p.facts, Grow: p.grow, Log: p.log, Observe: p.observe, QuietNone: true, SweepOptions: p.sweep})
}

// revisitor returns the enforcer Synchronize uses for pol: the same, but
// it observes nothing itself (Synchronize reports only what it changed),
// and it sweeps nothing (the containers it sees are running, not starting).
func (p *Plugin) revisitor(pol *policy.Policy) *enforce.Enforcer {
	return enforce.New(enforce.Config{Component: Component, Policy: pol, Facts: p.facts, Grow: p.grow, Log: p.log, QuietNone: true, NoSweep: true})
}

// RemovePodSandbox is NRI's notice that a pod is gone: the restart
// sweep's records of it go too.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if p.Policy().Sweep != policy.SweepRestart {
		return nil
	}
	if err := enforce.ForgetSandbox(p.sweep, pod.GetId()); err != nil {
		p.log.Warn("dropping the sweep records of a removed pod", "pod", pod.GetNamespace()+"/"+pod.GetName(), "err", err.Error())
	}
	return nil
}

// Policy returns the policy in force.
func (p *Plugin) Policy() *policy.Policy {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.enf.Policy()
}

func (p *Plugin) state() (*enforce.Enforcer, string) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.enf, p.runtime
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
		p.enf = p.enforcer(pol)
	}
	inForce := p.enf.Policy()
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

// Synchronize is NRI's list of the runtime's pods and containers, sent at
// each registration: after the plugin starts, and after it reconnects to
// a runtime that restarted. A container created meanwhile was created
// without the plugin, with the runtime's default /dev/shm. For each
// running container the plugin plans again; where the plan grows the pod's
// host tmpfs, it grows it now, live, as the container's creation would
// have (every container of the pod sees the new size at once). A tmpfs is
// never made smaller, so a container sized at its creation is left as it
// is; a container with a /dev/shm of its own cannot be changed while it
// runs and is only logged. Nothing here fails the registration: errors are
// logged, fail_closed or not.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	e := p.revisitor(p.Policy())
	var running, grown, failed int
	for _, ctr := range ctrs {
		if ctr.GetState() != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		running++
		pod := byID[ctr.GetPodSandboxId()]
		if pod == nil {
			pod = &api.PodSandbox{Id: ctr.GetPodSandboxId()}
		}
		out, err, _ := p.run(e, pod, ctr, true)
		switch {
		case err != nil:
			failed++
		case out.Grown != nil && out.Grown.Changed:
			grown++
			p.log.Info("grew the /dev/shm of a container created while the plugin was not connected",
				"container", ctr.GetId(), "name", ctr.GetName(), "pod", podName(pod), "before_bytes", out.Grown.Before, "after_bytes", out.Grown.After)
			if p.observe != nil {
				p.observe(subject(pod, ctr), enforce.Result{Plan: out.Plan, Grown: out.Grown})
			}
		}
	}
	p.log.Info("synchronized with the runtime", "running_containers", running, "grown", grown, "failed", failed)
	return nil, nil
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
// returns an *enforce.FailClosedError and so fails the container's creation.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	out, _, err := p.handle(pod, ctr)
	if err != nil {
		return nil, nil, err
	}
	return out.Adjust, nil, nil
}

// Handle plans one container with the policy in force and carries the plan
// out, like CreateContainer, but returns what it did and any error
// whatever fail_closed says.
func (p *Plugin) Handle(pod *api.PodSandbox, ctr *api.Container) (Outcome, error) {
	out, err, _ := p.handle(pod, ctr)
	return out, err
}

// handle returns the outcome, what went wrong, and the error that fails the
// container's creation (fail_closed).
func (p *Plugin) handle(pod *api.PodSandbox, ctr *api.Container) (out Outcome, failure, failClosed error) {
	e, _ := p.state()
	return p.run(e, pod, ctr, false)
}

// subject names a container in records, metrics and Events.
func subject(pod *api.PodSandbox, ctr *api.Container) enforce.Subject {
	podID := pod.GetId()
	if podID == "" {
		podID = ctr.GetPodSandboxId()
	}
	return enforce.Subject{ID: ctr.GetId(), Name: ctr.GetName(), Pod: podName(pod), PodID: podID}
}

// run plans one container with e and carries the plan out: a container
// being created (running false) may get an adjustment of its own
// /dev/shm; a running one (Synchronize) cannot.
func (p *Plugin) run(e *enforce.Enforcer, pod *api.PodSandbox, ctr *api.Container, running bool) (out Outcome, failure, failClosed error) {
	_, runtime := p.state()
	s := subject(pod, ctr)
	res, err := e.Run(s, nil, func() (enforce.Request, error) {
		if ctr == nil {
			return enforce.Request{}, errors.New("the request has no container")
		}
		spec := ToSpec(runtime, pod, ctr)
		return enforce.Request{
			Container: oci.FromSpec(spec),
			Dirs:      dirs.ForPod(s.PodID, pod.GetPid(), e.Policy().EngineRoots),
			Carry: func(pl oci.Plan) (enforce.Done, error) {
				if pl.Action != oci.ActionSetSize {
					return enforce.Done{Skipped: fmt.Sprintf("the NRI plugin does not carry out %q plans: NRI cannot change a pod's IPC namespace, and it adds no /dev/shm to a CRI container", pl.Action)}, nil
				}
				if running {
					return enforce.Done{Skipped: fmt.Sprintf("the container runs with a /dev/shm of its own, which NRI cannot change: gpurun resize --cri %s %s grows it", ctr.GetId(), policy.FormatSize(pl.Size))}, nil
				}
				adj, err := Adjustment(spec, pl)
				if err != nil {
					return enforce.Done{}, err
				}
				out.Adjust = adj
				return enforce.Done{Before: pl.Current, After: pl.Size, Changed: true}, nil
			},
		}, nil
	})
	out.Plan, out.Grown, out.Skipped = res.Plan, res.Grown, res.Done.Skipped
	if res.Err != nil {
		out.Adjust = nil // the container is created as it is
	}
	return out, res.Err, err
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
	opts := oci.WithSizeOption(m.Options, pl.Size, pl.Shm.SizeInKiB)
	adj := &api.ContainerAdjustment{}
	adj.RemoveMount(m.Destination)
	adj.AddMount(&api.Mount{Destination: m.Destination, Type: m.Type, Source: m.Source, Options: opts})
	return adj, nil
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
