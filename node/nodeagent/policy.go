package nodeagent

import (
	"bytes"
	"fmt"
	"strings"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// renderPolicy returns the policy file the node should have: the source
// (the ConfigMap's file), plus the node's chained `runtime` line when the
// source sets no runtime of its own. Both the source and the result must be
// valid policies; errors name the source file and line.
func renderPolicy(sourceName string, source, node []byte) ([]byte, error) {
	if _, err := policy.Parse(sourceName, source); err != nil {
		return nil, err
	}
	var keys map[string]any
	if err := toml.Unmarshal(source, &keys); err != nil {
		return nil, fmt.Errorf("policy %s: %w", sourceName, err)
	}
	out := source
	if _, set := keys["runtime"]; !set {
		if line := chainedLine(node); line != "" {
			out = insertTop(source, line)
		}
	}
	if _, err := policy.Parse(sourceName+" (with the node's chained runtime)", out); err != nil {
		return nil, err
	}
	return out, nil
}

// chainedLine returns the `runtime = ...` line gpurun install wrote into a
// policy file (install.ChainMarker in its comment: it belongs to the
// install, not to the policy source), or "".
func chainedLine(data []byte) string {
	for _, l := range strings.Split(string(data), "\n") {
		k, _, ok := strings.Cut(strings.TrimSpace(l), "=")
		if ok && strings.TrimSpace(k) == "runtime" && strings.Contains(l, install.ChainMarker) {
			return strings.TrimRight(l, "\r")
		}
	}
	return ""
}

// insertTop puts line after the leading comment lines of data (top-level
// keys must come before any table).
func insertTop(data []byte, line string) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	at := 0
	for at < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[at]), "#") {
		at++
	}
	var b bytes.Buffer
	for _, l := range lines[:at] {
		b.WriteString(l)
	}
	if at > 0 && !strings.HasSuffix(lines[at-1], "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(line + "\n")
	for _, l := range lines[at:] {
		b.WriteString(l)
	}
	return b.Bytes()
}
