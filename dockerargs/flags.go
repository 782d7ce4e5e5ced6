package dockerargs

import (
	"slices"
	"strings"
	"sync"
)

// Flag describes one flag of `docker run`.
type Flag struct {
	// Name is the long name, without the leading "--".
	Name string
	// Shorthand is the one-letter short name without the "-", or "".
	Shorthand string
	// TakesValue is true for flags that need a value ("--env X", "--env=X",
	// "-eX") and false for boolean flags, which take a value only when it is
	// attached with "=" ("--rm=false", "-d=false").
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

// canonical returns the name of the flag whose values f sets.
func (f Flag) canonical() string {
	if f.AliasOf != "" {
		return f.AliasOf
	}
	return f.Name
}

// display returns the flag as pflag names it in error messages:
// "-e, --env" or "--rm".
func (f Flag) display() string {
	if f.Shorthand != "" {
		return "-" + f.Shorthand + ", --" + f.Name
	}
	return "--" + f.Name
}

// flagTable returns a fresh copy of every flag of `docker run`: the union of
// docker CLI 20.10.24, 28.2.2 and 29.9 (cli/command/container/run.go and
// opts.go addFlags, plus command.AddPlatformFlag and
// AddTrustVerificationFlags). Flags only a Windows daemon honours
// (--cpu-count, --cpu-percent, --io-maxbandwidth, --io-maxiops) are accepted
// by every CLI and listed too. Deprecated flags (--kernel-memory,
// --disable-content-trust in 29.x) are still accepted.
func flagTable() []Flag {
	const v, b = true, false // takes a value / boolean
	return []Flag{
		{Name: "add-host", TakesValue: v},
		{Name: "annotation", TakesValue: v, Since: "24.0"},
		{Name: "attach", Shorthand: "a", TakesValue: v},
		{Name: "blkio-weight", TakesValue: v},
		{Name: "blkio-weight-device", TakesValue: v},
		{Name: "cap-add", TakesValue: v},
		{Name: "cap-drop", TakesValue: v},
		{Name: "cgroup-parent", TakesValue: v},
		{Name: "cgroupns", TakesValue: v},
		{Name: "cidfile", TakesValue: v},
		{Name: "cpu-count", TakesValue: v},
		{Name: "cpu-percent", TakesValue: v},
		{Name: "cpu-period", TakesValue: v},
		{Name: "cpu-quota", TakesValue: v},
		{Name: "cpu-rt-period", TakesValue: v},
		{Name: "cpu-rt-runtime", TakesValue: v},
		{Name: "cpu-shares", Shorthand: "c", TakesValue: v},
		{Name: "cpus", TakesValue: v},
		{Name: "cpuset-cpus", TakesValue: v},
		{Name: "cpuset-mems", TakesValue: v},
		{Name: "detach", Shorthand: "d", TakesValue: b},
		{Name: "detach-keys", TakesValue: v},
		{Name: "device", TakesValue: v},
		{Name: "device-cgroup-rule", TakesValue: v},
		{Name: "device-read-bps", TakesValue: v},
		{Name: "device-read-iops", TakesValue: v},
		{Name: "device-write-bps", TakesValue: v},
		{Name: "device-write-iops", TakesValue: v},
		{Name: "disable-content-trust", TakesValue: b},
		{Name: "dns", TakesValue: v},
		{Name: "dns-opt", TakesValue: v, AliasOf: "dns-option", Hidden: true},
		{Name: "dns-option", TakesValue: v},
		{Name: "dns-search", TakesValue: v},
		{Name: "domainname", TakesValue: v},
		{Name: "entrypoint", TakesValue: v},
		{Name: "env", Shorthand: "e", TakesValue: v},
		{Name: "env-file", TakesValue: v},
		{Name: "expose", TakesValue: v},
		{Name: "gpus", TakesValue: v},
		{Name: "group-add", TakesValue: v},
		{Name: "health-cmd", TakesValue: v},
		{Name: "health-interval", TakesValue: v},
		{Name: "health-retries", TakesValue: v},
		{Name: "health-start-interval", TakesValue: v, Since: "25.0"},
		{Name: "health-start-period", TakesValue: v},
		{Name: "health-timeout", TakesValue: v},
		{Name: "help", TakesValue: b},
		{Name: "hostname", Shorthand: "h", TakesValue: v},
		{Name: "init", TakesValue: b},
		{Name: "interactive", Shorthand: "i", TakesValue: b},
		{Name: "io-maxbandwidth", TakesValue: v},
		{Name: "io-maxiops", TakesValue: v},
		{Name: "ip", TakesValue: v},
		{Name: "ip6", TakesValue: v},
		{Name: "ipc", TakesValue: v},
		{Name: "isolation", TakesValue: v},
		{Name: "kernel-memory", TakesValue: v},
		{Name: "label", Shorthand: "l", TakesValue: v},
		{Name: "label-file", TakesValue: v},
		{Name: "link", TakesValue: v},
		{Name: "link-local-ip", TakesValue: v},
		{Name: "log-driver", TakesValue: v},
		{Name: "log-opt", TakesValue: v},
		{Name: "mac-address", TakesValue: v},
		{Name: "memory", Shorthand: "m", TakesValue: v},
		{Name: "memory-reservation", TakesValue: v},
		{Name: "memory-swap", TakesValue: v},
		{Name: "memory-swappiness", TakesValue: v},
		{Name: "mount", TakesValue: v},
		{Name: "name", TakesValue: v},
		{Name: "net", TakesValue: v, AliasOf: "network", Hidden: true},
		{Name: "net-alias", TakesValue: v, AliasOf: "network-alias", Hidden: true},
		{Name: "network", TakesValue: v},
		{Name: "network-alias", TakesValue: v},
		{Name: "no-healthcheck", TakesValue: b},
		{Name: "oom-kill-disable", TakesValue: b},
		{Name: "oom-score-adj", TakesValue: v},
		{Name: "pid", TakesValue: v},
		{Name: "pids-limit", TakesValue: v},
		{Name: "platform", TakesValue: v},
		{Name: "privileged", TakesValue: b},
		{Name: "publish", Shorthand: "p", TakesValue: v},
		{Name: "publish-all", Shorthand: "P", TakesValue: b},
		{Name: "pull", TakesValue: v},
		{Name: "quiet", Shorthand: "q", TakesValue: b, Since: "23.0"},
		{Name: "read-only", TakesValue: b},
		{Name: "restart", TakesValue: v},
		{Name: "rm", TakesValue: b},
		{Name: "runtime", TakesValue: v},
		{Name: "security-opt", TakesValue: v},
		{Name: "shm-size", TakesValue: v},
		{Name: "sig-proxy", TakesValue: b},
		{Name: "stop-signal", TakesValue: v},
		{Name: "stop-timeout", TakesValue: v},
		{Name: "storage-opt", TakesValue: v},
		{Name: "sysctl", TakesValue: v},
		{Name: "tmpfs", TakesValue: v},
		{Name: "tty", Shorthand: "t", TakesValue: b},
		{Name: "ulimit", TakesValue: v},
		{Name: "umask", TakesValue: v, Since: "29.8"},
		{Name: "use-api-socket", TakesValue: b, Since: "28.1"},
		{Name: "user", Shorthand: "u", TakesValue: v},
		{Name: "userns", TakesValue: v},
		{Name: "uts", TakesValue: v},
		{Name: "volume", Shorthand: "v", TakesValue: v},
		{Name: "volume-driver", TakesValue: v},
		{Name: "volumes-from", TakesValue: v},
		{Name: "workdir", Shorthand: "w", TakesValue: v},
	}
}

// flagIndex maps long and short names to flags.
type flagIndex struct {
	long  map[string]Flag
	short map[byte]Flag
}

// tables returns the lookup tables, built once from flagTable and only read
// afterwards.
var tables = sync.OnceValue(func() *flagIndex {
	tbl := flagTable()
	ix := &flagIndex{long: make(map[string]Flag, len(tbl)), short: make(map[byte]Flag)}
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
