package docgen

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/policy"
)

// tomlKeys lists the TOML keys of policy.File straight from its tags.
func tomlKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	ft := reflect.TypeFor[policy.File]()
	for i := range ft.NumField() {
		name, _, _ := strings.Cut(ft.Field(i).Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	if len(keys) == 0 {
		t.Fatal("policy.File has no toml keys")
	}
	return keys
}

func TestEveryKeyDocumented(t *testing.T) {
	keys, err := ConfigKeys()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range keys {
		names = append(names, k.Name)
		if k.Doc == "" || k.Type == "" || k.Default == "" {
			t.Errorf("key %q: %+v", k.Name, k)
		}
	}
	if want := tomlKeys(t); !slices.Equal(names, want) {
		t.Errorf("documented keys %v, want every key of policy.File %v", names, want)
	}
}

func TestSizeKeysAreTheOnesValidateParses(t *testing.T) {
	keys, err := ConfigKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		// A size key rejects a bad size with an error naming the key.
		_, err := policy.Parse("t.toml", []byte(k.Name+" = \"12 parsecs\"\n"))
		rejects := err != nil && strings.Contains(err.Error(), `"`+k.Name+`"`)
		_, err = policy.Parse("t.toml", []byte(k.Name+" = \"3g\"\n"))
		accepts := err == nil
		if isSize := rejects && accepts; isSize != strings.HasPrefix(k.Type, "size") {
			t.Errorf("key %q: type %q, but the policy rejects a bad size: %v, accepts 3g: %v", k.Name, k.Type, rejects, accepts)
		}
	}
}

func TestDefaultConfigIsTheDefaults(t *testing.T) {
	cfg, err := DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	// As shipped, every key is commented out: the file means the defaults.
	p, err := policy.Parse("config.toml", cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Default()
	want.Source = "config.toml"
	if !reflect.DeepEqual(p, want) {
		t.Errorf("shipped file parses to %+v, want %+v", p, want)
	}
	// Uncommented, each line states the built-in value.
	assign := regexp.MustCompile(`(?m)^#([a-z_]+ = )`)
	uncommented := assign.ReplaceAll(cfg, []byte("$1"))
	if n := len(assign.FindAll(cfg, -1)); n != len(tomlKeys(t)) {
		t.Errorf("%d commented-out keys, want %d", n, len(tomlKeys(t)))
	}
	p, err = policy.Parse("uncommented.toml", uncommented)
	if err != nil {
		t.Fatalf("uncommented: %v\n%s", err, uncommented)
	}
	want.Source = "uncommented.toml"
	if !reflect.DeepEqual(p, want) {
		t.Errorf("uncommented file parses to %+v, want %+v", p, want)
	}
	for i, line := range strings.Split(string(cfg), "\n") {
		if strings.HasPrefix(line, "# ") && len(line) > 80 {
			t.Errorf("comment line %d longer than 80: %q", i+1, line)
		}
	}
}

// TestConfigMarkdownFresh fails when docs/config.md is not what the code
// generates: run `make docs`.
func TestConfigMarkdownFresh(t *testing.T) {
	want, err := ConfigMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", "docs", "config.md")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run make docs", path)
	}
	keys, err := ConfigKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !bytes.Contains(want, []byte("| `"+k.Name+"` | "+k.Type+" | `"+k.Default+"` |")) {
			t.Errorf("config.md has no row for %q", k.Name)
		}
	}
}

// testTree is a small command tree shaped like gpurun's.
func testTree() *cobra.Command {
	root := &cobra.Command{Use: "gpurun", Short: "root short", Example: "  gpurun run img"}
	run := &cobra.Command{Use: "run IMAGE", Short: "run short", Run: func(*cobra.Command, []string) {}}
	inst := &cobra.Command{Use: "install", Short: "install short"}
	inst.AddCommand(&cobra.Command{Use: "docker", Short: "install docker short", Run: func(*cobra.Command, []string) {}})
	hidden := &cobra.Command{Use: "__secret", Hidden: true, Run: func(*cobra.Command, []string) {}}
	root.AddCommand(run, inst, hidden)
	root.InitDefaultCompletionCmd()
	return root
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header has name %q time %v", path, zr.Name, zr.ModTime)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestManPages(t *testing.T) {
	dir := t.TempDir()
	date := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	root := testTree()
	names, err := ManPages(root, dir, ManOptions{Version: "v9.8.7", Date: date})
	if err != nil {
		t.Fatal(err)
	}
	// One page per available command, named by its path, plus gpurun-runtime.
	var want []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		want = append(want, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1.gz")
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	want = append(want, "gpurun-runtime.1.gz")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("pages %v, want %v", names, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(want) {
		t.Errorf("%d files in %s, want %d", len(entries), dir, len(want))
	}
	page := gunzip(t, filepath.Join(dir, "gpurun-install-docker.1.gz"))
	for _, s := range []string{`.TH "GPURUN-INSTALL-DOCKER" "1" "Mar 2026" "gpurun v9.8.7" "gpurun manual"`, "install docker short"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q:\n%s", s, page)
		}
	}
	if strings.Contains(page, "Auto generated") {
		t.Error("page carries cobra's auto-generated tag")
	}
	if page := gunzip(t, filepath.Join(dir, "gpurun.1.gz")); !strings.Contains(page, "gpurun run img") {
		t.Errorf("root page lacks its example:\n%s", page)
	}
	if page := gunzip(t, filepath.Join(dir, "gpurun-runtime.1.gz")); !strings.Contains(page, "fail_closed") {
		t.Errorf("gpurun-runtime page:\n%s", page)
	}
	// The same input gives the same bytes.
	first, _ := os.ReadFile(filepath.Join(dir, "gpurun.1.gz"))
	if _, err := ManPages(testTree(), dir, ManOptions{Version: "v9.8.7", Date: date}); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(dir, "gpurun.1.gz"))
	if !bytes.Equal(first, second) {
		t.Error("man pages are not reproducible")
	}
}

func TestCompletions(t *testing.T) {
	dir := t.TempDir()
	names, err := Completions(testTree(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"gpurun.bash", "_gpurun", "gpurun.fish"}) {
		t.Errorf("names %v", names)
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("__complete")) {
			t.Errorf("%s does not ask gpurun __complete", n)
		}
	}
	// The bash script is valid bash.
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", filepath.Join(dir, "gpurun.bash")).CombinedOutput(); err != nil {
			t.Errorf("bash -n: %v %s", err, out)
		}
	}
}

func TestSourceDate(t *testing.T) {
	d, err := SourceDate(func(string) string { return "1700000000" })
	if err != nil || !d.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("%v %v", d, err)
	}
	if _, err := SourceDate(func(string) string { return "yesterday" }); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
	before := time.Now().Add(-time.Second)
	if d, err := SourceDate(func(string) string { return "" }); err != nil || d.Before(before) {
		t.Errorf("unset: %v %v", d, err)
	}
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(testTree(), dir, ManOptions{Version: "v1", Date: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	cfg, err := DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil || !bytes.Equal(got, cfg) {
		t.Errorf("config.toml: %v", err)
	}
	for _, p := range []string{"man/man1/gpurun.1.gz", "man/man1/gpurun-runtime.1.gz", "completion/gpurun.bash", "completion/_gpurun", "completion/gpurun.fish"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Error(err)
		}
	}
}
