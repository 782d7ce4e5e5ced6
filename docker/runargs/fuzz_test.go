package runargs

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzParse feeds Parse argument lists (NUL-separated in the fuzz input)
// and checks it never panics, never modifies its input, and returns a
// consistent Run or a well-formed error.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"img", "-it\x00img\x00bash", "-itd\x00img", "-e=X\x00img", "-eFOO=1\x00img",
		"-e\x00-x\x00img", "--env-file\x00f\x00img", "--\x00-img\x00-c", "--rm=false\x00img",
		"--gpus\x00\"device=0,1\"\x00nvidia/cuda:12.4.1-runtime-ubuntu22.04\x00nvidia-smi",
		"--shm-size\x00256m\x00--shm-size\x001g\x00img", "--mount\x00type=tmpfs,destination=/dev/shm\x00img",
		"-v\x00/x:/dev/shm:ro\x00img", "--tmpfs\x00/dev/shm:size=1g\x00img", "-m\x002g\x00img",
		"--help", "-test.v\x00img", "-d=\x00img", "---x", "--=x", "-", "", "-\xff", "--device\x00nvidia.com/gpu=all\x00img",
		"-p8080:80\x00-h\x00x\x00img\x00-c\x00exit 7",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		args := strings.Split(in, "\x00")
		orig := slices.Clone(args)
		r, err := Parse(args)
		if !slices.Equal(args, orig) {
			t.Fatalf("Parse modified its input: %q -> %q", orig, args)
		}
		if err != nil {
			if r != nil {
				t.Fatalf("Parse(%q) returned both a Run and %v", args, err)
			}
			var fe *FlagError
			switch {
			case errors.As(err, &fe):
				if fe.Index < 0 || fe.Index >= len(args) || fe.Arg != args[fe.Index] || fe.Msg == "" {
					t.Fatalf("Parse(%q): malformed %#v", args, fe)
				}
			case errors.Is(err, ErrNoImage):
			default:
				t.Fatalf("Parse(%q): unexpected error type %T: %v", args, err, err)
			}
			return
		}
		if !slices.Equal(r.Args, args) {
			t.Fatalf("Args = %q, want %q", r.Args, args)
		}
		if r.ImageIndex < 0 {
			if !r.Help || r.Image != "" || r.Command != nil {
				t.Fatalf("Parse(%q): no image but %+v", args, r)
			}
			return
		}
		if r.ImageIndex >= len(args) || r.Image != args[r.ImageIndex] {
			t.Fatalf("Parse(%q): ImageIndex %d, Image %q", args, r.ImageIndex, r.Image)
		}
		if rest := args[r.ImageIndex+1:]; !slices.Equal(r.Command, rest) || (len(rest) == 0) != (r.Command == nil) {
			t.Fatalf("Parse(%q): Command %q, want %q", args, r.Command, rest)
		}
		for _, o := range r.Occurrences {
			if o.Index >= r.ImageIndex {
				t.Fatalf("Parse(%q): flag %+v at or after the image", args, o)
			}
			if _, ok := LookupFlag(o.Given); !ok {
				t.Fatalf("Parse(%q): occurrence of unknown flag %+v", args, o)
			}
		}
		// The command does not change what the flags say.
		r2, err := Parse(append(slices.Clone(args[:r.ImageIndex]), "image", "cmd"))
		if err != nil {
			t.Fatalf("reparse without the command: %v", err)
		}
		if !reflect.DeepEqual(r.Occurrences, r2.Occurrences) {
			t.Fatalf("Parse(%q): flags differ when the command changes:\n%+v\n%+v", args, r.Occurrences, r2.Occurrences)
		}
		// The helpers do not panic and do not touch Args.
		r.MountsDevShm()
		r.LookupEnv("K", func(string) (string, bool) { return "v", true }, func(string) ([]byte, error) { return []byte(in), nil })
		if !slices.Equal(r.Args, orig) {
			t.Fatalf("helpers modified Args")
		}
	})
}
