package enforce

import (
	"time"

	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// MaxSweptNames is how many swept files a record names.
const MaxSweptNames = 8

// Swept is what the restart sweep did for one container start: the pod's
// /dev/shm it looked at, what it found (shmsweep.Result) and what went
// wrong. Result.Sweep is nil where no sweep ran (a first start still runs
// one: it records what the pod's /dev/shm holds).
type Swept struct {
	// Path is the pod's /dev/shm tmpfs on the node.
	Path string
	shmsweep.Result
	// Err is why the sweep failed (the container starts all the same).
	Err error
}

// sweepTarget returns the sweep's Start for a container, and whether one
// runs: the policy's sweep is "restart", the policy applies to the
// container, and its /dev/shm is its pod's, as the engine named it
// (dirs.PodShmDir).
func (e *Enforcer) sweepTarget(s Subject, req Request, pl oci.Plan) (shmsweep.Start, bool) {
	if e.noSweep || e.pol.Sweep != policy.SweepRestart || !pl.Applies {
		return shmsweep.Start{}, false
	}
	dir, ok := req.Dirs.PodShmDir(pl.Shm, pl.Pod)
	if !ok {
		return shmsweep.Start{}, false
	}
	// The container's name in its pod names its instances' records; a
	// Podman pod's container keeps its id across restarts, and names
	// none.
	name := pl.Pod.Container
	for _, n := range []string{s.Name, s.ID} {
		if name == "" {
			name = n
		}
	}
	st := shmsweep.Start{ShmDir: dir, SandboxID: pl.Pod.SandboxID, Container: name, ContainerID: s.ID}
	if sp := req.Container.Spec; sp != nil && sp.Linux != nil {
		st.CgroupsPath = sp.Linux.CgroupsPath
	}
	if req.Dirs.PodID != "" {
		st.SandboxID = req.Dirs.PodID
	}
	return st, true
}

// sweep removes what the container's earlier instance left in its pod's
// /dev/shm (shmsweep's rules), and, at a new pod's first start, drops the
// records of pods that are gone, at most once a minute
// (shmsweep.GCInterval). It never fails the start.
func (e *Enforcer) sweep(st shmsweep.Start) *Swept {
	res, err := e.sweeper(st)
	if err == nil && res.NewSandbox {
		if _, _, gcErr := shmsweep.GCDue(e.sweepOpts, shmsweep.GCInterval, time.Now()); gcErr != nil {
			e.log.Warn("dropping the sweep records of gone pods", "err", gcErr.Error())
		}
	}
	return &Swept{Path: st.ShmDir, Result: res, Err: err}
}

// sweepAttrs are a record's fields for a sweep that found or did
// something (or failed): none for a first start or a restart with nothing
// left.
func sweepAttrs(sw *Swept) []any {
	if sw == nil || sw.Err == nil && len(sw.Swept) == 0 && len(sw.Kept) == 0 && sw.NoAttribution == "" {
		return nil
	}
	out := []any{"sweep_path", sw.Path}
	if sw.Err != nil {
		return append(out, "sweep_err", sw.Err.Error())
	}
	out = append(out, "swept_bytes", sw.SweptBytes, "swept_files", len(sw.Swept))
	if names := sw.Names(); len(names) > 0 {
		out = append(out, "swept_names", names)
	}
	if len(sw.Kept) > 0 {
		out = append(out, "kept_bytes", sw.KeptBytes, "kept_files", len(sw.Kept), "kept_why", keptWhy(sw.Kept))
	}
	if sw.NoAttribution != "" {
		out = append(out, "sweep_skipped", sw.NoAttribution)
	}
	return out
}

// Names names the files swept, at most MaxSweptNames of them (sorted),
// then "…" when there were more.
func (sw *Swept) Names() []string {
	names := make([]string, 0, min(len(sw.Swept), MaxSweptNames+1))
	for i, f := range sw.Swept {
		if i == MaxSweptNames {
			return append(names, "…")
		}
		names = append(names, f.Name)
	}
	return names
}

// keptWhy counts the kept files by why ("2 held, 1 sibling").
func keptWhy(kept []shmsweep.Kept) map[string]int {
	n := map[string]int{}
	for _, k := range kept {
		n[k.Why]++
	}
	return n
}

// ForgetSandbox drops the sweep's records of a pod sandbox that is
// deleted (the shim's `delete` of the sandbox, NRI's RemovePodSandbox); an
// id that is not a sandbox id's shape (any container's delete reaches the
// shim) is nothing to forget.
func ForgetSandbox(o shmsweep.Options, id string) error {
	if id == "" || !oci.IsSandboxID(id) {
		return nil
	}
	return shmsweep.Forget(o, id)
}
