// Package specfile reads and rewrites a bundle's config.json, the OCI
// runtime spec an engine hands gpurun-runtime and the OCI hook: it decodes
// only the parts oci.Decide reads, with a byte walker that checks keys as
// encoding/json would (falling back to encoding/json for any shape it does
// not take), and carries a plan out (Config.Apply) by splicing the document,
// so that every byte gpurun does not change — fields newer than the
// runtime-spec module, the engine's key order and spacing — is written back
// as it was, atomically.
package specfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/textpos"
	"github.com/gpurun/gpurun/oci"
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
		// CgroupsPath names the container's cgroup: the restart sweep
		// finds the pod's memory cgroup from it.
		CgroupsPath string `json:"cgroupsPath,omitempty"`
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
		s.Linux = &specs.Linux{Devices: l.Devices, Namespaces: l.Namespaces, CgroupsPath: l.CgroupsPath}
		if r := l.Resources; r != nil {
			s.Linux.Resources = &specs.LinuxResources{}
			if r.Memory != nil {
				s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: r.Memory.Limit}
			}
		}
	}
	return s
}

// Parse decodes config.json text; name is used in errors, which give
// the line and column of malformed JSON.
func Parse(name string, data []byte) (*Config, error) {
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

// Load reads and decodes a config.json file.
func Load(path string) (*Config, error) {
	data, err := atomicfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	return Parse(path, data)
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
func (c *Config) Apply(p oci.Plan) (bool, error) {
	switch p.Action {
	case oci.ActionNone, oci.ActionRemount:
		return false, nil
	case oci.ActionSetSize:
		return true, c.setSize(p.Shm, p.Size)
	case oci.ActionInject:
		return true, c.inject(p.Size)
	case oci.ActionIPCHost:
		return true, c.ipcHost(p.Shm)
	}
	return false, fmt.Errorf("apply: unknown action %q", p.Action)
}

func (c *Config) setSize(sh oci.Shm, size int64) error {
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
	opts := oci.WithSizeOption(c.Spec.Mounts[sh.Index].Options, size, sh.SizeInKiB)
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

func (c *Config) inject(size int64) error {
	m := oci.ShmMount(size)
	if err := c.putMount(-1, m); err != nil {
		return err
	}
	c.Spec.Mounts = append(c.Spec.Mounts, m)
	return nil
}

// putMount writes m over the mount at index i, or after every other mount
// (so that it lands on top of the /dev the spec makes) when i is out of
// range; the other mounts keep their bytes.
func (c *Config) putMount(i int, m specs.Mount) error {
	key, raw, els, err := c.mountElements()
	if err != nil {
		return err
	}
	obj := []byte(`{"destination":`)
	obj = append(appendJSONString(obj, m.Destination), `,"type":`...)
	obj = append(appendJSONString(obj, m.Type), `,"source":`...)
	obj = append(appendJSONString(obj, m.Source), `,"options":`...)
	obj = append(appendJSONStrings(obj, m.Options), '}')
	switch {
	case i >= 0 && i < len(els):
		c.set(key, splice(raw, els[i][0], els[i][1], obj))
	case raw == nil:
		c.set(key, append(append([]byte{'['}, obj...), ']'))
	case len(els) == 0:
		end := bytes.LastIndexByte(raw, ']')
		c.set(key, splice(raw, end, end, obj))
	default:
		end := els[len(els)-1][1]
		c.set(key, splice(raw, end, end, append([]byte{','}, obj...)))
	}
	return nil
}

func (c *Config) ipcHost(sh oci.Shm) error {
	hostShm := specs.Mount{Destination: oci.ShmPath, Type: "bind", Source: oci.ShmPath, Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec"}}
	// Drop the IPC namespace from linux.namespaces; the rest of linux keeps
	// its bytes.
	noNamespaces := errors.New("apply ipc-host: linux: no namespaces to change")
	lkey := c.key("linux")
	linux, _ := c.value(lkey)
	lw := &walker{data: linux}
	lw.space()
	if c.Spec.Linux == nil || lw.i >= len(linux) || linux[lw.i] != '{' {
		return noNamespaces
	}
	lms, _ := lw.members()
	n := slices.IndexFunc(lms, func(m member) bool { return strings.EqualFold(m.key, "namespaces") })
	if n < 0 {
		return noNamespaces
	}
	nss := linux[lms[n].start:lms[n].end]
	nw := &walker{data: nss}
	if nss[0] != '[' {
		return noNamespaces
	}
	els := nw.elements()
	if len(els) != len(c.Spec.Linux.Namespaces) {
		return fmt.Errorf("apply ipc-host: linux.namespaces: %d in the document, %d decoded", len(els), len(c.Spec.Linux.Namespaces))
	}
	// Keep the entries whose decoded type is not ipc: index by index, the
	// document's and the decoded lists are the same namespaces.
	kept := []byte{'['}
	for i, el := range els {
		if c.Spec.Linux.Namespaces[i].Type == specs.IPCNamespace {
			continue
		}
		if len(kept) > 1 {
			kept = append(kept, ',')
		}
		kept = append(kept, nss[el[0]:el[1]]...)
	}
	kept = append(kept, ']')
	if err := c.putMount(sh.Index, hostShm); err != nil {
		return err
	}
	c.set(lkey, splice(linux, lms[n].start, lms[n].end, kept))
	if sh.Index >= 0 && sh.Index < len(c.Spec.Mounts) {
		c.Spec.Mounts[sh.Index] = hostShm
	} else {
		c.Spec.Mounts = append(c.Spec.Mounts, hostShm)
	}
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
