// Package docs_test keeps docs/architecture.md true: the test beside the
// document it reads, so that the document is the one place where the
// packages and the layers are written.
package docs_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the repository's root, from this package's directory.
const moduleRoot = ".."

// modulePath is the module's import path.
const modulePath = "github.com/gpurun/gpurun/"

// self is this test's own package: it holds no Go but its tests.
const self = "docs"

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
		if p == self {
			continue
		}
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

// arch is what docs/architecture.md says of the tree.
type arch struct {
	// pkgs are the packages it names, one a line ("- `path` — what it
	// is"); tree the top-level directories of its tree.
	pkgs, tree []string
	// rank is each top-level directory's layer: the table's last row is
	// 1, the row above it 2, and so on.
	rank map[string]int
	// across are the imports between directories of one layer that the
	// list under the table allows ("- `compose` imports
	// `docker/translate`: why"): from a directory to a package.
	across map[[2]string]bool
}

var (
	pkgLine    = regexp.MustCompile("^- `([a-z0-9/_-]+)` — ")
	treeLine   = regexp.MustCompile(`^([a-z]+)/ +\S`)
	acrossLine = regexp.MustCompile("^- `([a-z0-9_-]+)` imports `([a-z0-9/_-]+)`: ")
	quoted     = regexp.MustCompile("`([^`]+)`")
)

// readArch reads the document: its tree, the table under "## The layers"
// (| layer | directories | what it is |, the highest layer first), the
// imports across one layer listed after the table, and the package
// lines. A table that is missing, or names a directory twice, is an
// error: the test would otherwise check nothing.
func readArch(r io.Reader) (*arch, error) {
	a := &arch{rank: map[string]int{}, across: map[[2]string]bool{}}
	var rows [][]string
	sc := bufio.NewScanner(r)
	inTree, inLayers := false, false
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		switch {
		case strings.HasPrefix(text, "```"):
			inTree = !inTree
		case inTree:
			if m := treeLine.FindStringSubmatch(text); m != nil {
				a.tree = append(a.tree, m[1])
			}
		case strings.HasPrefix(text, "## "):
			inLayers = text == "## The layers"
		case inLayers && strings.HasPrefix(text, "|"):
			cells := strings.Split(strings.Trim(text, "|"), "|")
			if len(cells) != 3 {
				return nil, fmt.Errorf("line %d: a row of the layers' table has %d cells, want 3 (layer, directories, what it is)", n, len(cells))
			}
			if strings.TrimSpace(cells[0]) == "layer" || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
				continue
			}
			var dirs []string
			for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
				dirs = append(dirs, m[1])
			}
			if len(dirs) == 0 {
				return nil, fmt.Errorf("line %d: layer %s names no directory", n, strings.TrimSpace(cells[0]))
			}
			rows = append(rows, dirs)
		case inLayers && acrossLine.MatchString(text):
			m := acrossLine.FindStringSubmatch(text)
			a.across[[2]string{m[1], m[2]}] = true
		case pkgLine.MatchString(text):
			a.pkgs = append(a.pkgs, pkgLine.FindStringSubmatch(text)[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf(`no layers' table under "## The layers"`)
	}
	for i, dirs := range rows {
		for _, d := range dirs {
			if _, ok := a.rank[d]; ok {
				return nil, fmt.Errorf("directory %s is in two layers", d)
			}
			a.rank[d] = len(rows) - i
		}
	}
	for pair := range a.across {
		from, to := pair[0], strings.Split(pair[1], "/")[0]
		if a.rank[from] == 0 || a.rank[from] != a.rank[to] {
			return nil, fmt.Errorf("%s imports %s: the list allows imports within one layer only", pair[0], pair[1])
		}
	}
	return a, nil
}

// TestArchitectureDoc keeps docs/architecture.md true: every Go package has
// its line and no line names a package that is gone; the tree names every
// top-level Go directory, at most a dozen, each a layer of the table; and
// every import goes down the table, stays in its directory, or is one the
// document allows across a layer.
func TestArchitectureDoc(t *testing.T) {
	pkgs := goPackages(t)
	f, err := os.Open("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := readArch(f)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	for p := range pkgs {
		if !slices.Contains(a.pkgs, p) {
			t.Errorf("package %s has no line in docs/architecture.md", p)
		}
	}
	for _, p := range a.pkgs {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("docs/architecture.md names %s, which is no package", p)
		}
	}
	tops := map[string]bool{}
	for p := range pkgs {
		tops[strings.Split(p, "/")[0]] = true
	}
	for top := range tops {
		if !slices.Contains(a.tree, top) {
			t.Errorf("top-level Go directory %s/ is not in docs/architecture.md's tree", top)
		}
		if _, ok := a.rank[top]; !ok {
			t.Errorf("top-level Go directory %s/ is in no layer of docs/architecture.md's table", top)
		}
	}
	for d := range a.rank {
		if !tops[d] {
			t.Errorf("docs/architecture.md's layers name %s/, which holds no Go package", d)
		}
	}
	if len(tops) > 12 {
		t.Errorf("%d top-level Go directories, want at most a dozen", len(tops))
	}
	for p, imports := range pkgs {
		from := strings.Split(p, "/")[0]
		for _, i := range imports {
			to := strings.Split(i, "/")[0]
			if to == from || a.rank[to] < a.rank[from] || a.across[[2]string{from, i}] {
				continue
			}
			t.Errorf("%s imports %s: %s/ is not below %s/ in docs/architecture.md's layers", p, i, to, from)
		}
	}
}

// TestReadArch: the document's parts as the test reads them, and the
// documents it refuses.
func TestReadArch(t *testing.T) {
	const table = "## The layers\n\n| layer | directories | what it is |\n|---|---|---|\n" +
		"| wiring | `cmd` | flags |\n| doors | `docker`, `compose` | the doors |\n| helpers | `internal` | helpers |\n"
	for _, tc := range []struct {
		name, doc string
		rank      map[string]int
		across    [][2]string
		err       string
	}{
		{name: "the table's rows, highest first", doc: table,
			rank: map[string]int{"cmd": 3, "docker": 2, "compose": 2, "internal": 1}},
		{name: "an import allowed across a layer", doc: table + "\n- `compose` imports `docker/translate`: a service is a container.\n",
			rank:   map[string]int{"cmd": 3, "docker": 2, "compose": 2, "internal": 1},
			across: [][2]string{{"compose", "docker/translate"}}},
		{name: "no table", doc: "# Architecture\n\n- `oci` — the decision.\n", err: "no layers' table"},
		{name: "a directory in two layers", doc: table + "| more | `cmd` | again |\n", err: "directory cmd is in two layers"},
		{name: "a row without directories", doc: table + "| empty | none | nothing |\n", err: "layer empty names no directory"},
		{name: "an allowance that climbs", doc: table + "\n- `internal` imports `cmd/x`: no.\n", err: "within one layer only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := readArch(strings.NewReader(tc.doc))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(a.rank) != fmt.Sprint(tc.rank) {
				t.Errorf("ranks %v, want %v", a.rank, tc.rank)
			}
			for _, p := range tc.across {
				if !a.across[p] {
					t.Errorf("%s imports %s not allowed", p[0], p[1])
				}
			}
		})
	}
}
