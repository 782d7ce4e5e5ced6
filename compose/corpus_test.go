package compose

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aymanbagabas/go-udiff"
	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/gpurun/gpurun/policy"
)

// corpusWant is what a reader of each corpus file expects migrate to do
// to its services (read off the files by hand, see testdata/corpus/SOURCES.md),
// and which services get a warning.
var corpusWant = map[string]struct {
	actions  map[string]ServiceAction
	warnings map[string]string // service -> a word of its warning
}{
	"detectron2/docker-compose.yml":                           {actions: map[string]ServiceAction{"detectron2": ActionKeep}},
	"fooocus/docker-compose.yml":                              {actions: map[string]ServiceAction{"app": ActionAdd}},
	"frigate/docker-compose.yml":                              {actions: map[string]ServiceAction{"dev": ActionKeep, "mqtt": ActionNone}, warnings: map[string]string{"dev": "below the policy minimum"}},
	"gpt4all-api/docker-compose.gpu.yaml":                     {actions: map[string]ServiceAction{"gpt4all_gpu": ActionKeep}},
	"h2ogpt/docker-compose.yml":                               {actions: map[string]ServiceAction{"h2ogpt": ActionKeep}},
	"immich-hwaccel-ml/hwaccel.ml.yml":                        {actions: map[string]ServiceAction{"armnn": ActionNone, "cpu": ActionNone, "cuda": ActionAdd, "openvino": ActionAdd, "openvino-wsl": ActionAdd, "rknn": ActionAdd}},
	"immich-hwaccel-transcoding/hwaccel.transcoding.yml":      {actions: map[string]ServiceAction{"cpu": ActionNone, "nvenc": ActionAdd, "quicksync": ActionAdd, "rkmpp": ActionAdd, "vaapi": ActionAdd, "vaapi-wsl": ActionAdd}},
	"invokeai/docker-compose.yml":                             {actions: map[string]ServiceAction{"invokeai-cpu": ActionNone, "invokeai-nvidia": ActionAdd, "invokeai-rocm": ActionAdd}},
	"isaaclab/docker-compose.yaml":                            {actions: map[string]ServiceAction{"isaac-lab-base": ActionAdd, "isaac-lab-ros2": ActionAdd}},
	"kohya-ss/docker-compose.yaml":                            {actions: map[string]ServiceAction{"kohya-ss-gui": ActionAdd, "tensorboard": ActionAdd}},
	"label-studio-sam/docker-compose.yml":                     {actions: map[string]ServiceAction{"segment_anything_model": ActionNone}},
	"langchain-chatchat/docker-compose.yaml":                  {actions: map[string]ServiceAction{"chatchat": ActionNone, "xinference": ActionAdd}},
	"llama-factory-cuda/docker-compose.yml":                   {actions: map[string]ServiceAction{"llamafactory": ActionKeep}, warnings: map[string]string{"llamafactory": "has no effect with ipc: host"}},
	"llama-factory-rocm/docker-compose.yml":                   {actions: map[string]ServiceAction{"llamafactory": ActionKeep}},
	"merlin/docker-compose.yml":                               {actions: map[string]ServiceAction{"dev-cpu": ActionNone, "dev-gpu": ActionKeep, "requirements": ActionNone}},
	"nvidia-fm-asr-nim-llm/docker-compose-nim-llm.yaml":       {actions: map[string]ServiceAction{"nim": ActionKeep}},
	"nvidia-rag-deploy/docker-compose.yaml":                   {actions: map[string]ServiceAction{"etcd": ActionNone, "frontend": ActionNone, "jupyter-server": ActionAdd, "milvus": ActionAdd, "minio": ActionNone, "query": ActionKeep, "triton": ActionKeep}},
	"nvidia-rag-nim-ms/docker-compose-nim-ms.yaml":            {actions: map[string]ServiceAction{"nemollm-embedding": ActionKeep, "nemollm-inference": ActionKeep, "ranking-ms": ActionAdd}},
	"open-webui-gpu/docker-compose.gpu.yaml":                  {actions: map[string]ServiceAction{"ollama": ActionAdd, "openWebUI": ActionNone}},
	"private-gpt/docker-compose.yaml":                         {actions: map[string]ServiceAction{"ollama": ActionNone, "ollama-cpu": ActionNone, "ollama-cuda": ActionAdd, "private-gpt-fireworks": ActionNone, "private-gpt-llamacpp-cpu": ActionNone, "private-gpt-ollama": ActionNone}},
	"sglang/compose.yaml":                                     {actions: map[string]ServiceAction{"sglang": ActionKeep}},
	"stable-diffusion-webui-docker/docker-compose.yml":        {actions: map[string]ServiceAction{"auto": ActionAdd, "auto-cpu": ActionInherit, "comfy": ActionAdd, "comfy-cpu": ActionInherit, "download": ActionNone, "invoke": ActionAdd}},
	"text-generation-webui-nvidia/docker-compose.yml":         {actions: map[string]ServiceAction{"text-generation-webui": ActionAdd}},
	"webodm-gpu-intel/docker-compose.nodeodm.gpu.intel.yml":   {actions: map[string]ServiceAction{"node-odm-1": ActionAdd, "webapp": ActionNone}},
	"webodm-gpu-nvidia/docker-compose.nodeodm.gpu.nvidia.yml": {actions: map[string]ServiceAction{"node-odm-1": ActionAdd, "webapp": ActionNone}},
	"whisper-asr-webservice/docker-compose.gpu.yml":           {actions: map[string]ServiceAction{"whisper-asr-webservice-gpu": ActionAdd}},
	"xinference/docker-compose.yml":                           {actions: map[string]ServiceAction{"xinference": ActionAdd}},
}

// insertedLine is the only kind of line migrate may add.
var insertedLine = regexp.MustCompile(`^ +shm_size: [0-9]+[kmg]?b?\r?\n$`)

// TestCorpus migrates every real-world file and checks, independently of
// migrate's own code: the line diff holds only inserted shm_size lines;
// compose-go loads the result, and there every service migrate added to
// (or that inherits the added line) has the policy's size while every
// other service is exactly as before; the
// decisions are the ones a reader expects; a second run changes nothing;
// the fast path and compose-go's loader agree.
func TestCorpus(t *testing.T) {
	pol := policy.Default()
	files := corpusFiles(t)
	if len(files) != len(corpusWant) {
		t.Errorf("corpus has %d files, the expectations cover %d", len(files), len(corpusWant))
	}
	for _, file := range files {
		rel, _ := filepath.Rel("testdata/corpus", file)
		t.Run(rel, func(t *testing.T) {
			want, ok := corpusWant[filepath.ToSlash(rel)]
			if !ok {
				t.Fatalf("no expectations for %s", rel)
			}
			res, err := Migrate(context.Background(), Options{Paths: []string{file}, Policy: pol})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Files) != 1 {
				t.Fatalf("%d files in the result, want 1", len(res.Files))
			}
			old, out := res.Files[0].Old, res.Files[0].New

			// The decisions.
			got := map[string]ServiceAction{}
			for _, s := range res.Services {
				got[s.Service] = s.Action
				if w := want.warnings[s.Service]; w != "" {
					if !slices.ContainsFunc(s.Warnings, func(x string) bool { return strings.Contains(x, w) }) {
						t.Errorf("service %s: warnings %q, want one about %q", s.Service, s.Warnings, w)
					}
				} else if len(s.Warnings) > 0 {
					t.Errorf("service %s: unexpected warnings %q", s.Service, s.Warnings)
				}
				if (s.Action == ActionAdd || s.Action == ActionInherit) && s.SizeBytes != pol.ComposeDefault {
					t.Errorf("service %s: size %d, want the policy's compose default %d (no memory limit)", s.Service, s.SizeBytes, pol.ComposeDefault)
				}
			}
			if !reflect.DeepEqual(got, want.actions) {
				t.Errorf("actions = %v, want %v", got, want.actions)
			}

			// Only inserted shm_size lines, by a line diff.
			added := 0
			for _, e := range udiff.Lines(string(old), string(out)) {
				if e.Start != e.End {
					t.Errorf("the diff deletes or changes %q", old[e.Start:e.End])
				}
				for _, line := range strings.SplitAfter(e.New, "\n") {
					if line == "" {
						continue
					}
					if !insertedLine.MatchString(line) {
						t.Errorf("inserted line %q is not a shm_size line", line)
					}
					if strings.Contains(string(old), "\r\n") != strings.HasSuffix(line, "\r\n") {
						t.Errorf("inserted line %q does not end like the file's lines", line)
					}
					added++
				}
			}
			if n := count(got, ActionAdd); (n == 0) != (added == 0) {
				t.Errorf("%d lines inserted for %d services to add to", added, n)
			}

			// compose-go loads the result; compare the typed services.
			// (Both at one path: compose-go resolves relative paths.)
			outPath := filepath.Join(t.TempDir(), filepath.Base(file))
			before := loadTyped(t, outPath, old)
			after := loadTyped(t, outPath, out)
			for name, svc := range after.Services {
				orig := before.Services[name]
				if got[name] == ActionAdd || got[name] == ActionInherit {
					if int64(svc.ShmSize) != pol.ComposeDefault {
						t.Errorf("service %s: compose-go reads shm_size %d, want %d", name, svc.ShmSize, pol.ComposeDefault)
					}
					svc.ShmSize = orig.ShmSize
				}
				if !reflect.DeepEqual(svc, orig) {
					t.Errorf("service %s changed beyond shm_size:\nbefore %+v\nafter  %+v", name, orig, svc)
				}
			}

			// A second run changes nothing.
			if err := os.WriteFile(outPath, out, 0o644); err != nil {
				t.Fatal(err)
			}
			again, err := Migrate(context.Background(), Options{Paths: []string{outPath}, Policy: pol})
			if err != nil {
				t.Fatal(err)
			}
			if again.Changed() {
				t.Errorf("second run changes the file:\n%s", again.Files[0].Diff())
			}
			for _, s := range again.Services {
				if s.Action == ActionAdd || (got[s.Service] == ActionAdd && s.Action != ActionKeep) {
					t.Errorf("second run: service %s: %s", s.Service, s.Action)
				}
			}

			// compose-go's loader gives the same decisions and bytes.
			ref, err := Migrate(context.Background(), Options{Paths: []string{file}, Policy: pol, composeGoOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalize(ref.Services), normalize(res.Services)) || string(ref.Files[0].New) != string(out) {
				t.Errorf("compose-go path differs:\n%+v\nfast path:\n%+v", ref.Services, res.Services)
			}
		})
	}
}

func count(m map[string]ServiceAction, a ServiceAction) int {
	n := 0
	for _, v := range m {
		if v == a {
			n++
		}
	}
	return n
}

// normalize sorts evidence, which the paths may list in another order.
func normalize(rs []ServiceReport) []ServiceReport {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Evidence = slices.Sorted(slices.Values(out[i].Evidence))
	}
	return out
}

// loadTyped loads a compose file into compose-go's typed project, every
// profile on, with a made-up value ("1") for each variable that has no
// default, so that files written for a real environment load.
func loadTyped(t *testing.T, path string, content []byte) *types.Project {
	t.Helper()
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := loader.LoadModelWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path, Content: content}},
	}, func(o *loader.Options) {
		o.SetProjectName("corpus", true)
		o.SkipInterpolation, o.SkipValidation, o.SkipNormalization, o.SkipConsistencyCheck = true, true, true, true
		o.SkipResolveEnvironment, o.SkipResolveLabels = true, true
	})
	if err != nil {
		t.Fatalf("compose-go cannot load %s: %v", path, err)
	}
	var env []string
	for name, v := range template.ExtractVariables(raw, template.DefaultPattern) {
		if v.DefaultValue == "" {
			env = append(env, name+"=1")
		}
	}
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithName("corpus"),
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithEnv(env),
		cli.WithProfiles([]string{"*"}),
		cli.WithConsistency(false),
		cli.WithoutEnvironmentResolution,
		cli.WithoutLabelsResolution,
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose-go cannot load %s: %v", path, err)
	}
	return p
}
