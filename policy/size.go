package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/docker/go-units"
)

// Common sizes, in bytes.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40

	// EngineDefaultShm is the /dev/shm size Docker, containerd (CRI and ctr),
	// nerdctl and CRI-O give a container when nobody asks for another.
	EngineDefaultShm = 64 * MiB
	// PodmanDefaultShm is Podman's default: its "65536k" is read as
	// decimal kilobytes (seen in the captured podman 4.3 fixtures).
	PodmanDefaultShm = 65536 * 1000
)

// IsEngineDefaultShm reports whether n is a size an engine gives /dev/shm by
// default, rather than one somebody chose.
func IsEngineDefaultShm(n int64) bool {
	return n == EngineDefaultShm || n == PodmanDefaultShm
}

// ParseSize parses a size the way `docker run --shm-size` and `--memory` do:
// a number of bytes, optionally fractional, with an optional binary unit
// k, m, g, t or p in either case, optionally followed by "b" ("65536k",
// "64m", "2g", "2gb", "1.5g", "1024"). Kubernetes binary suffixes (Ki, Mi,
// Gi, Ti, Pi) are accepted too and mean the same. Like Docker, "G" is
// binary here: use ParseQuantity where Kubernetes' decimal "G" is meant.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("invalid size %q: empty", s)
	}
	if num, suffix := splitQuantity(t); num != "" && len(suffix) == 2 && suffix[1] == 'i' {
		// Kubernetes' binary suffixes, which go-units does not know.
		return ParseQuantity(t)
	}
	n, err := units.RAMInBytes(t)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: want bytes or a number with a unit such as 64m, 2g, 2gb, 1.5g or 2Gi", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("invalid size %q: negative", s)
	}
	return n, nil
}

// ParseQuantity parses a Kubernetes resource quantity as a whole number of
// bytes: an integer or decimal number with a binary suffix (Ki, Mi, Gi, Ti,
// Pi, Ei), a decimal SI suffix (k, M, G, T, P, E: "2G" = 2,000,000,000) or a
// decimal exponent ("1e9"). Fractions of a byte ("100m", "0.5") and negative
// values are rejected, and so are numbers of more than 19 significant
// digits (none of them is a size in range but an exact binary fraction
// such as 0.0009765625Ki).
//
// It is written here rather than taken from k8s.io/apimachinery because that
// package pulls a serialization stack into every binary that imports policy,
// the runtime shim included, which must stay small and fast to start; and
// in integers rather than math/big for the same reason.
func ParseQuantity(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num, suffix := splitQuantity(t)
	if num == "" {
		return 0, fmt.Errorf("invalid quantity %q: no number", s)
	}
	// The value is num × 2^shift × 10^exp.
	var shift, exp int
	switch suffix {
	case "":
	case "Ki", "Mi", "Gi", "Ti", "Pi", "Ei":
		shift = 10 * (strings.Index("KMGTPE", suffix[:1]) + 1)
	case "k", "M", "G", "T", "P", "E":
		exp = 3 * (strings.Index("kMGTPE", suffix) + 1)
	default:
		if len(suffix) < 2 || (suffix[0] != 'e' && suffix[0] != 'E') {
			return 0, fmt.Errorf("invalid quantity %q: unknown suffix %q", s, suffix)
		}
		e, err := strconv.ParseInt(suffix[1:], 10, 8)
		if err != nil || e < 0 {
			return 0, fmt.Errorf("invalid quantity %q: bad exponent %q", s, suffix)
		}
		exp = int(e)
	}
	whole, frac, _ := strings.Cut(num, ".")
	frac = strings.TrimRight(frac, "0")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return 0, nil
	}
	if len(digits) > 19 {
		return 0, fmt.Errorf("invalid quantity %q: out of range (more than 19 significant digits)", s)
	}
	d, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid quantity %q: bad number %q", s, num)
	}
	notWhole := fmt.Errorf("invalid quantity %q: not a whole number of bytes", s)
	outOfRange := fmt.Errorf("invalid quantity %q: out of range", s)
	// Divide out the decimal places: 10^k = 5^k × 2^k, the twos from the
	// binary suffix where it has them.
	if k := len(frac) - exp; k > 0 {
		p5 := uint64(1)
		for range k {
			p5 *= 5 // k ≤ 19: 5^19 fits
		}
		if d%p5 != 0 {
			return 0, notWhole
		}
		d /= p5
		if k > shift {
			if d%(1<<(k-shift)) != 0 {
				return 0, notWhole
			}
			d >>= k - shift
			shift = 0
		} else {
			shift -= k
		}
		exp = 0
	} else {
		exp = -k
	}
	for range exp {
		if d > math.MaxInt64/10 {
			return 0, outOfRange
		}
		d *= 10
	}
	if shift >= 63 || d > math.MaxInt64>>shift {
		return 0, outOfRange
	}
	return int64(d << shift), nil
}

// splitQuantity splits "1.5Gi" into "1.5" and "Gi". The number is unsigned
// digits with at most one point.
func splitQuantity(s string) (num, suffix string) {
	i, dot := 0, false
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' && !dot) {
		dot = dot || s[i] == '.'
		i++
	}
	if i == 0 || s[:i] == "." {
		return "", s
	}
	return s[:i], s[i:]
}

// ParseAnySize parses a size from an annotation. Annotations come from
// Kubernetes manifests, so a Kubernetes quantity is read as Kubernetes reads
// it ("2Gi", "2G" = 2,000,000,000); Docker's lower-case forms that are no
// valid quantity ("2g", "512m", "2gb") are then read as Docker reads them.
func ParseAnySize(s string) (int64, error) {
	if n, err := ParseQuantity(s); err == nil {
		return n, nil
	}
	if n, err := ParseSize(s); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("invalid size %q: want a Kubernetes quantity (2Gi, 512Mi, 2G) or a Docker size (2g, 512m)", s)
}

// ParseMountSize parses the value of a tmpfs "size=" mount option: bytes
// with an optional k, m, g, t, p or e suffix (binary), or a percentage of
// the host's memory, which needs hostMemory (0 = unknown, an error).
func ParseMountSize(v string, hostMemory int64) (int64, error) {
	if v == "" {
		return 0, fmt.Errorf("invalid tmpfs size %q: empty", v)
	}
	if strings.HasSuffix(v, "%") {
		pct, err := strconv.ParseUint(strings.TrimSuffix(v, "%"), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid tmpfs size %q: %w", v, err)
		}
		if hostMemory <= 0 {
			return 0, fmt.Errorf("tmpfs size %q is relative to the host's memory, which is unknown", v)
		}
		return int64(float64(hostMemory) * float64(pct) / 100), nil
	}
	mult := int64(1)
	num := v
	switch v[len(v)-1] {
	case 'k', 'K':
		mult = KiB
	case 'm', 'M':
		mult = MiB
	case 'g', 'G':
		mult = GiB
	case 't', 'T':
		mult = TiB
	case 'p', 'P':
		mult = TiB << 10
	case 'e', 'E':
		mult = TiB << 20
	}
	if mult != 1 {
		num = v[:len(v)-1]
	}
	n, err := strconv.ParseUint(num, 10, 63)
	if errors.Is(err, strconv.ErrRange) {
		// Digits past int64: the kernel takes them as a huge limit, and so
		// does gpurun (a size the user set, never one to shrink).
		return math.MaxInt64, nil
	}
	if err != nil {
		return 0, fmt.Errorf("invalid tmpfs size %q: %w", v, err)
	}
	if n > uint64(math.MaxInt64/mult) {
		return math.MaxInt64, nil
	}
	return int64(n) * mult, nil
}

// FormatSize formats n bytes for people, in the largest binary unit it
// reaches, with at most two decimals ("64MiB", "1GiB", "1.5GiB",
// "11.79GiB", "9.19MiB"); exact below 1 KiB ("1000B").
func FormatSize(n int64) string {
	if n < 0 {
		return "-" + FormatSize(-n)
	}
	type unit struct {
		size int64
		name string
	}
	for _, u := range []unit{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if n < u.size {
			continue
		}
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
		return strconv.FormatFloat(math.Round(float64(n)/float64(u.size)*100)/100, 'f', -1, 64) + u.name
	}
	return strconv.FormatInt(n, 10) + "B"
}

// FormatDocker formats n bytes in the units `docker run --shm-size` and
// compose's shm_size accept, exactly: "8g", "512m", "65536k" or bytes.
func FormatDocker(n int64) string { return formatExact(n, "g", "m", "k") }

// formatExact writes n bytes in the largest binary unit that divides it,
// with the given suffixes for GiB, MiB and KiB, or as plain bytes.
func formatExact(n int64, gib, mib, kib string) string {
	switch {
	case n > 0 && n%GiB == 0:
		return strconv.FormatInt(n/GiB, 10) + gib
	case n > 0 && n%MiB == 0:
		return strconv.FormatInt(n/MiB, 10) + mib
	case n > 0 && n%KiB == 0:
		return strconv.FormatInt(n/KiB, 10) + kib
	}
	return strconv.FormatInt(n, 10)
}

// FormatCompose formats n bytes in compose's own style for shm_size: the
// largest unit that divides it exactly, with a "b" ("8gb", "1536mb",
// "64kb"), or plain bytes.
func FormatCompose(n int64) string { return formatExact(n, "gb", "mb", "kb") }

// FormatQuantity formats n bytes as a Kubernetes binary quantity, exactly,
// in the largest binary unit that divides it: "8Gi", "1536Mi", "64Ki",
// "2Ti", or bytes — what resource.Quantity writes for such a size (its
// canonical form; the Kubernetes door, gpurun plan, doctor, explain and
// stats all print sizes with this one function).
func FormatQuantity(n int64) string {
	if n > 0 {
		for _, u := range []struct {
			size   int64
			suffix string
		}{{TiB << 20, "Ei"}, {TiB << 10, "Pi"}, {TiB, "Ti"}} {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + u.suffix
			}
		}
	}
	return formatExact(n, "Gi", "Mi", "Ki")
}

// MountSizeOption formats n bytes as a tmpfs "size=" mount option. With
// inKiB it writes kibibytes ("size=65536k", containerd's style) when n is a
// whole number of them, else bytes ("size=67108864", Docker's style).
func MountSizeOption(n int64, inKiB bool) string {
	if inKiB && n%KiB == 0 {
		return "size=" + strconv.FormatInt(n/KiB, 10) + "k"
	}
	return "size=" + strconv.FormatInt(n, 10)
}
