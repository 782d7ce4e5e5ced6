package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/internal/textpos"
)

// DefaultConfigFile is the daemon.json dockerd reads unless its
// --config-file flag names another.
const DefaultConfigFile = "/etc/docker/daemon.json"

// DefaultDataRoot is dockerd's data-root unless daemon.json's
// "data-root" (or a --data-root flag) says otherwise.
const DefaultDataRoot = "/var/lib/docker"

// defaultRemapUser is the user dockerd remaps root to for
// "userns-remap": "default" (moby daemon/daemon_unix.go, defaultRemappedID).
const defaultRemapUser = "dockremap"

// Daemon is a daemon.json as dockerd reads it: the keys gpurun reads, as
// written. It is the one reader of daemon.json: install, doctor and the
// editor's callers read the file through ReadDaemonJSON.
type Daemon struct {
	// DataRoot is "data-root" (or its name before Docker 23.0, "graph");
	// "" when unset (DefaultDataRoot).
	DataRoot string
	// UsernsRemap is "userns-remap": "default", "USER", "USER:GROUP", "UID"
	// or "UID:GID"; "" when unset. dockerd then keeps its containers in a
	// subdirectory of the data-root named for the remapped root (Root).
	UsernsRemap string
	// PIDFile is "pidfile"; "" when unset (DefaultPIDFile).
	PIDFile string
	// DefaultRuntime is "default-runtime"; "" when unset (runc).
	DefaultRuntime string
	// DefaultShmSize is "default-shm-size" as written ("64m", "2g");
	// "" when unset.
	DefaultShmSize string
	// Runtimes is "runtimes".
	Runtimes map[string]Runtime
	// Hosts is "hosts", the sockets dockerd listens on; nil when unset.
	Hosts []string
}

// Runtime is an entry of daemon.json's "runtimes" (dockerd's
// types.Runtime).
type Runtime struct {
	Path string   `json:"path"`
	Args []string `json:"runtimeArgs"`
	Type string   `json:"runtimeType"`
}

// daemonFile is the JSON form of the keys Daemon holds.
type daemonFile struct {
	DataRoot       string             `json:"data-root"`
	Graph          string             `json:"graph"`
	UsernsRemap    string             `json:"userns-remap"`
	PIDFile        string             `json:"pidfile"`
	DefaultRuntime string             `json:"default-runtime"`
	DefaultShmSize string             `json:"default-shm-size"`
	Runtimes       map[string]Runtime `json:"runtimes"`
	Hosts          []string           `json:"hosts"`
}

// ReadDaemonJSON reads the daemon.json document data, name being the file
// for errors. A UTF-8 byte order mark is skipped, as dockerd skips it, and
// an empty or blank document is one that sets nothing (dockerd's
// defaults). A document that does not decode is an error naming the line
// and column ("name:L:C: …").
func ReadDaemonJSON(name string, data []byte) (Daemon, error) {
	_, body := splitBOM(data)
	if len(bytes.Trim(body, space)) == 0 {
		return Daemon{}, nil
	}
	var f daemonFile
	if err := json.Unmarshal(body, &f); err != nil {
		return Daemon{}, textpos.JSONError(name, body, err)
	}
	d := Daemon{
		DataRoot:       f.DataRoot,
		UsernsRemap:    f.UsernsRemap,
		PIDFile:        f.PIDFile,
		DefaultRuntime: f.DefaultRuntime,
		DefaultShmSize: f.DefaultShmSize,
		Runtimes:       f.Runtimes,
		Hosts:          f.Hosts,
	}
	if d.DataRoot == "" {
		d.DataRoot = f.Graph
	}
	return d, nil
}

// PIDFilePath returns where dockerd writes its pid: "pidfile", else
// DefaultPIDFile.
func (d Daemon) PIDFilePath() string {
	if d.PIDFile == "" {
		return DefaultPIDFile
	}
	return d.PIDFile
}

// WithFlags returns d as a dockerd started with the flags f reads it: a
// flag wins over daemon.json's key (dockerd refuses to start with both, so
// either way it is the one in force).
func (d Daemon) WithFlags(f Flags) Daemon {
	if f.DataRoot != "" {
		d.DataRoot = f.DataRoot
	}
	if f.UsernsRemap != "" {
		d.UsernsRemap = f.UsernsRemap
	}
	if f.PIDFile != "" {
		d.PIDFile = f.PIDFile
	}
	return d
}

// Root is where a dockerd keeps its containers, worked out from its
// configuration as dockerd works it out when it starts.
type Root struct {
	// Dir is the directory (a node path) that holds containers/: the
	// data-root, its symbolic links resolved, and under userns-remap the
	// <uid>.<gid> subdirectory of it.
	Dir string
	// DataRoot is the data-root as configured: daemon.json's (or the
	// flag's), else DefaultDataRoot.
	DataRoot string
	// Set says the data-root is configured (DataRoot is not the default).
	Set bool
	// Remap is the <uid>.<gid> subdirectory under userns-remap, "" without.
	Remap string
}

// ErrRemap is wrapped when the directory userns-remap puts containers in
// cannot be worked out from the node's files: its user is unknown to
// /etc/passwd (dockerd may find it through NSS, which gpurun does not
// ask; or, for "default", dockerd creates "dockremap" when it first
// starts), or the user has no subordinate ids.
var ErrRemap = errors.New("userns-remap cannot be resolved")

// Root returns where a dockerd with this configuration keeps its
// containers, reading the node's files under hostRoot ("" or "/": this
// host), as moby's daemon.CreateDaemonRoot does at start:
//
//   - the data-root's symbolic links are resolved (resolveSymlinkedDirectory;
//     a data-root that does not exist yet is taken as written);
//   - with userns-remap, the containers are in <data-root>/<uid>.<gid>
//     (setupDaemonRoot), where uid and gid are the host ids container root
//     maps to (IdentityMapping.RootPair): the start of the first range with
//     ids in /etc/subuid and /etc/subgid whose name is the remap user's
//     name or uid (both files looked up by the user, never the group:
//     usergroup.LoadIdentityMapping). "default" is the user "dockremap";
//     a numeric user is looked up by uid in /etc/passwd; the user root
//     leaves the ids unmapped, 0 and 0, and dockerd still makes <root>/0.0.
//
// When userns-remap cannot be resolved, Root returns the data-root without
// the subdirectory and an error wrapping ErrRemap.
func (d Daemon) Root(hostRoot string) (Root, error) {
	r := Root{DataRoot: d.DataRoot, Set: d.DataRoot != ""}
	if !r.Set {
		r.DataRoot = DefaultDataRoot
	}
	r.Dir = filepath.Clean(r.DataRoot)
	if resolved, err := hostpath.Resolve(hostRoot, r.Dir); err == nil {
		r.Dir = resolved
	}
	if d.UsernsRemap == "" {
		return r, nil
	}
	uid, gid, err := remappedRoot(hostRoot, d.UsernsRemap)
	if err != nil {
		return r, fmt.Errorf("%w: %q: %w", ErrRemap, d.UsernsRemap, err)
	}
	r.Remap = fmt.Sprintf("%d.%d", uid, gid)
	r.Dir = filepath.Join(r.Dir, r.Remap)
	return r, nil
}

// remappedRoot returns the host uid and gid container root maps to under
// userns-remap spec (moby daemon/daemon_unix.go parseRemappedRoot and
// setupRemappedRoot, daemon/internal/usergroup LoadIdentityMapping).
func remappedRoot(hostRoot, spec string) (uid, gid int64, err error) {
	parts := strings.Split(spec, ":")
	if len(parts) > 2 {
		return 0, 0, errors.New("not USER, USER:GROUP, UID or UID:GID")
	}
	passwd := hostpath.Join(hostRoot, "/etc/passwd")
	var u passwdEntry
	if n, perr := strconv.ParseInt(parts[0], 10, 32); perr == nil {
		u, err = lookupUser(passwd, func(e passwdEntry) bool { return e.uid == int(n) }, "uid "+parts[0])
	} else {
		name := parts[0]
		if name == "default" {
			name = defaultRemapUser
		}
		u, err = lookupUser(passwd, func(e passwdEntry) bool { return e.name == name }, "user "+name)
	}
	if err != nil {
		return 0, 0, err
	}
	if u.name == "root" {
		// setupRemappedRoot turns user namespaces off, but the data-root
		// still gets the subdirectory of the unmapped root pair.
		return 0, 0, nil
	}
	if uid, err = subIDRoot(hostpath.Join(hostRoot, "/etc/subuid"), u); err != nil {
		return 0, 0, err
	}
	if gid, err = subIDRoot(hostpath.Join(hostRoot, "/etc/subgid"), u); err != nil {
		return 0, 0, err
	}
	return uid, gid, nil
}

// passwdEntry is the part of an /etc/passwd entry remappedRoot reads.
type passwdEntry struct {
	name string
	uid  int
}

// lookupUser returns the first entry of the passwd file that matches, as
// moby/sys/user's LookupUser and LookupUid do (a uid that is not a number
// reads as 0); what names the user in the error.
func lookupUser(passwd string, match func(passwdEntry) bool, what string) (passwdEntry, error) {
	data, err := os.ReadFile(passwd)
	if err != nil {
		return passwdEntry{}, fmt.Errorf("look up %s: %w", what, err)
	}
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		parts := strings.Split(string(line), ":")
		e := passwdEntry{name: parts[0]}
		if len(parts) > 2 {
			e.uid, _ = strconv.Atoi(parts[2])
		}
		if match(e) {
			return e, nil
		}
	}
	return passwdEntry{}, fmt.Errorf("%s is not in %s", what, passwd)
}

// subIDRoot returns the host id that container id 0 maps to by the
// subordinate id file path (/etc/subuid or /etc/subgid) for user u: the
// user's ranges (lines naming the user's name or uid), in the file's
// order, map container ids from 0 up one after the other, so it is the
// start of the first range holding any ids.
func subIDRoot(path string, u passwdEntry) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("subordinate ids of user %s: %w", u.name, err)
	}
	uid := strconv.Itoa(u.uid)
	next := int64(0) // the container id the next range starts at
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		parts := strings.Split(string(line), ":")
		if parts[0] != u.name && parts[0] != uid {
			continue
		}
		var start, count int64
		if len(parts) > 1 {
			start, _ = strconv.ParseInt(parts[1], 10, 64)
		}
		if len(parts) > 2 {
			count, _ = strconv.ParseInt(parts[2], 10, 64)
		}
		if next <= 0 && 0 <= next+count-1 {
			return start + (0 - next), nil
		}
		next += count
	}
	return 0, fmt.Errorf("%s maps no id of user %s to container root", path, u.name)
}

// Flags are the dockerd flags that move what daemon.json says: read off a
// running dockerd's command line (/proc/<pid>/cmdline).
type Flags struct {
	// ConfigFile is --config-file: the daemon.json it reads; DefaultConfigFile
	// without the flag.
	ConfigFile string
	// DataRoot is --data-root (or -g, --graph before Docker 23.0).
	DataRoot string
	// UsernsRemap is --userns-remap.
	UsernsRemap string
	// PIDFile is --pidfile (-p).
	PIDFile string
}

// ParseFlags reads the flags gpurun needs from dockerd's command line
// (args[0] is the program), as dockerd's flag parser (spf13/pflag) reads
// them: --name=value, --name value, -p value, -pvalue; "--" ends the flags.
// Other flags are passed over.
func ParseFlags(args []string) Flags {
	f := Flags{ConfigFile: DefaultConfigFile}
	long := map[string]*string{
		"config-file": &f.ConfigFile, "data-root": &f.DataRoot, "graph": &f.DataRoot,
		"userns-remap": &f.UsernsRemap, "pidfile": &f.PIDFile,
	}
	short := map[string]*string{"g": &f.DataRoot, "p": &f.PIDFile}
	for i := 1; i < len(args); i++ {
		a := args[i]
		var dst *string
		var value string
		hasValue := false
		switch {
		case a == "--":
			return f
		case strings.HasPrefix(a, "--"):
			name, v, ok := strings.Cut(a[2:], "=")
			dst, value, hasValue = long[name], v, ok
		case strings.HasPrefix(a, "-") && len(a) > 1:
			// Shorthands may be joined (-Dp FILE): the first that takes a
			// value takes the rest of the argument, or the next one.
			for j := 1; j < len(a) && dst == nil; j++ {
				if dst = short[a[j:j+1]]; dst != nil && j+1 < len(a) {
					value, hasValue = strings.TrimPrefix(a[j+1:], "="), true
				}
			}
		}
		if dst == nil {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				break
			}
			i++
			value = args[i]
		}
		*dst = value
	}
	return f
}
