package shmstats

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Filter selects containers; an empty field matches all.
type Filter struct {
	// Namespace matches a pod's Kubernetes namespace or a containerd
	// namespace.
	Namespace string
	// Pod matches a pod's name.
	Pod string
	// Container matches a container's id (or a prefix of it of at least 3
	// characters), its engine's name for it, or its name in its pod.
	Container string
}

// Match reports whether the filter selects c.
func (f Filter) Match(c Container) bool {
	if f.Namespace != "" && f.Namespace != c.Namespace && (c.Pod == nil || c.Pod.Namespace != f.Namespace) {
		return false
	}
	if f.Pod != "" && (c.Pod == nil || c.Pod.Name != f.Pod) {
		return false
	}
	if f.Container != "" {
		byID := len(f.Container) >= 3 && strings.HasPrefix(c.ID, f.Container)
		if !byID && f.Container != c.Name && (c.Pod == nil || c.Pod.Container != f.Container) {
			return false
		}
	}
	return true
}

// Select returns the containers the filter selects.
func (f Filter) Select(cs []Container) []Container {
	var out []Container
	for _, c := range cs {
		if f.Match(c) {
			out = append(out, c)
		}
	}
	return out
}

// ShortID is the 12-character form of an id, as docker ps shows it.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Label names a container for people: namespace/pod/container for a pod's,
// else its engine's name (with its containerd namespace), else "-".
func (c Container) Label() string {
	switch {
	case c.Pod != nil:
		return c.Pod.Namespace + "/" + c.Pod.Name + "/" + c.Pod.Container
	case c.Name != "" && c.Namespace != "":
		return c.Namespace + "/" + c.Name
	case c.Name != "":
		return c.Name
	case c.Namespace != "":
		return c.Namespace + "/-"
	}
	return "-"
}

// WriteTable writes the containers as `gpurun stats` prints them: one row
// each, then the suggestions, the containers whose memory is near its
// limit with /dev/shm a large part of it, and the per-container errors.
func WriteTable(w io.Writer, cs []Container) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tENGINE\tNAME/POD\tSIZE\tUSED\tPEAK\t%\tMEM\tLIMIT\tSHM/LIMIT\tSHM/MEM\tORPHANED\tSWEPT\tSHARED\tGPU\tDECISION")
	for _, c := range cs {
		fmt.Fprintln(tw, strings.Join(row(c), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range cs {
		writeNotes(w, c)
	}
	writeMemoryErrors(w, cs)
	return nil
}

// row is a container's row of the table.
func row(c Container) []string {
	size, used, peak, pct := "-", "-", "-", "-"
	if c.Err == "" || c.Shm.Size > 0 {
		size, used, peak = human(c.Shm.Size), human(c.Shm.Used), human(c.Shm.Peak)
		pct = fmt.Sprintf("%.1f%%", c.Shm.Percent)
	}
	orph, swept := "-", "-"
	if c.Shm.Orphaned >= 0 {
		orph = human(c.Shm.Orphaned)
	}
	if c.Shm.SweptFiles > 0 {
		swept = human(c.Shm.SweptBytes)
	}
	shared := "-"
	switch {
	case c.Shm.HostIPC:
		shared = "host"
	case len(c.SharedWith) > 0:
		ids := make([]string, 0, len(c.SharedWith))
		for _, id := range c.SharedWith {
			ids = append(ids, ShortID(id))
		}
		shared = strings.Join(ids, ",")
	}
	gpu := "no"
	if c.GPU {
		gpu = "yes"
	}
	mem, limit, ofLimit, ofMem := memoryColumns(c)
	return []string{ShortID(c.ID), c.Engine, c.Label(), size, used, peak, pct, mem, limit, ofLimit, ofMem, orph, swept, shared, gpu, c.Decision.Words()}
}

// memoryColumns are MEM (the working set), LIMIT (with whose, when not the
// container's own: "16GiB(pod)", "23.54GiB(host)"), and /dev/shm's used
// bytes as a share of each.
func memoryColumns(c Container) (mem, limit, ofLimit, ofMem string) {
	m := c.Memory
	if m == nil || m.Err != "" {
		return "-", "-", "-", "-"
	}
	mem, limit, ofLimit, ofMem = human(m.WorkingSet), "-", "-", "-"
	if m.Limit > 0 {
		limit = human(m.Limit)
		if m.LimitOf != LimitContainer {
			limit += "(" + m.LimitOf + ")"
		}
	}
	if c.ownShm() {
		if m.Limit > 0 {
			ofLimit = fmt.Sprintf("%.0f%%", m.ShmPercentOfLimit)
		}
		switch {
		case m.WorkingSet > 0 && m.ShmPercentOfWorkingSet > 100:
			// More than it uses: the pages are charged to another
			// container of the pod or IPC group, which wrote them.
			ofMem = ">100%"
		case m.WorkingSet > 0:
			ofMem = fmt.Sprintf("%.0f%%", m.ShmPercentOfWorkingSet)
		}
	}
	return mem, limit, ofLimit, ofMem
}

// writeNotes writes what the table says of a container under it: its
// suggestion, memory pressure, orphaned files and error.
func writeNotes(w io.Writer, c Container) {
	if s := c.Suggestion; s != nil {
		fmt.Fprintf(w, "\n%s (%s): suggest %s — %s\n", ShortID(c.ID), c.Label(), policy.FormatSize(s.Size), s.Why)
		for _, set := range s.Settings {
			fmt.Fprintf(w, "  - %s\n", set)
		}
	}
	if c.NearMemoryLimit() {
		m := c.Memory
		fmt.Fprintf(w, "\n%s (%s): near its memory limit: /dev/shm holds %s and the container uses %s of %s; tmpfs pages count against the limit until their files are deleted\n",
			ShortID(c.ID), c.Label(), human(c.Shm.Used), human(m.WorkingSet), m.LimitWords("its"))
	}
	if len(c.Shm.OrphanedFiles) > 0 {
		fmt.Fprintf(w, "\n%s (%s): %s in files no process has open or mapped: %s\n", ShortID(c.ID), c.Label(), human(c.Shm.Orphaned), strings.Join(c.Shm.OrphanedFiles, " "))
	}
	if c.Err != "" {
		fmt.Fprintf(w, "\n%s (%s): %s\n", ShortID(c.ID), c.Label(), c.Err)
	}
}

// writeMemoryErrors says once why memory could not be read, for how many
// containers: one cause (a cgroup namespace of gpurun's own) usually
// holds for all of them.
func writeMemoryErrors(w io.Writer, cs []Container) {
	n, first := 0, ""
	for _, c := range cs {
		if c.Memory != nil && c.Memory.Err != "" && c.Err == "" {
			n++
			first = cmp.Or(first, c.Memory.Err)
		}
	}
	if n > 0 {
		fmt.Fprintf(w, "\nmemory not read for %d container(s): %s\n", n, first)
	}
}

// Words is the decision as the table's DECISION column shows it: the
// action, and for one that acts whether it is in effect ("remount
// (applied)", "set-size (not applied)").
func (d Decision) Words() string {
	switch {
	case d.Action == "" || d.Action == string(oci.ActionNone):
		return cmp.Or(d.Action, "-")
	case d.InEffect:
		return d.Action + " (applied)"
	}
	return d.Action + " (not applied)"
}

// human writes a byte count as the table shows it.
func human(n int64) string {
	if n == 0 {
		return "0B"
	}
	return policy.FormatSize(n)
}
