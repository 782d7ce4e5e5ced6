package compose

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree writes files (path -> content) under a new temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const gpuService = "services:\n  gpu:\n    image: x\n    gpus: all\n"

func TestDiscover(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"app/compose.yaml":                   gpuService,
		"app/docker-compose.yml":             "services: {other: {image: y}}\n", // compose.yaml wins
		"app/compose.override.yaml":          "services: {gpu: {environment: {A: b}}}\n",
		"app/docker-compose.gpu.yml":         "services: {extra: {image: z, runtime: nvidia}}\n",
		"app/sub/deeper/readme.txt":          "",
		"lone-override/compose.override.yml": "services: {x: {image: y}}\n",
		".hidden/compose.yaml":               "not: compose\n",
		"node_modules/m/compose.yaml":        "not: compose\n",
		"b/nested/c/docker-compose.yaml":     gpuService,
	})
	projects := func(specs []projectSpec) []string {
		var out []string
		for _, s := range specs {
			var files []string
			for _, f := range s.files {
				rel, _ := filepath.Rel(dir, f)
				files = append(files, filepath.ToSlash(rel))
			}
			out = append(out, strings.Join(files, "+"))
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		name    string
		opts    Options
		want    []string
		wantErr string
	}{
		{"default files from a subdirectory, upwards", Options{WorkDir: filepath.Join(dir, "app/sub/deeper")}, []string{"app/compose.yaml+app/compose.override.yaml"}, ""},
		{"--project-directory", Options{WorkDir: dir, ProjectDir: "app"}, []string{"app/compose.yaml+app/compose.override.yaml"}, ""},
		{"-f in order", Options{WorkDir: filepath.Join(dir, "app"), Files: []string{"docker-compose.gpu.yml", "compose.yaml"}}, []string{"app/docker-compose.gpu.yml+app/compose.yaml"}, ""},
		{"COMPOSE_FILE", Options{WorkDir: filepath.Join(dir, "app"), Environ: []string{"COMPOSE_FILE=compose.yaml:docker-compose.gpu.yml"}}, []string{"app/compose.yaml+app/docker-compose.gpu.yml"}, ""},
		{"a directory PATH: every project below, hidden and node_modules skipped", Options{WorkDir: dir, Paths: []string{"."}},
			[]string{"app/compose.yaml+app/compose.override.yaml", "app/docker-compose.gpu.yml", "app/docker-compose.yml", "b/nested/c/docker-compose.yaml"}, ""},
		{"a file PATH", Options{WorkDir: dir, Paths: []string{"app/docker-compose.gpu.yml"}}, []string{"app/docker-compose.gpu.yml"}, ""},
		{"-f and PATH", Options{WorkDir: dir, Files: []string{"app/compose.yaml"}, Paths: []string{"b"}}, nil, "not both"},
		{"missing -f file", Options{WorkDir: dir, Files: []string{"nope.yaml"}}, nil, "nope.yaml: no such file"},
		{"no compose file anywhere up", Options{WorkDir: filepath.Join(dir, "lone-override")}, nil, "no compose file"},
		{"--project-directory not a directory", Options{WorkDir: dir, ProjectDir: "app/compose.yaml"}, nil, "not a directory"},
		{"stdin", Options{WorkDir: dir, Files: []string{"-"}}, nil, "stdin"},
		{"a directory without projects", Options{WorkDir: dir, Paths: []string{"lone-override"}}, nil, "no compose files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs, err := discover(tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := projects(specs); !slices.Equal(got, tt.want) {
				t.Errorf("projects = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMigrateSeveralProjects: one Migrate over a directory migrates each
// project, and a project's error fails the whole run with nothing to write.
func TestMigrateSeveralProjects(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"a/compose.yaml":        gpuService,
		"b/docker-compose.yml":  strings.ReplaceAll(gpuService, "gpu:", "trainer:"),
		"b/docker-compose.yaml": "services: {web: {image: nginx}}\n",
	})
	res, err := Migrate(context.Background(), Options{WorkDir: dir, Paths: []string{"."}})
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, f := range res.Files {
		if f.Changed() {
			changed = append(changed, filepath.ToSlash(f.Path))
		}
	}
	if want := []string{"a/compose.yaml", "b/docker-compose.yml"}; !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if err := os.MkdirAll(filepath.Join(dir, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c", "compose.yaml"), []byte("services: [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = Migrate(context.Background(), Options{WorkDir: dir, Paths: []string{"."}})
	if err == nil || !strings.Contains(err.Error(), filepath.Join("c", "compose.yaml")+":1:11: services must be a mapping") || res != nil {
		t.Errorf("Migrate = %v, %v; want no result and an error at c/compose.yaml:1:11", res, err)
	}
}
