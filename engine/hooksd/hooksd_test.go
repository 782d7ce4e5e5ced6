package hooksd

import (
	"encoding/json"
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
		{"no policy", HookOptions{Path: "/usr/local/bin/gpurun"}, []string{"gpurun", "hook", "--stage", HookStage}, ""},
		{"with a policy", HookOptions{Path: "/opt/gpurun/bin/gpurun", PolicyPath: "/etc/gpurun/gpu.toml"},
			[]string{"gpurun", "hook", "--stage", HookStage, "--config", "/etc/gpurun/gpu.toml"}, ""},
		{"relative path", HookOptions{Path: "gpurun"}, nil, "clean absolute path"},
		{"unclean path", HookOptions{Path: "/usr/local/bin/../bin/gpurun"}, nil, "clean absolute path"},
		{"relative policy", HookOptions{Path: "/usr/bin/gpurun", PolicyPath: "config.toml"}, nil, "policy path"},
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

func TestValidateHookJSON(t *testing.T) {
	tests := []struct {
		name, in, err string
	}{
		{"nvidia's", `{"version":"1.0.0","hook":{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]},"when":{"always":true,"commands":[".*"]},"stages":["prestart"]}`, ""},
		{"old schema", `{"hook":"/usr/bin/x","stages":["prestart"]}`, "cannot unmarshal"},
		{"wrong version", `{"version":"2.0.0","hook":{"path":"/x"},"when":{"always":true},"stages":["prestart"]}`, `version "2.0.0"`},
		{"relative path", `{"version":"1.0.0","hook":{"path":"x"},"when":{"always":true},"stages":["prestart"]}`, "not absolute"},
		{"no condition", `{"version":"1.0.0","hook":{"path":"/x"},"when":{},"stages":["prestart"]}`, "no condition"},
		{"no stages", `{"version":"1.0.0","hook":{"path":"/x"},"when":{"always":true}}`, "no stages"},
		{"unknown stage", `{"version":"1.0.0","hook":{"path":"/x"},"when":{"always":true},"stages":["prestrat"]}`, `unknown stage "prestrat"`},
		{"malformed", "{\n  \"version\": \"1.0.0\",\n  \"hook\": {,\n}", "x.json:3:12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateHookJSON("x.json", []byte(tt.in))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("ValidateHookJSON = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestIsGPURunHook(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"version":"1.0.0","hook":{"path":"/usr/local/bin/gpurun","args":["gpurun","hook"]},"when":{"always":true},"stages":["createRuntime"]}`, true},
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
