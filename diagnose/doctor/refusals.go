package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// logTail is how much of the end of gpurun's log file doctor reads.
const logTail = 1 << 20

// readLog returns the JSON lines at the end of the log file at a node
// path, for observe/records to read (Parse, Message).
func readLog(sys *System, nodePath string) ([][]byte, error) {
	f, err := os.Open(sys.path(nodePath))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	start := max(fi.Size()-logTail, 0)
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, logTail))
	if err != nil {
		return nil, err
	}
	if start > 0 {
		// Begin at the first whole record.
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), logTail)
	for sc.Scan() {
		if msg, _, err := records.Message(sc.Bytes()); err == nil && msg != "" {
			out = append(out, bytes.Clone(sc.Bytes()))
		}
	}
	return out, nil
}

// hostRoot is the engine directory a host tmpfs path lies under in its
// engine's layout, else the path's directory.
func hostRoot(path string) string {
	if engine, owner, ok := oci.EngineHostShm(path); ok {
		if r := dirs.Root(oci.Shm{Kind: oci.ShmEngine, Source: path, Engine: engine, OwnerID: owner}); r != "" {
			return r
		}
	}
	return path
}

// refusalGroup is the failed remounts with one fix.
type refusalGroup struct {
	fix          string
	count        int
	first, last  records.Record
	resolvedAt   time.Time
	refusedByAny bool
}

// remountCheck reads gpurun's log file for remounts of an engine's /dev/shm
// tmpfs that failed — refused by the engine's named dirs or remount's
// safety rules, or unreachable — and reports each kind that no later
// remount under the same engine directory has fixed as a problem, with
// the fix the enforcer logged.
func remountCheck(sys *System, pol *policy.Policy) Check {
	c := Check{Name: "remount", Status: OK}
	if pol.LogFile == "" {
		c.Detail = "log_file is empty: gpurun-runtime and the hook keep no log, so refused remounts cannot be looked for"
		return c
	}
	lines, err := readLog(sys, pol.LogFile)
	switch {
	case os.IsNotExist(err):
		c.Detail = fmt.Sprintf("no %s: gpurun-runtime, the hook and a launched NRI plugin have logged nothing on this host", pol.LogFile)
		return c
	case err != nil:
		c.Status = Error
		c.Detail = fmt.Sprintf("cannot read %s: %v", pol.LogFile, err)
		return c
	}
	groups := map[string]*refusalGroup{}
	lastOK := map[string]time.Time{} // engine directory -> last successful remount
	for _, l := range lines {
		r, ok, err := records.Parse(l)
		if err != nil || !ok {
			continue
		}
		switch {
		case !r.Failed && r.Remount() && r.Path != "":
			if root := hostRoot(r.Path); r.Time.After(lastOK[root]) {
				lastOK[root] = r.Time
			}
		case r.Failed && r.Path != "":
			key := r.Fix
			if key == "" {
				key = r.Err
			}
			g := groups[key]
			if g == nil {
				g = &refusalGroup{fix: r.Fix, first: r}
				groups[key] = g
			}
			g.count++
			g.last = r
			g.refusedByAny = g.refusedByAny || r.Refused
		}
	}
	var open, fixed []*refusalGroup
	for _, g := range groups {
		if ok := lastOK[hostRoot(g.last.Path)]; ok.After(g.last.Time) {
			g.resolvedAt = ok
			fixed = append(fixed, g)
		} else {
			open = append(open, g)
		}
	}
	byLast := func(gs []*refusalGroup) {
		sort.Slice(gs, func(i, j int) bool { return gs[i].last.Time.After(gs[j].last.Time) })
	}
	byLast(open)
	byLast(fixed)
	c.Data = map[string]any{"log_file": pol.LogFile, "records": len(lines), "failed_kinds": len(open), "fixed_kinds": len(fixed)}
	if len(open) == 0 {
		c.Detail = fmt.Sprintf("no failed remount of an engine's /dev/shm tmpfs in the last %d records of %s", len(lines), pol.LogFile)
		if len(fixed) > 0 {
			g := fixed[0]
			c.Detail = fmt.Sprintf("%d earlier failed remount(s) of %s, the last at %s; a remount under %s succeeded since (%s)",
				g.count, g.last.Path, stamp(g.last.Time), hostRoot(g.last.Path), stamp(g.resolvedAt))
		}
		return c
	}
	c.Status = Problem
	var details, fixes []string
	for _, g := range open {
		verb := "failed"
		if g.refusedByAny {
			verb = "refused"
		}
		details = append(details, fmt.Sprintf("%d remount(s) of a pod's or IPC group's /dev/shm %s since %s, the last at %s by %s%s: %s — those containers keep the engine's 64MiB",
			g.count, verb, stamp(g.first.Time), stamp(g.last.Time), g.last.Component, who(g.last), g.last.Err))
		if g.fix != "" {
			fixes = append(fixes, g.fix)
		}
	}
	c.Detail = strings.Join(details, "; ")
	c.Fix = strings.Join(fixes, "\n")
	c.Data["path"] = open[0].last.Path
	return c
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "(no time)"
	}
	return t.UTC().Format(time.RFC3339)
}

// who names a record's container, " (…)" or "".
func who(r records.Record) string {
	pod := r.Pod.Name
	if r.Pod.Namespace != "" {
		pod = r.Pod.Namespace + "/" + pod
	}
	switch {
	case pod != "" && r.ID != "":
		return fmt.Sprintf(" (container %s, pod %s)", r.ID, pod)
	case r.ID != "":
		return fmt.Sprintf(" (container %s)", r.ID)
	}
	return ""
}
