package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/atomicfile"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/textpos"
)

// Config is a bundle's config.json: the typed spec gpurun reads, and the
// document itself, which a plan rewrites only where it changes it: every
// other byte — fields newer than the runtime-spec module gpurun was built
// with, the engine's key order and spacing — is written back as it was.
type Config struct {
	// Spec holds the fields of the spec gpurun reads (those of specFields);
	// the others are left zero, and kept as they were in the document.
	Spec *specs.Spec
	doc  []byte
	// members are the document's top-level members in order, and close
	// the offset of its closing brace.
	members []member
	close   int
}

// member is a top-level member of the document: its key, and its value,
// doc[start:end] until a plan sets another. A member a plan added has no
// place in doc (start < 0).
type member struct {
	key        string
	start, end int
	value      []byte
}

// specFields are the parts of a runtime spec that gpurun reads. Decoding
// only these, not the whole specs.Spec, keeps a cold start of the shim and
// the hook cheap: encoding/json builds a decoder for each type it meets on
// first use, and specs.Spec reaches well over a hundred types (seccomp,
// rlimits, every cgroup controller, Windows, VMs), which took ~1 ms of
// each container start. runc decodes and checks the whole spec itself.
type specFields struct {
	Process     *specProcess      `json:"process,omitempty"`
	Root        *specs.Root       `json:"root,omitempty"`
	Mounts      []specs.Mount     `json:"mounts,omitempty"`
	Hooks       *specHooks        `json:"hooks,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       *specLinux        `json:"linux,omitempty"`
}

// specProcess, specHooks, specLinux, specResources and specMemory are the
// parts of runtime-spec's types that gpurun reads.
type (
	specProcess struct {
		Args []string `json:"args,omitempty"`
		Env  []string `json:"env,omitempty"`
	}
	specHooks struct {
		Prestart []specs.Hook `json:"prestart,omitempty"`
	}
	specLinux struct {
		Devices    []specs.LinuxDevice    `json:"devices,omitempty"`
		Namespaces []specs.LinuxNamespace `json:"namespaces,omitempty"`
		Resources  *specResources         `json:"resources,omitempty"`
	}
	specResources struct {
		Memory *specMemory `json:"memory,omitempty"`
	}
	specMemory struct {
		Limit *int64 `json:"limit,omitempty"`
	}
)

// spec returns the fields as a specs.Spec.
func (f *specFields) spec() *specs.Spec {
	s := &specs.Spec{Root: f.Root, Mounts: f.Mounts, Annotations: f.Annotations}
	if f.Process != nil {
		s.Process = &specs.Process{Args: f.Process.Args, Env: f.Process.Env}
	}
	if f.Hooks != nil {
		//lint:ignore SA1019 Prestart is deprecated, but it is where dockerd (--gpus) and the NVIDIA runtime put the NVIDIA hook.
		s.Hooks = &specs.Hooks{Prestart: f.Hooks.Prestart}
	}
	if l := f.Linux; l != nil {
		s.Linux = &specs.Linux{Devices: l.Devices, Namespaces: l.Namespaces}
		if r := l.Resources; r != nil {
			s.Linux.Resources = &specs.LinuxResources{}
			if r.Memory != nil {
				s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: r.Memory.Limit}
			}
		}
	}
	return s
}

// ParseConfig decodes config.json text; name is used in errors, which give
// the line and column of malformed JSON.
func ParseConfig(name string, data []byte) (*Config, error) {
	var f specFields
	w, err := walk(data)
	if err == nil {
		var ok bool
		if f, ok = decodeFields(w.proj); !ok {
			f = specFields{}
			err = json.Unmarshal(w.proj, &f)
		}
	}
	if err != nil {
		// The decoder's offsets are the projection's, or its messages
		// lack one: decoding the whole document says where it is wrong.
		if uerr := json.Unmarshal(data, &specFields{}); uerr != nil {
			return nil, fmt.Errorf("parse %s: %s", name, describeJSONError(data, uerr))
		}
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	return &Config{Spec: f.spec(), doc: data, members: w.members, close: w.close}, nil
}

// LoadConfig reads and decodes a config.json file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	return ParseConfig(path, data)
}

func describeJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	off, ok := textpos.JSONOffset(data, err)
	if !ok {
		return err.Error()
	}
	p := textpos.Of(data, off)
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at offset %d (line %d, column %d): %v", off, p.Line, p.Column, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Sprintf("field %s at offset %d (line %d, column %d): cannot use a JSON %s as %s", field, typ.Offset, p.Line, p.Column, typ.Value, typ.Type)
	}
	return err.Error()
}

// Apply makes the spec change a plan calls for: set-size rewrites the
// tmpfs size option, inject adds a tmpfs at /dev/shm, ipc-host drops the
// private IPC namespace and binds the host's /dev/shm. Remount changes the
// host, not the spec, and none changes nothing; both return false.
func (c *Config) Apply(p Plan) (bool, error) {
	switch p.Action {
	case ActionNone, ActionRemount:
		return false, nil
	case ActionSetSize:
		return true, c.setSize(p.Shm, p.Size)
	case ActionInject:
		return true, c.inject(p.Size)
	case ActionIPCHost:
		return true, c.ipcHost(p.Shm)
	}
	return false, fmt.Errorf("apply: unknown action %q", p.Action)
}

// fieldKey returns the key of obj that Go's encoding/json (and so runc)
// decodes into the field named name: keys are matched case-insensitively,
// and when several spellings are present the last one in the document wins.
// The decoded map has lost that order, so two spellings are refused as
// ambiguous rather than guessed.
func fieldKey(obj map[string]json.RawMessage, name string) (string, error) {
	found := ""
	for k := range obj {
		if strings.EqualFold(k, name) {
			if found != "" {
				return "", fmt.Errorf("ambiguous keys %q and %q for field %q", found, k, name)
			}
			found = k
		}
	}
	if found == "" {
		return name, nil
	}
	return found, nil
}

// mounts decodes the raw mounts list, keeping each mount's unknown fields,
// and returns it with the key it lives under.
func (c *Config) mounts() ([]map[string]json.RawMessage, string, error) {
	key := c.key("mounts")
	var ms []map[string]json.RawMessage
	if raw, ok := c.value(key); ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &ms); err != nil {
			return nil, "", fmt.Errorf("apply: mounts: %w", err)
		}
	}
	if len(ms) != len(c.Spec.Mounts) {
		return nil, "", fmt.Errorf("apply: mounts: %d in the document, %d decoded", len(ms), len(c.Spec.Mounts))
	}
	return ms, key, nil
}

func (c *Config) setMounts(key string, ms []map[string]json.RawMessage) error {
	raw, err := marshal(ms)
	if err != nil {
		return fmt.Errorf("apply: mounts: %w", err)
	}
	c.set(key, raw)
	return nil
}

func (c *Config) setSize(sh Shm, size int64) error {
	if sh.Index < 0 || sh.Index >= len(c.Spec.Mounts) {
		return fmt.Errorf("apply set-size: no /dev/shm mount at index %d", sh.Index)
	}
	key, raw, els, err := c.mountElements()
	if err != nil {
		return err
	}
	// The mount's options, or a new member for them: the rest of the
	// mount, and every other mount, keep their bytes.
	el := raw[els[sh.Index][0]:els[sh.Index][1]]
	w := &walker{data: el}
	ms, closing := w.members()
	opts := WithSizeOption(c.Spec.Mounts[sh.Index].Options, size, sh.SizeInKiB)
	list := appendJSONStrings(nil, opts)
	var mount []byte
	if i := slices.IndexFunc(ms, func(m member) bool { return strings.EqualFold(m.key, "options") }); i >= 0 {
		mount = splice(el, ms[i].start, ms[i].end, list)
	} else {
		add := append(appendJSONString(nil, "options"), ':')
		if len(ms) > 0 {
			add = append([]byte{','}, add...)
		}
		mount = splice(el, closing, closing, append(add, list...))
	}
	c.set(key, splice(raw, els[sh.Index][0], els[sh.Index][1], mount))
	c.Spec.Mounts[sh.Index].Options = opts
	return nil
}

// mountElements returns the top-level key of the mounts, their value and
// the span of each element in it, checked against the decoded spec.
func (c *Config) mountElements() (string, []byte, [][2]int, error) {
	key := c.key("mounts")
	raw, _ := c.value(key)
	w := &walker{data: raw}
	w.space()
	if w.i >= len(raw) || raw[w.i] != '[' {
		if len(c.Spec.Mounts) == 0 {
			return key, nil, nil, nil // absent or null
		}
		return "", nil, nil, fmt.Errorf("apply: mounts: not a list")
	}
	els := w.elements()
	if len(els) != len(c.Spec.Mounts) {
		return "", nil, nil, fmt.Errorf("apply: mounts: %d in the document, %d decoded", len(els), len(c.Spec.Mounts))
	}
	return key, raw, els, nil
}

// splice returns b with b[start:end] replaced by with.
func splice(b []byte, start, end int, with []byte) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(with))
	return append(append(append(out, b[:start]...), with...), b[end:]...)
}

// ShmMount is the tmpfs engines give a container at /dev/shm, of the given size.
func ShmMount(size int64) specs.Mount {
	return specs.Mount{
		Destination: ShmPath,
		Type:        "tmpfs",
		Source:      "shm",
		Options:     []string{"nosuid", "noexec", "nodev", "mode=1777", policy.MountSizeOption(size, false)},
	}
}

func (c *Config) inject(size int64) error {
	key, raw, els, err := c.mountElements()
	if err != nil {
		return err
	}
	m := ShmMount(size)
	obj := []byte(`{"destination":`)
	obj = append(appendJSONString(obj, m.Destination), `,"type":`...)
	obj = append(appendJSONString(obj, m.Type), `,"source":`...)
	obj = append(appendJSONString(obj, m.Source), `,"options":`...)
	obj = append(appendJSONStrings(obj, m.Options), '}')
	// After every other mount, so it lands on top of the /dev the spec makes.
	switch {
	case raw == nil:
		c.set(key, append(append([]byte{'['}, obj...), ']'))
	case len(els) == 0:
		end := bytes.LastIndexByte(raw, ']')
		c.set(key, splice(raw, end, end, obj))
	default:
		end := els[len(els)-1][1]
		c.set(key, splice(raw, end, end, append([]byte{','}, obj...)))
	}
	c.Spec.Mounts = append(c.Spec.Mounts, m)
	return nil
}

func (c *Config) ipcHost(sh Shm) error {
	hostShm := specs.Mount{Destination: ShmPath, Type: "bind", Source: ShmPath, Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec"}}
	rawMount, err := marshal(hostShm)
	if err != nil {
		return err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(rawMount, &obj); err != nil {
		return err
	}
	// Drop the IPC namespace from linux.namespaces, keeping the rest of linux.
	lkey := c.key("linux")
	var linux map[string]json.RawMessage
	raw, _ := c.value(lkey)
	if err := json.Unmarshal(raw, &linux); err != nil || linux == nil || c.Spec.Linux == nil {
		return fmt.Errorf("apply ipc-host: linux: no namespaces to change")
	}
	nkey, err := fieldKey(linux, "namespaces")
	if err != nil {
		return fmt.Errorf("apply ipc-host: linux: %w", err)
	}
	var nss []map[string]json.RawMessage
	if err := json.Unmarshal(linux[nkey], &nss); err != nil {
		return fmt.Errorf("apply ipc-host: linux.namespaces: %w", err)
	}
	if len(nss) != len(c.Spec.Linux.Namespaces) {
		return fmt.Errorf("apply ipc-host: linux.namespaces: %d in the document, %d decoded", len(nss), len(c.Spec.Linux.Namespaces))
	}
	// Keep the entries whose decoded type is not ipc: index by index, the
	// raw and the decoded lists are the same namespaces.
	kept := nss[:0]
	for i, ns := range nss {
		if c.Spec.Linux.Namespaces[i].Type != specs.IPCNamespace {
			kept = append(kept, ns)
		}
	}
	var nsRaw, linuxRaw json.RawMessage
	if nsRaw, err = marshal(kept); err != nil {
		return err
	}
	linux[nkey] = nsRaw
	if linuxRaw, err = marshal(linux); err != nil {
		return err
	}
	ms, mkey, err := c.mounts()
	if err != nil {
		return err
	}
	if sh.Index >= 0 && sh.Index < len(ms) {
		ms[sh.Index] = obj
		c.Spec.Mounts[sh.Index] = hostShm
	} else {
		ms = append(ms, obj)
		c.Spec.Mounts = append(c.Spec.Mounts, hostShm)
	}
	if err := c.setMounts(mkey, ms); err != nil {
		return err
	}
	c.set(lkey, linuxRaw)
	c.Spec.Linux.Namespaces = slices.DeleteFunc(c.Spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
		return ns.Type == specs.IPCNamespace
	})
	return nil
}

// key returns the top-level key that encoding/json (and so runc) decodes
// into the field named name, else name. walk refused a document with two.
func (c *Config) key(name string) string {
	for _, m := range c.members {
		if strings.EqualFold(m.key, name) {
			return m.key
		}
	}
	return name
}

// value returns the value of the top-level member key.
func (c *Config) value(key string) ([]byte, bool) {
	for _, m := range c.members {
		if m.key != key {
			continue
		}
		if m.value != nil {
			return m.value, true
		}
		return c.doc[m.start:m.end], true
	}
	return nil, false
}

// set gives the top-level member key a new value, adding the member when
// the document has none.
func (c *Config) set(key string, value []byte) {
	for i := range c.members {
		if c.members[i].key == key {
			c.members[i].value = value
			return
		}
	}
	c.members = append(c.members, member{key: key, start: -1, value: value})
}

// Marshal returns the document with the values plans set: every other
// byte as it was read, and members a plan added before the closing brace.
func (c *Config) Marshal() ([]byte, error) {
	out := make([]byte, 0, len(c.doc)+512)
	prev, kept := 0, 0
	for _, m := range c.members {
		if m.start < 0 {
			continue
		}
		kept++
		out = append(out, c.doc[prev:m.start]...)
		if m.value != nil {
			out = append(out, m.value...)
		} else {
			out = append(out, c.doc[m.start:m.end]...)
		}
		prev = m.end
	}
	out = append(out, c.doc[prev:c.close]...)
	for _, m := range c.members {
		if m.start >= 0 {
			continue
		}
		if kept > 0 {
			out = append(out, ',')
		}
		kept++
		out = append(append(appendJSONString(out, m.key), ':'), m.value...)
	}
	return append(out, c.doc[c.close:]...), nil
}

// marshal encodes JSON without HTML escaping, so strings keep their bytes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// WriteFile writes the config to path atomically: a temporary file in the
// same directory, fsync, the original file's mode, rename over path, then
// fsync of the directory. A reader sees the old file or the new one, never a
// part.
func (c *Config) WriteFile(path string) error {
	data, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.Write(path, data, 0o644)
}
