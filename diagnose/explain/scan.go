package explain

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpurun/gpurun/policy"
)

const (
	// maxLine is the longest piece of a line matched at once; a longer
	// line is matched in pieces of this size (a match across two pieces is
	// missed).
	maxLine = 1 << 20
	// wrapMin is the shortest line that may have been wrapped by a
	// terminal or a pasted issue: such a line is also matched joined with
	// the next one.
	wrapMin = 40
	// joinTail is how much of each side a joined pair keeps.
	joinTail = 512
	// maxText is how much of a matched line a finding keeps.
	maxText = 300
	// maxPending bounds the candidates a Near signature keeps while it
	// waits for an anchor after them.
	maxPending = 10000
	// never is a line number long before any line.
	never = -1 << 30
)

// candidate is a match of a Near signature waiting for an anchor.
type candidate struct {
	refs []LineRef
}

// found accumulates one signature's matches.
type found struct {
	lines   []LineRef
	seen    map[int]bool // line numbers already in lines (all of them)
	count   int
	implied int64
	have    int64
	errnos  []int
}

// scanner holds the state of one scan: the signature table, what each
// condition last saw, and what was found.
type scanner struct {
	sigs  []Signature
	lower []byte
	// kw are the distinct keywords of all signatures; kwMask, afterMask
	// and unlessMask say which of them each signature's Keywords,
	// AfterKeywords and UnlessKeywords are, so that one pass over a line
	// tells which signatures can match it.
	kw                            [][]byte
	kwMask, afterMask, unlessMask []uint64
	maxKw                         int
	// first and second say which keywords have a byte as their first or
	// second: keys tries only those whose first two bytes are at hand.
	first, second [256]uint64
	join          []byte
	lastAfter     []int
	lastUnless    []int
	found         []*found
	pending       [][]candidate
	lastAnchor    int
	lines         int
	// onFinding is told of each signature's first match (Options.OnFinding).
	onFinding func(Finding)

	// The previous segment, for lines wrapped at a terminal's width.
	prevN     int
	prevText  []byte
	prevHit   uint64
	prevTried uint64
	// The last two logger-record contents, for exception names that a
	// logger split into "module", ".", "Name".
	hist [2]histEntry
}

type histEntry struct {
	n       int
	text    string
	content string
}

func newScanner(sigs []Signature) *scanner {
	if len(sigs) > 64 {
		panic("explain: more than 64 signatures")
	}
	s := &scanner{
		sigs:       sigs,
		kwMask:     make([]uint64, len(sigs)),
		afterMask:  make([]uint64, len(sigs)),
		unlessMask: make([]uint64, len(sigs)),
		lastAfter:  make([]int, len(sigs)),
		lastUnless: make([]int, len(sigs)),
		found:      make([]*found, len(sigs)),
		pending:    make([][]candidate, len(sigs)),
		lastAnchor: never,
		prevN:      never,
	}
	index := map[string]int{}
	mask := func(words []string) (m uint64) {
		for _, w := range words {
			i, ok := index[w]
			if !ok {
				i = len(s.kw)
				if i == 64 {
					panic("explain: more than 64 keywords")
				}
				if len(w) < 2 {
					panic("explain: keyword " + strconv.Quote(w) + " is shorter than 2 bytes")
				}
				index[w] = i
				s.kw = append(s.kw, []byte(w))
				s.maxKw = max(s.maxKw, len(w))
				s.first[w[0]] |= 1 << i
				s.second[w[1]] |= 1 << i
			}
			m |= 1 << i
		}
		return m
	}
	for i, sig := range sigs {
		s.lastAfter[i], s.lastUnless[i] = never, never
		s.kwMask[i] = mask(sig.Keywords)
		s.afterMask[i] = mask(sig.AfterKeywords)
		s.unlessMask[i] = mask(sig.UnlessKeywords)
	}
	return s
}

// keys returns the keywords that occur in s.lower, in one pass over it:
// at each byte only the keywords that start with it and the next byte are
// compared.
func (s *scanner) keys() (m uint64) {
	l := s.lower
	for i := 0; i+1 < len(l); i++ {
		c := s.first[l[i]] & s.second[l[i+1]] &^ m
		for c != 0 {
			k := bits.TrailingZeros64(c)
			c &^= 1 << k
			if bytes.HasPrefix(l[i:], s.kw[k]) {
				m |= 1 << k
			}
		}
	}
	return m
}

// run reads r to its end, a line at a time.
func (s *scanner) run(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	n := 1
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line) >= maxLine {
				s.line(n, line)
				line = line[:0]
			}
			continue
		}
		if len(line) > 0 {
			s.line(n, line)
			if line[len(line)-1] == '\n' {
				s.lines = n
				n++
			} else {
				s.lines = n // a last line without "\n"
			}
		}
		line = line[:0]
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// line handles one line (or one piece of a very long one): it drops the
// line end and colour codes and matches each carriage-return segment
// (a progress bar redraws itself with "\r") on its own.
func (s *scanner) line(n int, raw []byte) {
	raw = bytes.TrimRight(raw, "\r\n")
	if bytes.IndexByte(raw, 0x1b) >= 0 {
		raw = stripANSI(raw)
	}
	for seg := range bytes.SplitSeq(raw, []byte{'\r'}) {
		if len(bytes.TrimSpace(seg)) > 0 {
			s.segment(n, seg)
		}
	}
}

// segment matches one segment of line n, alone, joined with the previous
// line, and as part of a split exception name.
func (s *scanner) segment(n int, text []byte) {
	s.lowerCase(text)
	keys := s.keys()
	if keys != 0 {
		for i := range s.sigs {
			sig := &s.sigs[i]
			if keys&s.afterMask[i] != 0 && sig.After.Match(text) {
				s.lastAfter[i] = n
			}
			if keys&s.unlessMask[i] != 0 && sig.Unless.Match(text) {
				s.lastUnless[i] = n
			}
		}
	}
	hit, tried := s.match([]LineRef{{N: n}}, text, -1, 0, keys)

	// A line wrapped at a terminal's width: try the two lines joined when
	// a signature's keyword was seen without its match, or a keyword spans
	// the break.
	if s.prevN == n-1 && wrapped(s.prevText) {
		prev := s.prevText[max(0, len(s.prevText)-joinTail):]
		cur := text[:min(len(text), joinTail)]
		s.join = append(append(append(s.join[:0], prev[max(0, len(prev)-s.maxKw+1):]...), ' '), cur[:min(len(cur), s.maxKw-1)]...)
		s.lowerCase(s.join)
		if (s.prevTried|tried)&^(s.prevHit|hit) != 0 || s.keys() != 0 {
			s.join = append(append(append(s.join[:0], prev...), ' '), cur...)
			s.lowerCase(s.join)
			s.match([]LineRef{{N: n - 1}, {N: n}}, s.join, len(prev), s.prevHit|hit, s.keys())
		}
	}

	// An exception name a logger split into "module", ".", "Name" records.
	content := recordContent(text)
	if h0, h1 := s.hist[0], s.hist[1]; h1.n == n-1 && h0.n == n-2 && h1.content == "." &&
		isIdent(content, false) && isIdent(h0.content, true) {
		s.join = append(append(append(s.join[:0], h0.content...), '.'), content...)
		s.lowerCase(s.join)
		refs := []LineRef{{N: h0.n, Text: h0.text}, {N: h1.n, Text: h1.text}, {N: n, Text: clip(text, 0)}}
		s.match(refs, s.join, -1, 0, s.keys())
	}
	s.hist[0] = s.hist[1]
	s.hist[1] = histEntry{n: n}
	if string(content) == "." || isIdent(content, true) {
		s.hist[1].content, s.hist[1].text = string(content), clip(text, 0)
	}

	s.prevN, s.prevHit, s.prevTried = n, hit, tried
	s.prevText = append(s.prevText[:0], text...)
}

// match tries every signature on text, which refs name (the last ref is
// the current line; refs without Text take it from text). With boundary
// >= 0, text is two lines joined at boundary and only matches that span
// it count (Generic signatures are not tried: their patterns span too
// much); skip holds signatures that already matched either line. keys are
// the keywords in text. It returns the signatures that matched, and those
// whose keywords were there.
func (s *scanner) match(refs []LineRef, text []byte, boundary int, skip uint64, keys uint64) (hit, tried uint64) {
	if keys == 0 {
		return 0, 0
	}
	type match struct {
		sig int
		loc []int
		pat int
	}
	var matches []match
	first := refs[0].N
	for i := range s.sigs {
		sig := &s.sigs[i]
		if keys&s.kwMask[i] == 0 {
			continue
		}
		tried |= 1 << i
		if skip&(1<<i) != 0 || boundary >= 0 && sig.Generic ||
			sig.After != nil && s.lastAfter[i] < first-sig.AfterWithin ||
			sig.Unless != nil && s.lastUnless[i] >= first-sig.UnlessWithin {
			continue
		}
		for p, re := range sig.Patterns {
			loc := re.FindSubmatchIndex(text)
			if loc == nil || boundary >= 0 && (loc[0] >= boundary || loc[1] <= boundary+1) {
				continue
			}
			matches = append(matches, match{i, loc, p})
			break
		}
	}
	specific := false
	for _, m := range matches {
		specific = specific || !s.sigs[m.sig].Generic
	}
	for _, m := range matches {
		sig := &s.sigs[m.sig]
		if sig.Generic && specific {
			continue
		}
		hit |= 1 << m.sig
		got := make([]LineRef, len(refs))
		for k, r := range refs {
			got[k] = r
			if got[k].Text == "" {
				got[k].Text = refText(text, boundary, k, m.loc)
			}
		}
		sz := sizes(sig.Patterns[m.pat], text, m.loc)
		if sig.Near > 0 {
			s.candidate(m.sig, got)
			continue
		}
		s.record(m.sig, got, sz)
		if sig.Anchor {
			s.anchor(got[len(got)-1].N)
		}
	}
	return hit, tried
}

// matchSizes is what the named groups of a match say.
type matchSizes struct {
	bytes int64 // the size the message asks for
	have  int64 // what /dev/shm had
	errno int   // -1: none
}

// sizes reads the named groups of re's match at loc in text: "bytes",
// "gb" (decimal), "gib" (binary), "have", "havegb" and "errno".
func sizes(re *regexp.Regexp, text []byte, loc []int) matchSizes {
	sz := matchSizes{errno: -1}
	for g, name := range re.SubexpNames() {
		if g == 0 || name == "" || loc[2*g] < 0 {
			continue
		}
		v := string(text[loc[2*g]:loc[2*g+1]])
		switch name {
		case "bytes":
			n, _ := strconv.ParseInt(v, 10, 64)
			sz.bytes = max(sz.bytes, n)
		case "gb":
			sz.bytes = max(sz.bytes, scaled(v, 1e9))
		case "gib":
			sz.bytes = max(sz.bytes, scaled(v, 1<<30))
		case "have":
			sz.have, _ = strconv.ParseInt(v, 10, 64)
		case "havegb":
			sz.have = scaled(v, 1e9)
		case "errno":
			sz.errno, _ = strconv.Atoi(v)
		}
	}
	return sz
}

// scaled is the decimal number v times unit, in bytes (0 when v is not a
// number or the result does not fit).
func scaled(v string, unit float64) int64 {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f*unit >= math.MaxInt64 {
		return 0
	}
	return int64(math.Round(f * unit))
}

// candidate handles a match of a Near signature: it counts at once when an
// anchor came within Near lines before it, and waits for one otherwise.
func (s *scanner) candidate(sig int, refs []LineRef) {
	n, near := refs[0].N, s.sigs[sig].Near
	if s.lastAnchor >= n-near {
		s.record(sig, refs, matchSizes{errno: -1})
		return
	}
	p := s.pending[sig]
	if len(p) == maxPending { // drop those no anchor can reach any more
		p = slices.DeleteFunc(p, func(c candidate) bool { return c.refs[0].N < n-near })
	}
	if len(p) < maxPending {
		p = append(p, candidate{refs: refs})
	}
	s.pending[sig] = p
}

// anchor records an anchor at line n: the waiting candidates within Near
// lines before it count now; the older ones never will.
func (s *scanner) anchor(n int) {
	s.lastAnchor = max(s.lastAnchor, n)
	for i, p := range s.pending {
		for _, c := range p {
			if c.refs[0].N >= n-s.sigs[i].Near {
				s.record(i, c.refs, matchSizes{errno: -1})
			}
		}
		s.pending[i] = p[:0]
	}
}

// refText is what a finding shows for ref k of a match at loc in text.
func refText(text []byte, boundary, k int, loc []int) string {
	switch {
	case boundary < 0:
		return clip(text, loc[0])
	case k == 0: // two joined lines: show each side
		return clip(text[:boundary], loc[0])
	default:
		return clip(text[boundary+1:], 0)
	}
}

// record adds a match to its signature's finding, and tells onFinding of
// a signature's first.
func (s *scanner) record(sig int, refs []LineRef, sz matchSizes) {
	f := s.found[sig]
	first := f == nil
	if first {
		f = &found{seen: map[int]bool{}}
		s.found[sig] = f
	}
	f.count++
	f.implied = max(f.implied, sz.bytes)
	if sz.have > 0 {
		f.have = sz.have
	}
	if sz.errno >= 0 && !slices.Contains(f.errnos, sz.errno) && len(f.errnos) < 4 {
		f.errnos = append(f.errnos, sz.errno)
	}
	for _, r := range refs {
		if f.seen[r.N] || len(f.lines) >= MaxLines {
			continue
		}
		f.seen[r.N] = true
		f.lines = append(f.lines, r)
	}
	if first && s.onFinding != nil {
		s.onFinding(s.finding(sig))
	}
}

// findings returns what was found, in table order, without the findings
// that a surer one found in the log makes redundant (YieldsTo).
func (s *scanner) findings() []Finding {
	present := map[string]bool{}
	for i, f := range s.found {
		if f != nil {
			present[s.sigs[i].ID] = true
		}
	}
	var out []Finding
	for i, f := range s.found {
		if f == nil || slices.ContainsFunc(s.sigs[i].YieldsTo, func(id string) bool { return present[id] }) {
			continue
		}
		out = append(out, s.finding(i))
	}
	return out
}

// finding is what signature i has found so far.
func (s *scanner) finding(i int) Finding {
	f, sig := s.found[i], &s.sigs[i]
	fd := Finding{
		Signature: sig.ID, Title: sig.Title, Confidence: sig.Confidence, Kind: sig.Kind,
		Lines: slices.Clone(f.lines), Count: f.count, Cause: sig.Cause, Fix: sig.Fix,
		ImpliedBytes: f.implied, ShmBytes: f.have,
	}
	sort.SliceStable(fd.Lines, func(a, b int) bool { return fd.Lines[a].N < fd.Lines[b].N })
	if f.implied > 0 && sig.Implied != "" {
		fd.Implied = fmt.Sprintf(sig.Implied, sizeText(f.implied))
	} else {
		fd.Implied = sig.NoSize
	}
	if f.have > 0 {
		fd.Implied += "; the message says /dev/shm had " + sizeText(f.have)
	}
	if len(f.errnos) > 0 {
		var names []string
		for _, e := range f.errnos {
			names = append(names, errnoText(e))
		}
		fd.Implied += "; " + strings.Join(names, ", ")
	}
	return fd
}

// sizeText says n bytes for people: "9.19MiB (9637888 bytes)".
func sizeText(n int64) string {
	return fmt.Sprintf("%s (%d bytes)", policy.FormatSize(n), n)
}

// lowerCase puts an ASCII-lower-case copy of text in s.lower.
func (s *scanner) lowerCase(text []byte) {
	s.lower = s.lower[:0]
	for _, c := range text {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		s.lower = append(s.lower, c)
	}
}

// errnoText names the Linux error numbers shm failures report.
func errnoText(e int) string {
	switch e {
	case 28:
		return "errno 28 (ENOSPC, no space left on device): /dev/shm was full"
	case 12:
		return "errno 12 (ENOMEM, cannot allocate memory)"
	case 11:
		return "errno 11 (EAGAIN, resource temporarily unavailable)"
	case 0:
		return "errno 0 (PyTorch printed no error number; the allocation failed all the same)"
	}
	return "errno " + strconv.Itoa(e)
}

// clip returns text as valid UTF-8 of at most maxText bytes, keeping the
// part from a little before from.
func clip(text []byte, from int) string {
	start, end := 0, len(text)
	if end-start > maxText {
		start = max(0, min(from-maxText/3, len(text)-maxText))
		end = start + maxText
	}
	for start > 0 && start < len(text) && !utf8.RuneStart(text[start]) {
		start++
	}
	out := strings.ToValidUTF8(string(bytes.TrimSpace(text[start:end])), "\uFFFD")
	if start > 0 {
		out = "…" + out
	}
	if end < len(text) {
		out += "…"
	}
	return out
}

// wrapped reports whether a line looks cut at a terminal's width: long,
// and not ending a sentence or a clause.
func wrapped(line []byte) bool {
	t := bytes.TrimRight(line, " \t")
	return len(t) >= wrapMin && bytes.IndexByte([]byte(".!?:;)]}>\"'"), t[len(t)-1]) < 0
}

// recordContent is a line without a logger's record prefix: what follows
// the level name ("10:59:01[app]-ERROR-_queue" -> "_queue").
func recordContent(text []byte) []byte {
	t := text
	if len(t) > 200 {
		return nil
	}
	for _, lvl := range [][]byte{[]byte("ERROR"), []byte("WARNING"), []byte("WARN"), []byte("INFO"), []byte("DEBUG"), []byte("CRITICAL")} {
		if i := bytes.Index(t, lvl); i >= 0 && i < 80 {
			rest := t[i+len(lvl):]
			j := 0
			for j < len(rest) && j < 3 && strings.IndexByte("-:]|> \t", rest[j]) >= 0 {
				j++
			}
			if j > 0 {
				t = rest[j:]
			}
			break
		}
	}
	return bytes.TrimSpace(t)
}

// isIdent reports whether s is a Python identifier, or with dotted a
// dotted module path.
func isIdent[T string | []byte](s T, dotted bool) bool {
	if len(s) == 0 || len(s) > 100 {
		return false
	}
	start := true // at the start of a name
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if !dotted || start {
				return false
			}
			start = true
			continue
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && !start:
		default:
			return false
		}
		start = false
	}
	return !start
}

// stripANSI removes terminal escape sequences (colours, cursor movement,
// OSC titles and links) from b, in place.
func stripANSI(b []byte) []byte {
	out := b[:0]
	for i := 0; i < len(b); i++ {
		if b[i] != 0x1b {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			break
		}
		switch b[i+1] {
		case '[': // CSI: parameters and intermediates, then a final byte
			j := i + 2
			for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
				j++
			}
			i = j
		case ']': // OSC: up to BEL or ESC \
			j := i + 2
			for j < len(b) && b[j] != 0x07 && !(b[j] == 0x1b && j+1 < len(b) && b[j+1] == '\\') {
				j++
			}
			if j < len(b) && b[j] == 0x1b {
				j++
			}
			i = j
		case '(', ')', '*', '+': // character set designation: one more byte
			i += 2
		default: // a two-byte sequence
			i++
		}
	}
	return out
}
