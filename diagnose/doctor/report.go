// Package doctor is `gpurun doctor`: it looks at where it runs — inside a
// container, on a host, or at one running container from the host — and
// says whether /dev/shm is what the policy would give, and if not, why and
// how to fix it. Every check ends in one of four statuses; the report's exit
// code is 0 when healthy, 1 when a problem was found, 2 when something could
// not be checked. Sizes come from the shared planner (policy.Target,
// oci.Decide), never from a sizing rule of its own.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Schema names the JSON layout of a Report; it changes only when a field
// changes meaning or goes away.
const Schema = "gpurun.doctor/v1"

// Status is a check's outcome.
type Status string

// The values of Status, from best to worst.
const (
	// OK: nothing to do.
	OK Status = "ok"
	// Warn: works, but not as the policy would have it, or worth knowing.
	Warn Status = "warn"
	// Problem: this will fail (or is failing); the check says how to fix it.
	Problem Status = "problem"
	// Error: the check could not be made.
	Error Status = "error"
)

// Mode says what a report looked at.
type Mode string

// The values of Mode.
const (
	// ModeContainer: doctor ran inside a container and looked at itself.
	ModeContainer Mode = "container"
	// ModeHost: doctor ran on a host and looked at its engines' setup.
	ModeHost Mode = "host"
	// ModeDocker: one Docker container, seen from the host.
	ModeDocker Mode = "docker-container"
	// ModeCRI: one CRI (Kubernetes) container, seen from the node.
	ModeCRI Mode = "cri-container"
)

// Check is one finding.
type Check struct {
	// Name is stable (for tools): "shm.size", "docker.runtime", ...
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail says what was found, in one or two sentences.
	Detail string `json:"detail"`
	// Fix says what to do, one line per way; "" when nothing is to be done.
	Fix string `json:"fix"`
	// Data holds the numbers behind the detail, where a tool may want them
	// (sizes in bytes, counts); keys are documented per check.
	Data map[string]any `json:"data,omitempty"`
	// Subject is what the check looked at where a report covers several
	// ("pod train-0": the pods of a Job); "" for the report's Target.
	Subject string `json:"subject,omitempty"`
}

// Report is the outcome of one doctor run.
type Report struct {
	Schema string `json:"schema"`
	Mode   Mode   `json:"mode"`
	// Target is the container looked at (modes docker-container and
	// cri-container).
	Target string `json:"target,omitempty"`
	// Status is the worst status of the checks.
	Status Status `json:"status"`
	// ExitCode is what gpurun doctor exits with: 0 healthy, 1 a problem
	// found, 2 something could not be checked (and no problem found).
	ExitCode int     `json:"exit_code"`
	Checks   []Check `json:"checks"`
}

// add appends a check.
func (r *Report) add(c Check) { r.Checks = append(r.Checks, c) }

// finish fills the summary fields from the checks.
func (r *Report) finish() *Report {
	r.Schema = Schema
	if r.Checks == nil {
		r.Checks = []Check{}
	}
	var problems, errs, warns int
	for _, c := range r.Checks {
		switch c.Status {
		case Problem:
			problems++
		case Error:
			errs++
		case Warn:
			warns++
		}
	}
	switch {
	case problems > 0:
		r.Status, r.ExitCode = Problem, 1
	case errs > 0:
		r.Status, r.ExitCode = Error, 2
	case warns > 0:
		r.Status, r.ExitCode = Warn, 0
	default:
		r.Status, r.ExitCode = OK, 0
	}
	return r
}

// Count returns how many checks have status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// Find returns the first check named name.
func (r *Report) Find(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// ANSI colours for the statuses.
const (
	colorReset = "\x1b[0m"
	colorBold  = "\x1b[1m"
)

func statusColor(s Status) string {
	switch s {
	case OK:
		return "\x1b[32m" // green
	case Warn:
		return "\x1b[33m" // yellow
	case Problem:
		return "\x1b[31m" // red
	default:
		return "\x1b[35m" // magenta
	}
}

// WriteText writes the report for people: a title, one line per check (its
// fix indented below it), and a summary line. color adds ANSI colours.
func (r *Report) WriteText(w io.Writer, color bool) error {
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return code + s + colorReset
	}
	var b strings.Builder
	title := "gpurun doctor: " + describeMode(r.Mode)
	if r.Target != "" {
		title += " " + r.Target
	}
	b.WriteString(paint(colorBold, title) + "\n\n")
	nameWidth := 0
	for _, c := range r.Checks {
		nameWidth = max(nameWidth, len(c.Name))
	}
	indent := strings.Repeat(" ", 9+nameWidth+2)
	subject := ""
	fixOf := map[string]string{}
	for _, c := range r.Checks {
		if c.Subject != subject {
			subject, fixOf = c.Subject, map[string]string{}
			b.WriteString("\n" + paint(colorBold, subject+":") + "\n")
		}
		tag := fmt.Sprintf("%-8s", c.Status)
		fmt.Fprintf(&b, "%s %-*s  %s\n", paint(statusColor(c.Status), tag), nameWidth, c.Name, wrapLines(c.Detail, indent))
		if first, ok := fixOf[c.Fix]; ok && c.Fix != "" && r.Mode.kube() {
			// Several checks of a pod often call for the one fix.
			fmt.Fprintf(&b, "%sfix: as for %s above\n", indent, first)
		} else if c.Fix != "" {
			fixOf[c.Fix] = c.Name
			for i, line := range strings.Split(c.Fix, "\n") {
				lead := "     "
				if i == 0 {
					lead = "fix: "
				}
				fmt.Fprintf(&b, "%s%s%s\n", indent, lead, line)
			}
		}
	}
	b.WriteString("\n")
	summary := fmt.Sprintf("%s: %d problem(s), %d warning(s)", healthWord(r), r.Count(Problem), r.Count(Warn))
	if n := r.Count(Error); n > 0 {
		summary += fmt.Sprintf(", %d check(s) could not be made", n)
	}
	summary += fmt.Sprintf(" (exit %d)", r.ExitCode)
	b.WriteString(paint(statusColor(r.Status), summary) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func wrapLines(s, indent string) string {
	return strings.ReplaceAll(s, "\n", "\n"+indent)
}

func healthWord(r *Report) string {
	switch r.Status {
	case Problem:
		return "problem found"
	case Error:
		return "incomplete"
	default:
		return "healthy"
	}
}

func describeMode(m Mode) string {
	switch m {
	case ModeContainer:
		return "inside a container"
	case ModeHost:
		return "this host"
	case ModeDocker:
		return "Docker container"
	case ModeCRI:
		return "CRI container"
	case ModePod:
		return "Kubernetes pod"
	case ModeOwner:
		return "Kubernetes"
	}
	return string(m)
}
