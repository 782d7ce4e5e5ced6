package install

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gpurun/gpurun/engine/crio"
	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/hooksd"
	"github.com/gpurun/gpurun/engine/storageconf"
	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/policy"
)

// HookFileName is the name of gpurun's hook definition in a hooks.d
// directory.
const HookFileName = hooksd.HookFileName

// The engines that take gpurun's OCI hook from a hooks.d directory.
const (
	EnginePodman = "podman"
	EngineCRIO   = "crio"
)

// Default hooks.d directories, where neither engine's configuration sets
// hooks_dir. Podman, as root and without --hooks-dir, reads
// /usr/share/containers/oci/hooks.d and then /etc/containers/oci/hooks.d
// (the administrator's); CRI-O reads only the directories of its hooks_dir,
// which is /usr/share/containers/oci/hooks.d unless configured. Where
// containers.conf or crio.conf sets hooks_dir, install writes into the
// last directory it names (hooksd.PodmanDirs, hooksd.CRIODirs).
const (
	DefaultPodmanHooksDir = hooksd.HooksDirEtc
	DefaultCRIOHooksDir   = hooksd.HooksDirShare
)

// HookChange is what an install of the hook wrote: the install state's
// record of it, so that uninstall removes exactly that.
type HookChange struct {
	// HookFile is the hooks.d entry (a node path) and SHA256 its content.
	HookFile string `json:"hook_file"`
	SHA256   string `json:"sha256"`
	// Replaced is a backup of a different file of the same name that the
	// install replaced; uninstall puts it back.
	Replaced string `json:"replaced,omitempty"`
	// DropIn is the CRI-O drop-in (a node path) and DropInSHA256 its
	// content, when the install allowed the shm annotation.
	DropIn       string `json:"drop_in,omitempty"`
	DropInSHA256 string `json:"drop_in_sha256,omitempty"`
}

// Hooks installs gpurun's OCI hook for Podman or CRI-O: a hooks.d entry
// that runs `gpurun hook` at createRuntime for every container (the hook
// decides), and for CRI-O, when asked, a drop-in that lets pods size their
// /dev/shm with CRI-O's annotation. Options.RuntimePath is not used.
type Hooks struct {
	Options
	// Engine is EnginePodman or EngineCRIO.
	Engine string
	// HooksDir is the hooks.d directory (a node path); "" means the last
	// directory the engine reads (its hooks_dir, else its default; for
	// Uninstall, every directory recorded).
	HooksDir string
	// GPURunPath is gpurun as the runtime will exec it (a node path).
	GPURunPath string
	// PassPolicy passes Options.PolicyPath to the hook as --config.
	PassPolicy bool
	// ShmAnnotation, for CRI-O, is the annotation the drop-in allows
	// (crio.ShmAnnotation or CRIOShmAnnotationV1); "" for none.
	ShmAnnotation string
	// DropInDir is CRI-O's drop-in directory (a node path); "" means
	// crio.DropInDir.
	DropInDir string
}

func (h Hooks) validate() error {
	switch h.Engine {
	case EnginePodman:
		if h.ShmAnnotation != "" {
			return fmt.Errorf("--allow-shm-annotation is for CRI-O; Podman sizes /dev/shm with --shm-size or containers.conf shm_size")
		}
	case EngineCRIO:
	default:
		return fmt.Errorf("engine %q: want %q or %q", h.Engine, EnginePodman, EngineCRIO)
	}
	if h.HooksDir != "" && !filepath.IsAbs(h.HooksDir) {
		return fmt.Errorf("--hooks-dir %q: want an absolute path on the node", h.HooksDir)
	}
	if h.DropInDir != "" && !filepath.IsAbs(h.DropInDir) {
		return fmt.Errorf("CRI-O drop-in directory %q: want an absolute path on the node", h.DropInDir)
	}
	return nil
}

// engineDirs are the hooks.d directories the engine reads on the node, as
// its configuration files say.
func (h Hooks) engineDirs() (hooksd.Configured, error) {
	if h.Engine == EngineCRIO {
		return hooksd.CRIODirs(h.HostRoot)
	}
	return hooksd.PodmanDirs(h.HostRoot)
}

// hookFile returns the hooks.d entry's node path.
func (h Hooks) hookFile() (string, error) {
	dir := h.HooksDir
	if dir == "" {
		c, err := h.engineDirs()
		if err != nil {
			return "", fmt.Errorf("the hooks.d directory %s reads: %w (or pass --hooks-dir)", h.Engine, err)
		}
		dir = c.Last()
	}
	return filepath.Join(filepath.Clean(dir), HookFileName), nil
}

func (h Hooks) dropIn() string {
	dir := h.DropInDir
	if dir == "" {
		dir = crio.DropInDir
	}
	return filepath.Join(filepath.Clean(dir), crio.DropInName)
}

func (h Hooks) hookOptions() hooksd.HookOptions {
	o := hooksd.HookOptions{Path: h.GPURunPath}
	if h.PassPolicy {
		o.PolicyPath = h.PolicyPath
	}
	return o
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Install writes the hooks.d entry (and the CRI-O drop-in), backing up a
// different file of the same name, and records what it wrote. A second
// install changes nothing; one with other options rewrites gpurun's files.
// With DryRun it prints the diffs and changes nothing.
func (h Hooks) Install() error { return install[hookAdd](h.Options, h) }

// hookAdd is a hook install's own part of its change: the files, the
// record of them (ch; old, the earlier one's), and whether the hooks.d
// entry there now is someone else's, to be kept (replace).
type hookAdd struct {
	f       hookFiles
	ch, old HookChange
	replace bool
}

// key is the hook's engine in the state file: EnginePodman or EngineCRIO.
func (h Hooks) key() string { return h.Engine }

// edit works out the hook's files (plan) and their record, beside what an
// earlier install recorded.
func (h Hooks) edit(st state) (change[hookAdd], error) {
	f, err := h.plan()
	if err != nil {
		return change[hookAdd]{}, err
	}
	a := hookAdd{f: f}
	if rec, ok := st[h.Engine][f.here]; ok {
		if err := json.Unmarshal(rec.Change, &a.old); err != nil {
			return change[hookAdd]{}, fmt.Errorf("install state %s: %w", h.statePath(), err)
		}
	}
	a.ch = HookChange{HookFile: f.node, SHA256: digest(f.want), Replaced: a.old.Replaced}
	files := []fileDiff{{f.here, f.before, f.want, f.existed}}
	if f.dropNode != "" {
		a.ch.DropIn, a.ch.DropInSHA256 = f.dropNode, digest(f.dropWant)
		files = append(files, fileDiff{f.dropHere, f.dropBefore, f.dropWant, f.dropExisted})
	}
	// A different file of this name that no install of gpurun wrote is
	// someone else's: keep a copy, which uninstall puts back.
	a.replace = f.existed && f.hookChanged() && a.ch.Replaced == "" && !h.ours(st, f.here, f.before)
	changed := f.hookChanged() || f.dropChanged() || a.dropObsolete()
	return change[hookAdd]{path: f.here, files: files, changed: changed, own: a}, nil
}

// dropObsolete says an earlier install wrote a drop-in this one does not
// (a re-install without the annotation).
func (a hookAdd) dropObsolete() bool { return a.old.DropIn != "" && a.old.DropIn != a.ch.DropIn }

// unchanged says there is nothing to do, and records files an earlier
// install wrote and did not record (or recorded otherwise).
func (h Hooks) unchanged(st state, c change[hookAdd]) error {
	fmt.Fprintf(h.Out, "%s: gpurun hook already installed for %s; nothing to do\n", c.path, h.Engine)
	if c.hadOld && c.own.old == c.own.ch && !c.old.Pending {
		return nil
	}
	return h.finish(st, h.key(), c.path, h.hookRecord(c))
}

// keep backs up someone else's hooks.d entry of this name, takes out a
// drop-in an earlier install wrote that this one does not (first, so
// that the record of it stays until it is gone), and records the hook.
func (h Hooks) keep(c change[hookAdd]) (record, error) {
	f := c.own.f
	replaced, err := h.backup(f.here, f.before, c.own.replace, c.own.ch.Replaced)
	if err != nil {
		return record{}, err
	}
	c.own.ch.Replaced = replaced
	if c.own.dropObsolete() {
		if err := h.removeOwned(c.own.old.DropIn, c.own.old.DropInSHA256); err != nil {
			return record{}, err
		}
	}
	return h.hookRecord(c), nil
}

// hookRecord is the state's record of the hook's change: installed when
// it was first.
func (h Hooks) hookRecord(c change[hookAdd]) record {
	raw, _ := json.Marshal(c.own.ch) // strings only: it cannot fail
	installed := h.now().UTC()
	if c.hadOld {
		installed = c.old.InstalledAt
	}
	return record{Change: raw, DropIn: c.own.f.dropNode, Backup: c.own.ch.Replaced, InstalledAt: installed}
}

// report says which of the hook's files were written.
func (h Hooks) report(_ state, c change[hookAdd], rec record) error {
	f := c.own.f
	if f.hookChanged() {
		fmt.Fprintf(h.Out, "%s: gpurun hook installed for %s (%s hook at %s, every container; the hook decides)", f.here, h.Engine, h.GPURunPath, hooksd.HookStage)
		if rec.Backup != "" && rec.Backup != c.own.old.Replaced {
			fmt.Fprintf(h.Out, "; the previous file is kept as %s", rec.Backup)
		}
		fmt.Fprintln(h.Out)
	}
	if f.dropChanged() {
		fmt.Fprintf(h.Out, "%s: pods may set %s; restart CRI-O to apply: systemctl restart crio\n", f.dropHere, h.ShmAnnotation)
	}
	return nil
}

// apply says what would keep the hook from working: Podman and CRI-O
// read hooks.d at each container's start, and need no reload.
func (h Hooks) apply(change[hookAdd], bool) error {
	h.warnings()
	return nil
}

// hookFiles are the files a hook install writes: the hooks.d entry (its
// node and host paths, what it holds and would hold) and, with
// ShmAnnotation, CRI-O's drop-in that lets pods pass it.
type hookFiles struct {
	node, here         string
	before, want       []byte
	existed            bool
	dropNode, dropHere string
	dropBefore         []byte
	dropWant           []byte
	dropExisted        bool
}

// hookChanged says the install writes the hooks.d entry.
func (f hookFiles) hookChanged() bool { return !f.existed || string(f.before) != string(f.want) }

// dropChanged says the install writes CRI-O's drop-in.
func (f hookFiles) dropChanged() bool {
	return f.dropHere != "" && string(f.dropBefore) != string(f.dropWant)
}

// plan works out the hook's files, checked as doctor checks them: Podman
// and CRI-O refuse to load a hooks.d directory with an entry whose path
// is missing, which would stop every container start.
func (h Hooks) plan() (hookFiles, error) {
	var f hookFiles
	if err := h.validate(); err != nil {
		return f, err
	}
	want, err := hooksd.HookJSON(h.hookOptions())
	if err != nil {
		return f, err
	}
	if f.node, err = h.hookFile(); err != nil {
		return f, err
	}
	f.want = want
	if p := hooksd.Problems(f.node, want, h.executable); len(p) > 0 {
		return f, fmt.Errorf("%s (pass gpurun's path on the node with --hook-path)", strings.Join(p, "; "))
	}
	f.here = h.host(f.node)
	if f.before, f.existed, err = readConfig(f.here); err != nil {
		return f, err
	}
	if h.ShmAnnotation != "" {
		f.dropNode = h.dropIn()
		f.dropHere = h.host(f.dropNode)
		if f.dropWant, err = crio.ShmDropIn(h.ShmAnnotation); err != nil {
			return f, err
		}
		if f.dropBefore, f.dropExisted, err = readConfig(f.dropHere); err != nil {
			return f, err
		}
	}
	return f, nil
}

// Uninstall removes what Install recorded for this engine: the hooks.d
// entry (putting back a file it replaced) unless the other engine's install
// still uses the same file, and the CRI-O drop-in. Without HooksDir it
// removes every entry recorded for the engine. An entry nobody recorded is
// removed only if it runs `gpurun hook`.
func (h Hooks) Uninstall() error {
	if err := h.validate(); err != nil {
		return err
	}
	st, err := loadState(h.statePath())
	if err != nil {
		return err
	}
	var paths []string
	if h.HooksDir == "" {
		for p := range st[h.Engine] {
			paths = append(paths, p)
		}
		sort.Strings(paths)
	}
	if len(paths) == 0 {
		p, err := h.hookFile()
		if err != nil {
			return err
		}
		paths = []string{h.host(p)}
	}
	for _, here := range paths {
		if err := h.uninstallOne(st, here); err != nil {
			return err
		}
	}
	if h.DryRun {
		return nil
	}
	if len(st[h.Engine]) == 0 {
		delete(st, h.Engine)
	}
	return st.save(h.statePath())
}

func (h Hooks) uninstallOne(st state, here string) error {
	rec, recorded := st[h.Engine][here]
	var ch HookChange
	if recorded {
		if err := json.Unmarshal(rec.Change, &ch); err != nil {
			return fmt.Errorf("install state %s: %w", h.statePath(), err)
		}
	} else {
		fmt.Fprintf(h.Out, "%s: no install for %s recorded in %s\n", here, h.Engine, h.statePath())
	}
	data, existed, err := readConfig(here)
	if err != nil {
		return err
	}
	sharedWith := ""
	for _, other := range []string{EnginePodman, EngineCRIO} {
		if _, ok := st[other][here]; ok && other != h.Engine {
			sharedWith = other
		}
	}
	switch {
	case !existed:
		fmt.Fprintf(h.Out, "%s: does not exist; nothing to remove\n", here)
	case sharedWith != "":
		fmt.Fprintf(h.Out, "%s: kept: the %s install uses it too\n", here, sharedWith)
	case !hooksd.IsGPURunHook(data) && (!recorded || digest(data) != ch.SHA256):
		fmt.Fprintf(h.Out, "%s: does not run gpurun hook (changed since install?); left as it is\n", here)
	case h.DryRun:
		if ch.Replaced != "" {
			fmt.Fprintf(h.Out, "would put back %s from %s\n", here, ch.Replaced)
		} else {
			fmt.Fprintf(h.Out, "would remove %s\n", here)
		}
	case ch.Replaced != "":
		prev, err := os.ReadFile(ch.Replaced)
		if err != nil {
			return fmt.Errorf("put back %s: %w", here, err)
		}
		if err := atomicfile.Write(here, prev, 0o644); err != nil {
			return err
		}
		if err := os.Remove(ch.Replaced); err != nil {
			return fmt.Errorf("remove %s: %w", ch.Replaced, err)
		}
		fmt.Fprintf(h.Out, "%s: gpurun hook removed; the previous file is back\n", here)
	default:
		if err := os.Remove(here); err != nil {
			return fmt.Errorf("remove %s: %w", here, err)
		}
		fmt.Fprintf(h.Out, "%s: gpurun hook removed\n", here)
	}
	if ch.DropIn != "" {
		if h.DryRun {
			fmt.Fprintf(h.Out, "would remove %s\n", h.host(ch.DropIn))
		} else if err := h.removeOwned(ch.DropIn, ch.DropInSHA256); err != nil {
			return err
		}
	}
	if !h.DryRun && recorded {
		delete(st[h.Engine], here)
	}
	return nil
}

// removeOwned removes a file gpurun wrote (a node path), unless someone
// changed it since: then it says so and leaves it.
func (h Hooks) removeOwned(node, sum string) error {
	here := h.host(node)
	data, existed, err := readConfig(here)
	if err != nil || !existed {
		return err
	}
	if digest(data) != sum {
		fmt.Fprintf(h.Out, "%s: changed since gpurun wrote it; left as it is\n", here)
		return nil
	}
	if err := os.Remove(here); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", here, err)
	}
	fmt.Fprintf(h.Out, "%s: removed; restart CRI-O to apply: systemctl restart crio\n", here)
	return nil
}

// ours reports whether the hooks.d file at here was written by an install
// of gpurun (for any engine), or runs gpurun hook.
func (h Hooks) ours(st state, here string, data []byte) bool {
	for _, e := range []string{EnginePodman, EngineCRIO} {
		if _, ok := st[e][here]; ok {
			return true
		}
	}
	return hooksd.IsGPURunHook(data)
}

// executable checks that the node path p is an executable file on the
// node.
func (h Hooks) executable(p string) error {
	fi, err := hostpath.Stat(h.HostRoot, p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// warnings says what would keep the hook from working on this node: a
// hooks.d directory the engine does not read as configured, or that
// Podman's --hooks-dir cannot name, a policy that does not load, and a storage root where the hook would refuse to grow
// /dev/shm. The hook learns the root from each container's bundle
// (<root>/overlay-containers/<id>/userdata), wherever storage.conf puts it,
// but grows nothing through a symbolic link, and recognises only the
// overlay driver's layout.
func (h Hooks) warnings() {
	if h.Engine == EnginePodman && strings.Contains(h.HooksDir, ",") {
		fmt.Fprintf(h.Out, "warning: --hooks-dir %s holds a comma: `podman --hooks-dir` splits its value there and would not read this directory; name it in hooks_dir of containers.conf instead, or choose a directory without a comma\n", h.HooksDir)
	}
	if c, err := h.engineDirs(); err == nil && h.HooksDir != "" && !slices.Contains(c.Dirs, filepath.Clean(h.HooksDir)) {
		from := "by default"
		if c.From != "" {
			from = "as hooks_dir in " + h.host(c.From) + " says"
		}
		fix := "start it with --hooks-dir " + h.HooksDir
		if h.Engine == EngineCRIO {
			fix = "add it to hooks_dir in crio.conf and restart CRI-O"
		}
		fmt.Fprintf(h.Out, "warning: %s reads hooks.d from %s (%s), not %s: it runs the hook only if you %s\n", h.Engine, strings.Join(c.Dirs, ", "), from, h.HooksDir, fix)
	}
	path := h.policyPath()
	if _, err := policy.Load(path, false); err != nil {
		fmt.Fprintf(h.Out, "warning: %v: the hook will leave every container as it is until the policy loads\n", err)
		return
	}
	st, err := storageconf.Read(h.host(storageconf.Path))
	if err != nil {
		fmt.Fprintf(h.Out, "warning: %v: the hook learns the storage root from each container's bundle, but install cannot check it\n", err)
		return
	}
	key, root := "graphroot", st.GraphRoot
	if h.Engine == EngineCRIO {
		key, root = "runroot", st.RunRoot
	}
	if st.Driver != "" && st.Driver != "overlay" && st.Driver != "overlay2" {
		fmt.Fprintf(h.Out, "warning: %s sets driver = %q: %s then keeps /dev/shm under %s/%s-containers, which gpurun does not take for an engine's tmpfs, so GPU containers keep their /dev/shm (the overlay driver's %s is supported)\n",
			h.host(storageconf.Path), st.Driver, h.Engine, root, st.Driver, dirs.StorageContainersDir)
	}
	if resolved, err := filepath.EvalSymlinks(h.host(root)); err == nil && resolved != filepath.Clean(h.host(root)) {
		fmt.Fprintf(h.Out, "warning: %s %s goes through a symbolic link (to %s): the hook refuses to grow /dev/shm through a link; set %s to the real directory in %s\n",
			key, root, resolved, key, h.host(storageconf.Path))
	}
}

// underAny reports whether dir is one of roots or below one, allowing for
// /var/run being /run.
func underAny(dir string, roots []string) bool {
	alias := func(p string) []string {
		p = filepath.Clean(p)
		out := []string{p}
		if rest, ok := strings.CutPrefix(p, "/var/run"); ok && (rest == "" || rest[0] == '/') {
			out = append(out, "/run"+rest)
		}
		return out
	}
	for _, d := range alias(dir) {
		for _, r := range roots {
			if slices.ContainsFunc(alias(r), func(r string) bool { return r != "/" && (d == r || strings.HasPrefix(d, r+"/")) }) {
				return true
			}
		}
	}
	return false
}
