package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of the core packages may be.
const maxFuncLines = 80

// corePackages are the decision, the translators and the installers
// (issue #40): their functions stay the steps they are, each short enough
// to read at once.
var corePackages = []string{
	"oci", "policy", "policy/remedy",
	"docker/translate", "compose", "kube/podspec",
	"node/install", "engine/containerd", "engine/docker", "engine/hooksd", "engine/crio",
}

// TestCoreFunctionLength fails on a function (or method) of a core
// package, tests aside, longer than maxFuncLines lines from its
// declaration to its closing brace.
func TestCoreFunctionLength(t *testing.T) {
	for _, dir := range corePackages {
		files, err := filepath.Glob(filepath.Join(moduleRoot, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v): update corePackages", dir, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines, more than %d: split it into the steps it is", fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
}
