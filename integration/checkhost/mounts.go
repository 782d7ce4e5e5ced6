package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file, in the fields that say what is
// mounted where and how.
type Mount struct {
	// Point is the mount point.
	Point string `json:"point"`
	// Root is the path of the mounted directory inside its filesystem ("/"
	// unless it is a bind mount of a subdirectory).
	Root string `json:"root"`
	// FSType and Source are the filesystem type and source ("tmpfs", "shm").
	FSType string `json:"fstype"`
	Source string `json:"source"`
	// Options are the per-mount options (rw, nosuid, ...), SuperOptions the
	// filesystem's (size=65536k, ...).
	Options      string `json:"options"`
	SuperOptions string `json:"super_options"`
}

// key identifies a mount across two snapshots by where it is and what it
// mounts; its options, which a remount in place changes, are compared
// separately.
func (m Mount) key() string {
	return m.Point + "\x00" + m.Root + "\x00" + m.FSType + "\x00" + m.Source
}

// parseMountinfo parses the contents of /proc/PID/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Mount points, roots and sources have their \ooo escapes decoded.
func parseMountinfo(data []byte) ([]Mount, error) {
	var out []Mount
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		head, tail, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, fmt.Errorf("line %d: no \" - \" separator: %q", i+1, line)
		}
		f := strings.Fields(head)
		t := strings.Fields(tail)
		if len(f) < 6 || len(t) < 2 {
			return nil, fmt.Errorf("line %d: too few fields: %q", i+1, line)
		}
		m := Mount{
			Root:    unescapeOctal(f[3]),
			Point:   unescapeOctal(f[4]),
			Options: f[5],
			FSType:  t[0],
			Source:  unescapeOctal(t[1]),
		}
		if len(t) > 2 {
			m.SuperOptions = t[2]
		}
		out = append(out, m)
	}
	return out, nil
}

// unescapeOctal decodes the \ooo escapes the kernel writes for space, tab,
// newline and backslash in mountinfo fields.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
