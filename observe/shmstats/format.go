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
// each, then the suggestions and the per-container errors.
func WriteTable(w io.Writer, cs []Container) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tENGINE\tNAME/POD\tSIZE\tUSED\tPEAK\t%\tORPHANED\tSHARED\tGPU\tDECISION")
	for _, c := range cs {
		size, used, peak, pct := "-", "-", "-", "-"
		if c.Err == "" || c.Shm.Size > 0 {
			size, used, peak = human(c.Shm.Size), human(c.Shm.Used), human(c.Shm.Peak)
			pct = fmt.Sprintf("%.1f%%", c.Shm.Percent)
		}
		orph := "-"
		if c.Shm.Orphaned >= 0 {
			orph = human(c.Shm.Orphaned)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ShortID(c.ID), c.Engine, c.Label(), size, used, peak, pct, orph, shared, gpu, c.Decision.Words())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range cs {
		if s := c.Suggestion; s != nil {
			fmt.Fprintf(w, "\n%s (%s): suggest %s — %s\n", ShortID(c.ID), c.Label(), policy.FormatSize(s.Size), s.Why)
			for _, set := range s.Settings {
				fmt.Fprintf(w, "  - %s\n", set)
			}
		}
		if len(c.Shm.OrphanedFiles) > 0 {
			fmt.Fprintf(w, "\n%s (%s): %s in files no process has open or mapped: %s\n", ShortID(c.ID), c.Label(), human(c.Shm.Orphaned), strings.Join(c.Shm.OrphanedFiles, " "))
		}
		if c.Err != "" {
			fmt.Fprintf(w, "\n%s (%s): %s\n", ShortID(c.ID), c.Label(), c.Err)
		}
	}
	return nil
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
