package install

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/crio"
	"github.com/gpurun/gpurun/engine/hooksd"
	"github.com/gpurun/gpurun/engine/storageconf"
)

// hookRoot is a node root with gpurun installed at /usr/local/bin/gpurun.
func hookRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "usr/local/bin/gpurun")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func hooksFor(root, engine string, out *bytes.Buffer) Hooks {
	return Hooks{Options: opts(root, out), Engine: engine, GPURunPath: "/usr/local/bin/gpurun"}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// stateOf returns the engines and paths recorded in the state file.
func stateOf(t *testing.T, root string) map[string]map[string]record {
	t.Helper()
	st, err := loadState(filepath.Join(root, "var/lib/gpurun/state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestHooksInstallRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		engine   string
		dir      string // --hooks-dir, "" for the default
		policy   bool
		ann      string
		wantFile string // relative to the root
		wantDrop string
	}{
		{"podman, default dir", EnginePodman, "", false, "", "etc/containers/oci/hooks.d/gpurun.json", ""},
		{"podman, own dir, policy", EnginePodman, "/srv/hooks", true, "", "srv/hooks/gpurun.json", ""},
		{"crio, default dir", EngineCRIO, "", false, "", "usr/share/containers/oci/hooks.d/gpurun.json", ""},
		{"crio with the shm annotation", EngineCRIO, "", false, crio.ShmAnnotation, "usr/share/containers/oci/hooks.d/gpurun.json", "etc/crio/crio.conf.d/99-gpurun.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := hookRoot(t)
			var out bytes.Buffer
			h := hooksFor(root, tt.engine, &out)
			h.HooksDir, h.PassPolicy, h.ShmAnnotation = tt.dir, tt.policy, tt.ann
			file := filepath.Join(root, tt.wantFile)
			wantJSON, err := hooksd.HookJSON(h.hookOptions())
			if err != nil {
				t.Fatal(err)
			}
			if tt.policy != (strings.Contains(string(wantJSON), `"--config"`) && strings.Contains(string(wantJSON), `"`+h.PolicyPath+`"`)) {
				t.Fatalf("policy passed %v, want %v: %s", !tt.policy, tt.policy, wantJSON)
			}

			dry := h
			dry.DryRun = true
			if err := dry.Install(); err != nil {
				t.Fatal(err)
			}
			if exists(file) || exists(filepath.Join(root, "var/lib/gpurun/state.json")) || !strings.Contains(out.String(), `+  "version": "1.0.0",`) {
				t.Fatalf("dry run wrote, or printed no diff:\n%s", out.String())
			}

			if err := h.Install(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, file); got != string(wantJSON) {
				t.Errorf("%s =\n%s\nwant\n%s", tt.wantFile, got, wantJSON)
			}
			if tt.wantDrop != "" {
				wantDrop, _ := crio.ShmDropIn(tt.ann)
				if got := read(t, filepath.Join(root, tt.wantDrop)); got != string(wantDrop) {
					t.Errorf("drop-in =\n%s", got)
				}
			}
			rec, ok := stateOf(t, root)[tt.engine][file]
			if !ok {
				t.Fatalf("no record for %s in %v", file, stateOf(t, root))
			}
			var ch HookChange
			if err := json.Unmarshal(rec.Change, &ch); err != nil || ch.HookFile != "/"+tt.wantFile || ch.SHA256 != digest(wantJSON) {
				t.Errorf("recorded %+v, %v", ch, err)
			}

			// Idempotent.
			out.Reset()
			stBefore := read(t, filepath.Join(root, "var/lib/gpurun/state.json"))
			if err := h.Install(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "nothing to do") || read(t, filepath.Join(root, "var/lib/gpurun/state.json")) != stBefore {
				t.Errorf("second install changed something:\n%s", out.String())
			}

			// Uninstall removes exactly it.
			out.Reset()
			un := h
			un.ShmAnnotation = ""
			if err := un.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if exists(file) || (tt.wantDrop != "" && exists(filepath.Join(root, tt.wantDrop))) {
				t.Errorf("uninstall left files:\n%s", out.String())
			}
			if st := stateOf(t, root); len(st[tt.engine]) != 0 {
				t.Errorf("state after uninstall: %v", st)
			}
			if !exists(filepath.Join(root, "usr/local/bin/gpurun")) {
				t.Error("uninstall removed gpurun itself")
			}
		})
	}
}

func TestHooksSharedDirectory(t *testing.T) {
	root := hookRoot(t)
	var out bytes.Buffer
	podman := hooksFor(root, EnginePodman, &out)
	crio := hooksFor(root, EngineCRIO, &out)
	podman.HooksDir, crio.HooksDir = "/etc/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"
	file := filepath.Join(root, "etc/containers/oci/hooks.d/gpurun.json")
	for _, h := range []Hooks{podman, crio} {
		if err := h.Install(); err != nil {
			t.Fatal(err)
		}
	}
	if err := podman.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if !exists(file) || !strings.Contains(out.String(), "the crio install uses it too") {
		t.Fatalf("uninstalling podman removed CRI-O's hook:\n%s", out.String())
	}
	if err := crio.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if exists(file) {
		t.Fatal("the last uninstall kept the hook")
	}
}

func TestHooksReplacedFileComesBack(t *testing.T) {
	root := hookRoot(t)
	var out bytes.Buffer
	h := hooksFor(root, EnginePodman, &out)
	file := filepath.Join(root, "etc/containers/oci/hooks.d/gpurun.json")
	const theirs = `{"version":"1.0.0","hook":{"path":"/opt/other/gpurun-hook"},"when":{"always":true},"stages":["prestart"]}` + "\n"
	write(t, file, theirs)
	if err := h.Install(); err != nil {
		t.Fatal(err)
	}
	if read(t, file) == theirs || !strings.Contains(out.String(), "the previous file is kept as") {
		t.Fatalf("install did not replace and back up:\n%s", out.String())
	}
	// A second install keeps the one backup.
	if err := h.Install(); err != nil {
		t.Fatal(err)
	}
	baks, _ := filepath.Glob(file + ".gpurun-*.bak")
	if len(baks) != 1 {
		t.Fatalf("backups %v", baks)
	}
	if err := h.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if read(t, file) != theirs {
		t.Errorf("uninstall did not put the previous file back:\n%s", out.String())
	}
	if baks, _ := filepath.Glob(file + ".gpurun-*.bak"); len(baks) != 0 {
		t.Errorf("backup left: %v", baks)
	}
}

func TestHooksUninstallLeavesForeignFiles(t *testing.T) {
	root := hookRoot(t)
	var out bytes.Buffer
	h := hooksFor(root, EnginePodman, &out)
	file := filepath.Join(root, "etc/containers/oci/hooks.d/gpurun.json")
	const theirs = `{"version":"1.0.0","hook":{"path":"/usr/bin/something"},"when":{"always":true},"stages":["prestart"]}`
	write(t, file, theirs)
	if err := h.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if read(t, file) != theirs || !strings.Contains(out.String(), "left as it is") {
		t.Errorf("uninstall without a record touched a foreign file:\n%s", out.String())
	}
	// Without a record, gpurun's own entry (a lost state file) is removed.
	own, _ := hooksd.HookJSON(h.hookOptions())
	write(t, file, string(own))
	if err := h.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if exists(file) {
		t.Error("gpurun's own unrecorded entry was kept")
	}
}

func TestHooksChangedDropInIsLeft(t *testing.T) {
	root := hookRoot(t)
	var out bytes.Buffer
	h := hooksFor(root, EngineCRIO, &out)
	h.ShmAnnotation = crio.ShmAnnotationV1
	if err := h.Install(); err != nil {
		t.Fatal(err)
	}
	drop := filepath.Join(root, "etc/crio/crio.conf.d/99-gpurun.conf")
	write(t, drop, read(t, drop)+"# edited by hand\n")
	if err := h.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if !exists(drop) || !strings.Contains(out.String(), "changed since gpurun wrote it") {
		t.Errorf("an edited drop-in was removed:\n%s", out.String())
	}
	if exists(filepath.Join(root, "usr/share/containers/oci/hooks.d/gpurun.json")) {
		t.Error("hook kept")
	}
}

func TestHooksRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(*testing.T, *Hooks)
		err  string
	}{
		{"missing gpurun", func(t *testing.T, h *Hooks) { h.GPURunPath = "/usr/bin/gpurun" }, "--hook-path"},
		{"gpurun not executable", func(t *testing.T, h *Hooks) {
			if err := os.Chmod(filepath.Join(h.HostRoot, "usr/local/bin/gpurun"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "hook.path: /usr/local/bin/gpurun is not an executable file"},
		{"relative gpurun", func(t *testing.T, h *Hooks) { h.GPURunPath = "gpurun" }, "clean absolute path"},
		{"unknown engine", func(t *testing.T, h *Hooks) { h.Engine = "docker" }, `engine "docker"`},
		{"annotation for podman", func(t *testing.T, h *Hooks) { h.ShmAnnotation = crio.ShmAnnotation }, "for CRI-O"},
		{"unknown annotation", func(t *testing.T, h *Hooks) { h.Engine, h.ShmAnnotation = EngineCRIO, "io.kubernetes.cri-o.Devices" }, "want"},
		{"relative hooks dir", func(t *testing.T, h *Hooks) { h.HooksDir = "hooks.d" }, "--hooks-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := hookRoot(t)
			var out bytes.Buffer
			h := hooksFor(root, EnginePodman, &out)
			tt.edit(t, &h)
			err := h.Install()
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Install = %v, want an error with %q", err, tt.err)
			}
			files, _ := filepath.Glob(filepath.Join(root, "etc/containers/oci/hooks.d/*"))
			more, _ := filepath.Glob(filepath.Join(root, "usr/share/containers/oci/hooks.d/*"))
			if len(files)+len(more) != 0 || exists(filepath.Join(root, "var/lib/gpurun/state.json")) {
				t.Errorf("a refused install wrote %v %v", files, more)
			}
		})
	}
}

// TestHooksWarnings: a hooks.d directory the engine does not read as
// configured, or that Podman cannot be pointed at (a comma in it), is
// warned about. The hook learns the storage root from each
// bundle, so engine_roots no longer matter; install warns when the root is
// one the hook would refuse (through a symbolic link) or a layout it does
// not know (another storage driver).
func TestHooksWarnings(t *testing.T) {
	tests := []struct {
		name, engine, policy, storage string
		link                          string // a root made a symbolic link to /mnt/real
		hooksDir                      string // a node path; "" for the engine's default
		engineConf                    string // containers.conf (Podman) or crio.conf (CRI-O) in /etc
		warn                          string // "" for none
	}{
		{name: "Podman, defaults", engine: EnginePodman},
		{name: "Podman, engine_roots without its graph root", engine: EnginePodman, policy: "engine_roots = [\"/var/lib/docker\"]\n"},
		{name: "Podman, graph root moved", engine: EnginePodman, storage: "[storage]\ndriver = \"overlay\"\ngraphroot = \"/srv/containers\"\n"},
		{name: "CRI-O, defaults", engine: EngineCRIO},
		{name: "Podman, graph root through a link", engine: EnginePodman, link: "var/lib/containers/storage", warn: "graphroot /var/lib/containers/storage goes through a symbolic link"},
		{name: "CRI-O, run root through a link", engine: EngineCRIO, storage: "[storage]\nrunroot = \"/var/run/crio-storage\"\n", link: "var/run/crio-storage", warn: "runroot /var/run/crio-storage goes through a symbolic link"},
		{name: "Podman, the vfs driver", engine: EnginePodman, storage: "[storage]\ndriver = \"vfs\"\n", warn: "vfs-containers"},
		{name: "a policy that does not load", engine: EnginePodman, policy: "size = [\n", warn: "until the policy loads"},
		// Podman's --hooks-dir is a string slice flag (seen in
		// integration's TestHooksAcrossReleases, whose dirs held one).
		{name: "Podman, a hooks dir with a comma", engine: EnginePodman, hooksDir: "/srv/hooks.d,gpu", warn: "splits its value there"},
		{name: "CRI-O, a hooks dir with a comma (crio.conf names it)", engine: EngineCRIO, hooksDir: "/srv/hooks.d,gpu",
			engineConf: "[crio.runtime]\nhooks_dir = [\"/srv/hooks.d,gpu\"]\n"},
		{name: "Podman, a hooks dir it does not read", engine: EnginePodman, hooksDir: "/srv/hooks.d",
			warn: "podman reads hooks.d from /usr/share/containers/oci/hooks.d, /etc/containers/oci/hooks.d (by default), not /srv/hooks.d: it runs the hook only if you start it with --hooks-dir /srv/hooks.d"},
		{name: "Podman, a hooks dir containers.conf names", engine: EnginePodman, hooksDir: "/srv/hooks.d/",
			engineConf: "[engine]\nhooks_dir = [\"/srv/hooks.d\"]\n"},
		{name: "Podman, the default dir where containers.conf names another", engine: EnginePodman, hooksDir: "/etc/containers/oci/hooks.d",
			engineConf: "[engine]\nhooks_dir = [\"/srv/hooks.d\"]\n", warn: "(as hooks_dir in "},
		{name: "CRI-O, a hooks dir it does not read", engine: EngineCRIO, hooksDir: "/etc/containers/oci/hooks.d",
			warn: "add it to hooks_dir in crio.conf and restart CRI-O"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := hookRoot(t)
			if tt.policy != "" {
				write(t, filepath.Join(root, "etc/gpurun/config.toml"), tt.policy)
			}
			if tt.storage != "" {
				write(t, filepath.Join(root, storageconf.Path), tt.storage)
			}
			if tt.link != "" {
				if err := os.MkdirAll(filepath.Join(root, "mnt/real"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tt.link)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(root, "mnt/real"), filepath.Join(root, tt.link)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.engineConf != "" {
				conf := "etc/containers/containers.conf"
				if tt.engine == EngineCRIO {
					conf = "etc/crio/crio.conf"
				}
				write(t, filepath.Join(root, conf), tt.engineConf)
			}
			var out bytes.Buffer
			h := hooksFor(root, tt.engine, &out)
			h.HooksDir = tt.hooksDir
			if err := h.Install(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(out.String(), "warning:"); got != (tt.warn != "") || !strings.Contains(out.String(), tt.warn) {
				t.Errorf("output:\n%s\nwant a warning saying %q", out.String(), tt.warn)
			}
		})
	}
}

// TestHooksInstallWhereTheEngineReads: without --hooks-dir, install writes
// into the last directory of the engine's hooks_dir (containers.conf and
// its drop-ins for Podman, crio.conf and its drop-ins for CRI-O), so the
// engine runs the hook; an uninstall with nothing recorded looks there
// too. A configuration that does not parse stops the install before it
// writes anything, naming the file and line.
func TestHooksInstallWhereTheEngineReads(t *testing.T) {
	tests := []struct {
		name, engine string
		files        map[string]string // node path: content
		want         string            // the entry's node path; "" for an error
		err          string
	}{
		{name: "Podman, no hooks_dir", engine: EnginePodman, want: "/etc/containers/oci/hooks.d/gpurun.json"},
		{name: "CRI-O, no hooks_dir", engine: EngineCRIO, want: "/usr/share/containers/oci/hooks.d/gpurun.json"},
		{name: "Podman, containers.conf", engine: EnginePodman,
			files: map[string]string{"/etc/containers/containers.conf": "[engine]\nhooks_dir = [\"/opt/vendor/hooks.d\", \"/opt/site/hooks.d\"]\n"},
			want:  "/opt/site/hooks.d/gpurun.json"},
		{name: "CRI-O, a drop-in", engine: EngineCRIO,
			files: map[string]string{"/etc/crio/crio.conf": "[crio.runtime]\nhooks_dir = [\"/a\"]\n", "/etc/crio/crio.conf.d/20-gpu.conf": "[crio.runtime]\nhooks_dir = [\"/gpu/hooks.d\"]\n"},
			want:  "/gpu/hooks.d/gpurun.json"},
		{name: "Podman, containers.conf that does not parse", engine: EnginePodman,
			files: map[string]string{"/etc/containers/containers.conf": "[engine]\nhooks_dir = \"/opt\n"},
			err:   "etc/containers/containers.conf:2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := hookRoot(t)
			for p, body := range tt.files {
				write(t, filepath.Join(root, p), body)
			}
			before := treeOf(t, root)
			var out bytes.Buffer
			h := hooksFor(root, tt.engine, &out)
			err := h.Install()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Install: %v, want an error naming %q", err, tt.err)
				}
				if after := treeOf(t, root); !reflect.DeepEqual(after, before) {
					t.Errorf("a failed install changed the node: %v, was %v", after, before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !exists(filepath.Join(root, tt.want)) {
				t.Fatalf("no entry at %s:\n%s", tt.want, out.String())
			}
			// Nothing recorded: uninstall finds the entry where install put it.
			if err := os.Remove(h.statePath()); err != nil {
				t.Fatal(err)
			}
			if err := h.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if exists(filepath.Join(root, tt.want)) {
				t.Errorf("uninstall with nothing recorded left %s:\n%s", tt.want, out.String())
			}
		})
	}
}

// treeOf lists the files under root with their contents.
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, root)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHooksInstallAfterHooksDirIsSet: an entry installed in the default
// directory (as before hooks_dir was set, or by an earlier release) stays
// recorded when a later install writes where hooks_dir now says, and one
// uninstall removes both.
func TestHooksInstallAfterHooksDirIsSet(t *testing.T) {
	root := hookRoot(t)
	var out bytes.Buffer
	h := hooksFor(root, EnginePodman, &out)
	if err := h.Install(); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, DefaultPodmanHooksDir, HookFileName)
	write(t, filepath.Join(root, "etc/containers/containers.conf"), "[engine]\nhooks_dir = [\"/opt/hooks.d\"]\n")
	if err := h.Install(); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(root, "opt/hooks.d", HookFileName)
	if !exists(old) || !exists(moved) {
		t.Fatalf("after the second install: %s %v, %s %v; want both\n%s", old, exists(old), moved, exists(moved), out.String())
	}
	if err := h.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if exists(old) || exists(moved) {
		t.Errorf("uninstall left %s %v, %s %v\n%s", old, exists(old), moved, exists(moved), out.String())
	}
}
