// Package nvidia reads what gpurun needs to know of NVIDIA's container
// toolkit on a node: whether a runtime binary is NVIDIA's, which config
// NVIDIA's runtime reads (the one its wrapper script names, as the GPU
// Operator's toolkit installs it, else the one its environment names,
// else the toolkit package's), and the low-level runtimes that config
// lists, which NVIDIA's runtime runs after editing a container's spec.
// gpurun-runtime listed there, while gpurun-runtime hands over to
// NVIDIA's runtime, is a cycle.
package nvidia

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"unicode"

	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/internal/tomledit"
)

const (
	// RuntimePrefix starts the base name of NVIDIA's runtimes
	// (nvidia-container-runtime and its .cdi and .legacy modes).
	RuntimePrefix = "nvidia-container-runtime"
	// ConfigEnv names the config NVIDIA's runtime reads; the GPU
	// Operator's toolkit writes it into its runtime wrappers.
	ConfigEnv = "NVIDIA_CTK_CONFIG_FILE_PATH"
	// DefaultConfig is the config of the toolkit's packages.
	DefaultConfig = "/etc/nvidia-container-runtime/config.toml"
	// RuntimesEnv is the GPU Operator toolkit container's setting of the
	// low-level runtimes its runtime runs (comma-separated); without it
	// the installer lists containerd's default runtime's binary first.
	RuntimesEnv = "NVIDIA_CONTAINER_RUNTIME_RUNTIMES"
)

// DefaultRuntimes are the low-level runtimes NVIDIA's runtime runs when
// its config lists none.
func DefaultRuntimes() []string { return []string{"runc", "crun"} }

// IsRuntime reports whether a runtime binary is one of NVIDIA's.
func IsRuntime(binary string) bool {
	return strings.HasPrefix(path.Base(binary), RuntimePrefix)
}

// wrapperConfig finds the config a runtime wrapper script of the GPU
// Operator's toolkit hands NVIDIA's runtime: the first non-empty value
// after ConfigEnv= in it, up to white space.
func wrapperConfig(script string) (string, bool) {
	for rest := script; ; {
		i := strings.Index(rest, ConfigEnv+"=")
		if i < 0 {
			return "", false
		}
		rest = rest[i+len(ConfigEnv)+1:]
		v := rest
		if j := strings.IndexFunc(v, unicode.IsSpace); j >= 0 {
			v = v[:j]
		}
		if v != "" {
			return v, true
		}
	}
}

// RuntimeConfig returns the config NVIDIA's runtime at binary (a node
// path under root) reads: the one its wrapper script names, else the one
// env (the environment of the engine that runs it; nil for none) names,
// else the toolkit package's.
func RuntimeConfig(root, binary string, env map[string]string) string {
	if data, err := hostpath.ReadFile(root, binary); err == nil && strings.HasPrefix(string(data), "#!") {
		if p, ok := wrapperConfig(string(data)); ok {
			return p
		}
	}
	if p := env[ConfigEnv]; p != "" {
		return p
	}
	if x := env["XDG_CONFIG_HOME"]; x != "" {
		return path.Join(x, "nvidia-container-runtime", "config.toml")
	}
	return DefaultConfig
}

// LowLevel returns the low-level runtimes the config at a node path
// lists (nvidia-container-runtime.runtimes), in order; DefaultRuntimes
// where it lists none or does not exist.
func LowLevel(root, config string) ([]string, error) {
	data, err := hostpath.ReadFile(root, config)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultRuntimes(), nil
	}
	if err != nil {
		return nil, err
	}
	tree, err := tomledit.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config, err)
	}
	sec, _ := tree["nvidia-container-runtime"].(map[string]any)
	list, _ := sec["runtimes"].([]any)
	var out []string
	for _, v := range list {
		if s, ok := v.(string); ok && s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return DefaultRuntimes(), nil
	}
	return out, nil
}
