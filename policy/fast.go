package policy

import (
	"github.com/pelletier/go-toml/v2/unstable"
)

// parseFast decodes a configuration file of the shape gpurun writes and
// documents — top-level keys of File, each once, with strings, booleans
// and lists of strings, and comments — with go-toml's own parser and
// without its reflection-based decoder, which took ~100 µs of every cold
// gpurun-runtime (the shim reads the policy on each container start). For
// anything else (a table, a dotted or unknown key, a key twice, a value of
// another type, a syntax error) it returns false and f as it found it, and
// Parse decodes with toml.Decoder, the reference, for the result or the
// error it names by line. A fuzz test checks the two agree wherever this
// one answers.
func parseFast(data []byte, f *File) bool {
	out := *f
	var p unstable.Parser
	p.Reset(data)
	seen := map[string]bool{}
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind == unstable.Comment {
			continue
		}
		if e.Kind != unstable.KeyValue {
			return false
		}
		k := e.Key()
		if !k.Next() {
			return false
		}
		key := string(k.Node().Data)
		if k.Next() || seen[key] { // a dotted key; a key twice
			return false
		}
		seen[key] = true
		v := e.Value()
		var ok bool
		switch key {
		case "match":
			out.Match, ok = tomlString(v)
		case "size":
			out.Size, ok = tomlString(v)
		case "min":
			out.Min, ok = tomlString(v)
		case "max":
			out.Max, ok = tomlString(v)
		case "per_gpu":
			out.PerGPU, ok = tomlString(v)
		case "mode":
			out.Mode, ok = tomlString(v)
		case "memory_reserve":
			out.MemoryReserve, ok = tomlString(v)
		case "sweep":
			out.Sweep, ok = tomlString(v)
		case "annotation_max":
			out.AnnotationMax, ok = tomlString(v)
		case "runtime":
			out.Runtime, ok = tomlString(v)
		case "log_file":
			out.LogFile, ok = tomlString(v)
		case "compose_default":
			out.ComposeDefault, ok = tomlString(v)
		case "enforce_min":
			out.EnforceMin, ok = tomlBool(v)
		case "fail_closed":
			out.FailClosed, ok = tomlBool(v)
		case "allowed_annotations":
			out.AllowedAnnotations, ok = tomlStrings(v)
		case "engine_roots":
			out.EngineRoots, ok = tomlStrings(v)
		case "gpu_resources":
			out.GPUResources, ok = tomlStrings(v)
		case "gpu_runtime_classes":
			out.GPURuntimeClasses, ok = tomlStrings(v)
		case "gpu_device_classes":
			out.GPUDeviceClasses, ok = tomlStrings(v)
		case "gpu_dra_drivers":
			out.GPUDRADrivers, ok = tomlStrings(v)
		case "unresolved_claims":
			out.UnresolvedClaims, ok = tomlString(v)
		}
		if !ok {
			return false
		}
	}
	if p.Error() != nil {
		return false
	}
	*f = out
	return true
}

func tomlString(v *unstable.Node) (string, bool) {
	if v.Kind != unstable.String {
		return "", false
	}
	return string(v.Data), true
}

func tomlBool(v *unstable.Node) (bool, bool) {
	if v.Kind != unstable.Bool {
		return false, false
	}
	return string(v.Data) == "true", true
}

func tomlStrings(v *unstable.Node) ([]string, bool) {
	if v.Kind != unstable.Array {
		return nil, false
	}
	out := []string{}
	for it := v.Children(); it.Next(); {
		s, ok := tomlString(it.Node())
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
