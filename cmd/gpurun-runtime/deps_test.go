package main

import (
	"os/exec"
	"strings"
	"testing"
)

// slowToStart are standard packages (each with its subpackages) that
// gpurun-runtime, which every container start of a node runs, does not
// link: crypto's init and its FIPS module, and the network stack, would
// add to each start what the shim's budget (×1.05 of runc's CPU time,
// BenchmarkRuntimeShimRuncRun) has no room for.
var slowToStart = []string{"crypto", "net", "compress", "html", "text/template"}

// TestRuntimeImportGraph fails when gpurun-runtime links one of
// slowToStart: a helper it shares with the other commands has picked one
// up (a hash, an HTTP client); give that helper a package of its own.
func TestRuntimeImportGraph(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the import graph: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, slow := range slowToStart {
			if pkg == slow || strings.HasPrefix(pkg, slow+"/") {
				t.Errorf("gpurun-runtime links %s", pkg)
			}
		}
	}
}
