package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlPlugin: links to the target, a link to another gpurun
// repointed, a file that is not a link left alone (install and
// uninstall refuse it), a target that is not executable refused.
func TestKubectlPlugin(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "gpurun")
	other := filepath.Join(dir, "old-gpurun")
	for _, p := range []string{target, other} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(bin, KubectlPluginFile)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := KubectlPlugin{Dir: bin, Target: target, Out: &out}
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(was -> "+other+")") {
		t.Errorf("the old link's repointing not said:\n%s", out.String())
	}
	for _, l := range p.Paths() {
		if got, err := os.Readlink(l); err != nil || got != target {
			t.Errorf("%s -> %q %v", l, got, err)
		}
	}
	if err := p.Uninstall(); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(bin, KubectlCompleteFile)
	if err := os.WriteFile(plain, []byte("mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.Install(); err == nil || !strings.Contains(err.Error(), "is not a symbolic link") {
		t.Errorf("install over a file: %v", err)
	}
	if err := p.Uninstall(); err == nil || !strings.Contains(err.Error(), "left alone") {
		t.Errorf("uninstall of a file: %v", err)
	}
	if data, _ := os.ReadFile(plain); string(data) != "mine" {
		t.Errorf("the file was changed: %q", data)
	}
	if err := os.Chmod(other, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (KubectlPlugin{Dir: bin, Target: other, Out: &out}).Install(); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("a target that is not executable: %v", err)
	}
}
