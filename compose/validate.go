package compose

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/compose-spec/compose-go/v2/schema"
	"go.yaml.in/yaml/v4"

	"github.com/gpurun/gpurun/compose/yamledit"
)

// validate checks the project's merged model against the compose schema
// and reports an error at the place in the files it names. Migrate
// validates the projects it is about to change: it never edits a project
// that `docker compose` would reject.
func (p *project) validate() error {
	if p.dict == nil {
		return nil
	}
	err := schema.Validate(p.dict)
	if err == nil {
		return nil
	}
	msg := err.Error()
	path, rest, _ := strings.Cut(msg, " ")
	if f, n := p.locate(strings.Split(path, ".")); n != nil {
		return f.Errorf(n, "%s %s (compose schema)", path, rest)
	}
	return fmt.Errorf("%s: %s (compose schema)", p.display(), msg)
}

// positioned returns err with the file, line and column of the place it
// names (a dotted path such as services.app.environment.A, or a service
// that cannot be extended), or err as it is.
func (p *project) positioned(err error) error {
	msg := err.Error()
	var path []string
	if m := errPath().FindStringSubmatch(msg); m != nil {
		path = strings.Split(strings.TrimSuffix(m[1], "."), ".")
	} else if m := errService().FindStringSubmatch(msg); m != nil {
		path = []string{"services", m[1]}
		if strings.Contains(msg, "extend") {
			path = append(path, "extends")
		}
	}
	if path != nil {
		if f, n := p.locate(path); n != nil {
			return f.Errorf(n, "%s", msg)
		}
	}
	return fmt.Errorf("%s: %w", p.display(), err)
}

var (
	errPath    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\b(services\.[A-Za-z0-9_.\-]+)`) })
	errService = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`service "([^"]+)"`) })
)

// locate finds the node a schema error's path names, in the last file
// that has the deepest part of it (later files override earlier ones).
func (p *project) locate(path []string) (*yamledit.File, *yaml.Node) {
	var bestFile *yamledit.File
	var best *yaml.Node
	bestDepth := -1
	for i := len(p.files) - 1; i >= 0; i-- {
		f := p.files[i].f
		for _, doc := range f.Docs {
			n, depth := walkPath(docRoot(doc), path)
			if n != nil && depth > bestDepth {
				bestFile, best, bestDepth = f, n, depth
			}
		}
	}
	return bestFile, best
}

// walkPath follows a dotted path (keys, list indexes; a key may itself
// hold dots) as far as it goes and returns the deepest node reached and
// how many path parts it used.
func walkPath(n *yaml.Node, path []string) (*yaml.Node, int) {
	used := 0
	for used < len(path) && n != nil {
		next, parts := step(n, path[used:])
		if next == nil {
			break
		}
		n, used = next, used+parts
	}
	return n, used
}

func step(n *yaml.Node, path []string) (*yaml.Node, int) {
	n = yamledit.Resolve(n)
	switch n.Kind {
	case yaml.SequenceNode:
		i, err := strconv.Atoi(path[0])
		if err != nil || i < 0 || i >= len(n.Content) {
			return nil, 0
		}
		return n.Content[i], 1
	case yaml.MappingNode:
		for parts := 1; parts <= len(path); parts++ {
			key := strings.Join(path[:parts], ".")
			if k, v, _ := yamledit.Lookup(n, key); k != nil {
				if v == nil || isNull(yamledit.Resolve(v)) {
					return k, parts
				}
				return v, parts
			}
		}
	}
	return nil, 0
}
