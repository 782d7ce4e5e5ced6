package docgen

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the repository's root, from this package's directory.
const moduleRoot = "../../.."

// modulePath is the module's import path.
const modulePath = "github.com/gpurun/gpurun/"

// layers ranks the top-level directories as docs/architecture.md's table
// does: a package imports only from a lower rank, or from its own
// directory.
func layers() map[string]int {
	return map[string]int{
		"integration": 8,
		"cmd":         7,
		"diagnose":    6,
		"observe":     5,
		"docker":      4, "compose": 4, "kube": 4, "runtime": 4,
		"engine": 3,
		"oci":    2, "policy": 2,
		"internal": 1,
	}
}

// allowedAcross are the imports between doors the table names: a compose
// service is a docker container, translated by docker's translator.
func allowedAcross() map[[2]string]bool {
	return map[[2]string]bool{{"compose", "docker/translate"}: true, {"oci", "policy"}: true}
}

// goPackages lists the module's packages and their imports of the module's
// own packages, as go list gives them.
func goPackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", "integration e2e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = moduleRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := strings.TrimPrefix(f[0], modulePath)
		var own []string
		for _, i := range f[1:] {
			if rel, ok := strings.CutPrefix(i, modulePath); ok {
				own = append(own, rel)
			}
		}
		pkgs[p] = own
	}
	return pkgs
}

// documented returns the packages docs/architecture.md names, one a line
// ("- `path` — what it is"), and the top-level directories of its tree.
func documented(t *testing.T) (pkgs, tree []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(moduleRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile("^- `([a-z0-9/_-]+)` — ")
	dir := regexp.MustCompile(`^([a-z]+)/ +\S`)
	sc := bufio.NewScanner(f)
	inTree := false
	for sc.Scan() {
		switch text := sc.Text(); {
		case strings.HasPrefix(text, "```"):
			inTree = !inTree
		case inTree && dir.MatchString(text):
			tree = append(tree, dir.FindStringSubmatch(text)[1])
		case line.MatchString(text):
			pkgs = append(pkgs, line.FindStringSubmatch(text)[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return pkgs, tree
}

// TestArchitectureDoc keeps docs/architecture.md true: every Go package has
// its line and no line names a package that is gone; the tree names every
// top-level Go directory, at most a dozen, each a layer of the table; and
// every import goes down the table (or stays in its directory).
func TestArchitectureDoc(t *testing.T) {
	pkgs := goPackages(t)
	lines, tree := documented(t)
	for p := range pkgs {
		if !slices.Contains(lines, p) {
			t.Errorf("package %s has no line in docs/architecture.md", p)
		}
	}
	tops := map[string]bool{}
	for p := range pkgs {
		tops[strings.Split(p, "/")[0]] = true
	}
	for _, p := range lines {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("docs/architecture.md names %s, which is no package", p)
		}
	}
	rank := layers()
	for top := range tops {
		if !slices.Contains(tree, top) {
			t.Errorf("top-level Go directory %s/ is not in docs/architecture.md's tree", top)
		}
		if _, ok := rank[top]; !ok {
			t.Errorf("top-level Go directory %s/ is in no layer", top)
		}
	}
	if len(tops) > 12 {
		t.Errorf("%d top-level Go directories, want at most a dozen", len(tops))
	}
	across := allowedAcross()
	for p, imports := range pkgs {
		from := strings.Split(p, "/")[0]
		for _, i := range imports {
			to := strings.Split(i, "/")[0]
			if to == from || rank[to] < rank[from] || across[[2]string{from, i}] {
				continue
			}
			t.Errorf("%s imports %s: %s/ is not below %s/ in docs/architecture.md's layers", p, i, to, from)
		}
	}
}
