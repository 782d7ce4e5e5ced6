package specfile

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// A spec with fields the runtime-spec module does not know, at the top
// level, inside a mount and inside linux, plus strings JSON would escape.
const futureSpec = `{
  "ociVersion": "1.9.0",
  "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "URL=a<b>&c"], "args": ["sh"], "cwd": "/", "futureProcessField": [1,2]},
  "root": {"path": "rootfs"},
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid","noexec","nodev","mode=1777","size=67108864"], "uidMappings": [], "futureMountField": {"x": 1}}
  ],
  "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}], "futureLinuxField": 12345678901234567890},
  "futureTopLevel": {"nested": [true, null, 1.5e300]}
}`

func mustParse(t *testing.T, data string) *Config {
	t.Helper()
	c, err := Parse("config.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// generic decodes JSON into plain values, for comparing documents.
func generic(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

func TestApplyKeepsUnknownFields(t *testing.T) {
	for _, action := range []oci.Action{oci.ActionSetSize, oci.ActionInject, oci.ActionIPCHost, oci.ActionNone, oci.ActionRemount} {
		t.Run(string(action), func(t *testing.T) {
			c := mustParse(t, futureSpec)
			sh := oci.ClassifyShm(c.Spec, 0)
			if _, err := c.Apply(oci.Plan{Action: action, Size: 2 * policy.GiB, Shm: sh}); err != nil {
				t.Fatal(err)
			}
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			// What a plan does not change keeps its bytes, spacing included.
			if (action == oci.ActionNone || action == oci.ActionRemount) && string(out) != futureSpec {
				t.Errorf("%s changed the document:\n%s", action, out)
			}
			for _, line := range strings.Split(futureSpec, "\n") {
				if strings.Contains(line, `"process"`) || strings.Contains(line, `"futureTopLevel"`) || action != oci.ActionIPCHost && strings.Contains(line, `"linux"`) {
					if !strings.Contains(string(out), strings.TrimSpace(line)) {
						t.Errorf("%s: line %s not kept as it was:\n%s", action, strings.TrimSpace(line), out)
					}
				}
			}
			got := generic(t, out)
			var compact bytes.Buffer
			if err := json.Compact(&compact, out); err != nil {
				t.Fatal(err)
			}
			out = compact.Bytes()
			if got["futureTopLevel"] == nil || got["ociVersion"] != "1.9.0" {
				t.Errorf("top-level fields lost: %s", out)
			}
			if !strings.Contains(string(out), `"futureLinuxField":12345678901234567890`) {
				t.Errorf("big number not kept exactly: %s", out)
			}
			if !strings.Contains(string(out), `"futureProcessField":[1,2]`) || !strings.Contains(string(out), `a<b>&c`) {
				t.Errorf("process fields changed: %s", out)
			}
			if !strings.Contains(string(out), `1.5e300`) {
				t.Errorf("float not kept: %s", out)
			}
			if action != oci.ActionIPCHost && !strings.Contains(string(out), `"futureMountField":{"x":1}`) {
				t.Errorf("mount field lost: %s", out)
			}
			// The result parses again, and the typed spec agrees with the bytes.
			again := mustParse(t, string(out))
			if len(again.Spec.Mounts) != len(c.Spec.Mounts) {
				t.Errorf("typed spec has %d mounts, bytes %d", len(c.Spec.Mounts), len(again.Spec.Mounts))
			}
		})
	}
}

func TestApplyEffects(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		action oci.Action
		size   int64
		check  func(t *testing.T, c *Config)
	}{
		{"set-size keeps Docker's byte style", futureSpec, oci.ActionSetSize, 2 * policy.GiB, func(t *testing.T, c *Config) {
			sh := oci.ClassifyShm(c.Spec, 0)
			if sh.Size != 2*policy.GiB || sh.Kind != oci.ShmPrivate {
				t.Errorf("after set-size: %+v", sh)
			}
			if opt := c.Spec.Mounts[1].Options[4]; opt != "size=2147483648" {
				t.Errorf("size option = %q", opt)
			}
		}},
		{"set-size keeps containerd's KiB style", strings.Replace(futureSpec, "size=67108864", "size=65536k", 1), oci.ActionSetSize, policy.GiB, func(t *testing.T, c *Config) {
			if opt := c.Spec.Mounts[1].Options[4]; opt != "size=1048576k" {
				t.Errorf("size option = %q", opt)
			}
		}},
		{"set-size adds a missing option", strings.Replace(futureSpec, `,"size=67108864"`, "", 1), oci.ActionSetSize, policy.GiB, func(t *testing.T, c *Config) {
			if got := oci.ClassifyShm(c.Spec, 0).Size; got != policy.GiB {
				t.Errorf("size = %d", got)
			}
		}},
		{"inject", `{"ociVersion":"1.0.2","mounts":[{"destination":"/dev","type":"tmpfs","source":"tmpfs"}]}`, oci.ActionInject, 4 * policy.GiB, func(t *testing.T, c *Config) {
			sh := oci.ClassifyShm(c.Spec, 0)
			if sh.Kind != oci.ShmPrivate || sh.Size != 4*policy.GiB || sh.Index != 1 {
				t.Errorf("after inject: %+v", sh)
			}
		}},
		{"inject without mounts", `{"ociVersion":"1.0.2"}`, oci.ActionInject, policy.GiB, func(t *testing.T, c *Config) {
			if sh := oci.ClassifyShm(c.Spec, 0); sh.Kind != oci.ShmPrivate {
				t.Errorf("after inject: %+v", sh)
			}
		}},
		{"ipc-host", futureSpec, oci.ActionIPCHost, 0, func(t *testing.T, c *Config) {
			if sh := oci.ClassifyShm(c.Spec, 0); sh.Kind != oci.ShmHost {
				t.Errorf("after ipc-host: %+v", sh)
			}
			if oci.HasPrivateIPC(c.Spec) {
				t.Errorf("still a private IPC namespace: %+v", c.Spec.Linux.Namespaces)
			}
			if len(c.Spec.Linux.Namespaces) != 2 {
				t.Errorf("namespaces = %+v", c.Spec.Linux.Namespaces)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.spec)
			changed, err := c.Apply(oci.Plan{Action: tt.action, Size: tt.size, Shm: oci.ClassifyShm(c.Spec, 0)})
			if err != nil || !changed {
				t.Fatalf("Apply = %v, %v", changed, err)
			}
			tt.check(t, c)
			// The bytes say the same as the typed spec.
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, mustParse(t, string(out)))
		})
	}
}

func TestApplyErrors(t *testing.T) {
	c := mustParse(t, `{"ociVersion":"1.0.2"}`)
	if _, err := c.Apply(oci.Plan{Action: oci.ActionSetSize, Size: 1, Shm: oci.Shm{Index: 3}}); err == nil {
		t.Error("set-size without a mount: no error")
	}
	if _, err := c.Apply(oci.Plan{Action: oci.ActionIPCHost, Shm: oci.Shm{Index: -1}}); err == nil {
		t.Error("ipc-host without linux: no error")
	}
	if _, err := c.Apply(oci.Plan{Action: "explode"}); err == nil {
		t.Error("unknown action: no error")
	}
	if out, _ := c.Marshal(); string(out) != `{"ociVersion":"1.0.2"}` {
		t.Errorf("failed applies changed the document: %s", out)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"syntax", "{\n  \"mounts\": [,]\n}", "parse config.json: malformed JSON at offset 15 (line 2, column 14)"},
		{"truncated", `{"mounts": [`, "malformed JSON at offset 12 (line 1, column 13): unexpected end"},
		{"wrong type", "{\"mounts\": {\"a\": 1}}", "field mounts at offset"},
		{"not an object", "[1]", "parse config.json"},
		{"null", "null", "not a JSON object"},
		{"empty", "", "malformed JSON at offset 0 (line 1, column 1): unexpected end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("config.json", []byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := Load("/nonexistent/config.json"); err == nil || !strings.Contains(err.Error(), "/nonexistent/config.json") {
		t.Errorf("missing file error = %v", err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(futureSpec), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(oci.Plan{Action: oci.ActionSetSize, Size: policy.GiB, Shm: oci.ClassifyShm(c.Spec, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600 kept", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := oci.ClassifyShm(back.Spec, 0).Size; got != policy.GiB {
		t.Errorf("size on disk = %d", got)
	}
	// A directory that cannot be written: an error naming the file, and
	// the old file untouched.
	if err := atomicfile.Write(filepath.Join(dir, "missing", "config.json"), []byte("{}"), 0o644); err == nil || !strings.Contains(err.Error(), "missing/config.json") {
		t.Errorf("error = %v", err)
	}
}

// Go's encoding/json, and so runc, decodes keys case-insensitively: an edit
// must land on the key runc reads, and two spellings of one key are refused.
func TestApplyCaseFoldedKeys(t *testing.T) {
	doc := `{"Mounts":[{"Destination":"/dev/shm","Type":"tmpfs","Source":"shm","Options":["size=65536k"]}],"Linux":{"Namespaces":[{"Type":"ipc"},{"Type":"pid"}]}}`
	for _, a := range []oci.Action{oci.ActionSetSize, oci.ActionIPCHost} {
		c := mustParse(t, doc)
		if _, err := c.Apply(oci.Plan{Action: a, Size: policy.GiB, Shm: oci.ClassifyShm(c.Spec, 0)}); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		out, _ := c.Marshal()
		if strings.Contains(string(out), `"mounts"`) || strings.Contains(string(out), `"linux"`) {
			t.Errorf("%s wrote a second spelling: %s", a, out)
		}
		again := mustParse(t, string(out))
		sh := oci.ClassifyShm(again.Spec, 0)
		if a == oci.ActionSetSize && sh.Size != policy.GiB {
			t.Errorf("set-size did not reach the decoded spec: %s", out)
		}
		if a == oci.ActionIPCHost && (sh.Kind != oci.ShmHost || oci.HasPrivateIPC(again.Spec) || len(again.Spec.Linux.Namespaces) != 1) {
			t.Errorf("ipc-host did not reach the decoded spec: %s", out)
		}
	}
	// runc takes the last spelling in the document; gpurun cannot tell
	// which the engine meant, so it refuses the document.
	for _, doc := range []string{
		`{"mounts":[],"Mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm"}]}`,
		`{"MOUNTS":[],"Mounts":[]}`,
	} {
		if _, err := Parse("config.json", []byte(doc)); err == nil || !strings.Contains(err.Error(), "ambiguous") {
			t.Errorf("%s: error = %v", doc, err)
		}
	}
}

// Apply rewrites only the bytes it must: the /dev/shm mount's options (or
// a new options member, or a new mount), wherever and however the engine
// wrote them.
func TestApplySplices(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		action    oci.Action
		want      string
	}{
		{"options replaced", "{\"mounts\": [\n {\"destination\": \"/proc\"},\n {\"destination\": \"/dev/shm\", \"type\": \"tmpfs\", \"options\": [\"nosuid\", \"size=65536k\"], \"x\": 1}\n]}\n",
			oci.ActionSetSize, "{\"mounts\": [\n {\"destination\": \"/proc\"},\n {\"destination\": \"/dev/shm\", \"type\": \"tmpfs\", \"options\": [\"nosuid\",\"size=1048576k\"], \"x\": 1}\n]}\n"},
		{"Options spelt otherwise", `{"mounts":[{"Destination":"/dev/shm","TYPE":"tmpfs","Options":["size=64m"]}]}`,
			oci.ActionSetSize, `{"mounts":[{"Destination":"/dev/shm","TYPE":"tmpfs","Options":["size=1073741824"]}]}`},
		{"no options", `{"mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm"}]}`,
			oci.ActionSetSize, `{"mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["size=1073741824"]}]}`},
		{"inject after the others", `{"mounts": [{"destination": "/proc"}] }`,
			oci.ActionInject, `{"mounts": [{"destination": "/proc"},{"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["nosuid","noexec","nodev","mode=1777","size=1073741824"]}] }`},
		{"inject into an empty list", `{"mounts": [ ] }`,
			oci.ActionInject, `{"mounts": [ {"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["nosuid","noexec","nodev","mode=1777","size=1073741824"]}] }`},
		{"inject into null", `{"mounts":null}`,
			oci.ActionInject, `{"mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["nosuid","noexec","nodev","mode=1777","size=1073741824"]}]}`},
		{"inject without mounts", "{\"ociVersion\": \"1.2.0\"}\n",
			oci.ActionInject, "{\"ociVersion\": \"1.2.0\",\"mounts\":[{\"destination\":\"/dev/shm\",\"type\":\"tmpfs\",\"source\":\"shm\",\"options\":[\"nosuid\",\"noexec\",\"nodev\",\"mode=1777\",\"size=1073741824\"]}]}\n"},
		{"ipc-host", `{"mounts": [{"destination":"/dev/shm","type":"tmpfs","options":["size=64m"]}], "linux": {"x": 1, "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}], "y": [2]}}`,
			oci.ActionIPCHost, `{"mounts": [{"destination":"/dev/shm","type":"bind","source":"/dev/shm","options":["rbind","rprivate","nosuid","nodev","noexec"]}], "linux": {"x": 1, "namespaces": [{"type": "pid"},{"type": "mount"}], "y": [2]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.doc)
			sh := oci.ClassifyShm(c.Spec, 0)
			if _, err := c.Apply(oci.Plan{Action: tc.action, Size: policy.GiB, Shm: sh}); err != nil {
				t.Fatal(err)
			}
			out := mustConfigJSON(t, c)
			if string(out) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", out, tc.want)
			}
			if tc.action == oci.ActionIPCHost {
				return
			}
			if got := oci.ClassifyShm(mustParse(t, string(out)).Spec, 0).Size; got != policy.GiB {
				t.Errorf("the rewritten spec's /dev/shm is %d bytes", got)
			}
		})
	}
}
