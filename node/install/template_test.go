package install

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/internal/k3stest"
)

// k3sData is the data rel's k3s executes its containerd template with on
// a node laid out as l, the NVIDIA runtimes added when nvidia, and k3s's
// default-runtime setting.
func k3sData(l Layout, rel k3stest.Release, nvidia bool, defaultRuntime string) map[string]any {
	return rel.Data(k3stest.Node{
		Program: string(l.Distribution), DataDir: l.DataDir(), Root: l.Root(), State: l.State(), Address: l.Socket(),
		PauseImage: "rancher/mirrored-pause:3.6", SystemdCgroup: true, DefaultRuntime: defaultRuntime, NVIDIA: nvidia,
	})
}

// renderK3s renders containerd's config as rel does at start: the
// administrator's template when there is one, else the base template.
func renderK3s(t *testing.T, rel k3stest.Release, admin string, data any) string {
	t.Helper()
	base := testdata(t, rel.Base)
	main := admin
	if main == "" {
		main = base
	}
	out, err := rel.Render(main, base, data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// containerdFor returns a containerd that reads rel's configs: Debian's
// containerd 1.6 (required, as in CI) for version 2, containerd 2.x
// ($GPURUN_TEST_CONTAINERD2, which make builds and sets) for version 3.
func containerdFor(t *testing.T, rel k3stest.Release) string {
	t.Helper()
	if rel.Version >= 3 {
		p := os.Getenv("GPURUN_TEST_CONTAINERD2")
		if p == "" {
			t.Fatal("GPURUN_TEST_CONTAINERD2 is not set: run the tests with make (it builds containerd 2.x into /var/cache/gpurun-tools (.tools/ when not root)), or point it at a containerd 2.x binary")
		}
		return p
	}
	p, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("containerd binary not found (apt-get install containerd): %v", err)
	}
	return p
}

func testdata(t *testing.T, name string) string {
	t.Helper()
	if name == "" {
		return ""
	}
	return read(t, filepath.Join("testdata", "k3s", name))
}

func TestTemplateInstallUninstall(t *testing.T) {
	v2, v3, v3i := k3stest.V2(), k3stest.V3(), k3stest.V3Imports()
	const docsV3 = "k3s-docs-05051a0-config-v3.toml.tmpl"
	nvidiaV3 := []string{"runc", "nvidia", "nvidia-experimental", "nvidia-cdi"}
	tests := []struct {
		name   string
		dist   Distribution
		rel    k3stest.Release
		admin  string // testdata template of the administrator's, "" for none
		as     string // the admin template's name: config.toml.tmpl or config-v3.toml.tmpl
		nvidia bool
		// want is the template gpurun edits (its base name); keep lists
		// runtimes the rendered config must still define.
		want string
		keep []string
	}{
		{name: "k3s v2 default, nvidia found", dist: DistK3s, rel: v2, nvidia: true, want: "config.toml.tmpl", keep: []string{"runc", "nvidia", "nvidia-experimental"}},
		{name: "k3s v2 default", dist: DistK3s, rel: v2, want: "config.toml.tmpl", keep: []string{"runc"}},
		{name: "k3s v2 admin template on base", dist: DistK3s, rel: v2, admin: "admin-v2-config.toml.tmpl", as: "config.toml.tmpl", nvidia: true, want: "config.toml.tmpl", keep: []string{"runc", "nvidia", "kata"}},
		{name: "k3s v2 admin full template", dist: DistK3s, rel: v2, admin: v2.Base, as: "config.toml.tmpl", want: "config.toml.tmpl", keep: []string{"runc"}},
		{name: "k3s v2 admin template without final newline", dist: DistK3s, rel: v2, admin: "admin-v2-no-final-newline.toml.tmpl", as: "config.toml.tmpl", want: "config.toml.tmpl", keep: []string{"runc", "wasm"}},
		{name: "k3s v1.34.3 default, nvidia found", dist: DistK3s, rel: v3, nvidia: true, want: "config-v3.toml.tmpl", keep: nvidiaV3},
		{name: "k3s v1.34.3 default", dist: DistK3s, rel: v3, want: "config-v3.toml.tmpl", keep: []string{"runc"}},
		{name: "k3s v1.34.3 docs example template", dist: DistK3s, rel: v3, admin: docsV3, as: "config-v3.toml.tmpl", nvidia: true, want: "config-v3.toml.tmpl", keep: append([]string{"custom"}, nvidiaV3...)},
		{name: "k3s v1.34.3 admin full template", dist: DistK3s, rel: v3, admin: v3.Base, as: "config-v3.toml.tmpl", nvidia: true, want: "config-v3.toml.tmpl", keep: nvidiaV3},
		{name: "k3s v1.34.6 default, nvidia found", dist: DistK3s, rel: v3i, nvidia: true, want: "config-v3.toml.tmpl", keep: nvidiaV3},
		{name: "k3s v1.34.6 docs example template", dist: DistK3s, rel: v3i, admin: docsV3, as: "config-v3.toml.tmpl", want: "config-v3.toml.tmpl", keep: []string{"runc", "custom"}},
		{name: "k3s v1.34.6 admin full template", dist: DistK3s, rel: v3i, admin: v3i.Base, as: "config-v3.toml.tmpl", nvidia: true, want: "config-v3.toml.tmpl", keep: nvidiaV3},
		{name: "rke2 v2 admin template", dist: DistRKE2, rel: v2, admin: "admin-v2-config.toml.tmpl", as: "config.toml.tmpl", nvidia: true, want: "config.toml.tmpl", keep: []string{"runc", "nvidia", "kata"}},
		{name: "rke2 v1.34.3 default", dist: DistRKE2, rel: v3, want: "config-v3.toml.tmpl", keep: []string{"runc"}},
		{name: "rke2 v1.34.6 default, nvidia found", dist: DistRKE2, rel: v3i, nvidia: true, want: "config-v3.toml.tmpl", keep: nvidiaV3},
		{name: "rke2 v1.34.6 docs example template", dist: DistRKE2, rel: v3i, admin: docsV3, as: "config-v3.toml.tmpl", nvidia: true, want: "config-v3.toml.tmpl", keep: append([]string{"custom"}, nvidiaV3...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			l := Layout{Distribution: tc.dist}
			host := func(p string) string { return filepath.Join(root, p) }
			admin := testdata(t, tc.admin)
			data := k3sData(l, tc.rel, tc.nvidia, "")
			if admin != "" {
				write(t, host(filepath.Join(l.ContainerdDir(), tc.as)), admin)
			}
			generated := renderK3s(t, tc.rel, admin, data)
			write(t, host(l.Config()), generated)

			var out bytes.Buffer
			c := Containerd{Options: opts(root, &out), Distribution: tc.dist}
			if err := c.Install(); err != nil {
				t.Fatalf("install: %v\n%s", err, out.String())
			}
			tmplPath := host(filepath.Join(l.ContainerdDir(), tc.want))
			got := read(t, tmplPath)
			t.Logf("%s:\n%s", tc.want, got)
			if admin != "" {
				if !strings.HasPrefix(got, admin) {
					t.Fatalf("the administrator's template is not kept as it was:\n%s", got)
				}
				if _, err := os.Stat(tmplPath + ".gpurun-20261122T010203Z.bak"); err != nil {
					t.Errorf("no backup of the template: %v", err)
				}
			} else if !strings.HasPrefix(got, BaseTemplateLine+"\n") {
				t.Fatalf("a created template does not extend base:\n%s", got)
			}
			if read(t, host(l.Config())) != generated {
				t.Fatal("install wrote the generated config.toml")
			}
			// What the node agent reads back: the template and its backup.
			wantBackup := ""
			if admin != "" {
				wantBackup = tmplPath + ".gpurun-20261122T010203Z.bak"
			}
			if p, b, ok := c.ConfigRecord(); p != tmplPath || b != wantBackup || !ok {
				t.Errorf("ConfigRecord = %q, %q, %v; want %q, %q, true", p, b, ok, tmplPath, wantBackup)
			}
			if got := l.TemplateWithBlock(root); got != filepath.Join(l.ContainerdDir(), tc.want) {
				t.Errorf("TemplateWithBlock = %q, want %q", got, filepath.Join(l.ContainerdDir(), tc.want))
			}

			// k3s restarts: it renders the template again.
			rendered := renderK3s(t, tc.rel, got, data)
			write(t, host(l.Config()), rendered)
			for _, line := range strings.Split(generated, "\n") {
				if !strings.Contains(rendered, line) {
					t.Errorf("rendered config lost line %q", line)
				}
			}
			cfg, err := containerd.Load(context.Background(), l.Config(), containerd.LoadOptions{Root: root})
			if err != nil {
				t.Fatalf("containerd would not read the rendered config: %v\n%s", err, rendered)
			}
			r, ok := cfg.Runtime(RuntimeName)
			if !ok || r.BinaryName != "/usr/local/bin/gpurun-runtime" {
				t.Fatalf("rendered config: runtime %s = %+v, %v\n%s", RuntimeName, r, ok, rendered)
			}
			for _, k := range tc.keep {
				if _, ok := cfg.Runtime(k); !ok {
					t.Errorf("rendered config lost runtime %s", k)
				}
			}
			// containerd itself (of the release's generation) reads what
			// k3s rendered.
			dumped, err := containerd.Load(context.Background(), host(l.Config()), containerd.LoadOptions{Containerd: containerdFor(t, tc.rel), Dump: true})
			if err != nil || !dumped.Dumped {
				t.Fatalf("containerd config dump of the rendered config: %v, %v\n%s", err, dumped.DumpErr, rendered)
			}
			for _, k := range append([]string{RuntimeName}, tc.keep...) {
				if _, ok := dumped.Runtime(k); !ok {
					t.Errorf("containerd does not see runtime %s in the rendered config", k)
				}
			}
			if r, _ := dumped.Runtime(RuntimeName); r.BinaryName != "/usr/local/bin/gpurun-runtime" {
				t.Errorf("containerd sees runtime %s = %+v", RuntimeName, r)
			}

			// A second install changes nothing.
			out.Reset()
			if err := c.Install(); err != nil {
				t.Fatalf("second install: %v", err)
			}
			if read(t, tmplPath) != got || !strings.Contains(out.String(), "nothing to do") {
				t.Fatalf("second install changed the template or said %q", out.String())
			}

			out.Reset()
			if err := c.Uninstall(); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out.String())
			}
			if admin != "" {
				if after := read(t, tmplPath); after != admin {
					t.Fatalf("uninstall did not restore the template byte for byte:\n%q\nwant\n%q", after, admin)
				}
			} else if _, err := os.Stat(tmplPath); !os.IsNotExist(err) {
				t.Fatalf("uninstall left the template it created: %v", err)
			}
			var st map[string]map[string]json.RawMessage
			if err := json.Unmarshal([]byte(read(t, host("/var/lib/gpurun/state.json"))), &st); err != nil {
				t.Fatal(err)
			}
			if len(st["containerd"]) != 0 {
				t.Errorf("state still records %v", st["containerd"])
			}
			if _, _, ok := c.ConfigRecord(); ok {
				t.Error("ConfigRecord after uninstall: still recorded")
			}
			if got := l.TemplateWithBlock(root); got != "" {
				t.Errorf("TemplateWithBlock after uninstall = %q", got)
			}
		})
	}
}

func TestRemoveFromTemplate(t *testing.T) {
	const block = "\n# added by gpurun install; remove with gpurun uninstall containerd\n[x]\n  a = 1\n"
	created := BaseTemplateLine + "\n" + block
	tests := []struct {
		name   string
		tmpl   string
		ch     TemplateChange
		want   string
		remove bool
		found  bool
	}{
		{name: "appended, untouched", tmpl: "# mine\n" + block, ch: TemplateChange{Added: block}, want: "# mine\n", found: true},
		{name: "appended, admin added after", tmpl: "# mine\n" + block + "# later\n", ch: TemplateChange{Added: block}, want: "# mine\n# later\n", found: true},
		{name: "created, untouched", tmpl: created, ch: TemplateChange{Created: true, Added: created}, remove: true, found: true},
		{name: "created, admin added", tmpl: created + "[y]\n", ch: TemplateChange{Created: true, Added: created}, want: BaseTemplateLine + "\n[y]\n", found: true},
		{name: "block edited by hand", tmpl: "# mine\n[x]\n  a = 2\n", ch: TemplateChange{Added: block}, want: "# mine\n[x]\n  a = 2\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, remove, found := RemoveFromTemplate([]byte(tc.tmpl), tc.ch)
			if remove != tc.remove || found != tc.found || !tc.remove && string(out) != tc.want {
				t.Fatalf("got %q remove=%v found=%v, want %q remove=%v found=%v", out, remove, found, tc.want, tc.remove, tc.found)
			}
		})
	}
}

func TestAddToTemplateRefusesDelimiters(t *testing.T) {
	if _, _, err := AddToTemplate([]byte("x\n"), true, "\n[a]\n  b = \"{{ x }}\"\n"); err == nil {
		t.Fatal("a block with a template action was accepted")
	}
}

// TestTemplateSetAsDefault: a template can make gpurun the default only
// where the config k3s renders does not write the CRI plugin's containerd
// table itself. k3s's version 2 template always does (for the
// snapshotter); its version 3 template only when k3s's own default-runtime
// is set.
func TestTemplateSetAsDefault(t *testing.T) {
	for _, tc := range []struct {
		name           string
		rel            k3stest.Release
		defaultRuntime string // k3s's default-runtime
		ok             bool
	}{
		{"version 2: refused", k3stest.V2(), "", false},
		{"k3s v1.34.3, version 3 without the containerd table", k3stest.V3(), "", true},
		{"k3s v1.34.6, version 3 without the containerd table", k3stest.V3Imports(), "", true},
		{"k3s v1.34.3 with default-runtime nvidia: refused", k3stest.V3(), "nvidia", false},
		{"k3s v1.34.6 with default-runtime nvidia: refused", k3stest.V3Imports(), "nvidia", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			l := Layout{Distribution: DistK3s}
			data := k3sData(l, tc.rel, true, tc.defaultRuntime)
			write(t, filepath.Join(root, l.Config()), renderK3s(t, tc.rel, "", data))
			var out bytes.Buffer
			c := Containerd{Options: opts(root, &out), Distribution: DistK3s, SetAsDefault: true}
			err := c.Install()
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "default-runtime: gpurun") {
					t.Fatalf("err = %v", err)
				}
				for _, p := range []string{l.Template(), l.TemplateV3()} {
					if _, err := os.Stat(filepath.Join(root, p)); err == nil {
						t.Errorf("a refused install wrote %s", p)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tmpl := read(t, filepath.Join(root, l.TemplateV3()))
			write(t, filepath.Join(root, l.Config()), renderK3s(t, tc.rel, tmpl, data))
			cfg, err := containerd.Load(context.Background(), l.Config(), containerd.LoadOptions{Root: root})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DefaultRuntime() != RuntimeName {
				t.Fatalf("default runtime %q after k3s renders\n%s", cfg.DefaultRuntime(), tmpl)
			}
			if err := c.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(root, l.TemplateV3())); !os.IsNotExist(err) {
				t.Fatalf("template left: %v", err)
			}
		})
	}
}

func TestDetectDistribution(t *testing.T) {
	tests := []struct {
		name string
		dirs []string
		want Distribution
	}{
		{"plain containerd", []string{"/etc/containerd"}, DistContainerd},
		{"k3s", []string{"/var/lib/rancher/k3s/agent/etc/containerd"}, DistK3s},
		{"rke2", []string{"/var/lib/rancher/rke2/agent/etc/containerd"}, DistRKE2},
		{"k3s data dir without an agent", []string{"/var/lib/rancher/k3s/server"}, DistContainerd},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got := DetectDistribution(root); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestParseDistribution(t *testing.T) {
	for in, want := range map[string]Distribution{"": DistAuto, "auto": DistAuto, "containerd": DistContainerd, "k3s": DistK3s, "rke2": DistRKE2} {
		if got, err := ParseDistribution(in); err != nil || got != want {
			t.Errorf("ParseDistribution(%q) = %s, %v", in, got, err)
		}
	}
	if _, err := ParseDistribution("microk8s"); err == nil {
		t.Error("microk8s accepted")
	}
}

func TestEmbeddedNRI(t *testing.T) {
	const v2 = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"
	const v3 = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"
	tests := []struct {
		name, config, release string
		want                  bool
	}{
		{"k3s v1.31.5: containerd 1.7, version 2", v2, "1.7.23-k3s2", false},
		{"k3s v1.31.6: containerd 2.0, legacy version 2 template", v2, "2.0.2-k3s2", true},
		{"containerd 2.x, version 3, release unknown", v3, "", true},
		{"containerd 1.7 with NRI turned on in the template", v2 + "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n", "1.7.23-k3s2", true},
		{"containerd 2.x with NRI turned off in the template", v3 + "[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n", "2.1.5-k3s1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			l := Layout{Distribution: DistK3s}
			write(t, filepath.Join(root, l.Config()), tc.config)
			e, err := Embedded(context.Background(), root, l, tc.release)
			if err != nil {
				t.Fatal(err)
			}
			if e.NRI.Enabled != tc.want {
				t.Fatalf("NRI enabled %v, want %v (%+v)", e.NRI.Enabled, tc.want, e)
			}
		})
	}
	if _, err := Embedded(context.Background(), t.TempDir(), Layout{Distribution: DistRKE2}, ""); err == nil || !strings.Contains(err.Error(), "has not started") {
		t.Fatalf("no generated config: %v", err)
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out, want string
		ok        bool
	}{
		{"k3s version v1.31.6+k3s1 (a7455eb9)\ngo version go1.23.6\n", "v1.31.6+k3s1", true},
		{"rke2 version v1.32.2+rke2r1 (63324382)\ngo version go1.23.6 X:boringcrypto\n", "v1.32.2+rke2r1", true},
		{"Incorrect Usage\n", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, err := ParseVersion(tc.out)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q, ok %v", tc.out, got, err, tc.want, tc.ok)
		}
	}
}

func TestBinaryBehindAbsoluteLink(t *testing.T) {
	tests := []struct {
		name   string
		dist   Distribution
		real   string // where the binary is (node path)
		link   string // the link to its directory (node path)
		target string // the link's target
		want   string
	}{
		{"rke2 bin, absolute", DistRKE2, "/var/lib/rancher/rke2/data/v1.33.0-rke2r1-abc/bin/containerd", "/var/lib/rancher/rke2/bin", "/var/lib/rancher/rke2/data/v1.33.0-rke2r1-abc/bin", "/var/lib/rancher/rke2/bin/containerd"},
		{"k3s current, absolute", DistK3s, "/var/lib/rancher/k3s/data/0123abcd/bin/containerd", "/var/lib/rancher/k3s/data/current", "/var/lib/rancher/k3s/data/0123abcd", "/var/lib/rancher/k3s/data/current/bin/containerd"},
		{"k3s current, relative", DistK3s, "/var/lib/rancher/k3s/data/0123abcd/bin/containerd", "/var/lib/rancher/k3s/data/current", "0123abcd", "/var/lib/rancher/k3s/data/current/bin/containerd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, tc.real), "#!/bin/sh\n")
			if err := os.Chmod(filepath.Join(root, tc.real), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tc.target, filepath.Join(root, tc.link)); err != nil {
				t.Fatal(err)
			}
			if got := (Layout{Distribution: tc.dist}).Binary(root); got != tc.want {
				t.Fatalf("Binary = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTemplateInstallKilled covers an install killed after it recorded the
// change as pending: before the template was written, or after.
func TestTemplateInstallKilled(t *testing.T) {
	rel := k3stest.V2()
	admin := testdata(t, "admin-v2-config.toml.tmpl")
	l := Layout{Distribution: DistK3s}
	setup := func(t *testing.T) (root string, c Containerd, out *bytes.Buffer, installed string) {
		root = t.TempDir()
		write(t, filepath.Join(root, l.Template()), admin)
		write(t, filepath.Join(root, l.Config()), renderK3s(t, rel, admin, k3sData(l, rel, true, "")))
		out = &bytes.Buffer{}
		c = Containerd{Options: opts(root, out), Distribution: DistK3s}
		if err := c.Install(); err != nil {
			t.Fatal(err)
		}
		installed = read(t, filepath.Join(root, l.Template()))
		// Mark the record pending, as a kill between the record and the
		// end of the install leaves it.
		statePath := filepath.Join(root, "/var/lib/gpurun/state.json")
		st, err := loadState(statePath)
		if err != nil {
			t.Fatal(err)
		}
		key := filepath.Join(root, l.Template())
		rec := st["containerd"][key]
		rec.Pending = true
		st["containerd"][key] = rec
		if err := st.save(statePath); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		return root, c, out, installed
	}
	pending := func(t *testing.T, root string) bool {
		st, err := loadState(filepath.Join(root, "/var/lib/gpurun/state.json"))
		if err != nil {
			t.Fatal(err)
		}
		return st["containerd"][filepath.Join(root, l.Template())].Pending
	}

	t.Run("after the write: a rerun finishes", func(t *testing.T) {
		root, c, out, installed := setup(t)
		if err := c.Install(); err != nil {
			t.Fatal(err)
		}
		if read(t, filepath.Join(root, l.Template())) != installed || pending(t, root) || !strings.Contains(out.String(), "finished") {
			t.Fatalf("rerun: %s", out)
		}
	})
	t.Run("before the write: a rerun writes", func(t *testing.T) {
		root, c, out, installed := setup(t)
		write(t, filepath.Join(root, l.Template()), admin)
		if err := c.Install(); err != nil {
			t.Fatal(err)
		}
		if read(t, filepath.Join(root, l.Template())) != installed || pending(t, root) {
			t.Fatalf("rerun: %s", out)
		}
	})
	t.Run("before the write: uninstall leaves the template", func(t *testing.T) {
		root, c, out, _ := setup(t)
		write(t, filepath.Join(root, l.Template()), admin)
		if err := c.Uninstall(); err != nil {
			t.Fatal(err)
		}
		if read(t, filepath.Join(root, l.Template())) != admin || !strings.Contains(out.String(), "not there") {
			t.Fatalf("uninstall: %s", out)
		}
		st, _ := loadState(filepath.Join(root, "/var/lib/gpurun/state.json"))
		if len(st["containerd"]) != 0 {
			t.Fatalf("record kept: %v", st)
		}
	})
}

// TestTemplateInstallOverAnEarlierRender: a rollout of the node agent on a
// k3s or RKE2 node with restart=none. The old agent's uninstall takes
// gpurun's block out of the template, but the distribution is not
// restarted: its generated config still holds the block it rendered. The
// new agent's install puts the same block into the template again (the
// generated config, never written, then is what the distribution renders
// from it), where it once refused: "already defines runtime handler
// gpurun, which gpurun does not record".
func TestTemplateInstallOverAnEarlierRender(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dist  Distribution
		rel   k3stest.Release
		admin string // testdata template of the administrator's, "" for none
		as    string
	}{
		{"k3s v2 default", DistK3s, k3stest.V2(), "", ""},
		{"k3s v1.34.6 default", DistK3s, k3stest.V3Imports(), "", ""},
		{"rke2 v1.34.6 docs example template", DistRKE2, k3stest.V3Imports(), "k3s-docs-05051a0-config-v3.toml.tmpl", "config-v3.toml.tmpl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			l := Layout{Distribution: tc.dist}
			host := func(p string) string { return filepath.Join(root, p) }
			admin := testdata(t, tc.admin)
			data := k3sData(l, tc.rel, false, "")
			if admin != "" {
				write(t, host(filepath.Join(l.ContainerdDir(), tc.as)), admin)
			}
			write(t, host(l.Config()), renderK3s(t, tc.rel, admin, data))
			var out bytes.Buffer
			c := Containerd{Options: opts(root, &out), Distribution: tc.dist}
			if err := c.Install(); err != nil {
				t.Fatalf("install: %v\n%s", err, out.String())
			}
			tmplNode := l.TemplateWithBlock(root)
			installed := read(t, host(tmplNode))
			// k3s restarts: config.toml holds gpurun's handler.
			rendered := renderK3s(t, tc.rel, installed, data)
			write(t, host(l.Config()), rendered)
			// The old agent's uninstall; no restart.
			if err := c.Uninstall(); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out.String())
			}
			if l.TemplateWithBlock(root) != "" {
				t.Fatal("the uninstall left gpurun's block in the template")
			}
			// The new agent's install.
			out.Reset()
			if err := c.Install(); err != nil {
				t.Fatalf("install over the earlier render: %v\n%s", err, out.String())
			}
			if got := read(t, host(tmplNode)); got != installed {
				t.Errorf("the template after the second install:\n%s\nwant it as after the first:\n%s", got, installed)
			}
			if got := read(t, host(l.Config())); got != rendered {
				t.Error("the install wrote the generated config")
			}
			if again := renderK3s(t, tc.rel, installed, data); again != rendered {
				t.Errorf("k3s would render another config from the template now:\n%s\nwant\n%s", again, rendered)
			}
		})
	}
}
