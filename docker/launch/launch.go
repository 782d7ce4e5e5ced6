// Package launch is `gpurun run`: it reads a `docker run` command line,
// builds the OCI spec Docker would hand to runc for it (as far as /dev/shm,
// GPUs and memory go), asks the shared planner what /dev/shm that container
// should get, and turns the plan into docker's own flags (--shm-size, or
// --ipc=host). The user's docker CLI then runs with everything else as given.
package launch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Daemon is what only the Docker daemon knows. Every method may fail; the
// launcher then decides from the arguments alone and says so.
type Daemon interface {
	// Facts returns the daemon host's memory.
	Facts(ctx context.Context) (dockerapi.Facts, error)
	// ImageEnv returns the local image's environment (CUDA images set
	// NVIDIA_VISIBLE_DEVICES there).
	ImageEnv(ctx context.Context, image string) ([]string, error)
	// DefaultShmSize returns the /dev/shm size the daemon gives a container
	// of image that asks for none (its default-shm-size).
	DefaultShmSize(ctx context.Context, image string) (int64, error)
}

// Request is one `gpurun run`.
type Request struct {
	// Args are docker run's arguments (everything after "run").
	Args   []string
	Policy *policy.Policy
	// Daemon may be nil: then only the arguments count.
	Daemon Daemon
	// LookupEnv is gpurun's (and so the docker CLI's) environment.
	LookupEnv func(string) (string, bool)
	// ReadFile reads --env-file files.
	ReadFile func(string) ([]byte, error)
	// LocalFacts are this host's (sysinfo.Facts): its memory stands in
	// when the daemon cannot say its own, and its memory and GPU count are
	// the daemon host's when DaemonLocal says the daemon runs here. Nil:
	// unknown.
	LocalFacts func() (oci.Facts, error)
	// DaemonLocal is true when the daemon runs on this host (OnThisHost):
	// then gpurun reads the host's memory itself (sysinfo(2)) rather than
	// asking the daemon (docker info is its slowest call).
	DaemonLocal bool
}

// Result is what to run and why.
type Result struct {
	// Args are the docker run arguments to use: the user's, with gpurun's
	// flag added, or unchanged.
	Args []string
	// Added is the flag gpurun added, "" when none.
	Added string
	Plan  oci.Plan
	// Skipped says why the plan's action was not carried out and what to
	// do instead, "" when it was (or there was nothing to do): docker run
	// can size a container's own /dev/shm (--shm-size) or give it the
	// host's (--ipc=host), not grow another container's shared tmpfs nor
	// add a /dev/shm that --ipc none leaves out. The plan and its reason
	// stay the decision's.
	Skipped string
	// Notes say what gpurun could not learn (for -v).
	Notes []string
	// Warnings are one line each, for stderr.
	Warnings []string
}

// Prepare decides what docker run arguments a run should have. It never
// fails: when the arguments cannot be read, they go to docker unchanged and
// docker reports the problem in its own words.
func Prepare(ctx context.Context, req Request) Result {
	res := Result{Args: req.Args}
	pol := req.Policy
	if pol == nil {
		pol = policy.Default()
	}
	run, err := runargs.Parse(req.Args)
	if err != nil {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: "arguments not understood; docker will say why"}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	if run.Help {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: "--help: docker prints its usage"}
		return res
	}

	runEnv, err := run.Environment(req.LookupEnv, req.ReadFile)
	if err != nil {
		// docker will refuse the run with its own message.
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	decide := func(env []string, defaultShm int64, facts oci.Facts) (oci.Plan, error) {
		c, err := Container(run, env, defaultShm)
		if err != nil {
			return oci.Plan{}, err
		}
		return oci.Decide(oci.Input{Container: c, Policy: pol, Facts: facts}), nil
	}
	var local oci.Facts
	if req.LocalFacts != nil {
		local, _ = req.LocalFacts()
	}
	hostGPUs := 0
	if req.DaemonLocal {
		hostGPUs = local.HostGPUs
	}

	// Ask the daemon only what the answer depends on: the image's env (it
	// can make a container a GPU one); the host's memory and the daemon's
	// default-shm-size only for a container gpurun would size. When the
	// arguments alone already make it one, the facts are asked at the same
	// time as the image.
	daemonUp := req.Daemon != nil
	var hostFacts func() (int64, int64, []string)
	if pl, err := decide(runEnv, policy.EngineDefaultShm, oci.Facts{HostGPUs: hostGPUs}); err == nil && pl.Applies {
		hostFacts = startFacts(ctx, req, run, daemonUp, local.HostMemory)
	}
	var imageEnv []string
	if daemonUp {
		if env, err := req.Daemon.ImageEnv(ctx, run.Image); err == nil {
			imageEnv = env
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("image %s: environment unknown (%v); deciding from the arguments", run.Image, err))
		}
	} else {
		res.Notes = append(res.Notes, "no docker daemon to ask; deciding from the arguments")
	}
	env := runargs.MergeEnv(imageEnv, runEnv)

	pl, err := decide(env, policy.EngineDefaultShm, oci.Facts{HostGPUs: hostGPUs})
	if hostFacts != nil && (err != nil || !pl.Applies) {
		hostFacts() // a probe container started for nothing is still removed
	}
	if err != nil {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	if pl.Applies {
		if hostFacts == nil {
			hostFacts = startFacts(ctx, req, run, daemonUp, local.HostMemory)
		}
		mem, defaultShm, notes := hostFacts()
		res.Notes = append(res.Notes, notes...)
		if pl, err = decide(env, defaultShm, oci.Facts{HostMemory: mem, HostGPUs: hostGPUs}); err != nil {
			res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
			return res
		}
	}
	res.Plan = pl

	switch pl.Action {
	case oci.ActionSetSize:
		res.Added = "--shm-size=" + strconv.FormatInt(pl.Size, 10)
	case oci.ActionIPCHost:
		res.Added = "--ipc=host"
	case oci.ActionRemount:
		// Only a container that joins another's IPC namespace has a shared
		// tmpfs before it exists (a shareable one is sized by --shm-size).
		res.Skipped = fmt.Sprintf("docker ignores --shm-size for %s: grow that container's /dev/shm instead, with `gpurun resize %s %s` (now, no restart) or --shm-size=%d when it is created", run.IPC, strings.TrimPrefix(run.IPC, "container:"), policy.FormatDocker(pl.Size), pl.Size)
	case oci.ActionInject:
		res.Skipped = fmt.Sprintf("docker mounts nothing at /dev/shm with --ipc %s, and ignores --shm-size: use --ipc private (or shareable) for a /dev/shm of %s", run.IPC, policy.FormatSize(pl.Size))
	}
	if res.Added != "" {
		res.Args = insertFlag(run, res.Added)
	}
	for _, w := range pl.Warnings {
		res.Warnings = append(res.Warnings, w.Message)
	}
	return res
}

// startFacts starts asking for the daemon host's memory and — unless the
// user set --shm-size — the daemon's default-shm-size, which gpurun must
// never undercut, concurrently; the function it returns waits for the
// answers. A daemon on this host (req.DaemonLocal) is not asked its
// memory: this host's is read instead. What it cannot learn falls back to
// this host's memory and Docker's 64 MiB, with a note.
func startFacts(ctx context.Context, req Request, run *runargs.Run, daemonUp bool, localMem int64) func() (mem, defaultShm int64, notes []string) {
	var wg sync.WaitGroup
	var factsErr, shmErr error
	var f dockerapi.Facts
	var shm int64
	askMem := daemonUp && !(req.DaemonLocal && localMem > 0)
	if askMem {
		wg.Go(func() { f, factsErr = req.Daemon.Facts(ctx) })
	}
	if daemonUp && !run.ShmSizeSet {
		wg.Go(func() { shm, shmErr = req.Daemon.DefaultShmSize(ctx, run.Image) })
	}
	return func() (mem, defaultShm int64, notes []string) {
		wg.Wait()
		defaultShm = policy.EngineDefaultShm
		switch {
		case !askMem:
		case factsErr == nil:
			mem = f.MemTotal
		default:
			notes = append(notes, fmt.Sprintf("docker daemon unreachable (%v); deciding from the arguments", factsErr))
		}
		switch {
		case shmErr != nil:
			notes = append(notes, fmt.Sprintf("daemon default-shm-size unknown (%v); assuming docker's 64MiB", shmErr))
		case shm > 0:
			defaultShm = shm
		}
		if mem == 0 && localMem > 0 {
			mem = localMem
			if !req.DaemonLocal {
				notes = append(notes, "using this host's memory for the daemon host's")
			}
		}
		return mem, defaultShm, notes
	}
}

// insertFlag adds flag right after "run" — or, when the user gave the same
// flag (enforce_min raising an explicit --shm-size), just before the image,
// since docker keeps the last value.
func insertFlag(run *runargs.Run, flag string) []string {
	at := 0
	if (strings.HasPrefix(flag, "--shm-size") && run.ShmSizeSet) || (strings.HasPrefix(flag, "--ipc") && run.IPCSet) {
		at = run.ImageIndex
	}
	out := make([]string, 0, len(run.Args)+1)
	out = append(out, run.Args[:at]...)
	out = append(out, flag)
	return append(out, run.Args[at:]...)
}

// Container translates a docker run into the one form, as dockerd would
// lay the container out (docker/translate): the environment (env, the image's
// and the run's, merged), annotations, --memory, each --gpus request,
// --runtime, every --device (oci.ClassifyDevice judges them), --privileged,
// and /dev/shm — the user's own mount there, else what --ipc and
// --shm-size give (defaultShm is the daemon's default-shm-size; the
// namespace of --ipc container:<x> is joined, its /dev/shm not known from
// the command line).
func Container(run *runargs.Run, env []string, defaultShm int64) (*oci.Container, error) {
	opts := []oci.Opt{oci.WithEnv(env...), translate.Runtime(run.Runtime)}
	if run.MemorySet {
		n, err := policy.ParseSize(run.Memory)
		if err != nil {
			return nil, fmt.Errorf("--memory: %w", err)
		}
		opts = append(opts, oci.WithMemoryLimit(n))
	}
	ann := map[string]string{}
	for _, a := range run.Annotations {
		k, v, _ := strings.Cut(a, "=")
		ann[k] = v
	}
	opts = append(opts, oci.WithAnnotations(ann))
	for _, g := range run.GPURequests {
		dr, err := translate.ParseGPUs(g)
		if err != nil {
			// docker refuses the run with its own message.
			return nil, err
		}
		opts = append(opts, translate.DeviceRequest(dr))
	}
	for _, d := range run.Devices {
		if dst := runargs.DeviceTarget(d); dst != "" {
			opts = append(opts, oci.WithDevices(dst))
		}
	}
	if run.Privileged {
		opts = append(opts, oci.WithPrivileged("--privileged"))
	}

	ipc := run.IPC
	shm := translate.Shm{Size: defaultShm}
	if run.ShmSizeSet {
		n, err := policy.ParseSize(run.ShmSize)
		if err != nil {
			return nil, fmt.Errorf("--shm-size: %w", err)
		}
		if n > 0 {
			shm.Size, shm.Choice = n, "--shm-size "+run.ShmSize
		}
	}
	opts = append(opts, translate.IPC(ipc, shm))
	if how, ok := run.MountsDevShm(); ok {
		flag, value, _ := strings.Cut(strings.TrimPrefix(how, "--"), " ")
		opts = append(opts, oci.WithUserShm(how, translate.UserMount(flag, value)))
	}
	return oci.NewContainer(opts...)
}
