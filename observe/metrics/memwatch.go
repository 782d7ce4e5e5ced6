package metrics

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpurun/gpurun/observe/shmstats"
)

// The kinds of MemoryAlert.
const (
	// AlertNearLimit: the container's working set reached
	// shmstats.NearMemoryLimit of its limit while /dev/shm holds at least
	// shmstats.ShmShareOfLimit of it; once per episode.
	AlertNearLimit = "near-limit"
	// AlertOOMKilled: the kernel OOM-killed a process of the container (its
	// cgroup's oom_kill count grew) or the container itself (the CRI says
	// OOMKilled); once per kill.
	AlertOOMKilled = "oom-killed"
)

// MemoryAlert is what the samples showed of a container's memory that its
// owner should hear of.
type MemoryAlert struct {
	// Kind is AlertNearLimit or AlertOOMKilled.
	Kind string
	// Container is the container as sampled: now (near the limit), or at
	// the last sample before the kill (OOM-killed).
	Container shmstats.Container
	// Age is how long before the kill that sample was taken: to the
	// container's end where the CRI says when (FinishedAt), else to the
	// sample that saw the kill.
	Age time.Duration
	// Processes is how many processes of a container that lives on were
	// killed (its cgroup's oom_kill count grew by that); 0 when the
	// container itself ended OOM-killed.
	Processes int
}

// Exit is how a container ended, as the runtime's CRI tells it.
type Exit struct {
	// Running says the CRI has not seen it end yet (its exit not handled).
	Running bool
	// Reason is the CRI's ("OOMKilled", "Error", "Completed"); ExitCode
	// and FinishedAt are the container's.
	Reason     string
	ExitCode   int32
	FinishedAt time.Time
}

// ErrNoSuchContainer is what Exits answers for a container the runtime
// does not know (removed already).
var ErrNoSuchContainer = errors.New("no such container")

// Exits tells how a container that left the samples ended. The exporter's
// asks containerd's CRI (engine/criclient).
type Exits interface {
	Exit(ctx context.Context, id string) (Exit, error)
}

// The reason containerd's CRI gives a container whose cgroup saw an OOM
// kill.
const reasonOOMKilled = "OOMKilled"

// sigkillExit is the exit status of a process killed by SIGKILL, which the
// OOM killer sends.
const sigkillExit = 128 + 9

// goneTries is how many samples a container that left them is asked about
// while the CRI still says it runs (its exit not handled yet).
const goneTries = 3

// memState is what the watch remembers of a container between samples.
type memState struct {
	pid  int
	last shmstats.Container // the latest sample of it
	at   time.Time          // when that sample was taken
	// oom is its cgroup's oom_kill count at the last sample that read it;
	// -1 unknown.
	oom int64
	// fired says a near-limit episode was reported and not re-armed.
	fired bool
	// oomSeen says a kill in its cgroup was reported from the count.
	oomSeen bool
	// tries counts the samples it has been missing while the CRI said it
	// runs.
	tries int
}

// MemoryWatch follows the containers' memory from sample to sample: it
// reports a container near its limit with /dev/shm a large part of it once
// per episode (re-armed when its working set falls below
// shmstats.MemoryRearm of the limit, or when the container restarts: a
// new id, or a new init process), and each OOM kill, counted in
// gpurun_shm_oom_kills_total. It is safe for concurrent use.
type MemoryWatch struct {
	exits Exits
	log   *slog.Logger
	kills *prometheus.CounterVec

	mu     sync.Mutex
	state  map[string]*memState // by container id
	exitsE string               // the last error of Exits, logged once
}

// NewMemoryWatch returns a MemoryWatch whose counter is registered with
// reg; exits (nil: none) tells how containers that left the samples ended,
// log gets why it cannot.
func NewMemoryWatch(reg prometheus.Registerer, exits Exits, log *slog.Logger) *MemoryWatch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &MemoryWatch{exits: exits, log: log, state: map[string]*memState{}}
	w.kills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "shm", Name: "oom_kills_total",
		Help: "OOM kills of containers' processes gpurun saw, by what was killed (process: a process of a container that lives on; container: the container, as the CRI says) and whether /dev/shm held at least a quarter of the memory limit then (shm_over_quarter).",
	}, []string{"killed", "shm_over_quarter"})
	for _, k := range []string{"process", "container"} {
		for _, q := range []string{"true", "false"} {
			w.kills.WithLabelValues(k, q)
		}
	}
	reg.MustRegister(w.kills)
	return w
}

// Step takes a sample, taken at now, and returns what it shows.
func (w *MemoryWatch) Step(ctx context.Context, cs []shmstats.Container, now time.Time) []MemoryAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []MemoryAlert
	seen := make(map[string]bool, len(cs))
	for i := range cs {
		seen[cs[i].ID] = true
		out = append(out, w.present(cs[i], now)...)
	}
	for id, st := range w.state {
		if seen[id] {
			continue
		}
		if a, ok := w.gone(ctx, id, st, now); ok {
			out = append(out, a)
		}
	}
	return out
}

// present follows a container in the sample.
func (w *MemoryWatch) present(c shmstats.Container, now time.Time) []MemoryAlert {
	oom := int64(-1)
	if c.Memory != nil && c.Memory.Err == "" {
		oom = c.Memory.OOMKills
	}
	st := w.state[c.ID]
	if st == nil || st.pid != c.PID { // new, or restarted under the same id (Docker)
		st = &memState{pid: c.PID, oom: oom}
		w.state[c.ID] = st
	}
	var out []MemoryAlert
	if oom >= 0 && st.oom >= 0 && oom > st.oom {
		a := MemoryAlert{Kind: AlertOOMKilled, Container: st.last, Age: now.Sub(st.at), Processes: int(oom - st.oom)}
		w.count(a)
		out = append(out, a)
		st.oomSeen = true
	}
	switch {
	case c.NearMemoryLimit() && !st.fired:
		st.fired = true
		out = append(out, MemoryAlert{Kind: AlertNearLimit, Container: c})
	case st.fired && c.BelowMemoryRearm():
		st.fired = false
	}
	st.last, st.at, st.tries = c, now, 0
	if oom >= 0 {
		st.oom = oom
	}
	return out
}

// gone asks how a container that left the samples ended, and forgets it
// once that is known (or cannot be).
func (w *MemoryWatch) gone(ctx context.Context, id string, st *memState, now time.Time) (MemoryAlert, bool) {
	c := st.last
	if w.exits == nil || c.Engine != shmstats.EngineContainerd || c.Pod == nil {
		delete(w.state, id) // not a CRI container: nobody to ask
		return MemoryAlert{}, false
	}
	ex, err := w.exits.Exit(ctx, id)
	switch {
	case ctx.Err() != nil:
		return MemoryAlert{}, false // stopping: asked again, if ever, by the next sample
	case errors.Is(err, ErrNoSuchContainer):
		delete(w.state, id)
		return MemoryAlert{}, false
	case err != nil:
		if msg := err.Error(); msg != w.exitsE {
			w.log.Warn("cannot ask the CRI how containers ended: OOM kills that end a container are not seen (those of a process in a container that lives on still are)", "err", msg)
			w.exitsE = msg
		}
		delete(w.state, id)
		return MemoryAlert{}, false
	case ex.Running:
		if st.tries++; st.tries >= goneTries {
			delete(w.state, id)
		}
		return MemoryAlert{}, false
	}
	w.exitsE = ""
	delete(w.state, id)
	// containerd's CRI says OOMKilled for a container whose cgroup saw an
	// OOM kill at any time: a kill already reported from the count, of a
	// container that then ended otherwise than by SIGKILL, is not another.
	if ex.Reason != reasonOOMKilled || st.oomSeen && ex.ExitCode != sigkillExit {
		return MemoryAlert{}, false
	}
	age := now.Sub(st.at)
	if !ex.FinishedAt.IsZero() && ex.FinishedAt.After(st.at) {
		age = ex.FinishedAt.Sub(st.at)
	}
	a := MemoryAlert{Kind: AlertOOMKilled, Container: c, Age: age}
	w.count(a)
	return a, true
}

// count counts an OOM kill.
func (w *MemoryWatch) count(a MemoryAlert) {
	killed, n := "container", 1
	if a.Processes > 0 {
		killed, n = "process", a.Processes
	}
	w.kills.WithLabelValues(killed, strconv.FormatBool(a.Container.ShmOverQuarter())).Add(float64(n))
}
