package explain

import (
	"bufio"
	"bytes"
	"cmp"
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

// kwWords is how many 64-bit words a set of keywords takes.
const kwWords = 5

// kwset is a set of keywords, by index.
type kwset [kwWords]uint64

func (a kwset) meets(b kwset) bool {
	return a[0]&b[0]|a[1]&b[1]|a[2]&b[2]|a[3]&b[3]|a[4]&b[4] != 0
}

func (a kwset) empty() bool { return a[0]|a[1]|a[2]|a[3]|a[4] == 0 }

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
	// kw are the distinct keywords of all signatures and of the evidence
	// vocabulary; kwMask, afterMask and unlessMask say which of them each
	// signature's Keywords, AfterKeywords and UnlessKeywords are, so that
	// one pass over a line tells which signatures can match it.
	kw                            [][]byte
	kwMask, afterMask, unlessMask []kwset
	maxKw                         int
	// anyCond and anySig are the union of all After and Unless keywords
	// and of all signatures' Keywords: a line with none skips the loops.
	anyCond, anySig kwset
	// sigOf and vocabOf are, for each keyword, the signatures whose
	// Keywords and the vocabulary words whose Keywords hold it: a line's
	// keywords give the few to try.
	sigOf, vocabOf [64 * kwWords]uint64
	// kwPos is where each keyword of the line first occurs (valid for
	// the keywords keys returned); vocabKw are each vocabulary word's
	// keyword indexes.
	kwPos   [64 * kwWords]int
	vocabKw [][]int
	// bothMark says which marks a Both signature waits for; bothDue says
	// a signature's Mark set one on the line; npending counts the Near
	// candidates waiting.
	bothMark []bool
	bothDue  bool
	npending int
	// first, second and third say which keywords have a byte as their
	// first, second or third: keys tries only those whose first three
	// bytes are at hand.
	first, second, third [256]kwset
	// triples has a bit for each hash of three bytes that starts a
	// keyword (tripleHash): a line's bytes are looked up here first, and
	// most stop there.
	triples    [1 << 16 / 64]uint64
	join       []byte
	lastAfter  []int
	lastUnless []int
	found      []*found
	pending    [][]candidate
	lines      int

	// The evidence vocabulary (evidence.go): what each mark's keywords
	// are, the marks by name, the line each was last seen on and that
	// line's text, and the ecosystems seen.
	vocab []markDef
	// vocabMarks are each vocabulary word's marks, as indexes, and
	// vocabReq its Requires (-1: none).
	vocabMarks [][]int
	vocabReq   []int
	markIndex  map[string]int
	lastMark   []int
	markLine   []int
	markText   [][]byte
	// nearMark and bothMarks are each signature's NearMark and Both as
	// indexes (-1: none), marksOf its Mark and MarkAnchor (Anchor); an
	// AfterAround signature's nearMark is a mark of its own, set where its
	// After matched. window is how far a candidate waits for its
	// nearMark: Near, or AfterWithin.
	nearMark []int
	window   []int
	// waiters are, for each mark, the signatures whose candidates wait
	// for it.
	waiters   [][]int
	bothMarks [][2]int
	marksOf   [][]int
	// bothSigs are the signatures with Both, which both tries.
	bothSigs []int
	// sigEco and vocabEco are each signature's and vocabulary word's
	// ecosystem as a bit of ecos, the ecosystems seen.
	sigEco, vocabEco []uint64
	ecos             uint64
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
	// msg holds a JSON record's message; msgLines says the line was one.
	msg      []byte
	msgLines bool
	// kubectl get pods' table (restartsTable): the RESTARTS column, and
	// the line of its header or of its last row (never: none); kwRestart
	// is the keyword that a header holds, as a set.
	rtCol, rtLine int
	kwRestart     kwset
	// kwOwn are the keywords of gpurun's Events' lines (ownEvent);
	// vocabEvent has a bit for each vocabulary word that reads them.
	kwOwn      kwset
	vocabEvent uint64
}

type histEntry struct {
	n       int
	text    string
	content string
}

func newScanner(sigs []Signature, vocab []markDef) *scanner {
	if len(sigs) > 64 {
		panic("explain: more than 64 signatures")
	}
	s := &scanner{
		sigs:       sigs,
		kwMask:     make([]kwset, len(sigs)),
		afterMask:  make([]kwset, len(sigs)),
		unlessMask: make([]kwset, len(sigs)),
		lastAfter:  make([]int, len(sigs)),
		lastUnless: make([]int, len(sigs)),
		found:      make([]*found, len(sigs)),
		pending:    make([][]candidate, len(sigs)),
		prevN:      never,
		rtLine:     never,
		vocab:      vocab,
		markIndex:  map[string]int{},
		nearMark:   make([]int, len(sigs)),
		window:     make([]int, len(sigs)),
		bothMarks:  make([][2]int, len(sigs)),
		marksOf:    make([][]int, len(sigs)),
	}
	index := map[string]int{}
	mask := func(words []string) (m kwset) {
		for _, w := range words {
			i, ok := index[w]
			if !ok {
				i = len(s.kw)
				if i == 64*kwWords {
					panic("explain: more than " + strconv.Itoa(64*kwWords) + " keywords")
				}
				if len(w) < 3 {
					panic("explain: keyword " + strconv.Quote(w) + " is shorter than 3 bytes")
				}
				index[w] = i
				s.kw = append(s.kw, []byte(w))
				s.maxKw = max(s.maxKw, len(w))
				s.first[w[0]][i/64] |= 1 << (i % 64)
				s.second[w[1]][i/64] |= 1 << (i % 64)
				s.third[w[2]][i/64] |= 1 << (i % 64)
				h := tripleHash(w[0], w[1], w[2])
				s.triples[h/64] |= 1 << (h % 64)
			}
			m[i/64] |= 1 << (i % 64)
		}
		return m
	}
	mark := func(name string) int {
		if name == "" {
			return -1
		}
		i, ok := s.markIndex[name]
		if !ok {
			i = len(s.lastMark)
			s.markIndex[name] = i
			s.lastMark = append(s.lastMark, never)
			s.markLine = append(s.markLine, never)
			s.markText = append(s.markText, nil)
		}
		return i
	}
	eco := func(e string) uint64 {
		if e == "" {
			return 0
		}
		return 1 << ecosystemIndex(e)
	}
	s.sigEco, s.vocabEco = make([]uint64, len(sigs)), make([]uint64, len(vocab))
	if len(vocab) > 64 {
		panic("explain: more than 64 vocabulary words")
	}
	s.vocabKw = make([][]int, len(vocab))
	for i, v := range vocab {
		s.vocabEco[i] = eco(v.Ecosystem)
		mask(v.Keywords)
		for _, w := range v.Keywords {
			s.vocabKw[i] = append(s.vocabKw[i], index[w])
			s.vocabOf[index[w]] |= 1 << i
		}
		for _, m := range v.Marks {
			mark(m)
		}
	}
	for i, sig := range sigs {
		s.lastAfter[i], s.lastUnless[i] = never, never
		s.sigEco[i] = eco(sig.Ecosystem)
		s.kwMask[i] = mask(sig.Keywords)
		for _, w := range sig.Keywords {
			s.sigOf[index[w]] |= 1 << i
		}
		s.afterMask[i] = mask(sig.AfterKeywords)
		s.unlessMask[i] = mask(sig.UnlessKeywords)
		s.nearMark[i] = -1
		if sig.Anchor {
			s.marksOf[i] = append(s.marksOf[i], mark(MarkAnchor))
		}
		if sig.Mark != "" {
			s.marksOf[i] = append(s.marksOf[i], mark(sig.Mark))
		}
		if sig.Near > 0 {
			s.nearMark[i], s.window[i] = mark(cmp.Or(sig.NearMark, MarkAnchor)), sig.Near
		} else if sig.AfterAround {
			s.nearMark[i], s.window[i] = mark("after "+sig.ID), sig.AfterWithin
		}
		s.bothMarks[i] = [2]int{mark(sig.Both[0]), mark(sig.Both[1])}
	}
	s.bothMark = make([]bool, len(s.lastMark))
	s.waiters = make([][]int, len(s.lastMark))
	for i, k := range s.nearMark {
		if k >= 0 {
			s.waiters[k] = append(s.waiters[k], i)
		}
	}
	s.vocabMarks, s.vocabReq = make([][]int, len(vocab)), make([]int, len(vocab))
	for i, v := range vocab {
		for _, m := range v.Marks {
			s.vocabMarks[i] = append(s.vocabMarks[i], s.markIndex[m])
		}
		s.vocabReq[i] = -1
		if v.Requires != "" {
			s.vocabReq[i] = s.markIndex[v.Requires]
		}
		if v.Event {
			s.vocabEvent |= 1 << i
		}
	}
	_, own := gpurunReasons()
	s.kwRestart, s.kwOwn = mask([]string{"restart"}), mask(own)
	for i := range sigs {
		for w := range kwWords {
			s.anyCond[w] |= s.afterMask[i][w] | s.unlessMask[i][w]
			s.anySig[w] |= s.kwMask[i][w]
		}
		for _, k := range s.bothMarks[i] {
			if k >= 0 {
				s.bothMark[k] = true
			}
		}
		if s.bothMarks[i][0] >= 0 {
			s.bothSigs = append(s.bothSigs, i)
		}
	}
	return s
}

// Around each occurrence of a vocabulary word's keyword, its pattern is
// matched from vocabBefore bytes before to vocabAfter bytes after: the
// words are short, and a long line is not searched whole for each.
const (
	vocabBefore = 32
	vocabAfter  = 160
)

// marked reports whether vocabulary word i's marks are all set on line n
// already: its pattern need not run.
func (s *scanner) marked(i, n int) bool {
	for _, k := range s.vocabMarks[i] {
		if s.lastMark[k] != n {
			return false
		}
	}
	return true
}

// required reports whether vocabulary word i's Requires mark was set on
// line n or within its Within lines before.
func (s *scanner) required(i, n int) bool {
	return s.lastMark[s.vocabReq[i]] >= n-s.vocab[i].Within
}

// near reports whether vocabulary word i's pattern matches the line in
// lower case around an occurrence of one of its keywords (keys are the
// line's keywords).
func (s *scanner) near(i int, keys kwset) bool {
	l, re := s.lower, s.vocab[i].Pattern
	if len(l) <= vocabBefore+vocabAfter {
		return re.Match(l)
	}
	for _, k := range s.vocabKw[i] {
		if keys[k/64]&(1<<(k%64)) == 0 {
			continue
		}
		for at := s.kwPos[k]; ; {
			if re.Match(l[max(0, at-vocabBefore):min(len(l), at+vocabAfter)]) {
				return true
			}
			next := bytes.Index(l[at+1:], s.kw[k])
			if next < 0 {
				break
			}
			at += 1 + next
		}
	}
	return false
}

// tripleHash hashes three bytes into 15 bits. keys computes it rolling,
// a byte at a time: ((h<<5)^c) & 0x7fff.
func tripleHash(a, b, c byte) uint {
	return (uint(a)<<10 ^ uint(b)<<5 ^ uint(c)) & 0x7fff
}

// lower is c in ASCII lower case.
func lower(c byte) byte {
	if c-'A' < 26 {
		return c + 'a' - 'A'
	}
	return c
}

// keys puts an ASCII-lower-case copy of text in s.lower and returns the
// keywords that occur in it, in one pass: a keyword can start only where
// the hash of three bytes is in s.triples, and there only the keywords
// that start with those bytes are compared.
func (s *scanner) keys(text []byte) (m kwset) {
	l := slices.Grow(s.lower[:0], len(text))[:len(text)]
	s.lower = l
	for j, c := range text {
		l[j] = lower(c)
	}
	if len(text) < 3 {
		return m
	}
	h := (uint(l[0])<<5 ^ uint(l[1])) & 0x7fff
	for j := 2; j < len(l); j++ {
		c := l[j]
		h = (h<<5 ^ uint(c)) & 0x7fff
		if s.triples[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		i := j - 2
		f, g, t := &s.first[l[i]], &s.second[l[i+1]], &s.third[c]
		for w := range kwWords {
			cand := f[w] & g[w] & t[w] &^ m[w]
			for cand != 0 {
				k := bits.TrailingZeros64(cand)
				cand &^= 1 << k
				if bytes.HasPrefix(l[i:], s.kw[w*64+k]) {
					m[w] |= 1 << k
					s.kwPos[w*64+k] = i
				}
			}
		}
	}
	return m
}

// having returns the union of of's sets over the keywords in keys: the
// signatures (sigOf) or vocabulary words (vocabOf) that a line with those
// keywords can match.
func (s *scanner) having(keys kwset, of *[64 * kwWords]uint64) (set uint64) {
	for w, word := range keys {
		for ; word != 0; word &= word - 1 {
			set |= of[w*64+bits.TrailingZeros64(word)]
		}
	}
	return set
}

// spans reports whether one of keys, where keys last found it, starts
// before the byte at and ends after it: a keyword that only the two lines
// joined there hold (one wholly on either side was seen on its own line).
func (s *scanner) spans(keys kwset, at int) bool {
	for w := range kwWords {
		for b := keys[w]; b != 0; b &= b - 1 {
			k := w*64 + bits.TrailingZeros64(b)
			if p := s.kwPos[k]; p < at && p+len(s.kw[k]) > at {
				return true
			}
		}
	}
	return false
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
// line end and colour codes, reads the message out of a JSON record
// (Docker's json-file driver, Loki and CloudWatch exports) and the prefix
// kubectl logs --prefix adds, and matches each segment on its own: a
// progress bar redraws itself with "\r", a JSON record or a traceback
// flattened onto one line holds several lines.
func (s *scanner) line(n int, raw []byte) {
	raw = bytes.TrimRight(raw, "\r\n")
	if bytes.IndexByte(raw, 0x1b) >= 0 {
		raw = stripANSI(raw)
	}
	s.msgLines = false
	if msg, ok := jsonMessage(raw, s.msg[:0]); ok {
		s.msg, s.msgLines = msg, true
		raw = msg
		if bytes.IndexByte(raw, 0x1b) >= 0 {
			raw = stripANSI(raw)
		}
	}
	raw = raw[kubectlPrefix(raw):]
	for seg := range bytes.SplitSeq(raw, []byte{'\r'}) {
		if s.msgLines && bytes.IndexByte(seg, '\n') >= 0 { // a JSON record's message of several lines
			for part := range bytes.SplitSeq(seg, []byte{'\n'}) {
				s.piece(n, part)
			}
			continue
		}
		s.piece(n, seg)
	}
}

// piece matches one piece of line n: the line itself, or a line of a
// traceback flattened onto it with literal "\n"s.
func (s *scanner) piece(n int, seg []byte) {
	if bytes.IndexByte(seg, '\\') >= 0 && bytes.Count(seg, []byte(`\n`)) >= 2 {
		for part := range bytes.SplitSeq(seg, []byte(`\n`)) {
			if len(bytes.TrimSpace(part)) > 0 {
				s.segment(n, part)
			}
		}
		return
	}
	if len(bytes.TrimSpace(seg)) > 0 {
		s.segment(n, seg)
	}
}

// segment matches one segment of line n, alone, joined with the previous
// line, and as part of a split exception name.
func (s *scanner) segment(n int, text []byte) {
	keys := s.keys(text)
	marked := false
	// One of gpurun's Events: a fact about /dev/shm (context), read only
	// by the words of its vocabulary.
	own := keys.meets(s.kwOwn) && ownEvent(s.lower)
	if own {
		s.mark(s.markIndex[MarkContext], n, text)
	}
	if !keys.empty() {
		if keys.meets(s.anyCond) {
			for i := range s.sigs {
				sig := &s.sigs[i]
				if keys.meets(s.afterMask[i]) && sig.After.Match(text) {
					s.lastAfter[i] = n
					if sig.AfterAround {
						s.mark(s.nearMark[i], n, text)
					}
				}
				if keys.meets(s.unlessMask[i]) && sig.Unless.Match(text) {
					s.lastUnless[i] = n
				}
			}
		}
		for vs := s.having(keys, &s.vocabOf); vs != 0; vs &= vs - 1 {
			i := bits.TrailingZeros64(vs)
			v := &s.vocab[i]
			if own && s.vocabEvent&(1<<i) == 0 ||
				s.vocabReq[i] >= 0 && !s.required(i, n) ||
				v.Pattern != nil && (s.marked(i, n) || !s.near(i, keys)) ||
				v.Check != nil && !v.Check(s.lower) {
				continue
			}
			for _, k := range s.vocabMarks[i] {
				s.mark(k, n, text)
				marked = marked || s.bothMark[k]
			}
			s.ecos |= s.vocabEco[i]
		}
	}
	if s.rtLine == n-1 || keys.meets(s.kwRestart) {
		s.restartsTable(n, text)
	}
	var hit, tried uint64
	if keys.meets(s.anySig) && !own {
		hit, tried = s.match([]LineRef{{N: n}}, text, -1, 0, keys)
	}

	// A line wrapped at a terminal's width: try the two lines joined when
	// a signature's keyword was seen without its match, or a keyword spans
	// the break.
	if s.prevN == n-1 && wrapped(s.prevText) {
		prev := s.prevText[max(0, len(s.prevText)-joinTail):]
		cur := text[:min(len(text), joinTail)]
		tail := prev[max(0, len(prev)-s.maxKw+1):]
		s.join = append(append(append(s.join[:0], tail...), ' '), cur[:min(len(cur), s.maxKw-1)]...)
		if (s.prevTried|tried)&^(s.prevHit|hit) != 0 || s.spans(s.keys(s.join), len(tail)) {
			cur = text[logPrefix(text):]
			cur = cur[:min(len(cur), joinTail)]
			s.join = append(append(append(s.join[:0], prev...), ' '), cur...)
			keys := s.keys(s.join)
			s.match([]LineRef{{N: n - 1}, {N: n}}, s.join, len(prev), s.prevHit|hit, keys)
		}
	}

	// An exception name a logger split into "module", ".", "Name" records.
	content := recordContent(text)
	if h0, h1 := s.hist[0], s.hist[1]; h1.n == n-1 && h0.n == n-2 && h1.content == "." &&
		isIdent(content, false) && isIdent(h0.content, true) {
		s.join = append(append(append(s.join[:0], h0.content...), '.'), content...)
		refs := []LineRef{{N: h0.n, Text: h0.text}, {N: h1.n, Text: h1.text}, {N: n, Text: clip(text, 0)}}
		s.match(refs, s.join, -1, 0, s.keys(s.join))
	}
	s.hist[0] = s.hist[1]
	s.hist[1] = histEntry{n: n}
	if string(content) == "." || isIdent(content, true) {
		s.hist[1].content, s.hist[1].text = string(content), clip(text, 0)
	}

	// Both signatures, once the vocabulary or a signature's Mark set one
	// of their marks on the line.
	if marked || s.bothDue {
		s.both(n, text)
		s.bothDue = false
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
func (s *scanner) match(refs []LineRef, text []byte, boundary int, skip uint64, keys kwset) (hit, tried uint64) {
	if keys.empty() {
		return 0, 0
	}
	type match struct {
		sig  int
		loc  []int
		pat  int
		wait bool // a candidate: Near, or After yet to come (AfterAround)
	}
	var matches []match
	first := refs[0].N
	for cs := s.having(keys, &s.sigOf); cs != 0; cs &= cs - 1 {
		i := bits.TrailingZeros64(cs)
		sig := &s.sigs[i]
		if len(sig.Patterns) == 0 {
			continue
		}
		tried |= 1 << i
		noAfter := sig.After != nil && s.lastAfter[i] < first-sig.AfterWithin
		if skip&(1<<i) != 0 || boundary >= 0 && sig.Generic || noAfter && !sig.AfterAround ||
			sig.Unless != nil && s.lastUnless[i] >= first-sig.UnlessWithin {
			continue
		}
		for p, re := range sig.Patterns {
			loc := re.FindSubmatchIndex(text)
			if loc == nil || boundary >= 0 && (loc[0] >= boundary || loc[1] <= boundary+1) {
				continue
			}
			matches = append(matches, match{i, loc, p, sig.Near > 0 || noAfter})
			break
		}
	}
	// A candidate is not a match yet: it may wait for its mark in vain.
	specific := false
	for _, m := range matches {
		specific = specific || !s.sigs[m.sig].Generic && !m.wait
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
		if m.wait {
			s.candidate(m.sig, got)
			continue
		}
		s.record(m.sig, got, sz)
		for _, k := range s.marksOf[m.sig] {
			if s.bothMark[k] { // a Both signature shows the line
				s.mark(k, got[len(got)-1].N, []byte(got[len(got)-1].Text))
				s.bothDue = true
			} else {
				s.mark(k, got[len(got)-1].N, nil)
			}
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

// candidate handles a match of a Near signature, or of an AfterAround
// one whose After has not matched yet: it counts at once when its mark
// came within its window before it, and waits for one otherwise.
func (s *scanner) candidate(sig int, refs []LineRef) {
	n, near, k := refs[0].N, s.window[sig], s.nearMark[sig]
	if s.lastMark[k] >= n-near {
		s.record(sig, s.withMark(refs, k), matchSizes{errno: -1})
		return
	}
	p := s.pending[sig]
	if len(p) == maxPending { // drop those no mark can reach any more
		p = slices.DeleteFunc(p, func(c candidate) bool { return c.refs[0].N < n-near })
		s.npending -= maxPending - len(p)
	}
	if len(p) < maxPending {
		p = append(p, candidate{refs: refs})
		s.npending++
	}
	s.pending[sig] = p
}

// mark records mark k at line n, whose text (nil: the mark's line is
// already a finding's) a finding that rests on the mark shows; the Near
// candidates waiting for it within Near lines before count now, the older
// ones never will.
func (s *scanner) mark(k, n int, text []byte) {
	if text != nil && s.markLine[k] != n {
		s.markLine[k] = n
		s.markText[k] = append(s.markText[k][:0], text...)
	}
	s.lastMark[k] = max(s.lastMark[k], n)
	if s.npending == 0 {
		return
	}
	for _, i := range s.waiters[k] {
		p := s.pending[i]
		if len(p) == 0 {
			continue
		}
		for _, c := range p {
			if c.refs[0].N >= n-s.window[i] {
				s.record(i, s.withMark(c.refs, k), matchSizes{errno: -1})
			}
		}
		s.npending -= len(p)
		s.pending[i] = p[:0]
	}
}

// withMark adds to refs the line of mark k, when the vocabulary set the
// mark on the line it was last seen on.
func (s *scanner) withMark(refs []LineRef, k int) []LineRef {
	if s.markLine[k] == s.lastMark[k] {
		return append(slices.Clip(refs), LineRef{N: s.markLine[k], Text: clip(s.markText[k], 0)})
	}
	return refs
}

// both records the Both signatures whose two marks were both seen within
// BothWithin lines, one of them on line n.
func (s *scanner) both(n int, text []byte) {
	for _, i := range s.bothSigs {
		b := s.bothMarks[i]
		sig := &s.sigs[i]
		a, c := s.lastMark[b[0]], s.lastMark[b[1]]
		if a != n && c != n || min(a, c) < n-sig.BothWithin ||
			sig.Unless != nil && s.lastUnless[i] >= min(a, c)-sig.UnlessWithin {
			continue
		}
		refs := []LineRef{{N: n, Text: clip(text, 0)}}
		if a != n {
			refs = s.withMark(refs, b[0])
		} else if c != n {
			refs = s.withMark(refs, b[1])
		}
		s.record(i, refs, matchSizes{errno: -1})
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
	s.ecos |= s.sigEco[sig]
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
	if first && s.onFinding != nil && !s.sigs[sig].Fallback {
		s.onFinding(s.finding(sig))
	}
}

// findings returns what was found, in table order, without the findings
// that a surer one found in the log makes redundant (YieldsTo, Fallback). A possible
// finding that another kind of evidence agrees with (a /dev/shm finding
// that rests on none of its own kinds) is raised to likely, and says so.
func (s *scanner) findings() []Finding {
	present := map[string]bool{}
	for i, f := range s.found {
		if f != nil {
			present[s.sigs[i].ID] = true
		}
	}
	others := false
	for i, f := range s.found {
		others = others || f != nil && !s.sigs[i].Fallback
	}
	var out []Finding
	for i, f := range s.found {
		if f == nil || slices.ContainsFunc(s.sigs[i].YieldsTo, func(id string) bool { return present[id] }) || s.sigs[i].Fallback && others {
			continue
		}
		out = append(out, s.finding(i))
	}
	for i := range out {
		f := &out[i]
		if f.Kind == KindOther || f.Confidence != Possible {
			continue
		}
		for _, g := range out {
			if g.Kind != KindOther && !slices.ContainsFunc(g.Evidence, func(e string) bool { return slices.Contains(f.Evidence, e) }) {
				f.Confidence = Likely
				f.Evidence = append(f.Evidence, "agrees with "+g.Signature)
			}
		}
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
	for _, e := range sig.Evidence {
		fd.Evidence = append(fd.Evidence, string(e))
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

// ecosystems names the ecosystems whose context the log showed, in the
// order of Ecosystems.
func (s *scanner) ecosystems() []string {
	var out []string
	for i, e := range Ecosystems() {
		if s.ecos&(1<<i) != 0 {
			out = append(out, e)
		}
	}
	return out
}

// sizeText says n bytes for people: "9.19MiB (9637888 bytes)".
func sizeText(n int64) string {
	return fmt.Sprintf("%s (%d bytes)", policy.FormatSize(n), n)
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
