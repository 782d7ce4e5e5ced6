package specfile

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// decodeFields decodes the projection walk writes into specFields without
// encoding/json's reflection: decoding into structs builds a decoder for
// each type on first use, 150-190 µs of a cold gpurun-runtime for the
// 3 KB it reads out of Docker's config.json; plain JSON values (read by
// the walker) and the few fields below cost a fraction of that. It takes the shapes engines
// write; for anything else (a null inside a list, a key outside ASCII, a
// number that does not fit, an ID-mapped mount) ok is false, and the
// caller decodes with encoding/json, which is the reference: tests and a
// fuzz target check the two agree wherever this one answers.
func decodeFields(proj []byte) (f specFields, ok bool) {
	if !json.Valid(proj) {
		return specFields{}, false
	}
	top, isObj := (&walker{data: proj}).plain().(map[string]any)
	if !isObj {
		return specFields{}, false
	}
	d := fieldDecoder{ok: true}
	d.object(top, func(k string, v any) {
		switch k {
		case "process":
			d.process(v, &f)
		case "root":
			d.root(v, &f)
		case "mounts":
			f.Mounts = list(&d, v, d.mount)
		case "hooks":
			d.hooks(v, &f)
		case "annotations":
			f.Annotations = d.stringMap(v)
		case "linux":
			d.linux(v, &f)
		}
	})
	return f, d.ok
}

// fieldDecoder decodes plain JSON values into fields as encoding/json
// does; ok turns false at the first value it does not take.
type fieldDecoder struct {
	ok bool
}

// object calls member for each member of v, an object, with the key
// lower-cased: encoding/json matches struct fields case-insensitively,
// and walk has refused objects with two keys that fold together. A null
// is no object and no error (encoding/json leaves the field zero).
func (d *fieldDecoder) object(v any, member func(k string, v any)) bool {
	if v == nil {
		return false
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		d.ok = false
		return false
	}
	for k, v := range m {
		for i := 0; i < len(k); i++ {
			if k[i] >= 0x80 { // Unicode folding (ſ, K) is encoding/json's to judge
				d.ok = false
				return false
			}
		}
		member(strings.ToLower(k), v)
	}
	return true
}

// list decodes v, a list, element by element; null is a nil list, [] an
// empty one, as encoding/json gives them.
func list[T any](d *fieldDecoder, v any, elem func(any) T) []T {
	if v == nil {
		return nil
	}
	vs, isList := v.([]any)
	if !isList {
		d.ok = false
		return nil
	}
	out := make([]T, 0, len(vs))
	for _, e := range vs {
		if e == nil { // encoding/json: a zero element
			d.ok = false
			return nil
		}
		out = append(out, elem(e))
	}
	return out
}

func (d *fieldDecoder) str(v any) string {
	s, isStr := v.(string)
	if !isStr && v != nil {
		d.ok = false
	}
	return s
}

func (d *fieldDecoder) strings(v any) []string { return list(d, v, d.str) }

func (d *fieldDecoder) number(v any) string {
	n, isNum := v.(json.Number)
	if !isNum {
		d.ok = false
	}
	return string(n)
}

func (d *fieldDecoder) int64(v any) int64 {
	n, err := strconv.ParseInt(d.number(v), 10, 64)
	if err != nil {
		d.ok = false
	}
	return n
}

func (d *fieldDecoder) uint32(v any) uint32 {
	n, err := strconv.ParseUint(d.number(v), 10, 32)
	if err != nil {
		d.ok = false
	}
	return uint32(n)
}

func (d *fieldDecoder) stringMap(v any) map[string]string {
	if v == nil {
		return nil
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		d.ok = false
		return nil
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		if e == nil {
			d.ok = false
		}
		out[k] = d.str(e)
	}
	return out
}

func (d *fieldDecoder) process(v any, f *specFields) {
	var p specProcess
	if d.object(v, func(k string, v any) {
		switch k {
		case "args":
			p.Args = d.strings(v)
		case "env":
			p.Env = d.strings(v)
		}
	}) {
		f.Process = &p
	}
}

func (d *fieldDecoder) root(v any, f *specFields) {
	var r specs.Root
	if d.object(v, func(k string, v any) {
		switch k {
		case "path":
			r.Path = d.str(v)
		case "readonly":
			if v != nil {
				b, isBool := v.(bool)
				d.ok = d.ok && isBool
				r.Readonly = b
			}
		}
	}) {
		f.Root = &r
	}
}

func (d *fieldDecoder) mount(v any) specs.Mount {
	var m specs.Mount
	d.object(v, func(k string, v any) {
		switch k {
		case "destination":
			m.Destination = d.str(v)
		case "type":
			m.Type = d.str(v)
		case "source":
			m.Source = d.str(v)
		case "options":
			m.Options = d.strings(v)
		case "uidmappings", "gidmappings":
			if v != nil { // ID-mapped mounts: left to encoding/json
				d.ok = false
			}
		}
	})
	return m
}

func (d *fieldDecoder) hooks(v any, f *specFields) {
	var h specHooks
	if d.object(v, func(k string, v any) {
		if k == "prestart" {
			h.Prestart = list(d, v, d.hook)
		}
	}) {
		f.Hooks = &h
	}
}

func (d *fieldDecoder) hook(v any) specs.Hook {
	var h specs.Hook
	d.object(v, func(k string, v any) {
		switch k {
		case "path":
			h.Path = d.str(v)
		case "args":
			h.Args = d.strings(v)
		case "env":
			h.Env = d.strings(v)
		case "timeout":
			if v != nil {
				n := int(d.int64(v))
				h.Timeout = &n
			}
		}
	})
	return h
}

func (d *fieldDecoder) linux(v any, f *specFields) {
	var l specLinux
	if d.object(v, func(k string, v any) {
		switch k {
		case "devices":
			l.Devices = list(d, v, d.device)
		case "namespaces":
			l.Namespaces = list(d, v, d.namespace)
		case "resources":
			l.Resources = d.resources(v)
		case "cgroupspath":
			l.CgroupsPath = d.str(v)
		}
	}) {
		f.Linux = &l
	}
}

func (d *fieldDecoder) resources(v any) *specResources {
	var r specResources
	if !d.object(v, func(k string, v any) {
		if k != "memory" {
			return
		}
		var m specMemory
		if d.object(v, func(k string, v any) {
			if k == "limit" && v != nil {
				n := d.int64(v)
				m.Limit = &n
			}
		}) {
			r.Memory = &m
		}
	}) {
		return nil
	}
	return &r
}

func (d *fieldDecoder) device(v any) specs.LinuxDevice {
	var dev specs.LinuxDevice
	d.object(v, func(k string, v any) {
		if v == nil {
			return
		}
		switch k {
		case "path":
			dev.Path = d.str(v)
		case "type":
			dev.Type = d.str(v)
		case "major":
			dev.Major = d.int64(v)
		case "minor":
			dev.Minor = d.int64(v)
		case "filemode":
			m := os.FileMode(d.uint32(v))
			dev.FileMode = &m
		case "uid":
			n := d.uint32(v)
			dev.UID = &n
		case "gid":
			n := d.uint32(v)
			dev.GID = &n
		}
	})
	return dev
}

func (d *fieldDecoder) namespace(v any) specs.LinuxNamespace {
	var ns specs.LinuxNamespace
	d.object(v, func(k string, v any) {
		switch k {
		case "type":
			ns.Type = specs.LinuxNamespaceType(d.str(v))
		case "path":
			ns.Path = d.str(v)
		}
	})
	return ns
}
