package runargs

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// parsed returns r without Args and Occurrences, for comparing the
// learned fields.
func parsed(r *Run) Run {
	c := *r
	c.Args, c.Occurrences = nil, nil
	return c
}

func TestParse(t *testing.T) {
	const digest = "localhost:5000/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name string
		args []string
		want Run
	}{
		{"image only", []string{"ubuntu"},
			Run{Image: "ubuntu", ImageIndex: 0}},
		{"cuda image with command", []string{"--rm", "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "nvidia-smi"},
			Run{Image: "nvidia/cuda:12.4.1-runtime-ubuntu22.04", ImageIndex: 1, Command: []string{"nvidia-smi"}, Remove: true}},
		{"registry port and digest", []string{"-d", digest},
			Run{Image: digest, ImageIndex: 1, Detach: true}},
		{"-it cluster", []string{"-it", "img", "bash"},
			Run{Image: "img", ImageIndex: 1, Command: []string{"bash"}, Interactive: true, TTY: true}},
		{"-itd cluster", []string{"-itd", "img"},
			Run{Image: "img", ImageIndex: 1, Interactive: true, TTY: true, Detach: true}},
		{"-dit cluster", []string{"-dit", "img"},
			Run{Image: "img", ImageIndex: 1, Interactive: true, TTY: true, Detach: true}},
		{"bool then value flag in cluster takes rest", []string{"-de", "A=1", "img"},
			Run{Image: "img", ImageIndex: 2, Detach: true, Env: []string{"A=1"}}},
		{"value flag in cluster takes the rest of it", []string{"-ite", "A=1", "img"},
			Run{Image: "img", ImageIndex: 2, Interactive: true, TTY: true, Env: []string{"A=1"}}},
		{"-ieA=1 attached", []string{"-ieA=1", "img"},
			Run{Image: "img", ImageIndex: 1, Interactive: true, Env: []string{"A=1"}}},
		{"-e=X", []string{"-e=X", "img"},
			Run{Image: "img", ImageIndex: 1, Env: []string{"X"}}},
		{"-e=A=B", []string{"-e=A=B", "img"},
			Run{Image: "img", ImageIndex: 1, Env: []string{"A=B"}}},
		{"-eFOO=1", []string{"-eFOO=1", "img"},
			Run{Image: "img", ImageIndex: 1, Env: []string{"FOO=1"}}},
		{"--env=A=B and --env A", []string{"--env=A=B", "--env", "C", "img"},
			Run{Image: "img", ImageIndex: 3, Env: []string{"A=B", "C"}}},
		{"-e value looks like a flag", []string{"-e", "-x", "img"},
			Run{Image: "img", ImageIndex: 2, Env: []string{"-x"}}},
		{"-e value is --x", []string{"-e", "--x", "img"},
			Run{Image: "img", ImageIndex: 2, Env: []string{"--x"}}},
		{"--entrypoint value looks like a flag", []string{"--entrypoint", "--foo", "img"},
			Run{Image: "img", ImageIndex: 2}},
		{"--env-file", []string{"--env-file", "f", "--env-file=g", "img"},
			Run{Image: "img", ImageIndex: 3, EnvFiles: []string{"f", "g"}}},
		{"-- terminator", []string{"--rm", "--", "img", "-c", "x"},
			Run{Image: "img", ImageIndex: 2, Command: []string{"-c", "x"}, Remove: true}},
		{"-- then dash image", []string{"--", "-img"},
			Run{Image: "-img", ImageIndex: 1}},
		{"command args look like flags", []string{"img", "-c", "exit 7"},
			Run{Image: "img", ImageIndex: 0, Command: []string{"-c", "exit 7"}}},
		{"docker flags after image belong to the command", []string{"img", "--gpus", "all", "--shm-size=1g", "--"},
			Run{Image: "img", ImageIndex: 0, Command: []string{"--gpus", "all", "--shm-size=1g", "--"}}},
		{"--gpus all", []string{"--gpus", "all", "img"},
			Run{Image: "img", ImageIndex: 2, GPUs: "all", GPUsSet: true, GPURequests: []string{"all"}}},
		{"--gpus quoted device list", []string{"--gpus", `"device=0,1"`, "img"},
			Run{Image: "img", ImageIndex: 2, GPUs: `"device=0,1"`, GPUsSet: true, GPURequests: []string{`"device=0,1"`}}},
		{"--gpus twice", []string{"--gpus=1", "--gpus", "device=2", "img"},
			Run{Image: "img", ImageIndex: 3, GPUs: "device=2", GPUsSet: true, GPURequests: []string{"1", "device=2"}}},
		{"--runtime=nvidia", []string{"--runtime=nvidia", "img"},
			Run{Image: "img", ImageIndex: 1, Runtime: "nvidia"}},
		{"--shm-size twice, last wins", []string{"--shm-size", "256m", "--shm-size", "1g", "img"},
			Run{Image: "img", ImageIndex: 4, ShmSize: "1g", ShmSizeSet: true}},
		{"--ipc=host", []string{"--ipc=host", "img"},
			Run{Image: "img", ImageIndex: 1, IPC: "host", IPCSet: true}},
		{"--ipc empty", []string{"--ipc=", "img"},
			Run{Image: "img", ImageIndex: 1, IPC: "", IPCSet: true}},
		{"--mount tmpfs", []string{"--mount", "type=tmpfs,destination=/dev/shm", "img"},
			Run{Image: "img", ImageIndex: 2, Mounts: []string{"type=tmpfs,destination=/dev/shm"}}},
		{"-v", []string{"-v", "/x:/dev/shm:ro", "--volume=/a:/b", "-v/c:/d", "img"},
			Run{Image: "img", ImageIndex: 4, Volumes: []string{"/x:/dev/shm:ro", "/a:/b", "/c:/d"}}},
		{"--tmpfs", []string{"--tmpfs", "/dev/shm:size=1g", "img"},
			Run{Image: "img", ImageIndex: 2, Tmpfs: []string{"/dev/shm:size=1g"}}},
		{"--memory=2g", []string{"--memory=2g", "img"},
			Run{Image: "img", ImageIndex: 1, Memory: "2g", MemorySet: true}},
		{"-m 2g", []string{"-m", "2g", "img"},
			Run{Image: "img", ImageIndex: 2, Memory: "2g", MemorySet: true}},
		{"-m2g", []string{"-m2g", "img"},
			Run{Image: "img", ImageIndex: 1, Memory: "2g", MemorySet: true}},
		{"--rm=false after --rm", []string{"--rm", "--rm=false", "img"},
			Run{Image: "img", ImageIndex: 2}},
		{"--rm false: false is the image", []string{"--rm", "false"},
			Run{Image: "false", ImageIndex: 1, Remove: true}},
		{"-d=false", []string{"-d", "-d=false", "img"},
			Run{Image: "img", ImageIndex: 2}},
		{"-t=0 -i=T", []string{"-t=0", "-i=T", "img"},
			Run{Image: "img", ImageIndex: 2, Interactive: true}},
		{"misc flags", []string{
			"--detach-keys", "ctrl-p,ctrl-q", "-p", "8080:80", "-p8443:443", "--add-host", "a:1.2.3.4",
			"--sig-proxy=false", "--init", "-w", "/x", "--name", "n", "--network=host", "--net", "bridge",
			"-h", "host", "-u", "0:0", "-l", "a=b", "-a", "stdout", "-c", "512", "-P", "--privileged",
			"--ulimit", "memlock=-1", "--security-opt", "seccomp=unconfined", "--platform", "linux/amd64",
			"--pull", "always", "-q", "--annotation", "a=b", "--cgroupns", "host", "--kernel-memory", "1g",
			"--link-local-ip", "169.254.1.1", "--cpu-rt-runtime", "950000", "--disable-content-trust",
			"--use-api-socket", "--device", "/dev/nvidia0", "img", "python", "-m", "train"},
			Run{Image: "img", ImageIndex: 51, Command: []string{"python", "-m", "train"}, Privileged: true,
				Annotations: []string{"a=b"}, Devices: []string{"/dev/nvidia0"}}},
		{"-test.v is ignored by pflag", []string{"-test.v", "-itest.x", "img"},
			Run{Image: "img", ImageIndex: 2, Interactive: true}},
		{"dash alone is the image", []string{"-d", "-"},
			Run{Image: "-", ImageIndex: 1, Detach: true}},
		{"empty string is the image", []string{"", "x"},
			Run{Image: "", ImageIndex: 0, Command: []string{"x"}}},
		{"--help without image", []string{"--help"},
			Run{ImageIndex: -1, Help: true}},
		{"--help=false needs image", []string{"--help=false", "img"},
			Run{Image: "img", ImageIndex: 1}},
		{"-h is hostname", []string{"-h", "box", "img"},
			Run{Image: "img", ImageIndex: 2}},
		{"numbers as pflag reads them", []string{"-c0x10", "--stop-timeout=-1", "--blkio-weight", "500",
			"--io-maxiops", "10", "--health-interval", "1m30s", "--memory-swappiness=-1", "img"},
			Run{Image: "img", ImageIndex: 9}},
		{"docker's own types", []string{"--cpus", "1.5", "--memory-swap=-1", "--umask", "022", "img"},
			Run{Image: "img", ImageIndex: 5}},
		{"--device forms", []string{"--device=/dev/nvidia0", "--device", "/tmp/nvidia1:/dev/nvidia1:rw", "img"},
			Run{Image: "img", ImageIndex: 3, Devices: []string{"/dev/nvidia0", "/tmp/nvidia1:/dev/nvidia1:rw"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.args)
			r, err := Parse(in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.args, err)
			}
			if !slices.Equal(in, tt.args) {
				t.Errorf("Parse modified its input: %q", in)
			}
			if !slices.Equal(r.Args, tt.args) {
				t.Errorf("Args = %q, want %q", r.Args, tt.args)
			}
			if got := parsed(r); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q)\n got %+v\nwant %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestParseOccurrences(t *testing.T) {
	r, err := Parse([]string{"-itd", "--net", "host", "-p8080:80", "--rm=0", "--dns-opt=x", "img"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Occurrence{
		{Name: "interactive", Given: "-i", Value: "true", Index: 0},
		{Name: "tty", Given: "-t", Value: "true", Index: 0},
		{Name: "detach", Given: "-d", Value: "true", Index: 0},
		{Name: "network", Given: "--net", Value: "host", Index: 1},
		{Name: "publish", Given: "-p", Value: "8080:80", Index: 3},
		{Name: "rm", Given: "--rm", Value: "false", Index: 4},
		{Name: "dns-option", Given: "--dns-opt", Value: "x", Index: 5},
	}
	if !reflect.DeepEqual(r.Occurrences, want) {
		t.Errorf("Occurrences\n got %+v\nwant %+v", r.Occurrences, want)
	}
	if v, ok := r.Value("network"); !ok || v != "host" {
		t.Errorf("Value(network) = %q, %v", v, ok)
	}
	if v, ok := r.Value("rm"); !ok || v != "false" {
		t.Errorf("Value(rm) = %q, %v", v, ok)
	}
	if _, ok := r.Value("name"); ok {
		t.Errorf("Value(name) found, want not given")
	}
	if got := r.Values("publish"); !slices.Equal(got, []string{"8080:80"}) {
		t.Errorf("Values(publish) = %q", got)
	}
}

// TestParseRepeated checks docker's semantics for repeated flags: list
// types collect every value, hidden aliases included, other types keep the
// last one.
func TestParseRepeated(t *testing.T) {
	tests := []struct {
		name string
		args []string
		flag string
		all  []string // Values
		last string   // Value
	}{
		{"env collects", []string{"-e", "A=1", "--env=B=2", "-eC", "img"}, "env", []string{"A=1", "B=2", "C"}, "C"},
		{"network collects its alias", []string{"--network", "a", "--net=b", "img"}, "network", []string{"a", "b"}, "b"},
		{"dns-option collects its alias", []string{"--dns-opt", "x", "--dns-option", "y", "img"}, "dns-option", []string{"x", "y"}, "y"},
		{"bool, last wins", []string{"-d", "--detach=false", "-d=1", "img"}, "detach", []string{"true", "false", "true"}, "true"},
		{"int, last wins", []string{"-c", "1", "--cpu-shares=2", "img"}, "cpu-shares", []string{"1", "2"}, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Values(tt.flag); !slices.Equal(got, tt.all) {
				t.Errorf("Values(%s) = %q, want %q", tt.flag, got, tt.all)
			}
			if got, ok := r.Value(tt.flag); !ok || got != tt.last {
				t.Errorf("Value(%s) = %q, %v, want %q", tt.flag, got, ok, tt.last)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		flag     string // FlagError.Flag; "" for ErrNoImage
		index    int
		msgMatch string
	}{
		{"no args", nil, "", 0, ""},
		{"flags only", []string{"-it", "--rm"}, "", 0, ""},
		{"-- without image", []string{"--"}, "", 0, ""},
		{"--help=false without image", []string{"--help=false"}, "", 0, ""},
		{"unknown long", []string{"--nope", "img"}, "--nope", 0, "unknown flag: --nope"},
		{"unknown long with value", []string{"--rm", "--nope=1", "img"}, "--nope", 1, "unknown flag: --nope"},
		{"global flag is not a run flag", []string{"-D", "img"}, "-D", 0, `unknown shorthand flag: 'D' in -D`},
		{"unknown short in cluster", []string{"-itx", "img"}, "-x", 0, `unknown shorthand flag: 'x' in -x`},
		{"long names are case-sensitive", []string{"--ENV", "x", "img"}, "--ENV", 0, "unknown flag: --ENV"},
		{"missing value long", []string{"--gpus"}, "--gpus", 0, "flag needs an argument: --gpus"},
		{"missing value short", []string{"-d", "-e"}, "-e", 1, `flag needs an argument: 'e' in -e`},
		{"missing value end of cluster", []string{"-ite"}, "-e", 0, `flag needs an argument: 'e' in -e`},
		{"bad bool", []string{"--rm=yes", "img"}, "--rm", 0, `invalid argument "yes" for "--rm" flag`},
		{"empty bool", []string{"--init=", "img"}, "--init", 0, `invalid argument "" for "--init" flag`},
		{"-d= leaves '=' as a flag", []string{"-d=", "img"}, "-=", 0, `unknown shorthand flag: '=' in -=`},
		{"-e= sets '=' which is invalid", []string{"-e=", "img"}, "-e", 0, `invalid environment variable: =`},
		{"-e =x", []string{"-e", "=x", "img"}, "-e", 0, `invalid environment variable: =x`},
		{"int not a number", []string{"--cpu-shares", "x", "img"}, "--cpu-shares", 0, `invalid argument "x" for "-c, --cpu-shares" flag`},
		{"int short not a number", []string{"-dc1.5", "img"}, "-c", 0, `invalid argument "1.5" for "-c, --cpu-shares" flag`},
		{"uint16 out of range", []string{"--rm", "--blkio-weight=70000", "img"}, "--blkio-weight", 1, `invalid argument "70000" for "--blkio-weight" flag`},
		{"uint negative", []string{"--io-maxiops", "-1", "img"}, "--io-maxiops", 0, `invalid argument "-1" for "--io-maxiops" flag`},
		{"duration without unit", []string{"--health-interval", "5", "img"}, "--health-interval", 0, `invalid argument "5" for "--health-interval" flag`},
		{"triple dash", []string{"---x", "img"}, "---x", 0, "bad flag syntax: ---x"},
		{"--=x", []string{"--=x", "img"}, "--=x", 0, "bad flag syntax: --=x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.args)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error", tt.args, r)
			}
			if r != nil {
				t.Errorf("Parse(%q) returned a Run with the error", tt.args)
			}
			if tt.flag == "" {
				if !errors.Is(err, ErrNoImage) {
					t.Fatalf("Parse(%q) error %v, want ErrNoImage", tt.args, err)
				}
				return
			}
			var fe *FlagError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%q) error %T %v, want *FlagError", tt.args, err, err)
			}
			if fe.Flag != tt.flag || fe.Index != tt.index || fe.Arg != tt.args[tt.index] {
				t.Errorf("FlagError{Flag: %q, Arg: %q, Index: %d}, want Flag %q Index %d", fe.Flag, fe.Arg, fe.Index, tt.flag, tt.index)
			}
			if !strings.Contains(fe.Msg, tt.msgMatch) || !strings.Contains(err.Error(), tt.msgMatch) {
				t.Errorf("error %q, want it to contain %q", err, tt.msgMatch)
			}
		})
	}
}

func TestFlagTable(t *testing.T) {
	flags := Flags()
	seenShort := map[string]string{}
	for i, f := range flags {
		if i > 0 && flags[i-1].Name >= f.Name {
			t.Errorf("Flags() not sorted or has duplicates at %q", f.Name)
		}
		if f.Shorthand != "" {
			if len(f.Shorthand) != 1 {
				t.Errorf("%s: shorthand %q is not one letter", f.Name, f.Shorthand)
			}
			if other, dup := seenShort[f.Shorthand]; dup {
				t.Errorf("shorthand -%s used by %s and %s", f.Shorthand, other, f.Name)
			}
			seenShort[f.Shorthand] = f.Name
		}
		if f.AliasOf != "" {
			target, ok := LookupFlag(f.AliasOf)
			if !ok || target.TakesValue != f.TakesValue || !f.Hidden {
				t.Errorf("%s: bad alias of %q", f.Name, f.AliasOf)
			}
			if target.Type != f.Type || target.AliasOf != "" {
				t.Errorf("%s: type %q, but it is an alias of %q (%q)", f.Name, f.Type, f.AliasOf, target.Type)
			}
		}
		switch f.Type {
		case "bool", "string", "int", "uint", "uint16", "duration", "bytes", "decimal", "umask":
			if f.Collects() {
				t.Errorf("%s: type %q collects", f.Name, f.Type)
			}
		case "list", "map", "mount", "gpu-request", "network", "ulimit":
			if !f.Collects() {
				t.Errorf("%s: type %q does not collect", f.Name, f.Type)
			}
		default:
			t.Errorf("%s: unknown type %q", f.Name, f.Type)
		}
		if f.TakesValue != (f.Type != "bool") {
			t.Errorf("%s: TakesValue %v for type %q", f.Name, f.TakesValue, f.Type)
		}
		for _, q := range []string{f.Name, "--" + f.Name} {
			if got, ok := LookupFlag(q); !ok || got != f {
				t.Errorf("LookupFlag(%q) = %+v, %v", q, got, ok)
			}
		}
		if f.Shorthand != "" {
			if got, ok := LookupFlag("-" + f.Shorthand); !ok || got != f {
				t.Errorf("LookupFlag(-%s) = %+v, %v", f.Shorthand, got, ok)
			}
		}
	}
	if _, ok := LookupFlag("-D"); ok {
		t.Error("LookupFlag(-D) found a flag")
	}
	// Flags returns a copy.
	flags[0].Name = "changed"
	if Flags()[0].Name == "changed" {
		t.Error("Flags() exposes the package's table")
	}
	t.Logf("%d flags", len(flags))
}

// TestFlagSet checks the FlagSet Parse hands to pflag: every flag of the
// table, with its shorthand, arity and visibility, aliases sharing the value
// of the flag they stand for, and nothing else.
func TestFlagSet(t *testing.T) {
	fs := (&Run{}).flagSet()
	n := 0
	fs.VisitAll(func(*pflag.Flag) { n++ })
	if want := len(Flags()); n != want {
		t.Errorf("FlagSet has %d flags, the table %d", n, want)
	}
	for _, f := range Flags() {
		pf := fs.Lookup(f.Name)
		if pf == nil {
			t.Errorf("--%s not registered", f.Name)
			continue
		}
		if pf.Shorthand != f.Shorthand || pf.Hidden != f.Hidden {
			t.Errorf("--%s: shorthand %q hidden %v, table %q %v", f.Name, pf.Shorthand, pf.Hidden, f.Shorthand, f.Hidden)
		}
		if isBool := pf.NoOptDefVal != ""; isBool == f.TakesValue || isBool && pf.NoOptDefVal != "true" {
			t.Errorf("--%s: NoOptDefVal %q, table TakesValue %v", f.Name, pf.NoOptDefVal, f.TakesValue)
		}
		if f.AliasOf != "" && pf.Value != fs.Lookup(f.AliasOf).Value {
			t.Errorf("--%s does not share the value of --%s", f.Name, f.AliasOf)
		}
	}
}
