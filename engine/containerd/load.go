package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/gpurun/gpurun/internal/tomledit"
)

// DefaultConfigPath is the config containerd reads without --config.
const DefaultConfigPath = "/etc/containerd/config.toml"

// Generation says whose rules merge the files: containerd 1.x's or 2.x's.
type Generation int

// The generations.
const (
	// InferGeneration takes the main config's version: 2 is containerd
	// 1.x's, 3 and 4 are containerd 2.x's.
	InferGeneration Generation = iota
	// Containerd1 is containerd 1.6 and 1.7: an imported file's section
	// of a plugin replaces the whole section of that plugin, other
	// settings override when they are set, arrays are appended to.
	Containerd1
	// Containerd2 is containerd 2.3 and later: every file is migrated to
	// config version 4 (the CRI settings of a version 2 file move to the
	// CRI runtime and images plugins, [grpc] to the gRPC server plugin),
	// then merged key by key: tables are merged, every other value of a
	// plugin's section replaces the one before, arrays included.
	// (containerd 2.0 to 2.2 merge the same way, but migrate the merged
	// result instead of each file.)
	Containerd2
)

// String names the generation.
func (g Generation) String() string {
	switch g {
	case Containerd1:
		return "containerd 1.x"
	case Containerd2:
		return "containerd 2.x"
	}
	return "inferred"
}

// LoadOptions say where and how to read a config.
type LoadOptions struct {
	// Root is where the node's root is mounted ("" or "/": this host): the
	// config's path, its imports and their globs are node paths under it.
	Root string
	// Generation is whose merge rules apply (InferGeneration: the main
	// config's version says).
	Generation Generation
	// Overlay holds the content of files (by node path) to read instead of
	// the disk's, files that do not exist yet included: the configuration
	// as an edit would leave it.
	Overlay map[string][]byte
	// Exclude names files (node paths) that are not read even where a
	// config imports them: the configuration as it would be without
	// them (a drop-in of gpurun's that is about to be rewritten).
	Exclude []string
	// Release is the release of the containerd that reads the config
	// ("1.6.20", as `containerd --version` prints it), when known. It
	// says the generation (when Generation does not), and releases before
	// 1.6.29 and 1.7.16 match a relative glob in imports against
	// containerd's working directory ("/" under systemd), not the directory
	// of the file that names it. Without it, the rule of current releases
	// applies. A 1.x release is not taken for a version 3 or 4 config,
	// which containerd 1.x does not read.
	Release string
	// Containerd, when set, is a containerd binary (a node path) to ask
	// for its release (containerd --version, run chrooted into Root when
	// there is one), which fills in Release and Generation where they are
	// not set.
	Containerd string
	// Dump has that binary merge the files itself: its output of
	// `containerd --config PATH config dump` replaces the reading of the
	// files. Where that fails, the files are read, and Config.DumpErr says
	// why. (containerd is a large program: a dump costs tens of MiB for a
	// moment.)
	Dump bool
}

func (o LoadOptions) hosted() bool { return o.Root != "" && o.Root != "/" }

func (o LoadOptions) dump() bool { return o.Dump && o.Containerd != "" }

// host returns where a node path is here.
func (o LoadOptions) host(p string) string {
	if !o.hosted() {
		return p
	}
	return filepath.Join(o.Root, p)
}

// readFile reads a node file, from the overlay when it has it.
func (o LoadOptions) readFile(p string) ([]byte, error) {
	if data, ok := o.Overlay[p]; ok {
		return data, nil
	}
	return os.ReadFile(o.host(p))
}

// glob returns the node paths matching a node pattern, on disk and in the
// overlay, in lexical order.
func (o LoadOptions) glob(pattern string) ([]string, error) {
	matches, err := filepath.Glob(o.host(pattern))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range matches {
		if o.hosted() {
			rel, err := filepath.Rel(o.Root, m)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			m = "/" + rel
		}
		out = append(out, m)
	}
	for p := range o.Overlay {
		if ok, _ := filepath.Match(pattern, p); ok && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// file is one config file read.
type file struct {
	path    string
	doc     *tomledit.Doc
	version int // as written; 0 without a version key
}

// Load reads the containerd config at path (a node path; "" means
// DefaultConfigPath) and the files it imports, merged as o.Generation's
// containerd merges them. A missing main config is not an error: containerd
// then runs on its defaults (Config.Exists is false). Errors name the file,
// the line and the key.
func Load(ctx context.Context, path string, o LoadOptions) (*Config, error) {
	if path == "" {
		path = DefaultConfigPath
	}
	var releaseErr error
	if o.Containerd != "" && o.Release == "" {
		o.Release, releaseErr = release(ctx, o)
	}
	files, err := readAll(path, o)
	if len(files) > 0 && generationOf(o.Release) == Containerd1 && files[0].version >= 3 {
		// A containerd 1.x binary does not read a version 3 or 4 config:
		// another containerd does.
		o.Release = ""
		files, err = readAll(path, o)
	}
	if o.Generation == InferGeneration {
		o.Generation = generationOf(o.Release)
	}
	var c *Config
	switch {
	case errors.Is(err, fs.ErrNotExist) && len(files) == 0:
		c = &Config{Path: path, Generation: o.Generation}
		if c.Generation == InferGeneration {
			c.Generation = Containerd1
		}
		c.layout = 2
		if c.Generation == Containerd2 {
			c.layout = 4
		}
		c.tree = map[string]any{}
	case err != nil:
		if !o.dump() {
			return nil, err
		}
	default:
		if c, err = merge(path, files, o.Generation); err != nil && !o.dump() {
			return nil, err
		}
	}
	if c != nil {
		c.Release = o.Release
	}
	if !o.dump() {
		return c, nil
	}
	d, derr := dump(ctx, o, path)
	if derr != nil && releaseErr != nil {
		derr = releaseErr
	}
	if derr != nil {
		if c == nil {
			return nil, fmt.Errorf("%w (and containerd config dump: %v)", err, derr)
		}
		c.DumpErr = derr
		return c, nil
	}
	if c == nil {
		c = &Config{Path: path, Exists: true, Files: []string{path}, Release: o.Release}
	}
	if err := c.useDump(d); err != nil {
		c.DumpErr = err
	}
	return c, nil
}

// readAll reads the main config and, as containerd does, every file it
// imports: breadth first, each file once, each import resolved against the
// directory of the file that names it; a pattern with '*' is a glob, any
// other path must exist.
func readAll(path string, o LoadOptions) ([]file, error) {
	var files []file
	loaded := map[string]bool{}
	type pending struct {
		path string
		from *file // the importing file; nil for the main one
		line int
	}
	queue := []pending{{path: path}}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if loaded[p.path] || (p.from != nil && slices.Contains(o.Exclude, p.path)) {
			continue
		}
		data, err := o.readFile(p.path)
		if err != nil {
			if p.from == nil {
				return nil, fmt.Errorf("read %s: %w", p.path, err)
			}
			if errors.Is(err, fs.ErrNotExist) {
				return files, fmt.Errorf("%s:%d: imports %s, which does not exist: containerd does not start: %w", p.from.path, p.line, p.path, fs.ErrNotExist)
			}
			return files, fmt.Errorf("%s:%d: imports %s: %w: containerd does not start", p.from.path, p.line, p.path, err)
		}
		f, err := parseFile(p.path, data)
		if err != nil {
			return files, err
		}
		files = append(files, f)
		loaded[p.path] = true
		imports, err := importsOf(f)
		if err != nil {
			return files, err
		}
		cur := &files[len(files)-1]
		for _, im := range imports {
			resolved := filepath.Clean(im.path)
			switch {
			case filepath.IsAbs(resolved):
			case strings.Contains(resolved, "*") && globFromWorkDir(o.Release):
				resolved = filepath.Join("/", resolved)
			default:
				resolved = filepath.Join(filepath.Dir(p.path), resolved)
			}
			if !strings.Contains(resolved, "*") {
				queue = append(queue, pending{path: resolved, from: cur, line: im.line})
				continue
			}
			matches, err := o.glob(resolved)
			if err != nil {
				return files, fmt.Errorf("%s:%d: imports %q: %w", p.path, im.line, im.path, err)
			}
			for _, m := range matches {
				queue = append(queue, pending{path: m, from: cur, line: im.line})
			}
		}
	}
	return files, nil
}

// parseFile parses one config file and checks its version.
func parseFile(path string, data []byte) (file, error) {
	d, err := tomledit.Parse(path, data)
	if err != nil {
		var se *tomledit.SyntaxError
		if errors.As(err, &se) {
			return file{}, fmt.Errorf("%s:%d:%d: %w", path, se.Pos.Line, se.Pos.Column, se.Err)
		}
		return file{}, err
	}
	f := file{path: path, doc: d}
	v, ok := d.Tree["version"]
	if !ok {
		return f, nil
	}
	n, ok := v.(int64)
	if !ok {
		return file{}, f.typeError([]string{"version"}, v, "an integer")
	}
	if n < 1 || n > 4 {
		return file{}, fmt.Errorf("%s:%d: version: unsupported config version %d (gpurun knows 2, 3 and 4)", path, f.line([]string{"version"}), n)
	}
	f.version = int(n)
	return f, nil
}

// line returns the line where the file writes the key or table at path,
// 0 when it does not.
func (f file) line(path []string) int {
	return f.doc.Line(f.doc.Defines(path))
}

// typeError says that the value at path is not of the kind wanted.
func (f file) typeError(path []string, v any, want string) error {
	return fmt.Errorf("%s:%d: %s is %s, want %s", f.path, f.line(path), tomledit.KeyText(path), kindOf(v), want)
}

// kindOf names the kind of a decoded TOML value.
func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// anImport is one entry of a file's imports.
type anImport struct {
	path string
	line int
}

// importsOf returns a file's imports, with the line of each.
func importsOf(f file) ([]anImport, error) {
	v, ok := f.doc.Tree["imports"]
	if !ok {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, f.typeError([]string{"imports"}, v, "an array of strings")
	}
	line := f.line([]string{"imports"})
	var elems []tomledit.Value
	if i := f.doc.FindKV([]string{"imports"}); i >= 0 {
		elems = f.doc.KVs[i].Value.Elems
	}
	var out []anImport
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%s:%d: imports[%d] is %s, want a string", f.path, line, i, kindOf(e))
		}
		l := line
		if i < len(elems) && elems[i].Kind == unstable.String {
			l = f.doc.Line(elems[i].Start)
		}
		out = append(out, anImport{path: s, line: l})
	}
	return out, nil
}
