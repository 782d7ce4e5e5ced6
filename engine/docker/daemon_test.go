package docker

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadDaemonJSON reads the fixtures (real daemon.json files, see
// testdata/README.md) and the shapes around them.
func TestReadDaemonJSON(t *testing.T) {
	fixture := func(name string) string {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	tests := []struct {
		name string
		in   string
		want Daemon
		err  string // a part of the error; "" for none
	}{
		{name: "empty.json", in: fixture("empty.json")},
		{name: "blank", in: " \n\t"},
		{name: "docker-desktop-default.json", in: fixture("docker-desktop-default.json")},
		{name: "many-keys-tabs.json", in: fixture("many-keys-tabs.json"), want: Daemon{
			DataRoot: "/srv/docker", DefaultShmSize: "64M",
			Runtimes: map[string]Runtime{"crun": {Path: "/usr/bin/crun"}},
		}},
		{name: "dockerd-docs-custom-runtime.json", in: fixture("dockerd-docs-custom-runtime.json"), want: Daemon{
			Runtimes: map[string]Runtime{"custom": {Path: "/usr/local/bin/my-runc-replacement", Args: []string{"--debug"}}},
		}},
		{name: "nvidia-ctk-set-as-default.json", in: fixture("nvidia-ctk-set-as-default.json"), want: Daemon{
			DefaultRuntime: "nvidia",
			Runtimes:       map[string]Runtime{"nvidia": {Path: "nvidia-container-runtime"}},
		}},
		{name: "dockerd-docs-userns-remap.json", in: fixture("dockerd-docs-userns-remap.json"), want: Daemon{UsernsRemap: "testuser"}},
		{name: "graph, data-root's name before 23.0", in: `{"graph": "/srv/docker"}`, want: Daemon{DataRoot: "/srv/docker"}},
		{name: "data-root wins over graph", in: `{"data-root": "/a", "graph": "/b"}`, want: Daemon{DataRoot: "/a"}},
		{name: "pidfile, hosts and a shim v2 runtime", in: `{"pidfile": "/run/docker-gpu.pid", "hosts": ["unix:///run/docker-gpu.sock"], "runtimes": {"kata": {"runtimeType": "io.containerd.kata.v2"}}}`,
			want: Daemon{PIDFile: "/run/docker-gpu.pid", Hosts: []string{"unix:///run/docker-gpu.sock"}, Runtimes: map[string]Runtime{"kata": {Type: "io.containerd.kata.v2"}}}},
		{name: "byte order mark", in: "\xef\xbb\xbf{\"data-root\": \"/bom\"}", want: Daemon{DataRoot: "/bom"}},
		{name: "a type dockerd refuses", in: "{\n  \"data-root\": 12\n}", err: "daemon.json:2:18: json: cannot unmarshal number"},
		{name: "malformed", in: "{\n  \"pidfile\": \"/x.pid\"\n", err: "daemon.json:3:1: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadDaemonJSON("daemon.json", []byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ReadDaemonJSON = %+v, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadDaemonJSON =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestPIDFilePath(t *testing.T) {
	tests := []struct {
		d    Daemon
		want string
	}{
		{Daemon{}, DefaultPIDFile},
		{Daemon{PIDFile: "/run/docker-gpu.pid"}, "/run/docker-gpu.pid"},
		{Daemon{PIDFile: "/run/a.pid"}.WithFlags(Flags{PIDFile: "/run/b.pid"}), "/run/b.pid"},
	}
	for _, tt := range tests {
		if got := tt.d.PIDFilePath(); got != tt.want {
			t.Errorf("%+v.PIDFilePath() = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestRoot works out where dockerd keeps its containers, from
// daemon.json and the node's /etc/passwd, /etc/subuid and /etc/subgid, as
// moby's CreateDaemonRoot does. The node files come from where the
// comment says.
func TestRoot(t *testing.T) {
	// docs.docker.com/engine/security/userns-remap: `id testuser` gives
	// uid=1001(testuser), and /etc/subuid and /etc/subgid hold
	// testuser:231072:65536; dockerd then keeps containers under
	// /var/lib/docker/231072.231072.
	const docsPasswd = "root:x:0:0:root:/root:/bin/bash\ntestuser:x:1001:1001::/home/testuser:/bin/sh\n"
	const docsSub = "testuser:231072:65536\n"
	// What dockerd itself adds for "default" (echorand.me, "Docker
	// userns-remap and system users on Linux"): a system user dockremap
	// and a range after the first user's.
	const defaultPasswd = "root:x:0:0:root:/root:/bin/bash\nfluke:x:1000:1000::/home/fluke:/bin/bash\ndockremap:x:999:999::/home/dockremap:/bin/false\n"
	const defaultSub = "fluke:100000:65536\ndockremap:165536:65536\n"
	// gist.github.com/mrbongiolo/b2ba04eb18070da28dc49c0e72881cb7: the
	// user's own id first, then a range: container root is host 1000.
	const gistPasswd = "myusername:x:1000:1000::/home/myusername:/bin/bash\n"
	const gistSub = "myusername:1000:1\nmyusername:100000:65536\n"

	tests := []struct {
		name           string
		daemon         Daemon
		passwd, subuid string
		subgid         string // "" is subuid's
		link           string // data-root is a link to this directory
		want           Root
		err            error
	}{
		{name: "the default", want: Root{Dir: DefaultDataRoot, DataRoot: DefaultDataRoot}},
		{name: "a data-root", daemon: Daemon{DataRoot: "/srv/docker"}, want: Root{Dir: "/srv/docker", DataRoot: "/srv/docker", Set: true}},
		{name: "a data-root through a link", daemon: Daemon{DataRoot: "/var/lib/docker"}, link: "/mnt/nvme/docker",
			want: Root{Dir: "/mnt/nvme/docker", DataRoot: "/var/lib/docker", Set: true}},
		{name: "the docs' testuser", daemon: Daemon{UsernsRemap: "testuser"}, passwd: docsPasswd, subuid: docsSub,
			want: Root{Dir: "/var/lib/docker/231072.231072", DataRoot: DefaultDataRoot, Remap: "231072.231072"}},
		{name: "the docs' testuser by uid", daemon: Daemon{UsernsRemap: "1001"}, passwd: docsPasswd, subuid: docsSub,
			want: Root{Dir: "/var/lib/docker/231072.231072", DataRoot: DefaultDataRoot, Remap: "231072.231072"}},
		{name: "user:group", daemon: Daemon{UsernsRemap: "testuser:testuser"}, passwd: docsPasswd, subuid: docsSub,
			want: Root{Dir: "/var/lib/docker/231072.231072", DataRoot: DefaultDataRoot, Remap: "231072.231072"}},
		{name: "subordinate ids listed by uid", daemon: Daemon{UsernsRemap: "testuser"}, passwd: docsPasswd, subuid: "1001:300000:65536\n",
			want: Root{Dir: "/var/lib/docker/300000.300000", DataRoot: DefaultDataRoot, Remap: "300000.300000"}},
		{name: "the gid from subgid, looked up by the user", daemon: Daemon{UsernsRemap: "testuser:nogroup"}, passwd: docsPasswd,
			subuid: docsSub, subgid: "nogroup:500000:65536\ntestuser:331072:65536\n",
			want: Root{Dir: "/var/lib/docker/231072.331072", DataRoot: DefaultDataRoot, Remap: "231072.331072"}},
		{name: "default is dockremap", daemon: Daemon{UsernsRemap: "default"}, passwd: defaultPasswd, subuid: defaultSub,
			want: Root{Dir: "/var/lib/docker/165536.165536", DataRoot: DefaultDataRoot, Remap: "165536.165536"}},
		{name: "the first range maps root", daemon: Daemon{UsernsRemap: "myusername"}, passwd: gistPasswd, subuid: gistSub,
			want: Root{Dir: "/var/lib/docker/1000.1000", DataRoot: DefaultDataRoot, Remap: "1000.1000"}},
		{name: "an empty range maps nothing", daemon: Daemon{UsernsRemap: "testuser"}, passwd: docsPasswd, subuid: "testuser:5000:0\ntestuser:231072:65536\n",
			want: Root{Dir: "/var/lib/docker/231072.231072", DataRoot: DefaultDataRoot, Remap: "231072.231072"}},
		{name: "root is not remapped, but gets 0.0", daemon: Daemon{UsernsRemap: "root"}, passwd: docsPasswd,
			want: Root{Dir: "/var/lib/docker/0.0", DataRoot: DefaultDataRoot, Remap: "0.0"}},
		{name: "remap under a data-root through a link", daemon: Daemon{DataRoot: "/data/docker", UsernsRemap: "testuser"}, passwd: docsPasswd, subuid: docsSub,
			link: "/mnt/nvme/docker", want: Root{Dir: "/mnt/nvme/docker/231072.231072", DataRoot: "/data/docker", Set: true, Remap: "231072.231072"}},
		{name: "default before dockerd made dockremap", daemon: Daemon{UsernsRemap: "default"}, passwd: docsPasswd, subuid: docsSub,
			want: Root{Dir: DefaultDataRoot, DataRoot: DefaultDataRoot}, err: ErrRemap},
		{name: "a user without subordinate ids", daemon: Daemon{UsernsRemap: "fluke"}, passwd: defaultPasswd, subuid: "dockremap:165536:65536\n",
			want: Root{Dir: DefaultDataRoot, DataRoot: DefaultDataRoot}, err: ErrRemap},
		{name: "no /etc/subuid", daemon: Daemon{UsernsRemap: "testuser"}, passwd: docsPasswd,
			want: Root{Dir: DefaultDataRoot, DataRoot: DefaultDataRoot}, err: ErrRemap},
		{name: "three parts", daemon: Daemon{UsernsRemap: "a:b:c"}, passwd: docsPasswd, subuid: docsSub,
			want: Root{Dir: DefaultDataRoot, DataRoot: DefaultDataRoot}, err: ErrRemap},
		{name: "a flag over daemon.json", daemon: Daemon{DataRoot: "/a"}.WithFlags(Flags{DataRoot: "/b", UsernsRemap: "testuser"}), passwd: docsPasswd, subuid: docsSub,
			want: Root{Dir: "/b/231072.231072", DataRoot: "/b", Set: true, Remap: "231072.231072"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write := func(p, data string) {
				if data == "" {
					return
				}
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("/etc/passwd", tt.passwd)
			write("/etc/subuid", tt.subuid)
			if tt.subgid == "" {
				tt.subgid = tt.subuid
			}
			write("/etc/subgid", tt.subgid)
			if tt.link != "" {
				// An absolute link: it must be followed under the host root.
				dataRoot := tt.daemon.DataRoot
				if err := os.MkdirAll(filepath.Join(root, tt.link), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(dataRoot)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(tt.link, filepath.Join(root, dataRoot)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tt.daemon.Root(root)
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("Root = %+v, %v; want error %v", got, err, tt.err)
			}
			if got != tt.want {
				t.Errorf("Root = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want Flags
	}{
		{"systemd's docker.service", []string{"/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"},
			Flags{ConfigFile: DefaultConfigFile}},
		{"a second daemon", []string{"dockerd", "--config-file", "/etc/docker/gpu.json", "--data-root=/srv/docker", "--pidfile", "/run/gpu.pid", "-H", "unix:///run/gpu.sock"},
			Flags{ConfigFile: "/etc/docker/gpu.json", DataRoot: "/srv/docker", PIDFile: "/run/gpu.pid"}},
		{"shorthands", []string{"dockerd", "-D", "-g", "/old/graph", "-p/run/x.pid"},
			Flags{ConfigFile: DefaultConfigFile, DataRoot: "/old/graph", PIDFile: "/run/x.pid"}},
		{"joined shorthands", []string{"dockerd", "-Dp", "/run/y.pid"}, Flags{ConfigFile: DefaultConfigFile, PIDFile: "/run/y.pid"}},
		{"userns-remap", []string{"dockerd", "--userns-remap=default"}, Flags{ConfigFile: DefaultConfigFile, UsernsRemap: "default"}},
		{"the last one wins", []string{"dockerd", "--config-file=/a.json", "--config-file=/b.json"}, Flags{ConfigFile: "/b.json"}},
		{"a flag without its value", []string{"dockerd", "--data-root"}, Flags{ConfigFile: DefaultConfigFile}},
		{"after --", []string{"dockerd", "--", "--data-root=/x"}, Flags{ConfigFile: DefaultConfigFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseFlags(tt.args); got != tt.want {
				t.Errorf("ParseFlags(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}
