package doctor

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/diagnose/explain"
	"github.com/gpurun/gpurun/policy/remedy"
)

// The parts of the text explain reads for a container.
const (
	segDescribe = "kubectl describe"
	segPrevious = "log --previous"
	segCurrent  = "log"
)

// logFinding is one of explain's findings in a container's logs.
type logFinding struct {
	container string
	// log is the part its first line in a log is in (segPrevious,
	// segCurrent), line that line.
	log, line string
	f         explain.Finding
}

// podText is what explain reads for one container, in kubectl's forms: a
// describe's Containers block (state, last state, restart count) and the
// Events about it, then its previous instance's log, then its current
// log; segments say which lines are which.
type podText struct {
	b     strings.Builder
	lines int
	segs  []textSeg
}

type textSeg struct {
	name        string
	first, last int
}

func (t *podText) add(name, text string) {
	if text == "" {
		return
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	n := strings.Count(text, "\n")
	t.segs = append(t.segs, textSeg{name: name, first: t.lines + 1, last: t.lines + n})
	t.lines += n
	t.b.WriteString(text)
}

// segment names the part line n is in.
func (t *podText) segment(n int) string {
	for _, s := range t.segs {
		if n >= s.first && n <= s.last {
			return s.name
		}
	}
	return ""
}

// describeContainer writes a container's status as kubectl describe pod
// does, and the Events about it (the kubelet's back-off, gpurun's).
func describeContainer(pod *corev1.Pod, st corev1.ContainerStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Containers:\n  %s:\n", st.Name)
	state := func(label string, s corev1.ContainerState) {
		switch {
		case s.Running != nil:
			fmt.Fprintf(&b, "    %-16s Running\n", label+":")
		case s.Waiting != nil:
			fmt.Fprintf(&b, "    %-16s Waiting\n      Reason:       %s\n", label+":", s.Waiting.Reason)
		case s.Terminated != nil:
			fmt.Fprintf(&b, "    %-16s Terminated\n      Reason:       %s\n      Exit Code:    %d\n", label+":", s.Terminated.Reason, s.Terminated.ExitCode)
		}
	}
	state("State", st.State)
	state("Last State", st.LastTerminationState)
	fmt.Fprintf(&b, "    Restart Count:  %d\n", st.RestartCount)
	return b.String()
}

// describeEvents writes the Events that name a container, as kubectl
// describe pod lists them.
func describeEvents(evs []corev1.Event, container string) string {
	var b strings.Builder
	for _, e := range evs {
		if !strings.Contains(e.Message, "container "+container) {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("Events:\n  Type     Reason   Age   From     Message\n  ----     ------   ----  ----     -------\n")
		}
		from := e.Source.Component
		if from == "" {
			from = e.ReportingController
		}
		fmt.Fprintf(&b, "  %-8s %s  -  %s  %s\n", e.Type, e.Reason, from, e.Message)
	}
	return b.String()
}

// logCheck reads each container's logs (current and previous) with
// explain's engine, beside what kubectl describe would show of it, and
// reports the /dev/shm failures in them.
func (p *podDiag) logCheck() Check {
	c := Check{Name: "log", Status: OK}
	var notes, errs []string
	var others []string
	statuses := slices.Concat(p.f.pod.Status.InitContainerStatuses, p.f.pod.Status.ContainerStatuses)
	names := make([]string, 0, len(p.f.logs))
	for name := range p.f.logs {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		return slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == names[i] }) <
			slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == names[j] })
	})
	for _, name := range names {
		cl := p.f.logs[name]
		i := slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == name })
		fs, oth, err := p.scanContainer(statuses[i], cl)
		if err != nil {
			errs = append(errs, fmt.Sprintf("container %s: %v", name, err))
		}
		notes = append(notes, logNotes(name, cl)...)
		p.findings = append(p.findings, fs...)
		others = append(others, oth...)
	}
	p.fillLogCheck(&c, errs, notes, others)
	return c
}

// logNotes says which logs of a container could not be read, and why.
func logNotes(name string, cl *containerLogs) []string {
	var out []string
	switch {
	case cl.currentErr == nil:
	case logAbsent(cl.currentErr):
		out = append(out, fmt.Sprintf("container %s has no log to read (it has not started, or its node is gone: %v)", name, cl.currentErr))
	default:
		out = append(out, fmt.Sprintf("container %s's log cannot be read: %v", name, cl.currentErr))
	}
	switch {
	case !cl.wantPrevious || cl.previousErr == nil:
	case logAbsent(cl.previousErr):
		out = append(out, fmt.Sprintf("container %s's previous log is gone (the kubelet keeps the last ended instance's only, and not past the pod's node; %v)", name, cl.previousErr))
	default:
		out = append(out, fmt.Sprintf("container %s's previous log cannot be read: %v", name, cl.previousErr))
	}
	return out
}

// logAbsent says a log read failed because there is no such log (the API
// server's 400 or 404), not for want of permission or an answer.
func logAbsent(err error) bool {
	code := apiCode(err)
	return code == http.StatusBadRequest || code == http.StatusNotFound
}

// scanContainer reads one container's text with explain.
func (p *podDiag) scanContainer(st corev1.ContainerStatus, cl *containerLogs) ([]logFinding, []string, error) {
	var t podText
	t.add(segDescribe, describeContainer(p.f.pod, st)+describeEvents(p.f.events, st.Name))
	if cl.previousErr == nil && len(cl.previous) > 0 {
		t.add(segDescribe, fmt.Sprintf("$ kubectl logs --previous %s -c %s\n", p.f.pod.Name, st.Name))
		t.add(segPrevious, string(cl.previous))
	}
	if cl.currentErr == nil && len(cl.current) > 0 {
		t.add(segDescribe, fmt.Sprintf("$ kubectl logs %s -c %s\n", p.f.pod.Name, st.Name))
		t.add(segCurrent, string(cl.current))
	}
	rep, err := explain.Scan(strings.NewReader(t.b.String()), explain.Options{Source: st.Name, Policy: p.f.pol, Memory: p.memLimit})
	if err != nil {
		return nil, nil, fmt.Errorf("explain: %w", err)
	}
	var out []logFinding
	for _, f := range rep.Findings {
		if lf, ok := inLog(&t, st.Name, f); ok {
			out = append(out, lf)
		}
	}
	var others []string
	for _, f := range rep.Others {
		if lf, ok := inLog(&t, st.Name, f); ok {
			others = append(others, fmt.Sprintf("container %s (%s): %s — not /dev/shm", st.Name, lf.log, f.Title))
		}
	}
	return out, others, nil
}

// inLog keeps a finding that rests on a line of a log (not only on the
// describe block, which the restarts check reads).
func inLog(t *podText, container string, f explain.Finding) (logFinding, bool) {
	for _, l := range f.Lines {
		if seg := t.segment(l.N); seg == segPrevious || seg == segCurrent {
			return logFinding{container: container, log: seg, line: l.Text, f: f}, true
		}
	}
	return logFinding{}, false
}

// fillLogCheck sets the log check from the findings and read errors.
func (p *podDiag) fillLogCheck(c *Check, errs, notes, others []string) {
	var parts []string
	var rows []map[string]any
	for _, lf := range p.findings {
		line := lf.line
		parts = append(parts, fmt.Sprintf("container %s (%s): %s [%s, %s]: %q", lf.container, lf.log, lf.f.Title, lf.f.Signature, lf.f.Confidence, line))
		rows = append(rows, map[string]any{"container": lf.container, "log": lf.log, "signature": lf.f.Signature,
			"confidence": string(lf.f.Confidence), "kind": string(lf.f.Kind), "line": line})
		if lf.f.Confidence == explain.Possible {
			c.Status = worse(c.Status, Warn)
		} else {
			c.Status = Problem
		}
	}
	c.Data = map[string]any{"findings": rows}
	if len(rows) == 0 {
		c.Data = nil
	}
	switch {
	case len(parts) > 0:
		c.Detail = strings.Join(parts, "; ")
	case len(p.f.logs) == 0:
		c.Detail = "no container log to read (none has run yet)"
	case noneRead(p.f.logs):
		c.Detail = "no container's log could be read"
	default:
		c.Detail = "no /dev/shm failure in the containers' logs"
	}
	for _, o := range append(others, notes...) {
		c.Detail += "; " + o
	}
	if len(errs) > 0 || hasLogError(p.f.logs) {
		c.Status = worse(c.Status, Error)
		c.Detail += "; " + strings.Join(errs, "; ")
	}
	c.Fix = remedy.Text(dedupe(p.findingFix()))
}

// noneRead says no log could be read.
func noneRead(logs map[string]*containerLogs) bool {
	for _, cl := range logs {
		if cl.currentErr == nil || (cl.wantPrevious && cl.previousErr == nil) {
			return false
		}
	}
	return true
}

// hasLogError says a log could not be read for want of permission or of
// an answer: a check that was not made.
func hasLogError(logs map[string]*containerLogs) bool {
	for _, cl := range logs {
		for _, err := range []error{cl.currentErr, cl.previousErr} {
			if err != nil && !logAbsent(err) {
				return true
			}
		}
	}
	return false
}

// findingFix is the fix the log's findings call for, by their kind.
func (p *podDiag) findingFix() []remedy.Step {
	var steps []remedy.Step
	for _, k := range []explain.Kind{explain.KindLeftovers, explain.KindSize, explain.KindMemory, explain.KindPermission} {
		if !p.hasFinding("", k) {
			continue
		}
		switch k {
		case explain.KindLeftovers:
			steps = append(steps, remedy.Leftovers(p.target)...)
		case explain.KindSize:
			steps = append(steps, p.sizeFix()...)
		case explain.KindMemory:
			steps = append(steps, remedy.Step{Where: "memory", How: "raise the container's memory limit by what /dev/shm holds, or have the job delete what it no longer needs there (the restarts check says how much it held)"})
		case explain.KindPermission:
			steps = append(steps, remedy.Step{Where: "permission", How: "/dev/shm must be writable by the job: mode 1777, as a Memory emptyDir is"})
		}
	}
	return steps
}

// hasFinding says a container's logs (any container's, for "") show a
// finding of a kind, surer than possible.
func (p *podDiag) hasFinding(container string, k explain.Kind) bool {
	return slices.ContainsFunc(p.findings, func(lf logFinding) bool {
		return (container == "" || lf.container == container) && lf.f.Kind == k && lf.f.Confidence != explain.Possible
	})
}
