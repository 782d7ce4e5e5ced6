package nvidia

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRuntimeConfig(t *testing.T) {
	root := t.TempDir()
	write := func(p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The wrapper nvidia-ctk-installer v1.20.2 writes.
	write("/usr/local/nvidia/toolkit/nvidia-container-runtime", "#! /bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH=/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml \\\n\t/usr/local/nvidia/toolkit/nvidia-container-runtime.real \"$@\"\n")
	write("/usr/bin/nvidia-container-runtime", "\x7fELF")
	for _, tc := range []struct {
		name, binary string
		env          map[string]string
		want         string
	}{
		{"the toolkit's wrapper", "/usr/local/nvidia/toolkit/nvidia-container-runtime", map[string]string{ConfigEnv: "/elsewhere.toml"}, "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"},
		{"the engine's environment", "/usr/bin/nvidia-container-runtime", map[string]string{ConfigEnv: "/etc/nv.toml"}, "/etc/nv.toml"},
		{"XDG_CONFIG_HOME", "/usr/bin/nvidia-container-runtime", map[string]string{"XDG_CONFIG_HOME": "/cfg"}, "/cfg/nvidia-container-runtime/config.toml"},
		{"the package's", "/usr/bin/nvidia-container-runtime", nil, DefaultConfig},
		{"a binary that is not there", "/nonexistent/nvidia-container-runtime", nil, DefaultConfig},
	} {
		if got := RuntimeConfig(root, tc.binary, tc.env); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestLowLevel(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name, config string // "" for no file
		want         []string
	}{
		{"no config", "", DefaultRuntimes()},
		{"none listed", "[nvidia-container-runtime]\n  mode = \"cdi\"\n", DefaultRuntimes()},
		{"the installer's list", "[nvidia-container-runtime]\n  runtimes = [\"/usr/local/bin/gpurun-runtime\", \"runc\", \"crun\"]\n", []string{"/usr/local/bin/gpurun-runtime", "runc", "crun"}},
	} {
		p := "/etc/nvidia-container-runtime/config.toml"
		_ = os.RemoveAll(filepath.Join(root, "etc"))
		if tc.config != "" {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, p), []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := LowLevel(root, p)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bad.toml"), []byte("[x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LowLevel(root, "/bad.toml"); err == nil {
		t.Error("a config that does not parse: no error")
	}
}

// TestWrapperConfig: the config a wrapper script hands NVIDIA's runtime,
// as the GPU Operator's toolkit writes the script.
func TestWrapperConfig(t *testing.T) {
	for _, tc := range []struct {
		script, want string
		ok           bool
	}{
		{"#! /bin/sh\n" + ConfigEnv + "=/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml \\\n  exec /usr/local/nvidia/toolkit/nvidia-container-runtime.real \"$@\"\n", "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml", true},
		{"#!/bin/sh\nexport " + ConfigEnv + "= \n" + ConfigEnv + "=/etc/x.toml exec y\n", "/etc/x.toml", true},
		{"#!/bin/sh\nexec /usr/bin/nvidia-container-runtime.real \"$@\"\n", "", false},
	} {
		if got, ok := wrapperConfig(tc.script); got != tc.want || ok != tc.ok {
			t.Errorf("wrapperConfig(%q) = %q, %v; want %q, %v", tc.script, got, ok, tc.want, tc.ok)
		}
	}
}
