package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpurun/gpurun/policy"
)

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func opts(root string, out *bytes.Buffer) Options {
	return Options{HostRoot: root, RuntimePath: "/usr/local/bin/gpurun-runtime", StatePath: "/var/lib/gpurun/state.json",
		PolicyPath: "/etc/gpurun/config.toml", Out: out, Now: func() time.Time { return time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC) }}
}

const nvidiaDaemonJSON = `{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}`

func TestDockerInstallTwiceThenUninstall(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/docker/daemon.json")
	write(t, cfg, nvidiaDaemonJSON)
	write(t, filepath.Join(root, "etc/gpurun/config.toml"), "# site policy\nmin = \"2g\"\n")
	d := Docker{Options: opts(root, &out)}

	// Dry run: nothing written.
	dry := d
	dry.DryRun = true
	if err := dry.Install(); err != nil {
		t.Fatal(err)
	}
	if read(t, cfg) != nvidiaDaemonJSON || !strings.Contains(out.String(), `+        "gpurun": {`) {
		t.Fatalf("dry run wrote or printed wrong:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/gpurun/state.json")); err == nil {
		t.Fatal("dry run wrote the state file")
	}

	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	// The nvidia default is chained in the policy, which still validates.
	pol, err := policy.Load(filepath.Join(root, "etc/gpurun/config.toml"), true)
	if err != nil || pol.Runtime != "nvidia-container-runtime" || pol.Min != 2*policy.GiB {
		t.Fatalf("policy after chain: %+v, %v", pol, err)
	}
	d.SetAsDefault = true
	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, cfg); !strings.Contains(got, `"default-runtime": "gpurun"`) || !strings.Contains(got, `"nvidia": {`) {
		t.Fatalf("after set-as-default:\n%s", got)
	}
	backups, _ := filepath.Glob(cfg + ".gpurun-*.bak")
	if len(backups) != 1 || read(t, backups[0]) != nvidiaDaemonJSON {
		t.Fatalf("backups %v", backups)
	}
	// A third install is a no-op.
	before := read(t, cfg)
	out.Reset()
	if err := d.Install(); err != nil || read(t, cfg) != before || !strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("third install: %v\n%s", err, out.String())
	}
	if err := d.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, cfg); got != nvidiaDaemonJSON {
		t.Errorf("uninstall left\n%s\nwant the original\n%s", got, nvidiaDaemonJSON)
	}
	if got := read(t, filepath.Join(root, "etc/gpurun/config.toml")); got != "# site policy\nmin = \"2g\"\n" {
		t.Errorf("policy not restored: %q", got)
	}
	// Uninstall again: nothing to do, no error.
	if err := d.Uninstall(); err != nil {
		t.Errorf("second uninstall: %v", err)
	}
}

func TestDockerUninstallWithoutState(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/docker/daemon.json")
	write(t, cfg, `{"log-level": "warn"}`)
	d := Docker{Options: opts(root, &out), SetAsDefault: true}
	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "var/lib/gpurun/state.json")); err != nil {
		t.Fatal(err)
	}
	if err := d.Uninstall(); err != nil {
		t.Fatal(err)
	}
	got := read(t, cfg)
	if strings.Contains(got, "gpurun") || !strings.Contains(got, `"log-level": "warn"`) {
		t.Errorf("uninstall without state left %s", got)
	}
}

func TestContainerdInstallThenUninstall(t *testing.T) {
	const debian = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".cni]\n      bin_dir = \"/usr/lib/cni\"\n      conf_dir = \"/etc/cni/net.d\"\n  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = \"/var/lib/containerd/opt\"\n"
	for _, dropIn := range []string{"", "/etc/containerd/conf.d"} {
		t.Run("drop-in="+dropIn, func(t *testing.T) {
			root := t.TempDir()
			var out bytes.Buffer
			cfg := filepath.Join(root, "etc/containerd/config.toml")
			write(t, cfg, debian)
			c := Containerd{Options: opts(root, &out), DropInDir: dropIn}
			if err := c.Install(); err != nil {
				t.Fatal(err)
			}
			c.SetAsDefault = true
			if err := c.Install(); err != nil {
				t.Fatal(err)
			}
			// What the node agent reads back: the config and its backup.
			if p, b, ok := c.ConfigRecord(); p != cfg || b != cfg+".gpurun-20261122T010203Z.bak" || !ok || read(t, b) != debian {
				t.Errorf("ConfigRecord = %q, %q, %v; want %s and its backup", p, b, ok, cfg)
			}
			all := read(t, cfg)
			if dropIn != "" {
				all += read(t, filepath.Join(root, dropIn, DropInName))
				if !strings.Contains(read(t, cfg), filepath.Join(dropIn, DropInName)) {
					t.Errorf("main config does not import the drop-in:\n%s", read(t, cfg))
				}
			}
			for _, want := range []string{`BinaryName = "/usr/local/bin/gpurun-runtime"`, `default_runtime_name = "gpurun"`, `"gpurun.io/*"`} {
				if !strings.Contains(all, want) {
					t.Errorf("config lacks %s:\n%s", want, all)
				}
			}
			if err := c.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, cfg); got != debian {
				t.Errorf("uninstall left\n%s\nwant\n%s", got, debian)
			}
			if _, _, ok := c.ConfigRecord(); ok {
				t.Error("ConfigRecord after uninstall: still recorded")
			}
			if dropIn != "" {
				if _, err := os.Stat(filepath.Join(root, dropIn, DropInName)); err == nil {
					t.Error("drop-in left behind")
				}
			}
		})
	}
}

func TestContainerdRefusesVersion1(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, "[plugins.cri]\n  sandbox_image = \"x\"\n")
	err := Containerd{Options: opts(root, &out)}.Install()
	if err == nil || !strings.Contains(err.Error(), "version 1") || !strings.Contains(err.Error(), cfg) {
		t.Errorf("error %v", err)
	}
	if read(t, cfg) != "[plugins.cri]\n  sandbox_image = \"x\"\n" {
		t.Error("refused config was changed")
	}
}

// TestContainerdReadsImports: NVIDIA's drop-in makes nvidia the default
// (as nvidia-ctk does for containerd 2.x). gpurun copies and chains to
// it, and (with --no-auto-drop-in) refuses a --set-as-default that the
// drop-in, read after the main config, would undo, naming the file and
// line.
func TestContainerdReadsImports(t *testing.T) {
	const main = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
	const nvidia = "version = 3\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"nvidia\"\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n  [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n    BinaryName = \"/usr/bin/nvidia-container-runtime\"\n    SystemdCgroup = true\n"
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, main)
	write(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml"), nvidia)

	err := Containerd{Options: opts(root, &out), SetAsDefault: true, NoAutoDropIn: true}.Install()
	want := "containerd (containerd 2.x) would keep nvidia as its default runtime handler, set in /etc/containerd/conf.d/99-nvidia.toml:4"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("set as default: %v\nwant %q", err, want)
	}
	if read(t, cfg) != main {
		t.Error("a refused install changed the config")
	}

	if err := (Containerd{Options: opts(root, &out)}).Install(); err != nil {
		t.Fatal(err)
	}
	got := read(t, cfg)
	for _, line := range []string{"  SystemdCgroup = true\n", "BinaryName = \"/usr/local/bin/gpurun-runtime\""} {
		if !strings.Contains(got, line) {
			t.Errorf("the runtime copied from nvidia's lacks %q:\n%s", line, got)
		}
	}
	pol, err := policy.Parse("policy", []byte(read(t, filepath.Join(root, "etc/gpurun/config.toml"))))
	if err != nil || pol.Runtime != "/usr/bin/nvidia-container-runtime" {
		t.Errorf("chained runtime %q, %v", pol.Runtime, err)
	}
}

// TestContainerdAutoDropInAgain: an install in place that NVIDIA's drop-in
// would hide goes into gpurun's own drop-in directory; the same command
// again finds it there and changes nothing (in place, beside its own
// drop-in, it would now verify and move); uninstall gives back the main
// config byte for byte and removes the policy's chaining.
func TestContainerdAutoDropInAgain(t *testing.T) {
	const main = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
	const nvidia = "version = 3\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"nvidia\"\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n  [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n    BinaryName = \"/usr/bin/nvidia-container-runtime\"\n"
	root := t.TempDir()
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, main)
	write(t, filepath.Join(root, "etc/containerd/conf.d/99-nvidia.toml"), nvidia)
	dropIn := filepath.Join(root, "etc/containerd/gpurun.d", DropInName)
	for i, want := range []string{"installing into /etc/containerd/gpurun.d instead", "gpurun runtime already registered; nothing to do"} {
		var out bytes.Buffer
		if err := (Containerd{Options: opts(root, &out), SetAsDefault: true}).Install(); err != nil {
			t.Fatalf("install %d: %v\n%s", i+1, err, out.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("install %d said:\n%s\nwant %q", i+1, out.String(), want)
		}
		if strings.Contains(read(t, cfg), "[plugins") {
			t.Errorf("install %d wrote tables into config.toml:\n%s", i+1, read(t, cfg))
		}
		if !strings.Contains(read(t, dropIn), `default_runtime_name = "gpurun"`) {
			t.Errorf("install %d: the drop-in does not make gpurun the default:\n%s", i+1, read(t, dropIn))
		}
	}
	var out bytes.Buffer
	if err := (Containerd{Options: opts(root, &out)}).Uninstall(); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out.String())
	}
	if got := read(t, cfg); got != main {
		t.Errorf("after uninstall config.toml is\n%s\nwant\n%s", got, main)
	}
	if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the drop-in is still there: %v", err)
	}
}

// TestContainerdRefusesABrokenImport: containerd does not start with an
// import that does not exist; the install says so instead of editing.
func TestContainerdRefusesABrokenImport(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	write(t, cfg, "version = 2\nimports = [\"/etc/containerd/gone.toml\"]\n")
	err := Containerd{Options: opts(root, &out)}.Install()
	if err == nil || !strings.Contains(err.Error(), "/etc/containerd/config.toml:2: imports /etc/containerd/gone.toml, which does not exist") {
		t.Errorf("got %v", err)
	}
}

// TestDockerDataRoot: install tells gpurun-runtime dockerd's data-root in
// the runtime's runtimeArgs, as the running dockerd names it (else
// daemon.json's, else the default, links resolved), and warns when it sees
// a refusal coming.
func TestDockerDataRoot(t *testing.T) {
	const flag = "--gpurun-docker-data-root="
	// The user namespace of the dockerd reference (docs.docker.com/engine/
	// security/userns-remap): testuser, uid 1001, subordinate ids from 231072.
	const passwd = "root:x:0:0:root:/root:/bin/bash\ntestuser:x:1001:1001::/home/testuser:/bin/sh\n"
	const subids = "testuser:231072:65536\n"
	tests := []struct {
		name     string
		daemon   string         // daemon.json
		live     RunningDockerd // the running dockerd; DataRoot "" when none answers
		explicit string         // --data-root
		link     bool           // daemon.json's data-root is a link to /mnt/real
		users    bool           // the node has testuser's passwd and subordinate ids
		policy   string
		want     string // the runtimeArgs' data-root; "" for no runtimeArgs
		warn     string // a warning saying this; "" for none
		says     string // the output says this
	}{
		{name: "the default", daemon: "{}", want: "/var/lib/docker", says: "(from Docker's default)"},
		{name: "daemon.json's data-root", daemon: `{"data-root": "/mnt/nvme/docker"}`, want: "/mnt/nvme/docker"},
		{name: "the running dockerd's", daemon: `{"data-root": "/mnt/nvme/docker"}`, live: RunningDockerd{DataRoot: "/mnt/nvme/docker"}, want: "/mnt/nvme/docker"},
		{name: "a --data-root flag the file does not show", daemon: "{}", live: RunningDockerd{DataRoot: "/srv/docker"}, want: "/srv/docker"},
		{name: "daemon.json says another than the running dockerd", daemon: `{"data-root": "/mnt/nvme/docker"}`, live: RunningDockerd{DataRoot: "/srv/docker"}, want: "/srv/docker", warn: "the running dockerd uses data-root /srv/docker, but daemon.json says /mnt/nvme/docker"},
		{name: "--data-root", daemon: "{}", live: RunningDockerd{DataRoot: "/srv/docker"}, explicit: "/data/docker", want: "/data/docker"},
		{name: "a data-root through a link, as dockerd resolves it", daemon: `{"data-root": "/var/lib/docker"}`, link: true, want: "/mnt/real"},
		{name: "userns-remap and no daemon", daemon: `{"userns-remap": "testuser"}`, users: true, want: "/var/lib/docker/231072.231072", says: "(from daemon.json)"},
		{name: "userns-remap under a link and no daemon", daemon: `{"data-root": "/var/lib/docker", "userns-remap": "testuser"}`, users: true, link: true, want: "/mnt/real/231072.231072"},
		{name: "userns-remap gpurun cannot resolve, and no daemon", daemon: `{"userns-remap": "default"}`, want: "/var/lib/docker", warn: "userns-remap"},
		{name: "the running dockerd reads this daemon.json by default", daemon: `{"data-root": "/mnt/nvme/docker"}`,
			live: RunningDockerd{DataRoot: "/srv/docker", PID: 812, Args: []string{"/usr/bin/dockerd", "-H", "fd://", "--data-root", "/srv/docker"}},
			want: "/srv/docker", warn: "the running dockerd uses data-root /srv/docker"},
		{name: "the running dockerd reads another daemon.json", daemon: `{"data-root": "/mnt/nvme/docker"}`,
			live: RunningDockerd{DataRoot: "/var/lib/docker", PID: 812, Args: []string{"/usr/bin/dockerd", "--config-file", "/etc/docker/other.json"}},
			want: "/mnt/nvme/docker", warn: "reads /etc/docker/other.json, not /etc/docker/daemon.json"},
		{name: "the running dockerd reads this daemon.json through a link", daemon: `{"data-root": "/mnt/nvme/docker"}`,
			live: RunningDockerd{DataRoot: "/mnt/nvme/docker", PID: 812, Args: []string{"/usr/bin/dockerd", "--config-file=/etc/docker/link.json"}},
			want: "/mnt/nvme/docker"},
		{name: "a data-root runtimeArgs cannot carry, not in engine_roots", daemon: `{"data-root": "/mnt/my docker"}`, warn: `will be refused; add "/mnt/my docker" to engine_roots`},
		{name: "a data-root runtimeArgs cannot carry, in engine_roots", daemon: `{"data-root": "/mnt/my docker"}`, policy: "engine_roots = [\"/mnt\"]\n", warn: "covers /mnt/my docker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			var out bytes.Buffer
			cfg := filepath.Join(root, "etc/docker/daemon.json")
			write(t, cfg, tt.daemon)
			if err := os.Symlink("daemon.json", filepath.Join(root, "etc/docker/link.json")); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(root, "etc/docker/other.json"), "{}")
			write(t, filepath.Join(root, "etc/gpurun/config.toml"), tt.policy)
			if tt.users {
				write(t, filepath.Join(root, "etc/passwd"), passwd)
				write(t, filepath.Join(root, "etc/subuid"), subids)
				write(t, filepath.Join(root, "etc/subgid"), subids)
			}
			if tt.link {
				if err := os.MkdirAll(filepath.Join(root, "mnt/real"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(root, "var/lib"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("../../mnt/real", filepath.Join(root, "var/lib/docker")); err != nil {
					t.Fatal(err)
				}
			}
			d := Docker{Options: opts(root, &out), DataRoot: tt.explicit}
			if tt.live.DataRoot != "" {
				d.Daemon = func() (RunningDockerd, error) { return tt.live, nil }
			}
			if err := d.Install(); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Runtimes map[string]struct {
					Args []string `json:"runtimeArgs"`
				} `json:"runtimes"`
			}
			if err := json.Unmarshal([]byte(read(t, cfg)), &doc); err != nil {
				t.Fatal(err)
			}
			args := doc.Runtimes[RuntimeName].Args
			switch {
			case tt.want == "" && len(args) != 0:
				t.Errorf("runtimeArgs %q, want none", args)
			case tt.want != "" && (len(args) != 1 || args[0] != flag+tt.want):
				t.Errorf("runtimeArgs %q, want [%s%s]", args, flag, tt.want)
			}
			if !strings.Contains(out.String(), tt.says) {
				t.Errorf("output:\n%s\nwant it to say %q", out.String(), tt.says)
			}
			if got := strings.Contains(out.String(), "warning:"); got != (tt.warn != "") || !strings.Contains(out.String(), tt.warn) {
				t.Errorf("output:\n%s\nwant a warning saying %q", out.String(), tt.warn)
			}
		})
	}
}

// An install killed after its engine config was written but before the
// policy was chained: the state says pending, the config already names
// gpurun as the default (so the chain can no longer be worked out from
// it). A rerun must finish from the record; uninstall then restores all.
func TestDockerInstallFinishesPending(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	cfg := filepath.Join(root, "etc/docker/daemon.json")
	pol := filepath.Join(root, "etc/gpurun/config.toml")
	statePath := filepath.Join(root, "var/lib/gpurun/state.json")
	write(t, cfg, nvidiaDaemonJSON)
	const site = "# site policy\nmin = \"2g\"\n"
	write(t, pol, site)
	d := Docker{Options: opts(root, &out), SetAsDefault: true}
	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	// Back to the moment of the kill: the policy as before, the record pending.
	write(t, pol, site)
	st, err := loadState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	rec := st["docker"][cfg]
	if rec.Pending || rec.Policy == nil {
		t.Fatalf("record after a whole install: %+v", rec)
	}
	rec.Pending = true
	st["docker"][cfg] = rec
	if err := st.save(statePath); err != nil {
		t.Fatal(err)
	}

	out.Reset()
	if err := d.Install(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "finished the install") {
		t.Errorf("rerun said:\n%s", out.String())
	}
	got, err := policy.Load(pol, true)
	if err != nil || got.Runtime != "nvidia-container-runtime" {
		t.Fatalf("policy after the rerun: %+v, %v", got, err)
	}
	if st, err = loadState(statePath); err != nil || st["docker"][cfg].Pending {
		t.Fatalf("state after the rerun: %+v, %v", st, err)
	}
	if err := d.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if read(t, cfg) != nvidiaDaemonJSON || read(t, pol) != site {
		t.Errorf("after uninstall:\n%s\n%s", read(t, cfg), read(t, pol))
	}
}

// TestDockerDefaultReplacedTwice: gpurun installed as dockerd's default,
// then another tool makes its runtime the default (nvidia-ctk runtime
// configure --set-as-default rewrites daemon.json), then gpurun installed
// again: the uninstall gives back the default gpurun replaced last, the
// other tool's, with a reload (dockerd takes the default from the file).
// Where the default gpurun replaced was none, the uninstall takes the key
// out and does not reload a dockerd whose runtimes the file still lists:
// the reload would keep gpurun the default and drop its runtime, and
// dockerd 20.10 panics on a default runtime it does not have.
func TestDockerDefaultReplacedTwice(t *testing.T) {
	const registered = `{
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}`
	for _, tc := range []struct {
		name string
		// other is the default another tool sets between gpurun's
		// installs ("": none, one install only).
		other       string
		wantDefault any // daemon.json's default-runtime after the uninstall (nil: no key)
		wantReload  bool
	}{
		{"another tool's default in between", "nvidia", "nvidia", true},
		{"no default before gpurun's", "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			var out bytes.Buffer
			cfg := filepath.Join(root, "etc/docker/daemon.json")
			write(t, cfg, registered)
			d := Docker{Options: opts(root, &out), SetAsDefault: true}
			if err := d.Install(); err != nil {
				t.Fatal(err)
			}
			if tc.other != "" {
				var m map[string]any
				if err := json.Unmarshal([]byte(read(t, cfg)), &m); err != nil {
					t.Fatal(err)
				}
				m["default-runtime"] = tc.other
				data, _ := json.MarshalIndent(m, "", "    ")
				write(t, cfg, string(data))
				if err := d.Install(); err != nil {
					t.Fatal(err)
				}
			}
			// A stand-in for dockerd: SIGHUP ends it (standInDockerd).
			daemon := exec.Command(os.Args[0])
			daemon.Env = append(os.Environ(), standInEnv+"=1")
			ready, err := daemon.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := daemon.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait until it has asked for SIGHUP: one sent before would
			// be lost where whatever started the tests ignores SIGHUP
			// (nohup), the stand-in inheriting that.
			line, err := bufio.NewReader(ready).ReadString('\n')
			if err != nil || line != standInReady+"\n" {
				t.Fatalf("the stand-in dockerd said %q, %v; want %q", line, err, standInReady)
			}
			done := make(chan struct{})
			go func() { _ = daemon.Wait(); close(done) }()
			t.Cleanup(func() { _ = daemon.Process.Kill(); <-done })
			// The node's root is this machine's: its /proc, its pid file.
			if err := os.Symlink("/proc", filepath.Join(root, "proc")); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(root, "run/dockerd.pid"), strconv.Itoa(daemon.Process.Pid))
			d.Reload, d.PIDFile = true, "/run/dockerd.pid"
			out.Reset()
			if err := d.Uninstall(); err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(read(t, cfg)), &m); err != nil {
				t.Fatal(err)
			}
			if runtimes, _ := m["runtimes"].(map[string]any); len(runtimes) != 1 || runtimes["nvidia"] == nil || m["default-runtime"] != tc.wantDefault {
				t.Errorf("after the uninstall: runtimes %v, default-runtime %v; want nvidia's only, default %v\n%s", m["runtimes"], m["default-runtime"], tc.wantDefault, read(t, cfg))
			}
			// A SIGHUP ends the stand-in at once; on a busy machine it may
			// take a while to be scheduled: wait long for an exit that
			// must come, briefly for one that must not.
			wait := 2 * time.Second
			if tc.wantReload {
				wait = 30 * time.Second
			}
			select {
			case <-done:
			case <-time.After(wait):
			}
			reloaded := daemon.ProcessState != nil
			if reloaded != tc.wantReload {
				t.Errorf("dockerd reloaded: %v; want %v\n%s", reloaded, tc.wantReload, out.String())
			}
			if !tc.wantReload && !strings.Contains(out.String(), "systemctl restart docker") {
				t.Errorf("the uninstall does not say dockerd must restart:\n%s", out.String())
			}
		})
	}
}

// standInEnv makes the test binary a stand-in for dockerd (TestMain),
// which prints standInReady once it listens for SIGHUP.
const (
	standInEnv   = "GPURUN_TEST_STANDIN_DOCKERD"
	standInReady = "ready"
)

// TestMain runs the tests, or, with standInEnv set, stands in for dockerd:
// it waits for SIGHUP and exits 0 (1 after a minute without one). It asks
// for SIGHUP itself, so a SIGHUP ignored by whatever started the tests
// (nohup) does not stay ignored, as it would in a sleep(1).
func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) == "" {
		os.Exit(m.Run())
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	fmt.Println(standInReady)
	select {
	case <-hup:
		os.Exit(0)
	case <-time.After(time.Minute):
		os.Exit(1)
	}
}
