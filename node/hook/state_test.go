package hook

import (
	"strings"
	"testing"
)

func TestParseState(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   State
		errHas string // "" for success
	}{
		{"runtime-spec 1.0 (runc)",
			`{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"/run/b/c1","annotations":{"io.kubernetes.cri.container-type":"container"}}`,
			State{OCIVersion: "1.0.2", ID: "c1", Status: "creating", Pid: 4242, Bundle: "/run/b/c1", Annotations: map[string]string{"io.kubernetes.cri.container-type": "container"}}, ""},
		{"older bundlePath",
			`{"ociVersion":"1.0.0-rc1","id":"c2","pid":7,"bundlePath":"/var/lib/b/c2/"}`,
			State{OCIVersion: "1.0.0-rc1", ID: "c2", Pid: 7, Bundle: "/var/lib/b/c2"}, ""},
		{"bundle wins over bundlePath",
			`{"id":"c3","pid":7,"bundle":"/new","bundlePath":"/old"}`,
			State{ID: "c3", Pid: 7, Bundle: "/new"}, ""},
		{"unknown fields are ignored",
			`{"id":"c4","pid":8,"bundle":"/b","rootfs":"/x","future":{"a":1}}`,
			State{ID: "c4", Pid: 8, Bundle: "/b"}, ""},
		{"no bundle", `{"id":"c5","pid":9}`, State{ID: "c5"}, `no "bundle" (or "bundlePath")`},
		{"no pid", `{"id":"c6","bundle":"/b"}`, State{ID: "c6"}, `no "pid"`},
		{"neither", `{"id":"c7"}`, State{ID: "c7"}, `no "bundle" (or "bundlePath") and no "pid"`},
		{"negative pid", `{"id":"c8","pid":-1,"bundle":"/b"}`, State{ID: "c8"}, "invalid pid -1"},
		{"relative bundle", `{"id":"c9","pid":1,"bundle":"b"}`, State{ID: "c9"}, `bundle "b" is not an absolute path`},
		{"empty stdin", "  \n", State{}, "stdin is empty"},
		{"malformed JSON", `{"id": "c10", "pid": 1,`, State{}, "malformed JSON at byte"},
		{"wrong type", `{"id":"c11","pid":"12","bundle":"/b"}`, State{}, "container state: json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseState([]byte(tt.in))
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("ParseState = %+v, %v; want an error containing %q", got, err, tt.errHas)
				}
				if got.ID != tt.want.ID {
					t.Errorf("invalid state's id %q, want %q (for the log)", got.ID, tt.want.ID)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.OCIVersion != tt.want.OCIVersion || got.ID != tt.want.ID || got.Status != tt.want.Status ||
				got.Pid != tt.want.Pid || got.Bundle != tt.want.Bundle || len(got.Annotations) != len(tt.want.Annotations) {
				t.Fatalf("ParseState = %+v, want %+v", got, tt.want)
			}
			for k, v := range tt.want.Annotations {
				if got.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, got.Annotations[k], v)
				}
			}
		})
	}
}

// FuzzParseState: any input gives a state with a pid and an absolute, clean
// bundle, or an error; never a panic.
func FuzzParseState(f *testing.F) {
	f.Add(`{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"/run/b/c1"}`)
	f.Add(`{"id":"c2","pid":7,"bundlePath":"/var/lib/b/c2/"}`)
	f.Add(`{"id":"c3","pid":7,"bundle":"/new","bundlePath":"/old","annotations":{"a":"b"}}`)
	f.Add(`{"pid":0}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, in string) {
		st, err := ParseState([]byte(in))
		if err != nil {
			return
		}
		if st.Pid <= 0 || !strings.HasPrefix(st.Bundle, "/") || strings.Contains(st.Bundle+"/", "/../") || (st.Bundle != "/" && strings.HasSuffix(st.Bundle, "/")) {
			t.Fatalf("ParseState(%q) = %+v without an error", in, st)
		}
	})
}
