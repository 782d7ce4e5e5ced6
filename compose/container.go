package compose

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// service is one service's merged model translated into the one form
// (oci.Container), as `docker compose` would have dockerd lay it out, and
// the words of the compose file that migrate's report and warnings quote.
type service struct {
	c *oci.Container

	memWhat string // the key the memory limit came from, "" for none
	memNote string // why a memory limit could not be read

	shmSet    bool   // shm_size is set
	shmRaw    string // its value as written (after interpolation)
	shmUnread bool   // it is set but not a size (an unset variable, say)
	ipc       string // the ipc mode as written
}

// translate turns a service's merged model into the docker door's settings
// (translate.Settings, which lays them out as dockerd does):
//
//   - deploy.resources.reservations.devices and gpus: device requests in
//     the file's words, judged by oci.Decide;
//   - runtime: the runtime handler, judged by oci.Decide;
//   - environment and env_file: the process env;
//   - devices: by their path in the container, CDI names too;
//   - deploy.resources.limits.memory, else mem_limit: the memory limit;
//   - ipc and shm_size: /dev/shm as dockerd lays it out (translate.IPC),
//     shm_size being the user's choice; ipc: service:x and container:x
//     join a namespace whose /dev/shm is not known to the file;
//   - volumes and tmpfs at /dev/shm: the user's own mount, which wins;
//   - privileged.
//
// An error means docker would refuse the service too (an IPC mode it does
// not know, a device that is neither a path nor a CDI name).
func (p *project) translate(svc map[string]any) (service, error) {
	var s service
	set := translate.Settings{Shm: translate.Shm{Size: policy.EngineDefaultShm}}
	for _, d := range list(dig(svc, "deploy", "resources", "reservations", "devices")) {
		if dev, _ := d.(map[string]any); dev != nil {
			set.Requests = append(set.Requests, deployDevice(dev))
		}
	}
	set.Requests = append(set.Requests, gpus(svc["gpus"])...)
	if rt := str(svc["runtime"]); rt != "" {
		set.Runtime, set.RuntimeWords = rt, "runtime: "+rt
	}
	env := p.serviceEnv(svc)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		set.Env = append(set.Env, k+"="+env[k])
	}
	for _, d := range list(svc["devices"]) {
		if target := deviceTarget(d); target != "" {
			set.Devices = append(set.Devices, target)
		}
	}
	if v, ok := svc["privileged"]; ok {
		if on, err := strconv.ParseBool(str(v)); err == nil && on {
			set.Privileged = "privileged: true"
		}
	}
	set.Memory, s.memWhat, s.memNote = memoryLimit(svc)
	s.shmSet, s.shmRaw, s.shmUnread, s.ipc = shmSettings(svc, &set)
	if words, m, ok := userShm(svc); ok {
		set.UserShm = &translate.UserShm{Words: words, Mount: m}
	}
	c, err := set.Container()
	if err != nil {
		return s, err
	}
	s.c = c
	return s, nil
}

// memoryLimit is a service's memory limit: deploy.resources.limits.memory,
// else mem_limit; which key gave it, and a note for one that is not a size.
func memoryLimit(svc map[string]any) (n int64, what, note string) {
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
			note = fmt.Sprintf("%s %q is not a size", src.what, str(src.v))
			continue
		}
		return n, src.what, note
	}
	return 0, "", note
}

// shmSettings sets /dev/shm as the IPC mode gives it, sized by shm_size
// (the user's choice); ipc: service:x joins that service's container,
// whose /dev/shm a compose file cannot know (oci.WithJoinedIPC). It
// returns whether shm_size is set, its value as written, whether that is
// not a size known here (an unset variable, say), and the ipc mode as
// written.
func shmSettings(svc map[string]any, set *translate.Settings) (shmSet bool, raw string, unread bool, ipc string) {
	if v, ok := svc[ShmKey]; ok && v != nil {
		shmSet, raw = true, str(v)
		set.Shm.Choice = "shm_size: " + raw
		if n, err := bytesOf(v); err == nil && n > 0 {
			set.Shm.Size = n
		} else {
			unread = true // chosen, but not known here: the report keeps it unchecked
		}
	}
	ipc = str(svc["ipc"])
	set.IPC = ipc
	if from, ok := strings.CutPrefix(ipc, "service:"); ok {
		set.IPC = "container:" + from // compose joins that service's container
	}
	set.Shm.IPCWords = "ipc: " + ipc
	return shmSet, raw, unread, ipc
}

// deployDevice is one entry of deploy.resources.reservations.devices, as
// compose hands it to dockerd: a device request of its driver,
// capabilities, device_ids and count (all: -1), named in the file's words.
func deployDevice(dev map[string]any) oci.DeviceRequest {
	driver := str(dev["driver"])
	caps := strs(dev["capabilities"])
	var desc []string
	if driver != "" {
		desc = append(desc, "driver "+driver)
	}
	if len(caps) > 0 {
		desc = append(desc, "capabilities ["+strings.Join(caps, " ")+"]")
	}
	return oci.DeviceRequest{
		Words:  "deploy.resources.reservations.devices: " + strings.Join(desc, ", "),
		Driver: driver, Capabilities: caps, DeviceIDs: strs(dev["device_ids"]), Count: requestCount(dev["count"]),
	}
}

// requestCount is a device request's count: a number, -1 for "all" (or any
// other word docker takes for as many as the host has), 0 when not given.
func requestCount(v any) int {
	c := str(v)
	if c == "" {
		return 0
	}
	if n, err := strconv.Atoi(c); err == nil && n >= 0 {
		return n
	}
	return -1
}

// gpus is the gpus: key: "all" (compose-go makes it [{count: all}]), or a
// list of device requests: each asks for GPUs, as docker's --gpus does
// (the gpu capability), in the file's words.
func gpus(v any) []oci.DeviceRequest {
	switch g := v.(type) {
	case string:
		if g != "" {
			return []oci.DeviceRequest{{Words: "gpus: " + g, Capabilities: []string{"gpu"}, Count: requestCount(g)}}
		}
	case []any:
		var reqs []oci.DeviceRequest
		for _, r := range g {
			m, _ := r.(map[string]any)
			r := oci.DeviceRequest{
				Driver: str(m["driver"]), Capabilities: append([]string{"gpu"}, strs(m["capabilities"])...),
				DeviceIDs: strs(m["device_ids"]), Count: requestCount(m["count"]),
			}
			r.Words = "gpus: " + gpusWords(r)
			reqs = append(reqs, r)
		}
		return reqs
	}
	return nil
}

// gpusWords writes one request of a gpus: list as the file says it: "all"
// (compose-go's form of gpus: all), else its driver, count and device ids.
func gpusWords(r oci.DeviceRequest) string {
	var w []string
	if r.Driver != "" {
		w = append(w, "driver "+r.Driver)
	}
	switch {
	case r.Count < 0 && len(w) == 0 && len(r.DeviceIDs) == 0:
		return "all"
	case r.Count < 0:
		w = append(w, "count all")
	case r.Count > 0:
		w = append(w, fmt.Sprintf("count %d", r.Count))
	}
	if len(r.DeviceIDs) > 0 {
		w = append(w, "device_ids ["+strings.Join(r.DeviceIDs, " ")+"]")
	}
	return strings.Join(w, ", ")
}

// deviceTarget is a devices: entry's path in the container, as compose
// reads it (compose-go's transformDeviceMapping: "source[:target[:perms]]",
// the target defaulting to the source, or {source, target}); a CDI name
// stays whole. "" when it names nothing (an unset variable).
func deviceTarget(d any) string {
	switch dev := d.(type) {
	case string:
		if oci.IsCDIName(dev) {
			return dev
		}
		parts := strings.Split(dev, ":")
		if len(parts) > 1 && parts[1] != "" {
			return parts[1]
		}
		return parts[0]
	case map[string]any:
		if t := str(dev["target"]); t != "" {
			return t
		}
		return str(dev["source"])
	}
	return ""
}

// userShm finds the user's own mount at /dev/shm among volumes and tmpfs:
// its words and the mount dockerd would make (a tmpfs keeps its size).
func userShm(svc map[string]any) (string, specs.Mount, bool) {
	words, m, ok := "", specs.Mount{}, false
	for _, v := range list(svc["volumes"]) {
		switch vol := v.(type) {
		case string:
			parts := strings.Split(vol, ":")
			if len(parts) >= 2 && cleanPath(parts[1]) == oci.ShmPath {
				// named as compose-go's long form names it
				typ := "volume"
				if strings.HasPrefix(parts[0], "/") || strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "~") {
					typ = "bind"
				}
				words, m, ok = typ+" "+parts[0], specs.Mount{Type: "bind"}, true
			}
		case map[string]any:
			if cleanPath(str(vol["target"])) != oci.ShmPath {
				continue
			}
			typ := orDefault(str(vol["type"]), "volume")
			words, m, ok = fmt.Sprintf("%s %s", typ, orDefault(str(vol["source"]), "(anonymous)")), specs.Mount{Type: "bind"}, true
			if typ == "tmpfs" {
				m = specs.Mount{Type: "tmpfs", Source: "tmpfs"}
				if size := dig(vol, "tmpfs", "size"); size != nil {
					if n, err := bytesOf(size); err == nil && n > 0 {
						m.Options = []string{"size=" + strconv.FormatInt(n, 10)}
					}
				}
			}
		}
	}
	tmpfs := list(svc["tmpfs"])
	if s, isStr := svc["tmpfs"].(string); isStr {
		tmpfs = []any{s}
	}
	for _, t := range tmpfs {
		if dst, _, _ := strings.Cut(str(t), ":"); cleanPath(dst) == oci.ShmPath {
			words, m, ok = "tmpfs "+str(t), translate.UserMount("tmpfs", str(t)), true
		}
	}
	return words, m, ok
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

func cleanPath(p string) string {
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
