// Package launcher is `gpurun run`: it reads a `docker run` command line,
// builds the OCI spec Docker would hand to runc for it (as far as /dev/shm,
// GPUs and memory go), asks the shared planner what /dev/shm that container
// should get, and turns the plan into docker's own flags (--shm-size, or
// --ipc=host). The user's docker CLI then runs with everything else as given.
package launcher

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/dockerargs"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Daemon is what only the Docker daemon knows. Every method may fail; the
// launcher then decides from the arguments alone and says so.
type Daemon interface {
	// Facts returns the daemon host's memory.
	Facts(ctx context.Context) (Facts, error)
	// ImageEnv returns the local image's environment (CUDA images set
	// NVIDIA_VISIBLE_DEVICES there).
	ImageEnv(ctx context.Context, image string) ([]string, error)
	// DefaultShmSize returns the /dev/shm size the daemon gives a container
	// of image that asks for none (its default-shm-size).
	DefaultShmSize(ctx context.Context, image string) (int64, error)
}

// Facts are the daemon host's.
type Facts struct {
	MemTotal int64
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
	// LocalMemory is this host's memory, used when the daemon cannot say.
	LocalMemory func() (int64, error)
}

// Result is what to run and why.
type Result struct {
	// Args are the docker run arguments to use: the user's, with gpurun's
	// flag added, or unchanged.
	Args []string
	// Added is the flag gpurun added, "" when none.
	Added string
	Plan  oci.Plan
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
	run, err := dockerargs.Parse(req.Args)
	if err != nil {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: "arguments not understood; docker will say why"}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	if run.Help {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: "--help: docker prints its usage"}
		return res
	}

	// Ask the daemon only what the answer depends on: the image's env
	// first (it can make a container a GPU one); the host's memory and the
	// daemon's default-shm-size only for a container gpurun would size.
	var imageEnv []string
	daemonUp := req.Daemon != nil
	if daemonUp {
		if env, err := req.Daemon.ImageEnv(ctx, run.Image); err == nil {
			imageEnv = env
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("image %s: environment unknown (%v); deciding from the arguments", run.Image, err))
		}
	} else {
		res.Notes = append(res.Notes, "no docker daemon to ask; deciding from the arguments")
	}
	runEnv, err := run.Environment(req.LookupEnv, req.ReadFile)
	if err != nil {
		// docker will refuse the run with its own message.
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	env := dockerargs.MergeEnv(imageEnv, runEnv)

	decide := func(defaultShm, mem int64) (oci.Plan, error) {
		spec, why, err := Spec(run, env, defaultShm)
		if err != nil {
			return oci.Plan{}, err
		}
		pl := oci.Decide(oci.Input{Spec: spec, Policy: pol, HostMemory: mem})
		if why != "" {
			pl = oci.Plan{Action: oci.ActionNone, GPU: pl.GPU, GPUs: pl.GPUs, Reason: why, Evidence: pl.Evidence}
		}
		return pl, nil
	}
	pl, err := decide(policy.EngineDefaultShm, 0)
	if err != nil {
		res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
		res.Notes = append(res.Notes, fmt.Sprintf("not changing the command: %v", err))
		return res
	}
	if pl.Action != oci.ActionNone || pl.GPU {
		mem, defaultShm, notes := facts(ctx, req, run, daemonUp)
		res.Notes = append(res.Notes, notes...)
		if pl, err = decide(defaultShm, mem); err != nil {
			res.Plan = oci.Plan{Action: oci.ActionNone, Reason: err.Error()}
			return res
		}
	}
	res.Plan = pl

	switch pl.Action {
	case oci.ActionSetSize, oci.ActionInject:
		res.Added = "--shm-size=" + strconv.FormatInt(pl.Size, 10)
	case oci.ActionIPCHost:
		res.Added = "--ipc=host"
	}
	if res.Added != "" {
		res.Args = insertFlag(run, res.Added)
	}
	res.Warnings = warnings(run, env, pol, pl)
	return res
}

// facts asks the daemon, concurrently, for its host's memory and — unless
// the user set --shm-size — its default-shm-size, which gpurun must never
// undercut. What it cannot learn falls back to this host's memory and
// Docker's 64 MiB, with a note.
func facts(ctx context.Context, req Request, run *dockerargs.Run, daemonUp bool) (mem, defaultShm int64, notes []string) {
	defaultShm = policy.EngineDefaultShm
	if daemonUp {
		var wg sync.WaitGroup
		var factsErr, shmErr error
		var f Facts
		var shm int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, factsErr = req.Daemon.Facts(ctx)
		}()
		if !run.ShmSizeSet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				shm, shmErr = req.Daemon.DefaultShmSize(ctx, run.Image)
			}()
		}
		wg.Wait()
		if factsErr == nil {
			mem = f.MemTotal
		} else {
			notes = append(notes, fmt.Sprintf("docker daemon unreachable (%v); deciding from the arguments", factsErr))
		}
		switch {
		case shmErr != nil:
			notes = append(notes, fmt.Sprintf("daemon default-shm-size unknown (%v); assuming docker's 64MiB", shmErr))
		case shm > 0:
			defaultShm = shm
		}
	}
	if mem == 0 && req.LocalMemory != nil {
		if m, err := req.LocalMemory(); err == nil {
			mem = m
			notes = append(notes, "using this host's memory for the daemon host's")
		}
	}
	return mem, defaultShm, notes
}

// insertFlag adds flag right after "run" — or, when the user gave the same
// flag (enforce_min raising an explicit --shm-size), just before the image,
// since docker keeps the last value.
func insertFlag(run *dockerargs.Run, flag string) []string {
	at := 0
	if (strings.HasPrefix(flag, "--shm-size") && run.ShmSizeSet) || (strings.HasPrefix(flag, "--ipc") && run.IPCSet) {
		at = run.ImageIndex
	}
	out := make([]string, 0, len(run.Args)+1)
	out = append(out, run.Args[:at]...)
	out = append(out, flag)
	return append(out, run.Args[at:]...)
}

// Spec builds the parts of the OCI spec dockerd would write for this run
// that the planner reads: env, GPU devices and hooks, memory limit,
// annotations, the IPC namespace and the /dev/shm mount. defaultShm is the
// daemon's default /dev/shm size. A non-empty reason means the run's
// /dev/shm is not gpurun's to size from the docker command line.
func Spec(run *dockerargs.Run, env []string, defaultShm int64) (*specs.Spec, string, error) {
	s := &specs.Spec{
		Process:     &specs.Process{Env: env},
		Linux:       &specs.Linux{},
		Annotations: map[string]string{},
	}
	if run.MemorySet {
		n, err := policy.ParseSize(run.Memory)
		if err != nil {
			return nil, "", fmt.Errorf("--memory: %w", err)
		}
		if n > 0 {
			s.Linux.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &n}}
		}
	}
	for _, a := range run.Annotations {
		k, v, _ := strings.Cut(a, "=")
		s.Annotations[k] = v
	}
	// GPUs: --gpus and an NVIDIA runtime both end in NVIDIA's prestart hook
	// (moby adds it for --gpus; the nvidia runtime injects it); --gpus also
	// sets NVIDIA_VISIBLE_DEVICES.
	if run.GPUsSet || strings.Contains(run.Runtime, "nvidia") {
		//lint:ignore SA1019 this is where moby and the nvidia runtime put the hook.
		s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}}}}
	}
	if run.GPUsSet {
		if devices, err := gpusValue(run.GPUs); err == nil && devices != "" {
			s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES="+devices)
		}
	}
	for _, d := range run.GPUDevices() {
		if dst := dockerargs.DeviceTarget(d); strings.HasPrefix(dst, "/") {
			s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: path.Clean(dst), Type: "c"})
		} else {
			s.Annotations[oci.CDIAnnotationPrefix+"docker-cli"] = joinNonEmpty(s.Annotations[oci.CDIAnnotationPrefix+"docker-cli"], d)
		}
	}

	ipc := run.IPC
	s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.IPCNamespace}}
	if how, ok := run.MountsDevShm(); ok {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: oci.ShmPath, Type: "bind", Source: "user:" + how, Options: []string{"rbind"}})
		return s, "", nil
	}
	switch {
	case ipc == "host":
		s.Linux.Namespaces = nil
		s.Mounts = append(s.Mounts, specs.Mount{Destination: oci.ShmPath, Type: "bind", Source: oci.ShmPath, Options: []string{"rbind"}})
		return s, "", nil
	case strings.HasPrefix(ipc, "container:"):
		return s, fmt.Sprintf("--ipc %s shares that container's IPC namespace and /dev/shm (docker ignores --shm-size); grow it with `gpurun resize %s SIZE`", ipc, strings.TrimPrefix(ipc, "container:")), nil
	case ipc == "none":
		return s, "--ipc none: the user asked for no /dev/shm", nil
	}
	size := defaultShm
	if run.ShmSizeSet {
		n, err := policy.ParseSize(run.ShmSize)
		if err != nil {
			return nil, "", fmt.Errorf("--shm-size: %w", err)
		}
		if n > 0 {
			size = n
		}
	}
	m := oci.ShmMount(size)
	s.Mounts = append(s.Mounts, m)
	return s, "", nil
}

// gpusValue returns what --gpus puts in NVIDIA_VISIBLE_DEVICES: "all", a
// device list, or "" for a count (which devices is the daemon's choice).
func gpusValue(v string) (string, error) {
	if strings.Trim(v, `"'`) == "all" {
		return "all", nil
	}
	if _, err := strconv.Atoi(v); err == nil {
		return "", nil
	}
	// docker reads --gpus as one CSV record, so `"device=0,1",capabilities=x`
	// keeps its quoted commas.
	fields, err := csv.NewReader(strings.NewReader(v)).Read()
	if err != nil {
		return "", fmt.Errorf("--gpus %q: %w", v, err)
	}
	for _, field := range fields {
		k, val, _ := strings.Cut(field, "=")
		switch k {
		case "device":
			return val, nil
		case "count":
			if val == "all" {
				return "all", nil
			}
		}
	}
	return "", errors.New("no devices named")
}

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a + "," + b
}

// warnings are the one-line notices of a user's choice that defeats them.
func warnings(run *dockerargs.Run, env []string, pol *policy.Policy, pl oci.Plan) []string {
	var w []string
	if run.IPC == "host" && run.ShmSizeSet {
		w = append(w, fmt.Sprintf("--shm-size %s has no effect with --ipc=host: docker ignores it and the container uses the host's /dev/shm", run.ShmSize))
	}
	if run.ShmSizeSet {
		if n, err := policy.ParseSize(run.ShmSize); err == nil && n > 0 && n < pol.Min && run.IPC != "host" {
			what := "DataLoader workers and NCCL may fail (Bus error, posix_fallocate failed)"
			if pl.Action == oci.ActionSetSize {
				what = "enforce_min raises it to " + policy.FormatSize(pl.Size)
			}
			w = append(w, fmt.Sprintf("--shm-size %s is below the policy minimum %s; %s", run.ShmSize, policy.FormatSize(pol.Min), what))
		}
	}
	if v, ok := dockerargs.LookupEnvList(env, "NCCL_SHM_DISABLE"); ok && v == "1" {
		final := pl.Size
		if final >= pol.Min || pl.Shm.Kind == oci.ShmHost {
			size := "the host's /dev/shm"
			if final > 0 {
				size = policy.FormatSize(final)
			}
			w = append(w, fmt.Sprintf("NCCL_SHM_DISABLE=1 is set, but /dev/shm will be %s: NCCL's shared-memory transport would work; unset it to avoid the slower socket path", size))
		}
	}
	return w
}
