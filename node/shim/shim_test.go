package shim

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const gpuSpec = `{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=all"],"args":["sh"],"cwd":"/"},
"mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["nosuid","noexec","nodev","mode=1777","size=67108864"]}],
"linux":{"resources":{"memory":{"limit":8589934592}},"namespaces":[{"type":"ipc"}]},"x-unknown":{"kept":true}}`

type execCall struct {
	path string
	argv []string
	env  []string
}

func newTestShim(t *testing.T, spec, config string, args func(bundle string) []string) (*Shim, string, *[]execCall, *bytes.Buffer, string) {
	t.Helper()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if spec != "" {
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(dir, "gpurun.log")
	// A fake low-level runtime on disk, so LookPath finds it.
	fake := filepath.Join(dir, "fake-runc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("runtime = \""+fake+"\"\nlog_file = \""+logFile+"\"\n"+config), 0o644); err != nil {
		t.Fatal(err)
	}
	var calls []execCall
	stderr := &bytes.Buffer{}
	env := map[string]string{policy.ConfigEnv: cfg}
	s := &Shim{
		Args:   args(bundle),
		Cwd:    bundle,
		Getenv: func(k string) string { return env[k] },
		Stderr: stderr,
		Exec: func(path string, argv []string, env []string) error {
			calls = append(calls, execCall{path, argv, env})
			return nil
		},
		Self:     "/nonexistent/gpurun-runtime",
		Fallback: &policy.Policy{LogFile: logFile, Runtime: fake},
		Sweep:    shmsweep.Options{StateDir: filepath.Join(dir, "sweep")},
	}
	return s, bundle, &calls, stderr, logFile
}

// panics is a facts provider that panics: a fault inside the enforcer.
func panics() (oci.Facts, error) { panic("test fault") }

func readShm(t *testing.T, bundle string) (oci.Shm, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := specfile.Parse("config.json", data)
	if err != nil {
		t.Fatal(err)
	}
	return oci.ClassifyShm(c.Spec, 0), string(data)
}

func TestShim(t *testing.T) {
	createArgs := func(bundle string) []string {
		return []string{"--root", "/run/runc", "--log", bundle + "/log.json", "--log-format", "json", "create", "--bundle", bundle, "--pid-file", bundle + "/init.pid", "c1"}
	}
	tests := []struct {
		name     string
		spec     string
		config   string
		args     func(string) []string
		env      map[string]string
		facts    func() (oci.Facts, error)
		wantCode int
		wantExec bool
		wantSize int64
		wantLog  string
		wantErr  string
		noLog    bool
	}{
		{name: "create sizes a GPU container", spec: gpuSpec, args: createArgs, wantExec: true, wantSize: 4 * policy.GiB, wantLog: `"action":"set-size"`},
		{name: "run too", spec: gpuSpec, args: func(b string) []string { return []string{"run", "-b", b, "-d", "c1"} }, wantExec: true, wantSize: 4 * policy.GiB},
		{name: "a non-GPU container is untouched", spec: strings.Replace(gpuSpec, "NVIDIA_VISIBLE_DEVICES=all", "A=b", 1), args: createArgs, wantExec: true, wantSize: 64 * policy.MiB, wantLog: `"action":"none"`},
		{name: "start passes through without reading the bundle or logging", spec: "not json", args: func(string) []string { return []string{"--root", "/r", "start", "c1"} }, wantExec: true, noLog: true},
		{name: "malformed config.json fails open", spec: "{broken", args: createArgs, wantExec: true, wantLog: "malformed JSON"},
		{name: "malformed config.json with fail_closed", spec: "{broken", config: "fail_closed = true\n", args: createArgs, wantCode: 1, wantErr: "malformed JSON"},
		{name: "missing config.json fails open", spec: "", args: createArgs, wantExec: true, wantLog: "no such file"},
		{name: "a panic in planning fails open", spec: gpuSpec, args: createArgs, facts: panics, wantExec: true, wantSize: 64 * policy.MiB, wantLog: "panic: test fault"},
		{name: "a panic with fail_closed", spec: gpuSpec, config: "fail_closed = true\n", args: createArgs, facts: panics, wantCode: 1, wantErr: "panic: test fault"},
		{name: "dockerd's data-root reaches the shim, not runc", spec: gpuSpec, args: func(b string) []string {
			return append([]string{"--gpurun-docker-data-root=/srv/docker"}, createArgs(b)...)
		}, wantExec: true, wantSize: 4 * policy.GiB, wantLog: `"action":"set-size"`},
		{name: "unreadable policy: passes through, says why", spec: gpuSpec, config: "fail_closed = true\nsize = [\n", args: createArgs, wantExec: true, wantSize: 64 * policy.MiB, wantLog: "policy unreadable; container left as it is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, bundle, calls, stderr, logFile := newTestShim(t, tt.spec, tt.config, tt.args)
			base := s.Getenv
			s.Getenv = func(k string) string {
				if v, ok := tt.env[k]; ok {
					return v
				}
				return base(k)
			}
			s.Facts = tt.facts
			code := s.Main()
			if tt.wantExec {
				if len(*calls) != 1 {
					t.Fatalf("exec calls = %v, stderr %s", *calls, stderr)
				}
				got := (*calls)[0].argv[1:]
				want := s.Args
				if strings.HasPrefix(want[0], "--gpurun-") {
					want = want[1:] // gpurun's own flag is not runc's
				}
				if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
					t.Errorf("argv changed: %q, want %q", got, want)
				}
				if mark := CallerEnv + "=" + (*calls)[0].path; !slices.Contains((*calls)[0].env, mark) {
					t.Errorf("the low-level runtime's environment %q lacks %s", (*calls)[0].env, mark)
				}
			} else {
				if len(*calls) != 0 {
					t.Errorf("exec'd %v, want no exec", *calls)
				}
				if code != tt.wantCode {
					t.Errorf("exit %d, want %d", code, tt.wantCode)
				}
			}
			if tt.wantErr != "" && !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr, tt.wantErr)
			}
			if tt.wantErr != "" {
				// The engine reads runc's --log file in --log-format json.
				engineLog, _ := os.ReadFile(filepath.Join(bundle, "log.json"))
				var rec map[string]string
				if err := json.Unmarshal(engineLog, &rec); err != nil || rec["level"] != "error" || !strings.Contains(rec["msg"], tt.wantErr) {
					t.Errorf("engine log %q: want a JSON error naming %q", engineLog, tt.wantErr)
				}
			}
			if tt.wantExec && stderr.Len() != 0 {
				t.Errorf("stderr not the runtime's alone: %q", stderr)
			}
			if tt.wantSize != 0 {
				sh, data := readShm(t, bundle)
				if sh.Size != tt.wantSize {
					t.Errorf("/dev/shm size %d, want %d", sh.Size, tt.wantSize)
				}
				if !strings.Contains(data, `"x-unknown":{"kept":true}`) {
					t.Errorf("unknown field lost: %s", data)
				}
			}
			if _, err := os.Stat(logFile); tt.noLog && err == nil {
				t.Errorf("a pass-through invocation created the log file")
			}
			if tt.wantLog != "" {
				logData, _ := os.ReadFile(logFile)
				if !strings.Contains(string(logData), tt.wantLog) {
					t.Errorf("log %q lacks %q", logData, tt.wantLog)
				}
			}
		})
	}
}

func TestShimRefusesItselfAsLowLevelRuntime(t *testing.T) {
	s, _, calls, stderr, _ := newTestShim(t, gpuSpec, "", func(string) []string { return []string{"start", "x"} })
	path, _ := policy.ResolvePath("", s.Getenv)
	pol, err := policy.Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	// The config names gpurun-runtime itself: by its path, through a
	// symlink, or by a hard link.
	dir := t.TempDir()
	link, hard := filepath.Join(dir, "runc-symlink"), filepath.Join(dir, "runc-hardlink")
	if err := os.Symlink(pol.Runtime, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(pol.Runtime, hard); err != nil {
		t.Fatal(err)
	}
	for _, self := range []string{pol.Runtime, link, hard} {
		stderr.Reset()
		*calls = nil
		s.Self = self
		if code := s.Main(); code != 1 || len(*calls) != 0 || !strings.Contains(stderr.String(), "is gpurun-runtime itself") {
			t.Errorf("self %s: code %d, calls %v, stderr %q", self, code, *calls, stderr)
		}
	}
}

// BenchmarkShimCreate is the shim's own work on a create of a GPU
// container: the policy, the bundle's config.json, the host's facts, the
// plan, the rewrite and the log record; the exec of runc is recorded, not
// made (BenchmarkShimCycle in integration/ measures whole cycles).
func BenchmarkShimCreate(b *testing.B) {
	dir := b.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		b.Fatal(err)
	}
	fake := filepath.Join(dir, "fake-runc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("runtime = \""+fake+"\"\nlog_file = \""+filepath.Join(dir, "gpurun.log")+"\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	args := []string{"--root", "/run/runc", "--log", bundle + "/log.json", "--log-format", "json", "create", "--bundle", bundle, "--pid-file", bundle + "/init.pid", "c1"}
	b.ReportAllocs()
	for b.Loop() {
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(gpuSpec), 0o644); err != nil {
			b.Fatal(err)
		}
		s := &Shim{
			Args:   args,
			Cwd:    bundle,
			Getenv: func(k string) string { return map[string]string{policy.ConfigEnv: cfg}[k] },
			Stderr: io.Discard,
			Exec:   func(string, []string, []string) error { return nil },
			Self:   "/nonexistent/gpurun-runtime",
			Sweep:  shmsweep.Options{StateDir: b.TempDir()},
		}
		if code := s.Main(); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}

// TestShimBreaksCycle: a gpurun-runtime called back through the runtime it
// chains to (CallerEnv set) plans nothing and execs runc or crun directly —
// never itself, never the runtime that called back — and says so in its
// log and on stderr; with neither on PATH it fails the command.
func TestShimBreaksCycle(t *testing.T) {
	createArgs := func(bundle string) []string {
		return []string{"--root", "/run/runc", "create", "--bundle", bundle, "c1"}
	}
	for _, tt := range []struct {
		name string
		// path says which of the programs in the test's dir LookPath finds
		// for runc and crun ("" for none).
		runc, crun string
		wantExec   string // the program exec'd, "" for none
	}{
		{name: "runc on PATH", runc: "runc", crun: "crun", wantExec: "runc"},
		{name: "runc is gpurun-runtime: crun", runc: "self", crun: "crun", wantExec: "crun"},
		{name: "runc is the runtime that called back: crun", runc: "nvidia-container-runtime", crun: "crun", wantExec: "crun"},
		{name: "neither: the command fails", runc: "self", crun: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, bundle, calls, stderr, logFile := newTestShim(t, gpuSpec, "", createArgs)
			dir := t.TempDir()
			for _, prog := range []string{"runc", "crun", "self", "nvidia-container-runtime"} {
				if err := os.WriteFile(filepath.Join(dir, prog), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			s.Self = filepath.Join(dir, "self")
			via := filepath.Join(dir, "nvidia-container-runtime")
			found := map[string]string{"runc": tt.runc, "crun": tt.crun}
			s.LookPath = func(name string) (string, error) {
				if found[name] == "" {
					return "", os.ErrNotExist
				}
				return filepath.Join(dir, found[name]), nil
			}
			base := s.Getenv
			s.Getenv = func(k string) string {
				if k == CallerEnv {
					return via
				}
				return base(k)
			}
			code := s.Main()
			if tt.wantExec == "" {
				if code == 0 || len(*calls) != 0 {
					t.Fatalf("exit %d, exec %v; want the command to fail", code, *calls)
				}
			} else {
				if len(*calls) != 1 || (*calls)[0].path != filepath.Join(dir, tt.wantExec) {
					t.Fatalf("exec %v, want %s", *calls, tt.wantExec)
				}
				if strings.Join((*calls)[0].argv[1:], " ") != strings.Join(createArgs(bundle), " ") {
					t.Errorf("argv %q", (*calls)[0].argv)
				}
			}
			if sh, _ := readShm(t, bundle); sh.Size != 64*policy.MiB {
				t.Errorf("the callback planned the container again: /dev/shm %d", sh.Size)
			}
			logData, _ := os.ReadFile(logFile)
			if !strings.Contains(string(logData), MsgCycle) || !strings.Contains(string(logData), via) {
				t.Errorf("log %q does not name the cycle through %s", logData, via)
			}
			if !strings.Contains(stderr.String(), "calls gpurun-runtime back") {
				t.Errorf("stderr %q is silent about the cycle", stderr)
			}
		})
	}
}

// TestShimChainedRuntimeMissing: the policy chains a runtime that is not
// there (NVIDIA's, whose toolkit was removed with its files). The shim
// still sizes the container and runs runc (or crun) instead, saying so in
// its log and on stderr, so the node's containers keep starting — unless
// fail_closed, or there is neither runc nor crun.
func TestShimChainedRuntimeMissing(t *testing.T) {
	createArgs := func(bundle string) []string {
		return []string{"--root", "/run/runc", "create", "--bundle", bundle, "c1"}
	}
	for _, tt := range []struct {
		name       string
		config     string
		runc, crun bool
		wantExec   string // "" for none
	}{
		{name: "runc instead", runc: true, crun: true, wantExec: "runc"},
		{name: "crun when there is no runc", crun: true, wantExec: "crun"},
		{name: "neither: the command fails"},
		{name: "fail_closed: the command fails", config: "fail_closed = true\n", runc: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, bundle, calls, stderr, logFile := newTestShim(t, gpuSpec, tt.config, createArgs)
			dir := t.TempDir()
			for _, prog := range []string{"runc", "crun"} {
				if err := os.WriteFile(filepath.Join(dir, prog), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			missing := filepath.Join(dir, "gone", "nvidia-container-runtime")
			found := map[string]bool{"runc": tt.runc, "crun": tt.crun}
			s.LookPath = func(name string) (string, error) {
				if found[name] {
					return filepath.Join(dir, name), nil
				}
				return "", os.ErrNotExist
			}
			s.Fallback = &policy.Policy{LogFile: logFile, Runtime: missing}
			cfg := s.Getenv(policy.ConfigEnv)
			if err := os.WriteFile(cfg, []byte("runtime = \""+missing+"\"\nlog_file = \""+logFile+"\"\n"+tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			code := s.Main()
			if tt.wantExec == "" {
				if code == 0 || len(*calls) != 0 {
					t.Fatalf("exit %d, exec %v; want the command to fail", code, *calls)
				}
				return
			}
			if code != 0 || len(*calls) != 1 || (*calls)[0].path != filepath.Join(dir, tt.wantExec) {
				t.Fatalf("exit %d, exec %v; want %s", code, *calls, tt.wantExec)
			}
			if sh, _ := readShm(t, bundle); sh.Size == 64*policy.MiB {
				t.Errorf("the container was not sized")
			}
			logData, _ := os.ReadFile(logFile)
			if !strings.Contains(string(logData), MsgRuntimeMissing) || !strings.Contains(string(logData), missing) {
				t.Errorf("log %q does not name the missing runtime", logData)
			}
			if !strings.Contains(stderr.String(), "instead") {
				t.Errorf("stderr %q is silent about it", stderr)
			}
		})
	}
}
