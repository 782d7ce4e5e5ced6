package runargs

import (
	"errors"
	"io/fs"
	"reflect"
	"slices"
	"testing"

	"github.com/gpurun/gpurun/oci"
)

func fakeEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func fakeFiles(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		s, ok := m[name]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		return []byte(s), nil
	}
}

func TestParseEnvFile(t *testing.T) {
	env := fakeEnv(map[string]string{"HOSTVAR": "from-host", "EMPTY": ""})
	tests := []struct {
		name    string
		data    string
		want    []string
		wantErr bool
	}{
		{"empty", "", []string{}, false},
		{"comments and blanks", "# c\n\n   \n  # indented comment\nA=1\n", []string{"A=1"}, false},
		{"leading space trimmed, trailing kept", "  A=1  \n", []string{"A=1  "}, false},
		{"quotes are literal", `A="x y"` + "\nB='z'\n", []string{`A="x y"`, "B='z'"}, false},
		{"value may hold = and #", "A=b=c#d\n", []string{"A=b=c#d"}, false},
		{"empty value", "A=\n", []string{"A="}, false},
		{"bare key from env", "HOSTVAR\nEMPTY\nMISSING\n", []string{"HOSTVAR=from-host", "EMPTY="}, false},
		{"BOM", "\xEF\xBB\xBFA=1\n", []string{"A=1"}, false},
		{"CRLF line endings (bufio drops the CR)", "A=1\r\nB=2\r\n", []string{"A=1", "B=2"}, false},
		{"no final newline", "A=1\nB=2", []string{"A=1", "B=2"}, false},
		{"no name", "=x\n", nil, true},
		{"space in name", "A B=1\n", nil, true},
		{"trailing space in bare name", "A \n", nil, true},
		{"invalid utf8", "A=\xff\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnvFile("f.env", []byte(tt.data), env)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseEnvFile(%q) error %v, wantErr %v", tt.data, err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseEnvFile(%q) = %q, want %q", tt.data, got, tt.want)
			}
		})
	}
}

func TestEnvironmentAndLookupEnv(t *testing.T) {
	host := fakeEnv(map[string]string{"NVIDIA_VISIBLE_DEVICES": "0,1", "EMPTY": "", "FROMFILE": "host"})
	files := fakeFiles(map[string]string{
		"a.env": "NVIDIA_VISIBLE_DEVICES=all\nX=a\nFROMFILE\nUNSET_IN_HOST\n",
		"b.env": "X=b\nY=b\n",
	})
	tests := []struct {
		name    string
		args    []string
		wantEnv []string
		lookups map[string]*string // nil pointer: not found
	}{
		{
			name:    "-e wins over env-file, later file wins",
			args:    []string{"--env-file", "a.env", "-e", "X=e", "--env-file", "b.env", "img"},
			wantEnv: []string{"NVIDIA_VISIBLE_DEVICES=all", "X=a", "FROMFILE=host", "X=b", "Y=b", "X=e"},
			lookups: map[string]*string{"X": ptr("e"), "Y": ptr("b"), "NVIDIA_VISIBLE_DEVICES": ptr("all"), "FROMFILE": ptr("host"), "UNSET_IN_HOST": nil},
		},
		{
			name:    "bare -e from host env",
			args:    []string{"-e", "NVIDIA_VISIBLE_DEVICES", "-e", "EMPTY", "-e", "MISSING", "img"},
			wantEnv: []string{"NVIDIA_VISIBLE_DEVICES=0,1", "EMPTY=", "MISSING"},
			lookups: map[string]*string{"NVIDIA_VISIBLE_DEVICES": ptr("0,1"), "EMPTY": ptr(""), "MISSING": nil},
		},
		{
			name:    "later -e wins",
			args:    []string{"-e", "A=1", "-eA=2", "--env=A=3", "img"},
			wantEnv: []string{"A=1", "A=2", "A=3"},
			lookups: map[string]*string{"A": ptr("3")},
		},
		{
			name:    "unresolved bare -e does not hide an earlier value",
			args:    []string{"--env-file", "b.env", "-e", "X", "img"},
			wantEnv: []string{"X=b", "Y=b", "X"},
			lookups: map[string]*string{"X": ptr("b")},
		},
		{
			name:    "value with = inside",
			args:    []string{"-e", "OPTS=a=b", "img"},
			wantEnv: []string{"OPTS=a=b"},
			lookups: map[string]*string{"OPTS": ptr("a=b"), "OPTS=a": nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			env, err := r.Environment(host, files)
			if err != nil {
				t.Fatalf("Environment: %v", err)
			}
			if !slices.Equal(env, tt.wantEnv) {
				t.Errorf("Environment = %q, want %q", env, tt.wantEnv)
			}
			for k, want := range tt.lookups {
				got, ok := r.LookupEnv(k, host, files)
				if want == nil {
					if ok {
						t.Errorf("LookupEnv(%q) = %q, want not set", k, got)
					}
				} else if !ok || got != *want {
					t.Errorf("LookupEnv(%q) = %q, %v; want %q", k, got, ok, *want)
				}
			}
		})
	}
}

func TestEnvironmentFileErrors(t *testing.T) {
	files := fakeFiles(map[string]string{"bad.env": "A B=1\n", "ok.env": "A=1\n"})
	for _, name := range []string{"missing.env", "bad.env"} {
		r, err := Parse([]string{"--env-file", "ok.env", "--env-file", name, "-e", "B=2", "img"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Environment(fakeEnv(nil), files); err == nil {
			t.Errorf("Environment with %s: no error", name)
		} else if name == "missing.env" && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Environment with %s: error %v does not wrap fs.ErrNotExist", name, err)
		}
		// LookupEnv skips the broken file.
		if v, ok := r.LookupEnv("A", fakeEnv(nil), files); !ok || v != "1" {
			t.Errorf("LookupEnv(A) with %s = %q, %v", name, v, ok)
		}
		if v, ok := r.LookupEnv("B", fakeEnv(nil), files); !ok || v != "2" {
			t.Errorf("LookupEnv(B) with %s = %q, %v", name, v, ok)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	image := []string{"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4"}
	tests := []struct {
		name string
		run  []string
		want []string
		key  string
		val  *string
	}{
		{"no run env", nil, image, "NVIDIA_VISIBLE_DEVICES", ptr("all")},
		{"override", []string{"NVIDIA_VISIBLE_DEVICES=void"},
			[]string{"NVIDIA_VISIBLE_DEVICES=void", "PATH=/usr/bin", "CUDA_VERSION=12.4"}, "NVIDIA_VISIBLE_DEVICES", ptr("void")},
		{"bare removes image value", []string{"NVIDIA_VISIBLE_DEVICES"},
			[]string{"NVIDIA_VISIBLE_DEVICES", "PATH=/usr/bin", "CUDA_VERSION=12.4"}, "NVIDIA_VISIBLE_DEVICES", nil},
		{"duplicates: last wins", []string{"A=1", "A=2"},
			[]string{"A=1", "A=2", "PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4"}, "A", ptr("2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			imageCopy := slices.Clone(image)
			got := MergeEnv(imageCopy, tt.run)
			if !slices.Equal(got, tt.want) {
				t.Errorf("MergeEnv = %q, want %q", got, tt.want)
			}
			if !slices.Equal(imageCopy, image) {
				t.Errorf("MergeEnv modified imageEnv")
			}
			v, ok := oci.LookupEnv(got, tt.key)
			if tt.val == nil && ok || tt.val != nil && (!ok || v != *tt.val) {
				t.Errorf("oci.LookupEnv(%q) = %q, %v", tt.key, v, ok)
			}
		})
	}
}

func ptr(s string) *string { return &s }
