package launch

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

type fakeDaemon struct {
	env        map[string][]string
	mem        int64
	defaultShm int64
	down       bool
	probes     int
	factsAsked int
	// probed, when set, is closed by the first DefaultShmSize; ImageEnv
	// then waits for it (see TestPrepareAsksConcurrently).
	probed chan struct{}
}

func (f *fakeDaemon) Facts(context.Context) (dockerapi.Facts, error) {
	f.factsAsked++
	if f.down {
		return dockerapi.Facts{}, errors.New("connection refused")
	}
	return dockerapi.Facts{MemTotal: f.mem}, nil
}

func (f *fakeDaemon) ImageEnv(ctx context.Context, image string) ([]string, error) {
	if f.probed != nil {
		select {
		case <-f.probed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.down {
		return nil, errors.New("connection refused")
	}
	env, ok := f.env[image]
	if !ok {
		return nil, errors.New("No such image: " + image)
	}
	return env, nil
}

func (f *fakeDaemon) DefaultShmSize(context.Context, string) (int64, error) {
	f.probes++
	if f.probed != nil && f.probes == 1 {
		close(f.probed)
	}
	if f.down {
		return 0, errors.New("connection refused")
	}
	return f.defaultShm, nil
}

func TestPrepare(t *testing.T) {
	const mem = 64 * policy.GiB
	half := strconv.FormatInt(32*policy.GiB, 10)
	enforce, err := policy.Parse("t.toml", []byte("enforce_min = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	ipcHost, err := policy.Parse("t.toml", []byte("mode = \"ipc-host\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	mount, err := policy.Parse("t.toml", []byte("mode = \"mount\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     string
		daemon   *fakeDaemon
		pol      *policy.Policy
		env      map[string]string
		want     string
		action   oci.Action
		warn     string
		note     string
		skipped  string
		noProbes bool
	}{
		{name: "env GPU", args: "--rm -e NVIDIA_VISIBLE_DEVICES=all img df", want: "--shm-size=" + half + " --rm -e NVIDIA_VISIBLE_DEVICES=all img df", action: oci.ActionSetSize},
		{name: "image env GPU", args: "-it cuda bash", want: "--shm-size=" + half + " -it cuda bash", action: oci.ActionSetSize},
		{name: "-e clears the image's GPU env", args: "-e NVIDIA_VISIBLE_DEVICES=void cuda", want: "-e NVIDIA_VISIBLE_DEVICES=void cuda", action: oci.ActionNone},
		{name: "--gpus", args: "--gpus all img", want: "--shm-size=" + half + " --gpus all img", action: oci.ActionSetSize},
		{name: "--gpus device list", args: `--gpus "device=0,1" img`, want: "--shm-size=" + half + ` --gpus "device=0,1" img`, action: oci.ActionSetSize},
		{name: "--runtime nvidia", args: "--runtime nvidia img", want: "--shm-size=" + half + " --runtime nvidia img", action: oci.ActionSetSize},
		{name: "device", args: "--device /dev/nvidia0 img", want: "--shm-size=" + half + " --device /dev/nvidia0 img", action: oci.ActionSetSize},
		{name: "CDI device", args: "--device nvidia.com/gpu=all img", want: "--shm-size=" + half + " --device nvidia.com/gpu=all img", action: oci.ActionSetSize},
		{name: "ROCm", args: "--device /dev/kfd --device /dev/dri/renderD128 img", want: "--shm-size=" + half + " --device /dev/kfd --device /dev/dri/renderD128 img", action: oci.ActionSetSize},
		{name: "non-GPU", args: "--rm img true", want: "--rm img true", action: oci.ActionNone, noProbes: true},
		{name: "memory limit", args: "-m 2g --gpus all img", want: "--shm-size=1073741824 -m 2g --gpus all img", action: oci.ActionSetSize},
		{name: "explicit size kept", args: "--shm-size 256m --gpus all img", want: "--shm-size 256m --gpus all img", action: oci.ActionNone, warn: "below the policy minimum"},
		{name: "enforce_min raises it, after the user's", pol: enforce, args: "--shm-size=256m --gpus all img cmd", want: "--shm-size=256m --gpus all --shm-size=1073741824 img cmd", action: oci.ActionSetSize, warn: "enforce_min raises it to 1GiB"},
		{name: "a size the memory limit leaves no room for", args: "--memory 4g --shm-size 4g --gpus all img", want: "--memory 4g --shm-size 4g --gpus all img", action: oci.ActionNone, warn: "--shm-size 4g is not below the 4GiB memory limit, which /dev/shm counts against"},
		{name: "ipc host", args: "--ipc=host --shm-size 1g --gpus all img", want: "--ipc=host --shm-size 1g --gpus all img", action: oci.ActionNone, warn: "no effect with --ipc=host"},
		{name: "ipc container: the donor's tmpfs, not docker run's to grow", args: "--ipc container:trainer --gpus all img", want: "--ipc container:trainer --gpus all img", action: oci.ActionRemount, skipped: "gpurun resize trainer 32g"},
		{name: "ipc none in mode mount: no /dev/shm to size", pol: mount, args: "--ipc none --gpus all img", want: "--ipc none --gpus all img", action: oci.ActionInject, skipped: "use --ipc private"},
		{name: "ipc none", args: "--ipc none --gpus all img", want: "--ipc none --gpus all img", action: oci.ActionNone},
		{name: "ipc shareable is sized by --shm-size", args: "--ipc shareable --gpus all img", want: "--shm-size=" + half + " --ipc shareable --gpus all img", action: oci.ActionSetSize},
		{name: "tmpfs at /dev/shm", args: "--tmpfs /dev/shm:size=1g --gpus all img", want: "--tmpfs /dev/shm:size=1g --gpus all img", action: oci.ActionNone},
		{name: "volume at /dev/shm", args: "-v shm:/dev/shm --gpus all img", want: "-v shm:/dev/shm --gpus all img", action: oci.ActionNone},
		{name: "mode ipc-host", pol: ipcHost, args: "--gpus all img", want: "--ipc=host --gpus all img", action: oci.ActionIPCHost},
		{name: "NCCL_SHM_DISABLE", args: "-e NCCL_SHM_DISABLE=1 --gpus all img", want: "--shm-size=" + half + " -e NCCL_SHM_DISABLE=1 --gpus all img", action: oci.ActionSetSize, warn: "NCCL_SHM_DISABLE=1 is set, but /dev/shm will be 32GiB"},
		{name: "bare -e from gpurun's env", env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "0"}, args: "-e NVIDIA_VISIBLE_DEVICES img", want: "--shm-size=" + half + " -e NVIDIA_VISIBLE_DEVICES img", action: oci.ActionSetSize},
		{name: "annotation", args: "--annotation gpurun.io/shm-size=4Gi img", want: "--shm-size=4294967296 --annotation gpurun.io/shm-size=4Gi img", action: oci.ActionSetSize},
		{name: "daemon default larger: never shrink", daemon: &fakeDaemon{mem: mem, defaultShm: 48 * policy.GiB}, args: "--gpus all img", want: "--gpus all img", action: oci.ActionNone},
		{name: "daemon down: from the arguments", daemon: &fakeDaemon{down: true}, args: "--gpus all img", want: "--shm-size=" + strconv.FormatInt(8*policy.GiB, 10) + " --gpus all img", action: oci.ActionSetSize, note: "docker daemon unreachable"},
		{name: "unknown flag: docker's to report", args: "--bogus img", want: "--bogus img", action: oci.ActionNone, note: "not changing the command", noProbes: true},
		{name: "missing value", args: "--gpus", want: "--gpus", action: oci.ActionNone, noProbes: true},
		{name: "help", args: "--help", want: "--help", action: oci.ActionNone, noProbes: true},
		{name: "command args that look like flags", args: "--gpus all img --shm-size 1m", want: "--shm-size=" + half + " --gpus all img --shm-size 1m", action: oci.ActionSetSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.daemon
			if d == nil {
				d = &fakeDaemon{mem: mem, defaultShm: policy.EngineDefaultShm, env: map[string][]string{
					"img":  {"PATH=/bin"},
					"cuda": {"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"},
				}}
			}
			res := Prepare(context.Background(), Request{
				Args:       splitArgs(tt.args),
				Policy:     tt.pol,
				Daemon:     d,
				LookupEnv:  func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok },
				ReadFile:   func(string) ([]byte, error) { return nil, errors.New("no files here") },
				LocalFacts: func() (oci.Facts, error) { return oci.Facts{HostMemory: 16 * policy.GiB, HostGPUs: 4}, nil },
			})
			if got := strings.Join(res.Args, " "); got != tt.want {
				t.Errorf("args\n got %s\nwant %s\n(%s)", got, tt.want, res.Plan.Reason)
			}
			if res.Plan.Action != tt.action {
				t.Errorf("action %s, want %s (%s)", res.Plan.Action, tt.action, res.Plan.Reason)
			}
			if tt.warn != "" && !strings.Contains(strings.Join(res.Warnings, "\n"), tt.warn) {
				t.Errorf("warnings %q lack %q", res.Warnings, tt.warn)
			}
			if tt.warn == "" && len(res.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", res.Warnings)
			}
			if !strings.Contains(res.Skipped, tt.skipped) || (tt.skipped == "") != (res.Skipped == "") {
				t.Errorf("skipped %q, want %q", res.Skipped, tt.skipped)
			}
			if tt.note != "" && !strings.Contains(strings.Join(res.Notes, "\n"), tt.note) {
				t.Errorf("notes %q lack %q", res.Notes, tt.note)
			}
			if tt.noProbes && d.probes > 0 {
				t.Errorf("probed the daemon's default for a run gpurun does not change")
			}
			if res.Plan.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}

// splitArgs splits on spaces, keeping double-quoted words whole (quotes kept,
// as a shell would pass `"device=0,1"` inside single quotes).
func splitArgs(s string) []string {
	var out []string
	var b strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			b.WriteRune(r)
		case r == ' ' && !quoted:
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteRune(r)
		}
	}
	return append(out, b.String())
}

func TestShellQuote(t *testing.T) {
	got := ShellQuote([]string{"docker", "run", "--shm-size=1g", "img", "sh", "-c", "echo 'a b' $HOME", ""})
	want := `docker run --shm-size=1g img sh -c 'echo '\''a b'\'' $HOME' ''`
	if got != want {
		t.Errorf("ShellQuote = %s\nwant %s", got, want)
	}
}

// TestPrepareLocalDaemon: a daemon on this host is not asked its memory;
// this host's counts, with no note. A remote one is asked.
func TestPrepareLocalDaemon(t *testing.T) {
	const localMem, daemonMem = 16 * policy.GiB, 64 * policy.GiB
	for _, tc := range []struct {
		name      string
		local     bool
		localMem  int64
		wantSize  int64
		wantAsked int
	}{
		{"local: /proc/meminfo", true, localMem, localMem / 2, 0},
		{"local, own memory unknown: asks", true, 0, daemonMem / 2, 1},
		{"remote: asks", false, localMem, daemonMem / 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDaemon{mem: daemonMem, defaultShm: policy.EngineDefaultShm, env: map[string][]string{"img": nil}}
			res := Prepare(context.Background(), Request{
				Args:        splitArgs("--gpus all img"),
				Daemon:      d,
				LookupEnv:   func(string) (string, bool) { return "", false },
				LocalFacts:  func() (oci.Facts, error) { return oci.Facts{HostMemory: tc.localMem}, nil },
				DaemonLocal: tc.local,
			})
			if res.Plan.Size != tc.wantSize || d.factsAsked != tc.wantAsked {
				t.Errorf("size %d, daemon asked its memory %d times; want %d, %d (%s)", res.Plan.Size, d.factsAsked, tc.wantSize, tc.wantAsked, res.Plan.Reason)
			}
			if len(res.Notes) > 0 {
				t.Errorf("notes %q", res.Notes)
			}
		})
	}
}

// TestPrepareAsksConcurrently: when the arguments alone make a GPU
// container, the daemon's default-shm-size is asked while the image is
// inspected (the fake's ImageEnv waits for DefaultShmSize: asked one after
// the other, the run times out); when only the image's env does, after.
func TestPrepareAsksConcurrently(t *testing.T) {
	for _, tc := range []struct {
		args       string
		concurrent bool
		want       oci.Action
	}{
		{"--gpus all img", true, oci.ActionSetSize},
		{"-e NVIDIA_VISIBLE_DEVICES=all img", true, oci.ActionSetSize},
		{"-e NVIDIA_VISIBLE_DEVICES=none cuda", false, oci.ActionNone},
		{"cuda", false, oci.ActionSetSize},
	} {
		t.Run(tc.args, func(t *testing.T) {
			d := &fakeDaemon{mem: 64 * policy.GiB, defaultShm: policy.EngineDefaultShm, env: map[string][]string{
				"img": nil, "cuda": {"NVIDIA_VISIBLE_DEVICES=all"}}}
			if tc.concurrent {
				d.probed = make(chan struct{})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res := Prepare(ctx, Request{Args: splitArgs(tc.args), Daemon: d, LookupEnv: func(string) (string, bool) { return "", false }})
			if res.Plan.Action != tc.want || len(res.Notes) > 0 {
				t.Errorf("action %s, notes %q; want %s and no notes (%s)", res.Plan.Action, res.Notes, tc.want, res.Plan.Reason)
			}
		})
	}
}
