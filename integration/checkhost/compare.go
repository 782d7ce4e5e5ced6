package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Change is one difference between two snapshots.
type Change struct {
	// Kind is the part of the host: "interface", "file", "mount",
	// "cgroup", "process" or "tmp".
	Kind string
	// Subject is what changed: an interface name, a path, a mount point, a
	// pid.
	Subject string
	// What says how, in words.
	What string
}

// String is the report line: "interface docker0: gone (it had …)".
func (c Change) String() string {
	return c.Kind + " " + c.Subject + ": " + c.What
}

// kindOrder is the order of the report's sections.
func kindOrder(kind string) int {
	return slices.Index([]string{"interface", "file", "mount", "cgroup", "process", "tmp"}, kind)
}

// Compare returns what changed from before to after, in report order.
// Processes are compared only when both snapshots have them, and so on for
// each part: a part neither side has is not a change.
func Compare(before, after *Snapshot) []Change {
	var out []Change
	out = append(out, compareInterfaces(before.Interfaces, after.Interfaces)...)
	out = append(out, compareFiles(before.Files, after.Files)...)
	out = append(out, compareMounts(withoutStale(before.Mounts, before.Stale), after.Mounts)...)
	out = append(out, compareCgroups(before.Cgroups, after.Cgroups)...)
	out = append(out, compareProcesses(withoutStaleProcs(before.Processes, before.Stale), after.Processes)...)
	out = append(out, compareTmp(before.Tmp, after.Tmp)...)
	sort.SliceStable(out, func(i, j int) bool {
		if ki, kj := kindOrder(out[i].Kind), kindOrder(out[j].Kind); ki != kj {
			return ki < kj
		}
		return out[i].Subject < out[j].Subject
	})
	return out
}

// underAny reports whether path is one of dirs or below one.
func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// withoutStale drops the mounts below a stale harness directory: a killed
// run's leftovers, which the next run's harness unmounts.
func withoutStale(ms []Mount, stale []string) []Mount {
	if len(stale) == 0 {
		return ms
	}
	var out []Mount
	for _, m := range ms {
		if !underAny(m.Point, stale) {
			out = append(out, m)
		}
	}
	return out
}

// withoutStaleProcs drops the processes whose command line names a stale
// harness directory (a killed run's shims, which the next run kills).
func withoutStaleProcs(ps []Process, stale []string) []Process {
	if len(stale) == 0 {
		return ps
	}
	var out []Process
	for _, p := range ps {
		named := false
		for _, d := range stale {
			named = named || strings.Contains(p.Cmdline, d+"/") || strings.HasSuffix(p.Cmdline, d)
		}
		if !named {
			out = append(out, p)
		}
	}
	return out
}

// addrList renders addresses for a report.
func addrList(addrs []string) string {
	if len(addrs) == 0 {
		return "no address"
	}
	return strings.Join(addrs, ", ")
}

// docker0Gone is what a missing docker0 means to the machine's users.
const docker0Gone = `; the host's own "docker run" on the default bridge network fails with "could not find bridge docker0" until its dockerd restarts (a dockerd started with --bridge=none in the host's network namespace deletes it)`

func compareInterfaces(before, after map[string]Interface) []Change {
	var out []Change
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			what := "gone (it had " + addrList(b.Addrs) + ")"
			if name == "docker0" {
				what += docker0Gone
			}
			out = append(out, Change{"interface", name, what})
			continue
		}
		if !slices.Equal(a.Addrs, b.Addrs) {
			out = append(out, Change{"interface", name, "addresses " + addrList(b.Addrs) + " -> " + addrList(a.Addrs)})
		}
		if a.Up != b.Up {
			out = append(out, Change{"interface", name, fmt.Sprintf("was %s, now %s", upDown(b.Up), upDown(a.Up))})
		}
	}
	for name, a := range after {
		if _, ok := before[name]; !ok {
			out = append(out, Change{"interface", name, "new (" + addrList(a.Addrs) + ", " + upDown(a.Up) + ")"})
		}
	}
	return out
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// shortDesc shortens the hash in an entry's description for a report.
func shortDesc(desc string) string {
	if i := strings.Index(desc, "sha256:"); i >= 0 && len(desc) > i+7+12 {
		return desc[:i+7+12] + "…"
	}
	return desc
}

// ancestors returns the directories above p, nearest first ("/" or "."
// last).
func ancestors(p string) []string {
	var out []string
	for d := filepath.Dir(p); d != p; p, d = d, filepath.Dir(d) {
		out = append(out, d)
	}
	return out
}

// topmost returns the paths of set that have no ancestor in set, each with
// how many of set lie below it: a new directory is one change, not one per
// entry in it.
func topmost(set map[string]string) map[string]int {
	out := map[string]int{}
	for p := range set {
		top := true
		for _, d := range ancestors(p) {
			if _, ok := set[d]; ok {
				top = false
				break
			}
		}
		if top {
			out[p] = 0
		}
	}
	for p := range set {
		if _, ok := out[p]; ok {
			continue
		}
		for _, d := range ancestors(p) {
			if _, ok := out[d]; ok {
				out[d]++
				break
			}
		}
	}
	return out
}

// below renders how many entries a new or removed directory held.
func below(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return ", with 1 entry below"
	}
	return fmt.Sprintf(", with %d entries below", n)
}

func compareFiles(before, after map[string]string) []Change {
	var out []Change
	added, removed := map[string]string{}, map[string]string{}
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			removed[p] = b
		case a != b:
			out = append(out, Change{"file", p, "changed: " + shortDesc(b) + " -> " + shortDesc(a)})
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok {
			added[p] = a
		}
	}
	for p, n := range topmost(added) {
		out = append(out, Change{"file", p, "new (" + shortDesc(added[p]) + below(n) + ")"})
	}
	for p, n := range topmost(removed) {
		out = append(out, Change{"file", p, "removed (was " + shortDesc(removed[p]) + below(n) + ")"})
	}
	return out
}

// mountDesc describes a mount for a report, without its mount point.
func mountDesc(m Mount) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s from %s", m.FSType, m.Source)
	if m.Root != "/" {
		fmt.Fprintf(&b, " (bind of %s)", m.Root)
	}
	if m.FSType == "nsfs" {
		b.WriteString(" (a namespace held open)")
	}
	return b.String()
}

func compareMounts(before, after []Mount) []Change {
	group := func(ms []Mount) map[string][]Mount {
		g := map[string][]Mount{}
		for _, m := range ms {
			g[m.key()] = append(g[m.key()], m)
		}
		return g
	}
	bg, ag := group(before), group(after)
	var out []Change
	for k, bs := range bg {
		as := ag[k]
		for i, b := range bs {
			if i >= len(as) {
				out = append(out, Change{"mount", b.Point, "gone (was " + mountDesc(b) + ")"})
				continue
			}
			a := as[i]
			if a.Options != b.Options {
				out = append(out, Change{"mount", b.Point, fmt.Sprintf("%s: mount options %s -> %s", mountDesc(b), b.Options, a.Options)})
			}
			if a.SuperOptions != b.SuperOptions {
				out = append(out, Change{"mount", b.Point, fmt.Sprintf("%s: filesystem options %s -> %s", mountDesc(b), b.SuperOptions, a.SuperOptions)})
			}
		}
	}
	for k, as := range ag {
		for _, a := range as[min(len(bg[k]), len(as)):] {
			out = append(out, Change{"mount", a.Point, "new " + mountDesc(a) + ", left mounted"})
		}
	}
	return out
}

func compareCgroups(before, after []string) []Change {
	had := map[string]bool{}
	for _, c := range before {
		had[c] = true
	}
	added := map[string]string{}
	for _, c := range after {
		if !had[c] {
			added[c] = ""
		}
	}
	var out []Change
	for c, n := range topmost(added) {
		out = append(out, Change{"cgroup", c, "new, left behind" + below(n)})
	}
	return out
}

// procKey identifies a process across snapshots.
func procKey(p Process) string {
	return fmt.Sprintf("%d@%d", p.PID, p.Start)
}

// shortCmdline keeps a report line readable.
func shortCmdline(s string) string {
	const limit = 240
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}

func compareProcesses(before, after []Process) []Change {
	had, has := map[string]bool{}, map[string]bool{}
	for _, p := range before {
		had[procKey(p)] = true
	}
	for _, p := range after {
		has[procKey(p)] = true
	}
	var out []Change
	for _, p := range after {
		if !had[procKey(p)] {
			out = append(out, Change{"process", fmt.Sprintf("%d", p.PID), fmt.Sprintf("%s started during the tests and still runs: %s", p.Name, shortCmdline(p.Cmdline))})
		}
	}
	for _, p := range before {
		if !has[procKey(p)] && daemon(p.Name, strings.Fields(p.Cmdline)) {
			out = append(out, Change{"process", fmt.Sprintf("%d", p.PID), fmt.Sprintf("%s was running before the tests and is gone: %s", p.Name, shortCmdline(p.Cmdline))})
		}
	}
	return out
}

func compareTmp(before, after []string) []Change {
	var out []Change
	for _, p := range after {
		if !slices.Contains(before, p) {
			out = append(out, Change{"tmp", p, "left behind"})
		}
	}
	return out
}
