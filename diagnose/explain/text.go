package explain

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// shownLines is how many matched lines the text report prints per finding.
const shownLines = 3

// WriteText writes the report for people.
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	src := r.Source
	if src == "-" || src == "" {
		src = "standard input"
	}
	if !r.Found() {
		fmt.Fprintf(bw, "gpurun explain: nothing in %s (%s) matched a known /dev/shm failure.\n", src, plural(r.Lines, "line"))
		fmt.Fprintf(bw, "To look at a container's /dev/shm itself, run gpurun doctor (in it, or on the host with its name).\n")
		return bw.Flush()
	}
	fmt.Fprintf(bw, "gpurun explain: %s in %s (%s)\n", plural(len(r.Findings), "/dev/shm finding"), src, plural(r.Lines, "line"))
	for i, f := range r.Findings {
		fmt.Fprintf(bw, "\n%d. %s  [%s, %s]\n", i+1, f.Title, f.Confidence, f.Signature)
		for _, l := range f.Lines[:min(len(f.Lines), shownLines)] {
			fmt.Fprintf(bw, "   line %d: %s\n", l.N, l.Text)
		}
		if more := f.Count - min(f.Count, shownLines); more > 0 {
			fmt.Fprintf(bw, "   ... and %d more %s\n", more, noun(more, "match"))
		}
		fmt.Fprintf(bw, "   cause: %s\n", f.Cause)
		fmt.Fprintf(bw, "   shm:   %s\n", f.Implied)
		fmt.Fprintf(bw, "   fix:   %s\n", f.Fix)
	}
	if fx := r.Fix; fx != nil {
		if fx.Size != "" {
			fmt.Fprintf(bw, "\nFix: give /dev/shm %s: %s.\n", fx.Size, fx.Why)
		} else {
			fmt.Fprintf(bw, "\nFix:\n")
		}
		width := 0
		for _, s := range fx.Steps {
			width = max(width, len(s.Where))
		}
		for _, s := range fx.Steps {
			fmt.Fprintf(bw, "  %-*s  %s\n", width+1, s.Where+":", s.How)
		}
	}
	return bw.Flush()
}

// plural says "1 line", "2 lines".
func plural(n int, word string) string {
	return fmt.Sprintf("%d %s", n, noun(n, word))
}

// noun is word for n things: "line", "lines", "matches".
func noun(n int, word string) string {
	switch {
	case n == 1:
		return word
	case strings.HasSuffix(word, "ch"):
		return word + "es"
	}
	return word + "s"
}
