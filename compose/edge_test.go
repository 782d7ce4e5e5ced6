package compose

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

func mustPolicy(t *testing.T, toml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// edgeRun migrates the project in testdata/edge/<dir>.
func edgeRun(t *testing.T, dir string, o Options) (*Result, error) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("testdata/edge", dir))
	if err != nil {
		t.Fatal(err)
	}
	o.WorkDir = abs
	if o.Policy == nil {
		o.Policy = policy.Default()
	}
	return Migrate(context.Background(), o)
}

func byService(res *Result) map[string]ServiceReport {
	m := map[string]ServiceReport{}
	for _, s := range res.Services {
		m[s.Service] = s
	}
	return m
}

func newContent(t *testing.T, res *Result, path string) string {
	t.Helper()
	for _, f := range res.Files {
		if f.Path == path {
			return string(f.New)
		}
	}
	t.Fatalf("no file %s in the result (files: %v)", path, filePaths(res))
	return ""
}

func filePaths(res *Result) []string {
	var out []string
	for _, f := range res.Files {
		out = append(out, f.Path)
	}
	return out
}

func TestEdgeCases(t *testing.T) {
	def := policy.Default()
	tests := []struct {
		name    string
		dir     string
		opts    Options
		want    map[string]ServiceAction
		size    map[string]int64    // services -> size (from the policy)
		file    map[string]string   // services -> file the line goes to
		warn    map[string]string   // services -> a word of a warning
		shared  map[string][]string // services -> SharedWith (add) or InheritsFrom (inherit)
		out     map[string]string   // file -> whole migrated content
		changed []string            // the files that change, when not all in out
		wantErr string
	}{
		{
			name: "CRLF file, tabs in a comment",
			dir:  "crlf",
			want: map[string]ServiceAction{"trainer": ActionAdd, "web": ActionNone},
			out: map[string]string{"compose.yaml": "# CRLF file\r\nservices:\r\n  trainer:\r\n    shm_size: 8gb\r\n" +
				"    # the\ttrainer\t(tab)\r\n    image: pytorch/pytorch\r\n    gpus: all\r\n  web:\r\n    image: nginx\r\n"},
		},
		{
			name: `policy match = "all": every service`,
			dir:  "crlf",
			opts: Options{Policy: mustPolicy(t, `match = "all"`)},
			want: map[string]ServiceAction{"trainer": ActionAdd, "web": ActionAdd},
		},
		{
			name: "tabs in comments, a comment on the key line, a blank line",
			dir:  "tabs-in-comments",
			want: map[string]ServiceAction{"trainer": ActionAdd},
			out: map[string]string{"compose.yaml": "services:\n  trainer:\t# the trainer\n    shm_size: 8gb\n    #\ttabs\there\n\n" +
				"    image: pytorch/pytorch  #\tpinned later\n    runtime: nvidia\n"},
		},
		{
			name: "flow-style services",
			dir:  "flow-style",
			want: map[string]ServiceAction{"trainer": ActionAdd, "infer": ActionAdd, "web": ActionNone, "empty-gpu": ActionNone},
			out: map[string]string{"compose.yaml": "services: {trainer: {shm_size: 8gb, image: pytorch/pytorch, gpus: all}, " +
				"infer: { shm_size: 8gb, image: vllm/vllm-openai, runtime: nvidia }, web: {image: nginx}, empty-gpu: {}}\n"},
		},
		{
			name: "quoted keys",
			dir:  "quoted-keys",
			want: map[string]ServiceAction{"trainer": ActionAdd},
			out: map[string]string{"compose.yaml": "\"services\":\n  'trainer':\n    shm_size: 8gb\n    \"image\": pytorch/pytorch\n    'deploy':\n" +
				"      resources:\n        reservations:\n          devices:\n            - {driver: nvidia, count: 2, capabilities: [gpu]}\n"},
		},
		{
			name: "GPU from the override file: the line goes where the image is",
			dir:  "override",
			want: map[string]ServiceAction{"trainer": ActionAdd, "web": ActionNone, "notebook": ActionAdd},
			file: map[string]string{"trainer": "compose.yaml", "notebook": "compose.override.yaml"},
			out: map[string]string{
				"compose.yaml": "services:\n  trainer:\n    shm_size: 8gb\n    image: pytorch/pytorch\n  web:\n    image: nginx\n",
				"compose.override.yaml": "services:\n  trainer:\n    deploy:\n      resources:\n        reservations:\n          devices:\n" +
					"            - driver: nvidia\n              capabilities: [gpu]\n  notebook:\n    shm_size: 8gb\n    image: jupyter/pytorch-notebook\n" +
					"    environment:\n      NVIDIA_VISIBLE_DEVICES: all\n",
			},
		},
		{
			name: "the override alone, as -f, has its own image for notebook",
			dir:  "override",
			opts: Options{Files: []string{"compose.override.yaml"}},
			want: map[string]ServiceAction{"trainer": ActionAdd, "notebook": ActionAdd},
			file: map[string]string{"trainer": "compose.override.yaml", "notebook": "compose.override.yaml"},
		},
		{
			name:    "extends from another file: the extending service gets the line",
			dir:     "extends",
			want:    map[string]ServiceAction{"app": ActionAdd},
			file:    map[string]string{"app": "compose.yaml"},
			out:     map[string]string{"compose.yaml": "services:\n  app:\n    shm_size: 8gb\n    extends:\n      file: common/base.yaml\n      service: gpu-base\n    command: python train.py\n"},
			changed: []string{"compose.yaml"},
		},
		{
			name:   "extends in one file: a GPU extender takes the base's line, a CPU extender inherits it",
			dir:    "extends-same-file",
			want:   map[string]ServiceAction{"trainer": ActionAdd, "trainer-big": ActionAdd, "evaluator": ActionAdd, "evaluator-cpu": ActionInherit},
			shared: map[string][]string{"evaluator": {"evaluator-cpu"}, "evaluator-cpu": {"evaluator"}, "trainer": nil, "trainer-big": nil},
			out: map[string]string{"compose.yaml": "services:\n  trainer:\n    shm_size: 8gb\n    image: pytorch/pytorch\n    runtime: nvidia\n" +
				"  trainer-big:\n    extends: trainer\n    command: python train.py --big\n  evaluator:\n    shm_size: 8gb\n    image: pytorch/pytorch\n    runtime: nvidia\n" +
				"  evaluator-cpu:\n    extends:\n      service: evaluator\n    runtime: runc\n"},
		},
		{
			name: "--strict-shared: a CPU extender blocks the base's line",
			dir:  "extends-same-file",
			opts: Options{StrictShared: true},
			want: map[string]ServiceAction{"trainer": ActionAdd, "trainer-big": ActionAdd, "evaluator": ActionSkip, "evaluator-cpu": ActionNone},
			warn: map[string]string{"evaluator": "evaluator-cpu, which is not a GPU service (--strict-shared)"},
			out: map[string]string{"compose.yaml": "services:\n  trainer:\n    shm_size: 8gb\n    image: pytorch/pytorch\n    runtime: nvidia\n" +
				"  trainer-big:\n    extends: trainer\n    command: python train.py --big\n  evaluator:\n    image: pytorch/pytorch\n    runtime: nvidia\n" +
				"  evaluator-cpu:\n    extends:\n      service: evaluator\n    runtime: runc\n"},
		},
		{
			name: "a Stable Diffusion web UI stack: GPU services anchored into CPU variants get the line, the variants inherit it",
			dir:  "sd-webui",
			want: map[string]ServiceAction{"fetch-models": ActionNone, "forge": ActionAdd, "forge-cpu": ActionInherit, "nodes": ActionAdd, "nodes-cpu": ActionInherit, "trainer": ActionAdd},
			size: map[string]int64{"trainer": target(def, 24*policy.GiB)},
			shared: map[string][]string{"forge": {"forge-cpu"}, "forge-cpu": {"forge"}, "nodes": {"nodes-cpu"}, "nodes-cpu": {"nodes"},
				"trainer": nil, "fetch-models": nil},
			file:    map[string]string{"forge-cpu": "docker-compose.yml"},
			changed: []string{"docker-compose.yml"},
		},
		{
			name: "a Stable Diffusion web UI stack, --strict-shared: the anchored GPU services are left for a hand edit",
			dir:  "sd-webui",
			opts: Options{StrictShared: true},
			want: map[string]ServiceAction{"fetch-models": ActionNone, "forge": ActionSkip, "forge-cpu": ActionNone, "nodes": ActionSkip, "nodes-cpu": ActionNone, "trainer": ActionAdd},
			size: map[string]int64{"trainer": target(def, 24*policy.GiB)},
			warn: map[string]string{"forge": "(docker-compose.yml:37) is shared", "nodes": "nodes-cpu, which is not a GPU service"},
		},
		{
			name: "shared anchors: aliases, merges, nested merges, extends, own sizes, ipc: host",
			dir:  "shared-anchors",
			want: map[string]ServiceAction{"trainer": ActionAdd, "trainer-alias": ActionAdd, "trainer-cpu": ActionInherit, "trainer-cpu-own": ActionNone,
				"trainer-cpu-nested": ActionInherit, "trainer-cpu-shadowed": ActionNone, "trainer-cpu-extends": ActionInherit,
				"trainer-small": ActionAdd, "trainer-keep": ActionKeep, "infer": ActionSkip, "infer-host": ActionNone,
				"painter": ActionAdd, "painter-trainer-cpu": ActionInherit},
			size: map[string]int64{"trainer-small": target(def, 4*policy.GiB), "painter": target(def, 6*policy.GiB), "painter-trainer-cpu": target(def, 6*policy.GiB)},
			shared: map[string][]string{
				"painter":             {"painter-trainer-cpu"},
				"painter-trainer-cpu": {"painter"},
				"trainer":             {"trainer-cpu", "trainer-cpu-extends", "trainer-cpu-nested"},
				"trainer-alias":       {"trainer-cpu", "trainer-cpu-extends", "trainer-cpu-nested"},
				"trainer-cpu":         {"trainer", "trainer-alias"},
				"trainer-cpu-nested":  {"trainer", "trainer-alias"},
				"trainer-cpu-extends": {"trainer", "trainer-alias"},
				"trainer-small":       nil, "trainer-cpu-own": nil, "trainer-cpu-shadowed": nil,
			},
			warn: map[string]string{"infer": "infer-host, which is not a GPU service and has ipc: host"},
			file: map[string]string{"trainer-alias": "compose.yaml"},
		},
		{
			name: "shared anchors, --strict-shared",
			dir:  "shared-anchors",
			opts: Options{StrictShared: true},
			want: map[string]ServiceAction{"trainer": ActionSkip, "trainer-alias": ActionSkip, "trainer-cpu": ActionNone, "trainer-cpu-own": ActionNone,
				"trainer-cpu-nested": ActionNone, "trainer-cpu-shadowed": ActionNone, "trainer-cpu-extends": ActionNone,
				"trainer-small": ActionAdd, "trainer-keep": ActionKeep, "infer": ActionSkip, "infer-host": ActionNone,
				"painter": ActionSkip, "painter-trainer-cpu": ActionNone},
			size: map[string]int64{"trainer-small": target(def, 4*policy.GiB)},
			warn: map[string]string{"trainer": "trainer-cpu, which is not a GPU service (--strict-shared) and trainer-cpu-extends",
				"painter": "painter-trainer-cpu, which is not a GPU service (--strict-shared)"},
		},
		{
			name:   "GPU services of one mapping that need different sizes: the line carries the larger",
			dir:    "shared-sizes",
			want:   map[string]ServiceAction{"trainer": ActionAdd, "tuner": ActionAdd, "cpu": ActionInherit},
			size:   map[string]int64{"trainer": def.ComposeDefault, "tuner": def.ComposeDefault},
			shared: map[string][]string{"trainer": {"cpu"}, "tuner": {"cpu"}, "cpu": {"trainer", "tuner"}},
			out: map[string]string{"compose.yaml": "services:\n  trainer: &trainer\n    shm_size: 8gb\n    image: pytorch/pytorch\n    deploy:\n" +
				"      resources:\n        reservations:\n          devices:\n            - driver: nvidia\n              capabilities: [gpu]\n" +
				"  tuner: *trainer\n  cpu:\n    <<: *trainer\n    deploy: {}\n"},
		},
		{
			name:    "include: the line goes into the included file",
			dir:     "include",
			want:    map[string]ServiceAction{"trainer": ActionAdd, "web": ActionNone},
			file:    map[string]string{"trainer": filepath.Join("gpu", "compose.yaml")},
			changed: []string{filepath.Join("gpu", "compose.yaml")},
		},
		{
			name: "profiles: every service counts; a CDI device id is a GPU",
			dir:  "profiles",
			want: map[string]ServiceAction{"trainer": ActionAdd, "cpu": ActionNone},
		},
		{
			name: "per_gpu times the CDI GPU count",
			dir:  "profiles",
			opts: Options{Policy: mustPolicy(t, `per_gpu = "4g"`)},
			want: map[string]ServiceAction{"trainer": ActionAdd, "cpu": ActionNone},
			size: map[string]int64{"trainer": 2 * 4 * policy.GiB},
		},
		{
			name: "shm_size: ${SHM} counts as set; a default below the minimum is a warning",
			dir:  "shm-var",
			want: map[string]ServiceAction{"trainer": ActionKeep, "small": ActionKeep},
			warn: map[string]string{"small": "below the policy minimum"},
		},
		{
			name: "an expression is never raised in place",
			dir:  "shm-var",
			opts: Options{EnforceMin: true},
			want: map[string]ServiceAction{"trainer": ActionKeep, "small": ActionSkip},
			warn: map[string]string{"small": "expression"},
		},
		{
			name: "empty services map",
			dir:  "empty-services",
			want: map[string]ServiceAction{},
		},
		{
			name:    "services: with nothing is no mapping, for compose either",
			dir:     "null-services",
			wantErr: "compose.yaml:2:10: services must be a mapping of service names to services, not a null",
		},
		{
			name:    "an empty file, as compose sees it",
			dir:     "empty-file",
			wantErr: "compose.yaml: empty compose file",
		},
		{
			name:    "not a compose file",
			dir:     "not-compose",
			wantErr: `compose.yaml:1:1: not a compose file: unknown top-level key "apiVersion"`,
		},
		{
			name:    "YAML syntax error",
			dir:     "syntax-error",
			wantErr: "compose.yaml:5:1: did not find expected ',' or ']'",
		},
		{
			name:    "compose schema error",
			dir:     "schema-error",
			wantErr: "compose.yaml:8:20: services.trainer.deploy.resources.reservations.devices must be a",
		},
		{
			name:    "extends a service that does not exist",
			dir:     "extends-missing",
			wantErr: `compose.yaml:4:7: cannot extend service "app"`,
		},
		{
			name:    "include of a missing file",
			dir:     "include-missing",
			wantErr: "compose.yaml:2:5: include missing.yaml",
		},
		{
			name:    "bad interpolation",
			dir:     "bad-interpolation",
			wantErr: "compose.yaml:5:10: invalid interpolation format for services.app.environment.A",
		},
		{
			name: "memory limits",
			dir:  "memory",
			want: map[string]ServiceAction{"limit-16g": ActionAdd, "mem-3g": ActionAdd, "mem-1g": ActionAdd, "mem-var": ActionAdd},
			size: map[string]int64{
				"limit-16g": target(def, 16*policy.GiB),
				"mem-3g":    target(def, 3*policy.GiB),
				"mem-1g":    target(def, 1*policy.GiB),
				"mem-var":   def.ComposeDefault, // ${MEM} unset: no limit
			},
		},
		{
			name: "--size wins",
			dir:  "memory",
			opts: Options{Size: 16 * policy.GiB},
			want: map[string]ServiceAction{"limit-16g": ActionAdd, "mem-3g": ActionAdd, "mem-1g": ActionAdd, "mem-var": ActionAdd},
			size: map[string]int64{"limit-16g": 16 * policy.GiB, "mem-3g": 16 * policy.GiB, "mem-1g": 16 * policy.GiB, "mem-var": 16 * policy.GiB},
		},
		{
			name: "a memory limit from the environment",
			dir:  "memory",
			opts: Options{Environ: []string{"MEM=6g"}},
			want: map[string]ServiceAction{"limit-16g": ActionAdd, "mem-3g": ActionAdd, "mem-1g": ActionAdd, "mem-var": ActionAdd},
			size: map[string]int64{"limit-16g": target(def, 16*policy.GiB), "mem-3g": target(def, 3*policy.GiB), "mem-1g": target(def, 1*policy.GiB), "mem-var": target(def, 6*policy.GiB)},
		},
		{
			name: "GPU signals",
			dir:  "signals",
			want: map[string]ServiceAction{"dev-nvidia0": ActionAdd, "kfd": ActionAdd, "void": ActionNone, "from-env-file": ActionAdd,
				"from-shell": ActionNone, "runtime-only": ActionAdd, "habana": ActionAdd, "by-target": ActionAdd, "plain": ActionNone},
		},
		{
			name: "devices by their path in the container, judged by the one classifier",
			dir:  "devices",
			want: map[string]ServiceAction{"nvidiactl-only": ActionNone, "card0-only": ActionNone, "dri": ActionAdd, "render-node": ActionAdd,
				"host-path-only": ActionNone, "accel": ActionAdd, "privileged": ActionNone},
		},
		{
			name: "NVIDIA_VISIBLE_DEVICES passed through from the shell",
			dir:  "signals",
			opts: Options{Environ: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
			want: map[string]ServiceAction{"dev-nvidia0": ActionAdd, "kfd": ActionAdd, "void": ActionNone, "from-env-file": ActionAdd,
				"from-shell": ActionAdd, "runtime-only": ActionAdd, "habana": ActionAdd, "by-target": ActionAdd, "plain": ActionNone},
		},
		{
			name: "services whose /dev/shm is settled, and warnings",
			dir:  "settled",
			want: map[string]ServiceAction{"host-ipc": ActionKeep, "host-ipc-and-size": ActionKeep, "donor": ActionKeep, "sidecar": ActionKeep,
				"shm-volume": ActionKeep, "shm-tmpfs": ActionKeep, "small": ActionKeep, "nccl": ActionAdd},
			warn: map[string]string{"host-ipc-and-size": "Podman refuses", "small": "--enforce-min", "nccl": "NCCL_SHM_DISABLE=1"},
		},
		{
			name: "--enforce-min raises a small explicit size, keeping its comment",
			dir:  "settled",
			opts: Options{EnforceMin: true},
			want: map[string]ServiceAction{"host-ipc": ActionKeep, "host-ipc-and-size": ActionKeep, "donor": ActionKeep, "sidecar": ActionKeep,
				"shm-volume": ActionKeep, "shm-tmpfs": ActionKeep, "small": ActionRaise, "nccl": ActionAdd},
			size: map[string]int64{"small": def.Min},
		},
		{
			name: "an anchored GPU service shared only with GPU services of its size gets one line",
			dir:  "anchors",
			want: map[string]ServiceAction{"trainer": ActionAdd, "trainer-2": ActionAdd, "trainer-alias": ActionAdd, "tuner": ActionAdd},
			size: map[string]int64{"trainer": def.ComposeDefault, "trainer-2": def.ComposeDefault, "trainer-alias": def.ComposeDefault, "tuner": target(def, 4*policy.GiB)},
		},
		{
			name: "document markers stay",
			dir:  "document-markers",
			want: map[string]ServiceAction{"trainer": ActionAdd},
			out:  map[string]string{"compose.yaml": "# one document, with its markers\n---\nservices:\n  trainer:\n    shm_size: 8gb\n    image: pytorch/pytorch\n    gpus: all\n...\n"},
		},
		{
			name: "two documents: the line goes to the one with the image",
			dir:  "multi-doc",
			want: map[string]ServiceAction{"trainer": ActionAdd},
			out:  map[string]string{"compose.yaml": "services:\n  trainer:\n    shm_size: 8gb\n    image: pytorch/pytorch\n---\nservices:\n  trainer:\n    gpus: all\n"},
		},
		{
			name: ".env says no GPU",
			dir:  "env-file",
			want: map[string]ServiceAction{"trainer": ActionNone},
		},
		{
			name: "--env-file instead of .env",
			dir:  "env-file",
			opts: Options{EnvFiles: []string{"gpus.env"}},
			want: map[string]ServiceAction{"trainer": ActionAdd},
		},
		{
			name: "the process environment wins over .env",
			dir:  "env-file",
			opts: Options{Environ: []string{"GPUS=0,1"}},
			want: map[string]ServiceAction{"trainer": ActionAdd},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := edgeRun(t, tt.dir, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if res != nil {
					t.Errorf("a result with an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := byService(res)
			if len(got) != len(tt.want) {
				t.Errorf("services %v, want %v", slices.Sorted(mapKeys(got)), slices.Sorted(mapKeys(tt.want)))
			}
			pol := tt.opts.Policy
			if pol == nil {
				pol = def
			}
			for name, action := range tt.want {
				s := got[name]
				if s.Action != action {
					t.Errorf("service %s: action %s (%s %v), want %s", name, s.Action, s.Reason, s.Warnings, action)
				}
				if action == ActionAdd || action == ActionRaise || action == ActionInherit {
					want, ok := tt.size[name]
					if !ok {
						want = pol.ComposeDefault
					}
					if s.SizeBytes != want {
						t.Errorf("service %s: size %d, want %d", name, s.SizeBytes, want)
					}
					if n, err := policy.ParseSize(s.Size); err != nil || n != want {
						t.Errorf("service %s: size written as %q (%d, %v), want %d", name, s.Size, n, err, want)
					}
				}
				if want, ok := tt.shared[name]; ok {
					got := s.SharedWith
					if action == ActionInherit {
						got = s.InheritsFrom
					}
					if !slices.Equal(got, want) || (action != ActionAdd && s.SharedWith != nil) || (action != ActionInherit && s.InheritsFrom != nil) {
						t.Errorf("service %s: shared with %q, inherits from %q, want %q", name, s.SharedWith, s.InheritsFrom, want)
					}
				}
				if f, ok := tt.file[name]; ok && s.File != f {
					t.Errorf("service %s: file %s, want %s", name, s.File, f)
				}
				if w, ok := tt.warn[name]; ok && !slices.ContainsFunc(s.Warnings, func(x string) bool { return strings.Contains(x, w) }) {
					t.Errorf("service %s: warnings %q, want one about %q", name, s.Warnings, w)
				}
			}
			for path, want := range tt.out {
				if got := newContent(t, res, path); got != want {
					t.Errorf("%s:\ngot  %q\nwant %q", path, got, want)
				}
			}
			changed := tt.changed
			if changed == nil {
				changed = slices.Sorted(mapKeys(tt.out))
			}
			if len(changed) > 0 {
				var gotChanged []string
				for _, f := range res.Files {
					if f.Changed() {
						gotChanged = append(gotChanged, f.Path)
					}
				}
				slices.Sort(gotChanged)
				if !slices.Equal(gotChanged, changed) {
					t.Errorf("changed files %v, want %v", gotChanged, changed)
				}
			}
			// compose-go's loader agrees with the fast path.
			ref := tt.opts
			ref.composeGoOnly = true
			if refRes, err := edgeRun(t, tt.dir, ref); err != nil {
				t.Errorf("compose-go path: %v", err)
			} else {
				if !slices.EqualFunc(normalize(refRes.Services), normalize(res.Services), func(a, b ServiceReport) bool {
					return a.Service == b.Service && a.Action == b.Action && a.SizeBytes == b.SizeBytes && a.File == b.File &&
						a.Line == b.Line && slices.Equal(a.Evidence, b.Evidence) && slices.Equal(a.Warnings, b.Warnings)
				}) {
					t.Errorf("compose-go path:\n%+v\nfast path:\n%+v", refRes.Services, res.Services)
				}
				for i, f := range refRes.Files {
					if string(f.New) != string(res.Files[i].New) {
						t.Errorf("compose-go path writes %s differently:\n%s", f.Path, f.New)
					}
				}
			}
			if !slices.ContainsFunc(res.Services, func(s ServiceReport) bool { return s.Action == ActionAdd || s.Action == ActionRaise }) && res.Changed() {
				t.Errorf("nothing to add or raise, yet files change: %v", filePaths(res))
			}
			// Every result is a fixed point.
			if res.Changed() {
				again := secondRun(t, tt.dir, res, tt.opts)
				for _, s := range again.Services {
					if s.Action == ActionAdd || s.Action == ActionRaise {
						t.Errorf("second run: service %s: %s", s.Service, s.Action)
					}
				}
			}
		})
	}
}

// target is the policy's size for a memory limit.
func target(p *policy.Policy, limit int64) int64 {
	n, _ := p.Target(policy.Request{MemoryLimit: limit})
	return n
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// secondRun copies the fixture directory, writes the result into the copy,
// and migrates the copy again with the same options.
func secondRun(t *testing.T, dir string, res *Result, o Options) *Result {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("testdata/edge", dir))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), dir)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Files {
		if err := os.WriteFile(filepath.Join(dst, f.Path), f.New, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o.WorkDir = dst
	if o.Policy == nil {
		o.Policy = policy.Default()
	}
	again, err := Migrate(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() {
		for _, f := range again.Files {
			t.Errorf("second run changes %s:\n%s", f.Path, f.Diff())
		}
	}
	return again
}
