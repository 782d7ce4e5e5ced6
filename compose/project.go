package compose

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"go.yaml.in/yaml/v4"

	"github.com/gpurun/gpurun/compose/yamledit"
)

// fileCache holds every file read, by absolute path, so that a file
// shared by two projects is parsed once and edited once.
type fileCache struct {
	files map[string]*yamledit.File
}

func (c *fileCache) load(abs, display string) (*yamledit.File, error) {
	if f, ok := c.files[abs]; ok {
		return f, nil
	}
	src, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", display, err)
	}
	f, err := yamledit.Parse(display, src)
	if err != nil {
		return nil, err
	}
	if err := checkCompose(f); err != nil {
		return nil, err
	}
	c.files[abs] = f
	return f, nil
}

// pfile is one file of a project.
type pfile struct {
	abs  string
	f    *yamledit.File
	dir  string                    // the directory its relative paths start from
	main bool                      // a file of the project itself, not an included one
	keys map[*yaml.Node]*yaml.Node // value node -> key node, built by keyOf
}

// project is a loaded project: its files and its merged model.
type project struct {
	spec  projectSpec
	files []*pfile
	env   map[string]string
	// services is the merged model of each service (compose-go's raw
	// model, or the fast path's decoded and interpolated file).
	services map[string]map[string]any
	dict     map[string]any // the whole merged model, for validation
	names    []string
	unset    []string // variables used but not set
	notes    []string
	envFiles map[string]map[string]string // env_file contents, by path
}

func (p *project) display() string { return p.files[0].f.Name }

func loadProject(ctx context.Context, spec projectSpec, opts Options, cache *fileCache) (*project, error) {
	p := &project{spec: spec, envFiles: map[string]map[string]string{}}
	env, err := projectEnv(spec, opts.Environ)
	if err != nil {
		return nil, err
	}
	p.env = env
	for _, abs := range spec.files {
		f, err := cache.load(abs, spec.display[abs])
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, &pfile{abs: abs, f: f, dir: spec.workDir, main: true})
	}
	if err := p.addIncludes(cache); err != nil {
		return nil, err
	}
	if err := p.buildModel(ctx, opts.composeGoOnly); err != nil {
		return nil, err
	}
	p.names = slices.Sorted(maps.Keys(p.services))
	if len(p.unset) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("%s: not set, so empty (as docker compose would have them): %s", p.display(), strings.Join(p.unset, ", ")))
	}
	return p, nil
}

// projectEnv is the environment the project's files are interpolated
// with: the process environment, then the --env-file files or the
// project's .env for what it does not set (as `docker compose` does).
func projectEnv(spec projectSpec, environ []string) (map[string]string, error) {
	env := envMap(environ)
	files := spec.envFiles
	if files == nil {
		disabled, _ := strconv.ParseBool(env["COMPOSE_DISABLE_ENV_FILE"])
		dotenvPath := filepath.Join(spec.workDir, ".env")
		if fi, err := os.Stat(dotenvPath); err == nil && fi.Mode().IsRegular() && !disabled {
			files = []string{dotenvPath}
		}
	}
	if len(files) == 0 {
		return env, nil
	}
	fromFiles, err := dotenv.GetEnvFromFile(env, files)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	for k, v := range fromFiles {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	return env, nil
}

// envMap turns KEY=VALUE strings into a map (the last value wins).
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// addIncludes adds the files `include:` names, recursively, after the
// project's own files.
func (p *project) addIncludes(cache *fileCache) error {
	seen := map[string]bool{}
	for _, f := range p.files {
		seen[f.abs] = true
	}
	for i := 0; i < len(p.files); i++ {
		pf := p.files[i]
		for _, doc := range pf.f.Docs {
			_, inc := yamledit.Get(docRoot(doc), "include")
			inc = yamledit.Resolve(inc)
			if inc == nil || inc.Kind != yaml.SequenceNode {
				continue
			}
			for _, item := range inc.Content {
				paths, projectDir := includePaths(yamledit.Resolve(item))
				dir := pf.dir
				for j, raw := range paths {
					path := p.interpolateString(raw)
					if strings.Contains(path, "://") || strings.HasPrefix(path, "git@") {
						return pf.f.Errorf(item, "include %s: remote includes are not supported; migrate that project where it lives", path)
					}
					abs := path
					if !filepath.IsAbs(abs) {
						abs = filepath.Join(pf.dir, path)
					}
					if j == 0 {
						dir = filepath.Dir(abs)
						if projectDir != "" {
							dir = p.interpolateString(projectDir)
							if !filepath.IsAbs(dir) {
								dir = filepath.Join(pf.dir, dir)
							}
						}
					}
					if seen[abs] {
						continue
					}
					seen[abs] = true
					display := abs
					if rel, err := filepath.Rel(filepath.Dir(pf.abs), abs); err == nil {
						display = filepath.Join(filepath.Dir(pf.f.Name), rel)
					}
					if _, err := os.Stat(abs); err != nil {
						return pf.f.Errorf(item, "include %s: %v", path, err)
					}
					f, err := cache.load(abs, display)
					if err != nil {
						return err
					}
					p.files = append(p.files, &pfile{abs: abs, f: f, dir: dir})
				}
			}
		}
	}
	return nil
}

// includePaths reads an include entry: a path, or a mapping with path (a
// string or a list) and project_directory.
func includePaths(n *yaml.Node) (paths []string, projectDir string) {
	switch {
	case n == nil:
	case n.Kind == yaml.ScalarNode:
		paths = []string{n.Value}
	case n.Kind == yaml.MappingNode:
		_, v := yamledit.Get(n, "path")
		v = yamledit.Resolve(v)
		if v != nil && v.Kind == yaml.ScalarNode {
			paths = []string{v.Value}
		} else if v != nil && v.Kind == yaml.SequenceNode {
			for _, c := range v.Content {
				if c = yamledit.Resolve(c); c.Kind == yaml.ScalarNode {
					paths = append(paths, c.Value)
				}
			}
		}
		if _, d := yamledit.Get(n, "project_directory"); d != nil && d.Kind == yaml.ScalarNode {
			projectDir = d.Value
		}
	}
	return paths, projectDir
}

// docRoot returns a document's top node, or nil for an empty document.
func docRoot(doc *yaml.Node) *yaml.Node {
	if doc == nil || len(doc.Content) == 0 {
		return nil
	}
	return yamledit.Resolve(doc.Content[0])
}

// topLevelKeys are the keys a compose file may have at its top level
// (besides x-* extensions).
var topLevelKeys = []string{"version", "name", "services", "networks", "volumes", "secrets", "configs", "include", "models", "jobs"}

// checkCompose checks what migrate relies on and what tells a compose
// file from other YAML: a mapping at the top with compose's keys, services
// as a mapping of mappings, no duplicate keys.
func checkCompose(f *yamledit.File) error {
	if len(f.Docs) == 0 {
		return &yamledit.Error{File: f.Name, Msg: "empty compose file"}
	}
	for _, doc := range f.Docs {
		root := docRoot(doc)
		if root == nil || root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			continue
		}
		if root.Kind != yaml.MappingNode {
			return f.Errorf(root, "not a compose file: the top level is a %s, not a mapping of services, networks, volumes, ...", kindName(root))
		}
		for i := 0; i+1 < len(root.Content); i += 2 {
			k := root.Content[i]
			if yamledit.IsMergeKey(k) || k.Kind == yaml.ScalarNode && (slices.Contains(topLevelKeys, k.Value) || strings.HasPrefix(k.Value, "x-")) {
				continue
			}
			return f.Errorf(k, "not a compose file: unknown top-level key %q (compose files have %s and x-* extensions)", k.Value, strings.Join(topLevelKeys, ", "))
		}
		_, services := yamledit.Get(root, "services")
		if s := yamledit.Resolve(services); s != nil {
			if s.Kind != yaml.MappingNode {
				return f.Errorf(s, "services must be a mapping of service names to services, not a %s", kindName(s))
			}
			for i := 0; i+1 < len(s.Content); i += 2 {
				k, v := s.Content[i], yamledit.Resolve(s.Content[i+1])
				if yamledit.IsMergeKey(k) {
					continue
				}
				if v != nil && v.Kind != yaml.MappingNode && !isNull(v) {
					return f.Errorf(v, "service %q must be a mapping, not a %s", k.Value, kindName(v))
				}
			}
		}
		_, inc := yamledit.Get(root, "include")
		if inc = yamledit.Resolve(inc); inc != nil && !isNull(inc) && inc.Kind != yaml.SequenceNode {
			return f.Errorf(inc, "include must be a list, not a %s", kindName(inc))
		}
		if err := checkDuplicates(f, doc, 0); err != nil {
			return err
		}
	}
	return nil
}

// checkDuplicates reports a key that appears twice in one mapping, as
// compose does.
func checkDuplicates(f *yamledit.File, n *yaml.Node, depth int) error {
	if n == nil || depth > 64 {
		return nil
	}
	if n.Kind == yaml.MappingNode {
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || yamledit.IsMergeKey(k) {
				continue
			}
			if first, dup := seen[k.Value]; dup {
				return f.Errorf(k, "duplicate key %q (first at line %d)", k.Value, first.Line)
			}
			seen[k.Value] = k
		}
	}
	for _, c := range n.Content {
		if err := checkDuplicates(f, c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return "scalar"
	}
	return "node"
}

// def is one place a service is defined: a file's services.<name>.
type def struct {
	pf      *pfile
	name    string
	key     *yaml.Node // the service's key
	mapping *yaml.Node // its value, aliases followed; nil when not a mapping
}

// defs returns where each service is defined, in file order.
func (p *project) defs() map[string][]def {
	out := map[string][]def{}
	for _, pf := range p.files {
		for _, doc := range pf.f.Docs {
			_, services := yamledit.Get(docRoot(doc), "services")
			services = yamledit.Resolve(services)
			if services == nil || services.Kind != yaml.MappingNode {
				continue
			}
			addEntries(out, pf, services)
		}
	}
	return out
}

func addEntries(out map[string][]def, pf *pfile, services *yaml.Node) {
	seen := map[string]bool{}
	var walk func(m *yaml.Node, depth int)
	walk = func(m *yaml.Node, depth int) {
		if depth > 32 {
			return
		}
		// A mapping's own entries win over merged ones.
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], yamledit.Resolve(m.Content[i+1])
			if yamledit.IsMergeKey(k) || seen[k.Value] {
				continue
			}
			seen[k.Value] = true
			d := def{pf: pf, name: k.Value, key: k}
			if v != nil && v.Kind == yaml.MappingNode {
				d.mapping = v
			}
			out[k.Value] = append(out[k.Value], d)
		}
		for _, src := range yamledit.Merged(m) {
			walk(src, depth+1)
		}
	}
	walk(services, 0)
}
