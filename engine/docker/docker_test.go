package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/unidiff"
)

var dockerUpdate = flag.Bool("update-docker", false, "rewrite the golden files under testdata/docker/golden")

const dockerTestPath = "/usr/local/bin/gpurun-runtime"

func dockerTestOptions(setDefault bool) Options {
	return Options{Name: "gpurun", Path: dockerTestPath, SetAsDefault: setDefault}
}

// dockerGeneric decodes data (blank: {}) keeping numbers as text.
func dockerGeneric(t testing.TB, data []byte) map[string]any {
	t.Helper()
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		return map[string]any{}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", data, err)
	}
	if v == nil {
		t.Fatalf("decode %q: not an object", data)
	}
	return v
}

// dockerTopKeys returns the top-level keys in document order.
func dockerTopKeys(t *testing.T, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("top level: %v %v", tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// dockerWithout returns v less what c says Install added or changed.
func dockerWithout(v map[string]any, name string, c Change) map[string]any {
	out := map[string]any{}
	for k, val := range v {
		out[k] = val
	}
	if c.SetDefault {
		delete(out, "default-runtime")
	}
	if rts, ok := out["runtimes"].(map[string]any); ok && c.AddedRuntime {
		cp := map[string]any{}
		for k, val := range rts {
			if k != name {
				cp[k] = val
			}
		}
		out["runtimes"] = cp
		if c.CreatedRuntimes {
			delete(out, "runtimes")
		}
	}
	return out
}

func TestInstallFiles(t *testing.T) {
	tests := []struct {
		file      string
		chain     string
		canonical bool // install then uninstall gives back the exact bytes
	}{
		{file: "empty.json"},
		{file: "nvidia-ctk-runtime-configure.json", canonical: true},
		{file: "nvidia-ctk-set-as-default.json", chain: "nvidia-container-runtime", canonical: true},
		{file: "nvidia-ctk-set-as-default-over-existing.json", chain: "nvidia-container-runtime", canonical: true},
		{file: "docker-desktop-default.json", canonical: true},
		{file: "dockerd-docs-custom-runtime.json", canonical: true},
		{file: "echo-one-line-registry-mirror.json", canonical: true},
		{file: "many-keys-tabs.json", canonical: true},
		{file: "dockerd-docs-userns-remap.json", canonical: true},
	}
	for _, tt := range tests {
		for _, setDefault := range []bool{false, true} {
			suffix := ".install.json"
			if setDefault {
				suffix = ".install-default.json"
			}
			t.Run(strings.TrimSuffix(tt.file, ".json")+suffix, func(t *testing.T) {
				in, err := os.ReadFile(filepath.Join("testdata", tt.file))
				if err != nil {
					t.Fatal(err)
				}
				o := dockerTestOptions(setDefault)
				out, c, err := Install(in, o)
				if err != nil {
					t.Fatalf("Install: %v", err)
				}

				golden := filepath.Join("testdata", "golden", strings.TrimSuffix(tt.file, ".json")+suffix)
				if *dockerUpdate {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, out, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run with -update-docker to create)", err)
				}
				if !bytes.Equal(out, want) {
					t.Errorf("install output differs from %s:\n%s", golden, unidiff.Unified(golden, want, out))
				}

				if !c.Changed || !c.AddedRuntime {
					t.Errorf("change = %+v, want Changed and AddedRuntime", c)
				}
				if c.Chain != tt.chain {
					t.Errorf("Chain = %q, want %q", c.Chain, tt.chain)
				}
				if !bytes.HasSuffix(out, []byte("\n")) {
					t.Errorf("output does not end with a newline")
				}

				// Ours is there.
				got := dockerGeneric(t, out)
				rt := got["runtimes"].(map[string]any)["gpurun"].(map[string]any)
				if rt["path"] != dockerTestPath || len(rt) != 1 {
					t.Errorf("runtimes.gpurun = %v", rt)
				}
				if setDefault && got["default-runtime"] != "gpurun" {
					t.Errorf("default-runtime = %v", got["default-runtime"])
				}
				if !setDefault && c.SetDefault {
					t.Errorf("SetDefault without SetAsDefault")
				}

				// Everything else survives, and in the same order.
				before := dockerGeneric(t, in)
				if a, b := dockerWithout(before, "gpurun", c), dockerWithout(got, "gpurun", c); !reflect.DeepEqual(a, b) {
					t.Errorf("other settings changed:\nbefore %v\nafter  %v", a, b)
				}
				if len(bytes.TrimSpace(in)) > 0 {
					keysBefore, keysAfter := dockerTopKeys(t, in), dockerTopKeys(t, out)
					if !slices.Equal(keysAfter[:len(keysBefore)], keysBefore) {
						t.Errorf("key order: before %v, after %v", keysBefore, keysAfter)
					}
				}

				// Idempotent.
				again, c2, err := Install(out, o)
				if err != nil {
					t.Fatalf("second Install: %v", err)
				}
				if !bytes.Equal(again, out) || c2.Changed || c2.AddedRuntime || c2.SetDefault {
					t.Errorf("second install changed something: %+v\n%s", c2, unidiff.Unified("daemon.json", out, again))
				}

				// Undone exactly.
				back, changed, err := Uninstall(out, o, c)
				if err != nil {
					t.Fatalf("Uninstall: %v", err)
				}
				if !changed {
					t.Errorf("Uninstall reported no change")
				}
				if tt.canonical && !bytes.Equal(back, in) {
					t.Errorf("uninstall did not give back the original:\n%s", unidiff.Unified(tt.file, in, back))
				}
				if !reflect.DeepEqual(dockerGeneric(t, back), before) {
					t.Errorf("uninstall: %s does not decode to the original", back)
				}
				back2, changed, err := Uninstall(back, o, c)
				if err != nil || changed || !bytes.Equal(back2, back) {
					t.Errorf("second uninstall: changed=%v err=%v\n%s", changed, err, unidiff.Unified(tt.file, back, back2))
				}
			})
		}
	}
}

func TestInstallLayout(t *testing.T) {
	o := dockerTestOptions(true)
	tests := []struct {
		name string
		in   string
		want string
	}{{
		name: "blank",
		in:   " \n",
		want: "{\n  \"runtimes\": {\n    \"gpurun\": {\n      \"path\": \"/usr/local/bin/gpurun-runtime\"\n    }\n  },\n  \"default-runtime\": \"gpurun\"\n}\n",
	}, {
		name: "empty object on one line",
		in:   "{}",
		want: "{\n  \"runtimes\": {\n    \"gpurun\": {\n      \"path\": \"/usr/local/bin/gpurun-runtime\"\n    }\n  },\n  \"default-runtime\": \"gpurun\"\n}\n",
	}, {
		name: "compact",
		in:   `{"debug":true}`,
		want: `{"debug":true,"runtimes":{"gpurun":{"path":"/usr/local/bin/gpurun-runtime"}},"default-runtime":"gpurun"}` + "\n",
	}, {
		name: "CRLF and four spaces, empty runtimes",
		in:   "{\r\n    \"runtimes\": {},\r\n    \"default-runtime\": \"runc\"\r\n}\r\n",
		want: "{\r\n    \"runtimes\": {\r\n        \"gpurun\": {\r\n            \"path\": \"/usr/local/bin/gpurun-runtime\"\r\n        }\r\n    },\r\n    \"default-runtime\": \"gpurun\"\r\n}\r\n",
	}, {
		name: "one-line runtimes in a multi-line file",
		in:   "{\n\t\"runtimes\": {\"crun\": {\"path\": \"/usr/bin/crun\"}}\n}\n",
		want: "{\n\t\"runtimes\": {\"crun\": {\"path\": \"/usr/bin/crun\"}, \"gpurun\": {\"path\": \"/usr/local/bin/gpurun-runtime\"}},\n\t\"default-runtime\": \"gpurun\"\n}\n",
	}, {
		name: "runtimes null",
		in:   "{\n  \"runtimes\": null,\n  \"log-driver\": \"json-file\"\n}\n",
		want: "{\n  \"runtimes\": {\n    \"gpurun\": {\n      \"path\": \"/usr/local/bin/gpurun-runtime\"\n    }\n  },\n  \"log-driver\": \"json-file\",\n  \"default-runtime\": \"gpurun\"\n}\n",
	}, {
		name: "byte order mark",
		in:   "\xef\xbb\xbf{\n  \"debug\": true\n}\n",
		want: "\xef\xbb\xbf{\n  \"debug\": true,\n  \"runtimes\": {\n    \"gpurun\": {\n      \"path\": \"/usr/local/bin/gpurun-runtime\"\n    }\n  },\n  \"default-runtime\": \"gpurun\"\n}\n",
	}, {
		name: "odd spacing is kept",
		in:   "{ \"debug\" : true ,\n      \"mtu\":1500 }",
		want: "{ \"debug\" : true ,\n      \"mtu\":1500, \"runtimes\" : {\"gpurun\" : {\"path\" : \"/usr/local/bin/gpurun-runtime\"}}, \"default-runtime\" : \"gpurun\" }\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, c, err := Install([]byte(tt.in), o)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Errorf("got:\n%q\nwant:\n%q", out, tt.want)
			}
			back, _, err := Uninstall(out, o, c)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(dockerGeneric(t, back), dockerGeneric(t, []byte(tt.in))) {
				t.Errorf("uninstall gave %q, want the value of %q", back, tt.in)
			}
			if strings.TrimSpace(tt.in) != "" && tt.in != "{}" && string(back) != tt.in {
				t.Errorf("uninstall gave %q, want %q", back, tt.in)
			}
		})
	}
}

func TestInstallRuntimeArgs(t *testing.T) {
	o := Options{Name: "gpurun", Path: dockerTestPath, RuntimeArgs: []string{"--chain", "/usr/bin/nvidia-container-runtime", "<&>"}}
	in := []byte("{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"path\": \"nvidia-container-runtime\"\n        }\n    }\n}\n")
	want := "{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"path\": \"nvidia-container-runtime\"\n        },\n" +
		"        \"gpurun\": {\n            \"path\": \"/usr/local/bin/gpurun-runtime\",\n            \"runtimeArgs\": [\n" +
		"                \"--chain\",\n                \"/usr/bin/nvidia-container-runtime\",\n                \"<&>\"\n            ]\n        }\n    }\n}\n"
	out, c, err := Install(in, o)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	// Other args: the entry is replaced, and uninstall puts the old one back.
	o2 := o
	o2.RuntimeArgs = []string{"--debug"}
	out2, c2, err := Install(out, o2)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Changed || !c2.AddedRuntime || len(c2.PreviousRuntime) == 0 {
		t.Fatalf("change = %+v", c2)
	}
	back, _, err := Uninstall(out2, o2, c2)
	if err != nil || !bytes.Equal(back, out) {
		t.Errorf("uninstall: %v\n%s", err, unidiff.Unified("daemon.json", out, back))
	}
	back, _, err = Uninstall(back, o, c)
	if err != nil || !bytes.Equal(back, in) {
		t.Errorf("uninstall: %v\n%s", err, unidiff.Unified("daemon.json", in, back))
	}
	// Empty and absent runtimeArgs are the same.
	same := []byte(`{"runtimes": {"gpurun": {"path": "/usr/local/bin/gpurun-runtime", "runtimeArgs": []}}}`)
	if got, c, err := Install(same, dockerTestOptions(false)); err != nil || c.Changed || !bytes.Equal(got, same) {
		t.Errorf("empty runtimeArgs: changed %v, err %v", c.Changed, err)
	}
}

func TestInstallReplacesRuntime(t *testing.T) {
	in := []byte("{\n  \"runtimes\": {\n    \"gpurun\": {\n      \"path\": \"/opt/old/gpurun-runtime\",\n      \"runtimeArgs\": [\"--old\"]\n    },\n    \"nvidia\": {\n      \"path\": \"nvidia-container-runtime\"\n    }\n  }\n}\n")
	o := dockerTestOptions(false)
	out, c, err := Install(in, o)
	if err != nil {
		t.Fatal(err)
	}
	wantPrev := "{\n      \"path\": \"/opt/old/gpurun-runtime\",\n      \"runtimeArgs\": [\"--old\"]\n    }"
	if !c.AddedRuntime || string(c.PreviousRuntime) != wantPrev || c.CreatedRuntimes {
		t.Errorf("change = %+v", c)
	}
	want := "{\n  \"runtimes\": {\n    \"gpurun\": {\n      \"path\": \"/usr/local/bin/gpurun-runtime\"\n    },\n    \"nvidia\": {\n      \"path\": \"nvidia-container-runtime\"\n    }\n  }\n}\n"
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	// The change record survives a JSON round trip (the CLI keeps it).
	rec, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var c2 Change
	if err := json.Unmarshal(rec, &c2); err != nil {
		t.Fatal(err)
	}
	back, changed, err := Uninstall(out, o, c2)
	if err != nil || !changed || !bytes.Equal(back, in) {
		t.Errorf("uninstall (changed %v, err %v):\n%s", changed, err, unidiff.Unified("daemon.json", in, back))
	}
	// A record without a previous runtime stays without one through JSON.
	_, c3, _ := Install(nil, o)
	rec, _ = json.Marshal(c3)
	var c4 Change
	if err := json.Unmarshal(rec, &c4); err != nil || c4.PreviousRuntime != nil || !reflect.DeepEqual(c3, c4) {
		t.Errorf("record %s decodes to %+v", rec, c4)
	}
}

func TestInstallDefault(t *testing.T) {
	o := dockerTestOptions(true)
	t.Run("already ours", func(t *testing.T) {
		in := []byte(`{"default-runtime": "gpurun", "runtimes": {"gpurun": {"path": "/usr/local/bin/gpurun-runtime"}}}`)
		out, c, err := Install(in, o)
		if err != nil || c.Changed || !bytes.Equal(out, in) {
			t.Errorf("got %s, %+v, %v", out, c, err)
		}
	})
	t.Run("default named, runtime missing", func(t *testing.T) {
		in := []byte("{\n  \"default-runtime\": \"gpurun\"\n}\n")
		out, c, err := Install(in, o)
		if err != nil || !c.Changed || c.SetDefault || c.PreviousDefaultSet || c.Chain != "" {
			t.Fatalf("got %+v, %v", c, err)
		}
		back, _, err := Uninstall(out, o, c)
		if err != nil || !bytes.Equal(back, in) {
			t.Errorf("uninstall: %v\n%s", err, unidiff.Unified("daemon.json", in, back))
		}
	})
	t.Run("present but empty", func(t *testing.T) {
		in := []byte("{\n  \"default-runtime\": \"\"\n}\n")
		out, c, err := Install(in, o)
		if err != nil || !c.SetDefault || c.PreviousDefault != "" || !c.PreviousDefaultSet {
			t.Fatalf("got %+v, %v", c, err)
		}
		back, _, err := Uninstall(out, o, c)
		if err != nil || !bytes.Equal(back, in) {
			t.Errorf("uninstall: %v\n%s", err, unidiff.Unified("daemon.json", in, back))
		}
	})
	t.Run("not a string is left alone when not setting it", func(t *testing.T) {
		in := []byte(`{"default-runtime": null}`)
		if _, _, err := Install(in, dockerTestOptions(false)); err != nil {
			t.Errorf("Install: %v", err)
		}
	})
}

func TestChain(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no default", `{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}`, ""},
		{"runc", `{"default-runtime": "runc", "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}`, ""},
		{"runc shim", `{"default-runtime": "io.containerd.runc.v2"}`, ""},
		{"nvidia", `{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}`, "nvidia-container-runtime"},
		{"nvidia cdi, absolute", `{"default-runtime": "nvidia-cdi", "runtimes": {"nvidia-cdi": {"path": "/usr/bin/nvidia-container-runtime.cdi"}}}`, "/usr/bin/nvidia-container-runtime.cdi"},
		{"crun", `{"default-runtime": "crun", "runtimes": {"crun": {"path": "/usr/bin/crun", "runtimeArgs": ["--debug"]}}}`, "/usr/bin/crun"},
		{"default undefined", `{"default-runtime": "nvidia"}`, ""},
		{"shim v2 runtime, no path", `{"default-runtime": "kata", "runtimes": {"kata": {"runtimeType": "io.containerd.kata.v2"}}}`, ""},
		{"ourselves under another name", `{"default-runtime": "shm", "runtimes": {"shm": {"path": "/usr/bin/gpurun-runtime"}}}`, ""},
		{"ourselves", `{"default-runtime": "gpurun", "runtimes": {"gpurun": {"path": "/usr/local/bin/gpurun-runtime"}}}`, ""},
	}
	for _, tt := range tests {
		for _, setDefault := range []bool{false, true} {
			_, c, err := Install([]byte(tt.in), dockerTestOptions(setDefault))
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if c.Chain != tt.want {
				t.Errorf("%s (default %v): Chain = %q, want %q", tt.name, setDefault, c.Chain, tt.want)
			}
		}
	}
}

func TestUninstallLeavesAdminChanges(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "nvidia-ctk-set-as-default.json"))
	if err != nil {
		t.Fatal(err)
	}
	o := dockerTestOptions(true)
	out, c, err := Install(in, o)
	if err != nil {
		t.Fatal(err)
	}
	if c.PreviousDefault != "nvidia" || !c.SetDefault {
		t.Fatalf("change = %+v", c)
	}

	t.Run("default changed since", func(t *testing.T) {
		edited := bytes.Replace(out, []byte(`"default-runtime": "gpurun"`), []byte(`"default-runtime": "crun"`), 1)
		back, changed, err := Uninstall(edited, o, c)
		if err != nil || !changed {
			t.Fatalf("changed %v, err %v", changed, err)
		}
		got := dockerGeneric(t, back)
		if got["default-runtime"] != "crun" {
			t.Errorf("default-runtime = %v, want the admin's crun", got["default-runtime"])
		}
		if _, ok := got["runtimes"].(map[string]any)["gpurun"]; ok {
			t.Errorf("runtimes.gpurun left behind")
		}
	})
	t.Run("runtime changed since", func(t *testing.T) {
		edited := bytes.Replace(out, []byte(dockerTestPath), []byte("/opt/other/runtime"), 1)
		back, _, err := Uninstall(edited, o, c)
		if err != nil {
			t.Fatal(err)
		}
		got := dockerGeneric(t, back)
		if got["default-runtime"] != "nvidia" {
			t.Errorf("default-runtime = %v, want nvidia back", got["default-runtime"])
		}
		if rt, _ := got["runtimes"].(map[string]any)["gpurun"].(map[string]any); rt["path"] != "/opt/other/runtime" {
			t.Errorf("runtimes.gpurun = %v, want the admin's", rt)
		}
	})
	t.Run("removed by hand", func(t *testing.T) {
		back, changed, err := Uninstall(in, o, c)
		if err != nil || changed || !bytes.Equal(back, in) {
			t.Errorf("changed %v, err %v", changed, err)
		}
	})
	t.Run("nothing recorded", func(t *testing.T) {
		back, changed, err := Uninstall(out, o, Change{})
		if err != nil || changed || !bytes.Equal(back, out) {
			t.Errorf("changed %v, err %v", changed, err)
		}
	})
	t.Run("other keys added since", func(t *testing.T) {
		edited := bytes.Replace(out, []byte("{\n"), []byte("{\n    \"debug\": true,\n"), 1)
		back, _, err := Uninstall(edited, o, c)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Replace(in, []byte("{\n"), []byte("{\n    \"debug\": true,\n"), 1)
		if !bytes.Equal(back, want) {
			t.Errorf("got:\n%s\nwant:\n%s", back, want)
		}
	})
}

func TestErrors(t *testing.T) {
	o := dockerTestOptions(true)
	tests := []struct {
		name      string
		in        string
		o         Options
		want      string
		uninstall bool // Uninstall refuses it too
	}{
		{"missing comma", "{\n  \"debug\": true\n  \"mtu\": 1500\n}\n", o, "line 3, column 3: invalid character '\"' after object key:value pair", true},
		{"trailing comma", "{\n\t\"debug\": true,\n}", o, "line 3, column 1: invalid character '}'", true},
		{"truncated literal", "{\n  \"debug\": tr", o, "line 2, column 14: unexpected end of JSON input", true},
		{"truncated", "{\"a\":1", o, "line 1, column 7: unexpected end of JSON input", true},
		{"column counts characters", "{\"tag\": \"학습\" x}", o, "line 1, column 14: invalid character 'x'", true},
		{"trailing garbage", "{}\n{}", o, "line 2, column 1: invalid character '{' after top-level value", true},
		{"utf-16", "\xff\xfe{\x00}\x00", o, "line 1, column 1: invalid character", true},
		{"array", "\n [1]", o, "line 2, column 2: top level is an array, want an object", true},
		{"string", `"x"`, o, "line 1, column 1: top level is a string, want an object", true},
		{"runtimes array", "{\n  \"runtimes\": []\n}", o, "line 2, column 15: runtimes is an array, want an object", false},
		{"runtimes string", `{"runtimes": "nvidia"}`, o, "line 1, column 14: runtimes is a string, want an object", false},
		{"default-runtime number", `{"default-runtime": 1}`, o, "line 1, column 21: default-runtime is a number, want a string", false},
		{"duplicate runtimes", "{\"runtimes\": {},\n\"runtimes\": {}}", o, `line 2, column 1: key "runtimes" appears twice`, true},
		{"duplicate runtime", `{"runtimes": {"gpurun": {}, "gpurun": {}}}`, o, `line 1, column 29: key "gpurun" appears twice`, true},
		{"other spelling", `{"Default-Runtime": "nvidia"}`, o, `line 1, column 2: key "Default-Runtime" is another spelling of "default-runtime"`, true},
		{"empty name", `{}`, Options{Path: dockerTestPath}, "runtime name is empty", true},
		{"reserved name", `{}`, Options{Name: "runc", Path: dockerTestPath}, `runtime name "runc" is reserved`, true},
		{"relative path", `{}`, Options{Name: "gpurun", Path: "gpurun-runtime"}, `runtime path "gpurun-runtime" is not absolute`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := Install([]byte(tt.in), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
			if out != nil {
				t.Errorf("output %q with an error", out)
			}
			c := Change{Changed: true, AddedRuntime: true, SetDefault: true}
			out, changed, err := Uninstall([]byte(tt.in), tt.o, c)
			switch {
			case tt.uninstall && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Uninstall: error %v, want it to contain %q", err, tt.want)
			case !tt.uninstall && (err != nil || changed || string(out) != tt.in):
				t.Errorf("Uninstall: %q, %v, %v; want it left alone", out, changed, err)
			}
		})
	}
	var se *json.SyntaxError
	if _, _, err := Install([]byte("{,}"), o); !errors.As(err, &se) {
		t.Errorf("syntax error not wrapped: %v", err)
	}
	c := Change{Changed: true, AddedRuntime: true, PreviousRuntime: json.RawMessage("{")}
	if _, _, err := Uninstall([]byte(`{"runtimes": {"gpurun": {"path": "/usr/local/bin/gpurun-runtime"}}}`), o, c); err == nil {
		t.Errorf("Uninstall restored a previous entry that is not JSON")
	}
}

// TestDockerRuntimeArgs: gpurun-runtime's runtimeArgs are part of its
// entry: the same args change nothing, other args (another data-root)
// replace the entry, and uninstall still takes it out.
func TestRuntimeArgsDataRoot(t *testing.T) {
	o := dockerTestOptions(false)
	o.RuntimeArgs = []string{"--gpurun-docker-data-root=/a"}
	first, ch, err := Install([]byte("{}\n"), o)
	if err != nil || !ch.Changed || !strings.Contains(string(first), `"runtimeArgs": [`) {
		t.Fatalf("install: %v, %+v\n%s", err, ch, first)
	}
	again, ch2, err := Install(first, o)
	if err != nil || ch2.Changed || string(again) != string(first) {
		t.Errorf("the same args again: %v, %+v", err, ch2)
	}
	o.RuntimeArgs = []string{"--gpurun-docker-data-root=/b"}
	moved, ch3, err := Install(first, o)
	if err != nil || !ch3.Changed || !strings.Contains(string(moved), "data-root=/b") || strings.Contains(string(moved), "data-root=/a") {
		t.Errorf("another data-root: %v, %+v\n%s", err, ch3, moved)
	}
	out, changed, err := Uninstall(moved, o, ch)
	if err != nil || !changed || strings.Contains(string(out), "gpurun") {
		t.Errorf("uninstall: %v, %v\n%s", err, changed, out)
	}
}

func TestUnifiedDiff(t *testing.T) {
	if d := unidiff.Unified("daemon.json", []byte("{}\n"), []byte("{}\n")); d != "" {
		t.Errorf("equal inputs: %q", d)
	}
	in, err := os.ReadFile(filepath.Join("testdata", "nvidia-ctk-runtime-configure.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := Install(in, dockerTestOptions(true))
	if err != nil {
		t.Fatal(err)
	}
	want := `--- /etc/docker/daemon.json
+++ /etc/docker/daemon.json
@@ -3,6 +3,10 @@
         "nvidia": {
             "args": [],
             "path": "nvidia-container-runtime"
+        },
+        "gpurun": {
+            "path": "/usr/local/bin/gpurun-runtime"
         }
-    }
-}
\ No newline at end of file
+    },
+    "default-runtime": "gpurun"
+}
`
	if d := unidiff.Unified("/etc/docker/daemon.json", in, out); d != want {
		t.Errorf("got:\n%s\nwant:\n%s", d, want)
	}
	if d := unidiff.Unified("daemon.json", nil, []byte("{}\n")); d != "--- daemon.json\n+++ daemon.json\n@@ -0,0 +1 @@\n+{}\n" {
		t.Errorf("from nothing: %q", d)
	}
}

func FuzzInstall(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data, true)
	}
	for _, s := range []string{
		`{"runtimes": null}`,
		`{"default-runtime": ""}`,
		`{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "x"}, "gpurun": {"path": "/old"}}}`,
		"{\r\n\t\"a\" :[ 1e400 ,\"\\u00e9\\\"\" ]}\r",
		"\xef\xbb\xbf{}",
		`{"\u0072untimes": {"gpurun": 7}}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, setDefault bool) {
		o := Options{Name: "gpurun", Path: dockerTestPath, RuntimeArgs: []string{"--x"}, SetAsDefault: setDefault}
		out, c, err := Install(data, o)
		if err != nil {
			return
		}
		if !json.Valid(bytes.TrimPrefix(out, []byte("\xef\xbb\xbf"))) {
			t.Fatalf("install output does not parse: %q", out)
		}
		got := dockerGeneric(t, out)
		rt, _ := got["runtimes"].(map[string]any)
		if e, _ := rt["gpurun"].(map[string]any); e["path"] != dockerTestPath {
			t.Fatalf("runtimes.gpurun missing in %q", out)
		}
		if setDefault && got["default-runtime"] != "gpurun" {
			t.Fatalf("default-runtime not set in %q", out)
		}
		again, c2, err := Install(out, o)
		if err != nil || c2.Changed || !bytes.Equal(again, out) {
			t.Fatalf("second install: %v %+v\n%q\n%q", err, c2, out, again)
		}
		back, _, err := Uninstall(out, o, c)
		if err != nil {
			t.Fatalf("uninstall: %v", err)
		}
		if want := dockerGeneric(t, data); !reflect.DeepEqual(dockerGeneric(t, back), want) {
			t.Fatalf("uninstall of %q gave %q, not the input's value", data, back)
		}
		if back2, changed, err := Uninstall(back, o, c); err != nil || changed || !bytes.Equal(back2, back) {
			t.Fatalf("second uninstall: changed %v err %v", changed, err)
		}
	})
}

// TestEditChecks has the intent checks refuse edits that change more than
// gpurun's keys, as a slip in the text surgery would.
func TestEditChecks(t *testing.T) {
	o := dockerTestOptions(true)
	src := []byte("{\n  \"debug\": true,\n  \"mtu\": 1500\n}\n")
	ok := []byte("{\n  \"debug\": true,\n  \"mtu\": 1500,\n  \"runtimes\": {\"gpurun\": {\"path\": \"/usr/local/bin/gpurun-runtime\"}},\n  \"default-runtime\": \"gpurun\"\n}\n")
	added := Change{AddedRuntime: true, CreatedRuntimes: true, SetDefault: true}
	for _, tc := range []struct {
		name string
		out  string
		c    Change
		want string
	}{
		{"what gpurun intends", string(ok), added, ""},
		{"another key changed", strings.Replace(string(ok), "1500", "1501", 1), added, "differ at mtu"},
		{"a number respelled", strings.Replace(string(ok), "1500", "1.5e3", 1), added, "differ at mtu"},
		{"a key lost", strings.Replace(string(ok), "\"debug\": true,\n", "", 1), added, "differ at debug"},
		{"the default not set", strings.Replace(string(ok), ",\n  \"default-runtime\": \"gpurun\"", "", 1), added, "differ at default-runtime"},
		{"another path", strings.Replace(string(ok), "/usr/local/bin/gpurun-runtime", "/tmp/x", 1), added, "differ at runtimes.gpurun.path"},
		{"not JSON", "{", added, "does not parse"},
	} {
		t.Run("install/"+tc.name, func(t *testing.T) {
			err := checkInstall(src, []byte(tc.out), o, tc.c)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, out string
		allowed   [][]string
		want      string
	}{
		{"gpurun's keys gone", string(src), [][]string{{"runtimes"}, {"default-runtime"}}, ""},
		{"the object gpurun's entry leaves empty may go too", string(src), [][]string{{"runtimes", "gpurun"}, {"default-runtime"}}, ""},
		{"another key changed", strings.Replace(string(src), "true", "false", 1), [][]string{{"runtimes"}, {"default-runtime"}}, "would change debug"},
	} {
		t.Run("uninstall/"+tc.name, func(t *testing.T) {
			err := checkOnly(ok, []byte(tc.out), tc.allowed)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}
