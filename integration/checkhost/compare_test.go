package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// lines renders changes as report lines.
func lines(cs []Change) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

func TestCompare(t *testing.T) {
	docker0 := Interface{Up: true, Addrs: []string{"172.17.0.1/16"}}
	eth0 := Interface{Up: true, Addrs: []string{"192.0.2.2/24"}}
	shm := Mount{Point: "/dev/shm", Root: "/", FSType: "tmpfs", Source: "tmpfs", Options: "rw,relatime", SuperOptions: "rw,size=24684092k"}
	root := Mount{Point: "/", Root: "/", FSType: "ext4", Source: "/dev/vda", Options: "rw", SuperOptions: "rw"}
	left := Mount{Point: "/tmp/gpurun-hc-1/state/sandboxes/ab/shm", Root: "/", FSType: "tmpfs", Source: "shm", Options: "rw", SuperOptions: "rw,size=65536k"}
	netns := Mount{Point: "/run/netns/netns-1", Root: "net:[4026532280]", FSType: "nsfs", Source: "nsfs", Options: "rw"}
	hostDockerd := Process{PID: 5767, Start: 100, Name: "dockerd", Cmdline: "dockerd"}
	shim := Process{PID: 7000, Start: 900, Name: "containerd-shim-runc-v2", Cmdline: "/usr/bin/containerd-shim-runc-v2 -namespace moby"}

	tests := []struct {
		name          string
		before, after Snapshot
		want          []string
	}{
		{
			name:   "nothing changed",
			before: Snapshot{Interfaces: map[string]Interface{"docker0": docker0}, Files: map[string]string{"/etc/docker": "dir 0755"}, Mounts: []Mount{root, shm}, Cgroups: []string{"memory"}, Processes: []Process{hostDockerd}},
			after:  Snapshot{Interfaces: map[string]Interface{"docker0": docker0}, Files: map[string]string{"/etc/docker": "dir 0755"}, Mounts: []Mount{root, shm}, Cgroups: []string{"memory"}, Processes: []Process{hostDockerd}},
			want:   []string{},
		},
		{
			name:   "docker0 deleted, an interface left, addresses and state changed",
			before: Snapshot{Interfaces: map[string]Interface{"docker0": docker0, "eth0": eth0, "lo": {Up: true}}},
			after:  Snapshot{Interfaces: map[string]Interface{"eth0": {Up: true, Addrs: []string{"192.0.2.9/24"}}, "lo": {Up: false}, "veth1": {}}},
			want: []string{
				`interface docker0: gone (it had 172.17.0.1/16)` + docker0Gone,
				"interface eth0: addresses 192.0.2.2/24 -> 192.0.2.9/24",
				"interface lo: was up, now down",
				"interface veth1: new (no address, down)",
			},
		},
		{
			name: "files: new tree collapsed, changed content, removed file",
			before: Snapshot{Files: map[string]string{
				"/etc/docker":                      "dir 0755",
				"/etc/docker/daemon.json":          "file 0644 sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
				"/etc/containers/oci/hooks.d":      "dir 0755",
				"/etc/containers/oci/hooks.d/x.js": "file 0644 sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
			}},
			after: Snapshot{Files: map[string]string{
				"/etc/docker":                 "dir 0755",
				"/etc/docker/daemon.json":     "file 0644 sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
				"/etc/containers/oci/hooks.d": "dir 0755",
				"/etc/gpurun":                 "dir 0755",
				"/etc/gpurun/config.toml":     "file 0644 sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
				"/etc/gpurun/x":               "dir 0755",
				"/etc/gpurun/x/y":             "symlink -> /z",
			}},
			want: []string{
				"file /etc/containers/oci/hooks.d/x.js: removed (was file 0644 sha256:cccccccccccc…)",
				"file /etc/docker/daemon.json: changed: file 0644 sha256:aaaaaaaaaaaa… -> file 0644 sha256:bbbbbbbbbbbb…",
				"file /etc/gpurun: new (dir 0755, with 3 entries below)",
			},
		},
		{
			name:   "mounts: left tmpfs and nsfs, a remounted /dev/shm, an unmounted one, stacked duplicates",
			before: Snapshot{Mounts: []Mount{root, shm, left, {Point: "/mnt/gone", Root: "/", FSType: "tmpfs", Source: "tmpfs"}}},
			after: Snapshot{Mounts: []Mount{root, {Point: "/dev/shm", Root: "/", FSType: "tmpfs", Source: "tmpfs", Options: "rw,relatime", SuperOptions: "rw,size=2097152k"},
				left, left, netns}},
			want: []string{
				"mount /dev/shm: tmpfs from tmpfs: filesystem options rw,size=24684092k -> rw,size=2097152k",
				"mount /mnt/gone: gone (was tmpfs from tmpfs)",
				"mount /run/netns/netns-1: new nsfs from nsfs (bind of net:[4026532280]) (a namespace held open), left mounted",
				"mount /tmp/gpurun-hc-1/state/sandboxes/ab/shm: new tmpfs from shm, left mounted",
			},
		},
		{
			name:   "cgroups: only the topmost new one, with what lies below",
			before: Snapshot{Cgroups: []string{"memory", "memory/docker", "pids"}},
			after:  Snapshot{Cgroups: []string{"memory", "memory/docker", "memory/docker/abc", "memory/gpurun-hc-1", "memory/gpurun-hc-1/pod", "memory/gpurun-hc-1/pod/ctr", "pids"}},
			want: []string{
				"cgroup memory/docker/abc: new, left behind",
				"cgroup memory/gpurun-hc-1: new, left behind, with 2 entries below",
			},
		},
		{
			name:   "processes: a shim left running, the host's dockerd gone, a reused pid",
			before: Snapshot{Processes: []Process{hostDockerd, {PID: 6000, Start: 5, Name: "runc", Cmdline: "runc init"}}},
			after:  Snapshot{Processes: []Process{shim, {PID: 5767, Start: 950, Name: "dockerd", Cmdline: "/usr/sbin/dockerd -H unix:///tmp/gpurun-hd-1/docker.sock"}}},
			want: []string{
				"process 5767: dockerd started during the tests and still runs: /usr/sbin/dockerd -H unix:///tmp/gpurun-hd-1/docker.sock",
				"process 5767: dockerd was running before the tests and is gone: dockerd",
				"process 7000: containerd-shim-runc-v2 started during the tests and still runs: /usr/bin/containerd-shim-runc-v2 -namespace moby",
			},
		},
		{
			name: "a killed run's leftovers swept: not a change; a live run's mounts gone: a change",
			before: Snapshot{
				Mounts:    []Mount{root, {Point: "/tmp/gpurun-hk-9/n", Root: "/", FSType: "ext4", Source: "/dev/vda"}, {Point: "/tmp/gpurun-hk-10/n", Root: "/", FSType: "ext4", Source: "/dev/vda"}},
				Processes: []Process{{PID: 7001, Start: 3, Name: "containerd-shim-runc-v2", Cmdline: "containerd-shim-runc-v2 -address /tmp/gpurun-hk-9/n/c/containerd.sock"}, {PID: 7002, Start: 3, Name: "containerd", Cmdline: "containerd --config /tmp/gpurun-hk-10/c.toml"}},
				Tmp:       []string{"/tmp/gpurun-hk-9", "/tmp/gpurun-hk-10"},
				Stale:     []string{"/tmp/gpurun-hk-9"},
			},
			after: Snapshot{Mounts: []Mount{root}},
			want: []string{
				"mount /tmp/gpurun-hk-10/n: gone (was ext4 from /dev/vda)",
				"process 7002: containerd was running before the tests and is gone: containerd --config /tmp/gpurun-hk-10/c.toml",
			},
		},
		{
			name:   "tmp leftovers",
			before: Snapshot{Tmp: []string{"/tmp/gpurun-bin-1"}},
			after:  Snapshot{Tmp: []string{"/tmp/gpurun-bin-1", "/tmp/gpurun-hd-2"}},
			want:   []string{"tmp /tmp/gpurun-hd-2: left behind"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lines(Compare(&tt.before, &tt.after))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// TestTakeTrees: files are hashed, modes and link targets recorded, globs
// expanded, missing roots record nothing; tmp entries are matched by
// prefix; and a changed file shows in the comparison.
func TestTakeTrees(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc", "docker")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(etc, 0o755))
	must(os.WriteFile(filepath.Join(etc, "daemon.json"), []byte("{}\n"), 0o644))
	must(os.Symlink("daemon.json", filepath.Join(etc, "link")))
	bin := filepath.Join(dir, "bin")
	must(os.MkdirAll(bin, 0o755))
	must(os.WriteFile(filepath.Join(bin, "gpurun"), []byte("x"), 0o755))
	must(os.WriteFile(filepath.Join(bin, "other"), []byte("y"), 0o755))
	tmp := filepath.Join(dir, "tmp")
	must(os.MkdirAll(filepath.Join(tmp, "gpurun-hd-1"), 0o700))
	must(os.MkdirAll(filepath.Join(tmp, "unrelated"), 0o700))

	src := Sources{Trees: []string{etc, filepath.Join(bin, "gpurun*"), filepath.Join(dir, "missing")}, TmpDir: tmp, TmpPrefixes: []string{HarnessPrefix}}
	before, err := Take(src)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		etc:                               "dir 0755",
		filepath.Join(etc, "daemon.json"): "file 0644 sha256:ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
		filepath.Join(etc, "link"):        "symlink -> daemon.json",
		filepath.Join(bin, "gpurun"):      "file 0755 sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
	}
	if !reflect.DeepEqual(before.Files, want) {
		t.Errorf("files\n got %v\nwant %v", before.Files, want)
	}
	if want := []string{filepath.Join(tmp, "gpurun-hd-1")}; !reflect.DeepEqual(before.Tmp, want) {
		t.Errorf("tmp = %v, want %v", before.Tmp, want)
	}

	must(os.WriteFile(filepath.Join(etc, "daemon.json"), []byte(`{"runtimes": {}}`+"\n"), 0o644))
	must(os.Chmod(filepath.Join(etc, "daemon.json"), 0o600))
	after, err := Take(src)
	if err != nil {
		t.Fatal(err)
	}
	got := lines(Compare(before, after))
	if len(got) != 1 || !strings.HasPrefix(got[0], "file "+filepath.Join(etc, "daemon.json")+": changed: file 0644 sha256:ca3d163bab05… -> file 0600 sha256:") {
		t.Errorf("changes %q, want daemon.json's mode and content", got)
	}
}

// TestRun: the command's exit status and report for a snapshot and a
// comparison, with and without a change, and its usage errors.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	watchedDir := filepath.Join(dir, "gpurun")
	src := Sources{Trees: []string{watchedDir}}
	file := filepath.Join(dir, "snap.json")
	var out, errOut bytes.Buffer
	runIt := func(args ...string) int {
		out.Reset()
		errOut.Reset()
		return run(args, src, &out, &errOut)
	}
	if code := runIt("compare", file); code != 2 || !strings.Contains(errOut.String(), "no snapshot at "+file) || !strings.Contains(errOut.String(), "make host-snapshot") {
		t.Errorf("compare without a snapshot: exit %d, %q", code, errOut.String())
	}
	if code := runIt("snapshot", file); code != 0 || !strings.Contains(out.String(), "snapshot of the host in "+file) {
		t.Fatalf("snapshot: exit %d, %q %q", code, out.String(), errOut.String())
	}
	if code := runIt("compare", file); code != 0 || !strings.Contains(out.String(), "the host is as the snapshot") {
		t.Errorf("compare, unchanged: exit %d, %q %q", code, out.String(), errOut.String())
	}
	if err := os.MkdirAll(watchedDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if code := runIt("compare", file); code != 1 || !strings.Contains(out.String(), "  file "+watchedDir+": new (dir 0755)\n") {
		t.Errorf("compare, changed: exit %d, %q %q", code, out.String(), errOut.String())
	}
	for _, args := range [][]string{nil, {"snapshot"}, {"compare", "a", "b"}, {"diff", file}, {"frobnicate", file}} {
		if code := runIt(args...); code != 2 || !strings.Contains(errOut.String(), "usage:") {
			t.Errorf("%q: exit %d, %q", args, code, errOut.String())
		}
	}
}

// TestStaleDirs: a harness directory is stale when its owner file names a
// process that has exited; one whose owner runs, or without an owner file,
// is not.
func TestStaleDirs(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{
		"gpurun-hk-dead":  strconv.Itoa(cmd.Process.Pid),
		"gpurun-hk-alive": strconv.Itoa(os.Getpid()),
		"gpurun-hk-none":  "",
		"gpurun-hk-junk":  "not a pid",
	}
	var all []string
	for name, owner := range dirs {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, OwnerFile), []byte(owner+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, d)
	}
	sort.Strings(all)
	got := staleDirs(all)
	if want := []string{filepath.Join(tmp, "gpurun-hk-dead")}; !reflect.DeepEqual(got, want) {
		t.Errorf("staleDirs = %v, want %v", got, want)
	}
}
