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
	"github.com/gpurun/gpurun/policy/remedy"
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
	run, runEnv, err := readArgs(req)
	if err != nil {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	if run.Help {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: "--help: docker prints its usage"}
		return res
	}
	pl, notes, err := plan(ctx, req, pol, run, runEnv)
	res.Notes = append(res.Notes, notes...)
	if err != nil {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
		return res
	}
	res.Plan = pl
	res.Added, res.Skipped = carryOut(run, pl)
	if res.Added != "" {
		res.Args = insertFlag(run, res.Added)
	}
	for _, w := range pl.Warnings {
		res.Warnings = append(res.Warnings, w.Message)
	}
	return res
}

// readArgs reads docker run's arguments and the environment they give the
// container (-e, --env-file). An error means docker will refuse the run
// with its own message.
func readArgs(req Request) (*runargs.Run, []string, error) {
	run, err := runargs.Parse(req.Args)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments not understood; docker will say why: %w", err)
	}
	if run.Help {
		return run, nil, nil
	}
	env, err := run.Environment(req.LookupEnv, req.ReadFile)
	if err != nil {
		return nil, nil, err
	}
	return run, env, nil
}

// plan decides for run, asking the daemon only what the answer depends on:
// the image's env (it can make a container a GPU one); the host's memory
// and the daemon's default-shm-size only for a container gpurun would
// size. When the arguments alone already make it one, the facts are asked
// at the same time as the image. The notes say what it could not learn.
func plan(ctx context.Context, req Request, pol *policy.Policy, run *runargs.Run, runEnv []string) (oci.Plan, []string, error) {
	var local oci.Facts
	if req.LocalFacts != nil {
		local, _ = req.LocalFacts()
	}
	hostGPUs := 0
	if req.DaemonLocal {
		hostGPUs = local.HostGPUs
	}
	decide := func(env []string, defaultShm int64, facts oci.Facts) (oci.Plan, error) {
		c, err := translate.FromRun(run, env, defaultShm)
		if err != nil {
			return oci.Plan{}, err
		}
		return oci.Decide(oci.Input{Container: c, Policy: pol, Facts: facts}), nil
	}

	daemonUp := req.Daemon != nil
	var notes []string
	var hostFacts func() (int64, int64, []string)
	if pl, err := decide(runEnv, policy.EngineDefaultShm, oci.Facts{HostGPUs: hostGPUs}); err == nil && pl.Applies {
		hostFacts = startFacts(ctx, req, run, daemonUp, local.HostMemory)
	}
	var imageEnv []string
	switch {
	case !daemonUp:
		notes = append(notes, "no docker daemon to ask; deciding from the arguments")
	default:
		env, err := req.Daemon.ImageEnv(ctx, run.Image)
		if err != nil {
			notes = append(notes, fmt.Sprintf("image %s: environment unknown (%v); deciding from the arguments", run.Image, err))
			break
		}
		imageEnv = env
	}
	env := runargs.MergeEnv(imageEnv, runEnv)

	pl, err := decide(env, policy.EngineDefaultShm, oci.Facts{HostGPUs: hostGPUs})
	if hostFacts != nil && (err != nil || !pl.Applies) {
		hostFacts() // a probe container started for nothing is still removed
	}
	if err != nil {
		return oci.Plan{}, append(notes, fmt.Sprintf("not changing the command: %v", err)), err
	}
	if !pl.Applies {
		return pl, notes, nil
	}
	if hostFacts == nil {
		hostFacts = startFacts(ctx, req, run, daemonUp, local.HostMemory)
	}
	mem, defaultShm, factNotes := hostFacts()
	notes = append(notes, factNotes...)
	pl, err = decide(env, defaultShm, oci.Facts{HostMemory: mem, HostGPUs: hostGPUs})
	return pl, notes, err
}

// carryOut turns a plan into the docker run flag that carries it out, or
// says why docker run cannot and what does instead: docker run can size a
// container's own /dev/shm (--shm-size) or give it the host's
// (--ipc=host), not grow another container's shared tmpfs nor add a
// /dev/shm that --ipc none leaves out.
func carryOut(run *runargs.Run, pl oci.Plan) (added, skipped string) {
	switch pl.Action {
	case oci.ActionSetSize:
		return "--shm-size=" + strconv.FormatInt(pl.Size, 10), ""
	case oci.ActionIPCHost:
		return "--ipc=host", ""
	case oci.ActionRemount:
		// Only a container that joins another's IPC namespace has a shared
		// tmpfs before it exists (a shareable one is sized by --shm-size).
		donor := strings.TrimPrefix(run.IPC, "container:")
		var ways []string
		for _, st := range remedy.For(remedy.Target{Where: remedy.Docker, Donor: donor}, pl.Size) {
			ways = append(ways, st.String())
		}
		return "", fmt.Sprintf("docker ignores --shm-size for --ipc %s: %s", run.IPC, strings.Join(ways, "; or "))
	case oci.ActionInject:
		steps := remedy.For(remedy.Target{Where: remedy.Docker, NoShm: true}, pl.Size)
		return "", fmt.Sprintf("docker mounts nothing at /dev/shm with --ipc %s, and ignores --shm-size: %s", run.IPC, steps[0].How)
	}
	return "", ""
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
