// Package k3stest plays k3s's (and RKE2's) part in gpurun's tests: it
// renders containerd's config.toml from a template the way k3s does when it
// starts — its template functions, the data it executes the template with,
// its base template defined as "base", and (from the version 3 template on)
// its trimming of empty lines — for the releases whose templates are kept
// in node/install/testdata/k3s (its README.md names each file's source).
// The template-editor unit tests (node/install) and the k3s-layout
// integration test (integration/harness) both render through it.
package k3stest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"text/template"
)

// Release is a k3s (or RKE2) release as far as its containerd config goes.
type Release struct {
	// Base is the testdata file (in node/install/testdata/k3s) of the
	// release's base template.
	Base string
	// Version is the containerd config version the base template writes.
	Version int
	// Trim says k3s drops the rendered config's empty lines and puts one
	// before every table (its trimEmpty, which came with the version 3
	// template).
	Trim bool
	// NVIDIA names the runtimes the release adds, and their binaries, when
	// it finds the NVIDIA container runtime on the node.
	NVIDIA map[string]string
}

// V2 is k3s at commit 06be48b6: containerd 1.7, config version 2.
func V2() Release {
	return Release{
		Base:    "k3s-06be48b6-ContainerdConfigTemplate.toml.tmpl",
		Version: 2,
		NVIDIA: map[string]string{
			"nvidia":              "nvidia-container-runtime",
			"nvidia-experimental": "nvidia-container-runtime-experimental",
		},
	}
}

// V3 is k3s v1.34.3+k3s1 (and RKE2 v1.34.3+rke2r1, built on the same k3s
// commit): containerd 2.x, config version 3.
func V3() Release {
	return Release{Base: "k3s-v1.34.3+k3s1-48ffa7b6-ContainerdConfigTemplateV3.toml.tmpl", Version: 3, Trim: true, NVIDIA: nvidiaV134()}
}

// V3Imports is k3s v1.34.6+k3s1 (and RKE2 v1.34.6+rke2r1, whose k3s commit
// has the same template): config version 3 with imports of
// config-v3.toml.d/*.toml.
func V3Imports() Release {
	return Release{Base: "k3s-v1.34.6+k3s1-234e6132-ContainerdConfigTemplateV3.toml.tmpl", Version: 3, Trim: true, NVIDIA: nvidiaV134()}
}

// nvidiaV134 is what k3s v1.34 adds when it finds the NVIDIA container
// runtime (pkg/agent/containerd/runtimes.go).
func nvidiaV134() map[string]string {
	return map[string]string{
		"nvidia":              "nvidia-container-runtime",
		"nvidia-experimental": "nvidia-container-runtime-experimental",
		"nvidia-cdi":          "nvidia-container-runtime.cdi",
	}
}

// Node is what k3s knows of the node when it renders (node paths).
type Node struct {
	// Program is "k3s" or "rke2".
	Program string
	// DataDir is the distribution's data directory (/var/lib/rancher/k3s).
	DataDir string
	// Root, State and Address are containerd's root, state directory and
	// socket.
	Root, State, Address string
	// PauseImage is the sandbox image.
	PauseImage string
	// SystemdCgroup is k3s's choice of the systemd cgroup driver.
	SystemdCgroup bool
	// DefaultRuntime is k3s's --default-runtime ("" for none).
	DefaultRuntime string
	// NVIDIA says k3s found the NVIDIA container runtime on the node.
	NVIDIA bool
}

// ContainerdDir is where k3s keeps the templates and config.toml.
func (n Node) ContainerdDir() string { return filepath.Join(n.DataDir, "agent", "etc", "containerd") }

// Data is what r's k3s executes its containerd template with on n: the
// fields of its templates.ContainerdConfig that the templates read, for a
// node without SELinux, user namespaces or private registries.
func (r Release) Data(n Node) map[string]any {
	extra := map[string]map[string]string{}
	if n.NVIDIA {
		for name, bin := range r.NVIDIA {
			extra[name] = map[string]string{"RuntimeType": "io.containerd.runc.v2", "BinaryName": "/usr/bin/" + bin}
		}
	}
	return map[string]any{
		"Program": n.Program,
		"NodeConfig": map[string]any{
			"SELinux":        false,
			"NoFlannel":      false,
			"DefaultRuntime": n.DefaultRuntime,
			"Containerd": map[string]any{
				"Opt": filepath.Join(n.Root, "opt"), "Root": n.Root, "State": n.State, "Address": n.Address,
				"Template": n.ContainerdDir(), "Registry": filepath.Join(n.ContainerdDir(), "certs.d"),
				"BlockIOConfig": "", "RDTConfig": "",
			},
			"AgentConfig": map[string]any{
				"PauseImage": n.PauseImage, "Snapshotter": "overlayfs", "ImageServiceSocket": "",
				"CNIBinDir":  filepath.Join(n.DataDir, "data", "current", "bin"),
				"CNIConfDir": filepath.Join(n.DataDir, "agent", "etc", "cni", "net.d"),
			},
		},
		"EnableUnprivileged":    true,
		"DisableCgroup":         false,
		"IsRunningInUserNS":     false,
		"SystemdCgroup":         n.SystemdCgroup,
		"NonrootDevices":        false,
		"NoDefaultEndpoint":     false,
		"PrivateRegistryConfig": nil,
		"ExtraRuntimes":         extra,
	}
}

// funcs are the template functions k3s gives its Linux templates.
func funcs() template.FuncMap {
	return template.FuncMap{
		"deschemify": func(s string) string { return s },
		"toJson": func(v any) string {
			b, _ := json.Marshal(v)
			return string(b)
		},
		"filepathjoin": filepath.Join,
	}
}

// Render renders containerd's config as r's k3s does at start: main (the
// administrator's template, or base itself when there is none) with base
// defined as "base", executed with data.
func (r Release) Render(main, base string, data any) (string, error) {
	t, err := template.New("compiled_template").Funcs(funcs()).Parse(main)
	if err != nil {
		return "", fmt.Errorf("parse the template: %w", err)
	}
	if _, err := t.New("base").Parse(base); err != nil {
		return "", fmt.Errorf("parse the base template: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render the template: %w", err)
	}
	if !r.Trim {
		return b.String(), nil
	}
	var out strings.Builder
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			out.WriteString("\n")
		}
		out.WriteString(line + "\n")
	}
	return out.String(), nil
}
