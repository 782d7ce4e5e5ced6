package explain

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/gpurun/gpurun/policy/remedy"
)

// shownLines is how many matched lines the text report prints per finding.
const shownLines = 3

// WriteText writes the report for people: the /dev/shm findings, surest
// first, the fix, and the look-alikes, each saying what it is instead.
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	src := sourceName(r.Source)
	if !r.Found() {
		fmt.Fprintf(bw, "gpurun explain: nothing in %s (%s) matched a known /dev/shm failure.\n", src, plural(r.Lines, "line"))
		if len(r.Others) == 0 {
			fmt.Fprintf(bw, "To look at a container's /dev/shm itself, run gpurun doctor (in it, or on the host with its name).\n")
		}
	} else {
		fmt.Fprintf(bw, "gpurun explain: %s in %s (%s)\n", plural(len(r.Findings), "/dev/shm finding"), src, plural(r.Lines, "line"))
		for i, f := range r.Findings {
			writeFinding(bw, i+1, f)
		}
		writeFix(bw, r.Fix)
	}
	writeOthers(bw, r.Others)
	return bw.Flush()
}

// WriteFinding writes one finding as WriteText does, numbered n: what a
// stream prints as soon as the finding's line has been read.
func WriteFinding(w io.Writer, n int, f Finding) error {
	bw := bufio.NewWriter(w)
	writeFinding(bw, n, f)
	return bw.Flush()
}

// WriteStreamEnd writes what a stream prints once its log has ended, after
// WriteFinding has shown each finding: how many there were, the fix, and
// the look-alikes.
func WriteStreamEnd(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	src := sourceName(r.Source)
	if !r.Found() {
		fmt.Fprintf(bw, "gpurun explain: nothing in %s (%s) matched a known /dev/shm failure.\n", src, plural(r.Lines, "line"))
	} else {
		fmt.Fprintf(bw, "\ngpurun explain: %s in %s (%s):", plural(len(r.Findings), "/dev/shm finding"), src, plural(r.Lines, "line"))
		for _, f := range r.Findings {
			fmt.Fprintf(bw, " %s [%s]", f.Signature, f.Confidence)
		}
		fmt.Fprintln(bw)
		writeFix(bw, r.Fix)
	}
	writeOthers(bw, r.Others)
	return bw.Flush()
}

func writeFinding(bw *bufio.Writer, n int, f Finding) {
	if f.Kind == KindOther {
		fmt.Fprintf(bw, "\nnot /dev/shm: %s  [%s]\n", f.Title, f.Signature)
	} else {
		fmt.Fprintf(bw, "\n%d. %s  [%s, %s]\n", n, f.Title, f.Confidence, f.Signature)
	}
	for _, l := range f.Lines[:min(len(f.Lines), shownLines)] {
		fmt.Fprintf(bw, "   line %d: %s\n", l.N, l.Text)
	}
	if more := f.Count - min(f.Count, shownLines); more > 0 {
		fmt.Fprintf(bw, "   ... and %d more %s\n", more, noun(more, "match"))
	}
	fmt.Fprintf(bw, "   cause: %s\n", f.Cause)
	if f.Kind != KindOther {
		fmt.Fprintf(bw, "   shm:   %s\n", f.Implied)
		if len(f.Evidence) > 0 {
			fmt.Fprintf(bw, "   evidence: %s\n", strings.Join(f.Evidence, ", "))
		}
	}
	fmt.Fprintf(bw, "   fix:   %s\n", f.Fix)
}

func writeFix(bw *bufio.Writer, fx *Fix) {
	if fx == nil {
		return
	}
	if fx.Size != "" {
		fmt.Fprintf(bw, "\nFix: give /dev/shm %s: %s.\n", fx.Size, fx.Why)
	} else {
		fmt.Fprintf(bw, "\nFix:\n")
	}
	_ = remedy.Write(bw, "  ", fx.Steps) // a bufio.Writer's error comes with its Flush
}

func writeOthers(bw *bufio.Writer, others []Finding) {
	if len(others) == 0 {
		return
	}
	fmt.Fprintf(bw, "\nAlso in the log, and not /dev/shm (%d):\n", len(others))
	for _, f := range others {
		fmt.Fprintf(bw, "  line %d: %s  [%s]\n    %s\n    fix: %s\n", f.Lines[0].N, f.Title, f.Signature, f.Cause, f.Fix)
	}
}

// sourceName is how the text names a log.
func sourceName(src string) string {
	if src == "-" || src == "" {
		return "standard input"
	}
	return src
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
