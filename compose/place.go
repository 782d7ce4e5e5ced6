package compose

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/gpurun/gpurun/compose/yamledit"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// decision is migrate's verdict on one service.
type decision struct {
	name     string
	svc      service
	gpu      bool
	evidence []string
	defs     []def
	action   ServiceAction
	size     int64
	reason   string
	warnings []string
	kinds    []oci.WarningKind // of the decision's warnings among warnings
	file     string            // where the service is defined, or where the change goes
	line     int

	notGPU bool        // understood, and not a GPU service
	shm    oci.ShmKind // its /dev/shm as the plan sees it
	// sharedWith (add) and inheritsFrom (inherit): see ServiceReport.
	sharedWith, inheritsFrom []string
}

// skip leaves a service that needs a size alone, saying why and what to do.
func (d *decision) skip(warning string) {
	if d.action == ActionAdd || d.action == ActionRaise {
		d.reason = fmt.Sprintf("needs shm_size %s (%s), but is left alone", policy.FormatCompose(d.size), d.reason)
	}
	d.action = ActionSkip
	d.warnings = append(d.warnings, warning)
}

// placeEdits decides every service of a project and returns the reports and the
// edits, by absolute file path.
func placeEdits(p *project, opts Options) ([]ServiceReport, map[string][]yamledit.Edit) {
	defs := p.defs()
	pol := composePolicy(opts)
	ds := map[string]*decision{}
	for _, name := range p.names {
		d := decide(p, opts, pol, name, defs[name])
		if len(d.defs) > 0 {
			d.file, d.line = d.defs[0].pf.f.Name, d.defs[0].key.Line
		}
		ds[name] = d
	}
	edits := map[string][]yamledit.Edit{}
	placeAdds(p, opts, ds, defs, edits)
	placeRaises(p, opts, ds, defs, edits)
	var reports []ServiceReport
	for _, name := range p.names {
		d := ds[name]
		r := ServiceReport{
			Project:  p.display(),
			File:     d.file,
			Line:     d.line,
			Service:  name,
			GPU:      d.gpu,
			Evidence: d.evidence,
			Action:   d.action,
			Reason:   d.reason,
			Warnings: d.warnings,

			WarningKinds: d.kinds,

			SharedWith:   d.sharedWith,
			InheritsFrom: d.inheritsFrom,
		}
		if d.action == ActionAdd || d.action == ActionRaise || d.action == ActionInherit {
			r.Size, r.SizeBytes = policy.FormatCompose(d.size), d.size
		}
		reports = append(reports, r)
	}
	return reports, edits
}

// composePolicy is the policy as migrate applies it: a compose file sizes
// /dev/shm with shm_size, whatever the policy's mode says (never ipc: host,
// never a mount of its own), and --enforce-min adds to enforce_min.
func composePolicy(opts Options) *policy.Policy {
	pol := *opts.Policy
	pol.Mode = policy.ModeSize
	pol.EnforceMin = pol.EnforceMin || opts.EnforceMin
	return &pol
}

// decide translates a service into the one form, asks oci.Decide — with
// Portable set, since a compose file runs on hosts not known now — and
// maps the plan onto migrate's actions:
//
//   - a container the policy does not apply to (oci.Plan.Applies): none;
//   - set-size of the engine's own tmpfs: add shm_size (--size, when given,
//     is the size), or raise the service's own shm_size (enforce_min);
//     set-size of the user's own tmpfs (enforce_min): skip, raise it by hand;
//   - remount of the shared tmpfs of ipc: service:x / container:x: keep, the
//     donor's shm_size sizes it;
//   - none: keep, with the plan's reason.
func decide(p *project, opts Options, pol *policy.Policy, name string, defs []def) *decision {
	d := &decision{name: name, defs: defs}
	s, err := p.translate(p.services[name])
	d.svc = s
	if err != nil {
		d.action, d.reason = ActionNone, fmt.Sprintf("not understood (%v); docker would refuse it too", err)
		d.warnings = append(d.warnings, fmt.Sprintf("%v: docker refuses this service as it is; migrate leaves it alone", err))
		return d
	}
	pl := oci.Decide(oci.Input{Container: s.c, Policy: pol, Portable: true, EnforceMinWords: "--enforce-min"})
	d.gpu, d.evidence, d.shm = pl.GPU, pl.Evidence, pl.Shm.Kind
	for _, w := range pl.Warnings {
		// A shm_size that is not a size (an unset variable) was decided as
		// the engines' default: its size says nothing of the user's.
		if !s.shmUnread || w.Kind == oci.WarnSizeIgnored || w.Kind == oci.WarnNCCLShmDisabled {
			d.warnings = append(d.warnings, w.Message)
			d.kinds = append(d.kinds, w.Kind)
		}
	}
	if !pl.Applies {
		d.action, d.reason, d.notGPU = ActionNone, "not a GPU service", true
		return d
	}
	d.action, d.reason = ActionKeep, pl.Reason
	switch {
	case pl.Shm.Kind == oci.ShmPrivate && s.shmUnread:
		d.reason = fmt.Sprintf("shm_size is set (%q; interpolated or not a size, so not checked)", s.shmRaw)
	case pl.Action == oci.ActionSetSize && pl.Shm.Kind == oci.ShmUser:
		d.action = ActionSkip
		d.reason = fmt.Sprintf("its %s is %s, below the policy minimum %s (enforce_min); shm_size cannot raise it", s.c.UserShm, policy.FormatSize(pl.Shm.Size), policy.FormatSize(pol.Min))
	case pl.Action == oci.ActionSetSize && s.shmSet:
		d.action, d.size = ActionRaise, pl.Size
		d.reason = fmt.Sprintf("shm_size %s is below the policy minimum %s: raised to it (--enforce-min)", s.shmRaw, policy.FormatSize(pol.Min))
	case pl.Action == oci.ActionSetSize:
		d.action, d.size = ActionAdd, pl.Size
		if opts.Size > 0 {
			d.size, d.reason = opts.Size, fmt.Sprintf("--size %s", policy.FormatSize(opts.Size))
		} else if s.memWhat != "" {
			d.reason += " (" + s.memWhat + ")"
		}
		if s.memNote != "" {
			d.reason += "; " + s.memNote
		}
	case pl.Action == oci.ActionRemount:
		mode, from, _ := strings.Cut(s.ipc, ":")
		d.reason = fmt.Sprintf("ipc: %s: the service shares the IPC namespace, and /dev/shm, of %s %s, whose shm_size sizes it", s.ipc, mode, from)
	case pl.Action != oci.ActionNone:
		// ipc-host and inject: the policy's mode is not migrate's.
		d.reason = fmt.Sprintf("the plan is %s, which a compose file does not express: %s", pl.Action, pl.Reason)
	}
	return d
}

// targetDef picks the definition a new shm_size goes into: the first one
// (in -f order, then included files) that gives the service its image or
// build, else the first with extends (the extending service), else the
// first that is a mapping.
func targetDef(defs []def) (def, bool) {
	for _, keys := range [][]string{{"image", "build"}, {"extends"}, nil} {
		for _, d := range defs {
			if d.mapping == nil {
				continue
			}
			if keys == nil {
				return d, true
			}
			for _, k := range keys {
				if kn, _, _ := yamledit.Lookup(d.mapping, k); kn != nil {
					return d, true
				}
			}
		}
	}
	return def{}, false
}

// group is one mapping that gains shm_size, and the services it serves.
type group struct {
	node     *yaml.Node
	pf       *pfile
	services []*decision // the GPU services whose line it is
	size     int64       // the largest size they need
	covers   []string    // every service that takes shm_size from node
	// inheritors are the covered services that are not GPU services:
	// they take the line too (see ActionInherit).
	inheritors []string
	// overriders are the groups of covered GPU services that need another
	// size: their own line, nearer, wins over this one.
	overriders []*group
	edit       yamledit.Edit
	ok         bool // the edit is made
	line       int  // the line of the mapping's key
}

// where is the file and line of the group's mapping.
func (g *group) where() string { return fmt.Sprintf("%s:%d", g.pf.f.Name, g.line) }

// placeAdds places the new shm_size lines.
//
// A line added to a mapping reaches every service that takes its keys from
// that mapping: services that alias it or merge it with "<<" (and do not
// set shm_size nearer), and services that extend the service. The line
// goes in when every one of them can take it:
//
//   - GPU services that need the same size take it from there and get no
//     line of their own (when several GPU services share one mapping and
//     need different sizes, the line carries the largest);
//   - GPU services that need another size get their own line in their own
//     mapping, which is nearer and wins;
//   - services that are not GPU services inherit the larger ceiling
//     (ActionInherit; a tmpfs reserves no memory until written), unless
//     opts.StrictShared, or their /dev/shm is not their own (ipc: host,
//     service:x, container:x), where shm_size is ignored or refused;
//   - anything else (a GPU service that keeps its own /dev/shm, one left
//     alone) blocks the line: the services are skipped with a warning.
func placeAdds(p *project, opts Options, ds map[string]*decision, defs map[string][]def, edits map[string][]yamledit.Edit) {
	groups, groupOf := groupAdds(p, ds)
	shareLargest(groups)
	extenders := extendsGraph(p, defs)
	for _, g := range groups {
		g.covers = coverage(p, ds, defs, g, extenders)
		placeLine(g, opts, ds, groupOf)
	}
	dropOrphanedLines(groups)
	into := mergeCovered(groups)
	var written []*group
	for _, g := range groups {
		if !g.ok || into[g] != nil {
			continue
		}
		written = append(written, g)
		edits[g.pf.abs] = append(edits[g.pf.abs], g.edit)
		for _, s := range g.services {
			s.file, s.line = g.pf.f.Name, g.line
		}
	}
	placeInherits(ds, defs, groups, written, into)
}

// groupAdds gathers the services to add shm_size to by the mapping that
// defines them, in the project's order; a service that is not a mapping
// in any file is skipped.
func groupAdds(p *project, ds map[string]*decision) (groups []*group, groupOf map[*decision]*group) {
	byNode := map[*yaml.Node]*group{}
	groupOf = map[*decision]*group{}
	for _, name := range p.names {
		d := ds[name]
		if d.action != ActionAdd {
			continue
		}
		t, ok := targetDef(d.defs)
		if !ok {
			d.skip(fmt.Sprintf("the service is not a mapping in any of its files, so there is nowhere to add shm_size: %s; add it by hand", policy.FormatCompose(d.size)))
			continue
		}
		g := byNode[t.mapping]
		if g == nil {
			g = &group{node: t.mapping, pf: t.pf, line: t.mapping.Line}
			if k := t.pf.keyOf(t.mapping); k != nil {
				g.line = k.Line
			}
			byNode[t.mapping] = g
			groups = append(groups, g)
		}
		g.services = append(g.services, d)
		g.size = max(g.size, d.size)
		groupOf[d] = g
	}
	return groups, groupOf
}

// shareLargest gives every service of a group the group's size, the
// largest, saying so in the reason of those that needed less.
func shareLargest(groups []*group) {
	for _, g := range groups {
		var largest []string
		for _, s := range g.services {
			if s.size == g.size {
				largest = append(largest, s.name)
			}
		}
		for _, s := range g.services {
			if s.size < g.size {
				s.reason += fmt.Sprintf("; it shares its mapping with %s, which needs %s: the line carries the larger size", strings.Join(largest, ", "), policy.FormatCompose(g.size))
				s.size = g.size
			}
		}
	}
}

// placeLine inserts g's line unless a service it covers blocks it (then
// g's services are skipped, saying which and why).
func placeLine(g *group, opts Options, ds map[string]*decision, groupOf map[*decision]*group) {
	var blockers []string
	for _, name := range g.covers {
		o := ds[name]
		switch {
		case slices.Contains(g.services, o):
		case o.action == ActionAdd && o.size == g.size:
		case o.action == ActionAdd && groupOf[o].pf == g.pf:
			// Its own line goes into its own mapping in this file,
			// nearer than g's (in another file, an override could
			// bring g's back over it).
			g.overriders = append(g.overriders, groupOf[o])
		case o.notGPU && opts.StrictShared:
			blockers = append(blockers, fmt.Sprintf("%s, which is not a GPU service (--strict-shared)", name))
		case o.notGPU && (o.shm == oci.ShmHost || o.shm == oci.ShmEngine):
			blockers = append(blockers, fmt.Sprintf("%s, which is not a GPU service and has ipc: %s (its /dev/shm is not its own: Docker ignores shm_size there and Podman refuses it)", name, o.svc.ipc))
		case o.notGPU:
			g.inheritors = append(g.inheritors, name)
		default:
			blockers = append(blockers, fmt.Sprintf("%s (%s)", name, o.reason))
		}
	}
	if len(blockers) > 0 {
		for _, s := range g.services {
			s.skip(fmt.Sprintf("its mapping (%s) is shared: a shm_size line there would also change %s; add shm_size: %s by hand where only the services that may take it get it, or give the others their own shm_size first",
				g.where(), strings.Join(blockers, " and "), policy.FormatCompose(s.size)))
		}
		return
	}
	e, err := g.pf.f.InsertFirst(g.pf.keyOf(g.node), g.node, ShmKey, policy.FormatCompose(g.size))
	if err != nil {
		for _, s := range g.services {
			s.skip(fmt.Sprintf("%v; add shm_size: %s by hand", err, policy.FormatCompose(s.size)))
		}
		return
	}
	g.edit, g.ok = e, true
}

// dropOrphanedLines takes back a line whose overriders get no line of
// their own: it would reach them with the wrong size.
func dropOrphanedLines(groups []*group) {
	for changed := true; changed; {
		changed = false
		for _, g := range groups {
			i := slices.IndexFunc(g.overriders, func(h *group) bool { return !h.ok })
			if !g.ok || i < 0 {
				continue
			}
			g.ok, changed = false, true
			h := g.overriders[i]
			for _, s := range g.services {
				s.skip(fmt.Sprintf("its mapping (%s) is shared with %s, which needs %s and cannot get a line of its own; add shm_size by hand", g.where(), nameOf(h), policy.FormatCompose(h.size)))
			}
		}
	}
}

// mergeCovered finds the groups whose services all take shm_size, of their
// size, from another group's line: they need no line of their own. It
// returns, for each, the group whose line they take.
func mergeCovered(groups []*group) map[*group]*group {
	overrider := map[*group]bool{}
	for _, g := range groups {
		for _, h := range g.overriders {
			overrider[h] = true
		}
	}
	into := map[*group]*group{}
	for _, g := range groups {
		if !g.ok || overrider[g] {
			continue
		}
		for _, h := range groups {
			if h == g || !h.ok || into[h] != nil {
				continue
			}
			if !slices.ContainsFunc(g.services, func(s *decision) bool { return !slices.Contains(h.covers, s.name) }) {
				into[g] = h
				for _, s := range g.services {
					s.reason += fmt.Sprintf("; it takes shm_size from %s (%s)", nameOf(h), h.where())
					s.file, s.line = h.pf.f.Name, h.line
				}
				break
			}
		}
	}
	return into
}

// coverage lists the services that take shm_size from g's mapping: those
// whose mapping is it or merges it (YAML's precedence), and those that
// extend one of them without a shm_size of their own.
func coverage(p *project, ds map[string]*decision, defs map[string][]def, g *group, extenders func(abs, name string) []string) []string {
	covered := map[string]bool{}
	for _, name := range p.names {
		for _, e := range defs[name] {
			if ds[name] != nil && e.pf == g.pf && e.mapping != nil && yamledit.Inherits(e.mapping, g.node, ShmKey) {
				covered[name] = true
			}
		}
	}
	for _, base := range slices.Sorted(maps.Keys(covered)) {
		for _, name := range extenders(g.pf.abs, base) {
			if ds[name] != nil && !ds[name].svc.shmSet {
				covered[name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(covered))
}

// placeInherits marks the services that are not GPU services but take a
// written line (ActionInherit), each from the nearest one (its own merges
// in YAML's precedence, then extends), and names them in the reports of
// the GPU services whose line they take.
func placeInherits(ds map[string]*decision, defs map[string][]def, groups, written []*group, into map[*group]*group) {
	from := map[string]*group{}
	rank := map[string]int{}
	for _, g := range written {
		for _, name := range g.inheritors {
			r := len(groups) // through extends
			for _, e := range defs[name] {
				if i := slices.Index(yamledit.Sources(e.mapping), g.node); e.pf == g.pf && i >= 0 {
					r = min(r, i)
				}
			}
			if h, ok := from[name]; !ok || r < rank[name] || (r == rank[name] && g.size > h.size) {
				from[name], rank[name] = g, r
			}
		}
	}
	sharers := map[*group][]string{}
	for _, name := range slices.Sorted(maps.Keys(from)) {
		g, o := from[name], ds[name]
		sharers[g] = append(sharers[g], name)
		for _, s := range g.services {
			o.inheritsFrom = append(o.inheritsFrom, s.name)
		}
		o.action, o.size = ActionInherit, g.size
		o.reason = fmt.Sprintf("not a GPU service, but it shares the mapping of %s (%s) and inherits the shm_size %s added there: harmless, a tmpfs reserves no memory until something is written to it (--strict-shared leaves %s for a hand edit instead)",
			nameOf(g), g.where(), policy.FormatCompose(g.size), nameOf(g))
	}
	for _, g := range groups {
		h := g
		if into[g] != nil {
			h = into[g]
		}
		if !g.ok || len(sharers[h]) == 0 {
			continue
		}
		for _, s := range g.services {
			s.sharedWith = sharers[h]
			s.reason += "; " + inheritPhrase(sharers[h]) + ": harmless, a tmpfs reserves no memory until written"
		}
	}
}

// inheritPhrase says that services that are not GPU services inherit a line.
func inheritPhrase(names []string) string {
	if len(names) == 1 {
		return names[0] + " (not a GPU service) inherits the same ceiling from the mapping it shares"
	}
	return strings.Join(names, ", ") + " (not GPU services) inherit the same ceiling from the mapping they share"
}

// nameOf names a group's services.
func nameOf(g *group) string {
	var names []string
	for _, s := range g.services {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

// extendsGraph returns a function that lists the services that extend a
// service defined in a file, directly or through other services, among
// the project's files.
func extendsGraph(p *project, defs map[string][]def) func(abs, name string) []string {
	type ref struct{ abs, name string }
	by := map[ref][]ref{}
	for name, ds := range defs {
		for _, d := range ds {
			if d.mapping == nil {
				continue
			}
			_, v, _ := yamledit.Lookup(d.mapping, "extends")
			v = yamledit.Resolve(v)
			if v == nil {
				continue
			}
			target := ref{abs: d.pf.abs}
			switch v.Kind {
			case yaml.ScalarNode:
				target.name = v.Value
			case yaml.MappingNode:
				_, s := yamledit.Get(v, "service")
				_, file := yamledit.Get(v, "file")
				if s == nil {
					continue
				}
				target.name = s.Value
				if file != nil && file.Kind == yaml.ScalarNode {
					path := p.interpolateString(file.Value)
					if !filepath.IsAbs(path) {
						path = filepath.Join(filepath.Dir(d.pf.abs), path)
					}
					target.abs = path
				}
			}
			by[target] = append(by[target], ref{abs: d.pf.abs, name: name})
		}
	}
	return func(abs, name string) []string {
		var out []string
		seen := map[ref]bool{}
		queue := []ref{{abs, name}}
		for len(queue) > 0 {
			r := queue[0]
			queue = queue[1:]
			for _, x := range by[r] {
				if seen[x] {
					continue
				}
				seen[x] = true
				if !slices.Contains(out, x.name) {
					out = append(out, x.name)
				}
				queue = append(queue, x)
			}
		}
		return out
	}
}

// placeRaises changes explicit shm_size values below the minimum
// (--enforce-min), where the value is the service's own.
func placeRaises(p *project, opts Options, ds map[string]*decision, defs map[string][]def, edits map[string][]yamledit.Edit) {
	for _, name := range p.names {
		d := ds[name]
		if d.action != ActionRaise {
			continue
		}
		var at *def
		var value, owner *yaml.Node
		for i := len(d.defs) - 1; i >= 0 && at == nil; i-- {
			if e := d.defs[i]; e.mapping != nil {
				if k, v, o := yamledit.Lookup(e.mapping, ShmKey); k != nil {
					at, value, owner = &d.defs[i], yamledit.Resolve(v), o
				}
			}
		}
		want := policy.FormatCompose(d.size)
		switch {
		case at == nil:
			d.skip(fmt.Sprintf("its shm_size %s comes from a service it extends; raise it there by hand", d.svc.shmRaw))
			continue
		case owner != at.mapping:
			d.skip(fmt.Sprintf("its shm_size %s comes from a merged mapping (%s:%d); raise it there by hand", d.svc.shmRaw, at.pf.f.Name, owner.Line))
			continue
		case strings.Contains(value.Value, "$"):
			d.skip(fmt.Sprintf("its shm_size is the expression %q; set it to at least %s by hand", value.Value, want))
			continue
		}
		var others []string
		for other, es := range defs {
			for _, e := range es {
				if other != name && e.pf == at.pf && e.mapping != nil && yamledit.Inherits(e.mapping, owner, ShmKey) {
					others = append(others, other)
				}
			}
		}
		if len(others) > 0 {
			slices.Sort(others)
			d.skip(fmt.Sprintf("its shm_size (%s:%d) is shared with %s; raise it by hand", at.pf.f.Name, value.Line, strings.Join(others, ", ")))
			continue
		}
		e, err := at.pf.f.ReplaceScalar(value, want)
		if err != nil {
			d.skip(fmt.Sprintf("cannot raise shm_size in place: %v", err))
			continue
		}
		edits[at.pf.abs] = append(edits[at.pf.abs], e)
		d.file, d.line = at.pf.f.Name, value.Line
	}
}

// keyOf returns the key whose value, as written, is node n (for a service
// defined through an alias, the key of the anchored mapping).
func (pf *pfile) keyOf(n *yaml.Node) *yaml.Node {
	if pf.keys == nil {
		pf.keys = map[*yaml.Node]*yaml.Node{}
		var walk func(*yaml.Node, int)
		walk = func(m *yaml.Node, depth int) {
			if depth > 64 {
				return
			}
			if m.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(m.Content); i += 2 {
					pf.keys[m.Content[i+1]] = m.Content[i]
				}
			}
			for _, c := range m.Content {
				walk(c, depth+1)
			}
		}
		for _, doc := range pf.f.Docs {
			walk(doc, 0)
		}
	}
	return pf.keys[n]
}
