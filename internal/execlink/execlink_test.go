package execlink

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinks: a link is made, left alone when it points at the target,
// pointed at the target when it points elsewhere, never over a file that
// is not a link; a dry run changes nothing; uninstall removes links only.
func TestLinks(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "gpurun")
	if err := os.WriteFile(target, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "bin")
	var out bytes.Buffer
	l := Links{What: "test plugin", Dir: dir, Names: []string{"a", "b"}, Target: target, Out: &out}
	linked := func(name string) string {
		p, _ := os.Readlink(filepath.Join(dir, name))
		return p
	}
	steps := []struct {
		name   string
		before func()
		run    func() error
		err    string // a part of the error, "" for none
		out    string // a part of what it printed
		check  func() bool
	}{
		{name: "dry run", run: l.dry().Install, out: "would link " + filepath.Join(dir, "a"),
			check: func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }},
		{name: "install", run: l.Install, out: "link " + filepath.Join(dir, "b") + " -> " + target,
			check: func() bool { return linked("a") == target && linked("b") == target }},
		{name: "again", run: l.Install, out: "already installed", check: func() bool { return linked("a") == target }},
		{name: "a link elsewhere", before: func() { os.Remove(filepath.Join(dir, "a")); os.Symlink("/old/gpurun", filepath.Join(dir, "a")) },
			run: l.Install, out: "(was -> /old/gpurun)", check: func() bool { return linked("a") == target }},
		{name: "a file of the user's", before: func() { os.Remove(filepath.Join(dir, "b")); os.WriteFile(filepath.Join(dir, "b"), []byte("x"), 0o755) },
			run: l.Install, err: "exists and is not a symbolic link", check: func() bool { return linked("b") == "" }},
		{name: "uninstall leaves the user's file", run: l.Uninstall, err: "is not a symbolic link; left alone",
			check: func() bool { _, err := os.Lstat(filepath.Join(dir, "b")); return err == nil }},
		{name: "uninstall", before: func() { os.Remove(filepath.Join(dir, "b")) }, run: l.Uninstall, out: filepath.Join(dir, "b") + ": not installed",
			check: func() bool { _, err := os.Lstat(filepath.Join(dir, "a")); return os.IsNotExist(err) }},
		{name: "a relative target", run: Links{What: "test plugin", Dir: dir, Names: []string{"a"}, Target: "gpurun", Out: &out}.Install, err: "is not an absolute path"},
		{name: "a target that is no executable", run: Links{What: "test plugin", Dir: dir, Names: []string{"a"}, Target: base, Out: &out}.Install, err: "is not an executable file"},
	}
	for _, s := range steps {
		out.Reset()
		if s.before != nil {
			s.before()
		}
		err := s.run()
		if s.err == "" && err != nil || s.err != "" && (err == nil || !strings.Contains(err.Error(), s.err) || !strings.HasPrefix(err.Error(), "test plugin: ")) {
			t.Errorf("%s: error %v, want one saying %q", s.name, err, s.err)
		}
		if !strings.Contains(out.String(), s.out) {
			t.Errorf("%s: printed %q, want %q", s.name, out.String(), s.out)
		}
		if s.check != nil && !s.check() {
			t.Errorf("%s: not as it should be afterwards (printed %q)", s.name, out.String())
		}
	}
}

// dry is l as a dry run.
func (l Links) dry() Links {
	l.DryRun = true
	return l
}
