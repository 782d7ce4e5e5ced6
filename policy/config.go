// Package policy decides how large a container's /dev/shm should be: it
// loads gpurun's configuration file, parses sizes in Docker's and
// Kubernetes' notations, and computes the target size for a container from
// its memory limit, the host's memory and its GPU count.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// DefaultConfigPath is where gpurun looks for its configuration when neither
// --config nor GPURUN_CONFIG names a file.
const DefaultConfigPath = "/etc/gpurun/config.toml"

// ConfigEnv is the environment variable that names the configuration file.
const ConfigEnv = "GPURUN_CONFIG"

// Match says which containers the policy applies to.
type Match string

// The values of Match.
const (
	MatchGPU Match = "gpu" // containers with GPU evidence (the default)
	MatchAll Match = "all" // every container
)

// Mode says how a container gets its larger /dev/shm.
type Mode string

// The values of Mode.
const (
	// ModeSize sizes the engine's own tmpfs: rewrite its size option, grow
	// the engine-made host tmpfs a pod or a shareable container uses, or add
	// a tmpfs where there is none. The default.
	ModeSize Mode = "size"
	// ModeIPCHost gives a GPU container the host's IPC namespace and
	// /dev/shm, as `--ipc=host` does. Containers that share a pod's or a
	// donor's IPC namespace are sized as in ModeSize instead.
	ModeIPCHost Mode = "ipc-host"
	// ModeMount only changes the container's own mounts: rewrite the size
	// of its tmpfs, or add a tmpfs where the spec has no /dev/shm at all; it
	// never remounts anything on the host.
	ModeMount Mode = "mount"
)

// Sweep says what the node doors do with a pod's /dev/shm when one of its
// containers starts again.
type Sweep string

// The values of Sweep.
const (
	// SweepRestart removes, before a container of a pod starts again, the
	// files its earlier instance left in the pod's /dev/shm that no live
	// process holds (engine/shmsweep has the rules). The default: a
	// restarted Docker container gets a fresh /dev/shm, and users expect
	// the same of a pod's.
	SweepRestart Sweep = "restart"
	// SweepOff leaves the pod's /dev/shm as the earlier instance left it.
	SweepOff Sweep = "off"
)

// UnresolvedClaims says how a pod's DRA resource claim that cannot be
// read (its ResourceClaim or ResourceClaimTemplate not created yet, or not
// readable) counts: as a GPU, or not at all.
type UnresolvedClaims string

// The values of UnresolvedClaims.
const (
	// UnresolvedGPU counts a claim that cannot be read as a GPU: the pod
	// is sized as a GPU pod. The default: an unsized GPU pod fails hours
	// into its job (Bus error), while a /dev/shm given to a pod that has
	// no GPU costs nothing until written.
	UnresolvedGPU UnresolvedClaims = "gpu"
	// UnresolvedIgnore leaves a claim that cannot be read out of the
	// decision: the pod is judged by its other evidence.
	UnresolvedIgnore UnresolvedClaims = "ignore"
)

// File is the configuration file as written, before validation. Sizes are
// strings in Docker's notation ("1g", "512m") or Kubernetes' binary one
// ("1Gi"); size may also be a percentage ("50%").
type File struct {
	// Match is "gpu" (containers with GPU evidence) or "all".
	Match string `toml:"match" comment:"Which containers get a larger /dev/shm: \"gpu\" (with GPU evidence) or \"all\"."`
	// Size is the target: a percentage of the memory the container may use
	// (its limit, else the host's memory) or an absolute size.
	Size string `toml:"size" comment:"Target size: a percentage of the memory the container may use (its limit, else the host's RAM), or an absolute size such as \"16g\"."`
	// Min is the smallest size gpurun gives.
	Min string `toml:"min" comment:"Never give less than this."`
	// Max is the largest size gpurun gives; empty means no cap beyond memory.
	Max string `toml:"max" comment:"Never give more than this (empty: no cap beyond the memory the container may use)."`
	// PerGPU, when set, makes the target this size times the GPU count
	// where the count can be told.
	PerGPU string `toml:"per_gpu" comment:"When set, the target is this size times the container's GPU count where it can be told."`
	// Mode is "size", "ipc-host" or "mount".
	Mode string `toml:"mode" comment:"How: \"size\" (size the engine's tmpfs), \"ipc-host\" (share the host's IPC and /dev/shm) or \"mount\" (only the container's own mounts: also adds a tmpfs where there is none; never remounts on the host)."`
	// MemoryReserve is the part of the memory a container may use that
	// /dev/shm never takes from its processes: a percentage or a size.
	MemoryReserve string `toml:"memory_reserve" comment:"The part of the memory a container may use that gpurun's size never gives to /dev/shm, left to its processes (tmpfs pages count against the memory limit): a percentage (\"25%\") or a size (\"2g\"). Beats min; never below 64 MiB."`
	// Sweep is "restart" or "off".
	Sweep string `toml:"sweep" comment:"When a container of a Kubernetes pod starts again: \"restart\" removes the files its earlier instance left in the pod's /dev/shm that no live process holds; \"off\" leaves them."`
	// EnforceMin raises even a user's explicit smaller choice to Min.
	EnforceMin bool `toml:"enforce_min" comment:"Raise a user's explicit smaller /dev/shm to min too."`
	// FailClosed makes the shim, the hook and the NRI plugin fail a
	// container start on an internal error instead of passing it through
	// unchanged.
	FailClosed bool `toml:"fail_closed" comment:"On an internal error, gpurun-runtime, the hook and the NRI plugin fail the container start instead of letting it start unchanged."`
	// AllowedAnnotations lists the annotations whose value requests a size.
	AllowedAnnotations []string `toml:"allowed_annotations" comment:"Annotations whose value requests a /dev/shm size (Kubernetes quantity or Docker size)."`
	// AnnotationMax caps what an annotation may request; empty means Max.
	AnnotationMax string `toml:"annotation_max" comment:"The most an annotation may request (empty: max)."`
	// Runtime is the low-level OCI runtime the shim hands over to.
	Runtime string `toml:"runtime" comment:"The low-level OCI runtime gpurun-runtime hands over to (a name on PATH or a path): runc, crun, nvidia-container-runtime."`
	// LogFile is where the shim, the hook and a runtime-launched NRI plugin
	// write JSON log lines.
	LogFile string `toml:"log_file" comment:"Where gpurun-runtime, the hook and a runtime-launched NRI plugin write their JSON log lines, timed in UTC (a long-running gpurun nri logs to stderr)."`
	// EngineRoots are the directories under which gpurun may remount an
	// engine-made tmpfs for a container whose engine named none: the
	// fallback for layouts gpurun does not know. Where the engine names
	// its dirs (containerd's bundle path, Podman's and CRI-O's, NRI's pod,
	// dockerd's data-root in the runtime's runtimeArgs), only the tmpfs
	// they give is remounted, wherever it is.
	EngineRoots []string `toml:"engine_roots" comment:"Fallback: directories under which an engine-made tmpfs may be remounted when the engine names none for the container (gpurun-runtime, the hook and the NRI plugin learn containerd's, Podman's, CRI-O's and dockerd's dirs from the engine itself)."`
	// ComposeDefault is the size `gpurun compose migrate` writes for a GPU
	// service without a memory limit.
	ComposeDefault string `toml:"compose_default" comment:"shm_size for a GPU compose service without a memory limit."`
	// GPUResources are Kubernetes extended resources, beyond the known GPU
	// vendors', whose request makes a pod's container a GPU container
	// (exact names, or a domain as "example.com/*").
	GPUResources []string `toml:"gpu_resources" comment:"Kubernetes extended resources that mean a GPU, beyond nvidia.com/*, amd.com/*, gpu.intel.com/* and habana.ai/* (exact names, or \"example.com/*\"). Read by gpurun webhook and gpurun plan --pod."`
	// GPURuntimeClasses are runtime handler names that mean a GPU
	// container: RuntimeClasses, and the runtimes of docker's --runtime and
	// compose's runtime: (the NVIDIA toolkit registers the same names in
	// dockerd and containerd). Exact names.
	GPURuntimeClasses []string `toml:"gpu_runtime_classes" comment:"Runtime handler names that make a container a GPU container: a pod's RuntimeClass (the NVIDIA GPU Operator's), docker's --runtime and compose's runtime: (the NVIDIA toolkit's nvidia, nvidia-cdi, nvidia-legacy). Exact names."`
	// GPUDeviceClasses are DRA DeviceClasses, beyond the GPU drivers'
	// own, whose devices are GPUs: a pod's resource claim that requests
	// one makes the containers that use the claim GPU containers.
	GPUDeviceClasses []string `toml:"gpu_device_classes" comment:"Kubernetes DRA DeviceClasses whose devices are GPUs, beyond the GPU drivers' own (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, gpu.amd.com, gpu.intel.com, gpu-vfio.intel.com, gaudi.intel.com): a container that uses a resource claim requesting one is a GPU container. Exact names. Read by gpurun webhook and gpurun plan --pod."`
	// GPUDRADrivers are DRA drivers, beyond the GPU vendors', whose
	// devices are GPUs: a DeviceClass whose selectors name one, or a
	// claim allocated from one, is a GPU.
	GPUDRADrivers []string `toml:"gpu_dra_drivers" comment:"Kubernetes DRA drivers whose devices are GPUs, beyond gpu.nvidia.com, gpu.amd.com, gpu.intel.com and gaudi.intel.com: a DeviceClass whose selectors name one (device.driver == \"...\") and a claim allocated from one are GPUs. Exact names."`
	// UnresolvedClaims is "gpu" or "ignore".
	UnresolvedClaims string `toml:"unresolved_claims" comment:"A pod's DRA resource claim whose ResourceClaim or ResourceClaimTemplate cannot be read when the pod is decided (not created yet: kubectl apply of a directory creates in any order; or not readable): \"gpu\" counts it as a GPU, so that the pod is sized; \"ignore\" leaves it out. Either way the webhook and gpurun plan --pod warn, naming the claim."`
}

// OptOutAnnotation, set to "true" on a pod or container, makes every front
// door leave its /dev/shm alone.
const OptOutAnnotation = "gpurun.io/opt-out"

// DefaultFile returns the configuration gpurun uses when no file exists.
func DefaultFile() File {
	return File{
		Match:              string(MatchGPU),
		Size:               "50%",
		Min:                "1g",
		Max:                "",
		PerGPU:             "",
		Mode:               string(ModeSize),
		MemoryReserve:      "25%",
		Sweep:              string(SweepRestart),
		AllowedAnnotations: []string{"gpurun.io/shm-size"},
		Runtime:            "runc",
		LogFile:            "/var/log/gpurun.log",
		EngineRoots: []string{
			"/var/lib/docker", "/var/run/docker", "/run/docker",
			"/run/containerd", "/run/k3s/containerd", "/run/containers/storage",
			"/var/lib/containers/storage", // Podman and CRI-O bind userdata/shm from the graph root
		},
		ComposeDefault:    "8gb",
		GPUResources:      []string{},
		GPURuntimeClasses: []string{"nvidia", "nvidia-cdi", "nvidia-legacy"},
		GPUDeviceClasses:  []string{},
		GPUDRADrivers:     []string{},
		UnresolvedClaims:  string(UnresolvedGPU),
	}
}

// Policy is a validated configuration.
type Policy struct {
	Match Match
	// Percent of the memory the container may use, when Size is relative.
	Percent float64
	// Absolute is the target in bytes when Size is absolute (Percent 0).
	Absolute int64
	// Min, Max (0 = none) and PerGPU (0 = unset), in bytes.
	Min, Max, PerGPU int64
	// ReservePercent or ReserveBytes (the other 0) is memory_reserve.
	ReservePercent float64
	ReserveBytes   int64
	Mode           Mode
	Sweep          Sweep
	EnforceMin     bool
	FailClosed     bool
	// AllowedAnnotations request a size, capped by AnnotationMax (0 = Max).
	AllowedAnnotations []string
	AnnotationMax      int64
	Runtime            string
	LogFile            string
	EngineRoots        []string
	ComposeDefault     int64
	GPUResources       []string
	GPURuntimeClasses  []string
	GPUDeviceClasses   []string
	GPUDRADrivers      []string
	UnresolvedClaims   UnresolvedClaims
	// Source is the file the policy came from, or "" for the defaults.
	Source string
}

// Default returns the built-in policy.
func Default() *Policy {
	p, err := DefaultFile().Validate("")
	if err != nil {
		panic("policy: built-in defaults do not validate: " + err.Error())
	}
	return p
}

// ResolvePath returns the configuration file to read and whether the user
// named it (a named file must exist; the default path may be absent).
func ResolvePath(flag string, getenv func(string) string) (path string, explicit bool) {
	if flag != "" {
		return flag, true
	}
	if v := getenv(ConfigEnv); v != "" {
		return v, true
	}
	return DefaultConfigPath, false
}

// Load reads and validates the configuration file at path. A missing file
// gives the defaults unless explicit is set.
func Load(path string, explicit bool) (*Policy, error) {
	data, err := atomicfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes configuration text; name is used in errors. Keys left out
// keep their defaults; unknown keys and bad values are errors naming the
// file, the line and the key.
func Parse(name string, data []byte) (*Policy, error) {
	f := DefaultFile()
	if !parseFast(data, &f) {
		dec := toml.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, describeTOMLError(name, err)
		}
	}
	p, err := f.Validate(name)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func describeTOMLError(name string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		var keys []string
		for _, e := range strict.Errors {
			row, col := e.Position()
			keys = append(keys, fmt.Sprintf("%s:%d:%d: unknown key %q", name, row, col, strings.Join(e.Key(), ".")))
		}
		return fmt.Errorf("config %s", strings.Join(keys, "; "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		key := strings.Join(de.Key(), ".")
		if key != "" {
			return fmt.Errorf("config %s:%d:%d: key %q: %s", name, row, col, key, de.Error())
		}
		return fmt.Errorf("config %s:%d:%d: %s", name, row, col, de.Error())
	}
	return fmt.Errorf("config %s: %w", name, err)
}

// Validate checks every value and returns the policy; name is the file the
// values came from, used in errors.
func (f File) Validate(name string) (*Policy, error) {
	if name == "" {
		name = "(defaults)"
	}
	bad := func(key string, err error) error {
		return fmt.Errorf("config %s: key %q: %w", name, key, err)
	}
	p := &Policy{
		EnforceMin:         f.EnforceMin,
		FailClosed:         f.FailClosed,
		AllowedAnnotations: f.AllowedAnnotations,
		Runtime:            f.Runtime,
		LogFile:            f.LogFile,
		EngineRoots:        f.EngineRoots,
		GPUResources:       f.GPUResources,
		GPURuntimeClasses:  f.GPURuntimeClasses,
		GPUDeviceClasses:   f.GPUDeviceClasses,
		GPUDRADrivers:      f.GPUDRADrivers,
	}
	if name != "(defaults)" {
		p.Source = name
	}
	var err error
	if p.Match, err = oneOf(f.Match, MatchGPU, MatchAll); err != nil {
		return nil, bad("match", err)
	}
	if p.Mode, err = oneOf(f.Mode, ModeSize, ModeIPCHost, ModeMount); err != nil {
		return nil, bad("mode", err)
	}
	if p.Sweep, err = oneOf(f.Sweep, SweepRestart, SweepOff); err != nil {
		return nil, bad("sweep", err)
	}
	if p.Percent, p.Absolute, err = percentOrSize(f.Size, false); err != nil {
		return nil, bad("size", err)
	}
	if p.ReservePercent, p.ReserveBytes, err = percentOrSize(f.MemoryReserve, true); err != nil {
		return nil, bad("memory_reserve", err)
	}
	sizes := []struct {
		key string
		val string
		dst *int64
	}{
		{"min", f.Min, &p.Min},
		{"max", f.Max, &p.Max},
		{"per_gpu", f.PerGPU, &p.PerGPU},
		{"annotation_max", f.AnnotationMax, &p.AnnotationMax},
		{"compose_default", f.ComposeDefault, &p.ComposeDefault},
	}
	for _, s := range sizes {
		if strings.TrimSpace(s.val) == "" {
			continue
		}
		n, err := ParseSize(s.val)
		if err != nil {
			return nil, bad(s.key, err)
		}
		*s.dst = n
	}
	if p.Max > 0 && p.Min > p.Max {
		return nil, bad("min", fmt.Errorf("min %s is larger than max %s", FormatSize(p.Min), FormatSize(p.Max)))
	}
	if p.Runtime == "" {
		return nil, bad("runtime", fmt.Errorf("must name a low-level runtime, such as \"runc\""))
	}
	if p.UnresolvedClaims, err = oneOf(f.UnresolvedClaims, UnresolvedGPU, UnresolvedIgnore); err != nil {
		return nil, bad("unresolved_claims", err)
	}
	if key, err := p.checkLists(); err != nil {
		return nil, bad(key, err)
	}
	return p, nil
}

// checkLists checks the entries of the policy's lists; key names the
// list of a bad one.
func (p *Policy) checkLists() (key string, err error) {
	for _, a := range p.AllowedAnnotations {
		if strings.TrimSpace(a) == "" {
			return "allowed_annotations", fmt.Errorf("empty annotation name")
		}
	}
	for _, r := range p.GPUResources {
		if err := checkResourceName(r); err != nil {
			return "gpu_resources", err
		}
	}
	for _, r := range p.GPURuntimeClasses {
		if strings.TrimSpace(r) == "" || strings.ContainsAny(r, " /") {
			return "gpu_runtime_classes", fmt.Errorf("%q is not a RuntimeClass name", r)
		}
	}
	for _, c := range p.GPUDeviceClasses {
		if !isDNSSubdomain(c) {
			return "gpu_device_classes", fmt.Errorf("%q is not a DeviceClass name (a DNS subdomain: lower-case letters, digits, '-' and '.')", c)
		}
	}
	for _, d := range p.GPUDRADrivers {
		if !isDNSSubdomain(d) {
			return "gpu_dra_drivers", fmt.Errorf("%q is not a DRA driver name (a DNS subdomain: lower-case letters, digits, '-' and '.')", d)
		}
	}
	for _, r := range p.EngineRoots {
		if !strings.HasPrefix(r, "/") {
			return "engine_roots", fmt.Errorf("%q is not an absolute path", r)
		}
	}
	return "", nil
}

// isDNSSubdomain reports whether s is a Kubernetes object name of the
// DNS subdomain kind (RFC 1123): DeviceClasses and DRA drivers are named
// so.
func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}

// oneOf returns v as one of the values of a key's type, or an error that
// names them ("got \"x\", want \"a\", \"b\" or \"c\"").
func oneOf[T ~string](v string, values ...T) (T, error) {
	words := make([]string, len(values))
	for i, w := range values {
		if string(w) == v {
			return w, nil
		}
		words[i] = strconv.Quote(string(w))
	}
	want := words[len(words)-1]
	if len(words) > 1 {
		want = strings.Join(words[:len(words)-1], ", ") + " or " + want
	}
	return "", fmt.Errorf("got %q, want %s", v, want)
}

// percentOrSize parses a value that is a percentage ("50%") or a size
// ("8g"). A size must be more than 0 and a percentage more than 0 and at
// most 100, unless zeroOK, which allows 0 and wants a percentage below 100.
func percentOrSize(v string, zeroOK bool) (float64, int64, error) {
	if pct, ok := strings.CutSuffix(strings.TrimSpace(v), "%"); ok {
		n, err := strconv.ParseFloat(pct, 64)
		switch {
		case zeroOK && (err != nil || n < 0 || n >= 100):
			return 0, 0, fmt.Errorf("invalid percentage %q: want at least 0%% and less than 100%%", v)
		case !zeroOK && (err != nil || n <= 0 || n > 100):
			return 0, 0, fmt.Errorf("invalid percentage %q: want more than 0%% and at most 100%%", v)
		}
		return n, 0, nil
	}
	n, err := ParseSize(v)
	if err != nil {
		return 0, 0, err
	}
	if n == 0 && !zeroOK {
		return 0, 0, fmt.Errorf("size must be more than 0")
	}
	return 0, n, nil
}

// checkResourceName checks an entry of gpu_resources: an extended resource
// name, domain/name, or a whole domain, domain/*.
func checkResourceName(r string) error {
	domain, name, ok := strings.Cut(r, "/")
	if !ok || domain == "" || name == "" || !strings.Contains(domain, ".") || strings.ContainsAny(r, " \t") || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not an extended resource name (domain/name, or domain/*)", r)
	}
	return nil
}
