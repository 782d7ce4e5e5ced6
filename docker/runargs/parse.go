package runargs

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Run is what the arguments of one `docker run` ask for. Parse fills it; it
// holds copies of the arguments and never changes them.
type Run struct {
	// Args are the arguments as given (everything after "run"), never
	// modified.
	Args []string
	// Image is the image reference, exactly as written.
	Image string
	// ImageIndex is the index of the image in Args, or -1 when there is
	// none (only possible when Help is set).
	ImageIndex int
	// Command is everything after the image: the container's command and
	// its arguments, untouched even when they look like flags. Nil when the
	// image is the last argument.
	Command []string

	// GPUs is the value of the last --gpus ("all", `"device=0,1"`, ...);
	// GPUsSet reports whether --gpus was given at all.
	GPUs    string
	GPUsSet bool
	// GPURequests holds every --gpus value in order: docker adds one device
	// request per --gpus flag.
	GPURequests []string
	// Runtime is the last --runtime value ("" when not given).
	Runtime string
	// Env holds the -e/--env values in order, as written: "KEY=VAL", or a
	// bare "KEY" that docker fills in from its own environment (see
	// Environment).
	Env []string
	// EnvFiles holds the --env-file paths in order.
	EnvFiles []string
	// Devices holds the --device values in order (see DeviceTarget).
	Devices []string
	// ShmSize is the raw text of the last --shm-size (docker keeps the last
	// one); ShmSizeSet reports whether --shm-size was given.
	ShmSize    string
	ShmSizeSet bool
	// IPC is the last --ipc value ("host", "private", "shareable",
	// "container:<id>", "none", ""); IPCSet reports whether --ipc was given.
	IPC    string
	IPCSet bool
	// Tmpfs holds the --tmpfs values in order ("/path[:options]").
	Tmpfs []string
	// Volumes holds the -v/--volume values in order.
	Volumes []string
	// Mounts holds the --mount values in order (CSV, see MountsDevShm).
	Mounts []string
	// Memory is the raw text of the last -m/--memory; MemorySet reports
	// whether it was given.
	Memory    string
	MemorySet bool
	// Annotations holds the --annotation values in order (docker 24+).
	Annotations []string
	// Detach, Interactive, TTY and Remove are the final values of -d, -i,
	// -t and --rm (the last one given wins; "--rm=false" clears).
	Detach, Interactive, TTY, Remove bool
	// Privileged is the final value of --privileged, which gives the
	// container every host device, GPUs included.
	Privileged bool
	// Help is the final value of --help: docker prints the usage of
	// `docker run` and runs nothing, so no image is needed.
	Help bool

	// Occurrences lists every flag given, in order.
	Occurrences []Occurrence
}

// Occurrence is one flag as it appears in the arguments.
type Occurrence struct {
	// Name is the canonical long name of the flag whose value is set: "env"
	// for -e, "network" for the hidden alias --net.
	Name string
	// Given is the flag as written, without its value: "-e", "--env",
	// "--net", or "-t" when it came in the cluster "-itd".
	Given string
	// Value is the flag's value as docker receives it. For boolean flags it
	// is "true" or "false", whatever spelling was used ("-d", "--rm=0").
	Value string
	// Index is the index in Args of the argument naming the flag (the value
	// may be in the next one).
	Index int
}

// ErrNoImage is returned, wrapped, by Parse when the arguments hold no image
// (docker says `"docker run" requires at least 1 argument`).
var ErrNoImage = errors.New("docker run requires an image argument")

// FlagError is the error Parse returns when docker's flag parser would fail:
// an unknown flag, a flag without its value, a value of the wrong type ("--rm=yes",
// "--cpu-shares x"), or an -e/--env with an empty variable name.
type FlagError struct {
	// Flag is the flag as written ("--gpus", "-x", "--rm").
	Flag string
	// Arg is the whole argument that holds the flag ("-itx").
	Arg string
	// Index is the index of Arg in the arguments.
	Index int
	// Msg says what is wrong, in docker's (pflag's) words.
	Msg string
	// Err is pflag's error: a *pflag.NotExistError, *pflag.ValueRequiredError,
	// *pflag.InvalidSyntaxError, or a *pflag.InvalidValueError wrapping the
	// value's own error (a strconv one for booleans and numbers).
	Err error
}

// Error implements error.
func (e *FlagError) Error() string {
	return fmt.Sprintf("docker run argument %d (%q): %s", e.Index, e.Arg, e.Msg)
}

// Unwrap returns the underlying error.
func (e *FlagError) Unwrap() error { return e.Err }

// Parse reads the arguments of `docker run` (everything after "run") the way
// the docker CLI does. It returns a *FlagError when docker's flag parser
// would reject the arguments, and an error wrapping ErrNoImage when there is
// no image. With --help docker only prints its usage, and Parse needs no
// image: it returns a Run with Help set and ImageIndex -1. Parse accepts the
// flags of every docker CLI from 20.10 on (see Flag.Since). It never
// modifies args and never panics.
func Parse(args []string) (*Run, error) {
	r, err := parse(args)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// parse is Parse, but returns what it learned before an error too.
func parse(args []string) (*Run, error) {
	args = slices.Clone(args)
	r := &Run{Args: args, ImageIndex: -1}
	fs := r.flagSet()
	occs, image, err := scan(fs, args)
	r.Occurrences = occs
	if err != nil {
		return r, err
	}
	if image == len(args) && !r.Help {
		// The arguments are not quoted: -e values may hold secrets.
		return r, fmt.Errorf("parse %d docker run arguments: %w", len(args), ErrNoImage)
	}
	if image < len(args) {
		r.ImageIndex, r.Image = image, args[image]
		if image+1 < len(args) {
			r.Command = args[image+1:]
		}
	}
	if n := len(r.GPURequests); n > 0 {
		r.GPUs, r.GPUsSet = r.GPURequests[n-1], true
	}
	r.ShmSizeSet, r.IPCSet, r.MemorySet = fs.Changed("shm-size"), fs.Changed("ipc"), fs.Changed("memory")
	return r, nil
}

// flagSet returns a FlagSet with every flag of `docker run`, set up the way
// docker sets up its own (stop at the image); the flags Run keeps write into
// r's fields.
func (r *Run) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	addFlags(fs, tables().all, map[string]any{
		"detach": &r.Detach, "interactive": &r.Interactive, "tty": &r.TTY, "rm": &r.Remove,
		"privileged": &r.Privileged, "help": &r.Help,
		"runtime": &r.Runtime, "shm-size": &r.ShmSize, "ipc": &r.IPC, "memory": &r.Memory,
		"env": &r.Env, "env-file": &r.EnvFiles, "gpus": &r.GPURequests, "device": &r.Devices,
		"tmpfs": &r.Tmpfs, "volume": &r.Volumes, "mount": &r.Mounts, "annotation": &r.Annotations,
	})
	env := fs.Lookup("env")
	env.Value = envValue{env.Value}
	return fs
}

// scan lets fs parse args up to the first argument that is not a flag and
// returns the flags given, in order, and the index of that argument (the
// image; len(args) when there is none). pflag says neither where a flag
// was nor how it was spelled, so scan hands it one argument at a time, two
// when the last flag in the first takes the next as its value.
func scan(fs *pflag.FlagSet, args []string) ([]Occurrence, int, error) {
	var occs []Occurrence
	i := 0
	set := func(f *pflag.Flag, value string) error {
		if err := fs.Set(f.Name, value); err != nil {
			return err
		}
		o := Occurrence{Name: f.Name, Given: spelled(args[i], f.Name, f.Shorthand), Value: value, Index: i}
		if a := f.Annotations[aliasOf]; len(a) > 0 {
			o.Name = a[0]
		}
		if f.Value.Type() == "bool" {
			o.Value = f.Value.String() // "true" or "false", however written
		}
		occs = append(occs, o)
		return nil
	}
	for i < len(args) {
		n, before := 1, len(occs)
		err := fs.ParseAll(args[i:i+1], set)
		if _, ok := errors.AsType[*pflag.ValueRequiredError](err); ok && i+1 < len(args) {
			// Any flags before it in a cluster ("-ite") are booleans set
			// to true: setting them again changes nothing.
			n, occs = 2, occs[:before]
			err = fs.ParseAll(args[i:i+2], set)
		}
		switch {
		case err != nil:
			return occs, i, newFlagError(err, args[i], i)
		case len(fs.Args()) > 0: // not a flag
			return occs, i, nil
		case fs.ArgsLenAtDash() == 0: // "--": the next one is not a flag
			return occs, i + 1, nil
		}
		i += n
	}
	return occs, len(args), nil
}

// spelled returns the flag with the long name long and the shorthand short
// as arg writes it: "--env" or "-e".
func spelled(arg, long, short string) string {
	if strings.HasPrefix(arg, "--") {
		return "--" + long
	}
	return "-" + short
}

// newFlagError returns pflag's err about argument arg, at index i, as a
// *FlagError.
func newFlagError(err error, arg string, i int) *FlagError {
	fe := &FlagError{Flag: arg, Arg: arg, Index: i, Msg: err.Error(), Err: err}
	switch e := err.(type) {
	case interface{ GetSpecifiedName() string }: // unknown flag, missing value
		fe.Flag = spelled(arg, e.GetSpecifiedName(), e.GetSpecifiedName())
	case *pflag.InvalidValueError:
		fe.Flag = spelled(arg, e.GetFlag().Name, e.GetFlag().Shorthand)
	} // a *pflag.InvalidSyntaxError is about the whole argument
	return fe
}

// envValue is the value of -e: docker's opts.ValidateEnv rejects a
// variable without a name ("=x").
type envValue struct{ pflag.Value }

// Set implements pflag.Value.
func (v envValue) Set(s string) error {
	if name, _, _ := strings.Cut(s, "="); name == "" {
		return fmt.Errorf("invalid environment variable: %s", s)
	}
	return v.Value.Set(s)
}

// Values returns every value given for the flag with the given long name
// ("network" also collects the hidden alias --net), in order. Boolean
// values are "true" or "false".
func (r *Run) Values(name string) []string {
	var vals []string
	for _, o := range r.Occurrences {
		if o.Name == name {
			vals = append(vals, o.Value)
		}
	}
	return vals
}

// Value returns the last value given for the flag with the given long name,
// and whether the flag was given at all.
func (r *Run) Value(name string) (string, bool) {
	for _, o := range slices.Backward(r.Occurrences) {
		if o.Name == name {
			return o.Value, true
		}
	}
	return "", false
}
