package runargs

import (
	"cmp"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/pflag"
)

// Flag describes one flag of `docker run`.
type Flag struct {
	// Name is the long name, without the leading "--".
	Name string
	// Shorthand is the one-letter short name without the "-", or "".
	Shorthand string
	// Type is the type of the flag's value as `docker run --help` names it,
	// "bool" for booleans (help names none). Of "string", "int", "uint",
	// "uint16", "duration", "bytes", "decimal" and "umask" the last value
	// given wins; "list", "map", "mount", "gpu-request", "network" and
	// "ulimit" collect every value given (see Flag.Collects).
	Type string
	// TakesValue is true for flags that need a value ("--env X", "--env=X",
	// "-eX") and false for boolean flags, which take a value only when it is
	// attached with "=" ("--rm=false", "-d=false"). It is Type != "bool".
	TakesValue bool
	// AliasOf names the flag whose values this one sets, for the hidden
	// aliases docker keeps for old spellings ("net" sets "network").
	AliasOf string
	// Hidden is true for flags the CLI accepts but never lists in
	// `docker run --help`.
	Hidden bool
	// Since is the first docker CLI release that accepts the flag, or ""
	// when docker 20.10 already did. Parse accepts every flag whatever the
	// version; an older CLI rejects the newer ones itself.
	Since string
}

// Collects reports whether docker keeps every value of the flag (its list
// and map types: "-e A=1 -e B=2" sets two variables) rather than the last
// one ("--shm-size 1g --shm-size 2g" is 2g).
func (f Flag) Collects() bool {
	switch f.Type {
	case "list", "map", "mount", "gpu-request", "network", "ulimit":
		return true
	}
	return false
}

// flagTable returns a fresh copy of every flag of `docker run`: the union of
// docker CLI 20.10.24, 28.2.2 and 29.9 (cli/command/container/run.go and
// opts.go addFlags, plus command.AddPlatformFlag and
// AddTrustVerificationFlags). Flags only a Windows daemon honours
// (--cpu-count, --cpu-percent, --io-maxbandwidth, --io-maxiops) are accepted
// by every CLI and listed too. Deprecated flags (--kernel-memory,
// --disable-content-trust in 29.x) are still accepted. Types are the ones
// `docker run --help` prints (the tests compare), and for the flags help
// hides, those of docker's source.
func flagTable() []Flag {
	tbl := []Flag{
		{Name: "add-host", Type: "list"},
		{Name: "annotation", Type: "map", Since: "24.0"},
		{Name: "attach", Shorthand: "a", Type: "list"},
		{Name: "blkio-weight", Type: "uint16"},
		{Name: "blkio-weight-device", Type: "list"},
		{Name: "cap-add", Type: "list"},
		{Name: "cap-drop", Type: "list"},
		{Name: "cgroup-parent", Type: "string"},
		{Name: "cgroupns", Type: "string"},
		{Name: "cidfile", Type: "string"},
		{Name: "cpu-count", Type: "int"},
		{Name: "cpu-percent", Type: "int"},
		{Name: "cpu-period", Type: "int"},
		{Name: "cpu-quota", Type: "int"},
		{Name: "cpu-rt-period", Type: "int"},
		{Name: "cpu-rt-runtime", Type: "int"},
		{Name: "cpu-shares", Shorthand: "c", Type: "int"},
		{Name: "cpus", Type: "decimal"},
		{Name: "cpuset-cpus", Type: "string"},
		{Name: "cpuset-mems", Type: "string"},
		{Name: "detach", Shorthand: "d", Type: "bool"},
		{Name: "detach-keys", Type: "string"},
		{Name: "device", Type: "list"},
		{Name: "device-cgroup-rule", Type: "list"},
		{Name: "device-read-bps", Type: "list"},
		{Name: "device-read-iops", Type: "list"},
		{Name: "device-write-bps", Type: "list"},
		{Name: "device-write-iops", Type: "list"},
		{Name: "disable-content-trust", Type: "bool"},
		{Name: "dns", Type: "list"},
		{Name: "dns-opt", Type: "list", AliasOf: "dns-option", Hidden: true},
		{Name: "dns-option", Type: "list"},
		{Name: "dns-search", Type: "list"},
		{Name: "domainname", Type: "string"},
		{Name: "entrypoint", Type: "string"},
		{Name: "env", Shorthand: "e", Type: "list"},
		{Name: "env-file", Type: "list"},
		{Name: "expose", Type: "list"},
		{Name: "gpus", Type: "gpu-request"},
		{Name: "group-add", Type: "list"},
		{Name: "health-cmd", Type: "string"},
		{Name: "health-interval", Type: "duration"},
		{Name: "health-retries", Type: "int"},
		{Name: "health-start-interval", Type: "duration", Since: "25.0"},
		{Name: "health-start-period", Type: "duration"},
		{Name: "health-timeout", Type: "duration"},
		{Name: "help", Type: "bool"},
		{Name: "hostname", Shorthand: "h", Type: "string"},
		{Name: "init", Type: "bool"},
		{Name: "interactive", Shorthand: "i", Type: "bool"},
		{Name: "io-maxbandwidth", Type: "bytes"},
		{Name: "io-maxiops", Type: "uint"},
		{Name: "ip", Type: "string"},
		{Name: "ip6", Type: "string"},
		{Name: "ipc", Type: "string"},
		{Name: "isolation", Type: "string"},
		{Name: "kernel-memory", Type: "bytes"},
		{Name: "label", Shorthand: "l", Type: "list"},
		{Name: "label-file", Type: "list"},
		{Name: "link", Type: "list"},
		{Name: "link-local-ip", Type: "list"},
		{Name: "log-driver", Type: "string"},
		{Name: "log-opt", Type: "list"},
		{Name: "mac-address", Type: "string"},
		{Name: "memory", Shorthand: "m", Type: "bytes"},
		{Name: "memory-reservation", Type: "bytes"},
		{Name: "memory-swap", Type: "bytes"},
		{Name: "memory-swappiness", Type: "int"},
		{Name: "mount", Type: "mount"},
		{Name: "name", Type: "string"},
		{Name: "net", Type: "network", AliasOf: "network", Hidden: true},
		{Name: "net-alias", Type: "list", AliasOf: "network-alias", Hidden: true},
		{Name: "network", Type: "network"},
		{Name: "network-alias", Type: "list"},
		{Name: "no-healthcheck", Type: "bool"},
		{Name: "oom-kill-disable", Type: "bool"},
		{Name: "oom-score-adj", Type: "int"},
		{Name: "pid", Type: "string"},
		{Name: "pids-limit", Type: "int"},
		{Name: "platform", Type: "string"},
		{Name: "privileged", Type: "bool"},
		{Name: "publish", Shorthand: "p", Type: "list"},
		{Name: "publish-all", Shorthand: "P", Type: "bool"},
		{Name: "pull", Type: "string"},
		{Name: "quiet", Shorthand: "q", Type: "bool", Since: "23.0"},
		{Name: "read-only", Type: "bool"},
		{Name: "restart", Type: "string"},
		{Name: "rm", Type: "bool"},
		{Name: "runtime", Type: "string"},
		{Name: "security-opt", Type: "list"},
		{Name: "shm-size", Type: "bytes"},
		{Name: "sig-proxy", Type: "bool"},
		{Name: "stop-signal", Type: "string"},
		{Name: "stop-timeout", Type: "int"},
		{Name: "storage-opt", Type: "list"},
		{Name: "sysctl", Type: "map"},
		{Name: "tmpfs", Type: "list"},
		{Name: "tty", Shorthand: "t", Type: "bool"},
		{Name: "ulimit", Type: "ulimit"},
		{Name: "umask", Type: "umask", Since: "29.8"},
		{Name: "use-api-socket", Type: "bool", Since: "28.1"},
		{Name: "user", Shorthand: "u", Type: "string"},
		{Name: "userns", Type: "string"},
		{Name: "uts", Type: "string"},
		{Name: "volume", Shorthand: "v", Type: "list"},
		{Name: "volume-driver", Type: "string"},
		{Name: "volumes-from", Type: "list"},
		{Name: "workdir", Shorthand: "w", Type: "string"},
	}
	for i := range tbl {
		tbl[i].TakesValue = tbl[i].Type != "bool"
	}
	return tbl
}

// aliasOf is the annotation that names, on a hidden alias ("net"), the flag
// whose values it sets ("network").
const aliasOf = "dockerargs/alias-of"

// addFlags registers the flags of tbl in fs with the pflag value types
// docker gives them, so that pflag accepts and rejects what docker's does.
// A flag named in dst writes into the pointer there (a *bool, *string or
// *[]string, by its type); the others into values of their own. An alias
// shares the value of the flag it stands for, as in docker.
func addFlags(fs *pflag.FlagSet, tbl []Flag, dst map[string]any) {
	fs.SetOutput(io.Discard) // pflag's notices for deprecated flags
	for _, f := range tbl {
		switch to := dst[f.Name]; {
		case f.AliasOf != "":
			continue
		case f.Type == "bool":
			p, _ := to.(*bool)
			fs.BoolVarP(cmp.Or(p, new(bool)), f.Name, f.Shorthand, false, "")
		case f.Type == "int":
			fs.Int64P(f.Name, f.Shorthand, 0, "")
		case f.Type == "uint":
			fs.Uint64P(f.Name, f.Shorthand, 0, "")
		case f.Type == "uint16":
			fs.Uint16P(f.Name, f.Shorthand, 0, "")
		case f.Type == "duration":
			fs.DurationP(f.Name, f.Shorthand, 0, "")
		case f.Collects():
			p, _ := to.(*[]string)
			fs.VarP(listValue{cmp.Or(p, new([]string))}, f.Name, f.Shorthand, "")
		default: // "string", and docker's own types it checks itself ("bytes")
			p, _ := to.(*string)
			fs.StringVarP(cmp.Or(p, new(string)), f.Name, f.Shorthand, "", "")
		}
		fs.Lookup(f.Name).Hidden = f.Hidden
	}
	for _, f := range tbl {
		if f.AliasOf != "" {
			alias := fs.VarPF(fs.Lookup(f.AliasOf).Value, f.Name, f.Shorthand, "")
			alias.Hidden, alias.Annotations = f.Hidden, map[string][]string{aliasOf: {f.AliasOf}}
		}
	}
}

// listValue is the pflag.Value of docker's list types: it keeps every value
// given, in order, as written. (pflag's StringArray does too, but formats
// its default as CSV with a 4 KiB buffer, for each flag of each Parse.)
type listValue struct{ vals *[]string }

// Set implements pflag.Value.
func (l listValue) Set(v string) error {
	*l.vals = append(*l.vals, v)
	return nil
}

// String implements pflag.Value, as docker's list types do.
func (l listValue) String() string { return "[" + strings.Join(*l.vals, " ") + "]" }

// Type implements pflag.Value.
func (l listValue) Type() string { return "list" }

// flagIndex holds the table and maps long and short names to its flags.
type flagIndex struct {
	all   []Flag
	long  map[string]Flag
	short map[byte]Flag
}

// tables returns the lookup tables, built once from flagTable and only read
// afterwards.
var tables = sync.OnceValue(func() *flagIndex {
	tbl := flagTable()
	ix := &flagIndex{all: tbl, long: make(map[string]Flag, len(tbl)), short: make(map[byte]Flag)}
	for _, f := range tbl {
		ix.long[f.Name] = f
		if f.Shorthand != "" {
			ix.short[f.Shorthand[0]] = f
		}
	}
	return ix
})

// Flags returns every flag `docker run` accepts, sorted by long name. The
// slice is a fresh copy; changing it changes nothing in the package.
func Flags() []Flag {
	tbl := flagTable()
	slices.SortFunc(tbl, func(a, b Flag) int { return strings.Compare(a.Name, b.Name) })
	return tbl
}

// LookupFlag finds a flag by its long name ("env" or "--env") or its
// shorthand ("-e").
func LookupFlag(name string) (Flag, bool) {
	ix := tables()
	switch {
	case strings.HasPrefix(name, "--"):
		f, ok := ix.long[name[2:]]
		return f, ok
	case len(name) == 2 && name[0] == '-':
		f, ok := ix.short[name[1]]
		return f, ok
	default:
		f, ok := ix.long[name]
		return f, ok
	}
}
