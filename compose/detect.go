package compose

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/compose-spec/compose-go/v2/dotenv"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// finding is what a service's merged model says about its GPUs, its
// memory and its /dev/shm.
type finding struct {
	gpu      bool
	evidence []string
	gpus     int // GPU count where it can be told, else 0

	memLimit int64  // bytes, 0 for none
	memWhat  string // the key it came from
	memNote  string // why a limit could not be read

	shmSet   bool   // shm_size is set
	shmRaw   string // its value as written (after interpolation)
	shmSize  int64  // its size in bytes, -1 when it cannot be read
	ipc      string // the ipc mode
	shmMount string // a mount at /dev/shm
	ncclOff  bool   // NCCL_SHM_DISABLE=1 in the environment
}

// cdiName matches a CDI device name, vendor/class=name.
var cdiName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([a-z0-9.-]+\.[a-z]+)/([a-zA-Z0-9_.-]+)=(.+)$`)
})

// gpuCDI reports whether a CDI device name is a GPU: class gpu, or a
// vendor whose devices are accelerators.
func gpuCDI(name string) (ok bool, all bool) {
	m := cdiName().FindStringSubmatch(name)
	if m == nil {
		return false, false
	}
	vendor, class := m[1], m[2]
	gpu := strings.Contains(class, "gpu") || slices.Contains([]string{"nvidia.com", "amd.com", "intel.com", "habana.ai"}, vendor)
	return gpu, m[3] == "all"
}

// inspect reads a service's merged model.
func (p *project) inspect(svc map[string]any) finding {
	var f finding
	counts := map[string]int{}
	add := func(kind string, n int, evidence string) {
		f.gpu = true
		counts[kind] += n
		f.evidence = append(f.evidence, evidence)
	}

	// deploy.resources.reservations.devices
	for _, d := range list(dig(svc, "deploy", "resources", "reservations", "devices")) {
		dev, _ := d.(map[string]any)
		if dev == nil {
			continue
		}
		driver := str(dev["driver"])
		caps := strs(dev["capabilities"])
		ids := strs(dev["device_ids"])
		gpu := slices.Contains(caps, "gpu") || strings.Contains(driver, "nvidia")
		for _, id := range ids {
			if ok, _ := gpuCDI(id); ok {
				gpu = true
			}
		}
		if !gpu {
			continue
		}
		n := 0
		if c, err := strconv.Atoi(str(dev["count"])); err == nil && c > 0 {
			n = c
		} else if len(ids) > 0 && !slices.Contains(ids, "all") {
			n = len(ids)
		}
		var desc []string
		if driver != "" {
			desc = append(desc, "driver "+driver)
		}
		if len(caps) > 0 {
			desc = append(desc, "capabilities ["+strings.Join(caps, " ")+"]")
		}
		add("deploy", n, "deploy.resources.reservations.devices: "+strings.Join(desc, ", "))
	}

	// gpus: all, or a list of device requests.
	switch g := svc["gpus"].(type) {
	case string:
		if g != "" {
			add("gpus", 0, "gpus: "+g)
		}
	case []any:
		// compose-go writes "gpus: all" as [{count: all}].
		n, all := 0, false
		for _, r := range g {
			m, _ := r.(map[string]any)
			switch c, err := strconv.Atoi(str(m["count"])); {
			case str(m["count"]) == "all" || err == nil && c < 0:
				all = true
			case err == nil && c > 0:
				n += c
			default:
				n += len(strs(m["device_ids"]))
			}
		}
		switch {
		case len(g) == 0:
		case all:
			add("gpus", 0, "gpus: all")
		default:
			add("gpus", n, fmt.Sprintf("gpus: %d device request(s)", len(g)))
		}
	}

	// runtime: nvidia
	if rt := str(svc["runtime"]); strings.Contains(rt, "nvidia") {
		add("runtime", 0, "runtime: "+rt)
	}

	// NVIDIA_VISIBLE_DEVICES (and Habana's) in environment or env_file.
	env := p.serviceEnv(svc)
	for _, key := range []string{"NVIDIA_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES"} {
		if v, ok := env[key]; ok {
			if use, n := oci.VisibleDevices(v); use {
				add("env:"+key, n, key+"="+v)
			}
		}
	}
	f.ncclOff = strings.TrimSpace(env["NCCL_SHM_DISABLE"]) == "1"

	// devices: GPU device nodes (by the host's path or the container's)
	// and CDI names.
	for _, d := range list(svc["devices"]) {
		var src, dst string
		switch dev := d.(type) {
		case string:
			if strings.Contains(dev, "=") {
				src = dev
				break
			}
			parts := strings.Split(dev, ":")
			src = parts[0]
			if len(parts) > 1 {
				dst = parts[1]
			}
		case map[string]any:
			src, dst = str(dev["source"]), str(dev["target"])
		}
		if gpuDevice(dst) && !gpuDevice(src) {
			src = dst
		}
		switch {
		case strings.HasPrefix(src, "/dev/nvidia"):
			n := 0
			if _, err := strconv.Atoi(strings.TrimPrefix(src, "/dev/nvidia")); err == nil {
				n = 1
			}
			add("dev:nvidia", n, "device "+src)
		case src == "/dev/kfd":
			add("dev:kfd", 0, "device "+src)
		case src == "/dev/dri" || strings.HasPrefix(src, "/dev/dri/"):
			n := 0
			if strings.HasPrefix(src, "/dev/dri/renderD") {
				n = 1
			}
			add("dev:dri", n, "device "+src)
		case strings.HasPrefix(src, "/dev/accel"):
			add("dev:accel", 1, "device "+src)
		default:
			if ok, all := gpuCDI(src); ok {
				n := 1
				if all {
					n = 0
				}
				add("cdi", n, "device "+src)
			}
		}
	}
	for _, n := range counts {
		f.gpus = max(f.gpus, n)
	}

	// The memory limit: deploy.resources.limits.memory, else mem_limit.
	for _, src := range []struct {
		what string
		v    any
	}{
		{"deploy.resources.limits.memory", dig(svc, "deploy", "resources", "limits", "memory")},
		{"mem_limit", svc["mem_limit"]},
	} {
		if src.v == nil {
			continue
		}
		n, err := bytesOf(src.v)
		if err != nil || n <= 0 {
			f.memNote = fmt.Sprintf("%s %q is not a size", src.what, str(src.v))
			continue
		}
		f.memLimit, f.memWhat = n, src.what
		break
	}

	// What already gives it a /dev/shm.
	if v, ok := svc[ShmKey]; ok && v != nil {
		f.shmSet = true
		f.shmRaw = str(v)
		f.shmSize = -1
		if n, err := bytesOf(v); err == nil {
			f.shmSize = n
		}
	}
	f.ipc = str(svc["ipc"])
	for _, v := range list(svc["volumes"]) {
		switch m := v.(type) {
		case string:
			parts := strings.Split(m, ":")
			if len(parts) >= 2 && path(parts[1]) == "/dev/shm" {
				f.shmMount = "volume " + m
			}
		case map[string]any:
			if path(str(m["target"])) == "/dev/shm" {
				f.shmMount = fmt.Sprintf("%s %s", orDefault(str(m["type"]), "volume"), orDefault(str(m["source"]), "(anonymous)"))
			}
		}
	}
	tmpfs := list(svc["tmpfs"])
	if s, ok := svc["tmpfs"].(string); ok {
		tmpfs = []any{s}
	}
	for _, t := range tmpfs {
		if dst, _, _ := strings.Cut(str(t), ":"); path(dst) == "/dev/shm" {
			f.shmMount = "tmpfs " + str(t)
		}
	}
	return f
}

// serviceEnv returns a service's environment as far as migrate needs it:
// its env_file files (those that can be read), then environment; a name
// without a value takes the project environment's.
func (p *project) serviceEnv(svc map[string]any) map[string]string {
	env := map[string]string{}
	var files []string
	switch ef := svc["env_file"].(type) {
	case string:
		files = []string{ef}
	case []any:
		for _, e := range ef {
			switch v := e.(type) {
			case string:
				files = append(files, v)
			case map[string]any:
				files = append(files, str(v["path"]))
			}
		}
	}
	for _, file := range files {
		if file == "" {
			continue
		}
		if !filepath.IsAbs(file) {
			file = filepath.Join(p.spec.workDir, file)
		}
		vars, ok := p.envFiles[file]
		if !ok {
			vars = nil
			if fi, err := os.Stat(file); err == nil && fi.Mode().IsRegular() {
				vars, _ = dotenv.GetEnvFromFile(p.env, []string{file})
			}
			p.envFiles[file] = vars
		}
		for k, v := range vars {
			env[k] = v
		}
	}
	set := func(k string, v any, hasValue bool) {
		if !hasValue || v == nil {
			if pv, ok := p.env[k]; ok {
				env[k] = pv
			}
			return
		}
		env[k] = str(v)
	}
	switch e := svc["environment"].(type) {
	case map[string]any:
		for k, v := range e {
			set(k, v, true)
		}
	case []any:
		for _, item := range e {
			k, v, ok := strings.Cut(str(item), "=")
			set(k, v, ok)
		}
	}
	return env
}

// gpuDevice reports whether a device path is a GPU's.
func gpuDevice(p string) bool {
	return strings.HasPrefix(p, "/dev/nvidia") || p == "/dev/kfd" || p == "/dev/dri" ||
		strings.HasPrefix(p, "/dev/dri/") || strings.HasPrefix(p, "/dev/accel")
}

// bytesOf reads a size as compose does: a number of bytes, or a string
// with Docker's units.
func bytesOf(v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	case uint64:
		return int64(n), nil
	case float64:
		return int64(n), nil
	case string:
		return policy.ParseSize(n)
	}
	return 0, fmt.Errorf("not a size: %v", v)
}

func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// strs reads a list of scalars (or one scalar) as strings.
func strs(v any) []string {
	switch l := v.(type) {
	case []any:
		out := make([]string, 0, len(l))
		for _, x := range l {
			if s := str(x); s != "" {
				out = append(out, s)
			}
		}
		return out
	case nil:
		return nil
	}
	return []string{str(v)}
}

func str(v any) string {
	switch s := v.(type) {
	case nil:
		return ""
	case string:
		return s
	}
	return fmt.Sprint(v)
}

func path(p string) string {
	if p == "" {
		return ""
	}
	return filepath.Clean(p)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
