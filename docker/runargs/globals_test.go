package runargs

import (
	"cmp"
	"slices"
	"strings"
	"testing"
)

// TestGlobalFlagTableMatchesDockerHelp checks the global-option table
// against `docker --help` of every installed docker CLI, as
// TestFlagTableMatchesDockerHelp does for `docker run`: every listed option
// is in the table with docker's shorthand, arity and type.
func TestGlobalFlagTableMatchesDockerHelp(t *testing.T) {
	for _, d := range dockerCLIs(t) {
		t.Run(d.String(), func(t *testing.T) {
			out, err := runDocker(t, d, "--help")
			if err != nil {
				t.Fatalf("docker --help: %v\n%s", err, out)
			}
			listed := parseHelp(out)
			if len(listed) < 10 {
				t.Fatalf("found only %d options in docker --help; parser out of date?\n%s", len(listed), out)
			}
			for _, h := range listed {
				f, ok := LookupGlobalFlag(h.long)
				if !ok {
					t.Errorf("--%s (%q) listed by docker --help is not in the table", h.long, h.typ)
					continue
				}
				if f.Shorthand != h.short {
					t.Errorf("--%s: table shorthand %q, docker has %q", h.long, f.Shorthand, h.short)
				}
				if want := cmp.Or(h.typ, "bool"); f.Type != want || f.TakesValue != (h.typ != "") {
					t.Errorf("--%s: table type %q, docker help type %q", h.long, f.Type, want)
				}
				if f.Hidden {
					t.Errorf("--%s: marked Hidden but listed by docker --help", h.long)
				}
			}
			for _, f := range GlobalFlags() {
				if !f.Hidden && !slices.ContainsFunc(listed, func(h helpFlag) bool { return h.long == f.Name }) {
					t.Errorf("--%s is in the table but not listed by docker --help", f.Name)
				}
			}
		})
	}
}

// TestGlobalFlagsAcceptedByDocker gives every installed docker CLI every
// global option of the table, hidden ones included, in each spelling: an
// option taking a value, alone, fails with "flag needs an argument"; a
// boolean one before an unknown command is accepted (docker then complains
// about the command, or 20.10 about missing TLS certificates, never about
// the option).
func TestGlobalFlagsAcceptedByDocker(t *testing.T) {
	for _, d := range dockerCLIs(t) {
		t.Run(d.String(), func(t *testing.T) {
			for _, f := range GlobalFlags() {
				spellings := []string{"--" + f.Name}
				if f.Shorthand != "" {
					spellings = append(spellings, "-"+f.Shorthand)
				}
				for _, s := range spellings {
					t.Run(s, func(t *testing.T) {
						t.Parallel()
						args, want := []string{s}, "flag needs an argument"
						switch {
						case f.Name == "help":
							want = "Usage:"
						case f.Name == "version":
							want = "Docker version"
						case !f.TakesValue:
							args, want = []string{s, "gpurun-no-such-command"}, "gpurun-no-such-command"
						}
						out, _ := runDocker(t, d, args...)
						if !f.TakesValue && strings.Contains(out, "unable to resolve docker endpoint") {
							want = "unable to resolve" // 20.10 with --tls and no certificates
						}
						if !strings.Contains(out, want) || strings.Contains(out, "unknown flag") || strings.Contains(out, "unknown shorthand") {
							t.Errorf("docker %q: want output containing %q, got:\n%s", args, want, out)
						}
					})
				}
			}
		})
	}
}

func TestParseGlobals(t *testing.T) {
	own := []Flag{{Name: "dry-run", Type: "bool"}, {Name: "verbose", Shorthand: "v", Type: "bool"}, {Name: "policy", Type: "string"}}
	tests := []struct {
		args    []string
		command int
		names   []string // Occurrence.Name, in order
		spans   [][2]int
		check   func(*Globals) bool
		wantErr string
	}{
		{args: []string{"run", "img"}, command: 0},
		{args: []string{"-H", "tcp://x:2375", "run"}, command: 2, names: []string{"host"}, spans: [][2]int{{0, 2}},
			check: func(g *Globals) bool { return slices.Equal(g.Hosts, []string{"tcp://x:2375"}) }},
		{args: []string{"-Htcp://x", "--context=c1", "create"}, command: 2, names: []string{"host", "context"},
			check: func(g *Globals) bool { return g.Context == "c1" && g.Hosts[0] == "tcp://x" }},
		{args: []string{"--dry-run", "-c", "remote", "-v", "run"}, command: 4, names: []string{"dry-run", "context", "verbose"},
			spans: [][2]int{{0, 1}, {1, 3}, {3, 4}}},
		{args: []string{"-Dl", "debug", "container", "run"}, command: 2, names: []string{"debug", "log-level"}},
		{args: []string{"--tlsverify", "--tlscacert", "/ca.pem", "--tlscert=/c.pem", "--tlskey", "/k.pem", "run"}, command: 6,
			check: func(g *Globals) bool {
				return g.TLSVerify && g.TLSVerifySet && g.TLSCACert == "/ca.pem" && g.TLSCert == "/c.pem" && g.TLSKey == "/k.pem"
			}},
		{args: []string{"--tls", "--config", "/d", "run"}, command: 3, check: func(g *Globals) bool { return g.TLS && g.ConfigDir == "/d" }},
		{args: []string{"--policy", "/p.toml", "run"}, command: 2, names: []string{"policy"}},
		{args: []string{"--", "run"}, command: 1},
		{args: []string{"--nope", "run"}, wantErr: "unknown flag: --nope"},
		{args: []string{"-H"}, wantErr: "flag needs an argument"},
		{args: []string{"--tls=maybe", "run"}, wantErr: "invalid argument"},
	}
	for _, tt := range tests {
		g, err := ParseGlobals(tt.args, own)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		var names []string
		for _, o := range g.Occurrences {
			names = append(names, o.Name)
		}
		if g.Command != tt.command || (tt.names != nil && !slices.Equal(names, tt.names)) {
			t.Errorf("%q: command at %d, options %q; want %d, %q", tt.args, g.Command, names, tt.command, tt.names)
		}
		if tt.spans != nil && !slices.Equal(g.Spans(), tt.spans) {
			t.Errorf("%q: spans %v, want %v", tt.args, g.Spans(), tt.spans)
		}
		if tt.check != nil && !tt.check(g) {
			t.Errorf("%q: %+v", tt.args, g)
		}
	}
}

func TestGlobalsEnv(t *testing.T) {
	base := map[string]string{"DOCKER_HOST": "unix:///env.sock", "DOCKER_TLS_VERIFY": "1", "HOME": "/h"}
	getenv := func(k string) string { return base[k] }
	tests := []struct {
		args    []string
		want    map[string]string
		wantErr string
	}{
		{[]string{"run"}, map[string]string{"DOCKER_HOST": "unix:///env.sock", "DOCKER_TLS_VERIFY": "1", "HOME": "/h"}, ""},
		{[]string{"-H", "tcp://a:2376", "run"}, map[string]string{"DOCKER_HOST": "tcp://a:2376"}, ""},
		{[]string{"--context", "gpu1", "run"}, map[string]string{"DOCKER_HOST": "", "DOCKER_CONTEXT": "gpu1"}, ""},
		{[]string{"--config", "/cfg", "run"}, map[string]string{"DOCKER_CONFIG": "/cfg"}, ""},
		{[]string{"--tlsverify=false", "run"}, map[string]string{"DOCKER_TLS_VERIFY": "", "DOCKER_TLS": "1"}, ""},
		{[]string{"--tls", "run"}, map[string]string{"DOCKER_TLS": "1", "DOCKER_TLS_VERIFY": "1"}, ""},
		{[]string{"-H", "a", "-H", "b", "run"}, nil, "only one host"},
		{[]string{"-H", "a", "-c", "b", "run"}, nil, "not both"},
	}
	for _, tt := range tests {
		g, err := ParseGlobals(tt.args, nil)
		if err != nil {
			t.Fatal(err)
		}
		env, err := g.Env(getenv)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		for k, v := range tt.want {
			if got := env(k); got != v {
				t.Errorf("%q: %s=%q, want %q", tt.args, k, got, v)
			}
		}
	}
}

func TestIsContainerCommand(t *testing.T) {
	tests := []struct {
		words []string
		n     int
		verb  string
	}{
		{[]string{"run", "img"}, 1, "run"},
		{[]string{"create"}, 1, "create"},
		{[]string{"container", "run", "img"}, 2, "run"},
		{[]string{"container", "create", "img"}, 2, "create"},
		{[]string{"container", "ls"}, 0, ""},
		{[]string{"container"}, 0, ""},
		{[]string{"ps"}, 0, ""},
		{nil, 0, ""},
	}
	for _, tt := range tests {
		n, verb, ok := IsContainerCommand(tt.words)
		if n != tt.n || verb != tt.verb || ok != (tt.n > 0) {
			t.Errorf("%q: %d %q %v", tt.words, n, verb, ok)
		}
	}
	for _, w := range []string{"ps", "exec", "container", "compose", "image"} {
		if !IsDockerCommand(w) {
			t.Errorf("%q is a docker command", w)
		}
	}
	for _, w := range []string{"", "ubuntu", "nvidia/cuda:12.4.1-base"} {
		if IsDockerCommand(w) {
			t.Errorf("%q is not a docker command", w)
		}
	}
}
