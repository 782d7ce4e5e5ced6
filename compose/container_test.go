package compose

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/docker/go-units"

	"github.com/gpurun/gpurun/compose/yamledit"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// translateService loads a project of one compose.yaml whose service "s"
// has body (its keys, indented by four spaces) and translates that service,
// through the fast path and through compose-go's loader, which must agree.
func translateService(t *testing.T, body string, files map[string]string, environ ...string) (service, error) {
	t.Helper()
	tree := map[string]string{"compose.yaml": "services:\n  s:\n    image: x\n" + body}
	for k, v := range files {
		tree[k] = v
	}
	dir := writeTree(t, tree)
	var got [2]service
	var errs [2]error
	for i, composeGoOnly := range []bool{false, true} {
		opts := Options{WorkDir: dir, Environ: environ, Policy: policy.Default(), composeGoOnly: composeGoOnly}
		specs, err := discover(opts)
		if err != nil {
			t.Fatal(err)
		}
		p, err := loadProject(context.Background(), specs[0], opts, &fileCache{files: map[string]*yamledit.File{}})
		if err != nil {
			t.Fatal(err)
		}
		got[i], errs[i] = p.translate(p.services["s"])
	}
	if (errs[0] == nil) != (errs[1] == nil) || !reflect.DeepEqual(got[0].c, got[1].c) {
		t.Errorf("fast path and compose-go differ:\n%+v (%v)\n%+v (%v)", got[0].c, errs[0], got[1].c, errs[1])
	}
	return got[0], errs[0]
}

// TestTranslate: every key migrate reads reaches the one form through the
// Opts the other front doors use.
func TestTranslate(t *testing.T) {
	type want struct {
		requests   []oci.DeviceRequest // nil: none
		runtime    oci.Named
		env        string   // an entry of the process env
		devices    []string // linux.devices paths
		memory     int64
		shm        oci.ShmKind
		shmSize    int64 // of the mount, for a tmpfs
		choice     string
		userShm    string
		joined     string // the joined IPC namespace, in the file's words
		privileged string
		err        string
	}
	tests := []struct {
		name    string
		body    string
		files   map[string]string
		environ []string
		want    want
	}{
		{name: "nothing: dockerd's private 64 MiB tmpfs", body: "",
			want: want{shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy devices, driver nvidia", body: "    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 2, capabilities: [gpu]}]}}}\n",
			want: want{requests: []oci.DeviceRequest{{Words: "deploy.resources.reservations.devices: driver nvidia, capabilities [gpu]", Driver: "nvidia", Capabilities: []string{"gpu"}, Count: 2}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy devices, device ids", body: "    deploy: {resources: {reservations: {devices: [{capabilities: [gpu], device_ids: ['0', '3']}]}}}\n",
			want: want{requests: []oci.DeviceRequest{{Words: "deploy.resources.reservations.devices: capabilities [gpu]", Capabilities: []string{"gpu"}, DeviceIDs: []string{"0", "3"}}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy devices, count all", body: "    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: all, capabilities: [compute, utility]}]}}}\n",
			want: want{requests: []oci.DeviceRequest{{Words: "deploy.resources.reservations.devices: driver nvidia, capabilities [compute utility]", Driver: "nvidia", Capabilities: []string{"compute", "utility"}, Count: -1}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy devices, CDI names", body: "    deploy: {resources: {reservations: {devices: [{driver: cdi, capabilities: [compute], device_ids: [nvidia.com/gpu=0, nvidia.com/gpu=1]}]}}}\n",
			want: want{requests: []oci.DeviceRequest{{Words: "deploy.resources.reservations.devices: driver cdi, capabilities [compute]", Driver: "cdi", Capabilities: []string{"compute"}, DeviceIDs: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy devices, a CDI name that is no GPU: handed over all the same", body: "    deploy: {resources: {reservations: {devices: [{driver: cdi, capabilities: [net], device_ids: [vendor.com/nic=0]}]}}}\n",
			want: want{requests: []oci.DeviceRequest{{Words: "deploy.resources.reservations.devices: driver cdi, capabilities [net]", Driver: "cdi", Capabilities: []string{"net"}, DeviceIDs: []string{"vendor.com/nic=0"}}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy devices, no GPU capability: handed over all the same", body: "    deploy: {resources: {reservations: {devices: [{capabilities: [tpu]}]}}}\n",
			want: want{requests: []oci.DeviceRequest{{Words: "deploy.resources.reservations.devices: capabilities [tpu]", Capabilities: []string{"tpu"}}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "gpus: all", body: "    gpus: all\n",
			want: want{requests: []oci.DeviceRequest{{Words: "gpus: all", Capabilities: []string{"gpu"}, Count: -1}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "gpus: a list", body: "    gpus: [{driver: nvidia, count: 1}, {device_ids: ['2', '3']}]\n",
			want: want{requests: []oci.DeviceRequest{{Words: "gpus: driver nvidia, count 1", Driver: "nvidia", Capabilities: []string{"gpu"}, Count: 1}, {Words: "gpus: device_ids [2 3]", Capabilities: []string{"gpu"}, DeviceIDs: []string{"2", "3"}}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "runtime: nvidia, in the file's words", body: "    runtime: nvidia\n",
			want: want{runtime: oci.Named{Words: "runtime: nvidia", Name: "nvidia"}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "runtime: runc", body: "    runtime: runc\n",
			want: want{runtime: oci.Named{Words: "runtime: runc", Name: "runc"}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "environment", body: "    environment: {NVIDIA_VISIBLE_DEVICES: all}\n",
			want: want{env: "NVIDIA_VISIBLE_DEVICES=all", shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "environment from the shell", body: "    environment: [NVIDIA_VISIBLE_DEVICES]\n", environ: []string{"NVIDIA_VISIBLE_DEVICES=1"},
			want: want{env: "NVIDIA_VISIBLE_DEVICES=1", shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "env_file", body: "    env_file: gpu.env\n", files: map[string]string{"gpu.env": "HABANA_VISIBLE_DEVICES=0\n"},
			want: want{env: "HABANA_VISIBLE_DEVICES=0", shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "devices by their path in the container", body: "    devices: [/dev/nvidiactl, /tmp/fake:/dev/nvidia0:rwm, {source: /dev/dri/renderD129, target: /dev/dri/renderD128}]\n",
			want: want{devices: []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/dri/renderD128"}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "a device's host path does not count", body: "    devices: [/dev/nvidia0:/dev/card]\n",
			want: want{devices: []string{"/dev/card"}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "a CDI device", body: "    devices: [nvidia.com/gpu=all]\n",
			want: want{requests: []oci.DeviceRequest{{Words: "device nvidia.com/gpu=all", Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=all"}}}, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "mem_limit", body: "    mem_limit: 3g\n",
			want: want{memory: 3 << 30, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "deploy limits win over mem_limit", body: "    mem_limit: 3g\n    deploy: {resources: {limits: {memory: 16g}}}\n",
			want: want{memory: 16 << 30, shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "shm_size: the user's choice", body: "    shm_size: 2g\n",
			want: want{shm: oci.ShmPrivate, shmSize: 2 << 30, choice: "shm_size: 2g"}},
		{name: "shm_size: 64m is a choice too", body: "    shm_size: 64m\n",
			want: want{shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm, choice: "shm_size: 64m"}},
		{name: "ipc: shareable has its own tmpfs", body: "    ipc: shareable\n    shm_size: 16gb\n",
			want: want{shm: oci.ShmPrivate, shmSize: 16 << 30, choice: "shm_size: 16gb"}},
		{name: "ipc: host keeps the ignored size's words, for the warning", body: "    ipc: host\n    shm_size: 8gb\n",
			want: want{shm: oci.ShmHost, choice: "shm_size: 8gb"}},
		{name: "ipc: none", body: "    ipc: none\n",
			want: want{shm: oci.ShmNone}},
		{name: "ipc: service:x joins x's namespace, whose /dev/shm the file cannot locate", body: "    ipc: service:donor\n",
			want: want{shm: oci.ShmNone, joined: "ipc: service:donor"}},
		{name: "ipc: container:x", body: "    ipc: container:abc\n",
			want: want{shm: oci.ShmNone, joined: "ipc: container:abc"}},
		{name: "ipc: an unknown mode", body: "    ipc: lots\n",
			want: want{err: "not an IPC mode docker knows"}},
		{name: "a volume at /dev/shm", body: "    volumes: [dshm:/dev/shm]\n",
			want: want{shm: oci.ShmUser, userShm: "volume dshm"}},
		{name: "a tmpfs volume at /dev/shm keeps its size", body: "    volumes: [{type: tmpfs, target: /dev/shm, tmpfs: {size: 536870912}}]\n",
			want: want{shm: oci.ShmUser, shmSize: 512 << 20, userShm: "tmpfs (anonymous)"}},
		{name: "tmpfs: /dev/shm", body: "    tmpfs: /dev/shm:size=4g\n",
			want: want{shm: oci.ShmUser, shmSize: 4 << 30, userShm: "tmpfs /dev/shm:size=4g"}},
		{name: "privileged", body: "    privileged: true\n",
			want: want{privileged: "privileged: true", shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
		{name: "privileged: false", body: "    privileged: false\n",
			want: want{shm: oci.ShmPrivate, shmSize: policy.EngineDefaultShm}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := translateService(t, tt.body, tt.files, tt.environ...)
			w := tt.want
			if w.err != "" {
				if err == nil || !strings.Contains(err.Error(), w.err) {
					t.Fatalf("error %v, want one about %q", err, w.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := s.c
			if !reflect.DeepEqual(c.DeviceRequests, w.requests) || c.Runtime != w.runtime {
				t.Errorf("device requests %+v, runtime %+v; want %+v, %+v", c.DeviceRequests, c.Runtime, w.requests, w.runtime)
			}
			if w.env != "" && !slices.Contains(c.Spec.Process.Env, w.env) {
				t.Errorf("env %q, want %s in it", c.Spec.Process.Env, w.env)
			}
			var devs []string
			for _, d := range c.Spec.Linux.Devices {
				devs = append(devs, d.Path)
			}
			if !slices.Equal(devs, w.devices) {
				t.Errorf("devices %q, want %q", devs, w.devices)
			}
			if got := oci.MemoryLimit(c.Spec); got != w.memory {
				t.Errorf("memory limit %d, want %d", got, w.memory)
			}
			sh := oci.ClassifyShm(c.Spec, 0)
			if sh.Kind != w.shm || sh.Size != w.shmSize {
				t.Errorf("/dev/shm %s of %d, want %s of %d", sh.Kind, sh.Size, w.shm, w.shmSize)
			}
			if c.ShmChoice != w.choice || c.UserShm != w.userShm || c.Privileged != w.privileged {
				t.Errorf("choice %q, user mount %q, privileged %q; want %q, %q, %q", c.ShmChoice, c.UserShm, c.Privileged, w.choice, w.userShm, w.privileged)
			}
			if c.JoinedIPC != w.joined {
				t.Errorf("joined IPC %q, want %q", c.JoinedIPC, w.joined)
			}
		})
	}
}

// TestDecideMapping: every way a plan maps onto migrate's actions, with
// sizes derived by hand from the default policy (min 1GiB, 50% of the
// memory limit, compose_default 8GiB for a file without one).
func TestDecideMapping(t *testing.T) {
	const GiB = policy.GiB
	tests := []struct {
		name    string
		body    string
		config  string
		opts    Options
		action  ServiceAction
		size    int64
		reason  string // a part of the reason
		warning string // a part of a warning, "" for none
	}{
		{name: "not a GPU service", body: "", action: ActionNone, reason: "not a GPU service"},
		{name: "GPU, no limit: the compose default", body: "    gpus: all\n", action: ActionAdd, size: 8 * GiB, reason: "compose default 8GiB"},
		{name: "GPU, limit: half of it, named by its key", body: "    gpus: all\n    mem_limit: 16g\n", action: ActionAdd, size: 8 * GiB, reason: "50% of the 16GiB memory limit = 8GiB (mem_limit)"},
		{name: "a limit that is no size", body: "    gpus: all\n    mem_limit: lots\n", action: ActionAdd, size: 8 * GiB, reason: `mem_limit "lots" is not a size`},
		{name: "--size is the size", body: "    gpus: all\n    mem_limit: 2g\n", opts: Options{Size: 16 * GiB}, action: ActionAdd, size: 16 * GiB, reason: "--size 16GiB"},
		{name: "per_gpu with a count", body: "    gpus: [{count: 2}]\n", config: `per_gpu = "4g"`, action: ActionAdd, size: 8 * GiB, reason: "4GiB per GPU x 2 GPUs"},
		{name: "compose default capped at max", body: "    gpus: all\n", config: "compose_default = \"32g\"\nmax = \"16g\"\n", action: ActionAdd, size: 16 * GiB, reason: "capped at max 16GiB"},
		{name: "compose default raised to min", body: "    gpus: all\n", config: "compose_default = \"512m\"\nmin = \"2g\"\n", action: ActionAdd, size: 2 * GiB, reason: "raised to min 2GiB"},
		{name: "an absolute policy size", body: "    gpus: all\n", config: `size = "16g"`, action: ActionAdd, size: 16 * GiB, reason: "policy size 16GiB"},
		{name: "mode ipc-host is not migrate's", body: "    gpus: all\n", config: `mode = "ipc-host"`, action: ActionAdd, size: 8 * GiB},
		{name: "match all", body: "", config: `match = "all"`, action: ActionAdd, size: 8 * GiB, reason: `policy match "all"`},
		{name: "shm_size at least min", body: "    gpus: all\n    shm_size: 2g\n", action: ActionKeep, reason: "chosen explicitly (shm_size: 2g)"},
		{name: "shm_size below min", body: "    gpus: all\n    shm_size: 256m\n", action: ActionKeep, warning: "--enforce-min raises it"},
		{name: "shm_size leaving too little of the memory limit", body: "    gpus: all\n    mem_limit: 16g\n    shm_size: 14g\n", action: ActionKeep, warning: "shm_size: 14g leaves the processes less than 25% of the 16GiB memory limit"},
		{name: "shm_size below min, enforce_min", body: "    gpus: all\n    shm_size: 256m\n", opts: Options{EnforceMin: true}, action: ActionRaise, size: GiB, reason: "raised to it", warning: "enforce_min raises it to 1GiB"},
		{name: "shm_size below min, enforce_min from the policy", body: "    gpus: all\n    shm_size: 256m\n", config: "enforce_min = true", action: ActionRaise, size: GiB, warning: "enforce_min raises it to 1GiB"},
		{name: "shm_size not a size", body: "    gpus: all\n    shm_size: ${SHM}\n", opts: Options{EnforceMin: true}, action: ActionKeep, reason: "not checked"},
		{name: "ipc: host", body: "    gpus: all\n    ipc: host\n", action: ActionKeep, reason: "host's /dev/shm"},
		{name: "ipc: host with shm_size", body: "    gpus: all\n    ipc: host\n    shm_size: 1g\n", action: ActionKeep, warning: "Podman refuses"},
		{name: "ipc: none", body: "    gpus: all\n    ipc: none\n", action: ActionKeep, reason: "mounts nothing at /dev/shm"},
		{name: "ipc: none, mode mount", body: "    gpus: all\n    ipc: none\n", config: `mode = "mount"`, action: ActionKeep, reason: "mounts nothing at /dev/shm"},
		{name: "ipc: service:x", body: "    gpus: all\n    ipc: service:donor\n", action: ActionKeep, reason: "of service donor"},
		{name: "ipc: shareable without a size", body: "    gpus: all\n    ipc: shareable\n", action: ActionAdd, size: 8 * GiB},
		{name: "a volume at /dev/shm", body: "    gpus: all\n    volumes: [dshm:/dev/shm]\n", action: ActionKeep, reason: "volume dshm"},
		{name: "a small tmpfs, enforce_min: by hand", body: "    gpus: all\n    tmpfs: /dev/shm:size=256m\n", opts: Options{EnforceMin: true}, action: ActionSkip, warning: "by hand"},
		{name: "NCCL_SHM_DISABLE", body: "    gpus: all\n    environment: {NCCL_SHM_DISABLE: '1'}\n", action: ActionAdd, size: 8 * GiB, warning: "NCCL_SHM_DISABLE=1"},
		{name: "privileged is no GPU in a portable file", body: "    privileged: true\n", action: ActionNone},
		{name: "an IPC mode docker refuses", body: "    gpus: all\n    ipc: lots\n", action: ActionNone, warning: "docker refuses this service"},
		{name: "/dev/nvidiactl alone is no GPU", body: "    devices: [/dev/nvidiactl]\n", action: ActionNone},
		{name: "/dev/dri/card0 alone is no GPU", body: "    devices: [/dev/dri/card0]\n", action: ActionNone},
		{name: "/dev/dri is", body: "    devices: [/dev/dri:/dev/dri]\n", action: ActionAdd, size: 8 * GiB, reason: "device /dev/dri"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, err := policy.Parse("test.toml", []byte(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			dir := writeTree(t, map[string]string{"compose.yaml": "services:\n  s:\n    image: x\n" + tt.body})
			o := tt.opts
			o.WorkDir, o.Policy = dir, pol
			res, err := Migrate(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			s := byService(res)["s"]
			if s.Action != tt.action || s.SizeBytes != tt.size || !strings.Contains(s.Reason, tt.reason) {
				t.Errorf("%s %d (%s), want %s %d (%s)", s.Action, s.SizeBytes, s.Reason, tt.action, tt.size, tt.reason)
			}
			if tt.warning == "" && len(s.Warnings) > 0 || !slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, tt.warning) }) && tt.warning != "" {
				t.Errorf("warnings %q, want one about %q", s.Warnings, tt.warning)
			}
		})
	}
}

// TestComposeReadsSizes checks that compose, which reads shm_size with
// go-units as docker does, reads back what migrate writes.
func TestComposeReadsSizes(t *testing.T) {
	for _, n := range []int64{8 << 30, 1536 << 20, 64 << 10, 1000, 1 << 30, 3<<30 + 1<<20} {
		s := policy.FormatCompose(n)
		back, err := units.RAMInBytes(s)
		if err != nil || back != n {
			t.Errorf("policy.FormatCompose(%d) = %q, which compose reads as %d (%v)", n, s, back, err)
		}
	}
}
