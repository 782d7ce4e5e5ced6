package hooksd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/pelletier/go-toml/v2"
)

// Configured is the hooks.d directories an engine reads on a node.
type Configured struct {
	// Dirs are node paths in the engine's order: an entry in a later one
	// masks one of the same name in an earlier one.
	Dirs []string
	// From is the configuration file (a node path) whose hooks_dir set
	// Dirs, or "" where none does and Dirs are the engine's default.
	From string
}

// Last is the directory whose entries mask the others': where an install
// puts gpurun's entry.
func (c Configured) Last() string { return c.Dirs[len(c.Dirs)-1] }

// PodmanDirs returns the hooks.d directories root Podman reads on the node
// whose root filesystem is at root ("" or "/": this machine), without
// --hooks-dir: [engine] hooks_dir of the last containers.conf(5) that sets
// it to a list that is not empty, else Dirs(). The files are read as
// Podman reads them without CONTAINERS_CONF (which replaces them all for
// the process that sets it): /usr/share's, its drop-ins, /etc's, its
// drop-ins, a drop-in directory's *.conf in the order of their names.
func PodmanDirs(root string) (Configured, error) {
	files := []string{
		"/usr/share/containers/containers.conf",
		"/usr/share/containers/containers.conf.d/*.conf",
		"/etc/containers/containers.conf",
		"/etc/containers/containers.conf.d/*.conf",
	}
	return configured(root, files, Dirs(), func(data []byte) (*[]string, error) {
		var f struct {
			Engine struct {
				HooksDir *[]string `toml:"hooks_dir"`
			} `toml:"engine"`
		}
		err := toml.Unmarshal(data, &f)
		return f.Engine.HooksDir, err
	})
}

// CRIODirs returns the hooks.d directories CRI-O reads on the node whose
// root filesystem is at root: [crio.runtime] hooks_dir of the last of
// crio.conf(5) and its drop-ins (in the order of their names) that sets it
// to a list that is not empty, else HooksDirShare.
func CRIODirs(root string) (Configured, error) {
	files := []string{"/etc/crio/crio.conf", "/etc/crio/crio.conf.d/*.conf"}
	return configured(root, files, []string{HooksDirShare}, func(data []byte) (*[]string, error) {
		var f struct {
			CRIO struct {
				Runtime struct {
					HooksDir *[]string `toml:"hooks_dir"`
				} `toml:"runtime"`
			} `toml:"crio"`
		}
		err := toml.Unmarshal(data, &f)
		return f.CRIO.Runtime.HooksDir, err
	})
}

// configured reads files (node paths, some of them globs) under root in
// order, each with hooksDir, and returns the last hooks_dir set, else def.
// A file that is missing is skipped, and so is an empty hooks_dir (Podman
// then reads its defaults); a file that does not parse, or names a
// relative directory, is an error naming it.
func configured(root string, files, def []string, hooksDir func([]byte) (*[]string, error)) (Configured, error) {
	c := Configured{Dirs: def}
	host := func(p string) string { return filepath.Join(root, p) }
	for _, pattern := range files {
		names := []string{pattern}
		if filepath.Base(pattern) == "*.conf" {
			matches, err := filepath.Glob(host(pattern))
			if err != nil {
				return c, fmt.Errorf("list %s: %w", pattern, err)
			}
			names = names[:0]
			for _, m := range matches {
				names = append(names, filepath.Join(filepath.Dir(pattern), filepath.Base(m)))
			}
			slices.Sort(names)
		}
		for _, name := range names {
			data, err := os.ReadFile(host(name))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return c, fmt.Errorf("read %s: %w", host(name), err)
			}
			dirs, err := hooksDir(data)
			var derr *toml.DecodeError
			if errors.As(err, &derr) {
				row, col := derr.Position()
				return c, fmt.Errorf("%s:%d:%d: %w", host(name), row, col, err)
			}
			if err != nil {
				return c, fmt.Errorf("%s: %w", host(name), err)
			}
			if dirs == nil || len(*dirs) == 0 {
				continue
			}
			for _, d := range *dirs {
				if !filepath.IsAbs(d) {
					return c, fmt.Errorf("%s: hooks_dir %q: want an absolute path", host(name), d)
				}
			}
			c = Configured{Dirs: *dirs, From: name}
		}
	}
	return c, nil
}
