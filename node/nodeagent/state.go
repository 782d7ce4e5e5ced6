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
	"syscall"
	"time"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/filesum"
	"github.com/gpurun/gpurun/node/install"
)

// RecordFormat is the format of the node record this gpurun writes, and
// the newest it reads (docs/upgrading.md). A record without a format is
// format 1: the record of the releases before formats were recorded, whose
// layout format 1 is. A newer format is refused (*install.FormatError).
const RecordFormat = 1

// Record is what the agent installed on a node, kept in a JSON file on the
// node (DefaultStatePath) so that an uninstall, run later and with no
// flags, undoes exactly that.
type Record struct {
	// Format is the record's format: RecordFormat when written (0,
	// absent, reads as 1).
	Format int `json:"format"`
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
	// Stat identifies the node file as it was when its content was last
	// found to be SHA256, so that status need not read it again while it
	// is unchanged.
	Stat *FileStat `json:"stat,omitempty"`
}

// FileStat identifies a file's content without reading it: its inode and
// size, and the times the kernel sets on every change of it (ctime cannot
// be set back from user space). Renaming another file over it (as every
// install does) changes the inode.
type FileStat struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	CtimeNS int64  `json:"ctime_ns"`
	// Seen is when the content was found to be the recorded one.
	Seen time.Time `json:"seen"`
}

// settleTime is how long before it was seen a file must have last changed
// for its FileStat to vouch for its content: a change in the same tick of
// the kernel's clock as the recording would leave the times as they were.
const settleTime = time.Second

// statFile returns a file's FileStat (Seen unset).
func statFile(path string) (FileStat, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return FileStat{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return FileStat{
		Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size,
		MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano(),
	}, nil
}

// vouches reports whether f, recorded when the content was checked,
// vouches for the content of a file whose FileStat is now cur.
func (f *FileStat) vouches(cur FileStat) bool {
	if f == nil {
		return false
	}
	same := f.Dev == cur.Dev && f.Ino == cur.Ino && f.Size == cur.Size && f.MtimeNS == cur.MtimeNS && f.CtimeNS == cur.CtimeNS
	return same && time.Unix(0, f.CtimeNS).Add(settleTime).Before(f.Seen)
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
	// Distribution is k3s or RKE2 when gpurun went into their containerd
	// template ("" for containerd's own config).
	Distribution install.Distribution `json:"distribution,omitempty"`
	// Config is containerd's config.toml (node path): for k3s and RKE2 the
	// one they generate from the template.
	Config string `json:"config"`
	// Embedded is k3s's or RKE2's containerd binary as the install found
	// it, so that status need not run it again while it is unchanged.
	Embedded *EmbeddedBinary `json:"embedded,omitempty"`
	// Program is the k3s or RKE2 binary and its version, likewise.
	Program *EmbeddedBinary `json:"program,omitempty"`
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

// EmbeddedBinary is a binary of k3s or RKE2 (their containerd, or k3s or
// rke2 itself) and the release it says it is.
type EmbeddedBinary struct {
	// Path is its node path.
	Path string `json:"path"`
	// Release is what its --version said ("2.0.4-k3s2", "v1.31.6+k3s1").
	Release string `json:"release"`
	// Stat identifies the file that said so.
	Stat FileStat `json:"stat"`
}

// Loaded identifies a containerd run and the configuration it read.
type Loaded struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
	ConfigSHA  string `json:"config_sha256"`
	DropInSHA  string `json:"drop_in_sha256,omitempty"`
}

// loadRecord reads the record; a missing file gives nil, a record in a
// format newer than RecordFormat a *install.FormatError.
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
	if r.Format > RecordFormat {
		return nil, &install.FormatError{What: "node record", Path: path, Format: r.Format, Newest: RecordFormat}
	}
	return &r, nil
}

// save writes the record atomically, in RecordFormat.
func (r *Record) save(path string) error {
	r.Format = RecordFormat
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

// fileSHA returns the hex SHA-256 of a file, read in small pieces (a
// binary is tens of MiB; status runs next to the agent in its memory
// limit), "" when it does not exist.
func fileSHA(path string) (string, error) {
	sum, err := filesum.SHA256(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return sum, err
}

// checkBinary says whether the node file of b (a path here) holds the
// content the agent copied: without reading it when its recorded FileStat
// vouches for it, else by its hash. missing says it is gone.
func checkBinary(path string, b *Binary) (ok, missing bool, err error) {
	cur, err := statFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, true, nil
	}
	if err != nil {
		return false, false, err
	}
	if b.Stat.vouches(cur) {
		return true, false, nil
	}
	got, err := fileSHA(path)
	if err != nil {
		return false, false, err
	}
	return got == b.SHA256, got == "", nil
}

// verify says whether b's node file (a path here) holds b.SHA256: by its
// recorded FileStat when that vouches for it, else by its hash, and then
// it records the FileStat (taken before the hash, and the same after it)
// when that vouches for the file from now on: once the file has not
// changed for settleTime.
func verify(path string, b *Binary) bool {
	before, err := statFile(path)
	if err != nil {
		return false
	}
	if b.Stat.vouches(before) {
		return true
	}
	before.Seen = time.Now()
	got, err := fileSHA(path)
	if err != nil || got != b.SHA256 {
		return false
	}
	if after, err := statFile(path); err == nil {
		after.Seen = before.Seen
		if after == before && (&before).vouches(after) {
			b.Stat = &before
		}
	}
	return true
}
