package runargs

import (
	"encoding/csv"
	"path"
	"strings"
)

// MountsDevShm reports whether the arguments mount something at /dev/shm,
// which replaces the tmpfs docker would make there (and makes --shm-size
// moot): "-v x:/dev/shm[:opts]" (or an anonymous "-v /dev/shm"),
// "--mount ...,target=/dev/shm" (also dst= and destination=, any type), or
// "--tmpfs /dev/shm[:opts]". A mount at /dev itself counts too: dockerd
// then drops all its own mounts under /dev, /dev/shm included. Container
// paths are compared after path.Clean, as dockerd does. how is the first
// such flag in argument order, written "--tmpfs /dev/shm:size=1g".
//
// Mounts that arrive through --volumes-from are not visible in the
// arguments and are not reported.
func (r *Run) MountsDevShm() (how string, ok bool) {
	for _, o := range r.Occurrences {
		var target string
		switch o.Name {
		case "volume":
			target = volumeTarget(o.Value)
		case "mount":
			target = mountTarget(o.Value)
		case "tmpfs":
			target, _, _ = strings.Cut(o.Value, ":")
		default:
			continue
		}
		if target == "" {
			continue
		}
		if t := path.Clean(target); t == "/dev/shm" || t == "/dev" {
			return "--" + o.Name + " " + o.Value, true
		}
	}
	return "", false
}

// volumeTarget returns the container path of a -v value the way dockerd's
// Linux parser splits it ("dst", "src:dst", "src:dst:mode"), or "" when
// dockerd would reject it.
func volumeTarget(spec string) string {
	parts := strings.SplitN(spec, ":", 4)
	switch len(parts) {
	case 1:
		return parts[0]
	case 2, 3:
		if parts[0] == "" {
			return ""
		}
		return parts[1]
	}
	return ""
}

// mountTarget returns the target of a --mount value, parsed like the docker
// CLI's opts.MountOpt: one CSV record (so a field may be quoted, with ""
// for a quote), keys case-insensitive, the last of target=, dst= and
// destination= wins. It returns "" when the value does not parse.
func mountTarget(spec string) string {
	fields, err := csv.NewReader(strings.NewReader(spec)).Read()
	if err != nil {
		return ""
	}
	var target string
	for _, field := range fields {
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			continue
		}
		switch strings.ToLower(key) {
		case "target", "dst", "destination":
			target = val
		}
	}
	return target
}

// DeviceTarget returns the container path of a --device value parsed like
// the docker CLI's parseLinuxDevice ("src", "src:dst", "src:perms",
// "src:dst:perms"), or "" when docker would reject it.
func DeviceTarget(spec string) string {
	parts := strings.SplitN(spec, ":", 4)
	switch len(parts) {
	case 1:
		return parts[0]
	case 2, 3:
		if validDeviceMode(parts[1]) {
			return parts[0]
		}
		return parts[1]
	}
	return ""
}

// validDeviceMode reports whether mode is a cgroup permission string: one
// to three of r, w, m, each at most once.
func validDeviceMode(mode string) bool {
	if mode == "" {
		return false
	}
	var seen [3]bool
	for _, c := range mode {
		i := strings.IndexRune("rwm", c)
		if i < 0 || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}
