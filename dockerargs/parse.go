package dockerargs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
// an unknown flag, a flag without its value, a bad boolean value, or an
// -e/--env with an empty variable name.
type FlagError struct {
	// Flag is the flag as written ("--gpus", "-x", "--rm").
	Flag string
	// Arg is the whole argument that holds the flag ("-itx").
	Arg string
	// Index is the index of Arg in the arguments.
	Index int
	// Msg says what is wrong, in docker's words.
	Msg string
	// Err is the underlying error, if any (a strconv error for booleans).
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
	ix := tables()
	i := 0
	for i < len(args) {
		s := args[i]
		if len(s) < 2 || s[0] != '-' {
			// Not a flag ("", "-", "image"): the image.
			r.setImage(i)
			break
		}
		if s == "--" {
			// "--" ends the flags; the next argument is the image.
			if i+1 < len(args) {
				r.setImage(i + 1)
			}
			break
		}
		var err error
		if s[1] == '-' {
			i, err = r.parseLong(ix, i)
		} else {
			i, err = r.parseShort(ix, i)
		}
		if err != nil {
			return r, err
		}
	}
	if r.ImageIndex < 0 && !r.Help {
		// The arguments are not quoted: -e values may hold secrets.
		return r, fmt.Errorf("parse %d docker run arguments: %w", len(args), ErrNoImage)
	}
	return r, nil
}

func (r *Run) setImage(i int) {
	r.ImageIndex = i
	r.Image = r.Args[i]
	if i+1 < len(r.Args) {
		r.Command = r.Args[i+1:]
	}
}

// parseLong handles Args[i], which starts with "--" and is longer than
// that, like pflag's parseLongArg. It returns the index of the next
// argument to read.
func (r *Run) parseLong(ix *flagIndex, i int) (int, error) {
	s := r.Args[i]
	name := s[2:]
	if name[0] == '-' || name[0] == '=' {
		return 0, &FlagError{Flag: s, Arg: s, Index: i, Msg: "bad flag syntax: " + s}
	}
	name, value, hasValue := strings.Cut(name, "=")
	f, ok := ix.long[name]
	if !ok {
		return 0, &FlagError{Flag: "--" + name, Arg: s, Index: i, Msg: "unknown flag: --" + name}
	}
	next := i + 1
	switch {
	case hasValue:
		// --flag=value
	case !f.TakesValue:
		value = "true"
	case next < len(r.Args):
		// --flag value: the next argument, even when it looks like a flag.
		value = r.Args[next]
		next++
	default:
		return 0, &FlagError{Flag: "--" + name, Arg: s, Index: i, Msg: "flag needs an argument: " + s}
	}
	if err := r.set(f, "--"+name, value, i); err != nil {
		return 0, err
	}
	return next, nil
}

// parseShort handles Args[i], a cluster of short flags ("-itd",
// "-p8080:80", "-e=X"), like pflag's parseShortArg. It returns the index of
// the next argument to read.
func (r *Run) parseShort(ix *flagIndex, i int) (int, error) {
	s := r.Args[i]
	next := i + 1
	shorthands := s[1:]
	for len(shorthands) > 0 {
		if strings.HasPrefix(shorthands, "test.") {
			// pflag silently drops the rest of the group ("-test.v").
			break
		}
		c := shorthands[0]
		rest := shorthands[1:]
		f, ok := ix.short[c]
		if !ok {
			return 0, &FlagError{Flag: "-" + string(rune(c)), Arg: s, Index: i,
				Msg: fmt.Sprintf("unknown shorthand flag: %q in -%s", c, shorthands)}
		}
		var value string
		switch {
		case len(shorthands) > 2 && shorthands[1] == '=':
			// -f=value
			value, rest = shorthands[2:], ""
		case !f.TakesValue:
			value = "true"
		case len(shorthands) > 1:
			// -fvalue
			value, rest = shorthands[1:], ""
		case next < len(r.Args):
			// -f value: the next argument, even when it looks like a flag.
			value = r.Args[next]
			next++
		default:
			return 0, &FlagError{Flag: "-" + f.Shorthand, Arg: s, Index: i,
				Msg: fmt.Sprintf("flag needs an argument: %q in -%s", c, shorthands)}
		}
		if err := r.set(f, "-"+f.Shorthand, value, i); err != nil {
			return 0, err
		}
		shorthands = rest
	}
	return next, nil
}

// set records one flag with its value, validating what docker's flag
// parser validates and that matters here: booleans and -e names.
func (r *Run) set(f Flag, given, value string, i int) error {
	if !f.TakesValue {
		b, err := strconv.ParseBool(value)
		if err != nil {
			return &FlagError{Flag: given, Arg: r.Args[i], Index: i, Err: err,
				Msg: fmt.Sprintf("invalid argument %q for %q flag: %v", value, f.display(), err)}
		}
		value = strconv.FormatBool(b)
	}
	name := f.canonical()
	if key, _, _ := strings.Cut(value, "="); name == "env" && key == "" {
		return &FlagError{Flag: given, Arg: r.Args[i], Index: i,
			Msg: fmt.Sprintf("invalid argument %q for %q flag: invalid environment variable: %s", value, f.display(), value)}
	}
	r.Occurrences = append(r.Occurrences, Occurrence{Name: name, Given: given, Value: value, Index: i})
	switch name {
	case "env":
		r.Env = append(r.Env, value)
	case "env-file":
		r.EnvFiles = append(r.EnvFiles, value)
	case "gpus":
		r.GPUs, r.GPUsSet = value, true
		r.GPURequests = append(r.GPURequests, value)
	case "runtime":
		r.Runtime = value
	case "device":
		r.Devices = append(r.Devices, value)
	case "shm-size":
		r.ShmSize, r.ShmSizeSet = value, true
	case "ipc":
		r.IPC, r.IPCSet = value, true
	case "tmpfs":
		r.Tmpfs = append(r.Tmpfs, value)
	case "volume":
		r.Volumes = append(r.Volumes, value)
	case "mount":
		r.Mounts = append(r.Mounts, value)
	case "memory":
		r.Memory, r.MemorySet = value, true
	case "annotation":
		r.Annotations = append(r.Annotations, value)
	case "detach":
		r.Detach = value == "true"
	case "interactive":
		r.Interactive = value == "true"
	case "tty":
		r.TTY = value == "true"
	case "rm":
		r.Remove = value == "true"
	case "privileged":
		r.Privileged = value == "true"
	case "help":
		r.Help = value == "true"
	}
	return nil
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
