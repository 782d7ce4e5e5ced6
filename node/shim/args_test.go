package shim

import (
	"slices"
	"testing"
)

func TestParseArgs(t *testing.T) {
	const cwd = "/run/containerd/io.containerd.runtime.v2.task/k8s.io/sandbox"
	tests := []struct {
		name string
		args []string
		want Invocation
	}{
		{"containerd shim v2 create",
			[]string{"--root", "/run/containerd/runc/k8s.io", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "abc123"},
			Invocation{Command: "create", Bundle: "/b", ID: "abc123", Log: "/b/log.json", LogFormat: "json"}},
		{"dockerd create",
			[]string{"--root", "/var/run/docker/runtime-runc/moby", "--log", "/b/log.json", "--log-format", "json", "--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "deadbeef"},
			Invocation{Command: "create", Bundle: "/b", ID: "deadbeef", Log: "/b/log.json", LogFormat: "json"}},
		{"start", []string{"--root", "/r", "start", "abc"}, Invocation{Command: "start", ID: "abc"}},
		{"delete --force", []string{"--root", "/r", "delete", "--force", "abc"}, Invocation{Command: "delete", ID: "abc"}},
		{"run with -b=", []string{"run", "-b=/x/y", "-d", "c1"}, Invocation{Command: "run", Bundle: "/x/y", ID: "c1"}},
		{"run with --bundle=", []string{"run", "--bundle=/x/y/", "c1"}, Invocation{Command: "run", Bundle: "/x/y", ID: "c1"}},
		{"create with -b", []string{"create", "-b", "/x", "c1"}, Invocation{Command: "create", Bundle: "/x", ID: "c1"}},
		{"no bundle: the working directory", []string{"create", "c1"}, Invocation{Command: "create", Bundle: cwd, ID: "c1"}},
		{"relative bundle", []string{"create", "--bundle", "b", "c1"}, Invocation{Command: "create", Bundle: cwd + "/b", ID: "c1"}},
		{"a bundle literally named create", []string{"create", "--bundle", "create", "run"}, Invocation{Command: "create", Bundle: cwd + "/create", ID: "run"}},
		{"a root named create", []string{"--root", "create", "start", "x"}, Invocation{Command: "start", ID: "x"}},
		{"single-dash global flags (urfave/cli)", []string{"-root", "/r", "-log", "/l", "create", "-bundle", "/b", "id"}, Invocation{Command: "create", Bundle: "/b", ID: "id", Log: "/l"}},
		{"--root=", []string{"--root=/r", "--log-format=json", "create", "--console-socket", "/s.sock", "--bundle", "/b", "id"}, Invocation{Command: "create", Bundle: "/b", ID: "id", LogFormat: "json"}},
		{"preserve-fds and pidfd-socket", []string{"create", "--preserve-fds", "3", "--pidfd-socket", "/p", "-b", "/b", "--no-pivot", "--no-new-keyring", "id"}, Invocation{Command: "create", Bundle: "/b", ID: "id"}},
		{"crun's --cgroup-manager and -f", []string{"--cgroup-manager", "systemd", "create", "-f", "cfg.json", "-b", "/b", "id"}, Invocation{Command: "create", Bundle: "/b", ID: "id"}},
		{"rootless value", []string{"--rootless", "false", "--criu", "/usr/sbin/criu", "run", "id"}, Invocation{Command: "run", Bundle: cwd, ID: "id"}},
		{"--debug --version", []string{"--debug", "--version"}, Invocation{}},
		{"nothing", nil, Invocation{}},
		{"id after --", []string{"create", "-b", "/b", "--", "-weird-id"}, Invocation{Command: "create", Bundle: "/b", ID: "-weird-id"}},
		{"features", []string{"features"}, Invocation{Command: "features"}},
		{"dockerd with runtimeArgs: its data-root first",
			[]string{"--gpurun-docker-data-root=/srv/docker", "--root", "/var/run/docker/runtime-runc/moby", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "deadbeef"},
			Invocation{Command: "create", Bundle: "/b", ID: "deadbeef", Log: "/b/log.json", LogFormat: "json", DockerRoot: "/srv/docker"}},
		{"the data-root as a separate value", []string{"--gpurun-docker-data-root", "/srv/docker", "start", "x"}, Invocation{Command: "start", ID: "x", DockerRoot: "/srv/docker"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseArgs(tt.args, cwd); got != tt.want {
				t.Errorf("ParseArgs(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestRuncArgs(t *testing.T) {
	tests := []struct {
		name       string
		args, want []string
	}{
		{"dockerd's runtimeArgs first", []string{"--gpurun-docker-data-root=/srv/docker", "--root", "/r", "create", "--bundle", "/b", "id"}, []string{"--root", "/r", "create", "--bundle", "/b", "id"}},
		{"with a separate value", []string{"--root", "/r", "--gpurun-docker-data-root", "/srv/docker", "start", "id"}, []string{"--root", "/r", "start", "id"}},
		{"single dash", []string{"-gpurun-docker-data-root=/d", "delete", "id"}, []string{"delete", "id"}},
		{"none of ours: the same slice", []string{"--root", "/r", "create", "id"}, []string{"--root", "/r", "create", "id"}},
		{"after the subcommand it is not ours to take", []string{"create", "--gpurun-docker-data-root=/d", "id"}, []string{"create", "--gpurun-docker-data-root=/d", "id"}},
		{"a root literally named like our flag", []string{"--root", "--gpurun-docker-data-root=/d", "start", "id"}, []string{"--root", "--gpurun-docker-data-root=/d", "start", "id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RuncArgs(tt.args); !slices.Equal(got, tt.want) {
				t.Errorf("RuncArgs(%q) = %q, want %q", tt.args, got, tt.want)
			}
		})
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("--gpurun-docker-data-root=/d\x00--root\x00/r\x00create\x00id")
	f.Add("--root\x00/r\x00create\x00--bundle\x00/b\x00id")
	f.Add("run\x00-b=x\x00--\x00id")
	f.Fuzz(func(t *testing.T, joined string) {
		args := splitNUL(joined)
		inv := ParseArgs(args, "/cwd")
		if (inv.Command == "create" || inv.Command == "run") && inv.Bundle == "" {
			t.Fatalf("%q: create/run without a bundle", args)
		}
		if inv.Command != "create" && inv.Command != "run" && inv.Bundle != "" {
			t.Fatalf("%q: bundle for %q", args, inv.Command)
		}
		// What runc gets is the same command line without gpurun's flag.
		rest := RuncArgs(args)
		got := ParseArgs(rest, "/cwd")
		want := inv
		want.DockerRoot = ""
		if got != want {
			t.Fatalf("%q: without gpurun's flag %q parses as %+v, want %+v", args, rest, got, want)
		}
	})
}

func splitNUL(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
