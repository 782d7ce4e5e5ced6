package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpurun/gpurun/atomicfile"
	"github.com/gpurun/gpurun/runtime/restart"
)

// Record is what the agent installed on a node, kept in a JSON file on the
// node (DefaultStatePath) so that an uninstall, run later and with no
// flags, undoes exactly that.
type Record struct {
	// Version is the gpurun version that last installed.
	Version string `json:"version"`
	// InstalledAt is when the first install happened.
	InstalledAt time.Time `json:"installed_at"`
	// BinDir is the node directory the binaries went to.
	BinDir string `json:"bin_dir"`
	// Binaries are the files copied onto the node.
	Binaries []Binary `json:"binaries"`
	// Policy is the policy file the agent wrote, if it manages one.
	Policy *PolicyRecord `json:"policy,omitempty"`
	// Containerd is the runtime handler registration.
	Containerd ContainerdRecord `json:"containerd"`
	// Dirs are directories the agent created, removed on uninstall when
	// empty (deepest first).
	Dirs []string `json:"dirs,omitempty"`
	// Loaded identifies the containerd run that is known to have read the
	// current configuration.
	Loaded *Loaded `json:"loaded,omitempty"`
	// Pending says what an uninstall had to leave, and why.
	Pending string `json:"pending,omitempty"`
}

// Binary is one file the agent copied onto the node.
type Binary struct {
	// Name is the file's name in the image and on the node.
	Name string `json:"name"`
	// Path is its node path.
	Path string `json:"path"`
	// SHA256 is the content the agent wrote.
	SHA256 string `json:"sha256"`
	// Backup is the node path of the file that was there before, restored
	// on uninstall.
	Backup string `json:"backup,omitempty"`
	// Adopted says the same file was there already: uninstall leaves it.
	Adopted bool `json:"adopted,omitempty"`
}

// PolicyRecord is the policy file the agent manages.
type PolicyRecord struct {
	// Path is the node path.
	Path string `json:"path"`
	// Created says there was no file before: uninstall removes it.
	Created bool `json:"created,omitempty"`
	// Backup is the node path of the previous file, restored on uninstall.
	Backup string `json:"backup,omitempty"`
}

// ContainerdRecord is the containerd part of an install.
type ContainerdRecord struct {
	// Config is containerd's config.toml (node path).
	Config string `json:"config"`
	// DropInDir is the drop-in directory, when one was used.
	DropInDir string `json:"drop_in_dir,omitempty"`
	// SetAsDefault says gpurun was made the default runtime handler.
	SetAsDefault bool `json:"set_as_default,omitempty"`
	// RuntimePath is gpurun-runtime's node path (options.BinaryName).
	RuntimePath string `json:"runtime_path"`
	// Policy is the policy file gpurun install chains a runtime in.
	Policy string `json:"policy"`
	// InstallState is the state file of gpurun install (node path).
	InstallState string `json:"install_state"`
	// CreatedInstallState says the agent's install created that file.
	CreatedInstallState bool `json:"created_install_state,omitempty"`
	// Restart is the restart mode the agent runs with.
	Restart restart.Mode `json:"restart"`
}

// Loaded identifies a containerd run and the configuration it read.
type Loaded struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
	ConfigSHA  string `json:"config_sha256"`
	DropInSHA  string `json:"drop_in_sha256,omitempty"`
}

// loadRecord reads the record; a missing file gives nil.
func loadRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read node record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read node record %s: %w", path, err)
	}
	return &r, nil
}

// save writes the record atomically.
func (r *Record) save(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write node record: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write node record: %w", err)
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644)
}

// binary returns the record of the binary name, or nil.
func (r *Record) binary(name string) *Binary {
	if r == nil {
		return nil
	}
	for i := range r.Binaries {
		if r.Binaries[i].Name == name {
			return &r.Binaries[i]
		}
	}
	return nil
}

// sha returns the hex SHA-256 of data.
func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// fileSHA returns the hex SHA-256 of a file, "" when it does not exist.
func fileSHA(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return sha(data), nil
}
