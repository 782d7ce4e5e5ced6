package doctor

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/diagnose/explain"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/policy/remedy"
)

// What an ended container instance says.
const (
	endSIGBUS    = "sigbus"
	endOOM       = "oom-killed"
	endSIGKILL   = "sigkill"
	endSIGSEGV   = "sigsegv"
	endError     = "error"
	endCompleted = "completed"
)

// Exit codes of a container whose process (or a shell's child) a signal
// killed: 128 + the signal.
const (
	exitSIGBUS  = 128 + 7
	exitSIGKILL = 128 + 9
	exitSIGSEGV = 128 + 11
)

// ended is a container's latest ended instance: the current one where it
// ended (restartPolicy Never, a Job's pod), else the previous one.
type ended struct {
	container string
	restarts  int32
	waiting   string
	t         *corev1.ContainerStateTerminated
}

// endedOf lists the containers' latest ended instances and restarts: every
// container, or the one named.
func endedOf(pod *corev1.Pod, only string) []ended {
	var out []ended
	for _, st := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if only != "" && st.Name != only {
			continue
		}
		e := ended{container: st.Name, restarts: st.RestartCount, t: st.State.Terminated}
		if e.t == nil {
			e.t = st.LastTerminationState.Terminated
		}
		if w := st.State.Waiting; w != nil {
			e.waiting = w.Reason
		}
		out = append(out, e)
	}
	return out
}

// kind says what an ended instance's exit means.
func (e ended) kind() string {
	t := e.t
	switch {
	case t == nil:
		return ""
	case t.Reason == "OOMKilled":
		return endOOM
	case t.ExitCode == exitSIGBUS || t.Signal == 7:
		return endSIGBUS
	case t.ExitCode == exitSIGKILL || t.Signal == 9:
		return endSIGKILL
	case t.ExitCode == exitSIGSEGV || t.Signal == 11:
		return endSIGSEGV
	case t.ExitCode == 0:
		return endCompleted
	}
	return endError
}

// words say how the instance ended, and what that means.
func (e ended) words() string {
	t := e.t
	s := fmt.Sprintf("exit code %d", t.ExitCode)
	if t.Reason != "" {
		s += " (" + t.Reason + ")"
	}
	switch e.kind() {
	case endSIGBUS:
		s += ": 128+7, SIGBUS — what a process gets when it touches a page of a full /dev/shm (DataLoader workers' \"Bus error\"); a shell reports a child killed so"
	case endOOM:
		s += ": the kernel's OOM killer, at the container's memory limit"
	case endSIGKILL:
		s += ": SIGKILL, not the OOM killer (a liveness probe, an eviction, a deletion)"
	case endSIGSEGV:
		s += ": SIGSEGV, a crash that is not /dev/shm's"
	}
	return s
}

// oomRE reads gpurun's ShmOOMKilled Event: "container trainer was
// OOM-killed with 7.59GiB of its 16GiB memory limit in /dev/shm (…)".
var oomRE = regexp.MustCompile(`OOM-killed with (\S+) of (?:its |its pod's |the )(\S+) memory limit`)

// restartsCheck reads each container's restarts and last ending for what
// they mean: SIGBUS at a small /dev/shm, an OOM kill with the /dev/shm
// share the node reported, a crashloop on what earlier instances left.
func (p *podDiag) restartsCheck() Check {
	c := Check{Name: "restarts", Status: OK}
	var parts []string
	var fixes []remedy.Step
	var rows []map[string]any
	var total int32
	for _, e := range endedOf(p.f.pod, p.f.container) {
		total += e.restarts
		row := map[string]any{"container": e.container, "restarts": e.restarts}
		if e.t != nil {
			row["exit_code"], row["reason"], row["meaning"] = e.t.ExitCode, e.t.Reason, e.kind()
		}
		rows = append(rows, row)
		st, words, fix := p.judgeEnd(e)
		if words == "" {
			continue
		}
		parts = append(parts, words)
		c.Status = worse(c.Status, st)
		fixes = append(fixes, fix...)
	}
	c.Data = map[string]any{"restarts": total, "containers": rows}
	if len(parts) == 0 {
		c.Detail = "no container has restarted or ended"
		return c
	}
	c.Detail = strings.Join(parts, "; ")
	c.Fix = remedy.Text(dedupe(fixes))
	return c
}

// judgeEnd reads one container's restarts and ending.
func (p *podDiag) judgeEnd(e ended) (Status, string, []remedy.Step) {
	if e.t == nil && e.restarts == 0 {
		return OK, "", nil
	}
	head := fmt.Sprintf("container %s", e.container)
	if e.restarts > 0 {
		head += fmt.Sprintf(" restarted %d time(s)", e.restarts)
	}
	if e.waiting != "" {
		head += " (" + e.waiting + ")"
	}
	if e.t == nil {
		return OK, head, nil
	}
	head += ", last ended with " + e.words()
	if p.hasFinding(e.container, explain.KindLeftovers) {
		return Problem, head + "; its log shows it dying on what its earlier instances left in the pod's /dev/shm, which outlives them (a restart does not empty it)", remedy.Leftovers(p.target)
	}
	switch e.kind() {
	case endSIGBUS:
		return p.judgeSIGBUS(head)
	case endOOM:
		return p.judgeOOM(head, e.container)
	}
	return OK, head, nil
}

// judgeSIGBUS: a SIGBUS is /dev/shm's when /dev/shm is small.
func (p *podDiag) judgeSIGBUS(head string) (Status, string, []remedy.Step) {
	size := p.shm.size
	if size > 0 && size < p.f.pol.Min || p.hasFinding("", explain.KindSize) {
		return Problem, fmt.Sprintf("%s, at a /dev/shm of %s (the policy gives %s)", head, formatSize(size), formatSize(p.wantSize())), p.sizeFix()
	}
	return Warn, fmt.Sprintf("%s; /dev/shm is %s, not small: look at what fills it (kubectl exec … -- du -sh /dev/shm/*), or a SIGBUS that is not /dev/shm's (a truncated memory-mapped file)", head, sizeWords(size)), nil
}

// judgeOOM: an OOM kill is /dev/shm's when it held a quarter of the limit
// or more, as the node's ShmOOMKilled Event says.
func (p *podDiag) judgeOOM(head, container string) (Status, string, []remedy.Step) {
	ev := p.oomEvent(container)
	if ev == nil {
		words := head + "; how much /dev/shm held then is not known (gpurun's node agent posts a ShmOOMKilled Event that says; none is here)"
		if p.shm.size > 0 {
			words += fmt.Sprintf(": its /dev/shm of %s can hold that much of the memory, and tmpfs pages count against the limit", formatSize(p.shm.size))
		}
		return Warn, words, []remedy.Step{{Where: "look", How: fmt.Sprintf("kubectl -n %s exec %s -c %s -- du -sh /dev/shm  (while it runs)", p.target.Namespace, p.target.Name, container)}}
	}
	words := fmt.Sprintf("%s; the node reported: %s", head, ev.Message)
	m := oomRE.FindStringSubmatch(ev.Message)
	if m == nil {
		return Warn, words, nil
	}
	held, err1 := policy.ParseSize(m[1])
	limit, err2 := policy.ParseSize(m[2])
	if err1 != nil || err2 != nil || limit <= 0 || held < limit/4 {
		return Warn, words + "; /dev/shm held less than a quarter of the limit: what filled it is the processes' own", nil
	}
	words += fmt.Sprintf(" — /dev/shm held %d%% of the limit", held*100/limit)
	return Problem, words, remedy.MemoryLimit(p.target, container, roundUp(limit+held))
}

// oomEvent is gpurun's latest ShmOOMKilled Event about a container.
func (p *podDiag) oomEvent(container string) *corev1.Event {
	var mine []corev1.Event
	for _, e := range p.f.events {
		if e.Reason == events.ReasonOOMKilled && strings.Contains(e.Message, "container "+container+" ") {
			mine = append(mine, e)
		}
	}
	return latestEvent(mine, events.ReasonOOMKilled)
}

// roundUp rounds a memory size up to a whole GiB (256 MiB below one).
func roundUp(n int64) int64 {
	unit := policy.GiB
	if n < policy.GiB {
		unit = 256 * policy.MiB
	}
	return (n + unit - 1) / unit * unit
}

// sizeWords writes a size, or says it is not known.
func sizeWords(n int64) string {
	if n <= 0 {
		return "of a size not known"
	}
	return formatSize(n)
}

// sizeFix is the fix for a /dev/shm too small: shm.door's, where it names
// the missing door, else the pod spec's emptyDir.
func (p *podDiag) sizeFix() []remedy.Step {
	if len(p.doorFix) > 0 {
		return p.doorFix
	}
	return remedy.PodShm(p.target, p.wantSize())
}

// worse returns the worse of two statuses.
func worse(a, b Status) Status {
	rank := map[Status]int{OK: 0, Warn: 1, Error: 2, Problem: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
