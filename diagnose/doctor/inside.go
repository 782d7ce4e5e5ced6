package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// PolicySource says which policy file doctor reads.
type PolicySource struct {
	// Path is the file; Explicit says the user named it (then it must
	// exist).
	Path     string
	Explicit bool
}

// loadPolicy loads the policy and reports on it. A policy that cannot be
// read is a problem (gpurun-runtime and the hook then pass every container
// through unchanged); the rest of the report then uses the defaults.
func loadPolicy(src PolicySource) (*policy.Policy, Check) {
	c := Check{Name: "policy", Status: OK}
	pol, err := policy.Load(src.Path, src.Explicit)
	if err != nil {
		c.Status = Problem
		c.Detail = fmt.Sprintf("%v; gpurun-runtime and the hook pass every container through unchanged while the policy cannot be read (this report uses the defaults)", err)
		c.Fix = "correct the file (every key is optional; see gpurun --help and README's Configuration)"
		return policy.Default(), c
	}
	desc := describePolicy(pol)
	if pol.Source == "" {
		c.Detail = fmt.Sprintf("built-in defaults (no %s): %s", src.Path, desc)
	} else {
		c.Detail = fmt.Sprintf("%s: %s", pol.Source, desc)
	}
	return pol, c
}

func describePolicy(p *policy.Policy) string {
	size := policy.FormatSize(p.Absolute)
	if p.Absolute == 0 {
		size = fmt.Sprintf("%g%% of memory", p.Percent)
	}
	parts := []string{"match " + string(p.Match), "size " + size, "min " + policy.FormatSize(p.Min)}
	if p.Max > 0 {
		parts = append(parts, "max "+policy.FormatSize(p.Max))
	}
	if p.PerGPU > 0 {
		parts = append(parts, "per_gpu "+policy.FormatSize(p.PerGPU))
	}
	parts = append(parts, "mode "+string(p.Mode))
	return strings.Join(parts, ", ")
}

// ContainerOptions configure Inside.
type ContainerOptions struct {
	Policy PolicySource
	// Where is what Detect found (or what the user said), for the report.
	Where Where
	// Probe, when positive, allocates that many bytes in /dev/shm and
	// frees them, to prove they can be had.
	Probe int64
	// Pod reads this pod's annotations in a Kubernetes pod (nil: none can
	// be read), for the webhook check.
	Pod PodLookup
}

// gpuDevices lists the GPU device nodes visible under oci.DeviceDirs, as
// oci.ClassifyDevice judges them.
func gpuDevices(sys *System) []string {
	var devs []string
	for _, dir := range oci.DeviceDirs() {
		entries, err := os.ReadDir(sys.path(dir))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if p := path.Join(dir, e.Name()); oci.ClassifyDevice(p).GPU {
				devs = append(devs, p)
			}
		}
	}
	return devs
}

// Inside checks the container doctor runs in: its /dev/shm (what is
// mounted there, its size and use) against what the policy gives it, its
// GPUs, CPUs, memory limit and NCCL environment, and what gpurun would do.
func Inside(ctx context.Context, sys *System, o ContainerOptions) *Report {
	r := &Report{Mode: ModeContainer}
	r.add(Check{Name: "environment", Status: OK, Detail: whereDetail(o.Where)})
	pol, pc := loadPolicy(o.Policy)
	r.add(pc)

	sub := subject{fix: fixTarget{mode: ModeContainer},
		planPrefix: "started through gpurun (run, runtime, hook), "}
	opts := []oci.Opt{oci.WithEnv(sys.environ()...)}

	ms, err := sys.mounts()
	if err != nil {
		r.add(Check{Name: "shm.mount", Status: Error, Detail: err.Error()})
	}
	hostIPC, _ := sys.hostIPC()
	if err == nil {
		sub.shm = insideShm(sys, shmMount(ms), hostIPC)
		opts = append(opts, shmOpt(sub.shm))
	}

	cg, cgErr := sys.cgroup(ms)
	if cgErr == nil && cg.MemoryLimit > 0 {
		opts = append(opts, oci.WithMemoryLimit(cg.MemoryLimit))
		sub.memoryLimit = cg.MemoryLimit
		sub.limitSource = fmt.Sprintf("cgroup v%d %s", cg.Version, cg.LimitFile)
	}
	if mem, err := sys.MemTotal(); err == nil {
		sub.hostMemory = mem
	}
	sub.cpu = cpuDetail(sys, cg, cgErr)

	devs := gpuDevices(sys)
	opts = append(opts, oci.WithDevices(devs...))
	if len(devs) == 0 {
		sub.gpuNotes = append(sub.gpuNotes, "no GPU device nodes visible")
	}
	sub.hostGPUs, sub.gpuNotes = nvidiaSMI(ctx, sys, sub.gpuNotes)
	if sub.container, err = oci.NewContainer(opts...); err != nil {
		r.add(Check{Name: "plan", Status: Error, Detail: err.Error()})
		return r.finish()
	}

	checks, pl := assess(sub, pol)
	r.Checks = append(r.Checks, checks...)
	if c, ok := webhookCheck(ctx, sys, sub, pl, o.Pod); ok {
		r.add(c)
	}
	if o.Probe > 0 {
		r.add(probeCheck(sys, o.Probe, max(o.Probe, pl.Target)))
	}
	return r.finish()
}

func whereDetail(w Where) string {
	what := "a host"
	if w.Container {
		what = "inside a container"
	}
	if len(w.Evidence) == 0 {
		return what
	}
	return what + " (" + strings.Join(w.Evidence, "; ") + ")"
}

// insideShm says what the mount at /dev/shm is, from inside.
func insideShm(sys *System, m *mountinfo.Info, hostIPC bool) shmState {
	if m == nil {
		return shmState{kind: oci.ShmNone, what: "nothing is mounted at /dev/shm"}
	}
	sh := shmState{fsType: m.FSType}
	switch {
	case m.FSType == "tmpfs" && hostIPC:
		sh.kind = oci.ShmHost
		sh.what = "the host's /dev/shm: this container is in the host's IPC namespace (docker --ipc host, Kubernetes hostIPC: true)"
	case m.FSType == "tmpfs" && m.Source == "shm":
		sh.kind = oci.ShmPrivate
		sh.what = `a tmpfs the engine made for the container (source "shm")`
	case m.FSType == "tmpfs":
		sh.kind = oci.ShmUser
		sh.what = fmt.Sprintf("a tmpfs of the user's (source %q: --tmpfs /dev/shm, --mount type=tmpfs, or a Kubernetes emptyDir with medium Memory)", m.Source)
	default:
		sh.kind = oci.ShmUser
		sh.what = fmt.Sprintf("a %s mount of the user's (source %q)", m.FSType, m.Source)
	}
	sh.fs, sh.err = sys.Statfs(sys.path("/dev/shm"))
	sh.known = sh.err == nil
	return sh
}

// shmOpt is the one form's /dev/shm for what was seen there, so that
// oci.Decide classifies it the same way.
func shmOpt(sh shmState) oci.Opt {
	switch sh.kind {
	case oci.ShmPrivate:
		size := policy.EngineDefaultShm
		if sh.known {
			size = sh.fs.Size
		}
		return oci.WithPrivateShm(size)
	case oci.ShmHost:
		return oci.WithHostIPC("")
	case oci.ShmUser:
		m := specs.Mount{Type: sh.fsType, Source: "user", Options: []string{"rbind"}}
		if sh.fsType == "tmpfs" {
			m.Source, m.Options = "tmpfs", nil
			if sh.known {
				m.Options = []string{policy.MountSizeOption(sh.fs.Size, false)}
			}
		}
		return func(c *oci.Container) error {
			if err := oci.WithPrivateShm(policy.EngineDefaultShm)(c); err != nil {
				return err
			}
			return oci.WithUserShm(sh.what, m)(c)
		}
	}
	return oci.WithNoShm()
}

func cpuDetail(sys *System, cg Cgroup, cgErr error) string {
	n := 0
	if sys.NumCPU != nil {
		n = sys.NumCPU()
	}
	s := fmt.Sprintf("%d CPU(s) usable by this process", n)
	switch {
	case cgErr != nil:
		s += fmt.Sprintf("; cgroup unknown (%v)", cgErr)
	case cg.CPUQuota > 0:
		s += fmt.Sprintf("; cgroup CPU quota %g CPUs (DataLoader workers beyond it mostly wait)", cg.CPUQuota)
	default:
		s += "; no cgroup CPU quota"
	}
	return s
}

// nvidiaSMI asks nvidia-smi, when there is one, how many GPUs it sees.
func nvidiaSMI(ctx context.Context, sys *System, notes []string) (int, []string) {
	if sys.LookPath == nil || sys.Output == nil {
		return 0, notes
	}
	p, err := sys.LookPath("nvidia-smi")
	if err != nil {
		return 0, notes
	}
	out, err := sys.Output(ctx, p, "-L")
	if err != nil {
		var ee interface{ ExitCode() int }
		if errors.As(err, &ee) {
			return 0, append(notes, fmt.Sprintf("nvidia-smi -L failed (exit %d): the driver is not reachable from here", ee.ExitCode()))
		}
		return 0, append(notes, fmt.Sprintf("nvidia-smi -L failed: %v", err))
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "GPU ") {
			n++
		}
	}
	return n, append(notes, fmt.Sprintf("nvidia-smi lists %d GPU(s)", n))
}

// probeCheck allocates size bytes in /dev/shm and frees them.
func probeCheck(sys *System, size, grow int64) Check {
	c := Check{Name: "probe"}
	probe := sys.Probe
	if probe == nil {
		probe = shmprobe.Check
	}
	res := probe(sys.path("/dev/shm"), size)
	c.Data = map[string]any{"requested_bytes": res.Requested, "allocated_bytes": res.Allocated, "failure": string(res.Failure)}
	switch {
	case res.OK():
		c.Status = OK
		c.Detail = fmt.Sprintf("allocated %s in /dev/shm, then freed it", policy.FormatSize(res.Allocated))
	case res.Failure == shmprobe.FailureSetup:
		c.Status = Error
		c.Detail = "could not probe /dev/shm: " + res.Err
	default:
		c.Status = Problem
		c.Detail = fmt.Sprintf("only %s of %s could be allocated in /dev/shm (%s: %s)", policy.FormatSize(res.Allocated), policy.FormatSize(res.Requested), res.Failure, res.Err)
		c.Fix = sizeFix(fixTarget{mode: ModeContainer}, grow)
	}
	return c
}
