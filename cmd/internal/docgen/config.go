// Package docgen writes gpurun's generated documentation: man pages and
// shell completion scripts from the cobra command tree, and, from the policy
// package, the configuration reference (docs/config.md) and the commented
// default /etc/gpurun/config.toml that the packages install. Everything is
// derived from the code, so it cannot drift from it.
package docgen

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/gpurun/gpurun/policy"
)

// Key is one key of gpurun's configuration file.
type Key struct {
	// Name is the TOML key.
	Name string
	// Type is the TOML type: string, size, boolean, array of strings.
	Type string
	// Default is the built-in value, as TOML.
	Default string
	// Doc says what the key means (the field's comment tag in policy.File).
	Doc string
}

// ConfigKeys returns the keys of policy.File in the order of the struct,
// with their built-in defaults (policy.DefaultFile) and documentation.
// A field without a toml or comment tag is an error: every key must be
// documented.
func ConfigKeys() ([]Key, error) {
	def := reflect.ValueOf(policy.DefaultFile())
	t := def.Type()
	var keys []Key
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			return nil, fmt.Errorf("policy.File.%s has no toml tag", f.Name)
		}
		doc := strings.TrimSpace(f.Tag.Get("comment"))
		if doc == "" {
			return nil, fmt.Errorf("policy.File.%s (key %q) has no comment tag documenting it", f.Name, name)
		}
		val, typ, err := tomlValue(def.Field(i))
		if err != nil {
			return nil, fmt.Errorf("policy.File.%s: %w", f.Name, err)
		}
		if typ == "string" && acceptsOnly(name, "3g", "3 bananas") {
			typ = "size"
			if acceptsOnly(name, "50%", "3 bananas") {
				typ = "size or percentage"
			}
		}
		keys = append(keys, Key{Name: name, Type: typ, Default: val, Doc: doc})
	}
	return keys, nil
}

// tomlValue renders a default as TOML, with its TOML type.
func tomlValue(v reflect.Value) (val, typ string, err error) {
	switch v.Kind() {
	case reflect.String:
		s, err := tomlString(v.String())
		return s, "string", err
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), "boolean", nil
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			break
		}
		parts := make([]string, v.Len())
		for i := range v.Len() {
			if parts[i], err = tomlString(v.Index(i).String()); err != nil {
				return "", "", err
			}
		}
		return "[" + strings.Join(parts, ", ") + "]", "array of strings", nil
	}
	return "", "", fmt.Errorf("no TOML rendering for %s", v.Type())
}

// tomlString is a TOML basic string; defaults are printable ASCII.
func tomlString(s string) (string, error) {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return "", fmt.Errorf("default %q: only printable ASCII is rendered", s)
		}
	}
	return strconv.Quote(s), nil
}

// acceptsOnly asks the policy itself about a string key: whether it
// accepts the value good and rejects bad ("3g" and "3 bananas": a size).
func acceptsOnly(name, good, bad string) bool {
	try := func(v string) error {
		_, err := policy.Parse("probe", fmt.Appendf(nil, "%s = %q\n", name, v))
		return err
	}
	return try(good) == nil && try(bad) != nil
}

// configHeader opens the default config file.
const configHeader = `# gpurun's policy: what /dev/shm GPU containers get. gpurun, gpurun-runtime
# and the OCI hook read this file ($GPURUN_CONFIG or --config name another).
#
# Every key is optional. The lines below show each key's built-in default,
# commented out: uncomment a line to change it. Unknown keys and bad values
# are errors that name this file, the line and the key.
# Every key, its type and meaning: /usr/share/doc/gpurun/config.md (the
# packages), docs/config.md (the source).
`

// DefaultConfig returns the default /etc/gpurun/config.toml: every key with
// its documentation and its built-in value, commented out, so that the file
// changes nothing until edited and later defaults still apply to keys left
// alone.
func DefaultConfig() ([]byte, error) {
	keys, err := ConfigKeys()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(configHeader)
	for _, k := range keys {
		b.WriteString("\n")
		for _, line := range wrap(k.Doc, 76) {
			b.WriteString("# " + line + "\n")
		}
		fmt.Fprintf(&b, "#%s = %s\n", k.Name, k.Default)
	}
	return b.Bytes(), nil
}

// wrap breaks text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// ConfigMarkdown returns docs/config.md, the configuration reference.
func ConfigMarkdown() ([]byte, error) {
	keys, err := ConfigKeys()
	if err != nil {
		return nil, err
	}
	def, err := DefaultConfig()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`<!-- Generated by "make docs" from the policy package (policy.File and
     policy.DefaultFile); do not edit. docgen's tests fail when it is stale. -->
# Configuration reference

gpurun, ` + "`gpurun-runtime`" + ` and the OCI hook read one policy file:
` + "`--config FILE`" + `, else ` + "`$" + policy.ConfigEnv + "`" + `, else ` + "`" + policy.DefaultConfigPath + "`" + `.
A missing default file means the built-in defaults below; a file named with
` + "`--config`" + ` or ` + "`$" + policy.ConfigEnv + "`" + ` must exist. Every key is optional; unknown keys and
bad values are errors that name the file, the line and the key.

Check a policy without changing anything:
` + "`gpurun --config FILE plan --spec config.json`" + ` prints the decision for one
container's OCI spec under that policy.

## Keys

| key | type | default | meaning |
|---|---|---|---|
`)
	for _, k := range keys {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", k.Name, k.Type, k.Default, mdCell(k.Doc))
	}
	b.WriteString(`
## Sizes

A **size** is written in Docker's units — bytes (` + "`67108864`" + `), ` + "`k`" + `, ` + "`m`" + `, ` + "`g`" + `, ` + "`t`" + `,
with or without a trailing ` + "`b`" + ` (` + "`64m`" + `, ` + "`2g`" + `, ` + "`2gb`" + `, ` + "`1.5g`" + `), all binary (1g = 2^30
bytes) — or in Kubernetes' binary quantities (` + "`2Gi`" + `, ` + "`512Mi`" + `), which mean
the same. An empty size
means "not set". ` + "`size`" + ` may also be a percentage of the memory the container
may use: its memory limit, else the host's memory (` + "`50%`" + `).

In annotations (` + "`allowed_annotations`" + `) a size is a Kubernetes quantity, where
` + "`2G`" + ` is 2,000,000,000 bytes and ` + "`2Gi`" + ` is 2^31; Docker's lower-case forms (` + "`2g`" + `)
are accepted too.

## The size rule

For a container that ` + "`match`" + ` selects, the target is ` + "`per_gpu`" + ` x its GPU count
when both are known, else ` + "`size`" + `; it is then capped at ` + "`max`" + ` and raised to
` + "`min`" + ` if below it. Last, it always leaves the container's processes
` + "`memory_reserve`" + ` of the memory the container may use (its limit, else the host's
memory): the target is never more than that memory less the reserve (in whole
MiB, and never below the engines' 64 MiB), even where that is below ` + "`min`" + `.
tmpfs pages count against the memory limit, so a ` + "`/dev/shm`" + ` that can take all of
it turns a Bus error into an OOM kill (exit 137), no better: with the default
25 %, a 16 GiB limit gives 8 GiB (50 %), a 1 GiB limit 768 MiB (not ` + "`min`" + `'s 1 GiB).
The same rule holds at every front door.
A user's own choice (` + "`--shm-size`" + `, ` + "`shm_size`" + `, ` + "`--ipc`" + `, a mount at /dev/shm, an
allowed annotation up to ` + "`annotation_max`" + `) wins over the target, unless
` + "`enforce_min`" + ` raises a smaller one to ` + "`min`" + `; where it is below ` + "`min`" + `, or leaves the
processes less than ` + "`memory_reserve`" + ` of the memory limit, every front door warns
(` + "`gpurun run`" + ` and ` + "`compose migrate`" + ` on stderr, ` + "`gpurun plan`" + `, the admission
webhook in kubectl's output, the node doors in their log).
How gpurun decides, and why: [how-it-works.md](how-it-works.md).

## The default file

The packages install this file as ` + "`" + policy.DefaultConfigPath + "`" + ` (a configuration
file: an upgrade never overwrites your edits). Every key is commented out, so
the built-in defaults apply until you change one.

` + "```toml\n")
	b.Write(def)
	b.WriteString("```\n")
	return b.Bytes(), nil
}

// mdCell escapes text for a Markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
