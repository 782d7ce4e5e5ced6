package specfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWalkKeys(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
	}{
		{"plain", `{"mounts": [{"destination": "/dev/shm", "options": ["a", "b"]}], "annotations": {"a": "1", "A": "2"}, "linux": {"sysctl": {"k": "v", "K": "w"}}}`, ""},
		{"nested values end", `{"a": {"b": {"c": 1}}, "d": [1, {"e": 2}, "x"], "f": "g"}`, ""},
		{"two mounts", `{"mounts": [], "mounts": []}`, `key "mounts" twice`},
		{"case-folded mounts", `{"mounts": [], "Mounts": []}`, `ambiguous keys "mounts" and "Mounts"`},
		{"long s", `{"annotations": {}, "annotationſ": {}}`, `ambiguous keys`},
		{"dup in a map", `{"annotations": {"io.kubernetes.cri.sandbox-id": "a", "io.kubernetes.cri.sandbox-id": "b"}}`, `twice`},
		{"dup in a mount", `{"mounts": [{"source": "/a", "Source": "/b"}]}`, `ambiguous keys`},
		{"a key equal to a value", `{"a": "b", "b": "a"}`, ""},
		{"dup in the memory limit gpurun reads", `{"linux": {"resources": {"memory": {"limit": 1, "Limit": 2}}}}`, `ambiguous keys`},
		{"dup in a device", `{"linux": {"devices": [{"path": "/dev/nvidia0", "Path": "/dev/nvidia1"}]}}`, `ambiguous keys`},
		{"two linux objects", `{"linux": {}, "Linux": {}}`, `ambiguous keys`},
		{"dup in a hook", `{"hooks": {"prestart": [{"path": "/a", "path": "/b"}]}}`, `twice`},
		// Parts gpurun does not read are runc's to check.
		{"dup in seccomp, not read", `{"linux": {"seccomp": {"defaultAction": "a", "DefaultAction": "b"}}, "mounts": []}`, ""},
		{"dup in cpu resources, not read", `{"linux": {"resources": {"cpu": {"shares": 1, "Shares": 2}, "memory": {"limit": 1}}}}`, ""},
		{"dup at the top is checked whatever the key", `{"hostname": "a", "Hostname": "b"}`, `ambiguous keys`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := walk([]byte(tc.doc))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("walk(%s) = %v, want %q", tc.doc, err, tc.err)
			}
		})
	}
}

// Parse decodes only the parts walk copies out: for every captured
// config.json and for documents that spell, nest or leave out those parts
// oddly, the spec is the one decoding the whole document gives, and the
// document is written back byte for byte.
func TestProjectionMatchesDocument(t *testing.T) {
	docs := map[string]string{
		"future spec":           futureSpec,
		"keys spelt otherwise":  `{"Mounts": [{"Destination": "/dev/shm", "TYPE": "tmpfs"}], "LINUX": {"Resources": {"Memory": {"Limit": 5}, "cpu": {"shares": 2}}, "seccomp": {"x": [1, {"y": 2}]}}, "Process": {"Env": ["A=1"]}}`,
		"nulls":                 `{"linux": null, "mounts": null, "process": null, "hooks": null, "root": null, "annotations": null}`,
		"linux parts null":      `{"linux": {"resources": null, "devices": null, "namespaces": null}}`,
		"memory null":           `{"linux": {"resources": {"memory": null}}}`,
		"escaped keys":          `{"mo\u0075nts": [{"destination": "/dev/shm"}], "a\"b": 1, "linu\u0078": {"devi\u0063es": [{"path": "/dev/nvidia0"}]}}`,
		"white space and order": "{\n\t\"annotations\" :\t{\"a\": \"1\"} ,\r\n \"ociVersion\":\"1.2.0\"  , \"hooks\" : {\"prestart\": [{\"path\": \"/h\"}], \"poststart\": []}\n}\n",
		"empty":                 `{}`,
	}
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtureDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.Base(f)] = string(data)
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(name, []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			assertProjection(t, []byte(doc), c)
			if out := mustConfigJSON(t, c); string(out) != doc {
				t.Errorf("unchanged document written back as\n%s", out)
			}
		})
	}
}
