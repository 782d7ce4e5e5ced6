package doctor

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

const (
	pod1 = "5fce15bd29897f1573d33e815893f8349ff0008b953814662f46f70cd08e0077"
	pod2 = "a46dafde315e36d7b69a341af7882d05e8ebff7d8aa3fc755f5e6c454de491cb"
)

// logLine is one record as node/enforce writes it.
func logLine(t *testing.T, at time.Time, fields map[string]any) string {
	t.Helper()
	fields["time"] = at.Format(time.RFC3339Nano)
	data, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return string(data) + "\n"
}

func TestHostRemount(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	refusedDocker := func(at time.Time) map[string]any {
		return map[string]any{"level": "ERROR", "msg": "could not size /dev/shm", "component": "gpurun-runtime", "id": "c1", "action": "remount",
			"err":  "grow /srv/docker/containers/" + pod1 + "/mounts/shm: refused: /srv/docker/containers/" + pod1 + "/mounts/shm is not under an engine root (/var/lib/docker)",
			"path": "/srv/docker/containers/" + pod1 + "/mounts/shm", "refused": true,
			"fix": "tell gpurun-runtime dockerd's data-root /srv/docker: sudo gpurun install docker --reload"}
	}
	grown := func(path string) map[string]any {
		return map[string]any{"level": "INFO", "msg": "planned /dev/shm", "component": "gpurun-runtime", "action": "remount", "path": path, "changed": true}
	}
	refusedLink := map[string]any{"level": "ERROR", "msg": "could not size /dev/shm", "component": "gpurun-hook", "id": "c2",
		"err": "grow /data/ctd/io.containerd.grpc.v1.cri/sandboxes/" + pod2 + "/shm: refused: goes through a symbolic link", "refused": true,
		"path": "/data/ctd/io.containerd.grpc.v1.cri/sandboxes/" + pod2 + "/shm", "fix": "point the engine at the real directory"}
	tests := []struct {
		name   string
		log    string // "" for no log file
		policy string
		want   Status
		detail string
		fix    []string
	}{
		{name: "no log file", want: OK, detail: "logged nothing"},
		{name: "log_file empty", policy: "log_file = \"\"\n", want: OK, detail: "log_file is empty"},
		{name: "only successes", log: logLine(t, t0, grown("/var/lib/docker/containers/"+pod1+"/mounts/shm")), want: OK, detail: "no failed remount"},
		{name: "a refusal", log: logLine(t, t0, refusedDocker(t0)), want: Problem,
			detail: "1 remount(s) of a pod's or IPC group's /dev/shm refused since 2026-11-24T10:00:00Z", fix: []string{"sudo gpurun install docker --reload"}},
		{name: "refused, then fixed: a remount under the same data-root", log: logLine(t, t0, refusedDocker(t0)) + logLine(t, t0.Add(time.Hour), grown("/srv/docker/containers/"+pod2+"/mounts/shm")),
			want: OK, detail: "a remount under /srv/docker succeeded since"},
		{name: "refused after a success elsewhere", log: logLine(t, t0, grown("/var/lib/docker/containers/"+pod2+"/mounts/shm")) + logLine(t, t0.Add(time.Hour), refusedDocker(t0.Add(time.Hour))),
			want: Problem, detail: "/srv/docker/containers/" + pod1},
		{name: "two kinds, counted and each with its fix", log: logLine(t, t0, refusedDocker(t0)) + "not json\n" + logLine(t, t0.Add(time.Minute), refusedDocker(t0.Add(time.Minute))) + logLine(t, t0.Add(2*time.Minute), refusedLink),
			want: Problem, detail: "2 remount(s)", fix: []string{"sudo gpurun install docker --reload", "real directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			if tt.policy != "" {
				f.write("/etc/gpurun/config.toml", tt.policy)
			}
			if tt.log != "" {
				f.write("/var/log/gpurun.log", tt.log)
			}
			r := hostReport(f, HostOptions{DockerErr: errors.New("connection refused")})
			c := check(t, r, "remount")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.detail) {
				t.Errorf("remount %s %q; want %s with %q", c.Status, c.Detail, tt.want, tt.detail)
			}
			for _, fix := range tt.fix {
				if !strings.Contains(c.Fix, fix) {
					t.Errorf("fix %q lacks %q", c.Fix, fix)
				}
			}
			if (tt.want == Problem) != (r.ExitCode == 1) {
				t.Errorf("exit %d\n%s", r.ExitCode, text(r))
			}
		})
	}
}

// TestHostDockerDataRoot: the data-root gpurun-runtime is told against the
// one dockerd uses.
func TestHostDockerDataRoot(t *testing.T) {
	registered := func(args string, extra string) string {
		return `{"runtimes": {"gpurun": {"path": "` + goldenRuntime + `"` + args + `}}` + extra + `}`
	}
	told := func(root string) string { return `, "runtimeArgs": ["--gpurun-docker-data-root=` + root + `"]` }
	tests := []struct {
		name    string
		file    string
		live    string // the running dockerd's DockerRootDir; "" unreachable
		stale   bool   // the running dockerd still has the runtime without runtimeArgs
		link    bool   // /var/lib/docker is a link to /mnt/real
		users   bool   // the host has testuser's passwd entry and subordinate ids
		want    Status
		detail  string
		fixWant string
	}{
		{name: "told what the running dockerd uses", file: registered(told("/srv/docker"), ""), live: "/srv/docker", want: OK, detail: "is told dockerd's data-root /srv/docker (from the running dockerd)"},
		{name: "told the default, dockerd moved", file: registered(told("/var/lib/docker"), ""), live: "/srv/docker", want: Problem, detail: "told data-root /var/lib/docker, but dockerd uses /srv/docker", fixWant: "gpurun install docker --reload"},
		{name: "told daemon.json's, no daemon", file: registered(told("/srv/docker"), `, "data-root": "/srv/docker"`), want: OK, detail: "(from /etc/docker/daemon.json)"},
		{name: "not told, the default root is covered", file: registered("", ""), want: Warn, detail: "not told", fixWant: "gpurun install docker"},
		{name: "not told, a root engine_roots miss", file: registered("", `, "data-root": "/srv/docker"`), want: Problem, detail: "do not cover it", fixWant: "gpurun install docker"},
		{name: "a data-root through a link, resolved as dockerd does", file: registered(told("/mnt/real"), ""), link: true, want: OK, detail: "/mnt/real"},
		// The user namespace of the dockerd reference (docs.docker.com/
		// engine/security/userns-remap): containers in /var/lib/docker/231072.231072.
		{name: "userns-remap, told its subdirectory, no daemon", file: registered(told("/var/lib/docker/231072.231072"), `, "userns-remap": "testuser"`), users: true, want: OK, detail: "data-root /var/lib/docker/231072.231072 (from /etc/docker/daemon.json)"},
		{name: "userns-remap, told the data-root above it, no daemon", file: registered(told("/var/lib/docker"), `, "userns-remap": "testuser"`), users: true, want: Problem, detail: "told data-root /var/lib/docker, but dockerd uses /var/lib/docker/231072.231072", fixWant: "gpurun install docker --reload"},
		{name: "userns-remap under a link", file: registered(told("/mnt/real/231072.231072"), `, "userns-remap": "testuser"`), users: true, link: true, want: OK, detail: "/mnt/real/231072.231072"},
		{name: "userns-remap doctor cannot resolve, no daemon", file: registered(told("/var/lib/docker"), `, "userns-remap": "testuser"`), want: Warn, detail: "userns-remap cannot be resolved", fixWant: "while dockerd runs"},
		{name: "userns-remap doctor cannot resolve, the daemon names it", file: registered(told("/var/lib/docker/231072.231072"), `, "userns-remap": "testuser"`), live: "/var/lib/docker/231072.231072", want: OK, detail: "(from the running dockerd)"},
		{name: "dockerd not reloaded since the runtimeArgs", file: registered(told("/srv/docker"), ""), live: "/srv/docker", stale: true, want: Problem, detail: "still passes", fixWant: "kill -HUP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			f.write(DefaultDockerConfig, tt.file)
			f.executable(goldenRuntime)
			if tt.link {
				f.write("/mnt/real/.keep", "")
				f.link("/var/lib/docker", "/mnt/real") // as the host sees it
			}
			if tt.users {
				f.write("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\ntestuser:x:1001:1001::/home/testuser:/bin/sh\n")
				f.write("/etc/subuid", "testuser:231072:65536\n")
				f.write("/etc/subgid", "testuser:231072:65536\n")
			}
			o := HostOptions{DockerErr: errors.New("connection refused")}
			if tt.live != "" {
				info := loadedInfo(t, []byte(tt.file))
				info.DockerRootDir = tt.live
				if tt.stale {
					info.Runtimes["gpurun"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: goldenRuntime}}
				}
				o = HostOptions{Docker: &fakeDocker{info: info}}
			}
			r := hostReport(f, o)
			c := check(t, r, "docker.data-root")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.detail) || !strings.Contains(c.Fix, tt.fixWant) {
				t.Errorf("docker.data-root %s %q fix %q; want %s with %q, fix with %q", c.Status, c.Detail, c.Fix, tt.want, tt.detail, tt.fixWant)
			}
		})
	}
}

// TestHostRemountFixFromEnforce: the fix doctor shows is the one the
// enforcer chose by the refusal's type and logged, here for a Docker IPC
// group whose tmpfs is under another data-root than gpurun-runtime was
// told (dockerd took up userns-remap after the install): run the install
// again, not "none to make".
func TestHostRemountFixFromEnforce(t *testing.T) {
	const ctr = pod1
	source := "/var/lib/docker/231072.231072/containers/" + ctr + "/mounts/shm"
	var log bytes.Buffer
	e := enforce.New(enforce.Config{Component: "gpurun-runtime", Policy: policy.Default(), Log: slog.New(slog.NewJSONHandler(&log, nil)),
		Facts: func() (oci.Facts, error) { return oci.Facts{HostMemory: 64 << 30}, nil },
		Grow: func(string, int64, remount.Scope) (remount.Result, error) {
			t.Error("grown although refused")
			return remount.Result{}, nil
		}})
	res, err := e.Run(enforce.Subject{ID: ctr}, nil, func() (enforce.Request, error) {
		return enforce.Request{
			Container: oci.FromSpec(&specs.Spec{
				Process: &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
				Mounts:  []specs.Mount{{Destination: "/dev/shm", Type: "bind", Source: source, Options: []string{"rbind", "rw"}}},
				Linux:   &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace}}},
			}),
			Dirs: dirs.Dirs{DockerRoot: "/var/lib/docker"},
		}, nil
	})
	if err != nil || !errors.Is(res.Err, dirs.ErrStaleRoot) {
		t.Fatalf("Run = %v, %v; want a stale data-root refusal", res.Err, err)
	}
	f := hostFake(t)
	f.write("/var/log/gpurun.log", log.String())
	c := check(t, hostReport(f, HostOptions{DockerErr: errors.New("connection refused")}), "remount")
	if c.Status != Problem || !strings.Contains(c.Detail, source) || !strings.Contains(c.Fix, "sudo gpurun install docker --reload") || strings.Contains(c.Fix, "none to make") {
		t.Errorf("remount %s %q fix %q; want the refusal of %s and the install again", c.Status, c.Detail, c.Fix, source)
	}
}
