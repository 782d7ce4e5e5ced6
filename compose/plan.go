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
	action   Action
	size     int64
	reason   string
	warnings []string
	file     string // where the service is defined, or where the change goes
	line     int
}

// skip leaves a service that needs a size alone, saying why and what to do.
func (d *decision) skip(warning string) {
	if d.action == ActionAdd || d.action == ActionRaise {
		d.reason = fmt.Sprintf("needs shm_size %s (%s), but is left alone", policy.FormatCompose(d.size), d.reason)
	}
	d.action = ActionSkip
	d.warnings = append(d.warnings, warning)
}

// plan decides every service of a project and returns the reports and the
// edits, by absolute file path.
func plan(p *project, opts Options) ([]ServiceReport, map[string][]yamledit.Edit) {
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
	planAdds(p, ds, defs, edits)
	planRaises(p, opts, ds, defs, edits)
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
		}
		if d.action == ActionAdd || d.action == ActionRaise {
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
//   - a container the policy does not apply to (no GPU, match "gpu"): none;
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
	if s.ipc == "host" && s.shmSet {
		d.warnings = append(d.warnings, fmt.Sprintf("ipc: host with shm_size %s: Docker ignores shm_size when the container shares the host's IPC namespace, and Podman refuses the combination; keep one of them", s.shmRaw))
	}
	if err != nil {
		d.action, d.reason = ActionNone, fmt.Sprintf("not understood (%v); docker would refuse it too", err)
		d.warnings = append(d.warnings, fmt.Sprintf("%v: docker refuses this service as it is; migrate leaves it alone", err))
		return d
	}
	pl := oci.Decide(oci.Input{Container: s.c, Policy: pol, Portable: true})
	d.gpu, d.evidence = pl.GPU, pl.Evidence
	if !pl.GPU && pol.Match != policy.MatchAll {
		d.action, d.reason = ActionNone, "not a GPU service"
		return d
	}
	if s.ncclOff {
		d.warnings = append(d.warnings, "NCCL_SHM_DISABLE=1 is set: NCCL moves data over sockets instead of /dev/shm; with a /dev/shm this size it can be removed")
	}
	d.action, d.reason = ActionKeep, pl.Reason
	switch {
	case pl.Shm.Kind == oci.ShmPrivate && s.shmUnread:
		d.reason = fmt.Sprintf("shm_size is set (%q; interpolated or not a size, so not checked)", s.shmRaw)
	case pl.Action == oci.ActionSetSize && pl.Shm.Kind == oci.ShmUser:
		d.action = ActionSkip
		d.reason = fmt.Sprintf("its %s is %s, below the policy minimum %s (enforce_min); shm_size cannot raise it", s.c.UserShm, policy.FormatSize(pl.Shm.Size), policy.FormatSize(pol.Min))
		d.warnings = append(d.warnings, fmt.Sprintf("%s is below the policy minimum %s; raise its size to at least %s by hand", s.c.UserShm, policy.FormatSize(pol.Min), policy.FormatCompose(pl.Size)))
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
	case pl.Shm.Kind == oci.ShmPrivate && s.shmSet && pl.Shm.Size < pol.Min:
		d.warnings = append(d.warnings, fmt.Sprintf("shm_size %s is below the policy minimum %s; --enforce-min raises it", s.shmRaw, policy.FormatSize(pol.Min)))
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
	services []*decision
	covers   []string // every service that takes shm_size from node
	edit     yamledit.Edit
	ok       bool // the edit is made
	line     int  // the line of the mapping's key
}

// planAdds places the new shm_size lines.
//
// A line added to a mapping reaches every service that takes its keys from
// that mapping: services that alias it or merge it with "<<" (and do not
// set shm_size nearer), and services that extend the service. The line
// goes in only when every one of them is a GPU service that needs the same
// size; such services then take it from there and get no line of their
// own. Otherwise (an anchored GPU service merged into a CPU variant, say)
// the services are skipped with a warning: adding the line would change a
// service that must stay as it is.
func planAdds(p *project, ds map[string]*decision, defs map[string][]def, edits map[string][]yamledit.Edit) {
	var groups []*group
	byNode := map[*yaml.Node]*group{}
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
			g = &group{node: t.mapping, pf: t.pf}
			byNode[t.mapping] = g
			groups = append(groups, g)
		}
		g.services = append(g.services, d)
	}
	extenders := extendsGraph(p, defs)
	for _, g := range groups {
		size := g.services[0].size
		covered := map[string]bool{}
		for _, name := range p.names {
			for _, e := range defs[name] {
				if ds[name] != nil && e.pf == g.pf && e.mapping != nil && yamledit.Inherits(e.mapping, g.node, ShmKey) {
					covered[name] = true
				}
			}
		}
		for _, s := range g.services {
			for _, name := range extenders(g.pf.abs, s.name) {
				if ds[name] != nil && !ds[name].svc.shmSet {
					covered[name] = true
				}
			}
		}
		g.covers = slices.Sorted(maps.Keys(covered))
		var blockers []string
		for _, name := range g.covers {
			o := ds[name]
			switch {
			case o.action == ActionAdd && o.size == size:
			case o.action == ActionAdd:
				blockers = append(blockers, fmt.Sprintf("%s, which needs %s", name, policy.FormatCompose(o.size)))
			case o.action == ActionNone:
				blockers = append(blockers, fmt.Sprintf("%s, which is not a GPU service", name))
			default:
				blockers = append(blockers, fmt.Sprintf("%s (%s)", name, o.reason))
			}
		}
		g.line = g.node.Line
		if k := g.pf.keyOf(g.node); k != nil {
			g.line = k.Line
		}
		where := fmt.Sprintf("%s:%d", g.pf.f.Name, g.line)
		if len(blockers) > 0 {
			for _, s := range g.services {
				s.skip(fmt.Sprintf("its mapping (%s) is shared: a shm_size line there would also change %s; add shm_size: %s by hand where only GPU services get it, or give the others their own shm_size first",
					where, strings.Join(blockers, " and "), policy.FormatCompose(s.size)))
			}
			continue
		}
		e, err := g.pf.f.InsertFirst(g.pf.keyOf(g.node), g.node, ShmKey, policy.FormatCompose(size))
		if err != nil {
			for _, s := range g.services {
				s.skip(fmt.Sprintf("%v; add shm_size: %s by hand", err, policy.FormatCompose(s.size)))
			}
			continue
		}
		g.edit, g.ok = e, true
	}
	// A group whose services all take shm_size from another group's line
	// needs no line of its own.
	dropped := map[*group]bool{}
	for _, g := range groups {
		if !g.ok {
			continue
		}
		for _, h := range groups {
			if h == g || !h.ok || dropped[h] {
				continue
			}
			if !slices.ContainsFunc(g.services, func(s *decision) bool { return !slices.Contains(h.covers, s.name) }) {
				dropped[g] = true
				for _, s := range g.services {
					s.reason += fmt.Sprintf("; it takes shm_size from %s (%s:%d)", nameOf(h), h.pf.f.Name, h.line)
					s.file, s.line = h.pf.f.Name, h.line
				}
				break
			}
		}
	}
	for _, g := range groups {
		if !g.ok || dropped[g] {
			continue
		}
		edits[g.pf.abs] = append(edits[g.pf.abs], g.edit)
		for _, s := range g.services {
			s.file, s.line = g.pf.f.Name, g.line
		}
	}
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

// planRaises changes explicit shm_size values below the minimum
// (--enforce-min), where the value is the service's own.
func planRaises(p *project, opts Options, ds map[string]*decision, defs map[string][]def, edits map[string][]yamledit.Edit) {
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
