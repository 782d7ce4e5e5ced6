package oci

import (
	"strings"
	"testing"
)

func TestCheckKeys(t *testing.T) {
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
			err := checkKeys([]byte(tc.doc))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("checkKeys(%s) = %v, want %q", tc.doc, err, tc.err)
			}
		})
	}
}
