// Package install registers gpurun-runtime with a node's engines and takes it
// out again: it reads an engine's configuration under a host root, edits it
// with engineconf, writes it atomically with a backup, records what it
// changed in a state file so uninstall can undo exactly that, points gpurun's
// own policy at a runtime it must chain (an nvidia runtime that was the
// default), and reloads or restarts the engine when asked.
package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/unidiff"
	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/policy"
)

// RuntimeName is the name gpurun-runtime is registered under.
const RuntimeName = "gpurun"

// DefaultStatePath is where install records what it changed.
const DefaultStatePath = "/var/lib/gpurun/install-state.json"

// Options are common to every engine.
type Options struct {
	// HostRoot prefixes every file path on the node ("" or "/": this host;
	// "/host" in a DaemonSet that mounts the node's root there).
	HostRoot string
	// RuntimePath is gpurun-runtime as the engine will exec it (a path on
	// the node, not under HostRoot).
	RuntimePath string
	// StatePath and PolicyPath are node paths (HostRoot is added).
	StatePath  string
	PolicyPath string
	// DryRun prints the diff and changes nothing.
	DryRun bool
	// Out receives diffs and what was done.
	Out io.Writer
	// Now stamps backups; nil means time.Now.
	Now func() time.Time
}

func (o Options) host(p string) string {
	if o.HostRoot == "" || o.HostRoot == "/" {
		return p
	}
	return filepath.Join(o.HostRoot, p)
}

func (o Options) statePath() string {
	if o.StatePath == "" {
		return o.host(DefaultStatePath)
	}
	return o.host(o.StatePath)
}

func (o Options) policyPath() string {
	if o.PolicyPath == "" {
		return o.host(policy.DefaultConfigPath)
	}
	return o.host(o.PolicyPath)
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// StateFormat is the format of the state file's records that this gpurun
// writes, and the newest it reads (docs/upgrading.md). A record without a
// format is format 1: the records of the releases before formats were
// recorded, whose layout format 1 is.
const StateFormat = 1

// FormatError is a record (the node agent's, or a record of gpurun
// install's state file) in a format newer than this gpurun reads: a later
// release wrote it, and reading it as an older format could undo the
// wrong thing.
type FormatError struct {
	// What names the record ("install state", "node record"), Path its
	// file.
	What, Path string
	// Format is the record's; Newest is the newest this gpurun reads.
	Format, Newest int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s %s is format %d, and this gpurun (%s) reads formats up to %d: a later release of gpurun wrote it. "+
		"Run that release (or a later one) again, or take gpurun off with it, before this one (docs/upgrading.md)",
		e.What, e.Path, e.Format, version.String(), e.Newest)
}

// record is what one install changed in one engine config.
type record struct {
	// Format is the record's format (StateFormat when written; 0, absent,
	// reads as 1).
	Format int `json:"format"`
	// Change is the engine editor's record (docker.Change, containerd.Change).
	Change json.RawMessage `json:"change"`
	// DropIn is the drop-in file a containerd install wrote, if any.
	DropIn string `json:"drop_in,omitempty"`
	// Template is what an install added to a k3s or RKE2 containerd
	// template, if it edited one (the record's path is the template).
	Template *TemplateChange `json:"template,omitempty"`
	// Policy is what the install changed in gpurun's policy file.
	Policy *policyChange `json:"policy,omitempty"`
	// Backup is the copy of the config taken before the first change.
	Backup string `json:"backup,omitempty"`
	// Pending says the install was recorded but may not have written all
	// of it: it was killed (or failed) on the way. Uninstall undoes what
	// was written; a rerun of install finishes it (see commit).
	Pending bool `json:"pending,omitempty"`
	// InstalledAt is when.
	InstalledAt time.Time `json:"installed_at"`
}

// state is the state file: engine -> config path -> record.
type state map[string]map[string]record

// loadState reads the state file (a missing file is an empty state); a
// record in a format newer than StateFormat is a *FormatError.
func loadState(path string) (state, error) {
	st := state{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read install state: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("read install state %s: %w", path, err)
	}
	for _, recs := range st {
		for _, rec := range recs {
			if rec.Format > StateFormat {
				return nil, &FormatError{What: "install state", Path: path, Format: rec.Format, Newest: StateFormat}
			}
		}
	}
	return st, nil
}

// save writes the state file atomically, each record in StateFormat.
func (st state) save(path string) error {
	for engine, recs := range st {
		for p, rec := range recs {
			rec.Format = StateFormat
			st[engine][p] = rec
		}
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("write install state: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write install state: %w", err)
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644)
}

// recordFor loads the state file and the record of an earlier install of
// engine into path, decoding its change into C.
func recordFor[C any](o Options, engine, path string) (st state, rec record, ch C, recorded bool, err error) {
	if st, err = loadState(o.statePath()); err != nil {
		return nil, rec, ch, false, err
	}
	rec, recorded = st[engine][path]
	if recorded {
		if err = json.Unmarshal(rec.Change, &ch); err != nil {
			return nil, rec, ch, false, fmt.Errorf("install state %s: %w", o.statePath(), err)
		}
	}
	return st, rec, ch, recorded, nil
}

// forget ends an uninstall: it un-chains the policy and drops the record.
func (o Options) forget(st state, engine, path string, rec record, recorded bool) error {
	if err := o.unchain(rec.Policy); err != nil {
		return err
	}
	if !recorded {
		return nil
	}
	delete(st[engine], path)
	return st.save(o.statePath())
}

// ChainMarker is in the comment of the `runtime` line install writes into
// the policy when it chains the runtime that was the engine's default: the
// line is the install's, not the policy author's.
const ChainMarker = "chained by gpurun install"

// readConfig reads an engine config; a missing file reads as empty.
func readConfig(path string) ([]byte, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	return data, true, nil
}

// backup copies the current config aside before its first change (when it
// exists and no backup was taken yet) and returns the backup's path.
func (o Options) backup(path string, before []byte, existed bool, backup string) (string, error) {
	if !existed || backup != "" {
		return backup, nil
	}
	backup = fmt.Sprintf("%s.gpurun-%s.bak", path, o.now().UTC().Format("20060102T150405Z"))
	if err := atomicfile.Write(backup, before, 0o600); err != nil {
		return "", fmt.Errorf("back up %s: %w", path, err)
	}
	return backup, nil
}

// fileWrite is one file an install replaces.
type fileWrite struct {
	path string
	data []byte
}

// commit carries out an install in an order that a kill at any step
// leaves recoverable: the record first, marked pending, so that uninstall
// undoes whatever of it reached the disk and a rerun of install finishes
// it; then each file, replaced atomically (never partial); then the policy
// chained, if the record says so; then the record, no longer pending.
// The policy is the one write a rerun cannot work out again from the
// engine config, once that config names gpurun as its default.
func (o Options) commit(st state, engine, path string, rec record, writes []fileWrite) error {
	if st[engine] == nil {
		st[engine] = map[string]record{}
	}
	rec.Pending = true
	st[engine][path] = rec
	if err := st.save(o.statePath()); err != nil {
		return err
	}
	for _, w := range writes {
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", w.path, err)
		}
		if err := atomicfile.Write(w.path, w.data, 0o644); err != nil {
			return err
		}
	}
	return o.finish(st, engine, path, rec)
}

// finish completes an install recorded as pending: it chains the policy
// as recorded (unless it already says so) and clears the pending mark.
func (o Options) finish(st state, engine, path string, rec record) error {
	if rec.Policy != nil {
		if err := o.ensureChained(rec.Policy.Value); err != nil {
			return err
		}
	}
	rec.Pending = false
	if st[engine] == nil {
		st[engine] = map[string]record{}
	}
	st[engine][path] = rec
	return st.save(o.statePath())
}

// ensureChained makes the policy file's runtime the given one, unless it
// already is.
func (o Options) ensureChained(runtime string) error {
	path := o.policyPath()
	data, existed, err := readConfig(path)
	if err != nil {
		return err
	}
	if existed {
		if cur, err := policy.Parse(path, data); err == nil && cur.Runtime == runtime {
			return nil
		}
	}
	_, _, after, err := o.chain(runtime)
	if err != nil {
		return err
	}
	if err := o.writePolicy(after); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "%s: runtime = %q (gpurun-runtime hands over to the runtime that was the default)\n", path, runtime)
	return nil
}

// showDiff prints what a change would do.
func (o Options) showDiff(path string, before, after []byte) {
	if d := unidiff.Unified(path, before, after); d != "" {
		fmt.Fprint(o.Out, d)
	} else {
		fmt.Fprintf(o.Out, "%s: no change\n", path)
	}
}

// policyChange is what chaining changed in gpurun's policy file.
type policyChange struct {
	Created  bool   `json:"created,omitempty"`
	HadKey   bool   `json:"had_key,omitempty"`
	Previous string `json:"previous,omitempty"`
	Value    string `json:"value"`
}

// chain makes gpurun-runtime exec runtime (an existing wrapper such as
// nvidia-container-runtime) by setting `runtime` in the policy file: the
// key's line is replaced, or added; a missing file is created. The result
// must still be a valid policy.
func (o Options) chain(runtime string) (*policyChange, []byte, []byte, error) {
	path := o.policyPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return nil, nil, nil, err
	}
	ch := &policyChange{Created: !existed, Value: runtime}
	line := fmt.Sprintf("runtime = %q # %s: the runtime that was the engine's default", runtime, ChainMarker)
	var after []byte
	if !existed {
		after = []byte("# gpurun policy; see `gpurun --help` and docs/\n" + line + "\n")
	} else {
		cur, err := policy.Parse(path, before)
		if err != nil {
			return nil, nil, nil, err
		}
		lines := strings.SplitAfter(string(before), "\n")
		found := false
		for i, l := range lines {
			k, _, ok := strings.Cut(strings.TrimSpace(l), "=")
			if ok && strings.TrimSpace(k) == "runtime" {
				ch.HadKey, ch.Previous = true, cur.Runtime
				lines[i] = line + "\n"
				found = true
				break
			}
		}
		if !found {
			// Top-level keys must come before any table; the policy has none,
			// but be safe and insert at the top after leading comments.
			at := 0
			for at < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[at]), "#") {
				at++
			}
			lines = append(lines[:at], append([]string{line + "\n"}, lines[at:]...)...)
		}
		after = []byte(strings.Join(lines, ""))
	}
	if _, err := policy.Parse(path, after); err != nil {
		return nil, nil, nil, fmt.Errorf("chain %s: %w", runtime, err)
	}
	return ch, before, after, nil
}

// writePolicy writes the policy file chain prepared.
func (o Options) writePolicy(data []byte) error {
	path := o.policyPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o644); err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	return nil
}

// unchain undoes chain, if the policy still says what chain wrote.
func (o Options) unchain(ch *policyChange) error {
	if ch == nil {
		return nil
	}
	path := o.policyPath()
	data, existed, err := readConfig(path)
	if err != nil || !existed {
		return err
	}
	cur, err := policy.Parse(path, data)
	if err != nil {
		return err
	}
	if cur.Runtime != ch.Value {
		fmt.Fprintf(o.Out, "%s: runtime is now %q, not the chained %q: left as it is\n", path, cur.Runtime, ch.Value)
		return nil
	}
	if ch.Created {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		fmt.Fprintf(o.Out, "removed %s (created by install)\n", path)
		return nil
	}
	lines := strings.SplitAfter(string(data), "\n")
	for i, l := range lines {
		k, _, ok := strings.Cut(strings.TrimSpace(l), "=")
		if ok && strings.TrimSpace(k) == "runtime" {
			if ch.HadKey {
				lines[i] = fmt.Sprintf("runtime = %q\n", ch.Previous)
			} else {
				lines = append(lines[:i], lines[i+1:]...)
			}
			break
		}
	}
	if err := atomicfile.Write(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "%s: runtime restored\n", path)
	return nil
}

// Recorded is what gpurun install recorded of its change to one engine's
// config: what the admin asked for, so that doctor can tell when it no
// longer holds.
type Recorded struct {
	// SetAsDefault says the install made gpurun the default runtime.
	SetAsDefault bool
	// DropIn is the drop-in file gpurun's tables went into, "" for in
	// place.
	DropIn string
	// InstalledAt is when.
	InstalledAt time.Time
}

// ContainerdRecord finds, in the data of an install state file, what
// gpurun install recorded for the containerd config at configPath (a node
// path; a record the node agent made under its host root, such as
// /host/etc/containerd/config.toml, counts too). ok is false when there is
// none.
func ContainerdRecord(data []byte, configPath string) (r Recorded, ok bool, err error) {
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return r, false, fmt.Errorf("read install state: %w", err)
	}
	configPath = filepath.Clean(configPath)
	for _, p := range slices.Sorted(maps.Keys(st["containerd"])) {
		if p != configPath && !strings.HasSuffix(p, configPath) {
			continue
		}
		rec := st["containerd"][p]
		var ch containerd.Change
		if len(rec.Change) > 0 {
			if err := json.Unmarshal(rec.Change, &ch); err != nil {
				return r, false, fmt.Errorf("read install state: the record of %s: %w", p, err)
			}
		}
		return Recorded{SetAsDefault: ch.SetDefault, DropIn: rec.DropIn, InstalledAt: rec.InstalledAt}, true, nil
	}
	return r, false, nil
}
