package yamledit

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// FuzzInsertFirst adds "shm_size: 8gb" to every service mapping of any
// input that parses and checks, independently of Apply's own check, that
// the result parses and differs from the input only by inserted text.
func FuzzInsertFirst(f *testing.F) {
	for _, s := range []string{
		"services:\n  gpu:\n    image: x\n",
		"services:\r\n  a: &a\r\n    image: x\r\n  b:\r\n    <<: *a\r\n",
		"services: {gpu: {image: x}, cpu: {}}\n",
		"---\nservices:\n  gpu: # c\n    # d\n    image: x\n...\n---\nservices:\n  x:\n    !!map\n    a: 1\n",
		"services:\n  \"g\":\n   image: x",
		"x: &s\n  gpu:\n    image: x\nservices: *s\n",
	} {
		f.Add([]byte(s))
	}
	_ = filepath.WalkDir("../testdata", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yml") || strings.HasSuffix(path, ".yaml")) {
			if b, err := os.ReadFile(path); err == nil {
				f.Add(b)
			}
		}
		return nil
	})
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse("f.yml", src)
		if err != nil {
			return
		}
		var edits []Edit
		seen := map[*yaml.Node]bool{}
		for _, doc := range file.Docs {
			if len(doc.Content) == 0 {
				continue
			}
			_, services := Get(doc.Content[0], "services")
			services = Resolve(services)
			if services == nil || services.Kind != yaml.MappingNode {
				continue
			}
			for i := 0; i+1 < len(services.Content); i += 2 {
				k, v := services.Content[i], Resolve(services.Content[i+1])
				if IsMergeKey(k) || v == nil || v.Kind != yaml.MappingNode || seen[v] {
					continue
				}
				if own, _ := Get(v, "shm_size"); own != nil {
					continue
				}
				e, err := file.InsertFirst(k, v, "shm_size", "8gb")
				if err != nil {
					continue
				}
				seen[v] = true
				edits = append(edits, e)
			}
		}
		out, err := file.Apply(edits)
		if err != nil {
			t.Fatalf("Apply: %v\ninput: %q", err, src)
		}
		if _, err := Parse("out.yml", out); err != nil {
			t.Fatalf("output does not parse: %v\ninput: %q\noutput: %q", err, src, out)
		}
		added := 0
		for _, e := range edits {
			if e.Delete != 0 || !strings.Contains(e.Text, "shm_size: 8gb") {
				t.Fatalf("edit %+v is not an insertion of shm_size", e)
			}
			added += len(e.Text)
		}
		if len(out) != len(src)+added || !isSubsequence(src, out) {
			t.Fatalf("output is not the input plus insertions\ninput: %q\noutput: %q", src, out)
		}
	})
}

// isSubsequence reports whether a's bytes appear in b in order.
func isSubsequence(a, b []byte) bool {
	for _, c := range a {
		i := bytes.IndexByte(b, c)
		if i < 0 {
			return false
		}
		b = b[i+1:]
	}
	return true
}
