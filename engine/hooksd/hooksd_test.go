package hooksd

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestHookJSON(t *testing.T) {
	tests := []struct {
		name     string
		opts     HookOptions
		wantArgs []string
		err      string
	}{
		{"gpurun-runtime", HookOptions{Path: "/usr/local/bin/gpurun-runtime"}, []string{"gpurun-runtime", "hook", "--stage", HookStage}, ""},
		{"no policy", HookOptions{Path: "/usr/local/bin/gpurun"}, []string{"gpurun", "hook", "--stage", HookStage}, ""},
		{"with a policy", HookOptions{Path: "/opt/gpurun/bin/gpurun", PolicyPath: "/etc/gpurun/gpu.toml"},
			[]string{"gpurun", "hook", "--stage", HookStage, "--config", "/etc/gpurun/gpu.toml"}, ""},
		{"relative path", HookOptions{Path: "gpurun"}, nil, "clean absolute path"},
		{"unclean path", HookOptions{Path: "/usr/local/bin/../bin/gpurun"}, nil, "clean absolute path"},
		{"relative policy", HookOptions{Path: "/usr/bin/gpurun", PolicyPath: "config.toml"}, nil, "policy path"},
		{"another program", HookOptions{Path: "/usr/bin/runc"}, nil, "want gpurun-runtime or gpurun"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := HookJSON(tt.opts)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("HookJSON = %s, %v; want an error with %q", data, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateHookJSON("gpurun.json", data); err != nil {
				t.Fatalf("generated entry does not validate: %v\n%s", err, data)
			}
			// What Podman and CRI-O read from it.
			var got struct {
				Version string `json:"version"`
				Hook    struct {
					Path string   `json:"path"`
					Args []string `json:"args"`
				} `json:"hook"`
				When   map[string]any `json:"when"`
				Stages []string       `json:"stages"`
			}
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if got.Version != "1.0.0" || got.Hook.Path != tt.opts.Path || !reflect.DeepEqual(got.Hook.Args, tt.wantArgs) {
				t.Errorf("entry %s", data)
			}
			// Always, and nothing else: env-only GPU containers must reach the hook.
			if !reflect.DeepEqual(got.When, map[string]any{"always": true}) {
				t.Errorf("when = %v, want only always", got.When)
			}
			if !reflect.DeepEqual(got.Stages, []string{"createRuntime"}) {
				t.Errorf("stages = %v", got.Stages)
			}
			if !IsGPURunHook(data) {
				t.Error("IsGPURunHook(own entry) = false")
			}
			if !strings.HasSuffix(string(data), "}\n") {
				t.Error("no final newline")
			}
			again, _ := HookJSON(tt.opts)
			if string(again) != string(data) {
				t.Error("not deterministic")
			}
		})
	}
}

// TestProblems: every problem of an entry, each once, the hook's binary
// checked by the function given.
func TestProblems(t *testing.T) {
	// The keys and values of NVIDIA's hooks.d entry for Podman,
	// oci-nvidia-hook.json at the top of NVIDIA/nvidia-container-toolkit
	// (laid out here with four spaces).
	const nvidia = `{
    "version": "1.0.0",
    "hook": {
        "path": "/usr/bin/nvidia-container-toolkit",
        "args": ["nvidia-container-toolkit", "prestart"],
        "env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        ]
    },
    "when": {
        "always": true,
        "commands": [".*"]
    },
    "stages": ["prestart"]
}
`
	missing := func(p string) error {
		if p == "/usr/bin/nvidia-container-toolkit" || p == "/usr/local/bin/gpurun" {
			return nil
		}
		return errors.New(p + " does not exist")
	}
	own, err := HookJSON(HookOptions{Path: "/usr/local/bin/gpurun", PolicyPath: "/etc/gpurun/config.toml"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		in     string
		binary func(string) error
		want   []string // a part of each problem, in order
	}{
		{name: "nvidia's", in: nvidia, binary: missing},
		{name: "gpurun's own", in: string(own), binary: missing},
		{name: "the binary is gone", in: strings.Replace(nvidia, "/usr/bin/nvidia-container-toolkit", "/opt/gone/hook", 1), binary: missing,
			want: []string{"x.json: hook.path: /opt/gone/hook does not exist"}},
		{name: "the binary is not checked without a function", in: strings.Replace(nvidia, "/usr/bin/nvidia-container-toolkit", "/opt/gone/hook", 1)},
		{name: "old schema", in: `{"hook":"/usr/bin/x","stages":["prestart"]}`, binary: missing, want: []string{"x.json:1:21: json: cannot unmarshal string"}},
		{name: "malformed", in: "{\n  \"version\": \"1.0.0\",\n  \"hook\": {,\n}", binary: missing, want: []string{"x.json:3:12"}},
		{name: "wrong version", in: `{"version":"2.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{"always":true},"stages":["prestart"]}`, binary: missing,
			want: []string{`x.json: version "2.0.0", want "1.0.0"`}},
		{name: "empty path", in: `{"version":"1.0.0","hook":{"path":""},"when":{"always":true},"stages":["prestart"]}`, binary: missing,
			want: []string{"x.json: hook.path is empty"}},
		{name: "relative path", in: `{"version":"1.0.0","hook":{"path":"gpurun"},"when":{"always":true},"stages":["prestart"]}`, binary: missing,
			want: []string{`x.json: hook.path "gpurun" is not absolute`}},
		{name: "when is empty", in: `{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{},"stages":["prestart"]}`, binary: missing,
			want: []string{`x.json: "when" matches nothing`}},
		{name: "when is all false", in: `{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{"always":false,"hasBindMounts":false},"stages":["prestart"]}`, binary: missing,
			want: []string{`x.json: "when" matches nothing`}},
		{name: "patterns that are not regular expressions", in: `{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{"annotations":{"gpu(":"x","b":"[z"},"commands":["*x"]},"stages":["prestart"]}`, binary: missing,
			want: []string{`x.json: when.annotations "[z"`, `x.json: when.annotations "gpu("`, `x.json: when.commands "*x"`}},
		{name: "no stages", in: `{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{"always":true}}`, binary: missing,
			want: []string{"x.json: no stages"}},
		{name: "unknown stages", in: `{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{"always":true},"stages":["prestrat","createRuntime","poststrat"]}`, binary: missing,
			want: []string{`x.json: unknown stage "prestrat"`, `x.json: unknown stage "poststrat"`}},
		{name: "a key the schema does not have", in: `{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun"},"when":{"always":true},"stage":["prestart"],"stages":["prestart"]}`, binary: missing,
			want: []string{`x.json: json: unknown field "stage"`}},
		{name: "every problem at once", in: `{"version":"0.1.0","hook":{"path":"/opt/gone/gpurun"},"stages":["prestrat"]}`, binary: missing,
			want: []string{`version "0.1.0"`, "/opt/gone/gpurun does not exist", `"when" matches nothing`, `unknown stage "prestrat"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Problems("x.json", []byte(tt.in), tt.binary)
			ok := len(got) == len(tt.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.Contains(got[i], tt.want[i])
			}
			if !ok {
				t.Fatalf("Problems =\n%s\nwant problems with\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			err := ValidateHookJSON("x.json", []byte(tt.in))
			if wantErr := len(Problems("x.json", []byte(tt.in), nil)) > 0; (err != nil) != wantErr {
				t.Errorf("ValidateHookJSON = %v, want an error %v", err, wantErr)
			}
		})
	}
}

func TestDirs(t *testing.T) {
	// Podman reads the packaged directory first and the administrator's
	// last, which masks it.
	if got := Dirs(); len(got) != 2 || got[0] != HooksDirShare || got[1] != HooksDirEtc {
		t.Errorf("Dirs() = %q", got)
	}
}

func TestIsGPURunHook(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun","args":["gpurun","hook"]},"when":{"always":true},"stages":["createRuntime"]}`, true},
		{`{"version":"1.0.0","hook":{"path":"/usr/bin/gpurun-runtime","args":["gpurun-runtime","hook","--stage","createRuntime"]},"when":{"always":true},"stages":["createRuntime"]}`, true},
		{`{"version":"1.0.0","hook":{"path":"/usr/bin/gpurun-runtime","args":["gpurun-runtime","create"]},"when":{"always":true},"stages":["createRuntime"]}`, false},
		{`{"version":"1.0.0","hook":{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]},"when":{"always":true},"stages":["prestart"]}`, false},
		{`{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun","args":["gpurun","run"]},"when":{"always":true},"stages":["prestart"]}`, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		if got := IsGPURunHook([]byte(tt.in)); got != tt.want {
			t.Errorf("IsGPURunHook(%s) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
