package launch

import "strings"

// ShellQuote renders argv as one POSIX shell command line that a person can
// paste: words made only of safe characters stay bare, others are single-quoted.
func ShellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = quoteWord(a)
	}
	return strings.Join(out, " ")
}

func quoteWord(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
