package compose

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDiffHeaders checks every hunk of Diff against both files: the lines
// a hunk says it holds are there, at the lines its header names, on both
// sides (go-udiff v0.4.1 numbers the new side wrong after a hunk with
// unchanged lines inside).
func TestDiffHeaders(t *testing.T) {
	header := regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@`)
	for _, file := range corpusFiles(t) {
		res, err := Migrate(context.Background(), Options{Paths: []string{file}})
		if err != nil {
			t.Fatal(err)
		}
		f := res.Files[0]
		d := f.Diff()
		if !f.Changed() {
			if d != "" {
				t.Errorf("%s: diff of an unchanged file: %q", file, d)
			}
			continue
		}
		oldLines := strings.SplitAfter(string(f.Old), "\n")
		newLines := strings.SplitAfter(string(f.New), "\n")
		var oldAt, newAt int
		for _, line := range strings.SplitAfter(d, "\n") {
			if m := header.FindStringSubmatch(line); m != nil {
				oldAt, _ = strconv.Atoi(m[1])
				newAt, _ = strconv.Atoi(m[3])
				oldAt--
				newAt--
				continue
			}
			if line == "" || strings.HasPrefix(line, "---") || strings.HasPrefix(line, "+++") {
				continue
			}
			body := line[1:]
			switch line[0] {
			case ' ':
				check(t, file, "old", oldLines, oldAt, body)
				check(t, file, "new", newLines, newAt, body)
				oldAt++
				newAt++
			case '-':
				check(t, file, "old", oldLines, oldAt, body)
				oldAt++
			case '+':
				check(t, file, "new", newLines, newAt, body)
				newAt++
			}
		}
	}
}

func check(t *testing.T, file, side string, lines []string, at int, want string) {
	t.Helper()
	if at < 0 || at >= len(lines) || lines[at] != want {
		got := "(none)"
		if at >= 0 && at < len(lines) {
			got = lines[at]
		}
		t.Errorf("%s: diff says %s line %d is %q, it is %q", file, side, at+1, want, got)
	}
}

func TestWrite(t *testing.T) {
	dir := writeTree(t, map[string]string{"real/compose.yaml": gpuService})
	real := filepath.Join(dir, "real", "compose.yaml")
	if err := os.Chmod(real, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "compose.yaml")
	if err := os.Symlink(filepath.Join("real", "compose.yaml"), link); err != nil {
		t.Fatal(err)
	}
	res, err := Migrate(context.Background(), Options{WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Write(true); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(real)
	if string(got) != string(res.Files[0].New) {
		t.Errorf("written %q, want %q", got, res.Files[0].New)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi.Mode(), err)
	}
	if fi, _ := os.Stat(real); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	if bak, _ := os.ReadFile(real + ".bak"); string(bak) != gpuService {
		t.Errorf("backup %q, want the original", bak)
	}
	// The written project is migrated: a second run, even with another
	// size, changes nothing.
	res, err = Migrate(context.Background(), Options{WorkDir: dir, Size: 2 << 30, Files: []string{"compose.yaml"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed() {
		t.Fatalf("migrated file changes again: %s", res.Files[0].Diff())
	}
}

// TestWriteFailureKeepsOriginal: when the backup cannot be written (a
// directory stands at FILE.bak), the file stays as it was.
func TestWriteFailureKeepsOriginal(t *testing.T) {
	dir := writeTree(t, map[string]string{"compose.yaml": gpuService, "compose.yaml.bak/x": ""})
	res, err := Migrate(context.Background(), Options{WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	err = res.Write(true)
	if err == nil || !strings.Contains(err.Error(), "compose.yaml.bak") {
		t.Fatalf("Write = %v, want an error naming the backup", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "compose.yaml")); string(got) != gpuService {
		t.Errorf("the original changed: %q", got)
	}
	// A file changed between Migrate and Write is refused.
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(gpuService+"# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := res.Write(false); err == nil || !strings.Contains(err.Error(), "changed since") {
		t.Errorf("Write over an edited file = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".gpurun-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}
