package compose

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultFileNames are the files `docker compose` looks for, in its order.
var DefaultFileNames = []string{"compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml"}

// DefaultOverrideFileNames are the override files `docker compose` adds to
// a default file found in the same directory, in its order.
var DefaultOverrideFileNames = []string{"compose.override.yml", "compose.override.yaml", "docker-compose.override.yml", "docker-compose.override.yaml"}

// projectSpec is one project to migrate: its files in override order and
// the directory relative paths start from.
type projectSpec struct {
	files    []string // absolute
	workDir  string   // absolute
	envFiles []string // absolute; nil: the project's .env
	// display maps an absolute path to the path to show.
	display map[string]string
}

// discover turns the options into projects.
func discover(opts Options) ([]projectSpec, error) {
	specs, err := discoverFiles(opts)
	if err != nil || len(opts.EnvFiles) == 0 {
		return specs, err
	}
	cwd := opts.WorkDir
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
	}
	var envFiles []string
	for _, f := range opts.EnvFiles {
		p := f
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := regularFile(p, "--env-file "+f); err != nil {
			return nil, err
		}
		envFiles = append(envFiles, p)
	}
	for i := range specs {
		specs[i].envFiles = envFiles
	}
	return specs, nil
}

func discoverFiles(opts Options) ([]projectSpec, error) {
	cwd := opts.WorkDir
	if cwd == "" {
		var err error
		if cwd, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
	}
	d := &discovery{cwd: cwd, display: map[string]string{}}
	if len(opts.Files) > 0 && len(opts.Paths) > 0 {
		return nil, errors.New("give compose files with -f or as PATH arguments, not both")
	}
	if opts.ProjectDir != "" {
		d.projectDir = d.abs(opts.ProjectDir)
		if fi, err := os.Stat(d.projectDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--project-directory %s: not a directory", opts.ProjectDir)
		}
	}
	switch {
	case len(opts.Files) > 0:
		return d.files(opts.Files)
	case len(opts.Paths) > 0:
		return d.paths(opts.Paths)
	}
	// The files `docker compose` would use: COMPOSE_FILE, else a default
	// file in the project directory or the working directory or a parent.
	start := cmp.Or(d.projectDir, cwd)
	if specs, err := d.composeFile(envMap(opts.Environ), start); err != nil || specs != nil {
		return specs, err
	}
	for dir := start; ; dir = filepath.Dir(dir) {
		if files := defaultFiles(dir); len(files) > 0 {
			spec := projectSpec{workDir: cmp.Or(d.projectDir, dir), display: d.display}
			for _, f := range files {
				spec.files = append(spec.files, d.add(shortPath(cwd, f), f))
			}
			return []projectSpec{spec}, nil
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return nil, fmt.Errorf("no compose file (%s) in %s or a parent directory; name one with -f", strings.Join(DefaultFileNames, ", "), start)
}

// discovery is one search for compose files: the working directory, the
// project directory (--project-directory, "" when not given), and each
// file's name as the user gave it, for reports.
type discovery struct {
	cwd, projectDir string
	display         map[string]string
}

// abs is p from the working directory.
func (d *discovery) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(d.cwd, p)
}

// add records the name a file was given by (the first one) and returns
// its absolute path.
func (d *discovery) add(given, absPath string) string {
	if _, ok := d.display[absPath]; !ok {
		d.display[absPath] = given
	}
	return absPath
}

// workDir is a project's directory: --project-directory, else the
// directory of its first file.
func (d *discovery) workDir(first string) string {
	return cmp.Or(d.projectDir, filepath.Dir(first))
}

// files is the one project of the -f files.
func (d *discovery) files(files []string) ([]projectSpec, error) {
	spec := projectSpec{display: d.display}
	for _, f := range files {
		if f == "-" {
			return nil, errors.New("-f -: reading a compose file from stdin is not supported; name the file")
		}
		if err := regularFile(d.abs(f), f); err != nil {
			return nil, err
		}
		spec.files = append(spec.files, d.add(f, d.abs(f)))
	}
	spec.workDir = d.workDir(spec.files[0])
	return []projectSpec{spec}, nil
}

// paths are the projects of PATH arguments: a file is a project of its
// own, a directory holds the projects found in it or below.
func (d *discovery) paths(paths []string) ([]projectSpec, error) {
	var specs []projectSpec
	for _, p := range paths {
		fi, err := os.Stat(d.abs(p))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if !fi.IsDir() {
			if err := regularFile(d.abs(p), p); err != nil {
				return nil, err
			}
			specs = append(specs, projectSpec{files: []string{d.add(p, d.abs(p))}, workDir: d.workDir(d.abs(p)), display: d.display})
			continue
		}
		found, err := searchDir(d.abs(p), p, d.display)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no compose files (%s) in it or below", p, strings.Join(DefaultFileNames, ", "))
		}
		specs = append(specs, found...)
	}
	return specs, nil
}

// composeFile is the project COMPOSE_FILE names (its files separated by
// COMPOSE_PATH_SEPARATOR, relative ones from start), nil when it names
// none.
func (d *discovery) composeFile(env map[string]string, start string) ([]projectSpec, error) {
	cf := env["COMPOSE_FILE"]
	if cf == "" {
		return nil, nil
	}
	sep := cmp.Or(env["COMPOSE_PATH_SEPARATOR"], string(os.PathListSeparator))
	spec := projectSpec{display: d.display}
	for _, f := range strings.Split(cf, sep) {
		if f == "" {
			continue
		}
		p := f
		if !filepath.IsAbs(p) {
			p = filepath.Join(start, p)
		}
		if err := regularFile(p, f+" (from COMPOSE_FILE)"); err != nil {
			return nil, err
		}
		spec.files = append(spec.files, d.add(f, p))
	}
	if len(spec.files) == 0 {
		return nil, nil
	}
	spec.workDir = d.workDir(spec.files[0])
	return []projectSpec{spec}, nil
}

// shortPath returns p relative to dir when p is in dir or below, else p.
func shortPath(dir, p string) string {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return p
	}
	return rel
}

// regularFile checks that path (shown as given) is a regular file.
func regularFile(path, given string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", given, errors.Unwrap(err))
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", given)
	}
	return nil
}

// defaultFiles returns the default compose file in dir and its override,
// as `docker compose` picks them (the first name found of each list).
func defaultFiles(dir string) []string {
	var out []string
	for _, names := range [][]string{DefaultFileNames, DefaultOverrideFileNames} {
		for _, n := range names {
			p := filepath.Join(dir, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				out = append(out, p)
				break
			}
		}
		if len(out) == 0 {
			return nil
		}
	}
	return out
}

// isComposeName reports whether a file name looks like a compose file:
// compose*.y(a)ml or docker-compose*.y(a)ml.
func isComposeName(name string) bool {
	ext := filepath.Ext(name)
	if ext != ".yml" && ext != ".yaml" {
		return false
	}
	return strings.HasPrefix(name, "compose") || strings.HasPrefix(name, "docker-compose")
}

// searchDir finds the projects in dir and below: in each directory the
// default project (a default file and its override), and every other
// compose-named file (docker-compose.gpu.yml, compose.prod.yaml, ...) as a
// project of its own. Hidden directories, node_modules and vendor are
// skipped.
func searchDir(dir, given string, display map[string]string) ([]projectSpec, error) {
	var specs []projectSpec
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != dir && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor") {
			return filepath.SkipDir
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		show := func(p string) string {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return p
			}
			return filepath.Join(given, rel)
		}
		def := defaultFiles(path)
		if len(def) > 0 {
			spec := projectSpec{workDir: path, display: display}
			for _, f := range def {
				if _, ok := display[f]; !ok {
					display[f] = show(f)
				}
				spec.files = append(spec.files, f)
			}
			specs = append(specs, spec)
		}
		for _, e := range entries {
			p := filepath.Join(path, e.Name())
			if !e.Type().IsRegular() || !isComposeName(e.Name()) || slices.Contains(def, p) {
				continue
			}
			if slices.Contains(DefaultOverrideFileNames, e.Name()) {
				continue // an override without its main file is no project
			}
			if _, ok := display[p]; !ok {
				display[p] = show(p)
			}
			specs = append(specs, projectSpec{files: []string{p}, workDir: path, display: display})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", given, err)
	}
	return specs, nil
}
