package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		toml    string
		check   func(t *testing.T, p *Policy)
		wantErr string
	}{
		{
			name: "empty file keeps the defaults",
			toml: "",
			check: func(t *testing.T, p *Policy) {
				if p.Match != MatchGPU || p.Percent != 50 || p.Min != GiB || p.Max != 0 || p.Mode != ModeSize || p.Runtime != "runc" {
					t.Errorf("defaults = %+v", p)
				}
				if p.ComposeDefault != 8*GiB {
					t.Errorf("compose default = %d", p.ComposeDefault)
				}
			},
		},
		{
			name: "every key",
			toml: `
match = "all"
size = "16g"
min = "2Gi"
max = "64g"
per_gpu = "8g"
mode = "mount"
enforce_min = true
fail_closed = true
allowed_annotations = ["gpurun.io/shm-size", "shm-size.crio.io"]
annotation_max = "32g"
runtime = "/usr/bin/nvidia-container-runtime"
log_file = "/tmp/gpurun.log"
engine_roots = ["/var/lib/docker"]
compose_default = "4gb"
`,
			check: func(t *testing.T, p *Policy) {
				want := Policy{Match: MatchAll, Absolute: 16 * GiB, Min: 2 * GiB, Max: 64 * GiB, PerGPU: 8 * GiB,
					Mode: ModeMount, EnforceMin: true, FailClosed: true, AnnotationMax: 32 * GiB,
					Runtime: "/usr/bin/nvidia-container-runtime", LogFile: "/tmp/gpurun.log", ComposeDefault: 4 * GiB}
				if p.Match != want.Match || p.Absolute != want.Absolute || p.Min != want.Min || p.Max != want.Max ||
					p.PerGPU != want.PerGPU || p.Mode != want.Mode || !p.EnforceMin || !p.FailClosed ||
					p.AnnotationMax != want.AnnotationMax || p.Runtime != want.Runtime || p.LogFile != want.LogFile ||
					p.ComposeDefault != want.ComposeDefault || len(p.AllowedAnnotations) != 2 || len(p.EngineRoots) != 1 {
					t.Errorf("got %+v", p)
				}
				if p.Source != "test.toml" {
					t.Errorf("source = %q", p.Source)
				}
			},
		},
		{name: "sweep and reserve defaults", toml: "", check: func(t *testing.T, p *Policy) {
			if p.Sweep != SweepRestart || p.ReservePercent != 25 || p.ReserveBytes != 0 {
				t.Errorf("sweep %q, reserve %v%% %d bytes", p.Sweep, p.ReservePercent, p.ReserveBytes)
			}
		}},
		{name: "sweep off, reserve a size", toml: "sweep = \"off\"\nmemory_reserve = \"4g\"\n", check: func(t *testing.T, p *Policy) {
			if p.Sweep != SweepOff || p.ReserveBytes != 4*GiB || p.ReservePercent != 0 {
				t.Errorf("sweep %q, reserve %v%% %d bytes", p.Sweep, p.ReservePercent, p.ReserveBytes)
			}
		}},
		{name: "no reserve", toml: `memory_reserve = "0%"`, check: func(t *testing.T, p *Policy) {
			if p.ReservePercent != 0 || p.ReserveBytes != 0 {
				t.Errorf("reserve %v%% %d bytes", p.ReservePercent, p.ReserveBytes)
			}
		}},
		{name: "percent with a fraction", toml: `size = "37.5%"`, check: func(t *testing.T, p *Policy) {
			if p.Percent != 37.5 {
				t.Errorf("percent = %v", p.Percent)
			}
		}},
		{name: "unknown key", toml: "match = \"gpu\"\nshm = \"2g\"\n", wantErr: `config test.toml:2:1: unknown key "shm"`},
		{name: "unknown nested key", toml: "[extra]\nx = 1\n", wantErr: `unknown key "extra`},
		{name: "bad match", toml: `match = "cpu"`, wantErr: `config test.toml: key "match": got "cpu"`},
		{name: "bad mode", toml: `mode = "bigger"`, wantErr: `key "mode"`},
		{name: "bad size", toml: `size = "lots"`, wantErr: `key "size": invalid size "lots"`},
		{name: "percent over 100", toml: `size = "150%"`, wantErr: `key "size": invalid percentage`},
		{name: "zero size", toml: `size = "0"`, wantErr: `key "size": size must be more than 0`},
		{name: "bad min", toml: `min = "1 GB please"`, wantErr: `key "min"`},
		{name: "min above max", toml: "min = \"8g\"\nmax = \"4g\"\n", wantErr: `key "min": min 8GiB is larger than max 4GiB`},
		{name: "wrong type", toml: `enforce_min = "yes"`, wantErr: `config test.toml:1:`},
		{name: "relative engine root", toml: `engine_roots = ["var/lib/docker"]`, wantErr: `key "engine_roots"`},
		{name: "empty runtime", toml: `runtime = ""`, wantErr: `key "runtime"`},
		{name: "bad sweep", toml: `sweep = "always"`, wantErr: `config test.toml: key "sweep": got "always", want "restart" or "off"`},
		{name: "reserve of everything", toml: `memory_reserve = "100%"`, wantErr: `key "memory_reserve": invalid percentage "100%": want at least 0% and less than 100%`},
		{name: "bad reserve", toml: `memory_reserve = "some"`, wantErr: `key "memory_reserve": invalid size "some"`},
		{name: "not toml", toml: "match = ", wantErr: "config test.toml:1:"},
		{name: "DRA defaults", toml: "", check: func(t *testing.T, p *Policy) {
			if p.UnresolvedClaims != UnresolvedGPU || len(p.GPUDeviceClasses) != 0 || len(p.GPUDRADrivers) != 0 {
				t.Errorf("unresolved_claims %q, gpu_device_classes %q, gpu_dra_drivers %q", p.UnresolvedClaims, p.GPUDeviceClasses, p.GPUDRADrivers)
			}
		}},
		{name: "DRA keys", toml: "gpu_device_classes = [\"a100-80gb.example.com\", \"tpu\"]\ngpu_dra_drivers = [\"accel.example.com\"]\nunresolved_claims = \"ignore\"\n", check: func(t *testing.T, p *Policy) {
			if p.UnresolvedClaims != UnresolvedIgnore || len(p.GPUDeviceClasses) != 2 || p.GPUDeviceClasses[1] != "tpu" || len(p.GPUDRADrivers) != 1 || p.GPUDRADrivers[0] != "accel.example.com" {
				t.Errorf("unresolved_claims %q, gpu_device_classes %q, gpu_dra_drivers %q", p.UnresolvedClaims, p.GPUDeviceClasses, p.GPUDRADrivers)
			}
		}},
		{name: "bad unresolved_claims", toml: `unresolved_claims = "refuse"`, wantErr: `config test.toml: key "unresolved_claims": got "refuse", want "gpu" or "ignore"`},
		{name: "a device class with upper case", toml: `gpu_device_classes = ["GPU.example.com"]`, wantErr: `key "gpu_device_classes": "GPU.example.com" is not a DeviceClass name`},
		{name: "an empty device class", toml: `gpu_device_classes = [""]`, wantErr: `key "gpu_device_classes"`},
		{name: "a driver with a slash", toml: `gpu_dra_drivers = ["example.com/gpu"]`, wantErr: `key "gpu_dra_drivers": "example.com/gpu" is not a DRA driver name`},
		{name: "a driver label ending in a dash", toml: `gpu_dra_drivers = ["gpu-.example.com"]`, wantErr: `key "gpu_dra_drivers"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("test.toml", []byte(tt.toml))
			checkErr(t, err, tt.wantErr)
			if tt.check != nil && err == nil {
				tt.check(t, p)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.toml")
	if p, err := Load(missing, false); err != nil || p.Source != "" || p.Min != GiB {
		t.Errorf("Load(missing default) = %+v, %v; want the defaults", p, err)
	}
	if _, err := Load(missing, true); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing explicit) error = %v; want one naming %s", err, missing)
	}
	file := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(file, []byte("bogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(file, false); err == nil || !strings.Contains(err.Error(), file+":1:1") {
		t.Errorf("Load(bad) error = %v; want one naming %s:1:1", err, file)
	}
}

func TestResolvePath(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == ConfigEnv {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		flag, env, want string
		explicit        bool
	}{
		{"", "", DefaultConfigPath, false},
		{"", "/e.toml", "/e.toml", true},
		{"/f.toml", "/e.toml", "/f.toml", true},
	}
	for _, tt := range tests {
		got, explicit := ResolvePath(tt.flag, env(tt.env))
		if got != tt.want || explicit != tt.explicit {
			t.Errorf("ResolvePath(%q, env %q) = %q, %v; want %q, %v", tt.flag, tt.env, got, explicit, tt.want, tt.explicit)
		}
	}
}

func TestTarget(t *testing.T) {
	def := Default()
	mustParse := func(s string) *Policy {
		p, err := Parse("t.toml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		p       *Policy
		r       Request
		want    int64
		wantWhy string
	}{
		{"half the host", def, Request{HostMemory: 64 * GiB}, 32 * GiB, "50% of the 64GiB host's memory = 32GiB"},
		{"half the limit", def, Request{MemoryLimit: 8 * GiB, HostMemory: 64 * GiB}, 4 * GiB, "50% of the 8GiB memory limit"},
		{"limit 2g gives 1g", def, Request{MemoryLimit: 2 * GiB, HostMemory: 64 * GiB}, GiB, "= 1GiB"},
		{"small limit raised to min", def, Request{MemoryLimit: 2*GiB - 512*MiB, HostMemory: 64 * GiB}, GiB, "raised to min 1GiB"},
		{"min gives way to the reserve", def, Request{MemoryLimit: 512 * MiB, HostMemory: 64 * GiB}, 384 * MiB, "raised to min 1GiB, capped at 384MiB to leave the processes 25% of the 512MiB memory limit"},
		{"reserve as a size", mustParse(`size = "100%"` + "\nmemory_reserve = \"2g\""), Request{MemoryLimit: 16 * GiB}, 14 * GiB, "capped at 14GiB to leave the processes 2GiB of the 16GiB memory limit"},
		{"reserve never below the engines' 64 MiB", mustParse(`memory_reserve = "2g"`), Request{MemoryLimit: GiB}, 64 * MiB, "capped at 64MiB"},
		{"reserve of the host's memory", mustParse(`size = "100%"`), Request{HostMemory: 64 * GiB}, 48 * GiB, "of the 64GiB host's memory (memory_reserve)"},
		{"memory unknown", def, Request{}, GiB, "memory unknown"},
		{"max caps", mustParse(`max = "16g"`), Request{HostMemory: 1024 * GiB}, 16 * GiB, "capped at max 16GiB"},
		{"absolute", mustParse(`size = "8g"`), Request{HostMemory: 64 * GiB}, 8 * GiB, "policy size 8GiB"},
		{"absolute capped by limit", mustParse(`size = "8g"`), Request{MemoryLimit: 4 * GiB}, 3 * GiB, "capped at 3GiB to leave the processes 25% of the 4GiB memory limit"},
		{"per gpu", mustParse(`per_gpu = "4g"`), Request{HostMemory: 256 * GiB, GPUs: 8}, 32 * GiB, "4GiB per GPU x 8 GPUs"},
		{"per gpu, count unknown", mustParse(`per_gpu = "4g"`), Request{HostMemory: 16 * GiB}, 8 * GiB, "50% of"},
		{"per gpu capped by limit", mustParse(`per_gpu = "4g"`), Request{MemoryLimit: 8 * GiB, GPUs: 8}, 6 * GiB, "capped at 6GiB to leave the processes 25% of the 8GiB memory limit"},
		{"odd host memory rounds down to MiB", def, Request{HostMemory: 3*GiB + 3*MiB}, 3*GiB/2 + MiB, "50% of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := tt.p.Target(tt.r)
			if got != tt.want {
				t.Errorf("Target(%+v) = %d (%s), want %d", tt.r, got, why, tt.want)
			}
			if !strings.Contains(why, tt.wantWhy) {
				t.Errorf("reason %q does not contain %q", why, tt.wantWhy)
			}
			if got%MiB != 0 {
				t.Errorf("size %d is not whole MiB", got)
			}
		})
	}
}

func TestCapRequest(t *testing.T) {
	p, err := Parse("t.toml", []byte("max = \"16g\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, note := p.CapRequest(32 * GiB); got != 16*GiB || !strings.Contains(note, "capped at 16GiB") {
		t.Errorf("CapRequest(32g) = %d %q", got, note)
	}
	p.AnnotationMax = 4 * GiB
	if got, _ := p.CapRequest(8 * GiB); got != 4*GiB {
		t.Errorf("CapRequest with annotation_max = %d", got)
	}
	if got, note := p.CapRequest(2 * GiB); got != 2*GiB || note != "" {
		t.Errorf("CapRequest(2g) = %d %q", got, note)
	}
}
