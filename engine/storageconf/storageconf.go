// Package storageconf reads containers/storage's configuration
// (storage.conf), where Podman and CRI-O learn their graph root, run root
// and storage driver: where a container's userdata, its /dev/shm tmpfs
// included, lies on the host.
package storageconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/pelletier/go-toml/v2"
)

// Path is storage.conf's node path.
const Path = "/etc/containers/storage.conf"

// The roots containers/storage uses for root when storage.conf does not
// say otherwise.
const (
	// DefaultGraphRoot is where root Podman keeps containers' userdata,
	// its /dev/shm tmpfs included.
	DefaultGraphRoot = "/var/lib/containers/storage"
	// DefaultRunRoot is where CRI-O keeps a pod's /dev/shm tmpfs (the
	// sandbox's userdata/shm).
	DefaultRunRoot = "/run/containers/storage"
)

// Conf is the part of storage.conf gpurun reads.
type Conf struct {
	Driver, GraphRoot, RunRoot string
}

// Read reads the storage.conf at file (a host path), with containers/
// storage's defaults for what it does not set; a missing file is all
// defaults.
func Read(file string) (Conf, error) {
	c := Conf{GraphRoot: DefaultGraphRoot, RunRoot: DefaultRunRoot}
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read %s: %w", file, err)
	}
	var f struct {
		Storage struct {
			Driver    string `toml:"driver"`
			GraphRoot string `toml:"graphroot"`
			RunRoot   string `toml:"runroot"`
		} `toml:"storage"`
	}
	if err := toml.Unmarshal(data, &f); err != nil {
		return c, fmt.Errorf("%s: %w", file, err)
	}
	c.Driver = f.Storage.Driver
	if f.Storage.GraphRoot != "" {
		c.GraphRoot = f.Storage.GraphRoot
	}
	if f.Storage.RunRoot != "" {
		c.RunRoot = f.Storage.RunRoot
	}
	return c, nil
}
