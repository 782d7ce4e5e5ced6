package runargs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpurun/gpurun/oci"
)

// Environment returns the environment list the docker CLI sends to the
// daemon for this run (the container's Config.Env before the image's
// variables are merged in, see MergeEnv): the variables of every --env-file
// in order, then every -e/--env in order, later entries overriding earlier
// ones. A bare "-e KEY" becomes "KEY=<value>" when lookupEnv finds KEY, and
// stays a bare "KEY" otherwise (which removes KEY from the image's
// environment). A bare KEY in an env file is taken from lookupEnv too, and
// dropped when lookupEnv does not find it.
//
// lookupEnv stands for the environment of the docker CLI (gpurun's own);
// nil means os.LookupEnv. readFile reads an env file; nil means os.ReadFile.
// An unreadable or invalid env file is an error, as it is for docker.
func (r *Run) Environment(lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) ([]string, error) {
	lookupEnv, readFile = envDefaults(lookupEnv, readFile)
	var env []string
	for _, name := range r.EnvFiles {
		data, err := readFile(name)
		if err != nil {
			return nil, fmt.Errorf("read env file: %w", err)
		}
		vars, err := ParseEnvFile(name, data, lookupEnv)
		if err != nil {
			return nil, err
		}
		env = append(env, vars...)
	}
	return append(env, r.resolvedEnv(lookupEnv)...), nil
}

// LookupEnv returns the value the arguments give the container's variable
// key, resolving -e KEY=VAL, a bare -e KEY (from lookupEnv, like docker) and
// --env-file files with docker's precedence: files in order, then -e in
// order, the last KEY=VAL wins. It reports false when the arguments set no
// value for key; the image's own environment then applies, unless a bare
// -e KEY that lookupEnv does not find removes it (see MergeEnv).
//
// nil lookupEnv and readFile mean os.LookupEnv and os.ReadFile. An env file
// that cannot be read or parsed is skipped (docker would refuse to start
// the container).
func (r *Run) LookupEnv(key string, lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (string, bool) {
	lookupEnv, readFile = envDefaults(lookupEnv, readFile)
	var env []string
	for _, name := range r.EnvFiles {
		data, err := readFile(name)
		if err != nil {
			continue
		}
		vars, err := ParseEnvFile(name, data, lookupEnv)
		if err != nil {
			continue
		}
		env = append(env, vars...)
	}
	env = append(env, r.resolvedEnv(lookupEnv)...)
	return oci.LookupEnv(env, key)
}

// resolvedEnv returns the -e values as docker's opts.ValidateEnv leaves
// them: a bare KEY found by lookupEnv becomes KEY=value.
func (r *Run) resolvedEnv(lookupEnv func(string) (string, bool)) []string {
	env := make([]string, 0, len(r.Env))
	for _, e := range r.Env {
		if !strings.Contains(e, "=") {
			if v, ok := lookupEnv(e); ok {
				e += "=" + v
			}
		}
		env = append(env, e)
	}
	return env
}

func envDefaults(lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (func(string) (string, bool), func(string) ([]byte, error)) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	return lookupEnv, readFile
}

// ParseEnvFile parses the contents of a docker env file (--env-file) the way
// the docker CLI does (pkg/kvfile): one variable per line; leading
// whitespace is dropped, trailing whitespace is part of the value; blank
// lines and lines starting with '#' are skipped; there is no quoting, so
// quotes are part of the value; a UTF-8 BOM at the start is ignored;
// "KEY=VALUE" is kept as is; a bare "KEY" takes its value from lookupEnv and
// is dropped when lookupEnv does not find it. A line with an empty name, a
// name containing a space or a tab, or invalid UTF-8 is an error. name is
// used in error messages only. A nil lookupEnv finds nothing.
func ParseEnvFile(name string, data []byte, lookupEnv func(string) (string, bool)) ([]string, error) {
	vars := []string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		b := sc.Bytes()
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("invalid env file (%s): invalid utf8 bytes at line %d", name, n)
		}
		if n == 1 {
			b = bytes.TrimPrefix(b, []byte{0xEF, 0xBB, 0xBF})
		}
		line := strings.TrimLeftFunc(string(b), unicode.IsSpace)
		if line == "" || line[0] == '#' {
			continue
		}
		key, _, hasValue := strings.Cut(line, "=")
		if key == "" {
			return nil, fmt.Errorf("invalid env file (%s): no variable name on line %d '%s'", name, n, line)
		}
		if strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("invalid env file (%s): variable '%s' on line %d contains whitespaces", name, key, n)
		}
		if hasValue {
			vars = append(vars, line)
			continue
		}
		if lookupEnv != nil {
			if v, ok := lookupEnv(key); ok {
				vars = append(vars, key+"="+v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("invalid env file (%s): %w", name, err)
	}
	return vars, nil
}

// MergeEnv returns the container's Config.Env as dockerd (daemon/commit.go
// merge) builds it from the run's environment (see Environment) and the
// image's: every run entry in order, then each image entry whose variable
// the run does not name. A bare "KEY" in runEnv names KEY, so it removes
// the image's KEY, but it does not remove an earlier KEY=VALUE of the run
// itself. Use oci.LookupEnv on the result for the value a process sees.
// Neither argument is modified.
func MergeEnv(imageEnv, runEnv []string) []string {
	merged := make([]string, 0, len(runEnv)+len(imageEnv))
	merged = append(merged, runEnv...)
	named := make(map[string]bool, len(runEnv))
	for _, e := range runEnv {
		k, _, _ := strings.Cut(e, "=")
		named[k] = true
	}
	for _, e := range imageEnv {
		if k, _, _ := strings.Cut(e, "="); !named[k] {
			merged = append(merged, e)
		}
	}
	return merged
}
