package tomledit

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Names returns the decoded names of key parts.
func Names(parts []Part) []string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = p.Name
	}
	return s
}

// NamesEqual reports whether key parts decode to names.
func NamesEqual(parts []Part, names []string) bool {
	if len(parts) != len(names) {
		return false
	}
	for i := range parts {
		if parts[i].Name != names[i] {
			return false
		}
	}
	return true
}

// RawKey writes key parts as they were written.
func RawKey(parts []Part) string {
	raws := make([]string, len(parts))
	for i, p := range parts {
		raws[i] = p.Raw
	}
	return strings.Join(raws, ".")
}

// KeyText writes a dotted key, quoting the parts that are not bare keys.
func KeyText(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		if Bare(p) {
			parts[i] = p
		} else {
			parts[i] = Quote(p)
		}
	}
	return strings.Join(parts, ".")
}

// PathText names a path for messages: its key, or "the document".
func PathText(path []string) string {
	if len(path) == 0 {
		return "the document"
	}
	return KeyText(path)
}

// Bare reports whether s can be written as a TOML bare key (ASCII
// letters, digits, '-' and '_').
func Bare(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// PlainString reports whether s is valid UTF-8 without control characters.
func PlainString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Quote writes s as a TOML basic string.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// QuoteLike writes s in the quoting style of old: a literal string
// ('...') when old was one and s fits, else a basic string.
func QuoteLike(old, s string) string {
	if strings.HasPrefix(old, "'") && !strings.HasPrefix(old, "'''") && !strings.Contains(s, "'") && PlainString(s) {
		return "'" + s + "'"
	}
	return Quote(s)
}

// Format writes a decoded value as TOML: strings as basic strings,
// integers, floats, booleans, arrays, and tables as inline tables (keys in
// sorted order). Dates and times are not written.
func Format(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return Quote(v), nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		switch {
		case math.IsNaN(v):
			return "nan", nil
		case math.IsInf(v, 1):
			return "inf", nil
		case math.IsInf(v, -1):
			return "-inf", nil
		}
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") {
			s += ".0"
		}
		return s, nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := Format(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, err := Format(v[k])
			if err != nil {
				return "", err
			}
			parts[i] = KeyText([]string{k}) + " = " + s
		}
		return "{" + strings.Join(parts, ", ") + "}", nil
	}
	return "", fmt.Errorf("cannot write a %T as TOML", v)
}
