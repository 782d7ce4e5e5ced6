package main

import (
	"net"
	"reflect"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Mount
		wantErr string
	}{
		{
			name: "root, tmpfs with optional fields, escaped bind of a subdirectory",
			in: "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n" +
				"812 27 0:95 / /tmp/gpurun-hc-1/state/sandboxes/ab/shm rw,nosuid,nodev,noexec,relatime shared:7 master:1 - tmpfs shm rw,size=65536k\n" +
				"813 27 254:0 /srv/my\\040dir /mnt/a\\134b rw - ext4 /dev/vda rw\n",
			want: []Mount{
				{Point: "/", Root: "/", FSType: "ext4", Source: "/dev/vda", Options: "rw,relatime", SuperOptions: "rw,discard"},
				{Point: "/tmp/gpurun-hc-1/state/sandboxes/ab/shm", Root: "/", FSType: "tmpfs", Source: "shm", Options: "rw,nosuid,nodev,noexec,relatime", SuperOptions: "rw,size=65536k"},
				{Point: `/mnt/a\b`, Root: "/srv/my dir", FSType: "ext4", Source: "/dev/vda", Options: "rw", SuperOptions: "rw"},
			},
		},
		{
			name: "nsfs bind without super options",
			in:   "900 27 0:4 net:[4026532280] /tmp/gpurun-hd-2/netns rw - nsfs nsfs\n",
			want: []Mount{{Point: "/tmp/gpurun-hd-2/netns", Root: "net:[4026532280]", FSType: "nsfs", Source: "nsfs", Options: "rw"}},
		},
		{name: "empty", in: "", want: nil},
		{name: "no separator", in: "27 1 254:0 / / rw ext4 /dev/vda rw\n", wantErr: `line 1: no " - " separator`},
		{name: "too few fields", in: "27 1 254:0 / - ext4 /dev/vda rw\n", wantErr: "line 1: too few fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	// Field 22 (starttime) is 552279; comm may hold spaces and parentheses.
	tail := " S 2094 5767 2094 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 12 0 552279 1000 100"
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr string
	}{
		{"plain", "5767 (dockerd)" + tail, procStat{comm: "dockerd", state: 'S', ppid: 2094, start: 552279}, ""},
		{"comm with space and parenthesis", "42 (a b) c)" + tail, procStat{comm: "a b) c", state: 'S', ppid: 2094, start: 552279}, ""},
		{"zombie", "5056 (containerd-shim) Z 1 5 5 0 -1 4 1 0 0 0 0 0 0 0 20 0 1 0 99 0 0", procStat{comm: "containerd-shim", state: 'Z', ppid: 1, start: 99}, ""},
		{"no comm", "5767 dockerd S 1", procStat{}, "no (comm)"},
		{"truncated", "5767 (dockerd) S 1 2 3", procStat{}, "too few fields"},
		{"bad ppid", "5767 (dockerd) S x" + tail[4:], procStat{}, "ppid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestWatched(t *testing.T) {
	tests := []struct {
		comm   string
		argv   []string
		want   bool
		daemon bool
	}{
		{"dockerd", []string{"/usr/sbin/dockerd", "-H", "unix:///tmp/x.sock"}, true, true},
		{"containerd", []string{"containerd", "--config", "/var/run/docker/containerd/containerd.toml"}, true, true},
		{"containerd", []string{"/usr/bin/containerd", "--config", "/tmp/x/config.toml", "config", "dump"}, true, false},
		{"dockerd", []string{"dockerd", "--version"}, true, false},
		{"containerd-shim", []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "moby"}, true, false},
		{"runc", []string{"runc", "init"}, true, false},
		{"conmon", []string{"/usr/bin/conmon", "--api-version", "1"}, true, false},
		{"podman", []string{"podman", "run"}, true, false},
		{"kubelet", []string{"/usr/local/bin/kubelet"}, true, true},
		{"kube-apiserver", []string{"kube-apiserver", "--etcd-servers=x"}, true, true},
		{"etcd", []string{"etcd"}, true, true},
		{"10-gpurun", []string{"/tmp/x/nri/plugins/10-gpurun"}, true, false},
		{"gpurun", []string{"/usr/local/bin/gpurun", "node", "run"}, true, false},
		// A process that names a harness directory, whatever it is.
		{"sleep", []string{"sleep", "2147483647", "/tmp/gpurun-hc-123/x"}, true, false},
		{"sleep", []string{"sleep", "600"}, false, false},
		{"bash", []string{"bash", "-c", "docker ps"}, false, false},
		// Kernel threads have no command line: comm decides.
		{"kworker/0:1", nil, false, false},
	}
	for _, tt := range tests {
		name := processName(tt.comm, tt.argv)
		if got := watched(name, tt.argv); got != tt.want {
			t.Errorf("watched(%q, %q) = %v, want %v", name, tt.argv, got, tt.want)
		}
		if got := daemon(name, tt.argv); got != tt.daemon {
			t.Errorf("daemon(%q, %q) = %v, want %v", name, tt.argv, got, tt.daemon)
		}
	}
}

func TestIgnoredCgroup(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"user.slice", true},
		{"apt-daily.service", true},
		{"docker.service", false},
		{"containerd.service", false},
		{"gpurun-hc-123", false},
		{"docker", false},
		{"kubepods.slice", false},
		{"docker-0123.scope", false},
		{"session-4.scope", false}, // under user.slice, which is skipped whole
	}
	for _, tt := range tests {
		if got := ignoredCgroup(tt.name); got != tt.want {
			t.Errorf("ignoredCgroup(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestStableAddrs(t *testing.T) {
	cidr := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	got := stableAddrs([]net.Addr{cidr("fe80::42:acff:fe11:1/64"), cidr("172.17.0.1/16"), cidr("fd00::2/64")})
	if want := []string{"172.17.0.1/16", "fd00::2/64"}; !reflect.DeepEqual(got, want) {
		t.Errorf("stableAddrs = %q, want %q (IPv6 link-local left out)", got, want)
	}
}
