package shmstats

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/gpurun/gpurun/engine/dirs"
)

// podman finds Podman's running containers under its storage roots: the
// bundle <graph root>/overlay-containers/<id>/userdata/config.json, the
// pid in <run root>/overlay-containers/<id>/userdata/pidfile (either root
// may hold either file), the name in the graph root's containers.json.
func (c *collector) podman(roots []string) ([]found, error) {
	type files struct{ config, pidfile string }
	byID := map[string]*files{}
	var order []string
	names := map[string]string{}
	var errs []error
	for _, r := range roots {
		dir := c.host(filepath.Join(r, dirs.StorageContainersDir))
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		readNames(filepath.Join(dir, "containers.json"), names)
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			ud := filepath.Join(dir, e.Name(), "userdata")
			fl := byID[e.Name()]
			if fl == nil {
				fl = &files{}
				byID[e.Name()] = fl
				order = append(order, e.Name())
			}
			if p := filepath.Join(ud, "config.json"); exists(p) {
				fl.config = p
			}
			if p := filepath.Join(ud, "pidfile"); exists(p) {
				fl.pidfile = p
			}
		}
	}
	var out []found
	for _, id := range order {
		fl := byID[id]
		if fl.config == "" || fl.pidfile == "" {
			continue
		}
		pid, ok := c.livePID(fl.pidfile)
		if !ok {
			continue
		}
		spec, err := c.loadSpec(fl.config)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		f := fromSpec(spec)
		f.c.Engine, f.c.ID, f.c.PID = EnginePodman, id, pid
		f.c.Name = names[id]
		out = append(out, f)
	}
	return out, errors.Join(errs...)
}

// readNames adds the first name of each container in a containers/storage
// containers.json to names; a file it cannot read adds nothing.
func readNames(path string, names map[string]string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var list []struct {
		ID    string   `json:"id"`
		Names []string `json:"names"`
	}
	if json.Unmarshal(data, &list) != nil {
		return
	}
	for _, c := range list {
		if len(c.Names) > 0 {
			names[c.ID] = c.Names[0]
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
